/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the CPU ops (src/graph/ops.c, ops_math.c, ops_nn.c,
 * ops_shape.c): every op against a reference computed here with naive
 * loops in double, on shapes that exercise broadcasting, batching, axes,
 * and the error paths (which must be errors, not crashes).
 */
#include "ops_ref.h"

#include "graph/ops_int.h"

static char why[512];

/* ---- shared helpers of ops.c ---- */

static void test_helpers(void **state)
{
	mu__shape_t a = {2, {3, 1}, MU_DTYPE_F32}, b = {1, {4}, MU_DTYPE_F32}, c = {0, {0}, MU_DTYPE_F32}, o;

	(void)state;
	assert_int_equal(mu__broadcast(&a, &b, &o), 0);
	assert_int_equal(o.rank, 2);
	assert_int_equal(o.dims[0], 3);
	assert_int_equal(o.dims[1], 4);
	assert_int_equal(mu__broadcast(&c, &a, &o), 0);
	assert_int_equal(o.rank, 2);
	b.dims[0] = 2;
	a.dims[1] = 3;
	assert_int_equal(mu__broadcast(&a, &b, &o), MU_EPROTO);
	assert_int_equal(mu__axis(-1, 3), 2);
	assert_int_equal(mu__axis(-3, 3), 0);
	assert_int_equal(mu__axis(-4, 3), -1);
	assert_int_equal(mu__axis(3, 3), -1);
	assert_int_equal(mu__axis(0, 0), -1);
	assert_int_equal(mu__axis(INT64_MIN, 3), -1);
	assert_int_equal(mu__shape_numel(&c), 1);
	assert_null(mu__op_find("Add"));
	assert_null(mu__op_find(""));
	assert_string_equal(mu__op_find("embedding")->name, "embedding");
}

/* ---- elementwise binary, with numpy broadcasting ---- */

static const char *const bin_shapes[][3] = {
	/* a, b, out */
	{"[2,3]", "[2,3]", "[2,3]"},
	{"[2,3]", "[3]", "[2,3]"},
	{"[2,3]", "[]", "[2,3]"},
	{"[]", "[2,3]", "[2,3]"},
	{"[3]", "[2,3]", "[2,3]"},
	{"[2,1,4]", "[3,1]", "[2,3,4]"},
	{"[4,1]", "[1,5]", "[4,5]"},
	{"[1]", "[5]", "[5]"},
	{"[5]", "[1]", "[5]"},
	{"[2,3,4,5]", "[3,1,5]", "[2,3,4,5]"},
	{"[1,3,1]", "[2,1,4]", "[2,3,4]"},
	{"[2,1,2,1,2,1,2,1]", "[2,1,2,1,2,1,2]", "[2,2,2,2,2,2,2,2]"},
	{"[0,3]", "[3]", "[0,3]"},
	{"[]", "[]", "[]"},
	{"[2,3]", "[2,1]", "[2,3]"},
	{"[1,1]", "[3]", "[1,3]"},
};

static double bin_ref(const char *op, double a, double b)
{
	switch (op[0]) {
	case 'a':
		return (float)(a + b);
	case 's':
		return (float)(a - b);
	case 'm':
		return (float)(a * b);
	case 'd':
		return (float)(a / b);
	default:
		return pow(a, b);
	}
}

static void test_binary(void **state)
{
	static const char *const ops[] = {"add", "sub", "mul", "div", "pow"};

	(void)state;
	for (size_t o = 0; o < 5; o++)
		for (size_t s = 0; s < sizeof(bin_shapes) / sizeof(bin_shapes[0]); s++) {
			mu_tensor_t *in[2], *y;
			uint64_t c[MU_TENSOR_MAX_RANK];
			double *ref;

			in[0] = ref_tensor("a", bin_shapes[s][0]);
			in[1] = ref_tensor("b", bin_shapes[s][1]);
			if (o == 4) /* pow: positive bases, small exponents */
				for (uint64_t i = 0; i < in[0]->numel; i++)
					in[0]->data[i] = fabsf(in[0]->data[i]) + 0.5f;
			if (o == 3) /* div: a zero divisor is inf or nan, like numpy */
				in[1]->data[0] = 0.0f;
			assert_int_equal(ref_run(ops[o], NULL, in, 2, &y, why, sizeof(why)), 0);
			ref_shape_is(y, bin_shapes[s][2]);
			ref = calloc(y->numel + 1, sizeof(double));
			for (uint64_t i = 0; i < y->numel; i++) {
				ref_coords(y->dims, y->rank, i, c);
				ref[i] = bin_ref(ops[o], in[0]->data[ref_boff(in[0]->dims, in[0]->rank, y->rank, c)],
				                 in[1]->data[ref_boff(in[1]->dims, in[1]->rank, y->rank, c)]);
			}
			/* + - * / are exact f32 operations; pow is powf */
			ref_close(y, ref, 0, o == 4 ? 2e-7 : 0);
			free(ref);
			mu_tensor_free(y);
			mu_tensor_free(in[0]);
			mu_tensor_free(in[1]);
		}
}

static void test_binary_errors(void **state)
{
	mu_tensor_t *in[2], *y;

	(void)state;
	in[0] = ref_tensor("a", "[2,3]");
	in[1] = ref_tensor("b", "[2]");
	assert_int_equal(ref_run("add", NULL, in, 2, &y, why, sizeof(why)), MU_EPROTO);
	assert_null(y);
	assert_non_null(strstr(why, "node node7"));
	assert_non_null(strstr(why, "do not broadcast"));
	mu_tensor_free(in[1]);
	in[1] = ref_tensor("b", "[3,2,3]"); /* more dims on the right operand is fine */
	assert_int_equal(ref_run("mul", NULL, in, 2, &y, why, sizeof(why)), 0);
	ref_shape_is(y, "[3,2,3]");
	mu_tensor_free(y);
	mu_tensor_free(in[0]);
	mu_tensor_free(in[1]);
}

/* ---- unary ---- */

static double gelu_erf(double x)
{
	return 0.5 * x * (1 + erf(x / sqrt(2)));
}

static double gelu_tanh(double x)
{
	return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double sigm(double x)
{
	return 1 / (1 + exp(-x));
}

static void test_unary(void **state)
{
	static const char *const ops[] = {"relu", "sigmoid", "tanh", "sqrt", "exp", "neg",
	                                  "erf", "gelu", "gelu", "silu"};
	static const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 10.0f, -10.0f, 30.0f, -30.0f,
	                                100.0f, -100.0f, 1e-20f, 3.5f, -3.5f, INFINITY, -INFINITY, NAN};

	(void)state;
	for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
		const char *attrs = o == 8 ? "{\"approximate\":\"tanh\"}" : o == 7 ? "{\"approximate\":\"none\"}" : NULL;
		mu_tensor_t *x = ref_tensor("x", "[4,3,16]"), *y;
		double ref[4 * 3 * 16];

		memcpy(x->data, special, sizeof(special));
		assert_int_equal(ref_run(ops[o], attrs, &x, 1, &y, why, sizeof(why)), 0);
		ref_shape_is(y, "[4,3,16]");
		for (uint64_t i = 0; i < x->numel; i++) {
			double v = x->data[i];

			switch (o) {
			case 0:
				ref[i] = v > 0 ? v : 0;
				if (isnan(v))
					ref[i] = 0; /* max(v, 0) with the NaN test false */
				break;
			case 1:
				ref[i] = sigm(v);
				break;
			case 2:
				ref[i] = tanh(v);
				break;
			case 3:
				ref[i] = sqrt(v);
				break;
			case 4:
				ref[i] = exp(v);
				if (v >= 100)
					ref[i] = INFINITY; /* over f32 */
				break;
			case 5:
				ref[i] = -v;
				break;
			case 6:
				ref[i] = erf(v);
				break;
			case 7:
				ref[i] = gelu_erf(v);
				break;
			case 8:
				ref[i] = gelu_tanh(v);
				break;
			default:
				ref[i] = isinf(v) && v < 0 ? NAN : v * sigm(v);
				break;
			}
		}
		if (o == 8) { /* gelu tanh at +-inf: x * (1 + tanh(inf)) */
			ref[13] = INFINITY;
			ref[14] = NAN; /* -inf * 0 */
		}
		if (o == 7)
			ref[14] = NAN;
		ref_close(y, ref, 1e-6, 1e-5);
		/* neg keeps signs exactly, -0 included */
		if (o == 5)
			assert_false(signbit(y->data[1]));
		mu_tensor_free(y);
		mu_tensor_free(x);
	}
}

static void test_gelu_approximations_differ(void **state)
{
	static const float v[] = {1.0f, -2.0f, 0.5f};
	mu_tensor_t *x = ref_values("x", "[3]", v), *a, *b;

	(void)state;
	assert_int_equal(ref_run("gelu", NULL, &x, 1, &a, why, sizeof(why)), 0);
	assert_int_equal(ref_run("gelu", "{\"approximate\":\"tanh\"}", &x, 1, &b, why, sizeof(why)), 0);
	/* known values: gelu(1) = 0.8413447, tanh form 0.8411920 */
	assert_true(fabs(a->data[0] - 0.8413447) < 1e-6);
	assert_true(fabs(b->data[0] - 0.8411920) < 1e-6);
	assert_true(fabs(a->data[1] - -0.0455003) < 1e-6);
	assert_true(fabs(b->data[1] - -0.0454023) < 1e-6);
	mu_tensor_free(a);
	mu_tensor_free(b);
	assert_int_equal(ref_run("gelu", "{\"approximate\":\"exact\"}", &x, 1, &a, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "node node7"));
	mu_tensor_free(x);
}

/* ---- matmul: numpy semantics ---- */

static void matmul_ref(const mu_tensor_t *a, const mu_tensor_t *b, const mu_tensor_t *y, double *ref)
{
	uint32_t ar = a->rank, br = b->rank;
	uint64_t m = ar == 1 ? 1 : a->dims[ar - 2], k = a->dims[ar - 1];
	uint64_t n = br == 1 ? 1 : b->dims[br - 1];
	uint32_t ab = ar > 2 ? ar - 2 : 0, bb = br > 2 ? br - 2 : 0;
	uint32_t ob = y->rank - (ar > 1) - (br > 1);
	uint64_t nb = 1, c[MU_TENSOR_MAX_RANK];

	for (uint32_t i = 0; i < ob; i++)
		nb *= y->dims[i];
	for (uint64_t bi = 0; bi < nb; bi++) {
		uint64_t oa, obb;

		ref_coords(y->dims, ob, bi, c);
		oa = ref_boff(a->dims, ab, ob, c) * m * k;
		obb = ref_boff(b->dims, bb, ob, c) * k * n;
		for (uint64_t i = 0; i < m; i++)
			for (uint64_t j = 0; j < n; j++) {
				double s = 0;

				for (uint64_t q = 0; q < k; q++)
					s += (double)a->data[oa + i * k + q] * b->data[obb + q * n + j];
				ref[bi * m * n + i * n + j] = s;
			}
	}
}

static void test_matmul(void **state)
{
	static const char *const cases[][3] = {
		{"[3,4]", "[4,5]", "[3,5]"},
		{"[2,3,4]", "[4,5]", "[2,3,5]"},
		{"[3,4]", "[2,4,5]", "[2,3,5]"},
		{"[4]", "[4,5]", "[5]"},
		{"[3,4]", "[4]", "[3]"},
		{"[4]", "[4]", "[]"},
		{"[2,4]", "[3,4,1]", "[3,2,1]"},
		{"[2,1,3,4]", "[5,4,2]", "[2,5,3,2]"},
		{"[1,3,4]", "[2,4,5]", "[2,3,5]"},
		{"[2,1,1,4]", "[1,3,4,2]", "[2,3,1,2]"},
		{"[0,4]", "[4,5]", "[0,5]"},
		{"[3,0]", "[0,5]", "[3,5]"},
		{"[2,0,3,4]", "[4,5]", "[2,0,3,5]"},
		{"[1,1]", "[1,1]", "[1,1]"},
		{"[17,33]", "[33,65]", "[17,65]"},
	};

	(void)state;
	for (size_t s = 0; s < sizeof(cases) / sizeof(cases[0]); s++) {
		mu_tensor_t *in[2], *y;
		double *ref;

		in[0] = ref_tensor("a", cases[s][0]);
		in[1] = ref_tensor("b", cases[s][1]);
		assert_int_equal(ref_run("matmul", NULL, in, 2, &y, why, sizeof(why)), 0);
		ref_shape_is(y, cases[s][2]);
		ref = calloc(y->numel + 1, sizeof(double));
		matmul_ref(in[0], in[1], y, ref);
		ref_close(y, ref, 1e-4, 1e-5);
		free(ref);
		mu_tensor_free(y);
		mu_tensor_free(in[0]);
		mu_tensor_free(in[1]);
	}
}

static void test_matmul_errors(void **state)
{
	static const char *const bad[][2] = {
		{"[3,4]", "[5,6]"}, {"[4]", "[5]"}, {"[]", "[4]"}, {"[3,4]", "[]"},
		{"[2,3,4]", "[3,4,5]"}, /* batch 2 vs 3 */
	};

	(void)state;
	for (size_t s = 0; s < sizeof(bad) / sizeof(bad[0]); s++) {
		mu_tensor_t *in[2], *y;

		in[0] = ref_tensor("a", bad[s][0]);
		in[1] = ref_tensor("b", bad[s][1]);
		assert_int_equal(ref_run("matmul", NULL, in, 2, &y, why, sizeof(why)), MU_EPROTO);
		assert_non_null(strstr(why, "node node7"));
		mu_tensor_free(in[0]);
		mu_tensor_free(in[1]);
	}
}

/* ---- gemm: ONNX, Y = alpha * A' B' + beta * C ---- */

static void test_gemm(void **state)
{
	static const struct {
		const char *a, *b, *c, *attrs, *y;
	} cases[] = {
		{"[3,4]", "[4,5]", NULL, NULL, "[3,5]"},
		{"[4,3]", "[4,5]", NULL, "{\"transA\":1}", "[3,5]"},
		{"[3,4]", "[5,4]", NULL, "{\"transB\":1}", "[3,5]"},
		{"[4,3]", "[5,4]", "[5]", "{\"transA\":1,\"transB\":1,\"alpha\":0.5,\"beta\":2}", "[3,5]"},
		{"[3,4]", "[4,5]", "[]", "{\"beta\":-1}", "[3,5]"},
		{"[3,4]", "[4,5]", "[1]", NULL, "[3,5]"},
		{"[3,4]", "[4,5]", "[3,1]", "{\"alpha\":2}", "[3,5]"},
		{"[3,4]", "[4,5]", "[1,5]", NULL, "[3,5]"},
		{"[3,4]", "[4,5]", "[3,5]", "{\"alpha\":0,\"beta\":0.25}", "[3,5]"},
		{"[3,0]", "[0,5]", "[5]", "{\"beta\":3}", "[3,5]"},
		{"[3,0]", "[0,5]", NULL, NULL, "[3,5]"},
		{"[0,4]", "[4,5]", "[5]", NULL, "[0,5]"},
		{"[1,64]", "[64,1]", "[1,1]", "{\"transA\":0,\"transB\":0}", "[1,1]"},
	};

	(void)state;
	for (size_t s = 0; s < sizeof(cases) / sizeof(cases[0]); s++) {
		mu_tensor_t *in[3], *y;
		mu__node_t n;
		int ta, tb, nin = cases[s].c ? 3 : 2;
		double alpha, beta, *ref;
		uint64_t m, k, nn;

		in[0] = ref_tensor("a", cases[s].a);
		in[1] = ref_tensor("b", cases[s].b);
		in[2] = cases[s].c ? ref_tensor("c", cases[s].c) : NULL;
		assert_int_equal(ref_run("gemm", cases[s].attrs, in, nin, &y, why, sizeof(why)), 0);
		ref_shape_is(y, cases[s].y);
		memset(&n, 0, sizeof(n));
		n.attrs = cJSON_Parse(cases[s].attrs ? cases[s].attrs : "{}");
		ta = (int)mu__attr_int(&n, "transA", 0);
		tb = (int)mu__attr_int(&n, "transB", 0);
		alpha = mu__attr_num(&n, "alpha", 1);
		beta = mu__attr_num(&n, "beta", 1);
		cJSON_Delete(n.attrs);
		m = y->dims[0];
		nn = y->dims[1];
		k = in[0]->dims[ta ? 0 : 1];
		ref = calloc(m * nn + 1, sizeof(double));
		for (uint64_t i = 0; i < m; i++)
			for (uint64_t j = 0; j < nn; j++) {
				double acc = 0;
				uint64_t c2[2] = {i, j};

				for (uint64_t q = 0; q < k; q++)
					acc += (double)in[0]->data[ta ? q * m + i : i * k + q] *
					       in[1]->data[tb ? j * k + q : q * nn + j];
				ref[i * nn + j] = alpha * acc;
				if (in[2] != NULL)
					ref[i * nn + j] += beta * in[2]->data[ref_boff(in[2]->dims, in[2]->rank, 2, c2)];
			}
		ref_close(y, ref, 1e-4, 1e-5);
		free(ref);
		mu_tensor_free(y);
		for (int i = 0; i < nin; i++)
			mu_tensor_free(in[i]);
	}
}

static void test_gemm_errors(void **state)
{
	static const struct {
		const char *a, *b, *c, *attrs, *msg;
	} bad[] = {
		{"[3,4]", "[5,4]", NULL, NULL, "inner dimensions"},
		{"[3,4]", "[4,5]", NULL, "{\"transA\":1}", "inner dimensions"},
		{"[2,3,4]", "[4,5]", NULL, NULL, "2-D"},
		{"[4]", "[4,5]", NULL, NULL, "2-D"},
		{"[3,4]", "[4,5]", "[3]", NULL, "C does not broadcast"},
		{"[3,4]", "[4,5]", "[5,3]", NULL, "C does not broadcast"},
		{"[3,4]", "[4,5]", "[2,3,5]", NULL, "C does not broadcast"},
		{"[3,4]", "[4,5]", NULL, "{\"transA\":[1]}", "attribute transA"},
		{"[3,4]", "[4,5]", NULL, "{\"beta\":null}", "attribute beta"},
	};

	(void)state;
	for (size_t s = 0; s < sizeof(bad) / sizeof(bad[0]); s++) {
		mu_tensor_t *in[3], *y;
		int nin = bad[s].c ? 3 : 2;

		in[0] = ref_tensor("a", bad[s].a);
		in[1] = ref_tensor("b", bad[s].b);
		in[2] = bad[s].c ? ref_tensor("c", bad[s].c) : NULL;
		assert_int_equal(ref_run("gemm", bad[s].attrs, in, nin, &y, why, sizeof(why)), MU_EPROTO);
		if (strstr(why, bad[s].msg) == NULL || strstr(why, "node node7") == NULL)
			fail_msg("case %zu: why is \"%s\"", s, why);
		for (int i = 0; i < nin; i++)
			mu_tensor_free(in[i]);
	}
}

/* ---- layernorm, rmsnorm, softmax ---- */

static void norm_ref(int rms, const mu_tensor_t *x, int axis, const mu_tensor_t *g,
                     const mu_tensor_t *b, double eps, double *ref)
{
	uint64_t outer = 1, inner = 1;

	for (int i = 0; i < (int)x->rank; i++)
		*(i < axis ? &outer : &inner) *= x->dims[i];
	for (uint64_t r = 0; r < outer; r++) {
		const float *v = x->data + r * inner;
		double mean = 0, var = 0;

		for (uint64_t i = 0; i < inner; i++)
			mean += v[i];
		mean /= (double)inner;
		for (uint64_t i = 0; i < inner; i++)
			var += rms ? (double)v[i] * v[i] : (v[i] - mean) * (v[i] - mean);
		var /= (double)inner;
		for (uint64_t i = 0; i < inner; i++) {
			double gi = g->data[g->numel > 1 ? i : 0], bi = b ? b->data[b->numel > 1 ? i : 0] : 0;

			ref[r * inner + i] = ((v[i] - (rms ? 0 : mean)) / sqrt(var + eps)) * gi + bi;
		}
	}
}

static void test_norms(void **state)
{
	static const struct {
		const char *op, *x, *g, *b, *attrs;
		int axis;
		double eps;
	} cases[] = {
		{"layernorm", "[2,3,8]", "[8]", "[8]", NULL, 2, 1e-5},
		{"layernorm", "[2,3,8]", "[8]", NULL, NULL, 2, 1e-5},
		{"layernorm", "[2,3,8]", "[3,8]", "[24]", "{\"axis\":1}", 1, 1e-5},
		{"layernorm", "[2,3,8]", "[1]", "[]", "{\"axis\":-2,\"epsilon\":0.1}", 1, 0.1},
		{"layernorm", "[2,3,8]", "[48]", "[48]", "{\"axis\":0}", 0, 1e-5},
		{"layernorm", "[5]", "[5]", "[5]", "{\"epsilon\":1e-3}", 0, 1e-3},
		{"rmsnorm", "[2,3,8]", "[8]", NULL, NULL, 2, 1e-6},
		{"rmsnorm", "[2,3,8]", "[24]", NULL, "{\"axis\":1,\"epsilon\":0.5}", 1, 0.5},
		{"rmsnorm", "[4,16]", "[]", NULL, "{\"axis\":-1}", 1, 1e-6},
	};

	(void)state;
	for (size_t s = 0; s < sizeof(cases) / sizeof(cases[0]); s++) {
		mu_tensor_t *in[3], *y;
		int nin = cases[s].b ? 3 : 2;
		double *ref;

		in[0] = ref_tensor("x", cases[s].x);
		in[1] = ref_tensor("g", cases[s].g);
		in[2] = cases[s].b ? ref_tensor("b", cases[s].b) : NULL;
		assert_int_equal(ref_run(cases[s].op, cases[s].attrs, in, nin, &y, why, sizeof(why)), 0);
		ref_shape_is(y, cases[s].x);
		ref = calloc(y->numel, sizeof(double));
		norm_ref(cases[s].op[0] == 'r', in[0], cases[s].axis, in[1], in[2], cases[s].eps, ref);
		ref_close(y, ref, 1e-4, 1e-4);
		free(ref);
		mu_tensor_free(y);
		for (int i = 0; i < nin; i++)
			mu_tensor_free(in[i]);
	}
}

static void test_norm_errors(void **state)
{
	mu_tensor_t *in[3], *y;

	(void)state;
	in[0] = ref_tensor("x", "[2,3,8]");
	in[1] = ref_tensor("g", "[3]");
	assert_int_equal(ref_run("layernorm", NULL, in, 2, &y, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "node node7: scale or bias in1"));
	assert_int_equal(ref_run("rmsnorm", NULL, in, 2, &y, why, sizeof(why)), MU_EPROTO);
	mu_tensor_free(in[1]);
	in[1] = ref_tensor("g", "[8]");
	in[2] = ref_tensor("b", "[7]");
	assert_int_equal(ref_run("layernorm", NULL, in, 3, &y, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "in2"));
	assert_int_equal(ref_run("layernorm", "{\"axis\":3}", in, 2, &y, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "axis out of range"));
	assert_int_equal(ref_run("softmax", "{\"axis\":-4}", in, 1, &y, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "axis out of range"));
	for (int i = 0; i < 3; i++)
		mu_tensor_free(in[i]);
}

static void test_softmax(void **state)
{
	static const char *const attrs[] = {NULL, "{\"axis\":0}", "{\"axis\":1}", "{\"axis\":-2}", "{\"axis\":2}"};
	static const int axes[] = {2, 0, 1, 1, 2};

	(void)state;
	for (size_t s = 0; s < 5; s++) {
		mu_tensor_t *x = ref_tensor("x", "[3,4,5]"), *y;
		uint64_t c[3];
		double ref[60];

		x->data[0] = 1000.0f; /* large logits do not overflow */
		x->data[7] = -1000.0f;
		assert_int_equal(ref_run("softmax", attrs[s], &x, 1, &y, why, sizeof(why)), 0);
		ref_shape_is(y, "[3,4,5]");
		for (uint64_t i = 0; i < 60; i++) {
			double mx = -INFINITY, sum = 0;
			uint64_t cc[3];

			ref_coords(x->dims, 3, i, c);
			memcpy(cc, c, sizeof(cc));
			for (cc[axes[s]] = 0; cc[axes[s]] < x->dims[axes[s]]; cc[axes[s]]++)
				mx = fmax(mx, x->data[cc[0] * 20 + cc[1] * 5 + cc[2]]);
			for (cc[axes[s]] = 0; cc[axes[s]] < x->dims[axes[s]]; cc[axes[s]]++)
				sum += exp(x->data[cc[0] * 20 + cc[1] * 5 + cc[2]] - mx);
			ref[i] = exp(x->data[i] - mx) / sum;
		}
		ref_close(y, ref, 1e-6, 1e-5);
		mu_tensor_free(y);
		mu_tensor_free(x);
	}
}

/* ---- reductions ---- */

static void test_reductions(void **state)
{
	static const struct {
		const char *attrs, *shape;
		int mask[3];
	} cases[] = {
		{NULL, "[1,1,1]", {1, 1, 1}},
		{"{\"keepdims\":0}", "[]", {1, 1, 1}},
		{"{\"axes\":[1]}", "[2,1,4]", {0, 1, 0}},
		{"{\"axes\":[1],\"keepdims\":0}", "[2,4]", {0, 1, 0}},
		{"{\"axes\":[0,2]}", "[1,3,1]", {1, 0, 1}},
		{"{\"axes\":[-1],\"keepdims\":0}", "[2,3]", {0, 0, 1}},
		{"{\"axes\":[2,-1,0],\"keepdims\":0}", "[3]", {1, 0, 1}},
		{"{\"axes\":[]}", "[2,3,4]", {0, 0, 0}}, /* numpy axis=(): nothing reduced */
	};
	static const char *const ops[] = {"reduce_sum", "reduce_mean", "reduce_max"};

	(void)state;
	for (size_t o = 0; o < 3; o++)
		for (size_t s = 0; s < sizeof(cases) / sizeof(cases[0]); s++) {
			mu_tensor_t *x = ref_tensor("x", "[2,3,4]"), *y;
			double ref[24], cnt = 1;
			uint64_t c[3];

			assert_int_equal(ref_run(ops[o], cases[s].attrs, &x, 1, &y, why, sizeof(why)), 0);
			ref_shape_is(y, cases[s].shape);
			for (int k = 0; k < 3; k++)
				cnt *= cases[s].mask[k] ? (double)x->dims[k] : 1;
			for (uint64_t i = 0; i < y->numel; i++)
				ref[i] = o == 2 ? -INFINITY : 0;
			for (uint64_t i = 0; i < 24; i++) {
				uint64_t oi = 0;

				ref_coords(x->dims, 3, i, c);
				for (int k = 0; k < 3; k++)
					if (!cases[s].mask[k])
						oi = oi * x->dims[k] + c[k];
				ref[oi] = o == 2 ? fmax(ref[oi], x->data[i]) : ref[oi] + x->data[i];
			}
			for (uint64_t i = 0; o == 1 && i < y->numel; i++)
				ref[i] /= cnt;
			ref_close(y, ref, 1e-5, 1e-6);
			mu_tensor_free(y);
			mu_tensor_free(x);
		}
}

static void test_reduction_errors(void **state)
{
	mu_tensor_t *x = ref_tensor("x", "[2,3]"), *y;

	(void)state;
	assert_int_equal(ref_run("reduce_sum", "{\"axes\":[2]}", &x, 1, &y, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "node node7: axes out of range"));
	assert_int_equal(ref_run("reduce_sum", "{\"axes\":[-3]}", &x, 1, &y, why, sizeof(why)), MU_EPROTO);
	assert_int_equal(ref_run("reduce_sum", "{\"axes\":1}", &x, 1, &y, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "attribute axes"));
	assert_int_equal(ref_run("reduce_max", "{\"axes\":[0,0,0,0,0,0,0,0,0]}", &x, 1, &y, why, sizeof(why)),
	                 MU_EPROTO);
	mu_tensor_free(x);
	/* a reduced zero-size dim: sum 0, max -inf, mean nan (numpy warns) */
	x = ref_tensor("x", "[0,3]");
	assert_int_equal(ref_run("reduce_sum", "{\"axes\":[0]}", &x, 1, &y, why, sizeof(why)), 0);
	ref_shape_is(y, "[1,3]");
	assert_true(y->data[0] == 0);
	mu_tensor_free(y);
	assert_int_equal(ref_run("reduce_max", "{\"axes\":[0],\"keepdims\":0}", &x, 1, &y, why, sizeof(why)), 0);
	assert_true(isinf(y->data[2]) && y->data[2] < 0);
	mu_tensor_free(y);
	assert_int_equal(ref_run("reduce_mean", "{\"axes\":[0]}", &x, 1, &y, why, sizeof(why)), 0);
	assert_true(isnan(y->data[1]));
	mu_tensor_free(y);
	mu_tensor_free(x);
}

/* ---- shape ops ---- */

static void same_data(const mu_tensor_t *y, const mu_tensor_t *x)
{
	assert_int_equal(y->numel, x->numel);
	assert_memory_equal(y->data, x->data, x->numel * 4);
}

static void test_reshape_flatten(void **state)
{
	static const char *const ok[][2] = {
		{"{\"shape\":[-1,4]}", "[6,4]"},
		{"{\"shape\":[0,-1]}", "[2,12]"},
		{"{\"shape\":[0,0,-1]}", "[2,3,4]"},
		{"{\"shape\":[4,0,2]}", "[4,3,2]"},
		{"{\"shape\":[24]}", "[24]"},
		{"{\"shape\":[-1]}", "[24]"},
		{"{\"shape\":[1,2,1,3,1,4,1,1]}", "[1,2,1,3,1,4,1,1]"},
		{"{\"shape\":[2,-1,3]}", "[2,4,3]"},
	};
	static const char *const bad[] = {
		"{\"shape\":[5,-1]}", "{\"shape\":[25]}", "{\"shape\":[]}", "{\"shape\":[1,1,1,0]}",
		"{\"shape\":[-1,-1]}", "{\"shape\":[-2,-12]}", "{\"shape\":7}",
	};
	static const char *const flat[][2] = {
		{NULL, "[2,12]"}, {"{\"axis\":0}", "[1,24]"}, {"{\"axis\":3}", "[24,1]"},
		{"{\"axis\":-1}", "[6,4]"}, {"{\"axis\":-3}", "[1,24]"},
	};
	mu_tensor_t *x = ref_tensor("x", "[2,3,4]"), *y, *s;

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		assert_int_equal(ref_run("reshape", ok[i][0], &x, 1, &y, why, sizeof(why)), 0);
		ref_shape_is(y, ok[i][1]);
		same_data(y, x);
		assert_ptr_not_equal(y->data, x->data); /* a copy */
		mu_tensor_free(y);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(ref_run("reshape", bad[i], &x, 1, &y, why, sizeof(why)), MU_EPROTO);
		assert_non_null(strstr(why, "node node7"));
	}
	for (size_t i = 0; i < sizeof(flat) / sizeof(flat[0]); i++) {
		assert_int_equal(ref_run("flatten", flat[i][0], &x, 1, &y, why, sizeof(why)), 0);
		ref_shape_is(y, flat[i][1]);
		same_data(y, x);
		mu_tensor_free(y);
	}
	assert_int_equal(ref_run("flatten", "{\"axis\":4}", &x, 1, &y, why, sizeof(why)), MU_EPROTO);
	assert_int_equal(ref_run("flatten", "{\"axis\":-4}", &x, 1, &y, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "flatten axis out of range"));
	/* a scalar to [1,1] and back */
	s = ref_tensor("s", "[]");
	assert_int_equal(ref_run("reshape", "{\"shape\":[1,1]}", &s, 1, &y, why, sizeof(why)), 0);
	ref_shape_is(y, "[1,1]");
	same_data(y, s);
	{
		mu_tensor_t *z;

		assert_int_equal(ref_run("reshape", "{\"shape\":[]}", &y, 1, &z, why, sizeof(why)), 0);
		ref_shape_is(z, "[]");
		same_data(z, s);
		mu_tensor_free(z);
	}
	mu_tensor_free(y);
	mu_tensor_free(s);
	/* a zero-size tensor */
	s = ref_tensor("z", "[0,3]");
	assert_int_equal(ref_run("reshape", "{\"shape\":[-1]}", &s, 1, &y, why, sizeof(why)), 0);
	ref_shape_is(y, "[0]");
	mu_tensor_free(y);
	assert_int_equal(ref_run("reshape", "{\"shape\":[3,0,-1]}", &s, 1, &y, why, sizeof(why)), 0);
	ref_shape_is(y, "[3,3,0]");
	mu_tensor_free(y);
	/* 0 copies the input's dim (ONNX allowzero=0): [3,0] asks for [3,3] */
	assert_int_equal(ref_run("reshape", "{\"shape\":[3,0]}", &s, 1, &y, why, sizeof(why)), MU_EPROTO);
	mu_tensor_free(s);
	mu_tensor_free(x);
}

static void test_transpose(void **state)
{
	static const struct {
		const char *x, *attrs, *y;
	} cases[] = {
		{"[2,3,4]", "{\"perm\":[2,0,1]}", "[4,2,3]"},
		{"[2,3,4]", "{\"perm\":[0,2,1]}", "[2,4,3]"},
		{"[2,3,4]", "{\"perm\":[0,1,2]}", "[2,3,4]"},
		{"[2,3,4]", NULL, "[4,3,2]"},
		{"[5,7]", NULL, "[7,5]"},
		{"[6]", NULL, "[6]"},
		{"[]", NULL, "[]"},
		{"[2,3,1,4,2]", "{\"perm\":[3,1,4,0,2]}", "[4,3,2,2,1]"},
		{"[2,0,3]", "{\"perm\":[2,1,0]}", "[3,0,2]"},
	};
	static const char *const bad[] = {
		"{\"perm\":[0,0,1]}", "{\"perm\":[0,1]}", "{\"perm\":[0,1,3]}", "{\"perm\":[0,1,-1]}",
		"{\"perm\":[0,1,2,3]}",
	};
	int perm[MU_TENSOR_MAX_RANK];

	(void)state;
	for (size_t s = 0; s < sizeof(cases) / sizeof(cases[0]); s++) {
		mu_tensor_t *x = ref_tensor("x", cases[s].x), *y;
		mu__node_t n;
		int64_t p[MU_TENSOR_MAX_RANK];
		int k;
		double *ref;

		assert_int_equal(ref_run("transpose", cases[s].attrs, &x, 1, &y, why, sizeof(why)), 0);
		ref_shape_is(y, cases[s].y);
		memset(&n, 0, sizeof(n));
		n.attrs = cJSON_Parse(cases[s].attrs ? cases[s].attrs : "{}");
		k = mu__attr_ints(&n, "perm", p, MU_TENSOR_MAX_RANK);
		cJSON_Delete(n.attrs);
		for (uint32_t i = 0; i < x->rank; i++)
			perm[i] = k < 0 ? (int)(x->rank - 1 - i) : (int)p[i];
		ref = calloc(y->numel + 1, sizeof(double));
		for (uint64_t i = 0; i < y->numel; i++) {
			uint64_t c[MU_TENSOR_MAX_RANK], xc[MU_TENSOR_MAX_RANK], off = 0;

			ref_coords(y->dims, y->rank, i, c);
			for (uint32_t d = 0; d < y->rank; d++)
				xc[perm[d]] = c[d];
			for (uint32_t d = 0; d < x->rank; d++)
				off = off * x->dims[d] + xc[d];
			ref[i] = x->data[off];
		}
		ref_close(y, ref, 0, 0);
		free(ref);
		mu_tensor_free(y);
		mu_tensor_free(x);
	}
	for (size_t s = 0; s < sizeof(bad) / sizeof(bad[0]); s++) {
		mu_tensor_t *x = ref_tensor("x", "[2,3,4]"), *y;

		assert_int_equal(ref_run("transpose", bad[s], &x, 1, &y, why, sizeof(why)), MU_EPROTO);
		assert_non_null(strstr(why, "node node7: perm"));
		mu_tensor_free(x);
	}
}

static void test_concat(void **state)
{
	static const struct {
		const char *attrs, *shapes[3], *y;
		int axis;
	} cases[] = {
		{NULL, {"[2,3]", "[4,3]", NULL}, "[6,3]", 0},
		{"{\"axis\":1}", {"[2,3]", "[2,1]", "[2,5]"}, "[2,9]", 1},
		{"{\"axis\":-1}", {"[2,3,4]", "[2,3,1]", NULL}, "[2,3,5]", 2},
		{"{\"axis\":1}", {"[2,3,4]", "[2,0,4]", "[2,2,4]"}, "[2,5,4]", 1},
		{"{\"axis\":0}", {"[5]", NULL, NULL}, "[5]", 0},
	};

	(void)state;
	for (size_t s = 0; s < sizeof(cases) / sizeof(cases[0]); s++) {
		mu_tensor_t *in[3], *y;
		int nin = 0;
		double *ref;

		while (nin < 3 && cases[s].shapes[nin] != NULL) {
			in[nin] = ref_tensor("p", cases[s].shapes[nin]);
			nin++;
		}
		assert_int_equal(ref_run("concat", cases[s].attrs, in, nin, &y, why, sizeof(why)), 0);
		ref_shape_is(y, cases[s].y);
		ref = calloc(y->numel + 1, sizeof(double));
		for (uint64_t i = 0; i < y->numel; i++) {
			uint64_t c[MU_TENSOR_MAX_RANK] = {0}, off = 0;
			int j = 0, a = cases[s].axis;

			ref_coords(y->dims, y->rank, i, c);
			while (c[a] >= in[j]->dims[a]) /* which input holds it */
				c[a] -= in[j++]->dims[a];
			for (uint32_t d = 0; d < y->rank; d++)
				off = off * in[j]->dims[d] + c[d];
			ref[i] = in[j]->data[off];
		}
		ref_close(y, ref, 0, 0);
		free(ref);
		mu_tensor_free(y);
		for (int i = 0; i < nin; i++)
			mu_tensor_free(in[i]);
	}
}

static void test_concat_errors(void **state)
{
	mu_tensor_t *in[2], *y;

	(void)state;
	in[0] = ref_tensor("a", "[2,3]");
	in[1] = ref_tensor("b", "[2,4]");
	assert_int_equal(ref_run("concat", NULL, in, 2, &y, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "node node7: in1 differs off the concat axis"));
	assert_int_equal(ref_run("concat", "{\"axis\":2}", in, 2, &y, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "axis out of range"));
	mu_tensor_free(in[1]);
	in[1] = ref_tensor("b", "[2,3,1]");
	assert_int_equal(ref_run("concat", NULL, in, 2, &y, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "in1 has another rank"));
	mu_tensor_free(in[1]);
	in[1] = ref_tensor("s", "[]");
	assert_int_equal(ref_run("concat", NULL, &in[1], 1, &y, why, sizeof(why)), MU_EPROTO);
	mu_tensor_free(in[0]);
	mu_tensor_free(in[1]);
}

/* ---- slice: ONNX semantics for steps >= 1 ---- */

/* The indices ONNX Slice takes along a dim of size d (positive step). */
static int slice_idx(int64_t d, int64_t b, int64_t e, int64_t st, int64_t *idx)
{
	int n = 0;

	if (b < 0)
		b += d;
	if (e < 0)
		e += d;
	b = b < 0 ? 0 : b > d ? d : b;
	e = e < 0 ? 0 : e > d ? d : e;
	for (int64_t i = b; i < e; i += st)
		idx[n++] = i;
	return n;
}

static void test_slice(void **state)
{
	static const struct {
		const char *attrs;
		int64_t st[3], en[3], step[3];
	} cases[] = {
		{"{\"starts\":[1],\"ends\":[4]}", {1, 0, 0}, {4, 99, 99}, {1, 1, 1}},
		{"{\"starts\":[0,1],\"ends\":[2,3]}", {0, 1, 0}, {2, 3, 99}, {1, 1, 1}},
		{"{\"starts\":[-2],\"ends\":[-1],\"axes\":[1]}", {0, -2, 0}, {99, -1, 99}, {1, 1, 1}},
		{"{\"starts\":[1],\"ends\":[1000],\"axes\":[-1],\"steps\":[2]}", {0, 0, 1}, {99, 99, 1000}, {1, 1, 2}},
		{"{\"starts\":[-100],\"ends\":[100],\"axes\":[2],\"steps\":[3]}", {0, 0, -100}, {99, 99, 100}, {1, 1, 3}},
		{"{\"starts\":[3],\"ends\":[1],\"axes\":[0]}", {3, 0, 0}, {1, 99, 99}, {1, 1, 1}},
		{"{\"starts\":[0,0,0],\"ends\":[-1,-1,-1],\"axes\":[2,1,0],\"steps\":[1,2,3]}", {0, 0, 0},
		 {-1, -1, -1}, {3, 2, 1}},
		{"{\"starts\":[9007199254740992],\"ends\":[-9007199254740992]}", {99, 0, 0}, {-99, 99, 99}, {1, 1, 1}},
		{"{\"starts\":[0],\"ends\":[5],\"steps\":[9007199254740992]}", {0, 0, 0}, {5, 99, 99}, {99, 1, 1}},
	};

	(void)state;
	for (size_t s = 0; s < sizeof(cases) / sizeof(cases[0]); s++) {
		mu_tensor_t *x = ref_tensor("x", "[5,6,7]"), *y;
		int64_t idx[3][8];
		int n[3];
		double ref[256];
		size_t k = 0;

		assert_int_equal(ref_run("slice", cases[s].attrs, &x, 1, &y, why, sizeof(why)), 0);
		for (int a = 0; a < 3; a++)
			n[a] = slice_idx((int64_t)x->dims[a], cases[s].st[a], cases[s].en[a], cases[s].step[a], idx[a]);
		assert_int_equal(y->rank, 3);
		for (int a = 0; a < 3; a++)
			assert_int_equal(y->dims[a], n[a]);
		for (int i = 0; i < n[0]; i++)
			for (int j = 0; j < n[1]; j++)
				for (int l = 0; l < n[2]; l++)
					ref[k++] = x->data[idx[0][i] * 42 + idx[1][j] * 7 + idx[2][l]];
		assert_int_equal(k, y->numel);
		ref_close(y, ref, 0, 0);
		mu_tensor_free(y);
		mu_tensor_free(x);
	}
}

static void test_slice_errors(void **state)
{
	static const char *const bad[] = {
		"{\"starts\":[0],\"ends\":[1],\"steps\":[-1]}", /* negative steps: not supported */
		"{\"starts\":[0],\"ends\":[1],\"steps\":[0]}",
		"{\"starts\":[0],\"ends\":[1],\"axes\":[3]}",
		"{\"starts\":[0],\"ends\":[1],\"axes\":[-4]}",
		"{\"starts\":[0,0],\"ends\":[1]}",
		"{\"starts\":[0],\"ends\":[1],\"axes\":[0,1]}",
		"{\"ends\":[1]}",
		"{\"starts\":[0,0,0,0],\"ends\":[1,1,1,1]}",
	};
	mu_tensor_t *x = ref_tensor("x", "[5,6,7]"), *y;

	(void)state;
	for (size_t s = 0; s < sizeof(bad) / sizeof(bad[0]); s++) {
		if (ref_run("slice", bad[s], &x, 1, &y, why, sizeof(why)) != MU_EPROTO)
			fail_msg("%s was accepted", bad[s]);
		assert_non_null(strstr(why, "node node7"));
	}
	mu_tensor_free(x);
}

/* ---- embedding ---- */

static void test_embedding(void **state)
{
	static const float ids[] = {0, 4, 2, 1, 4, 0};
	mu_tensor_t *in[2], *y;
	static const float bad[] = {5, -1, 1.5f, NAN, 1e30f, INFINITY, -INFINITY, 4294967296.0f};

	(void)state;
	in[0] = ref_tensor("table", "[5,3]");
	in[1] = ref_values("ids", "[2,3]", ids);
	assert_int_equal(ref_run("embedding", NULL, in, 2, &y, why, sizeof(why)), 0);
	ref_shape_is(y, "[2,3,3]");
	for (int i = 0; i < 6; i++)
		assert_memory_equal(y->data + 3 * i, in[0]->data + 3 * (int)ids[i], 12);
	mu_tensor_free(y);
	mu_tensor_free(in[1]);
	in[1] = ref_values("ids", "[]", ids + 1); /* one id: [D] */
	assert_int_equal(ref_run("embedding", NULL, in, 2, &y, why, sizeof(why)), 0);
	ref_shape_is(y, "[3]");
	mu_tensor_free(y);
	for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
		mu_tensor_free(in[1]);
		in[1] = ref_values("ids", "[2]", ids);
		in[1]->data[1] = bad[b];
		assert_int_equal(ref_run("embedding", NULL, in, 2, &y, why, sizeof(why)), MU_EPROTO);
		assert_null(y);
	}
	mu_tensor_free(in[1]);
	in[1] = ref_tensor("ids", "[1,1,1,1,1,1,1,1]"); /* the output would have rank 9 */
	assert_int_equal(ref_run("embedding", NULL, in, 2, &y, why, sizeof(why)), MU_EPROTO);
	mu_tensor_free(in[1]);
	in[1] = ref_values("ids", "[2]", ids);
	mu_tensor_free(in[0]);
	in[0] = ref_tensor("table", "[15]");
	assert_int_equal(ref_run("embedding", NULL, in, 2, &y, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "node node7: embedding needs a 2-D table in0"));
	mu_tensor_free(in[0]);
	mu_tensor_free(in[1]);
}

/* ---- flops estimates, for the planner ---- */

static void test_flops(void **state)
{
	mu__node_t n;
	mu__shape_t in[2] = {{3, {2, 3, 4}, MU_DTYPE_F32}, {2, {4, 5}, MU_DTYPE_F32}};
	mu__shape_t out[1] = {{3, {2, 3, 5}, MU_DTYPE_F32}};

	(void)state;
	memset(&n, 0, sizeof(n));
	n.attrs = cJSON_Parse("{\"transA\":1}");
	assert_true(mu__op_find("matmul")->flops(&n, in, out) == 2.0 * 4 * 30);
	assert_true(mu__op_find("add")->flops(&n, in, out) == 30);
	assert_true(mu__op_find("reshape")->flops(&n, in, out) == 0);
	in[0].rank = 2;
	in[0].dims[0] = 4;
	in[0].dims[1] = 3;
	out[0].rank = 2;
	out[0].dims[0] = 3;
	out[0].dims[1] = 5;
	assert_true(mu__op_find("gemm")->flops(&n, in, out) == 2.0 * 4 * 15);
	cJSON_Delete(n.attrs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_helpers),
		cmocka_unit_test(test_binary),
		cmocka_unit_test(test_binary_errors),
		cmocka_unit_test(test_unary),
		cmocka_unit_test(test_gelu_approximations_differ),
		cmocka_unit_test(test_matmul),
		cmocka_unit_test(test_matmul_errors),
		cmocka_unit_test(test_gemm),
		cmocka_unit_test(test_gemm_errors),
		cmocka_unit_test(test_norms),
		cmocka_unit_test(test_norm_errors),
		cmocka_unit_test(test_softmax),
		cmocka_unit_test(test_reductions),
		cmocka_unit_test(test_reduction_errors),
		cmocka_unit_test(test_reshape_flatten),
		cmocka_unit_test(test_transpose),
		cmocka_unit_test(test_concat),
		cmocka_unit_test(test_concat_errors),
		cmocka_unit_test(test_slice),
		cmocka_unit_test(test_slice_errors),
		cmocka_unit_test(test_embedding),
		cmocka_unit_test(test_flops),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
