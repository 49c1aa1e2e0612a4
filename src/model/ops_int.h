/* SPDX-License-Identifier: MIT */
/*
 * What the op files share (ops.c) and the ops they define.
 */
#ifndef MU_MODEL_OPS_INT_H
#define MU_MODEL_OPS_INT_H

#include <stdio.h>

#include "core/error_int.h"
#include "core/json_int.h"
#include "model/model_int.h"

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
double mu__flops_numel(const mu__node_t *n, const mu__shape_t *in, const mu__shape_t *out);

extern const mu__op_t mu__op_add, mu__op_sub, mu__op_mul, mu__op_div, mu__op_pow;
extern const mu__op_t mu__op_relu, mu__op_sigmoid, mu__op_tanh, mu__op_sqrt,
	mu__op_exp, mu__op_neg, mu__op_erf, mu__op_gelu, mu__op_silu;
extern const mu__op_t mu__op_matmul, mu__op_gemm, mu__op_layernorm,
	mu__op_rmsnorm, mu__op_softmax, mu__op_reduce_mean, mu__op_reduce_sum,
	mu__op_reduce_max;
extern const mu__op_t mu__op_reshape, mu__op_flatten, mu__op_transpose,
	mu__op_concat, mu__op_slice, mu__op_embedding;

#endif
