/* SPDX-License-Identifier: MIT */
/*
 * Elementwise ops of one input: the activations and math functions, F32
 * only and computed with the C library's f32 functions; relu, neg, abs,
 * sign and clip on any numeric dtype; not on BOOL; isnan and isinf to
 * BOOL; and cast between any two dtypes (dtype_int.h's rules).
 */
#include <math.h>
#include <string.h>

#include "graph/dtype_int.h"
#include "graph/ops_int.h"

typedef enum {
	U_RELU, U_SIGMOID, U_TANH, U_SQRT, U_EXP, U_NEG, U_ERF, U_GELU, U_SILU,
	U_LOG, U_RECIP, U_FLOOR, U_CEIL, U_ROUND, U_SIN, U_COS, U_TAN, U_ASIN,
	U_ACOS, U_ATAN, U_SINH, U_COSH, U_ASINH, U_ACOSH, U_ATANH, U_SOFTPLUS,
	U_SOFTSIGN, U_ELU, U_SELU, U_LEAKY, U_HSIG, U_HSWISH, U_CELU, U_THRELU,
	U_SHRINK, U_ABS, U_SIGN, U_CLIP
} uop_t;

/* attributes, read once per run */
typedef struct {
	float alpha, beta, gamma, lo, hi;
	int approx;
} uattr_t;

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

static float clampf(float v, float lo, float hi)
{
	return v < lo ? lo : v > hi ? hi : v; /* NaN passes through */
}

static float apply(uop_t op, float v, const uattr_t *a)
{
	switch (op) {
	case U_RELU: return v > 0 ? v : 0;
	case U_SIGMOID: return sigmoidf(v);
	case U_TANH: return tanhf(v);
	case U_SQRT: return sqrtf(v);
	case U_EXP: return expf(v);
	case U_NEG: return -v;
	case U_ERF: return erff(v);
	case U_GELU: return geluf(v, a->approx);
	case U_SILU: return v * sigmoidf(v);
	case U_LOG: return logf(v);
	case U_RECIP: return 1.0f / v;
	case U_FLOOR: return floorf(v);
	case U_CEIL: return ceilf(v);
	case U_ROUND: return nearbyintf(v); /* halves to even */
	case U_SIN: return sinf(v);
	case U_COS: return cosf(v);
	case U_TAN: return tanf(v);
	case U_ASIN: return asinf(v);
	case U_ACOS: return acosf(v);
	case U_ATAN: return atanf(v);
	case U_SINH: return sinhf(v);
	case U_COSH: return coshf(v);
	case U_ASINH: return asinhf(v);
	case U_ACOSH: return acoshf(v);
	case U_ATANH: return atanhf(v);
	case U_SOFTPLUS: return logf(expf(v) + 1.0f);
	case U_SOFTSIGN: return v / (1.0f + fabsf(v));
	case U_ELU: return v < 0 ? a->alpha * (expf(v) - 1.0f) : v;
	case U_SELU: return v <= 0 ? a->gamma * (a->alpha * expf(v) - a->alpha) : a->gamma * v;
	case U_LEAKY: return v < 0 ? a->alpha * v : v;
	case U_HSIG: return clampf(a->alpha * v + a->beta, 0.0f, 1.0f);
	case U_HSWISH: return v * clampf(v / 6.0f + 0.5f, 0.0f, 1.0f);
	case U_CELU: return fmaxf(0.0f, v) + fminf(0.0f, a->alpha * (expf(v / a->alpha) - 1.0f));
	case U_THRELU: return v > a->alpha ? v : 0.0f;
	case U_SHRINK: return v < -a->alpha ? v + a->beta : v > a->alpha ? v - a->beta : 0.0f;
	case U_ABS: return fabsf(v);
	case U_SIGN: return v > 0 ? 1.0f : v < 0 ? -1.0f : v; /* 0 and NaN stay */
	default: return clampf(v, a->lo, a->hi);
	}
}

/* An integer v (d as a double) clipped to [lo, hi], the bounds rounded
 * inward to integers (they are in range here: v lies beyond them). */
static int64_t clip_int(double d, int64_t v, const uattr_t *a)
{
	if (d < a->lo)
		return (int64_t)ceil(a->lo);
	if (d > a->hi)
		return (int64_t)floor(a->hi);
	return v;
}

/* The ops that also take integers, on one element of any numeric dtype. */
static void apply_any(uop_t op, mu_dtype_t dt, const void *x, void *y, uint64_t i,
                      const uattr_t *a)
{
	if (mu__dt_is_float(dt)) {
		double v = mu__get_f(dt, x, i), lo = a->lo, hi = a->hi;

		v = op == U_RELU ? (v > 0 ? v : 0) : op == U_NEG ? -v : op == U_ABS ? fabs(v)
		    : op == U_SIGN ? (v > 0 ? 1 : v < 0 ? -1 : v) : v < lo ? lo : v > hi ? hi : v;
		mu__put_f(dt, y, i, v);
	} else {
		int uns = mu__dt_is_unsigned(dt);
		int64_t v = mu__get_i(dt, x, i);
		uint64_t u = (uint64_t)v;

		if (op == U_NEG)
			v = (int64_t)(0 - u);
		else if (op == U_ABS || op == U_RELU)
			v = uns || v >= 0 ? v : op == U_RELU ? 0 : (int64_t)(0 - u);
		else if (op == U_SIGN)
			v = uns ? v != 0 : (v > 0) - (v < 0);
		else /* clip: the bounds come as floats; compare in double */
			v = clip_int(uns ? (double)u : (double)v, v, a);
		mu__put_i(dt, y, i, v, uns);
	}
}

#define TYPED_OP(op) ((op) == U_RELU || (op) == U_NEG || (op) == U_ABS || (op) == U_SIGN || \
                      (op) == U_CLIP)

static void read_attrs(uop_t op, const mu__node_t *n, uattr_t *a)
{
	static const float alpha[] = {[U_ELU] = 1.0f, [U_SELU] = 1.67326319217681884765625f,
		[U_LEAKY] = 0.01f, [U_HSIG] = 0.2f, [U_CELU] = 1.0f, [U_THRELU] = 1.0f};

	a->alpha = (float)mu__attr_num(n, op == U_SHRINK ? "lambd" : "alpha",
	                               op == U_SHRINK ? 0.5 : op <= U_THRELU ? alpha[op] : 0);
	a->beta = (float)mu__attr_num(n, op == U_SHRINK ? "bias" : "beta", op == U_HSIG ? 0.5 : 0);
	a->gamma = (float)mu__attr_num(n, "gamma", 1.05070102214813232421875);
	a->lo = (float)mu__attr_num(n, "min", -INFINITY);
	a->hi = (float)mu__attr_num(n, "max", INFINITY);
	a->approx = strcmp(mu__attr_str(n, "approximate", "none"), "tanh") == 0;
}

/* F32: the common activations in loops of their own (the op's switch
 * hoisted out of the loop: a CNN's ReLUs run over millions of elements),
 * the rest through apply(). */
static void fast_f32(uop_t op, const float *restrict x, float *restrict y, uint64_t m,
                     const uattr_t *a)
{
	float lo = a->lo, hi = a->hi; /* locals: y's stores cannot change them */
	uint64_t i;

	switch (op) {
	case U_RELU:
		for (i = 0; i < m; i++)
			y[i] = x[i] > 0 ? x[i] : 0;
		break;
	case U_CLIP: /* MobileNet's ReLU6, 35 times a forward */
		for (i = 0; i < m; i++) {
			float v = x[i] < lo ? lo : x[i];

			y[i] = v > hi ? hi : v; /* NaN compares false both times: kept */
		}
		break;
	case U_NEG:
		for (i = 0; i < m; i++)
			y[i] = -x[i];
		break;
	default:
		for (i = 0; i < m; i++)
			y[i] = apply(op, x[i], a);
		break;
	}
}

static int unary(uop_t op, const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	uint64_t m = out[0]->numel;
	uattr_t a;

	read_attrs(op, n, &a);
	if (in[0]->dtype != MU_DTYPE_F32) {
		for (uint64_t i = 0; i < m; i++)
			apply_any(op, in[0]->dtype, in[0]->raw, out[0]->raw, i, &a);
		return 0;
	}
	fast_f32(op, in[0]->data, out[0]->data, m, &a);
	return 0;
}

/* F32 ops are checked by mu__op_shape; the typed ones take any number */
static int unary_shape(uop_t op, const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                       char *why, size_t wl)
{
	if (TYPED_OP(op) && (in[0].dtype == MU_DTYPE_BOOL ||
	                     (op == U_NEG && mu__dt_is_unsigned(in[0].dtype))))
		return mu__fail(why, wl, "node %.100s: %s does not take %s", n->name, n->op->name,
		                mu_dtype_name((int)in[0].dtype));
	out[0] = in[0];
	return 0;
}

/* number attributes, when present, are finite (clip's bounds may be inf) */
static int num_check(const mu__node_t *n, char *why, size_t wl)
{
	static const char *const keys[] = {"alpha", "beta", "gamma", "lambd", "bias", "min", "max"};
	const char *a = mu__attr_str(n, "approximate", "none");

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(n->attrs, keys[i]);

		if (v != NULL && (!cJSON_IsNumber(v) || (i < 5 && !isfinite(v->valuedouble)) ||
		                  isnan(v->valuedouble)))
			return mu__fail(why, wl, "node %.100s: attribute %s must be a number", n->name, keys[i]);
	}
	if (strcmp(a, "none") != 0 && strcmp(a, "tanh") != 0)
		return mu__fail(why, wl, "node %.100s: gelu approximate must be \"none\" or \"tanh\", not %.60s",
		                n->name, a);
	return 0;
}

#define UNARY(NAME, OP)                                                        \
	static int shape_##NAME(const mu__node_t *n, const mu__shape_t *in,    \
	                        mu__shape_t *out, char *why, size_t wl)        \
	{                                                                      \
		return unary_shape(OP, n, in, out, why, wl);                   \
	}                                                                      \
	static int run_##NAME(const mu__node_t *n, mu_tensor_t *const *in,     \
	                      mu_tensor_t **out)                               \
	{                                                                      \
		return unary(OP, n, in, out);                                  \
	}                                                                      \
	const mu__op_t mu__op_##NAME = {#NAME, 1, 1, 1, num_check, shape_##NAME, \
	                                run_##NAME, mu__flops_numel, TYPED_OP(OP), 0, NULL}

UNARY(relu, U_RELU);
UNARY(sigmoid, U_SIGMOID);
UNARY(tanh, U_TANH);
UNARY(sqrt, U_SQRT);
UNARY(exp, U_EXP);
UNARY(neg, U_NEG);
UNARY(erf, U_ERF);
UNARY(gelu, U_GELU);
UNARY(silu, U_SILU);
UNARY(log, U_LOG);
UNARY(reciprocal, U_RECIP);
UNARY(floor, U_FLOOR);
UNARY(ceil, U_CEIL);
UNARY(round, U_ROUND);
UNARY(sin, U_SIN);
UNARY(cos, U_COS);
UNARY(tan, U_TAN);
UNARY(asin, U_ASIN);
UNARY(acos, U_ACOS);
UNARY(atan, U_ATAN);
UNARY(sinh, U_SINH);
UNARY(cosh, U_COSH);
UNARY(asinh, U_ASINH);
UNARY(acosh, U_ACOSH);
UNARY(atanh, U_ATANH);
UNARY(softplus, U_SOFTPLUS);
UNARY(softsign, U_SOFTSIGN);
UNARY(elu, U_ELU);
UNARY(selu, U_SELU);
UNARY(leaky_relu, U_LEAKY);
UNARY(hard_sigmoid, U_HSIG);
UNARY(hard_swish, U_HSWISH);
UNARY(celu, U_CELU);
UNARY(thresholded_relu, U_THRELU);
UNARY(shrink, U_SHRINK);
UNARY(abs, U_ABS);
UNARY(sign, U_SIGN);
UNARY(clip, U_CLIP);

/* ---- not, isnan, isinf ---- */

static int not_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                     size_t wl)
{
	if (in[0].dtype != MU_DTYPE_BOOL)
		return mu__fail(why, wl, "node %.100s: not takes BOOL, and %.100s is not", n->name, n->in[0]);
	out[0] = in[0];
	return 0;
}

static int not_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	const uint8_t *x = in[0]->raw;
	uint8_t *y = out[0]->raw;

	(void)n;
	for (uint64_t i = 0; i < out[0]->numel; i++)
		y[i] = !x[i];
	return 0;
}

const mu__op_t mu__op_not = {"not", 1, 1, 1, NULL, not_shape, not_run, mu__flops_numel, 1, 0, NULL};

static int isx_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                     size_t wl)
{
	if (!mu__dt_is_float(in[0].dtype))
		return mu__fail(why, wl, "node %.100s: %s takes a float tensor, and %.100s is not", n->name,
		                n->op->name, n->in[0]);
	out[0] = in[0];
	out[0].dtype = MU_DTYPE_BOOL;
	return 0;
}

static int isx_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	int inf = strcmp(n->op->name, "isinf") == 0;
	int pos = mu__attr_int(n, "detect_positive", 1) != 0, neg = mu__attr_int(n, "detect_negative", 1) != 0;
	uint8_t *y = out[0]->raw;

	for (uint64_t i = 0; i < out[0]->numel; i++) {
		double v = mu__get_f(in[0]->dtype, in[0]->raw, i);

		y[i] = inf ? isinf(v) && (v > 0 ? pos : neg) : isnan(v) != 0;
	}
	return 0;
}

const mu__op_t mu__op_isnan = {"isnan", 1, 1, 1, NULL, isx_shape, isx_run, mu__flops_numel, 1, 0, NULL};
const mu__op_t mu__op_isinf = {"isinf", 1, 1, 1, NULL, isx_shape, isx_run, mu__flops_numel, 1, 0, NULL};

/* ---- cast: "to" names the dtype ("I64", "F16", ...) ---- */

static int cast_check(const mu__node_t *n, char *why, size_t wl)
{
	if (mu_dtype_from_name(mu__attr_str(n, "to", "")) < 0)
		return mu__fail(why, wl, "node %.100s: cast needs \"to\", a dtype such as \"F32\" or \"I64\"%.0s",
		                n->name, "");
	return 0;
}

static int cast_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                      size_t wl)
{
	(void)why;
	(void)wl;
	out[0] = in[0];
	out[0].dtype = (mu_dtype_t)mu_dtype_from_name(mu__attr_str(n, "to", "F32"));
	return 0;
}

static int cast_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	(void)n;
	mu__convert(in[0]->dtype, in[0]->raw, out[0]->dtype, out[0]->raw, out[0]->numel);
	return 0;
}

const mu__op_t mu__op_cast = {"cast", 1, 1, 1, cast_check, cast_shape, cast_run, mu__flops_numel, 1, 0, NULL};
