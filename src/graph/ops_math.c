/* SPDX-License-Identifier: MIT */
/*
 * Elementwise ops with numpy broadcasting: arithmetic (add, sub, mul,
 * div, pow, mod, min, max, prelu) on any numeric dtype, comparisons
 * (equal, less, greater, less_equal, greater_equal) giving BOOL, logic
 * (and, or, xor) on BOOL, shifts (shift_left, shift_right) on integers,
 * and where(cond, x, y). F32 arithmetic has its
 * own loops; every other dtype goes element by element through
 * dtype_int.h: floats computed in double and rounded into their dtype
 * (what numpy does for F16), integers in 64 bits, wrapping as the dtype
 * does. Loops run in index order, so results are the same wherever the
 * graph is cut.
 */
#include <math.h>
#include <string.h>

#include "graph/dtype_int.h"
#include "graph/ops_int.h"

typedef enum {
	B_ADD, B_SUB, B_MUL, B_DIV, B_POW, B_MOD, B_MIN, B_MAX, B_PRELU,
	B_EQ, B_LT, B_GT, B_LE, B_GE, B_AND, B_OR, B_XOR, B_SHL, B_SHR
} bop_t;

#define IS_CMP(op) ((op) >= B_EQ && (op) <= B_GE)
#define IS_LOGIC(op) ((op) >= B_AND && (op) <= B_XOR)
#define IS_SHIFT(op) ((op) >= B_SHL)

static inline float nanmin(float a, float b)
{
	return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
}

static inline float nanmax(float a, float b)
{
	return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
}

static inline float apply_f32(bop_t op, float a, float b, int fmod_)
{
	switch (op) {
	case B_ADD: return a + b;
	case B_SUB: return a - b;
	case B_MUL: return a * b;
	case B_DIV: return a / b;
	case B_POW: return b == 2.0f ? a * a : powf(a, b);
	case B_MOD: return fmod_ ? fmodf(a, b) : a - b * floorf(a / b);
	case B_MIN: return nanmin(a, b);
	case B_MAX: return nanmax(a, b);
	default: return a < 0 ? a * b : a; /* prelu: b is the slope */
	}
}

static double apply_f64(bop_t op, double a, double b, int fmod_)
{
	switch (op) {
	case B_ADD: return a + b;
	case B_SUB: return a - b;
	case B_MUL: return a * b;
	case B_DIV: return a / b;
	case B_POW: return pow(a, b);
	case B_MOD: return fmod_ ? fmod(a, b) : a - b * floor(a / b);
	case B_MIN: return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
	case B_MAX: return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
	case B_PRELU: return a < 0 ? a * b : a;
	case B_EQ: return a == b;
	case B_LT: return a < b;
	case B_GT: return a > b;
	case B_LE: return a <= b;
	default: return a >= b;
	}
}

/* x to the n in wrapping integer arithmetic; n < 0 gives 1 / x^|n|
 * truncated, which is 0 unless |x| is 1 (or x is 0: 0, not a trap). */
static uint64_t ipow(uint64_t x, int64_t n, int uns)
{
	uint64_t r = 1;

	if (n < 0 && !uns)
		return (int64_t)x == 1 ? 1 : (int64_t)x == -1 ? ((n & 1) ? x : 1) : 0;
	for (uint64_t e = (uint64_t)n; e > 0; e >>= 1, x *= x)
		if (e & 1)
			r *= x;
	return r;
}

/* Integers: in uint64_t bits (wrapping is defined there), signed or
 * unsigned where it matters. Division by zero gives 0 (numpy's value). */
static int64_t apply_int(bop_t op, int64_t a, int64_t b, int uns, int fmod_)
{
	uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
	int64_t q, r;

	switch (op) {
	case B_ADD: return (int64_t)(ua + ub);
	case B_SUB: return (int64_t)(ua - ub);
	case B_MUL: return (int64_t)(ua * ub);
	case B_POW: return (int64_t)ipow(ua, b, uns);
	case B_DIV: case B_MOD:
		if (b == 0)
			return 0;
		if (uns)
			return (int64_t)(op == B_DIV ? ua / ub : ua % ub);
		if (b == -1) /* INT64_MIN / -1 overflows */
			return op == B_DIV ? (int64_t)(0 - ua) : 0;
		q = a / b;
		r = a % b;
		if (op == B_DIV)
			return q;
		return !fmod_ && r != 0 && ((r < 0) != (b < 0)) ? r + b : r; /* sign of b */
	case B_MIN: return uns ? (int64_t)(ua < ub ? ua : ub) : a < b ? a : b;
	case B_MAX: return uns ? (int64_t)(ua > ub ? ua : ub) : a > b ? a : b;
	case B_PRELU: return !uns && a < 0 ? (int64_t)(ua * ub) : a;
	case B_EQ: return a == b;
	case B_LT: return uns ? ua < ub : a < b;
	case B_GT: return uns ? ua > ub : a > b;
	case B_LE: return uns ? ua <= ub : a <= b;
	case B_GE: return uns ? ua >= ub : a >= b;
	case B_AND: return a && b;
	case B_OR: return a || b;
	case B_XOR: return (a != 0) != (b != 0);
	/* a shift by 64 or more (or a negative one) leaves nothing; right
	 * shifts are logical, on the value's unsigned bits */
	case B_SHL: return ub >= 64 ? 0 : (int64_t)(ua << ub);
	default: return ub >= 64 ? 0 : uns ? (int64_t)(ua >> ub) : a >> ub;
	}
}

/* ---- shapes and dtypes ---- */

static int bin_shape(bop_t op, const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                     char *why, size_t wl)
{
	mu_dtype_t a = in[0].dtype, b = in[1].dtype;

	if (mu__broadcast(&in[0], &in[1], &out[0]) != 0)
		return mu__fail(why, wl, "node %.100s: shapes of %.100s and its other operand do not broadcast",
		                n->name, n->in[0]);
	if (a != b)
		return mu__fail(why, wl, "node %.100s: %.100s is %s and the other operand %s", n->name,
		                n->in[0], mu_dtype_name((int)a), mu_dtype_name((int)b));
	if (IS_LOGIC(op) ? a != MU_DTYPE_BOOL : IS_SHIFT(op) ? !mu__dt_is_int(a)
	                                       : a == MU_DTYPE_BOOL && op != B_EQ)
		return mu__fail(why, wl, "node %.100s: %s does not take %s operands", n->name, n->op->name,
		                mu_dtype_name((int)a));
	out[0].dtype = IS_CMP(op) || IS_LOGIC(op) ? MU_DTYPE_BOOL : a;
	return 0;
}

/* ---- computing ---- */

static void bin_f32(bop_t op, int fmod_, const mu_tensor_t *a, const mu_tensor_t *b,
                    mu_tensor_t *o, mu__bwalk_t *w)
{
	uint64_t i;

	if (a->numel == o->numel && b->numel == o->numel) { /* same shape */
		if (op == B_ADD) { /* residual adds: a loop of their own */
			for (i = 0; i < o->numel; i++)
				o->data[i] = a->data[i] + b->data[i];
			return;
		}
		for (i = 0; i < o->numel; i++)
			o->data[i] = apply_f32(op, a->data[i], b->data[i], fmod_);
		return;
	}
	if (b->numel == 1 && a->numel == o->numel) {
		for (i = 0; i < o->numel; i++)
			o->data[i] = apply_f32(op, a->data[i], b->data[0], fmod_);
		return;
	}
	for (uint64_t r = 0; r < w->rows; r++, mu__bwalk_next(w)) {
		const float *pa = a->data + w->off[0], *pb = b->data + w->off[1];
		float *po = o->data + r * w->inner;

		for (uint64_t j = 0; j < w->inner; j++)
			po[j] = apply_f32(op, pa[j * w->sin[0]], pb[j * w->sin[1]], fmod_);
	}
}

static void bin_any(bop_t op, int fmod_, const mu_tensor_t *a, const mu_tensor_t *b,
                    mu_tensor_t *o, mu__bwalk_t *w)
{
	mu_dtype_t dt = a->dtype;
	int flt = mu__dt_is_float(dt), uns = mu__dt_is_unsigned(dt);

	for (uint64_t r = 0; r < w->rows; r++, mu__bwalk_next(w))
		for (uint64_t j = 0; j < w->inner; j++) {
			uint64_t ia = w->off[0] + j * w->sin[0], ib = w->off[1] + j * w->sin[1];
			uint64_t io = r * w->inner + j;

			if (flt)
				mu__put_f(o->dtype, o->raw, io,
				          apply_f64(op, mu__get_f(dt, a->raw, ia), mu__get_f(dt, b->raw, ib), fmod_));
			else
				mu__put_i(o->dtype, o->raw, io,
				          apply_int(op, mu__get_i(dt, a->raw, ia), mu__get_i(dt, b->raw, ib), uns, fmod_),
				          uns);
		}
}

static int binary(bop_t op, const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	mu__shape_t s[2], so;
	mu__bwalk_t w;
	int fmod_ = (int)mu__attr_int(n, "fmod", 0) != 0;

	mu__shape_of(in[0], &s[0]);
	mu__shape_of(in[1], &s[1]);
	mu__shape_of(out[0], &so);
	mu__bwalk_init(&w, &so, s, 2);
	if (in[0]->dtype == MU_DTYPE_F32 && out[0]->dtype == MU_DTYPE_F32)
		bin_f32(op, fmod_, in[0], in[1], out[0], &w);
	else
		bin_any(op, fmod_, in[0], in[1], out[0], &w);
	return 0;
}

static int mod_check(const mu__node_t *n, char *why, size_t wl)
{
	return mu__want_int(n, "fmod", 0, why, wl);
}

#define BINARY(NAME, OP, CHECK)                                                \
	static int shape_##NAME(const mu__node_t *n, const mu__shape_t *in,    \
	                        mu__shape_t *out, char *why, size_t wl)        \
	{                                                                      \
		return bin_shape(OP, n, in, out, why, wl);                     \
	}                                                                      \
	static int run_##NAME(const mu__node_t *n, mu_tensor_t *const *in,     \
	                      mu_tensor_t **out)                               \
	{                                                                      \
		return binary(OP, n, in, out);                                 \
	}                                                                      \
	const mu__op_t mu__op_##NAME = {#NAME, 2, 2, 1, CHECK, shape_##NAME,   \
	                                run_##NAME, mu__flops_numel, 1, 0, NULL}

BINARY(add, B_ADD, NULL);
BINARY(sub, B_SUB, NULL);
BINARY(mul, B_MUL, NULL);
BINARY(div, B_DIV, NULL);
BINARY(pow, B_POW, NULL);
BINARY(mod, B_MOD, mod_check);
BINARY(min, B_MIN, NULL);
BINARY(max, B_MAX, NULL);
BINARY(prelu, B_PRELU, NULL);
BINARY(equal, B_EQ, NULL);
BINARY(less, B_LT, NULL);
BINARY(greater, B_GT, NULL);
BINARY(less_equal, B_LE, NULL);
BINARY(greater_equal, B_GE, NULL);
BINARY(and, B_AND, NULL);
BINARY(or, B_OR, NULL);
BINARY(xor, B_XOR, NULL);
BINARY(shift_left, B_SHL, NULL);
BINARY(shift_right, B_SHR, NULL);

/* ---- where(cond, x, y) ---- */

static int where_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                       char *why, size_t wl)
{
	mu__shape_t xy;

	if (in[0].dtype != MU_DTYPE_BOOL)
		return mu__fail(why, wl, "node %.100s: the condition %.100s must be BOOL", n->name, n->in[0]);
	if (in[1].dtype != in[2].dtype)
		return mu__fail(why, wl, "node %.100s: %.100s and the other choice differ in dtype",
		                n->name, n->in[1]);
	if (mu__broadcast(&in[1], &in[2], &xy) != 0 || mu__broadcast(&in[0], &xy, &out[0]) != 0)
		return mu__fail(why, wl, "node %.100s: the shapes of %.100s and the choices do not broadcast",
		                n->name, n->in[0]);
	out[0].dtype = in[1].dtype;
	return 0;
}

static int where_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	mu__shape_t s[3], so;
	mu__bwalk_t w;
	size_t es = mu_dtype_size((int)out[0]->dtype);
	const uint8_t *c = in[0]->raw;
	const char *x = in[1]->raw, *y = in[2]->raw;
	char *o = out[0]->raw;

	(void)n;
	for (int k = 0; k < 3; k++)
		mu__shape_of(in[k], &s[k]);
	mu__shape_of(out[0], &so);
	mu__bwalk_init(&w, &so, s, 3);
	for (uint64_t r = 0; r < w.rows; r++, mu__bwalk_next(&w))
		for (uint64_t j = 0; j < w.inner; j++) {
			uint64_t ic = w.off[0] + j * w.sin[0];
			const char *src = c[ic] ? x + (w.off[1] + j * w.sin[1]) * es
			                        : y + (w.off[2] + j * w.sin[2]) * es;

			memcpy(o + (r * w.inner + j) * es, src, es);
		}
	return 0;
}

const mu__op_t mu__op_where = {"where", 3, 3, 1, NULL, where_shape, where_run, mu__flops_numel, 1, 0, NULL};
