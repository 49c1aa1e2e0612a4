/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/graph/ops_scatter.c: scatter_elements (negative
 * indices, duplicates with the last write winning, add and mul),
 * gather_nd (with batch dims) and scatter_nd, reverse_sequence, and the
 * indices that fail the run.
 */
#include "ops_ref.h"

static char why[512];

static mu_tensor_t *run(const char *op, const char *attrs, mu_tensor_t *a, mu_tensor_t *b,
                        mu_tensor_t *c, int want)
{
	mu_tensor_t *in[3] = {a, b, c}, *y = NULL;

	assert_int_equal(ref_run(op, attrs, in, c ? 3 : 2, &y, why, sizeof(why)), want);
	mu_tensor_free(a);
	mu_tensor_free(b);
	mu_tensor_free(c);
	return y;
}

static void test_scatter_elements(void **state)
{
	mu_tensor_t *y;

	(void)state;
	/* [2,3] zeros; axis 1; index -1 is column 2; row 1 writes column 0 twice */
	y = run("scatter_elements", "{\"axis\":1}", ref_ints("d", MU_DTYPE_I32, "[2,3]", (const int64_t[]){0, 0, 0, 0, 0, 0}),
	        ref_ints("i", MU_DTYPE_I64, "[2,2]", (const int64_t[]){-1, 1, 0, 0}),
	        ref_ints("u", MU_DTYPE_I32, "[2,2]", (const int64_t[]){5, 6, 7, 8}), 0);
	ref_i_are(y, (const int64_t[]){0, 6, 5, 8, 0, 0}, 6);   /* the last write wins */
	mu_tensor_free(y);
	y = run("scatter_elements", "{\"axis\":1,\"reduction\":\"add\"}",
	        ref_typed("d", MU_DTYPE_F32, "[2,3]", (const double[]){1, 1, 1, 1, 1, 1}),
	        ref_ints("i", MU_DTYPE_I32, "[2,2]", (const int64_t[]){-1, 1, 0, 0}),
	        ref_typed("u", MU_DTYPE_F32, "[2,2]", (const double[]){5, 6, 7, 8}), 0);
	ref_f_are(y, (const double[]){1, 7, 6, 16, 1, 1}, 6);
	mu_tensor_free(y);
	y = run("scatter_elements", "{\"reduction\":\"mul\"}",
	        ref_typed("d", MU_DTYPE_F32, "[2,1]", (const double[]){2, 3}),
	        ref_ints("i", MU_DTYPE_I64, "[2,1]", (const int64_t[]){1, 1}),
	        ref_typed("u", MU_DTYPE_F32, "[2,1]", (const double[]){5, 7}), 0);
	ref_f_are(y, (const double[]){2, 105}, 2);
	mu_tensor_free(y);
	y = run("scatter_elements", NULL, ref_typed("d", MU_DTYPE_F32, "[2]", NULL),
	        ref_ints("i", MU_DTYPE_I64, "[1]", (const int64_t[]){2}), ref_typed("u", MU_DTYPE_F32, "[1]", NULL),
	        MU_EPROTO);
	y = run("scatter_elements", "{\"reduction\":\"max\"}", ref_typed("d", MU_DTYPE_F32, "[2]", NULL),
	        ref_ints("i", MU_DTYPE_I64, "[1]", (const int64_t[]){0}), ref_typed("u", MU_DTYPE_F32, "[1]", NULL),
	        MU_EPROTO);
}

static void test_nd(void **state)
{
	const int64_t d[] = {0, 1, 2, 3, 4, 5, 6, 7};    /* [2,2,2] */
	mu_tensor_t *y;

	(void)state;
	/* indices [2,2]: two pairs, each picking a row of 2 */
	y = run("gather_nd", NULL, ref_ints("d", MU_DTYPE_I64, "[2,2,2]", d),
	        ref_ints("i", MU_DTYPE_I64, "[2,2]", (const int64_t[]){0, 1, 1, -2}), NULL, 0);
	ref_shape_is(y, "[2,2]");
	ref_i_are(y, (const int64_t[]){2, 3, 4, 5}, 4);
	mu_tensor_free(y);
	/* batch_dims 1: each batch picks within its own [2,2] */
	y = run("gather_nd", "{\"batch_dims\":1}", ref_ints("d", MU_DTYPE_I64, "[2,2,2]", d),
	        ref_ints("i", MU_DTYPE_I64, "[2,1,2]", (const int64_t[]){1, 1, 0, 1}), NULL, 0);
	ref_shape_is(y, "[2,1]");
	ref_i_are(y, (const int64_t[]){3, 5}, 2);
	mu_tensor_free(y);
	y = run("scatter_nd", "{\"reduction\":\"add\"}", ref_ints("d", MU_DTYPE_I64, "[2,2,2]", d),
	        ref_ints("i", MU_DTYPE_I64, "[2,1]", (const int64_t[]){1, 1}),
	        ref_ints("u", MU_DTYPE_I64, "[2,2,2]", (const int64_t[]){1, 1, 1, 1, 10, 10, 10, 10}), 0);
	ref_i_are(y, (const int64_t[]){0, 1, 2, 3, 15, 16, 17, 18}, 8);
	mu_tensor_free(y);
	y = run("gather_nd", NULL, ref_ints("d", MU_DTYPE_I64, "[2,2,2]", d),
	        ref_ints("i", MU_DTYPE_I64, "[1,2]", (const int64_t[]){0, 2}), NULL, MU_EPROTO);
}

static void test_reverse_sequence(void **state)
{
	mu_tensor_t *y;

	(void)state;
	/* time along axis 0, batch along axis 1: column b reversed over its first lens[b] rows */
	y = run("reverse_sequence", NULL,
	        ref_ints("x", MU_DTYPE_I32, "[3,2]", (const int64_t[]){1, 10, 2, 20, 3, 30}),
	        ref_ints("l", MU_DTYPE_I64, "[2]", (const int64_t[]){3, 2}), NULL, 0);
	ref_i_are(y, (const int64_t[]){3, 20, 2, 10, 1, 30}, 6);
	mu_tensor_free(y);
	y = run("reverse_sequence", NULL, ref_ints("x", MU_DTYPE_I32, "[3,2]", (const int64_t[]){1, 1, 1, 1, 1, 1}),
	        ref_ints("l", MU_DTYPE_I64, "[2]", (const int64_t[]){4, 0}), NULL, MU_EPROTO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scatter_elements),
		cmocka_unit_test(test_nd),
		cmocka_unit_test(test_reverse_sequence),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
