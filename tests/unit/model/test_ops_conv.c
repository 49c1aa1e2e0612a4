/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/model/ops_conv.c: conv (im2col + sgemm, and the
 * direct 1x1 path) against a direct convolution computed here in double,
 * over 1, 2 and 3 spatial dims with groups, dilations, asymmetric pads and
 * strides; maxpool (with its indices, ceil_mode, NaN) and avgpool (with
 * and without the padding counted) against windows walked here; resize's
 * nearest modes against ONNX's formulas; and the refusals.
 */
#include "ops_ref.h"
#include "model/ops_int.h"

static char why[512];

/* A direct convolution: for every output element the sum over its
 * group's input channels and kernel taps inside the input. */
static void conv_ref(const mu_tensor_t *x, const mu_tensor_t *w, const mu_tensor_t *b, int group,
                     const int *st, const int *pd, const int *dl, const mu_tensor_t *y, double *ref)
{
	int k = (int)x->rank - 2;
	uint64_t c[MU_TENSOR_MAX_RANK], wi[MU_TENSOR_MAX_RANK], cg = x->dims[1] / (uint64_t)group;
	uint64_t mg = w->dims[0] / (uint64_t)group, taps = 1;

	for (int d = 0; d < k; d++)
		taps *= w->dims[2 + d];
	for (uint64_t e = 0; e < y->numel; e++) {
		double acc;

		ref_coords(y->dims, y->rank, e, c);
		acc = b != NULL ? b->data[c[1]] : 0;
		for (uint64_t ci = 0; ci < cg; ci++)
			for (uint64_t t = 0; t < taps; t++) {
				uint64_t xo = 0, wo;
				int inside = 1;

				ref_coords(w->dims + 2, (uint32_t)k, t, wi);
				for (int d = 0; d < k; d++) {
					int64_t pos = (int64_t)c[2 + d] * st[d] - pd[d] + (int64_t)wi[d] * dl[d];

					inside &= pos >= 0 && pos < (int64_t)x->dims[2 + d];
					xo = xo * x->dims[2 + d] + (uint64_t)(pos < 0 ? 0 : pos);
				}
				if (!inside)
					continue;
				xo += (c[0] * x->dims[1] + c[1] / mg * cg + ci) * (x->numel / x->dims[0] / x->dims[1]);
				wo = (c[1] * cg + ci) * taps + t;
				acc += (double)x->data[xo] * w->data[wo];
			}
		ref[e] = acc;
	}
}

static void check_conv(const char *xs, const char *ws, int bias, int group, const int *st,
                       const int *pd, const int *dl, const char *want_shape)
{
	char attrs[256];
	mu_tensor_t *in[3], *y;
	int k;
	double *ref;

	in[0] = ref_tensor("x", xs);
	in[1] = ref_tensor("w", ws);
	k = (int)in[0]->rank - 2;
	in[2] = NULL;
	if (bias) { /* one per output channel */
		uint64_t d = in[1]->dims[0];

		assert_int_equal(mu_tensor_new("b", 1, &d, &in[2]), 0);
		for (uint64_t i = 0; i < d; i++)
			in[2]->data[i] = ref_rand();
	}
	if (k == 1)
		snprintf(attrs, sizeof(attrs), "{\"group\":%d,\"strides\":[%d],\"pads\":[%d,%d],\"dilations\":[%d]}",
		         group, st[0], pd[0], pd[1], dl[0]);
	else if (k == 2)
		snprintf(attrs, sizeof(attrs), "{\"group\":%d,\"strides\":[%d,%d],\"pads\":[%d,%d,%d,%d],"
		         "\"dilations\":[%d,%d]}", group, st[0], st[1], pd[0], pd[1], pd[2], pd[3], dl[0], dl[1]);
	else
		snprintf(attrs, sizeof(attrs), "{\"group\":%d,\"strides\":[%d,%d,%d],\"pads\":[%d,%d,%d,%d,%d,%d],"
		         "\"dilations\":[%d,%d,%d]}", group, st[0], st[1], st[2], pd[0], pd[1], pd[2], pd[3],
		         pd[4], pd[5], dl[0], dl[1], dl[2]);
	assert_int_equal(ref_run("conv", attrs, in, bias ? 3 : 2, &y, why, sizeof(why)), 0);
	ref_shape_is(y, want_shape);
	ref = calloc(y->numel + 1, sizeof(double));
	conv_ref(in[0], in[1], in[2], group, st, pd, dl, y, ref);
	ref_close(y, ref, 1e-4, 1e-5);
	free(ref);
	mu_tensor_free(y);
	for (int i = 0; i < 3; i++)
		mu_tensor_free(in[i]);
}

static void test_conv(void **state)
{
	(void)state;
	/* 2-D: groups 2, stride 2, dilation 2, asymmetric pads (begin 1, 0; end 2, 1) */
	check_conv("[2,4,9,8]", "[6,2,3,3]", 1, 2, (const int[]){2, 2}, (const int[]){1, 0, 2, 1},
	           (const int[]){2, 2}, "[2,6,4,3]");
	/* 1x1, unit strides, no pads: the direct path */
	check_conv("[1,5,4,6]", "[3,5,1,1]", 1, 1, (const int[]){1, 1}, (const int[]){0, 0, 0, 0},
	           (const int[]){1, 1}, "[1,3,4,6]");
	/* depthwise (group = channels), same padding */
	check_conv("[1,6,7,7]", "[6,1,3,3]", 0, 6, (const int[]){1, 1}, (const int[]){1, 1, 1, 1},
	           (const int[]){1, 1}, "[1,6,7,7]");
	/* 1-D and 3-D */
	check_conv("[2,2,11]", "[4,2,3]", 1, 1, (const int[]){3}, (const int[]){2, 1}, (const int[]){1},
	           "[2,4,4]");
	check_conv("[1,2,4,5,6]", "[6,1,2,2,3]", 0, 2, (const int[]){1, 2, 1},
	           (const int[]){0, 1, 1, 1, 0, 0}, (const int[]){1, 1, 2}, "[1,6,4,3,3]");
}

static void test_conv_errors(void **state)
{
	mu_tensor_t *in[3], *y;

	(void)state;
	in[0] = ref_tensor("x", "[1,4,5,5]");
	in[1] = ref_tensor("w", "[6,3,3,3]");    /* 3 input channels per group: no group divides */
	assert_int_equal(ref_run("conv", NULL, in, 2, &y, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "do not fit in0"));
	assert_int_equal(ref_run("conv", "{\"group\":3}", in, 2, &y, why, sizeof(why)), MU_EPROTO);
	mu_tensor_free(in[1]);
	in[1] = ref_tensor("w", "[6,4,7,7]");    /* larger than the input */
	assert_int_equal(ref_run("conv", NULL, in, 2, &y, why, sizeof(why)), MU_EPROTO);
	assert_int_equal(ref_run("conv", "{\"pads\":[1,1,1,1]}", in, 2, &y, why, sizeof(why)), 0);
	ref_shape_is(y, "[1,6,1,1]");
	mu_tensor_free(y);
	assert_int_equal(ref_run("conv", "{\"pads\":[-1,0,0,0]}", in, 2, &y, why, sizeof(why)), MU_EPROTO);
	assert_int_equal(ref_run("conv", "{\"kernel_shape\":[3,3]}", in, 2, &y, why, sizeof(why)), MU_EPROTO);
	mu_tensor_free(in[0]);
	mu_tensor_free(in[1]);
}

/* maxpool with its indices: a node with two outputs, run as the executor
 * would */
static void maxpool2(const char *attrs, mu_tensor_t *x, mu_tensor_t **y, mu_tensor_t **idx)
{
	static char nname[] = "mp", o0[] = "y", o1[] = "i", i0[] = "x";
	char *ins[1] = {i0}, *outs[2] = {o0, o1};
	mu__shape_t si, so[2];
	mu_tensor_t *out[2];
	mu__node_t n;

	memset(&n, 0, sizeof(n));
	n.name = nname;
	n.op = mu__op_find("maxpool");
	n.in = ins;
	n.nin = 1;
	n.out = outs;
	n.nout = 2;
	n.attrs = cJSON_Parse(attrs);
	assert_int_equal(n.op->check(&n, why, sizeof(why)), 0);
	mu__shape_of(x, &si);
	assert_int_equal(mu__op_shape(&n, &si, so, why, sizeof(why)), 0);
	assert_int_equal(so[1].dtype, MU_DTYPE_I64);
	for (int j = 0; j < 2; j++)
		assert_int_equal(mu_tensor_new_typed(outs[j], so[j].dtype, so[j].rank, so[j].dims, &out[j]), 0);
	assert_int_equal(n.op->run(&n, &x, out), 0);
	*y = out[0];
	*idx = out[1];
	cJSON_Delete(n.attrs);
}

static void test_pools(void **state)
{
	/* a 4x4 plane 0..15 with a NaN at (3, 0) */
	double v[16];
	mu_tensor_t *x, *y, *idx;

	(void)state;
	for (int i = 0; i < 16; i++)
		v[i] = i;
	v[12] = NAN;
	x = ref_typed("x", MU_DTYPE_F32, "[1,1,4,4]", v);
	/* k3 s2 ceil: windows at 0 and 2 each way, the last running off the edge */
	maxpool2("{\"kernel_shape\":[3,3],\"strides\":[2,2],\"ceil_mode\":1}", x, &y, &idx);
	ref_shape_is(y, "[1,1,2,2]");
	ref_f_are(y, (const double[]){10, 11, NAN, 15}, 4);
	ref_i_are(idx, (const int64_t[]){10, 11, 12, 15}, 4);
	mu_tensor_free(y);
	mu_tensor_free(idx);
	/* column-major indices: (r, c) is c * 4 + r; the third window's max
	 * is the NaN at (3, 0) */
	maxpool2("{\"kernel_shape\":[2,2],\"strides\":[2,2],\"storage_order\":1}", x, &y, &idx);
	ref_i_are(idx, (const int64_t[]){1 * 4 + 1, 3 * 4 + 1, 0 * 4 + 3, 3 * 4 + 3}, 4);
	mu_tensor_free(y);
	mu_tensor_free(idx);
	mu_tensor_free(x);

	for (int i = 0; i < 16; i++)
		v[i] = i;
	x = ref_typed("x", MU_DTYPE_F32, "[1,1,4,4]", v);
	/* avgpool k2 pads 1 at the start: the corner window holds only (0,0) */
	{
		mu_tensor_t *in[1] = {x};

		assert_int_equal(ref_run("avgpool", "{\"kernel_shape\":[2,2],\"strides\":[2,2],"
		                         "\"pads\":[1,1,0,0]}", in, 1, &y, why, sizeof(why)), 0);
		ref_shape_is(y, "[1,1,2,2]");
		ref_f_are(y, (const double[]){0, 1.5, 6, (5 + 6 + 9 + 10) / 4.0}, 4);
		mu_tensor_free(y);
		assert_int_equal(ref_run("avgpool", "{\"kernel_shape\":[2,2],\"strides\":[2,2],"
		                         "\"pads\":[1,1,0,0],\"count_include_pad\":1}", in, 1, &y, why,
		                         sizeof(why)), 0);
		ref_f_are(y, (const double[]){0 / 4.0, (1 + 2) / 4.0, (4 + 8) / 4.0, (5 + 6 + 9 + 10) / 4.0}, 4);
		mu_tensor_free(y);
		assert_int_equal(ref_run("avgpool", "{\"kernel_shape\":[5,5]}", in, 1, &y, why, sizeof(why)),
		                 MU_EPROTO);
	}
	mu_tensor_free(x);
}

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_conv),
		cmocka_unit_test(test_conv_errors),
		cmocka_unit_test(test_pools),
		cmocka_unit_test(test_resize),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
