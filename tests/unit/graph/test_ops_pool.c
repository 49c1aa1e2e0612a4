/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/graph/ops_pool.c: maxpool (with its indices,
 * ceil_mode, NaN, column-major indices) and avgpool (with and without the
 * padding counted) against windows worked out by hand.
 */
#include "ops_ref.h"
#include "graph/ops_int.h"

static char why[512];

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pools),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
