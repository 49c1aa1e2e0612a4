/* SPDX-License-Identifier: MIT */
/*
 * Elementwise ops: binary with numpy broadcasting (add, sub, mul, div,
 * pow) and unary activations. Loops run in index order, so results are
 * the same wherever the graph is cut.
 */
#include <math.h>
#include <string.h>

#include "model/ops_int.h"

/* ---- binary ---- */

typedef enum { B_ADD, B_SUB, B_MUL, B_DIV, B_POW } bop_t;

static inline float apply(bop_t op, float a, float b)
{
	switch (op) {
	case B_ADD:
		return a + b;
	case B_SUB:
		return a - b;
	case B_MUL:
		return a * b;
	case B_DIV:
		return a / b;
	default:
		return b == 2.0f ? a * a : powf(a, b);
	}
}

static int bin_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                     char *why, size_t wl)
{
	if (mu__broadcast(&in[0], &in[1], &out[0]) != 0)
		return mu__fail(why, wl, "node %.100s: shapes of %.100s and its other operand do not broadcast",
		                n->name, n->in[0]);
	return 0;
}

static int binary(bop_t op, mu_tensor_t *const *in, mu_tensor_t **out)
{
	const mu_tensor_t *a = in[0], *b = in[1];
	mu_tensor_t *o = out[0];
	mu__shape_t sa, sb, so;
	uint64_t sta[MU_TENSOR_MAX_RANK], stb[MU_TENSOR_MAX_RANK], idx[MU_TENSOR_MAX_RANK] = {0};
	uint64_t i, inner, oa = 0, ob = 0;
	int d;

	if (a->numel == o->numel && b->numel == o->numel) { /* same shape */
		for (i = 0; i < o->numel; i++)
			o->data[i] = apply(op, a->data[i], b->data[i]);
		return 0;
	}
	if (b->numel == 1) {
		for (i = 0; i < o->numel; i++)
			o->data[i] = apply(op, a->data[a->numel == 1 ? 0 : i], b->data[0]);
		return 0;
	}
	mu__shape_of(a, &sa);
	mu__shape_of(b, &sb);
	mu__shape_of(o, &so);
	mu__bstrides(&sa, &so, sta);
	mu__bstrides(&sb, &so, stb);
	if (so.rank == 0 || o->numel == 0)
		return 0;
	inner = so.dims[so.rank - 1];
	/* walk the output row by row, carrying both operands' offsets */
	for (i = 0; i < o->numel; i += inner) {
		uint64_t sa_in = sta[so.rank - 1], sb_in = stb[so.rank - 1];

		for (uint64_t j = 0; j < inner; j++)
			o->data[i + j] = apply(op, a->data[oa + j * sa_in], b->data[ob + j * sb_in]);
		for (d = (int)so.rank - 2; d >= 0; d--) {
			idx[d]++;
			oa += sta[d];
			ob += stb[d];
			if (idx[d] < so.dims[d])
				break;
			oa -= sta[d] * idx[d];
			ob -= stb[d] * idx[d];
			idx[d] = 0;
		}
	}
	return 0;
}

#define BINARY(NAME, OP)                                                       \
	static int run_##NAME(const mu__node_t *n, mu_tensor_t *const *in,     \
	                      mu_tensor_t **out)                               \
	{                                                                      \
		(void)n;                                                       \
		return binary(OP, in, out);                                    \
	}                                                                      \
	const mu__op_t mu__op_##NAME = {#NAME, 2, 2, 1, NULL, bin_shape,       \
	                                run_##NAME, mu__flops_numel}

BINARY(add, B_ADD);
BINARY(sub, B_SUB);
BINARY(mul, B_MUL);
BINARY(div, B_DIV);
BINARY(pow, B_POW);

/* ---- unary ---- */

static int same_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                      char *why, size_t wl)
{
	(void)n;
	(void)why;
	(void)wl;
	out[0] = in[0];
	return 0;
}

static float sigmoidf(float x)
{
	return 1.0f / (1.0f + expf(-x));
}

static float geluf(float x, int approx_tanh)
{
	if (approx_tanh)
		return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
	return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
}

typedef enum { U_RELU, U_SIGMOID, U_TANH, U_SQRT, U_EXP, U_NEG, U_ERF, U_GELU, U_SILU } uop_t;

static int unary(uop_t op, const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	const float *x = in[0]->data;
	float *y = out[0]->data;
	uint64_t i, m = out[0]->numel;
	int approx = op == U_GELU && strcmp(mu__attr_str(n, "approximate", "none"), "tanh") == 0;

	for (i = 0; i < m; i++) {
		float v = x[i];

		switch (op) {
		case U_RELU:
			y[i] = v > 0 ? v : 0;
			break;
		case U_SIGMOID:
			y[i] = sigmoidf(v);
			break;
		case U_TANH:
			y[i] = tanhf(v);
			break;
		case U_SQRT:
			y[i] = sqrtf(v);
			break;
		case U_EXP:
			y[i] = expf(v);
			break;
		case U_NEG:
			y[i] = -v;
			break;
		case U_ERF:
			y[i] = erff(v);
			break;
		case U_GELU:
			y[i] = geluf(v, approx);
			break;
		default:
			y[i] = v * sigmoidf(v);
			break;
		}
	}
	return 0;
}

static int check_gelu(const mu__node_t *n, char *why, size_t wl)
{
	const char *a = mu__attr_str(n, "approximate", "none");

	if (strcmp(a, "none") != 0 && strcmp(a, "tanh") != 0)
		return mu__fail(why, wl, "node %.100s: gelu approximate must be \"none\" or \"tanh\", not %.60s",
		                n->name, a);
	return 0;
}

#define UNARY(NAME, OP, CHECK)                                                 \
	static int run_##NAME(const mu__node_t *n, mu_tensor_t *const *in,     \
	                      mu_tensor_t **out)                               \
	{                                                                      \
		return unary(OP, n, in, out);                                  \
	}                                                                      \
	const mu__op_t mu__op_##NAME = {#NAME, 1, 1, 1, CHECK, same_shape,     \
	                                run_##NAME, mu__flops_numel}

UNARY(relu, U_RELU, NULL);
UNARY(sigmoid, U_SIGMOID, NULL);
UNARY(tanh, U_TANH, NULL);
UNARY(sqrt, U_SQRT, NULL);
UNARY(exp, U_EXP, NULL);
UNARY(neg, U_NEG, NULL);
UNARY(erf, U_ERF, NULL);
UNARY(gelu, U_GELU, check_gelu);
UNARY(silu, U_SILU, NULL);
