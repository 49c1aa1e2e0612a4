/* SPDX-License-Identifier: MIT */
/*
 * What the op and executor tests share: tensors from shape strings, filled
 * with reproducible values; running one op as the executor would (check,
 * shape, allocate, run); numpy-style broadcast offsets for references; and
 * comparing a tensor with reference values computed in double.
 */
#ifndef MU_TEST_OPS_REF_H
#define MU_TEST_OPS_REF_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "mu_test.h"

#include <cjson/cJSON.h>

#include "muster/tensor.h"
#include "graph/dtype_int.h"
#include "graph/graph_int.h"

static uint64_t ref_rng = 88172645463325252ull;

/* Values in [-2, 2) on a 1/256 grid: reproducible, and exact in f32. */
static inline float ref_rand(void)
{
	ref_rng ^= ref_rng << 13;
	ref_rng ^= ref_rng >> 7;
	ref_rng ^= ref_rng << 17;
	return (float)((int)(ref_rng % 1024) - 512) / 256.0f;
}

/* "[2,3,4]" (or "[]") to a shape. */
static inline uint32_t ref_parse_shape(const char *s, uint64_t *dims)
{
	uint32_t r = 0;
	char *end;

	assert_true(*s == '[');
	s++;
	while (*s != ']') {
		dims[r++] = strtoull(s, &end, 10);
		s = *end == ',' ? end + 1 : end;
	}
	return r;
}

/* A tensor of the given shape, filled with ref_rand(). */
static inline mu_tensor_t *ref_tensor(const char *name, const char *shape)
{
	uint64_t dims[MU_TENSOR_MAX_RANK];
	uint32_t r = ref_parse_shape(shape, dims);
	mu_tensor_t *t;

	assert_int_equal(mu_tensor_new(name, r, dims, &t), 0);
	for (uint64_t i = 0; i < t->numel; i++)
		t->data[i] = ref_rand();
	return t;
}

/* The same with given values. */
static inline mu_tensor_t *ref_values(const char *name, const char *shape, const float *v)
{
	mu_tensor_t *t = ref_tensor(name, shape);

	memcpy(t->data, v, t->numel * 4);
	return t;
}

/* A tensor of dtype dt and the given shape, its elements v[i] written
 * with the dtype's own conversion (mu__put_f); v NULL: zeros. */
static inline mu_tensor_t *ref_typed(const char *name, mu_dtype_t dt, const char *shape,
                                     const double *v)
{
	uint64_t dims[MU_TENSOR_MAX_RANK];
	uint32_t r = ref_parse_shape(shape, dims);
	mu_tensor_t *t;

	assert_int_equal(mu_tensor_new_typed(name, dt, r, dims, &t), 0);
	for (uint64_t i = 0; v != NULL && i < t->numel; i++)
		mu__put_f(dt, t->raw, i, v[i]);
	return t;
}

/* The same from integers (exact for 64-bit values). */
static inline mu_tensor_t *ref_ints(const char *name, mu_dtype_t dt, const char *shape,
                                    const int64_t *v)
{
	mu_tensor_t *t = ref_typed(name, dt, shape, NULL);

	for (uint64_t i = 0; i < t->numel; i++)
		mu__put_i(dt, t->raw, i, v[i], 0);
	return t;
}

/* Every element of t equals want[i] (read as a double / as integer bits). */
static inline void ref_f_are(const mu_tensor_t *t, const double *want, uint64_t n)
{
	assert_int_equal(t->numel, n);
	for (uint64_t i = 0; i < n; i++) {
		double g = mu__get_f(t->dtype, t->raw, i);

		if (!(isnan(want[i]) ? isnan(g) : g == want[i]))
			fail_msg("element %llu: got %.17g, want %.17g", (unsigned long long)i, g, want[i]);
	}
}

static inline void ref_i_are(const mu_tensor_t *t, const int64_t *want, uint64_t n)
{
	assert_int_equal(t->numel, n);
	for (uint64_t i = 0; i < n; i++)
		if (mu__get_i(t->dtype, t->raw, i) != want[i])
			fail_msg("element %llu: got %lld, want %lld", (unsigned long long)i,
			         (long long)mu__get_i(t->dtype, t->raw, i), (long long)want[i]);
}

static inline void ref_shape_is(const mu_tensor_t *t, const char *shape)
{
	char s[128];
	size_t n = 0;

	n += (size_t)snprintf(s + n, sizeof(s) - n, "[");
	for (uint32_t i = 0; i < t->rank; i++)
		n += (size_t)snprintf(s + n, sizeof(s) - n, "%s%llu", i ? "," : "",
		                      (unsigned long long)t->dims[i]);
	snprintf(s + n, sizeof(s) - n, "]");
	assert_string_equal(s, shape);
}

/*
 * Run op `op` on in[0..nin) with attrs (JSON text, NULL for none) as the
 * executor does: check, shape, allocate, run. 0 with *out, or the error
 * (why says which rule) with *out NULL.
 */
static inline int ref_run(const char *op, const char *attrs, mu_tensor_t *const *in, int nin,
                   mu_tensor_t **out, char *why, size_t wl)
{
	static char nname[] = "node7", oname[] = "y";
	static char inames[MU_NODE_MAX_IO][16];
	char *ins[MU_NODE_MAX_IO], *outs[1] = {oname};
	mu__shape_t si[MU_NODE_MAX_IO], so[1];
	mu__node_t n;
	int rc = 0;

	memset(&n, 0, sizeof(n));
	n.name = nname;
	n.op = mu__op_find(op);
	assert_non_null(n.op);
	for (int i = 0; i < nin; i++) {
		snprintf(inames[i], sizeof(inames[i]), "in%d", i);
		ins[i] = inames[i];
	}
	n.in = ins;
	n.nin = nin;
	n.out = outs;
	n.nout = 1;
	n.attrs = cJSON_Parse(attrs != NULL ? attrs : "{}");
	assert_non_null(n.attrs);
	*out = NULL;
	if (why != NULL && wl > 0)
		why[0] = '\0';
	assert_true(nin >= n.op->min_in && nin <= n.op->max_in);
	if (n.op->check != NULL)
		rc = n.op->check(&n, why, wl);
	for (int i = 0; rc == 0 && i < nin; i++) {
		si[i].rank = in[i]->rank;
		si[i].dtype = in[i]->dtype;
		memcpy(si[i].dims, in[i]->dims, sizeof(si[i].dims));
	}
	if (rc == 0)
		rc = mu__op_shape(&n, si, so, why, wl);
	if (rc == 0)
		rc = mu_tensor_new_typed("y", so[0].dtype, so[0].rank, so[0].dims, out);
	if (rc == 0 && (rc = n.op->run(&n, in, out)) != 0) {
		mu_tensor_free(*out);
		*out = NULL;
	}
	cJSON_Delete(n.attrs);
	return rc;
}

/* Coordinates of flat index i in dims. */
static inline void ref_coords(const uint64_t *dims, uint32_t rank, uint64_t i, uint64_t *c)
{
	for (int k = (int)rank - 1; k >= 0; k--) {
		c[k] = dims[k] ? i % dims[k] : 0;
		i = dims[k] ? i / dims[k] : 0;
	}
}

/* Flat offset in a tensor of tdims (numpy-broadcast to an output of rank
 * orank) of the output coordinates c. */
static inline uint64_t ref_boff(const uint64_t *tdims, uint32_t trank, uint32_t orank, const uint64_t *c)
{
	uint64_t off = 0, st = 1;

	for (int k = (int)trank - 1; k >= 0; k--) {
		uint64_t ck = tdims[k] == 1 ? 0 : c[k + (int)(orank - trank)];

		off += ck * st;
		st *= tdims[k];
	}
	return off;
}

/* Every element close to the reference: |d| <= atol + rtol * |ref|; NaN
 * where the reference is NaN, the same infinity where it is infinite. */
static inline void ref_close(const mu_tensor_t *t, const double *ref, double atol, double rtol)
{
	for (uint64_t i = 0; i < t->numel; i++) {
		double g = t->data[i], r = ref[i];

		if (isnan(r) ? isnan(g) : isinf(r) ? g == r : fabs(g - r) <= atol + rtol * fabs(r))
			continue;
		fail_msg("element %llu: got %.9g, want %.9g", (unsigned long long)i, g, r);
	}
}

#endif
