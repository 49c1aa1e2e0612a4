/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/graph/ops_resize.c: nearest (each coordinate
 * transformation and rounding), linear and cubic against ONNX's formulas
 * worked out here, exclude_outside, tf_crop_and_resize's extrapolation,
 * and the refusals.
 */
#include "ops_ref.h"

static char why[512];

static void test_resize(void **state)
{
	mu_tensor_t *x, *y;

	(void)state;
	x = ref_typed("x", MU_DTYPE_F32, "[1,1,1,4]", (const double[]){10, 20, 30, 40});
	/* 4 -> 8, asymmetric + floor (torch's nearest): each repeated twice */
	assert_int_equal(ref_run("resize", "{\"sizes\":[1,1,1,8],\"coordinate_transformation_mode\":"
	                         "\"asymmetric\",\"nearest_mode\":\"floor\"}", &x, 1, &y, why, sizeof(why)), 0);
	ref_f_are(y, (const double[]){10, 10, 20, 20, 30, 30, 40, 40}, 8);
	mu_tensor_free(y);
	/* 4 -> 3 half_pixel, round_prefer_floor: x = (o + 0.5) * 4/3 - 0.5 = 0.17, 1.5, 2.83 */
	assert_int_equal(ref_run("resize", "{\"sizes\":[1,1,1,3]}", &x, 1, &y, why, sizeof(why)), 0);
	ref_f_are(y, (const double[]){10, 20, 40}, 3);
	mu_tensor_free(y);
	assert_int_equal(ref_run("resize", "{\"sizes\":[1,1,1,3],\"nearest_mode\":\"round_prefer_ceil\"}",
	                         &x, 1, &y, why, sizeof(why)), 0);
	ref_f_are(y, (const double[]){10, 30, 40}, 3);
	mu_tensor_free(y);
	/* align_corners 4 -> 7: x = o * 3/6 */
	assert_int_equal(ref_run("resize", "{\"sizes\":[1,1,1,7],\"coordinate_transformation_mode\":"
	                         "\"align_corners\"}", &x, 1, &y, why, sizeof(why)), 0);
	ref_f_are(y, (const double[]){10, 10, 20, 20, 30, 30, 40}, 7); /* 0.5 -> 0 (prefer floor) */
	mu_tensor_free(y);
	assert_int_equal(ref_run("resize", "{\"sizes\":[1,1,1,3],\"nearest_mode\":\"up\"}", &x, 1, &y,
	                         why, sizeof(why)), MU_EPROTO);
	assert_int_equal(ref_run("resize", "{\"sizes\":[1,8]}", &x, 1, &y, why, sizeof(why)), MU_EPROTO);
	mu_tensor_free(x);
}

/* linear and cubic along one dim of 4 -> 8, half_pixel: x = (o + 0.5) / 2 - 0.5 */
static void test_interpolate(void **state)
{
	const double v[] = {10, 20, 40, 80};
	double want[8];
	mu_tensor_t *x, *y;

	(void)state;
	x = ref_typed("x", MU_DTYPE_F32, "[1,4]", v);
	assert_int_equal(ref_run("resize", "{\"sizes\":[1,8],\"mode\":\"linear\"}", &x, 1, &y, why,
	                         sizeof(why)), 0);
	for (int o = 0; o < 8; o++) {
		double c = (o + 0.5) / 2 - 0.5, f = floor(c), r = c - f;
		int a = (int)f < 0 ? 0 : (int)f, b = (int)f + 1 > 3 ? 3 : (int)f + 1;

		want[o] = (1 - r) * v[a] + r * v[b];
	}
	ref_close(y, want, 1e-5, 1e-6);
	mu_tensor_free(y);
	/* cubic, a = -0.5, with exclude_outside: the taps outside weigh 0 and
	 * the rest are renormalized */
	assert_int_equal(ref_run("resize", "{\"sizes\":[1,8],\"mode\":\"cubic\",\"cubic_coeff_a\":-0.5,"
	                         "\"exclude_outside\":1}", &x, 1, &y, why, sizeof(why)), 0);
	for (int o = 0; o < 8; o++) {
		double c = (o + 0.5) / 2 - 0.5, base = ceil(c) - 1, r = c - base, q = 1 - r, a = -0.5, s = 0,
		       w[4], acc = 0;

		w[0] = ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a;
		w[1] = ((a + 2) * r - (a + 3)) * r * r + 1;
		w[2] = ((a + 2) * q - (a + 3)) * q * q + 1;
		w[3] = ((a * (q + 1) - 5 * a) * (q + 1) + 8 * a) * (q + 1) - 4 * a;
		for (int i = 0; i < 4; i++) {
			int at = (int)base - 1 + i;

			if (at < 0 || at > 3)
				w[i] = 0;
			s += w[i];
		}
		for (int i = 0; i < 4; i++) {
			int at = (int)base - 1 + i;

			acc += w[i] / s * v[at < 0 ? 0 : at > 3 ? 3 : at];
		}
		want[o] = acc;
	}
	ref_close(y, want, 1e-5, 1e-6);
	mu_tensor_free(y);
	/* tf_crop_and_resize over [0.25, 0.75] of the row, 4 -> 3: the middle
	 * output is x = 1.5 (linear), the ends 0.75 and 2.25; past the end of
	 * the input the extrapolation value */
	assert_int_equal(ref_run("resize", "{\"sizes\":[1,3],\"mode\":\"linear\",\"coordinate_"
	                         "transformation_mode\":\"tf_crop_and_resize\",\"roi\":[0,0.25,1,0.75]}",
	                         &x, 1, &y, why, sizeof(why)), 0);
	ref_close(y, (const double[]){17.5, 30, 50}, 1e-5, 1e-6);
	mu_tensor_free(y);
	assert_int_equal(ref_run("resize", "{\"sizes\":[1,2],\"mode\":\"nearest\",\"coordinate_"
	                         "transformation_mode\":\"tf_crop_and_resize\",\"roi\":[0,0.5,1,1.5],"
	                         "\"extrapolation_value\":-1}", &x, 1, &y, why, sizeof(why)), 0);
	ref_f_are(y, (const double[]){20, -1}, 2);
	mu_tensor_free(y);
	mu_tensor_free(x);
	/* interpolating integers is refused */
	x = ref_ints("x", MU_DTYPE_I32, "[1,4]", (const int64_t[]){1, 2, 3, 4});
	assert_int_equal(ref_run("resize", "{\"sizes\":[1,8],\"mode\":\"linear\"}", &x, 1, &y, why,
	                         sizeof(why)), MU_EPROTO);
	assert_int_equal(ref_run("resize", "{\"sizes\":[1,8]}", &x, 1, &y, why, sizeof(why)), 0);
	ref_i_are(y, (const int64_t[]){1, 1, 2, 2, 3, 3, 4, 4}, 8);
	mu_tensor_free(y);
	mu_tensor_free(x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_resize),
		cmocka_unit_test(test_interpolate),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
