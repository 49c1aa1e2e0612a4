/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/graph/ops_conv.c: conv (im2col + sgemm, and the
 * direct 1x1 path) against a direct convolution computed here in double,
 * over 1, 2 and 3 spatial dims with groups, dilations, asymmetric pads and
 * strides; conv_transpose against the scatter it is; and the refusals.
 */
#include "ops_ref.h"
#include "graph/ops_int.h"

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

/* conv_transpose against the scatter it is: every input element times
 * every tap lands at i * stride - pad + k * dilation */
static void test_conv_transpose(void **state)
{
	mu_tensor_t *in[3], *y;
	double *ref;
	uint64_t c[MU_TENSOR_MAX_RANK];

	(void)state;
	in[0] = ref_tensor("x", "[2,4,3,4]");
	in[1] = ref_tensor("w", "[4,3,2,3]");      /* group 2: 6 output channels */
	in[2] = ref_tensor("b", "[6]");
	assert_int_equal(ref_run("conv_transpose", "{\"group\":2,\"strides\":[2,3],\"pads\":[1,0,0,2],"
	                         "\"dilations\":[1,2],\"output_padding\":[1,0]}", in, 3, &y, why,
	                         sizeof(why)), 0);
	/* H: 2*2 + 1 + 2 - 1 - 0 = 6; W: 3*3 + 0 + 5 - 0 - 2 = 12 */
	ref_shape_is(y, "[2,6,6,12]");
	ref = calloc(y->numel, sizeof(double));
	for (uint64_t e = 0; e < y->numel; e++) {
		ref_coords(y->dims, y->rank, e, c);
		ref[e] = in[2]->data[c[1]];
	}
	for (uint64_t e = 0; e < in[0]->numel; e++) {
		uint64_t xi[4];

		ref_coords(in[0]->dims, 4, e, xi);
		for (uint64_t m = 0; m < 3; m++)
			for (uint64_t a = 0; a < 2; a++)
				for (uint64_t b = 0; b < 3; b++) {
					int64_t oh = (int64_t)xi[2] * 2 - 1 + (int64_t)a, ow = (int64_t)xi[3] * 3 + 2 * (int64_t)b;
					uint64_t mo = xi[1] / 2 * 3 + m;

					if (oh < 0 || oh >= 6 || ow < 0 || ow >= 12)
						continue;
					ref[((xi[0] * 6 + mo) * 6 + (uint64_t)oh) * 12 + (uint64_t)ow] +=
					    (double)in[0]->data[e] * in[1]->data[((xi[1] * 3 + m) * 2 + a) * 3 + b];
				}
	}
	ref_close(y, ref, 1e-4, 1e-5);
	free(ref);
	mu_tensor_free(y);
	/* an output_padding as large as the stride is refused */
	assert_int_equal(ref_run("conv_transpose", "{\"group\":2,\"strides\":[2,3],\"output_padding\":[2,0]}",
	                         in, 3, &y, why, sizeof(why)), MU_EPROTO);
	for (int i = 0; i < 3; i++)
		mu_tensor_free(in[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_conv),
		cmocka_unit_test(test_conv_errors),
		cmocka_unit_test(test_conv_transpose),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
