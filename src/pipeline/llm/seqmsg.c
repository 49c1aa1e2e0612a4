/* SPDX-License-Identifier: MIT */
/*
 * SEQ_FORWARD's and SEQ_BATCH's id tensors, both ways
 * (pipeline/llm/seqmsg_int.h): I32 out, I32 or the old exact-F32 form in,
 * and the dtype checked before a single element is read, so a tensor
 * of another dtype (whose buffer has another size) is never read as F32.
 */
#include <stdio.h>

#include "pipeline/llm/seqmsg_int.h"

int mu__seq_tokens_new(const int32_t *tok, int32_t n, int f32, mu_tensor_t **out, char *why,
                       size_t wl)
{
	uint64_t dims[1] = {(uint64_t)n};
	mu_tensor_t *t = NULL;
	int rc;

	*out = NULL;
	for (int32_t i = 0; f32 && i < n; i++)
		if (tok[i] < 0 || tok[i] >= MU__SEQ_F32_IDS) {
			snprintf(why, wl, "token %d does not fit the F32 ids of a stage of before I32 ids",
			         (int)tok[i]);
			return MU_ETOOBIG;
		}
	rc = mu_tensor_new_typed("tokens", f32 ? MU_DTYPE_F32 : MU_DTYPE_I32, 1, dims, &t);
	if (rc != 0)
		return rc;
	for (int32_t i = 0; i < n; i++) {
		if (f32)
			t->data[i] = (float)tok[i];
		else
			((int32_t *)t->raw)[i] = tok[i];
	}
	*out = t;
	return 0;
}

int mu__seq_items_new(const mu__dec_item_t *it, int k, int f32, mu_tensor_t **out, char *why,
                      size_t wl)
{
	uint64_t dims[2] = {(uint64_t)k, 4};
	uint64_t lim = f32 ? MU__SEQ_F32_IDS : (uint64_t)INT32_MAX + 1;
	mu_tensor_t *t = NULL;
	int rc;

	*out = NULL;
	for (int j = 0; j < k; j++)
		if (it[j].id >= lim || it[j].pos < 0 || (uint64_t)it[j].pos >= lim || it[j].n < 0 ||
		    (uint64_t)it[j].n >= lim) {
			snprintf(why, wl, "item %d (sequence %llu, position %d, %d positions) does not fit "
			         "%s", j, (unsigned long long)it[j].id, (int)it[j].pos, (int)it[j].n,
			         f32 ? "the F32 items of a stage of before I32 ids" : "I32");
			return MU_ETOOBIG;
		}
	rc = mu_tensor_new_typed("items", f32 ? MU_DTYPE_F32 : MU_DTYPE_I32, 2, dims, &t);
	if (rc != 0)
		return rc;
	for (int j = 0; j < k; j++) {
		int64_t v[4] = {(int64_t)it[j].id, it[j].pos, it[j].n, it[j].all_logits != 0};

		for (int c = 0; c < 4; c++) {
			if (f32)
				t->data[4 * j + c] = (float)v[c];
			else
				((int32_t *)t->raw)[4 * j + c] = (int32_t)v[c];
		}
	}
	*out = t;
	return 0;
}

/* Is t's dtype one the ids come in? Else why. */
static int ids_dtype(const mu_tensor_t *t, const char *what, char *why, size_t wl)
{
	if (t->dtype == MU_DTYPE_I32 || t->dtype == MU_DTYPE_F32)
		return 0;
	snprintf(why, wl, "\"%s\" is %s: ids are I32 (or F32, from peers of before I32 ids)", what,
	         mu_dtype_name((int)t->dtype));
	return -1;
}

int32_t mu__seq_tokens_read(const mu_tensor_t *t, int32_t max, int32_t vocab, int32_t *tok,
                            char *why, size_t wl)
{
	uint64_t i;

	if (t->rank != 1 || t->dims[0] < 1 || t->dims[0] > (uint64_t)max || t->numel != t->dims[0]) {
		snprintf(why, wl, "\"tokens\" is [n] with n from 1 to %d", (int)max);
		return -1;
	}
	if (ids_dtype(t, "tokens", why, wl) != 0)
		return -1;
	for (i = 0; i < t->dims[0]; i++) {
		if (t->dtype == MU_DTYPE_I32) {
			int32_t v = ((const int32_t *)t->raw)[i];

			if (v < 0 || v >= vocab) {
				snprintf(why, wl, "token %llu is %d, not an id of the vocabulary of %d",
				         (unsigned long long)i, (int)v, (int)vocab);
				return -1;
			}
			tok[i] = v;
		} else {
			float v = t->data[i];

			if (!(v >= 0 && v < (float)vocab) || v != (float)(int32_t)v) {
				snprintf(why, wl, "token %llu is %g, not an id of the vocabulary of %d",
				         (unsigned long long)i, (double)v, (int)vocab);
				return -1;
			}
			tok[i] = (int32_t)v;
		}
	}
	return (int32_t)t->dims[0];
}

/* Element i of an I32 or F32 items tensor, checked: 0, or -1 with why. */
static int item_value(const mu_tensor_t *t, uint64_t i, int64_t *v, char *why, size_t wl)
{
	if (t->dtype == MU_DTYPE_I32) {
		*v = ((const int32_t *)t->raw)[i];
		if (*v >= 0 && (i % 4 != 3 || *v <= 1))
			return 0;
		snprintf(why, wl, "item %llu: %lld is not %s", (unsigned long long)(i / 4),
		         (long long)*v, i % 4 == 3 ? "0 or 1 (all_logits)" : "a non-negative integer");
		return -1;
	}
	{
		float f = t->data[i];

		if (f >= 0 && f < (float)MU__SEQ_F32_IDS && f == (float)(int32_t)f) {
			*v = (int64_t)f;
			return 0;
		}
		snprintf(why, wl, "item %llu: %g is not an integer from 0 to 2^24",
		         (unsigned long long)(i / 4), (double)f);
		return -1;
	}
}

int mu__seq_items_read(const mu_tensor_t *t, int max, mu__dec_item_t *it, char *why, size_t wl)
{
	uint64_t k, i;

	if (t->rank != 2 || t->dims[1] != 4 || t->dims[0] < 1 || t->dims[0] > (uint64_t)max ||
	    t->numel != t->dims[0] * 4) {
		snprintf(why, wl, "SEQ_BATCH carries \"items\" [k, 4] with k from 1 to %d", max);
		return -1;
	}
	if (ids_dtype(t, "items", why, wl) != 0)
		return -1;
	k = t->dims[0];
	for (i = 0; i < k; i++) {
		int64_t v[4];

		for (int c = 0; c < 4; c++)
			if (item_value(t, 4 * i + (uint64_t)c, &v[c], why, wl) != 0)
				return -1;
		/* an I32's values all fit: id, pos and n are below 2^31 */
		it[i] = (mu__dec_item_t){(uint64_t)v[0], (int32_t)v[1], (int32_t)v[2], v[3] != 0};
	}
	return (int)k;
}
