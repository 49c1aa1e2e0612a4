/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/graph/ops_reduce.c beyond what test_ops.c covers
 * (softmax, sum, mean, max): log_softmax and hardmax, the other
 * reductions against sums computed here in double, argmax and argmin
 * (ties, select_last_index, keepdims, typed input) and cumsum (exclusive,
 * reverse, integers wrapping).
 */
#include "ops_ref.h"
#include "graph/ops_int.h"

static char why[512];

static mu_tensor_t *run1(const char *op, const char *attrs, mu_tensor_t *x, int want)
{
	mu_tensor_t *y = NULL;

	assert_int_equal(ref_run(op, attrs, &x, 1, &y, why, sizeof(why)), want);
	mu_tensor_free(x);
	return y;
}

static const double v6[] = {1, -2, 3, 0.5, 3, -1};

static void test_softmaxes(void **state)
{
	mu_tensor_t *y;
	double want[6];

	(void)state;
	y = run1("log_softmax", "{\"axis\":1}", ref_typed("x", MU_DTYPE_F32, "[2,3]", v6), 0);
	for (int r = 0; r < 2; r++) {
		double s = 0;

		for (int i = 0; i < 3; i++)
			s += exp(v6[r * 3 + i]);
		for (int i = 0; i < 3; i++)
			want[r * 3 + i] = v6[r * 3 + i] - log(s);
	}
	ref_close(y, want, 1e-6, 1e-6);
	mu_tensor_free(y);
	/* hardmax: 1 at the first maximum along axis 0 */
	y = run1("hardmax", "{\"axis\":0}", ref_typed("x", MU_DTYPE_F32, "[2,3]", v6), 0);
	ref_f_are(y, (const double[]){1, 0, 1, 0, 1, 0}, 6);
	mu_tensor_free(y);
}

static void test_reductions(void **state)
{
	static const char *const ops[] = {"reduce_min", "reduce_prod", "reduce_l1", "reduce_l2",
		"reduce_sum_square", "reduce_log_sum", "reduce_log_sum_exp"};
	mu_tensor_t *y;

	(void)state;
	for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
		double want[2];

		for (int r = 0; r < 2; r++) {
			double mn = INFINITY, p = 1, l1 = 0, ss = 0, s = 0, se = 0;

			for (int i = 0; i < 3; i++) {
				double x = fabs(v6[r * 3 + i]) + (o == 5 ? 0.1 : 0); /* log_sum: positive */

				x = o == 5 ? x : v6[r * 3 + i];
				mn = fmin(mn, x);
				p *= x;
				l1 += fabs(x);
				ss += x * x;
				s += x;
				se += exp(x);
			}
			want[r] = o == 0 ? mn : o == 1 ? p : o == 2 ? l1 : o == 3 ? sqrt(ss) : o == 4 ? ss
			        : o == 5 ? log(s) : log(se);
		}
		if (o == 5) {
			double pos[6];

			for (int i = 0; i < 6; i++)
				pos[i] = fabs(v6[i]) + 0.1;
			y = run1(ops[o], "{\"axes\":[1],\"keepdims\":0}", ref_typed("x", MU_DTYPE_F32, "[2,3]", pos), 0);
		} else {
			y = run1(ops[o], "{\"axes\":[1],\"keepdims\":0}", ref_typed("x", MU_DTYPE_F32, "[2,3]", v6), 0);
		}
		ref_shape_is(y, "[2]");
		ref_close(y, want, 1e-5, 1e-6);
		mu_tensor_free(y);
	}
	/* an empty reduction: min is +inf, prod 1 */
	y = run1("reduce_min", "{\"axes\":[1]}", ref_typed("x", MU_DTYPE_F32, "[2,0]", NULL), 0);
	ref_f_are(y, (const double[]){INFINITY, INFINITY}, 2);
	mu_tensor_free(y);
	y = run1("reduce_prod", "{\"axes\":[1]}", ref_typed("x", MU_DTYPE_F32, "[2,0]", NULL), 0);
	ref_f_are(y, (const double[]){1, 1}, 2);
	mu_tensor_free(y);
}

static void test_arg(void **state)
{
	const int64_t t[] = {3, 7, 7, 1, 1, 0};
	mu_tensor_t *y;

	(void)state;
	y = run1("argmax", "{\"axis\":1}", ref_ints("x", MU_DTYPE_I32, "[2,3]", t), 0);
	assert_int_equal(y->dtype, MU_DTYPE_I64);
	ref_shape_is(y, "[2,1]");
	ref_i_are(y, (const int64_t[]){1, 0}, 2);              /* first of the ties */
	mu_tensor_free(y);
	y = run1("argmax", "{\"axis\":1,\"select_last_index\":1,\"keepdims\":0}",
	         ref_ints("x", MU_DTYPE_I32, "[2,3]", t), 0);
	ref_shape_is(y, "[2]");
	ref_i_are(y, (const int64_t[]){2, 1}, 2);
	mu_tensor_free(y);
	y = run1("argmin", "{\"axis\":0}", ref_typed("x", MU_DTYPE_F64, "[2,3]", v6), 0);
	ref_i_are(y, (const int64_t[]){1, 0, 1}, 3);
	mu_tensor_free(y);
	y = run1("argmax", "{\"axis\":2}", ref_typed("x", MU_DTYPE_F32, "[2,3]", v6), MU_EPROTO);
}

static void test_cumsum(void **state)
{
	mu_tensor_t *y;

	(void)state;
	y = run1("cumsum", "{\"axis\":1}", ref_typed("x", MU_DTYPE_F32, "[2,3]", v6), 0);
	ref_f_are(y, (const double[]){1, -1, 2, 0.5, 3.5, 2.5}, 6);
	mu_tensor_free(y);
	y = run1("cumsum", "{\"axis\":1,\"exclusive\":1,\"reverse\":1}",
	         ref_ints("x", MU_DTYPE_I8, "[1,3]", (const int64_t[]){100, 100, 1}), 0);
	ref_i_are(y, (const int64_t[]){101, 1, 0}, 3);
	mu_tensor_free(y);
	y = run1("cumsum", NULL, ref_ints("x", MU_DTYPE_I8, "[3]", (const int64_t[]){100, 100, 1}), 0);
	ref_i_are(y, (const int64_t[]){100, -56, -55}, 3);    /* wraps as I8 does */
	mu_tensor_free(y);
}

/* topk: values and indices, sorted, ties to the lower index, NaN the largest */
static void test_topk(void **state)
{
	static char nname[] = "tk", o0[] = "v", o1[] = "i", i0[] = "x";
	char *ins[1] = {i0}, *outs[2] = {o0, o1};
	mu_tensor_t *x, *out[2];
	mu__shape_t si, so[2];
	mu__node_t n;

	(void)state;
	x = ref_typed("x", MU_DTYPE_F32, "[2,4]", (const double[]){3, 1, 3, 2, NAN, 0, 5, 5});
	memset(&n, 0, sizeof(n));
	n.name = nname;
	n.op = mu__op_find("topk");
	n.in = ins;
	n.nin = 1;
	n.out = outs;
	n.nout = 2;
	for (int largest = 1; largest >= 0; largest--) {
		n.attrs = cJSON_Parse(largest ? "{\"k\":3}" : "{\"k\":3,\"largest\":0}");
		assert_int_equal(n.op->check(&n, why, sizeof(why)), 0);
		si.rank = x->rank;
		si.dtype = x->dtype;
		memcpy(si.dims, x->dims, sizeof(si.dims));
		assert_int_equal(mu__op_shape(&n, &si, so, why, sizeof(why)), 0);
		for (int j = 0; j < 2; j++)
			assert_int_equal(mu_tensor_new_typed(outs[j], so[j].dtype, so[j].rank, so[j].dims, &out[j]), 0);
		assert_int_equal(n.op->run(&n, &x, out), 0);
		if (largest) {
			ref_f_are(out[0], (const double[]){3, 3, 2, NAN, 5, 5}, 6);
			ref_i_are(out[1], (const int64_t[]){0, 2, 3, 0, 2, 3}, 6);
		} else {
			ref_f_are(out[0], (const double[]){1, 2, 3, 0, 5, 5}, 6);
			ref_i_are(out[1], (const int64_t[]){1, 3, 0, 1, 2, 3}, 6);
		}
		mu_tensor_free(out[0]);
		mu_tensor_free(out[1]);
		cJSON_Delete(n.attrs);
	}
	n.attrs = cJSON_Parse("{\"k\":5}");
	si.rank = x->rank;
	memcpy(si.dims, x->dims, sizeof(si.dims));
	assert_int_equal(mu__op_shape(&n, &si, so, why, sizeof(why)), MU_EPROTO);
	cJSON_Delete(n.attrs);
	mu_tensor_free(x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_softmaxes),
		cmocka_unit_test(test_reductions),
		cmocka_unit_test(test_arg),
		cmocka_unit_test(test_cumsum),
		cmocka_unit_test(test_topk),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
