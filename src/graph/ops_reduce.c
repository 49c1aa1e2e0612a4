/* SPDX-License-Identifier: MIT */
/*
 * Ops along axes: softmax, log_softmax and hardmax over one axis; the
 * reductions (sum, mean, max, min, prod, l1, l2, sum_square, log_sum,
 * log_sum_exp) over a set of axes; argmax and argmin (I64 indices);
 * cumsum; and topk (values and I64 indices). F32 (argmax and argmin read any number). Sums accumulate in
 * f32 in input order, so a result does not depend on where a graph is cut.
 */
#include <math.h>
#include <string.h>

#include "core/alloc_int.h"
#include "graph/dtype_int.h"
#include "graph/ops_int.h"

static int same_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                      char *why, size_t wl)
{
	if (mu__axis(mu__attr_int(n, "axis", -1), in[0].rank) < 0)
		return mu__fail(why, wl, "node %.100s: axis out of range for %.100s", n->name, n->in[0]);
	out[0] = in[0];
	return 0;
}

static double flops5(const mu__node_t *n, const mu__shape_t *in, const mu__shape_t *out)
{
	(void)n;
	(void)in;
	return 5.0 * (double)mu__shape_numel(&out[0]);
}

static int axis_check(const mu__node_t *n, char *why, size_t wl)
{
	return mu__want_int(n, "axis", 0, why, wl);
}

/* x as [outer, len, inner] around axis (default dflt) */
static void around(const mu__node_t *n, const mu_tensor_t *x, int64_t dflt, uint64_t *outer,
                   uint64_t *len, uint64_t *inner)
{
	int axis = mu__axis(mu__attr_int(n, "axis", dflt), x->rank);

	*outer = 1;
	*inner = 1;
	for (int i = 0; i < axis; i++)
		*outer *= x->dims[i];
	*len = x->dims[axis];
	for (uint32_t i = (uint32_t)axis + 1; i < x->rank; i++)
		*inner *= x->dims[i];
}

/* ---- softmax, log_softmax, hardmax over one axis ---- */

typedef enum { S_SOFTMAX, S_LOG, S_HARD } smax_t;

static int smax_run(smax_t kind, const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	uint64_t outer, len, inner;

	around(n, in[0], -1, &outer, &len, &inner);
	for (uint64_t o = 0; o < outer; o++)
		for (uint64_t j = 0; j < inner; j++) {
			const float *p = in[0]->data + o * len * inner + j;
			float *q = out[0]->data + o * len * inner + j, mx = -INFINITY, sum = 0;
			uint64_t at = 0;

			for (uint64_t i = 0; i < len; i++)
				if (p[i * inner] > mx || (i == 0 && isnan(p[0]))) {
					mx = p[i * inner];
					at = i;
				}
			for (uint64_t i = 0; i < len; i++) {
				if (kind == S_HARD) {
					q[i * inner] = i == at ? 1.0f : 0.0f;
					continue;
				}
				q[i * inner] = expf(p[i * inner] - mx);
				sum += q[i * inner];
			}
			for (uint64_t i = 0; kind != S_HARD && i < len; i++)
				q[i * inner] = kind == S_LOG ? p[i * inner] - mx - logf(sum) : q[i * inner] / sum;
		}
	return 0;
}

#define SMAX(NAME, KIND)                                                       \
	static int run_##NAME(const mu__node_t *n, mu_tensor_t *const *in,     \
	                      mu_tensor_t **out)                               \
	{                                                                      \
		return smax_run(KIND, n, in, out);                             \
	}                                                                      \
	const mu__op_t mu__op_##NAME = {#NAME, 1, 1, 1, axis_check, same_shape, \
	                                run_##NAME, flops5, 0, 0, NULL}

SMAX(softmax, S_SOFTMAX);
SMAX(log_softmax, S_LOG);
SMAX(hardmax, S_HARD);

/* ---- reductions ---- */

typedef enum {
	R_MEAN, R_SUM, R_MAX, R_MIN, R_PROD, R_L1, R_L2, R_SUMSQ, R_LOGSUM, R_LOGSUMEXP
} rop_t;

/* Which axes are reduced (all when "axes" is absent). */
static int reduced(const mu__node_t *n, uint32_t rank, int *mask)
{
	int64_t axes[MU_TENSOR_MAX_RANK];
	int na = mu__attr_ints(n, "axes", axes, MU_TENSOR_MAX_RANK);

	for (uint32_t i = 0; i < rank; i++)
		mask[i] = na < 0;
	for (int i = 0; i < na; i++) {
		int a = mu__axis(axes[i], rank);

		if (a < 0)
			return MU_EPROTO;
		mask[a] = 1;
	}
	return na == -2 ? MU_EPROTO : 0;
}

static int reduce_check(const mu__node_t *n, char *why, size_t wl)
{
	int rc = mu__want_int(n, "axes", 1, why, wl);

	return rc == 0 ? mu__want_int(n, "keepdims", 0, why, wl) : rc;
}

static int reduce_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                        char *why, size_t wl)
{
	int mask[MU_TENSOR_MAX_RANK], keep = mu__attr_int(n, "keepdims", 1) != 0;

	if (reduced(n, in[0].rank, mask) != 0)
		return mu__fail(why, wl, "node %.100s: axes out of range for %.100s", n->name, n->in[0]);
	out[0].rank = 0;
	for (uint32_t i = 0; i < in[0].rank; i++)
		if (!mask[i])
			out[0].dims[out[0].rank++] = in[0].dims[i];
		else if (keep)
			out[0].dims[out[0].rank++] = 1;
	return 0;
}

static float r_init(rop_t op)
{
	return op == R_MAX ? -INFINITY : op == R_MIN ? INFINITY : op == R_PROD ? 1.0f : 0.0f;
}

static float r_step(rop_t op, float acc, float v)
{
	switch (op) {
	case R_MAX: return v > acc ? v : acc; /* NaN is skipped */
	case R_MIN: return v < acc ? v : acc;
	case R_PROD: return acc * v;
	case R_L1: return acc + fabsf(v);
	case R_L2: case R_SUMSQ: return acc + v * v;
	case R_LOGSUMEXP: return acc + expf(v);
	default: return acc + v;
	}
}

static float r_final(rop_t op, float acc, uint64_t count)
{
	switch (op) {
	case R_MEAN: return acc / (float)count;
	case R_L2: return sqrtf(acc);
	case R_LOGSUM: case R_LOGSUMEXP: return logf(acc);
	default: return acc;
	}
}

static int reduce_run(rop_t op, const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	const mu_tensor_t *x = in[0];
	int mask[MU_TENSOR_MAX_RANK];
	uint64_t ost[MU_TENSOR_MAX_RANK], idx[MU_TENSOR_MAX_RANK] = {0}, stride = 1, o = 0;
	uint64_t count = out[0]->numel ? x->numel / out[0]->numel : 0;

	if (reduced(n, x->rank, mask) != 0)
		return MU_EPROTO;
	/* output strides in terms of the input's dims (0 where reduced) */
	for (int i = (int)x->rank - 1; i >= 0; i--) {
		ost[i] = mask[i] ? 0 : stride;
		if (!mask[i])
			stride *= x->dims[i];
	}
	for (uint64_t i = 0; i < out[0]->numel; i++)
		out[0]->data[i] = r_init(op);
	for (uint64_t i = 0; i < x->numel; i++) { /* input order: deterministic */
		out[0]->data[o] = r_step(op, out[0]->data[o], x->data[i]);
		for (int d = (int)x->rank - 1; d >= 0; d--) {
			idx[d]++;
			o += ost[d];
			if (idx[d] < x->dims[d])
				break;
			o -= ost[d] * idx[d];
			idx[d] = 0;
		}
	}
	for (uint64_t i = 0; i < out[0]->numel; i++)
		out[0]->data[i] = r_final(op, out[0]->data[i], count);
	return 0;
}

#define REDUCE(NAME, OP)                                                       \
	static int run_##NAME(const mu__node_t *n, mu_tensor_t *const *in,     \
	                      mu_tensor_t **out)                               \
	{                                                                      \
		return reduce_run(OP, n, in, out);                             \
	}                                                                      \
	const mu__op_t mu__op_##NAME = {#NAME, 1, 1, 1, reduce_check,          \
	                                reduce_shape, run_##NAME, mu__flops_numel, 0, 0, NULL}

REDUCE(reduce_mean, R_MEAN);
REDUCE(reduce_sum, R_SUM);
REDUCE(reduce_max, R_MAX);
REDUCE(reduce_min, R_MIN);
REDUCE(reduce_prod, R_PROD);
REDUCE(reduce_l1, R_L1);
REDUCE(reduce_l2, R_L2);
REDUCE(reduce_sum_square, R_SUMSQ);
REDUCE(reduce_log_sum, R_LOGSUM);
REDUCE(reduce_log_sum_exp, R_LOGSUMEXP);

/* ---- argmax, argmin: I64 positions along axis (0) ---- */

static int arg_check(const mu__node_t *n, char *why, size_t wl)
{
	int rc = mu__want_int(n, "axis", 0, why, wl);

	if (rc == 0)
		rc = mu__want_int(n, "keepdims", 0, why, wl);
	return rc == 0 ? mu__want_int(n, "select_last_index", 0, why, wl) : rc;
}

static int arg_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                     size_t wl)
{
	int axis = mu__axis(mu__attr_int(n, "axis", 0), in[0].rank);
	int keep = mu__attr_int(n, "keepdims", 1) != 0;

	if (axis < 0 || in[0].dims[axis] == 0)
		return mu__fail(why, wl, "node %.100s: axis out of range (or empty) for %.100s", n->name,
		                n->in[0]);
	if (in[0].dtype == MU_DTYPE_BOOL)
		return mu__fail(why, wl, "node %.100s: %.100s is BOOL", n->name, n->in[0]);
	out[0].rank = 0;
	for (uint32_t i = 0; i < in[0].rank; i++)
		if ((int)i != axis)
			out[0].dims[out[0].rank++] = in[0].dims[i];
		else if (keep)
			out[0].dims[out[0].rank++] = 1;
	out[0].dtype = MU_DTYPE_I64;
	return 0;
}

static int arg_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	int mx = strcmp(n->op->name, "argmax") == 0, last = mu__attr_int(n, "select_last_index", 0) != 0;
	uint64_t outer, len, inner;
	int64_t *y = out[0]->raw;

	around(n, in[0], 0, &outer, &len, &inner);
	for (uint64_t o = 0; o < outer; o++)
		for (uint64_t j = 0; j < inner; j++) {
			uint64_t base = o * len * inner + j, at = 0;
			double best = mu__get_f(in[0]->dtype, in[0]->raw, base);

			for (uint64_t i = 1; i < len; i++) {
				double v = mu__get_f(in[0]->dtype, in[0]->raw, base + i * inner);

				if (mx ? (v > best || (last && v == best)) : (v < best || (last && v == best))) {
					best = v;
					at = i;
				}
			}
			y[o * inner + j] = (int64_t)at;
		}
	return 0;
}

const mu__op_t mu__op_argmax = {"argmax", 1, 1, 1, arg_check, arg_shape, arg_run, mu__flops_numel, 1, 0, NULL};
const mu__op_t mu__op_argmin = {"argmin", 1, 1, 1, arg_check, arg_shape, arg_run, mu__flops_numel, 1, 0, NULL};

/* ---- cumsum along axis; exclusive and reverse as ONNX ---- */

static int cumsum_check(const mu__node_t *n, char *why, size_t wl)
{
	int rc = axis_check(n, why, wl);

	if (rc == 0)
		rc = mu__want_int(n, "exclusive", 0, why, wl);
	return rc == 0 ? mu__want_int(n, "reverse", 0, why, wl) : rc;
}

static int cumsum_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                        size_t wl)
{
	if (mu__axis(mu__attr_int(n, "axis", 0), in[0].rank) < 0)
		return mu__fail(why, wl, "node %.100s: axis out of range for %.100s", n->name, n->in[0]);
	if (in[0].dtype == MU_DTYPE_BOOL)
		return mu__fail(why, wl, "node %.100s: %.100s is BOOL", n->name, n->in[0]);
	out[0] = in[0];
	return 0;
}

/* a running sum in the dtype's arithmetic: f32, double, or wrapping
 * 64-bit integers */
typedef struct {
	mu_dtype_t dt;
	float f32;
	double f64;
	uint64_t i64;
} acc_t;

static void acc_add(acc_t *a, const mu_tensor_t *x, uint64_t e)
{
	if (a->dt == MU_DTYPE_F32)
		a->f32 += x->data[e];
	else if (mu__dt_is_float(a->dt))
		a->f64 += mu__get_f(a->dt, x->raw, e);
	else
		a->i64 += (uint64_t)mu__get_i(a->dt, x->raw, e);
}

static void acc_put(const acc_t *a, mu_tensor_t *y, uint64_t e)
{
	if (a->dt == MU_DTYPE_F32)
		y->data[e] = a->f32;
	else if (mu__dt_is_float(a->dt))
		mu__put_f(a->dt, y->raw, e, a->f64);
	else
		mu__put_i(a->dt, y->raw, e, (int64_t)a->i64, 0);
}

static int cumsum_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	int excl = mu__attr_int(n, "exclusive", 0) != 0, rev = mu__attr_int(n, "reverse", 0) != 0;
	uint64_t outer, len, inner;

	around(n, in[0], 0, &outer, &len, &inner);
	for (uint64_t o = 0; o < outer; o++)
		for (uint64_t j = 0; j < inner; j++) {
			acc_t a = {in[0]->dtype, 0, 0, 0};

			for (uint64_t k = 0; k < len; k++) {
				uint64_t i = rev ? len - 1 - k : k, e = (o * len + i) * inner + j;

				if (excl)
					acc_put(&a, out[0], e); /* the sum before this element */
				acc_add(&a, in[0], e);
				if (!excl)
					acc_put(&a, out[0], e);
			}
		}
	return 0;
}

const mu__op_t mu__op_cumsum = {"cumsum", 1, 1, 1, cumsum_check, cumsum_shape, cumsum_run,
                                mu__flops_numel, 1, 0, NULL};

/* ---- topk: the k largest (or smallest) along axis, values and I64
 * indices, sorted (ties: the lower index first; NaN counts as the
 * largest) ---- */

static int topk_check(const mu__node_t *n, char *why, size_t wl)
{
	int rc = mu__want_int(n, "k", 0, why, wl);

	if (rc == 0)
		rc = mu__want_int(n, "axis", 0, why, wl);
	if (rc == 0)
		rc = mu__want_int(n, "largest", 0, why, wl);
	if (rc == 0 && mu__attr_int(n, "k", -1) < 0)
		return mu__fail(why, wl, "node %.100s: topk needs \"k\" >= 0%.0s", n->name, "");
	return rc;
}

static int topk_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                      size_t wl)
{
	int axis = mu__axis(mu__attr_int(n, "axis", -1), in[0].rank);
	int64_t k = mu__attr_int(n, "k", 0);

	if (axis < 0 || (uint64_t)k > in[0].dims[axis] || in[0].dtype == MU_DTYPE_BOOL)
		return mu__fail(why, wl, "node %.100s: axis out of range, or k over its dim, for %.100s", n->name,
		                n->in[0]);
	out[0] = in[0];
	out[0].dims[axis] = (uint64_t)k;
	out[1] = out[0];
	out[1].dtype = MU_DTYPE_I64;
	return 0;
}

/* Does (va, ia) come before (vb, ib) in the result? */
static int before(double va, uint64_t ia, double vb, uint64_t ib, int largest)
{
	if (va != vb && !(isnan(va) && isnan(vb))) {
		if (isnan(va) || isnan(vb))
			return isnan(va) == largest; /* NaN is the largest */
		return largest ? va > vb : va < vb;
	}
	return ia < ib;
}

static int topk_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	const mu_tensor_t *x = in[0];
	int largest = mu__attr_int(n, "largest", 1) != 0;
	uint64_t outer, len, inner, k = out[0]->dims[mu__axis(mu__attr_int(n, "axis", -1), x->rank)];
	uint64_t *order;
	size_t es = mu_dtype_size((int)x->dtype);

	around(n, x, -1, &outer, &len, &inner);
	if ((order = mu__calloc((size_t)len + 1, sizeof(*order))) == NULL)
		return MU_ENOMEM;
	for (uint64_t o = 0; o < outer; o++)
		for (uint64_t j = 0; j < inner; j++) {
			uint64_t base = o * len * inner + j;

			/* the first k of a selection by insertion: k is small where
			 * graphs use it, and the order is exact and deterministic */
			for (uint64_t i = 0, have = 0; i < len; i++) {
				double v = mu__get_f(x->dtype, x->raw, base + i * inner);
				uint64_t p = have < k ? have : k;

				while (p > 0 && before(v, i, mu__get_f(x->dtype, x->raw, base + order[p - 1] * inner),
				                       order[p - 1], largest)) {
					if (p < k)
						order[p] = order[p - 1];
					p--;
				}
				if (p < k) {
					order[p] = i;
					have += have < k;
				}
			}
			for (uint64_t r = 0; r < k; r++) {
				uint64_t dst = o * k * inner + r * inner + j;

				mu__ecopy(out[0]->raw, dst, x->raw, base + order[r] * inner, es);
				((int64_t *)out[1]->raw)[dst] = (int64_t)order[r];
			}
		}
	mu__free(order);
	return 0;
}

const mu__op_t mu__op_topk = {"topk", 1, 1, 2, topk_check, topk_shape, topk_run, mu__flops_numel, 1, 0, NULL};
