/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the ops of src/graph/ops_nn.c that test_ops.c does not
 * cover: batchnorm, instance_norm and lrn against their formulas computed
 * here in double, and det against determinants worked out by hand.
 */
#include "ops_ref.h"

static char why[512];

static void test_batchnorm(void **state)
{
	mu_tensor_t *in[5], *y;
	double want[8];

	(void)state;
	in[0] = ref_typed("x", MU_DTYPE_F32, "[1,2,2,2]", (const double[]){1, 2, 3, 4, 5, 6, 7, 8});
	in[1] = ref_typed("s", MU_DTYPE_F32, "[2]", (const double[]){2, 0.5});
	in[2] = ref_typed("b", MU_DTYPE_F32, "[2]", (const double[]){1, -1});
	in[3] = ref_typed("m", MU_DTYPE_F32, "[2]", (const double[]){2, 6});
	in[4] = ref_typed("v", MU_DTYPE_F32, "[2]", (const double[]){4, 1});
	assert_int_equal(ref_run("batchnorm", "{\"epsilon\":0}", in, 5, &y, why, sizeof(why)), 0);
	for (int i = 0; i < 8; i++) {
		int c = i / 4;
		double x = i + 1, m = c ? 6 : 2, v = c ? 1 : 4, s = c ? 0.5 : 2, b = c ? -1 : 1;

		want[i] = (x - m) / sqrt(v) * s + b;
	}
	ref_close(y, want, 1e-6, 1e-6);
	mu_tensor_free(y);
	/* instance_norm: each channel's own statistics */
	assert_int_equal(ref_run("instance_norm", "{\"epsilon\":0}", in, 3, &y, why, sizeof(why)), 0);
	for (int c = 0; c < 2; c++)
		for (int i = 0; i < 4; i++) {
			double mean = 4 * c + 2.5, var = 1.25, s = c ? 0.5 : 2, b = c ? -1 : 1;

			want[c * 4 + i] = (4 * c + i + 1 - mean) / sqrt(var) * s + b;
		}
	ref_close(y, want, 1e-6, 1e-6);
	mu_tensor_free(y);
	/* one value per channel, or refused */
	mu_tensor_free(in[4]);
	in[4] = ref_typed("v", MU_DTYPE_F32, "[3]", NULL);
	assert_int_equal(ref_run("batchnorm", NULL, in, 5, &y, why, sizeof(why)), MU_EPROTO);
	for (int i = 0; i < 5; i++)
		mu_tensor_free(in[i]);
}

static void test_lrn(void **state)
{
	const double v[] = {1, 2, 3, 4};  /* [1,4,1,1]: four channels */
	mu_tensor_t *x = ref_typed("x", MU_DTYPE_F32, "[1,4,1,1]", v), *y;
	double want[4];

	(void)state;
	/* size 3: channels c-1..c+1 */
	assert_int_equal(ref_run("lrn", "{\"size\":3,\"alpha\":0.3,\"beta\":0.5,\"bias\":2}", &x, 1, &y, why,
	                         sizeof(why)), 0);
	for (int c = 0; c < 4; c++) {
		double ss = 0;

		for (int q = c - 1; q <= c + 1; q++)
			if (q >= 0 && q < 4)
				ss += v[q] * v[q];
		want[c] = v[c] / pow(2 + 0.3 / 3 * ss, 0.5);
	}
	ref_close(y, want, 1e-6, 1e-6);
	mu_tensor_free(y);
	assert_int_equal(ref_run("lrn", "{\"size\":0}", &x, 1, &y, why, sizeof(why)), MU_EPROTO);
	mu_tensor_free(x);
}

static void test_det(void **state)
{
	mu_tensor_t *x, *y;

	(void)state;
	/* [[2, 1], [4, 3]] = 2; a row swap: [[0, 1], [1, 0]] = -1; singular: 0 */
	x = ref_typed("x", MU_DTYPE_F32, "[3,2,2]", (const double[]){2, 1, 4, 3, 0, 1, 1, 0, 1, 2, 2, 4});
	assert_int_equal(ref_run("det", NULL, &x, 1, &y, why, sizeof(why)), 0);
	ref_shape_is(y, "[3]");
	ref_close(y, (const double[]){2, -1, 0}, 1e-6, 1e-6);
	mu_tensor_free(y);
	mu_tensor_free(x);
	x = ref_typed("x", MU_DTYPE_F32, "[3,3]", (const double[]){6, 1, 1, 4, -2, 5, 2, 8, 7});
	assert_int_equal(ref_run("det", NULL, &x, 1, &y, why, sizeof(why)), 0);
	ref_close(y, (const double[]){-306}, 1e-4, 1e-6);
	mu_tensor_free(y);
	mu_tensor_free(x);
	x = ref_typed("x", MU_DTYPE_F32, "[2,3]", NULL);
	assert_int_equal(ref_run("det", NULL, &x, 1, &y, why, sizeof(why)), MU_EPROTO);
	mu_tensor_free(x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_batchnorm),
		cmocka_unit_test(test_lrn),
		cmocka_unit_test(test_det),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
