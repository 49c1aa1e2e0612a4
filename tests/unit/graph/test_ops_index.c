/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/graph/ops_index.c: embedding with integer ids,
 * gather (any axis, negative indices, an index out of range failing the
 * run), gather_elements, trilu (upper and lower, k on both sides) and pad
 * (constant, reflect, edge, cropping), each on a dtype other than F32 as
 * well, against values worked out by hand.
 */
#include "ops_ref.h"

static char why[512];

static mu_tensor_t *run2(const char *op, const char *attrs, mu_tensor_t *a, mu_tensor_t *b, int want)
{
	mu_tensor_t *in[2] = {a, b}, *y = NULL;

	assert_int_equal(ref_run(op, attrs, in, b ? 2 : 1, &y, why, sizeof(why)), want);
	mu_tensor_free(a);
	mu_tensor_free(b);
	return y;
}

static const int64_t m34[] = {0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23};

static void test_embedding_ids(void **state)
{
	mu_tensor_t *y;

	(void)state;
	y = run2("embedding", NULL, ref_ints("t", MU_DTYPE_I32, "[3,4]", m34),
	         ref_ints("ids", MU_DTYPE_I64, "[2]", (const int64_t[]){2, 0}), 0);
	assert_int_equal(y->dtype, MU_DTYPE_I32);
	ref_shape_is(y, "[2,4]");
	ref_i_are(y, (const int64_t[]){20, 21, 22, 23, 0, 1, 2, 3}, 8);
	mu_tensor_free(y);
	/* a negative id is not wrapped by embedding: the run fails */
	y = run2("embedding", NULL, ref_ints("t", MU_DTYPE_I32, "[3,4]", m34),
	         ref_ints("ids", MU_DTYPE_I32, "[1]", (const int64_t[]){-1}), MU_EPROTO);
	y = run2("embedding", NULL, ref_ints("t", MU_DTYPE_I32, "[3,4]", m34),
	         ref_ints("ids", MU_DTYPE_U8, "[1]", (const int64_t[]){1}), MU_EPROTO);
	assert_non_null(strstr(why, "must be I64, I32 or F32"));
}

static void test_gather(void **state)
{
	mu_tensor_t *y;

	(void)state;
	/* axis 1, indices [2,2] with a negative: [3, 2, 2] */
	y = run2("gather", "{\"axis\":1}", ref_ints("d", MU_DTYPE_I64, "[3,4]", m34),
	         ref_ints("i", MU_DTYPE_I64, "[2,2]", (const int64_t[]){0, -1, 2, 2}), 0);
	ref_shape_is(y, "[3,2,2]");
	ref_i_are(y, (const int64_t[]){0, 3, 2, 2, 10, 13, 12, 12, 20, 23, 22, 22}, 12);
	mu_tensor_free(y);
	/* a rank-0 index drops the axis */
	y = run2("gather", NULL, ref_typed("d", MU_DTYPE_F16, "[3,2]", (const double[]){1, 2, 3, 4, 5, 6}),
	         ref_ints("i", MU_DTYPE_I32, "[]", (const int64_t[]){-2}), 0);
	ref_shape_is(y, "[2]");
	ref_f_are(y, (const double[]){3, 4}, 2);
	mu_tensor_free(y);
	/* out of range after wrapping: the run fails, nothing clamped */
	y = run2("gather", NULL, ref_ints("d", MU_DTYPE_I64, "[3,4]", m34),
	         ref_ints("i", MU_DTYPE_I64, "[1]", (const int64_t[]){-4}), MU_EPROTO);
	y = run2("gather", NULL, ref_ints("d", MU_DTYPE_I64, "[3,4]", m34),
	         ref_typed("i", MU_DTYPE_F32, "[1]", (const double[]){1}), MU_EPROTO);
	assert_non_null(strstr(why, "must be I64 or I32"));
}

static void test_gather_elements(void **state)
{
	mu_tensor_t *y;

	(void)state;
	y = run2("gather_elements", "{\"axis\":1}", ref_ints("d", MU_DTYPE_I64, "[3,4]", m34),
	         ref_ints("i", MU_DTYPE_I64, "[3,2]", (const int64_t[]){3, 0, -1, 1, 2, 2}), 0);
	ref_i_are(y, (const int64_t[]){3, 0, 13, 11, 22, 22}, 6);
	mu_tensor_free(y);
	y = run2("gather_elements", NULL, ref_ints("d", MU_DTYPE_I64, "[3,4]", m34),
	         ref_ints("i", MU_DTYPE_I64, "[1,1]", (const int64_t[]){3}), MU_EPROTO);
}

static void test_trilu(void **state)
{
	mu_tensor_t *y;

	(void)state;
	y = run2("trilu", "{\"upper\":0}", ref_ints("x", MU_DTYPE_I64, "[3,4]", m34), NULL, 0);
	ref_i_are(y, (const int64_t[]){0, 0, 0, 0, 10, 11, 0, 0, 20, 21, 22, 0}, 12);
	mu_tensor_free(y);
	y = run2("trilu", "{\"k\":2}", ref_ints("x", MU_DTYPE_I64, "[3,4]", m34), NULL, 0);
	ref_i_are(y, (const int64_t[]){0, 0, 2, 3, 0, 0, 0, 13, 0, 0, 0, 0}, 12);
	mu_tensor_free(y);
	y = run2("trilu", "{\"upper\":0,\"k\":-1}",
	         ref_ints("x", MU_DTYPE_BOOL, "[2,2,2]", (const int64_t[]){1, 1, 1, 1, 1, 1, 1, 1}), NULL, 0);
	ref_i_are(y, (const int64_t[]){0, 0, 1, 0, 0, 0, 1, 0}, 8);
	mu_tensor_free(y);
	y = run2("trilu", NULL, ref_ints("x", MU_DTYPE_I64, "[2]", m34), NULL, MU_EPROTO);
}

static void test_pad(void **state)
{
	mu_tensor_t *y;

	(void)state;
	/* [2,3] padded 1 row before, 2 columns after, value 9 */
	y = run2("pad", "{\"pads\":[1,0,0,2],\"value\":9}",
	         ref_ints("x", MU_DTYPE_I32, "[2,3]", (const int64_t[]){1, 2, 3, 4, 5, 6}), NULL, 0);
	ref_shape_is(y, "[3,5]");
	ref_i_are(y, (const int64_t[]){9, 9, 9, 9, 9, 1, 2, 3, 9, 9, 4, 5, 6, 9, 9}, 15);
	mu_tensor_free(y);
	y = run2("pad", "{\"pads\":[0,2,0,1],\"mode\":\"reflect\"}",
	         ref_typed("x", MU_DTYPE_F32, "[1,3]", (const double[]){1, 2, 3}), NULL, 0);
	ref_f_are(y, (const double[]){3, 2, 1, 2, 3, 2}, 6);
	mu_tensor_free(y);
	y = run2("pad", "{\"pads\":[0,2,0,1],\"mode\":\"edge\"}",
	         ref_typed("x", MU_DTYPE_F32, "[1,3]", (const double[]){1, 2, 3}), NULL, 0);
	ref_f_are(y, (const double[]){1, 1, 1, 2, 3, 3}, 6);
	mu_tensor_free(y);
	/* negative pads crop */
	y = run2("pad", "{\"pads\":[0,-1,0,-1]}",
	         ref_typed("x", MU_DTYPE_F32, "[1,3]", (const double[]){1, 2, 3}), NULL, 0);
	ref_f_are(y, (const double[]){2}, 1);
	mu_tensor_free(y);
	/* reflecting past the dim, and the wrong number of pads, are refused */
	y = run2("pad", "{\"pads\":[0,3,0,0],\"mode\":\"reflect\"}",
	         ref_typed("x", MU_DTYPE_F32, "[1,3]", NULL), NULL, MU_EPROTO);
	y = run2("pad", "{\"pads\":[0,1]}", ref_typed("x", MU_DTYPE_F32, "[1,3]", NULL), NULL, MU_EPROTO);
	y = run2("pad", "{\"pads\":[0,1,0,0],\"mode\":\"wrap\"}", ref_typed("x", MU_DTYPE_F32, "[1,3]", NULL),
	         NULL, MU_EPROTO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_embedding_ids),
		cmocka_unit_test(test_gather),
		cmocka_unit_test(test_gather_elements),
		cmocka_unit_test(test_trilu),
		cmocka_unit_test(test_pad),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
