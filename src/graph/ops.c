/* SPDX-License-Identifier: MIT */
/*
 * The op table and what ops share: attribute access, shapes, dtypes,
 * broadcasting. The ops themselves are in ops_math.c (binary elementwise,
 * comparisons, where), ops_unary.c (activations, math functions, cast),
 * ops_nn.c (matmul, gemm, norms), ops_reduce.c (softmax, reductions,
 * arg max/min, cumsum), ops_shape.c (reshape, flatten, transpose, concat,
 * slice, expand, tile), ops_index.c (embedding, gather, trilu, pad),
 * ops_scatter.c (scatters, gather_nd, reverse_sequence),
 * ops_conv.c (conv, conv_transpose), ops_pool.c (the pools) and
 * ops_resize.c (resize).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "graph/graph_int.h"
#include "graph/ops_int.h"

static const mu__op_t *const table[] = {
	/* ops_math.c */
	&mu__op_add, &mu__op_sub, &mu__op_mul, &mu__op_div, &mu__op_pow, &mu__op_mod,
	&mu__op_min, &mu__op_max, &mu__op_prelu, &mu__op_equal, &mu__op_less,
	&mu__op_greater, &mu__op_less_equal, &mu__op_greater_equal, &mu__op_and,
	&mu__op_or, &mu__op_xor, &mu__op_shift_left, &mu__op_shift_right, &mu__op_where,
	/* ops_unary.c */
	&mu__op_relu, &mu__op_sigmoid, &mu__op_tanh, &mu__op_sqrt, &mu__op_exp,
	&mu__op_neg, &mu__op_erf, &mu__op_gelu, &mu__op_silu, &mu__op_log,
	&mu__op_reciprocal, &mu__op_floor, &mu__op_ceil, &mu__op_round, &mu__op_sin,
	&mu__op_cos, &mu__op_tan, &mu__op_asin, &mu__op_acos, &mu__op_atan,
	&mu__op_sinh, &mu__op_cosh, &mu__op_asinh, &mu__op_acosh, &mu__op_atanh,
	&mu__op_softplus, &mu__op_softsign, &mu__op_elu, &mu__op_selu,
	&mu__op_leaky_relu, &mu__op_hard_sigmoid, &mu__op_hard_swish, &mu__op_celu,
	&mu__op_thresholded_relu, &mu__op_shrink, &mu__op_abs, &mu__op_sign,
	&mu__op_clip, &mu__op_not, &mu__op_isnan, &mu__op_isinf, &mu__op_cast,
	/* ops_nn.c */
	&mu__op_matmul, &mu__op_gemm, &mu__op_layernorm, &mu__op_rmsnorm,
	&mu__op_batchnorm, &mu__op_instance_norm, &mu__op_lrn, &mu__op_det,
	/* ops_reduce.c */
	&mu__op_softmax, &mu__op_log_softmax, &mu__op_hardmax, &mu__op_reduce_mean,
	&mu__op_reduce_sum, &mu__op_reduce_max, &mu__op_reduce_min, &mu__op_reduce_prod,
	&mu__op_reduce_l1, &mu__op_reduce_l2, &mu__op_reduce_sum_square,
	&mu__op_reduce_log_sum, &mu__op_reduce_log_sum_exp, &mu__op_argmax,
	&mu__op_argmin, &mu__op_cumsum, &mu__op_topk,
	/* ops_shape.c */
	&mu__op_reshape, &mu__op_flatten, &mu__op_transpose, &mu__op_concat,
	&mu__op_slice, &mu__op_expand, &mu__op_tile,
	/* ops_index.c */
	&mu__op_embedding, &mu__op_gather, &mu__op_gather_elements, &mu__op_trilu,
	&mu__op_pad,
	/* ops_scatter.c */
	&mu__op_scatter_elements, &mu__op_gather_nd, &mu__op_scatter_nd, &mu__op_reverse_sequence,
	/* ops_conv.c */
	&mu__op_conv, &mu__op_conv_transpose, &mu__op_maxpool, &mu__op_avgpool, &mu__op_resize,
};

const mu__op_t *mu__op_find(const char *name)
{
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (strcmp(table[i]->name, name) == 0)
			return table[i];
	return NULL;
}

/* A JSON number as int64: truncated, saturating at the ends (casting an
 * out-of-range double, 1e300 or inf, is undefined behaviour). */
static int64_t to_i64(double d)
{
	if (isnan(d))
		return 0;
	if (d <= -9223372036854775808.0)
		return INT64_MIN;
	if (d >= 9223372036854775808.0)
		return INT64_MAX;
	return (int64_t)d;
}

int64_t mu__attr_int(const mu__node_t *n, const char *k, int64_t dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(n->attrs, k);

	return cJSON_IsNumber(v) ? to_i64(v->valuedouble) : dflt;
}

double mu__attr_num(const mu__node_t *n, const char *k, double dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(n->attrs, k);

	return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

const char *mu__attr_str(const mu__node_t *n, const char *k, const char *dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(n->attrs, k);

	return cJSON_IsString(v) ? v->valuestring : dflt;
}

int mu__attr_ints(const mu__node_t *n, const char *k, int64_t *out, int max)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(n->attrs, k), *it;
	int i = 0;

	if (!cJSON_IsArray(v))
		return -1;
	cJSON_ArrayForEach(it, v) {
		if (i == max || !cJSON_IsNumber(it))
			return -2;
		out[i++] = to_i64(it->valuedouble);
	}
	return i;
}

/* ---- checks shared by ops ---- */

int mu__check_ints(const mu__node_t *n, const char *const *keys, char *why, size_t wl)
{
	for (; *keys != NULL; keys++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(n->attrs, *keys);

		if (v != NULL && !mu__json_int_or_list(v))
			return mu__fail(why, wl, "node %.100s: attribute %.60s must be an integer (list)",
			                n->name, *keys);
	}
	return 0;
}

/* Integers up to 2^53 in magnitude: exact in a double, and far from
 * overflowing the int64 arithmetic the ops do with them. */
#define INT_ATTR_MAX 9007199254740992.0

int mu__want_int(const mu__node_t *n, const char *k, int list, char *why, size_t wl)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(n->attrs, k);

	if (v == NULL || (mu__json_int_or_list(v) && cJSON_IsArray(v) == list))
		return 0;
	return mu__fail(why, wl, "node %.100s: attribute %.60s must be %s", n->name, k,
	                list ? "a list of at most 8 integers" : "an integer");
}

int mu__json_int_or_list(const cJSON *v)
{
	const cJSON *it;

	if (cJSON_IsNumber(v))
		return mu__json_is_int(v, -INT_ATTR_MAX, INT_ATTR_MAX);
	if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > MU_TENSOR_MAX_RANK)
		return 0;
	cJSON_ArrayForEach(it, v)
		if (!mu__json_is_int(it, -INT_ATTR_MAX, INT_ATTR_MAX))
			return 0;
	return 1;
}



/* ---- shapes ---- */

uint64_t mu__shape_numel(const mu__shape_t *s)
{
	uint64_t n = 1;

	for (uint32_t i = 0; i < s->rank; i++)
		n *= s->dims[i];
	return n;
}

int mu__broadcast(const mu__shape_t *a, const mu__shape_t *b, mu__shape_t *out)
{
	uint32_t r = a->rank > b->rank ? a->rank : b->rank, i;

	out->rank = r;
	for (i = 0; i < r; i++) {
		uint64_t da = i < r - a->rank ? 1 : a->dims[i - (r - a->rank)];
		uint64_t db = i < r - b->rank ? 1 : b->dims[i - (r - b->rank)];

		if (da != db && da != 1 && db != 1)
			return MU_EPROTO;
		out->dims[i] = da == 1 ? db : da;
	}
	return 0;
}

int mu__axis(int64_t axis, uint32_t rank)
{
	if (axis < 0)
		axis += rank;
	return axis >= 0 && axis < (int64_t)rank ? (int)axis : -1;
}

void mu__shape_of(const mu_tensor_t *t, mu__shape_t *s)
{
	s->rank = t->rank;
	s->dtype = t->dtype;
	memcpy(s->dims, t->dims, sizeof(s->dims));
}

int mu__op_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                 char *why, size_t wl)
{
	int rc;

	for (int j = 0; !n->op->typed && j < n->nin; j++)
		if (in[j].dtype != MU_DTYPE_F32)
			return mu__fail(why, wl, "node %.100s: %s computes in F32, and %.100s is %s", n->name,
			                n->op->name, n->in[j], mu_dtype_name((int)in[j].dtype));
	memset(out, 0, sizeof(*out) * (size_t)n->nout); /* F32 unless the op says */
	rc = n->op->shape(n, in, out, why, wl);
	for (int j = 0; rc == 0 && !n->op->typed && j < n->nout; j++)
		out[j].dtype = MU_DTYPE_F32;
	return rc;
}

/* Strides that read `s` broadcast into `out` (0 along broadcast dims). */
void mu__bstrides(const mu__shape_t *s, const mu__shape_t *out, uint64_t *st)
{
	uint64_t stride = 1;
	int i;

	for (i = (int)out->rank - 1; i >= 0; i--) {
		int j = i - (int)(out->rank - s->rank);

		if (j < 0 || s->dims[j] == 1) {
			st[i] = 0;
		} else {
			st[i] = stride;
		}
		if (j >= 0)
			stride *= s->dims[j];
	}
}

void mu__bwalk_init(mu__bwalk_t *w, const mu__shape_t *out, const mu__shape_t *in, int n)
{
	memset(w, 0, sizeof(*w));
	w->n = n;
	w->rank = out->rank;
	memcpy(w->dims, out->dims, sizeof(w->dims));
	for (int k = 0; k < n; k++)
		mu__bstrides(&in[k], out, w->st[k]);
	w->inner = out->rank ? out->dims[out->rank - 1] : 1;
	w->rows = w->inner ? mu__shape_numel(out) / w->inner : 0;
	for (int k = 0; k < n; k++)
		w->sin[k] = out->rank ? w->st[k][out->rank - 1] : 0;
}

void mu__bwalk_next(mu__bwalk_t *w)
{
	for (int d = (int)w->rank - 2; d >= 0; d--) {
		w->idx[d]++;
		for (int k = 0; k < w->n; k++)
			w->off[k] += w->st[k][d];
		if (w->idx[d] < w->dims[d])
			return;
		for (int k = 0; k < w->n; k++)
			w->off[k] -= w->st[k][d] * w->idx[d];
		w->idx[d] = 0;
	}
}

double mu__flops_numel(const mu__node_t *n, const mu__shape_t *in, const mu__shape_t *out)
{
	(void)n;
	(void)in;
	return (double)mu__shape_numel(&out[0]);
}
