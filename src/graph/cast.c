/* SPDX-License-Identifier: MIT */
/*
 * mu_tensor_cast (include/muster/model.h): a tensor converted to another
 * dtype by the graph's cast rules. The conversion itself is dtype.c's
 * mu__convert, the one the `cast` op runs, so a program that casts with
 * this call gets the bits a graph's cast gives.
 */
#include "muster/model.h"
#include "graph/dtype_int.h"

int mu_tensor_cast(const mu_tensor_t *t, mu_dtype_t to, mu_tensor_t **out)
{
	int rc;

	*out = NULL;
	if (t == NULL || mu_dtype_size((int)to) == 0)
		return MU_EARG;
	rc = mu_tensor_new_typed(t->name, to, t->rank, t->dims, out);
	if (rc == 0 && t->numel > 0)
		mu__convert(t->dtype, t->raw, to, (*out)->raw, t->numel);
	return rc;
}
