/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/graph/ops_math.c beyond F32 arithmetic (which
 * test_ops.c covers against a double reference): integer arithmetic and
 * its edges (wrapping, division by zero, INT64_MIN / -1, mod's sign),
 * unsigned comparisons, F16 rounding, F64, comparisons and logic giving
 * BOOL, where with three-way broadcasting, and the dtype rules shape
 * inference enforces.
 */
#include "ops_ref.h"

static char why[512];

/* op(a, b) on typed tensors; the result (caller frees). */
static mu_tensor_t *run2(const char *op, const char *attrs, mu_tensor_t *a, mu_tensor_t *b)
{
	mu_tensor_t *in[2] = {a, b}, *y;

	assert_int_equal(ref_run(op, attrs, in, 2, &y, why, sizeof(why)), 0);
	mu_tensor_free(a);
	mu_tensor_free(b);
	return y;
}

static void test_int_arith(void **state)
{
	const int64_t a[] = {7, -7, 7, -7, INT64_MIN, 5, 3}, b[] = {2, 2, -2, -2, -1, 0, 0};
	const int64_t div[] = {3, -3, -3, 3, INT64_MIN, 0, 0};
	const int64_t mod[] = {1, 1, -1, -1, 0, 0, 0};     /* the divisor's sign */
	const int64_t fmod_[] = {1, -1, 1, -1, 0, 0, 0};   /* the dividend's */
	const int64_t i8a[] = {127, -128, 100}, i8b[] = {1, -1, 100};
	mu_tensor_t *y;

	(void)state;
	y = run2("div", NULL, ref_ints("a", MU_DTYPE_I64, "[7]", a), ref_ints("b", MU_DTYPE_I64, "[7]", b));
	assert_int_equal(y->dtype, MU_DTYPE_I64);
	ref_i_are(y, div, 7);
	mu_tensor_free(y);
	y = run2("mod", NULL, ref_ints("a", MU_DTYPE_I64, "[7]", a), ref_ints("b", MU_DTYPE_I64, "[7]", b));
	ref_i_are(y, mod, 7);
	mu_tensor_free(y);
	y = run2("mod", "{\"fmod\":1}", ref_ints("a", MU_DTYPE_I64, "[7]", a),
	         ref_ints("b", MU_DTYPE_I64, "[7]", b));
	ref_i_are(y, fmod_, 7);
	mu_tensor_free(y);
	/* I8 wraps: 127 + 1, -128 - 1 (as -128 + -1), 100 * 100 = 10000 mod 256 */
	y = run2("add", NULL, ref_ints("a", MU_DTYPE_I8, "[3]", i8a), ref_ints("b", MU_DTYPE_I8, "[3]", i8b));
	ref_i_are(y, (const int64_t[]){-128, 127, -56}, 3);
	mu_tensor_free(y);
	y = run2("mul", NULL, ref_ints("a", MU_DTYPE_I8, "[3]", i8a), ref_ints("b", MU_DTYPE_I8, "[3]", i8b));
	ref_i_are(y, (const int64_t[]){127, -128, 16}, 3);
	mu_tensor_free(y);
	/* integer pow: 3^4, (-2)^3, 2^-1 = 0, (-1)^-3 = -1 */
	y = run2("pow", NULL, ref_ints("a", MU_DTYPE_I32, "[4]", (const int64_t[]){3, -2, 2, -1}),
	         ref_ints("b", MU_DTYPE_I32, "[4]", (const int64_t[]){4, 3, -1, -3}));
	ref_i_are(y, (const int64_t[]){81, -8, 0, -1}, 4);
	mu_tensor_free(y);
}

static void test_unsigned(void **state)
{
	const int64_t a[] = {-1, 5, 0}, b[] = {1, 7, 0};  /* -1 is UINT64_MAX's bits */
	mu_tensor_t *y;

	(void)state;
	y = run2("greater", NULL, ref_ints("a", MU_DTYPE_U64, "[3]", a), ref_ints("b", MU_DTYPE_U64, "[3]", b));
	assert_int_equal(y->dtype, MU_DTYPE_BOOL);
	ref_i_are(y, (const int64_t[]){1, 0, 0}, 3);     /* UINT64_MAX > 1 */
	mu_tensor_free(y);
	y = run2("div", NULL, ref_ints("a", MU_DTYPE_U64, "[3]", a), ref_ints("b", MU_DTYPE_U64, "[3]", b));
	ref_i_are(y, (const int64_t[]){-1, 0, 0}, 3);    /* UINT64_MAX / 1, 5 / 7, 0 / 0 */
	mu_tensor_free(y);
	y = run2("max", NULL, ref_ints("a", MU_DTYPE_U8, "[3]", (const int64_t[]){200, 3, 0}),
	         ref_ints("b", MU_DTYPE_U8, "[3]", (const int64_t[]){100, 4, 0}));
	ref_i_are(y, (const int64_t[]){200, 4, 0}, 3);
	mu_tensor_free(y);
}

static void test_floats(void **state)
{
	mu_tensor_t *y;

	(void)state;
	/* F16: each result rounded to F16 (2049 is not a half; 2048 + 1 ties
	 * to 2048) */
	y = run2("add", NULL, ref_typed("a", MU_DTYPE_F16, "[2]", (const double[]){2048, 0.1}),
	         ref_typed("b", MU_DTYPE_F16, "[2]", (const double[]){1, 0.2}));
	assert_int_equal(y->dtype, MU_DTYPE_F16);
	ref_f_are(y, (const double[]){2048, 0.2998046875}, 2);
	mu_tensor_free(y);
	/* F64 keeps double precision */
	y = run2("sub", NULL, ref_typed("a", MU_DTYPE_F64, "[1]", (const double[]){1.0 + 0x1p-40}),
	         ref_typed("b", MU_DTYPE_F64, "[1]", (const double[]){1.0}));
	ref_f_are(y, (const double[]){0x1p-40}, 1);
	mu_tensor_free(y);
	/* min and max carry NaN; prelu scales negatives */
	y = run2("min", NULL, ref_typed("a", MU_DTYPE_F32, "[3]", (const double[]){NAN, 1, -2}),
	         ref_typed("b", MU_DTYPE_F32, "[3]", (const double[]){0, NAN, 5}));
	ref_f_are(y, (const double[]){NAN, NAN, -2}, 3);
	mu_tensor_free(y);
	y = run2("prelu", NULL, ref_typed("a", MU_DTYPE_F32, "[2,2]", (const double[]){-2, 3, -4, 5}),
	         ref_typed("b", MU_DTYPE_F32, "[2]", (const double[]){0.5, 2}));
	ref_f_are(y, (const double[]){-1, 3, -2, 5}, 4);
	mu_tensor_free(y);
	/* float mod: Python's sign rule, or fmod's */
	y = run2("mod", NULL, ref_typed("a", MU_DTYPE_F32, "[2]", (const double[]){-7, 7}),
	         ref_typed("b", MU_DTYPE_F32, "[2]", (const double[]){2, -2}));
	ref_f_are(y, (const double[]){1, -1}, 2);
	mu_tensor_free(y);
}

static void test_compare_logic(void **state)
{
	mu_tensor_t *y;

	(void)state;
	y = run2("less_equal", NULL, ref_typed("a", MU_DTYPE_F32, "[2,1]", (const double[]){1, NAN}),
	         ref_typed("b", MU_DTYPE_F32, "[3]", (const double[]){0, 1, 2}));
	ref_shape_is(y, "[2,3]");
	ref_i_are(y, (const int64_t[]){0, 1, 1, 0, 0, 0}, 6); /* NaN compares false */
	mu_tensor_free(y);
	y = run2("equal", NULL, ref_ints("a", MU_DTYPE_BOOL, "[2]", (const int64_t[]){1, 0}),
	         ref_ints("b", MU_DTYPE_BOOL, "[2]", (const int64_t[]){1, 1}));
	ref_i_are(y, (const int64_t[]){1, 0}, 2);
	mu_tensor_free(y);
	y = run2("xor", NULL, ref_ints("a", MU_DTYPE_BOOL, "[4]", (const int64_t[]){0, 0, 1, 1}),
	         ref_ints("b", MU_DTYPE_BOOL, "[4]", (const int64_t[]){0, 1, 0, 1}));
	ref_i_are(y, (const int64_t[]){0, 1, 1, 0}, 4);
	mu_tensor_free(y);
}

static void test_where(void **state)
{
	mu_tensor_t *in[3], *y;

	(void)state;
	/* cond [2,1] x [3] y [] -> [2,3] */
	in[0] = ref_ints("c", MU_DTYPE_BOOL, "[2,1]", (const int64_t[]){1, 0});
	in[1] = ref_ints("x", MU_DTYPE_I64, "[3]", (const int64_t[]){1, 2, 3});
	in[2] = ref_ints("y", MU_DTYPE_I64, "[]", (const int64_t[]){-9});
	assert_int_equal(ref_run("where", NULL, in, 3, &y, why, sizeof(why)), 0);
	assert_int_equal(y->dtype, MU_DTYPE_I64);
	ref_shape_is(y, "[2,3]");
	ref_i_are(y, (const int64_t[]){1, 2, 3, -9, -9, -9}, 6);
	mu_tensor_free(y);
	/* the condition must be BOOL, the choices of one dtype */
	mu_tensor_free(in[2]);
	in[2] = ref_typed("y", MU_DTYPE_F32, "[]", (const double[]){0});
	assert_int_equal(ref_run("where", NULL, in, 3, &y, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "differ in dtype"));
	mu_tensor_free(in[0]);
	in[0] = ref_typed("c", MU_DTYPE_F32, "[2,1]", (const double[]){1, 0});
	assert_int_equal(ref_run("where", NULL, in, 3, &y, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "must be BOOL"));
	for (int i = 0; i < 3; i++)
		mu_tensor_free(in[i]);
}

static void test_dtype_rules(void **state)
{
	mu_tensor_t *in[2], *y;

	(void)state;
	in[0] = ref_ints("a", MU_DTYPE_I64, "[2]", (const int64_t[]){1, 2});
	in[1] = ref_typed("b", MU_DTYPE_F32, "[2]", (const double[]){1, 2});
	assert_int_equal(ref_run("add", NULL, in, 2, &y, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "is I64 and the other operand F32"));
	/* an F32-only op refuses I64 with the dtype named */
	assert_int_equal(ref_run("matmul", NULL, in, 2, &y, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "matmul computes in F32, and in0 is I64"));
	mu_tensor_free(in[1]);
	in[1] = ref_ints("b", MU_DTYPE_I64, "[2]", (const int64_t[]){1, 2});
	assert_int_equal(ref_run("and", NULL, in, 2, &y, why, sizeof(why)), MU_EPROTO);
	mu_tensor_free(in[0]);
	mu_tensor_free(in[1]);
	in[0] = ref_ints("a", MU_DTYPE_BOOL, "[2]", (const int64_t[]){1, 0});
	in[1] = ref_ints("b", MU_DTYPE_BOOL, "[2]", (const int64_t[]){1, 0});
	assert_int_equal(ref_run("add", NULL, in, 2, &y, why, sizeof(why)), MU_EPROTO);
	assert_int_equal(ref_run("less", NULL, in, 2, &y, why, sizeof(why)), MU_EPROTO);
	mu_tensor_free(in[0]);
	mu_tensor_free(in[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_int_arith),
		cmocka_unit_test(test_unsigned),
		cmocka_unit_test(test_floats),
		cmocka_unit_test(test_compare_logic),
		cmocka_unit_test(test_where),
		cmocka_unit_test(test_dtype_rules),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
