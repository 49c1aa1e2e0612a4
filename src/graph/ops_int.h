/* SPDX-License-Identifier: MIT */
/*
 * What the op files share (ops.c) and the ops they define.
 */
#ifndef MU_GRAPH_OPS_INT_H
#define MU_GRAPH_OPS_INT_H

#include <stdio.h>

#include "core/error_int.h"
#include "core/json_int.h"
#include "graph/graph_int.h"

/* A formatted reason and MU_EPROTO. */
#define mu__fail(why, wl, ...) mu__why(why, wl, MU_EPROTO, __VA_ARGS__)
/* Every listed attr, when present, is an integer or a list of them. */
int mu__check_ints(const mu__node_t *n, const char *const *keys, char *why, size_t wl);
int mu__json_int_or_list(const cJSON *v);
/* k, when present, is an integer (list = 0) or a list of them (list = 1):
 * a wrong type is an error at load, never a silent default. */
int mu__want_int(const mu__node_t *n, const char *k, int list, char *why, size_t wl);
void mu__shape_of(const mu_tensor_t *t, mu__shape_t *s);
void mu__bstrides(const mu__shape_t *s, const mu__shape_t *out, uint64_t *st);

/*
 * A walk over an output's elements in order, row by row (a row is the
 * last dim), carrying each of n inputs' offsets as numpy broadcasting
 * reads them: for row r, input k's element j is at off[k] + j * sin[k].
 *
 *   mu__bwalk_init(&w, &out, in, n);
 *   for (r = 0; r < w.rows; r++, mu__bwalk_next(&w)) ...
 */
typedef struct {
	int n;
	uint32_t rank;
	uint64_t dims[MU_TENSOR_MAX_RANK], st[3][MU_TENSOR_MAX_RANK], idx[MU_TENSOR_MAX_RANK];
	uint64_t off[3], sin[3];
	uint64_t inner, rows;
} mu__bwalk_t;

/* Element si of src to element di of dst, elements of es bytes. */
static inline void mu__ecopy(void *dst, uint64_t di, const void *src, uint64_t si, size_t es)
{
	switch (es) {
	case 4: ((uint32_t *)dst)[di] = ((const uint32_t *)src)[si]; break;
	case 8: ((uint64_t *)dst)[di] = ((const uint64_t *)src)[si]; break;
	case 2: ((uint16_t *)dst)[di] = ((const uint16_t *)src)[si]; break;
	default: ((uint8_t *)dst)[di] = ((const uint8_t *)src)[si]; break;
	}
}

/* Index tensors: I64 or I32. */
static inline int mu__is_index(mu_dtype_t dt)
{
	return dt == MU_DTYPE_I64 || dt == MU_DTYPE_I32;
}

/* Index i of t (I32 or I64; -1 for any other dtype). */
static inline int64_t mu__index_at(const mu_tensor_t *t, uint64_t i)
{
	if (t->dtype == MU_DTYPE_I64)
		return ((const int64_t *)t->raw)[i];
	if (t->dtype == MU_DTYPE_I32)
		return ((const int32_t *)t->raw)[i];
	return -1;
}

double mu__no_flops(const mu__node_t *n, const mu__shape_t *in, const mu__shape_t *out);

void mu__bwalk_init(mu__bwalk_t *w, const mu__shape_t *out, const mu__shape_t *in, int n);
void mu__bwalk_next(mu__bwalk_t *w);
double mu__flops_numel(const mu__node_t *n, const mu__shape_t *in, const mu__shape_t *out);

extern const mu__op_t mu__op_add, mu__op_sub, mu__op_mul, mu__op_div, mu__op_pow,
	mu__op_mod, mu__op_min, mu__op_max, mu__op_prelu, mu__op_equal, mu__op_less,
	mu__op_greater, mu__op_less_equal, mu__op_greater_equal, mu__op_and, mu__op_or,
	mu__op_xor, mu__op_shift_left, mu__op_shift_right, mu__op_where;
extern const mu__op_t mu__op_relu, mu__op_sigmoid, mu__op_tanh, mu__op_sqrt,
	mu__op_exp, mu__op_neg, mu__op_erf, mu__op_gelu, mu__op_silu, mu__op_log,
	mu__op_reciprocal, mu__op_floor, mu__op_ceil, mu__op_round, mu__op_sin,
	mu__op_cos, mu__op_tan, mu__op_asin, mu__op_acos, mu__op_atan, mu__op_sinh,
	mu__op_cosh, mu__op_asinh, mu__op_acosh, mu__op_atanh, mu__op_softplus,
	mu__op_softsign, mu__op_elu, mu__op_selu, mu__op_leaky_relu,
	mu__op_hard_sigmoid, mu__op_hard_swish, mu__op_celu, mu__op_thresholded_relu,
	mu__op_shrink, mu__op_abs, mu__op_sign, mu__op_clip, mu__op_not, mu__op_isnan,
	mu__op_isinf, mu__op_cast;
extern const mu__op_t mu__op_matmul, mu__op_gemm, mu__op_layernorm,
	mu__op_rmsnorm, mu__op_batchnorm, mu__op_instance_norm, mu__op_lrn, mu__op_det;
extern const mu__op_t mu__op_softmax, mu__op_log_softmax, mu__op_hardmax,
	mu__op_reduce_mean, mu__op_reduce_sum, mu__op_reduce_max, mu__op_reduce_min,
	mu__op_reduce_prod, mu__op_reduce_l1, mu__op_reduce_l2,
	mu__op_reduce_sum_square, mu__op_reduce_log_sum, mu__op_reduce_log_sum_exp,
	mu__op_argmax, mu__op_argmin, mu__op_cumsum, mu__op_topk;
extern const mu__op_t mu__op_reshape, mu__op_flatten, mu__op_transpose,
	mu__op_concat, mu__op_slice, mu__op_expand, mu__op_tile;
extern const mu__op_t mu__op_embedding, mu__op_gather, mu__op_gather_elements,
	mu__op_trilu, mu__op_pad;
extern const mu__op_t mu__op_scatter_elements, mu__op_gather_nd, mu__op_scatter_nd,
	mu__op_reverse_sequence;
extern const mu__op_t mu__op_conv, mu__op_conv_transpose, mu__op_maxpool, mu__op_avgpool,
	mu__op_resize;

#endif
