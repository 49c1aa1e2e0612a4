/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/graph/ops_unary.c: the activations against their
 * formulas computed here in double, the typed ops (relu, neg, abs, sign,
 * clip) on integers, not, isnan/isinf, and cast between dtypes.
 */
#include "ops_ref.h"

static char why[512];

static mu_tensor_t *run1(const char *op, const char *attrs, mu_tensor_t *x)
{
	mu_tensor_t *y;

	assert_int_equal(ref_run(op, attrs, &x, 1, &y, why, sizeof(why)), 0);
	mu_tensor_free(x);
	return y;
}

static const double xs[] = {-3, -1, -0.25, 0, 0.5, 2, 7};
#define NX (sizeof(xs) / sizeof(xs[0]))

static double act(const char *op, double x)
{
	if (strcmp(op, "elu") == 0)
		return x < 0 ? 0.7 * (exp(x) - 1) : x;
	if (strcmp(op, "leaky_relu") == 0)
		return x < 0 ? 0.7 * x : x;
	if (strcmp(op, "hard_sigmoid") == 0)
		return fmax(0, fmin(1, 0.7 * x + 0.5));
	if (strcmp(op, "hard_swish") == 0)
		return x * fmax(0, fmin(1, x / 6 + 0.5));
	if (strcmp(op, "softplus") == 0)
		return log(exp(x) + 1);
	if (strcmp(op, "softsign") == 0)
		return x / (1 + fabs(x));
	if (strcmp(op, "celu") == 0)
		return fmax(0, x) + fmin(0, 0.7 * (exp(x / 0.7) - 1));
	if (strcmp(op, "thresholded_relu") == 0)
		return x > 0.7 ? x : 0;
	if (strcmp(op, "shrink") == 0)
		return x < -0.7 ? x + 0.25 : x > 0.7 ? x - 0.25 : 0;
	if (strcmp(op, "round") == 0)
		return nearbyint(x);
	return x < 0 ? -x : x; /* abs */
}

static void test_activations(void **state)
{
	static const char *const ops[] = {"elu", "leaky_relu", "hard_sigmoid", "hard_swish",
		"softplus", "softsign", "celu", "thresholded_relu", "shrink", "round", "abs"};
	double want[NX];

	(void)state;
	for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
		const char *attrs = strcmp(ops[o], "shrink") == 0 ? "{\"lambd\":0.7,\"bias\":0.25}"
		                                                  : "{\"alpha\":0.7}";
		mu_tensor_t *y = run1(ops[o], attrs, ref_typed("x", MU_DTYPE_F32, "[7]", xs));

		for (size_t i = 0; i < NX; i++)
			want[i] = act(ops[o], xs[i]);
		ref_close(y, want, 1e-6, 1e-6);
		mu_tensor_free(y);
	}
	/* round: halves to even */
	{
		mu_tensor_t *y = run1("round", NULL, ref_typed("x", MU_DTYPE_F32, "[4]",
		                                                (const double[]){0.5, 1.5, 2.5, -2.5}));

		ref_f_are(y, (const double[]){0, 2, 2, -2}, 4);
		mu_tensor_free(y);
	}
}

static void test_typed_unary(void **state)
{
	mu_tensor_t *y;

	(void)state;
	y = run1("neg", NULL, ref_ints("x", MU_DTYPE_I8, "[3]", (const int64_t[]){-128, 5, 0}));
	ref_i_are(y, (const int64_t[]){-128, -5, 0}, 3);  /* -(-128) wraps to itself */
	mu_tensor_free(y);
	y = run1("abs", NULL, ref_ints("x", MU_DTYPE_I32, "[2]", (const int64_t[]){-7, 7}));
	ref_i_are(y, (const int64_t[]){7, 7}, 2);
	mu_tensor_free(y);
	y = run1("sign", NULL, ref_ints("x", MU_DTYPE_I64, "[3]", (const int64_t[]){-9, 0, 4}));
	ref_i_are(y, (const int64_t[]){-1, 0, 1}, 3);
	mu_tensor_free(y);
	y = run1("relu", NULL, ref_ints("x", MU_DTYPE_I16, "[2]", (const int64_t[]){-3, 3}));
	ref_i_are(y, (const int64_t[]){0, 3}, 2);
	mu_tensor_free(y);
	y = run1("clip", "{\"min\":-2.5,\"max\":100}",
	         ref_ints("x", MU_DTYPE_I8, "[3]", (const int64_t[]){-100, 0, 120}));
	ref_i_are(y, (const int64_t[]){-2, 0, 100}, 3);      /* bounds rounded inward */
	mu_tensor_free(y);
	y = run1("clip", "{\"max\":1}", ref_typed("x", MU_DTYPE_F32, "[3]", (const double[]){-5, NAN, 3}));
	ref_f_are(y, (const double[]){-5, NAN, 1}, 3);
	mu_tensor_free(y);
	/* neg of an unsigned dtype and anything of BOOL are refused */
	{
		mu_tensor_t *x = ref_ints("x", MU_DTYPE_U8, "[1]", (const int64_t[]){1});

		assert_int_equal(ref_run("neg", NULL, &x, 1, &y, why, sizeof(why)), MU_EPROTO);
		mu_tensor_free(x);
		x = ref_ints("x", MU_DTYPE_I64, "[1]", (const int64_t[]){1});
		assert_int_equal(ref_run("sigmoid", NULL, &x, 1, &y, why, sizeof(why)), MU_EPROTO);
		mu_tensor_free(x);
	}
}

static void test_bool_ops(void **state)
{
	mu_tensor_t *y;

	(void)state;
	y = run1("not", NULL, ref_ints("x", MU_DTYPE_BOOL, "[2]", (const int64_t[]){1, 0}));
	ref_i_are(y, (const int64_t[]){0, 1}, 2);
	mu_tensor_free(y);
	y = run1("isinf", "{\"detect_negative\":0}",
	         ref_typed("x", MU_DTYPE_F64, "[4]", (const double[]){INFINITY, -INFINITY, NAN, 1}));
	assert_int_equal(y->dtype, MU_DTYPE_BOOL);
	ref_i_are(y, (const int64_t[]){1, 0, 0, 0}, 4);
	mu_tensor_free(y);
	y = run1("isnan", NULL, ref_typed("x", MU_DTYPE_F16, "[2]", (const double[]){NAN, 1}));
	ref_i_are(y, (const int64_t[]){1, 0}, 2);
	mu_tensor_free(y);
}

static void test_cast(void **state)
{
	mu_tensor_t *x, *y;

	(void)state;
	y = run1("cast", "{\"to\":\"I64\"}", ref_typed("x", MU_DTYPE_F32, "[3]", (const double[]){2.7, -2.7, 1e20}));
	assert_int_equal(y->dtype, MU_DTYPE_I64);
	ref_i_are(y, (const int64_t[]){2, -2, INT64_MAX}, 3);
	mu_tensor_free(y);
	y = run1("cast", "{\"to\":\"BF16\"}", ref_typed("x", MU_DTYPE_F64, "[1]", (const double[]){1.0 + 0x1p-7}));
	ref_f_are(y, (const double[]){1.0 + 0x1p-7}, 1);
	mu_tensor_free(y);
	y = run1("cast", "{\"to\":\"BOOL\"}", ref_ints("x", MU_DTYPE_I32, "[3]", (const int64_t[]){0, -5, 2}));
	ref_i_are(y, (const int64_t[]){0, 1, 1}, 3);
	mu_tensor_free(y);
	/* "to" must name a dtype */
	x = ref_typed("x", MU_DTYPE_F32, "[1]", NULL);
	assert_int_equal(ref_run("cast", "{\"to\":\"F8\"}", &x, 1, &y, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "cast needs \"to\""));
	assert_int_equal(ref_run("cast", NULL, &x, 1, &y, why, sizeof(why)), MU_EPROTO);
	mu_tensor_free(x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_activations),
		cmocka_unit_test(test_typed_unary),
		cmocka_unit_test(test_bool_ops),
		cmocka_unit_test(test_cast),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
