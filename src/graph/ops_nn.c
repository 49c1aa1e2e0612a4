/* SPDX-License-Identifier: MIT */
/*
 * Linear algebra and normalization: matmul (numpy semantics, batch dims
 * broadcast) and gemm (ONNX: alpha * A' * B' + beta * C) through OpenBLAS,
 * split over the executor's pool (mu__sgemm);
 * layernorm, rmsnorm, batchnorm, instance_norm and lrn, accumulated in
 * index order; det (LU in double). All F32.
 */
#include <math.h>
#include <string.h>

#include "core/alloc_int.h"
#include "graph/ops_int.h"
#include "kern/blas_int.h"

/* ---- attribute checks (at load: a wrong type is an error, never a
 * silent default) ---- */

/* k, when present, is a finite number. */
static int want_num(const mu__node_t *n, const char *k, char *why, size_t wl)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(n->attrs, k);

	if (v == NULL || (cJSON_IsNumber(v) && isfinite(v->valuedouble)))
		return 0;
	return mu__fail(why, wl, "node %.100s: attribute %.60s must be a number", n->name, k);
}

/* ---- matmul ---- */

/* a [.., M, K] x b [.., K, N] (rank-1 operands promoted, as numpy) */
static int mm_dims(const mu__shape_t *a, const mu__shape_t *b, uint64_t *m,
                   uint64_t *k, uint64_t *kb, uint64_t *n)
{
	if (a->rank == 0 || b->rank == 0)
		return MU_EPROTO;
	*m = a->rank == 1 ? 1 : a->dims[a->rank - 2];
	*k = a->dims[a->rank - 1];
	*kb = b->rank == 1 ? b->dims[0] : b->dims[b->rank - 2];
	*n = b->rank == 1 ? 1 : b->dims[b->rank - 1];
	return *k == *kb ? 0 : MU_EPROTO;
}

static void batch_shape(const mu__shape_t *s, mu__shape_t *b)
{
	b->rank = s->rank > 2 ? s->rank - 2 : 0;
	memcpy(b->dims, s->dims, sizeof(uint64_t) * b->rank);
}

static int matmul_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                        char *why, size_t wl)
{
	mu__shape_t ba, bb, bo;
	uint64_t m, k, kb, nn;

	if (mm_dims(&in[0], &in[1], &m, &k, &kb, &nn) != 0)
		return mu__fail(why, wl, "node %.100s: inner dimensions of %.100s and its other operand differ",
		                n->name, n->in[0]);
	batch_shape(&in[0], &ba);
	batch_shape(&in[1], &bb);
	if (mu__broadcast(&ba, &bb, &bo) != 0)
		return mu__fail(why, wl, "node %.100s: batch dimensions do not broadcast%.0s", n->name, "");
	out[0] = bo;
	if (in[0].rank > 1)
		out[0].dims[out[0].rank++] = m;
	if (in[1].rank > 1)
		out[0].dims[out[0].rank++] = nn;
	return 0;
}

static void sgemm(mu__pool_t *pool, int ta, int tb, uint64_t m, uint64_t n, uint64_t k,
                  float alpha, const float *a, uint64_t lda, const float *b, uint64_t ldb,
                  float beta, float *c)
{
	mu__sgemm(pool, ta, tb, (int64_t)m, (int64_t)n, (int64_t)k, alpha, a, (int64_t)lda, b,
	          (int64_t)ldb, beta, c, (int64_t)n);
}

static int matmul_run_pool(mu__pool_t *pool, const mu__node_t *node, mu_tensor_t *const *in,
                           mu_tensor_t **out)
{
	mu__shape_t sa, sb, ba, bb, bo;
	uint64_t m, k, kb, n, sta[MU_TENSOR_MAX_RANK], stb[MU_TENSOR_MAX_RANK];
	uint64_t idx[MU_TENSOR_MAX_RANK] = {0}, nb, i, oa = 0, ob = 0;

	(void)node;
	mu__shape_of(in[0], &sa);
	mu__shape_of(in[1], &sb);
	if (mm_dims(&sa, &sb, &m, &k, &kb, &n) != 0)
		return MU_EPROTO;
	batch_shape(&sa, &ba);
	batch_shape(&sb, &bb);
	mu__broadcast(&ba, &bb, &bo);
	mu__bstrides(&ba, &bo, sta);
	mu__bstrides(&bb, &bo, stb);
	nb = mu__shape_numel(&bo);
	if (m == 0 || n == 0 || nb == 0)
		return 0;
	if (k == 0) {
		memset(out[0]->data, 0, out[0]->numel * 4);
		return 0;
	}
	for (i = 0; i < nb; i++) {
		sgemm(pool, 0, 0, m, n, k, 1.0f, in[0]->data + oa * m * k, k,
		      in[1]->data + ob * k * n, n, 0.0f, out[0]->data + i * m * n);
		for (int d = (int)bo.rank - 1; d >= 0; d--) { /* next batch index */
			idx[d]++;
			oa += sta[d];
			ob += stb[d];
			if (idx[d] < bo.dims[d])
				break;
			oa -= sta[d] * idx[d];
			ob -= stb[d] * idx[d];
			idx[d] = 0;
		}
	}
	return 0;
}

static int matmul_run(const mu__node_t *node, mu_tensor_t *const *in, mu_tensor_t **out)
{
	return matmul_run_pool(NULL, node, in, out);
}

static double matmul_flops(const mu__node_t *n, const mu__shape_t *in, const mu__shape_t *out)
{
	uint64_t m, k, kb, nn;

	(void)n;
	if (mm_dims(&in[0], &in[1], &m, &k, &kb, &nn) != 0)
		return 0;
	return 2.0 * (double)k * (double)mu__shape_numel(&out[0]);
}

const mu__op_t mu__op_matmul = {"matmul", 2, 2, 1, NULL, matmul_shape, matmul_run, matmul_flops, 0, 0,
                                matmul_run_pool};

/* ---- gemm ---- */

static int gemm_check(const mu__node_t *n, char *why, size_t wl)
{
	int rc = mu__want_int(n, "transA", 0, why, wl);

	if (rc == 0)
		rc = mu__want_int(n, "transB", 0, why, wl);
	if (rc == 0)
		rc = want_num(n, "alpha", why, wl);
	return rc == 0 ? want_num(n, "beta", why, wl) : rc;
}

static int gemm_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                      char *why, size_t wl)
{
	int ta = mu__attr_int(n, "transA", 0) != 0, tb = mu__attr_int(n, "transB", 0) != 0;
	uint64_t m, k, kb, nn;
	mu__shape_t mn, bc;

	if (in[0].rank != 2 || in[1].rank != 2)
		return mu__fail(why, wl, "node %.100s: gemm needs 2-D A and B (%.100s is not)", n->name, n->in[0]);
	m = in[0].dims[ta ? 1 : 0];
	k = in[0].dims[ta ? 0 : 1];
	kb = in[1].dims[tb ? 1 : 0];
	nn = in[1].dims[tb ? 0 : 1];
	if (k != kb)
		return mu__fail(why, wl, "node %.100s: inner dimensions of A and B differ%.0s", n->name, "");
	mn.rank = 2;
	mn.dims[0] = m;
	mn.dims[1] = nn;
	if (n->nin == 3 && (mu__broadcast(&in[2], &mn, &bc) != 0 || bc.dims[0] != m || bc.dims[1] != nn))
		return mu__fail(why, wl, "node %.100s: C does not broadcast to [M, N]%.0s", n->name, "");
	out[0] = mn;
	return 0;
}

static int gemm_run_pool(mu__pool_t *pool, const mu__node_t *n, mu_tensor_t *const *in,
                         mu_tensor_t **out)
{
	int ta = mu__attr_int(n, "transA", 0) != 0, tb = mu__attr_int(n, "transB", 0) != 0;
	float alpha = (float)mu__attr_num(n, "alpha", 1.0), beta = (float)mu__attr_num(n, "beta", 1.0);
	const mu_tensor_t *a = in[0], *b = in[1];
	mu_tensor_t *y = out[0];
	uint64_t m = y->dims[0], nn = y->dims[1], k = a->dims[ta ? 0 : 1];

	if (n->nin == 3) { /* Y starts as C broadcast; sgemm adds alpha*AB */
		mu__shape_t sc, sy;
		uint64_t st[MU_TENSOR_MAX_RANK];

		mu__shape_of(in[2], &sc);
		mu__shape_of(y, &sy);
		mu__bstrides(&sc, &sy, st);
		for (uint64_t i = 0; i < m; i++)
			for (uint64_t j = 0; j < nn; j++)
				y->data[i * nn + j] = in[2]->data[i * st[0] + j * st[1]];
	} else {
		beta = 0.0f;
	}
	if (m == 0 || nn == 0)
		return 0;
	if (k == 0) {
		for (uint64_t i = 0; i < m * nn; i++)
			y->data[i] *= beta;
		return 0;
	}
	sgemm(pool, ta, tb, m, nn, k, alpha, a->data, a->dims[1], b->data, b->dims[1], beta, y->data);
	return 0;
}

static int gemm_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	return gemm_run_pool(NULL, n, in, out);
}

static double gemm_flops(const mu__node_t *n, const mu__shape_t *in, const mu__shape_t *out)
{
	int ta = mu__attr_int(n, "transA", 0) != 0;

	return 2.0 * (double)in[0].dims[ta ? 0 : 1] * (double)mu__shape_numel(&out[0]);
}

const mu__op_t mu__op_gemm = {"gemm", 2, 3, 1, gemm_check, gemm_shape, gemm_run, gemm_flops, 0, 0,
                              gemm_run_pool};

/* ---- normalization ---- */

/* The split of x into [outer, inner] at axis (inner = dims from axis on). */
static int split(const mu__node_t *n, const mu_tensor_t *x, int64_t dflt,
                 uint64_t *outer, uint64_t *inner)
{
	int axis = mu__axis(mu__attr_int(n, "axis", dflt), x->rank);

	if (axis < 0)
		return MU_EPROTO;
	*outer = 1;
	*inner = 1;
	for (uint32_t i = 0; i < x->rank; i++)
		*((int)i < axis ? outer : inner) *= x->dims[i];
	return 0;
}

static int norm_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                      char *why, size_t wl)
{
	int axis = mu__axis(mu__attr_int(n, "axis", -1), in[0].rank);
	uint64_t inner = 1;

	if (axis < 0)
		return mu__fail(why, wl, "node %.100s: axis out of range for %.100s", n->name, n->in[0]);
	for (uint32_t i = (uint32_t)axis; i < in[0].rank; i++)
		inner *= in[0].dims[i];
	for (int j = 1; j < n->nin; j++)
		if (mu__shape_numel(&in[j]) != inner && mu__shape_numel(&in[j]) != 1)
			return mu__fail(why, wl, "node %.100s: scale or bias %.100s does not match the normalized size",
			                n->name, n->in[j]);
	out[0] = in[0];
	return 0;
}

static int layernorm_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	float eps = (float)mu__attr_num(n, "epsilon", 1e-5);
	const float *g = in[1]->data, *b = n->nin > 2 ? in[2]->data : NULL;
	int gs = in[1]->numel > 1, bs = n->nin > 2 && in[2]->numel > 1;
	uint64_t outer, inner;

	if (split(n, in[0], -1, &outer, &inner) != 0)
		return MU_EPROTO;
	for (uint64_t r = 0; r < outer; r++) {
		const float *x = in[0]->data + r * inner;
		float *y = out[0]->data + r * inner, mean = 0, var = 0;

		for (uint64_t i = 0; i < inner; i++)
			mean += x[i];
		mean /= (float)inner;
		for (uint64_t i = 0; i < inner; i++)
			var += (x[i] - mean) * (x[i] - mean);
		var /= (float)inner;
		for (uint64_t i = 0; i < inner; i++) {
			float v = (x[i] - mean) / sqrtf(var + eps) * g[gs ? i : 0];

			y[i] = b != NULL ? v + b[bs ? i : 0] : v;
		}
	}
	return 0;
}

static int rmsnorm_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	float eps = (float)mu__attr_num(n, "epsilon", 1e-6);
	int gs = in[1]->numel > 1;
	uint64_t outer, inner;

	if (split(n, in[0], -1, &outer, &inner) != 0)
		return MU_EPROTO;
	for (uint64_t r = 0; r < outer; r++) {
		const float *x = in[0]->data + r * inner;
		float *y = out[0]->data + r * inner, ss = 0, scale;

		for (uint64_t i = 0; i < inner; i++)
			ss += x[i] * x[i];
		scale = 1.0f / sqrtf(ss / (float)inner + eps);
		for (uint64_t i = 0; i < inner; i++)
			y[i] = x[i] * scale * in[1]->data[gs ? i : 0];
	}
	return 0;
}

static double norm_flops(const mu__node_t *n, const mu__shape_t *in, const mu__shape_t *out)
{
	(void)n;
	(void)in;
	return 5.0 * (double)mu__shape_numel(&out[0]);
}

static int norm_check(const mu__node_t *n, char *why, size_t wl)
{
	int rc = mu__want_int(n, "axis", 0, why, wl);

	return rc == 0 ? want_num(n, "epsilon", why, wl) : rc;
}

const mu__op_t mu__op_layernorm = {"layernorm", 2, 3, 1, norm_check, norm_shape, layernorm_run, norm_flops,
                                   0, 0, NULL};
const mu__op_t mu__op_rmsnorm = {"rmsnorm", 2, 2, 1, norm_check, norm_shape, rmsnorm_run, norm_flops, 0, 0, NULL};

/* ---- batchnorm (inference): (x - mean) / sqrt(var + eps) * scale + b per
 * channel (dim 1); instance_norm: the same with each (n, c)'s own mean and
 * biased variance over the spatial dims ---- */

static int bn_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                    size_t wl)
{
	uint64_t c = in[0].rank >= 2 ? in[0].dims[1] : 0;

	if (in[0].rank < 2)
		return mu__fail(why, wl, "node %.100s: %.100s needs a channel dim", n->name, n->in[0]);
	for (int j = 1; j < n->nin; j++)
		if (mu__shape_numel(&in[j]) != c)
			return mu__fail(why, wl, "node %.100s: %.100s must have one value per channel", n->name,
			                n->in[j]);
	out[0] = in[0];
	return 0;
}

static int batchnorm_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	float eps = (float)mu__attr_num(n, "epsilon", 1e-5);
	const mu_tensor_t *x = in[0];
	uint64_t c = x->dims[1], inner = c ? x->numel / x->dims[0] / c : 0;

	for (uint64_t i = 0; i < x->dims[0]; i++)
		for (uint64_t k = 0; k < c; k++) {
			const float *p = x->data + (i * c + k) * inner;
			float *q = out[0]->data + (i * c + k) * inner;
			float a = in[1]->data[k] / sqrtf(in[4]->data[k] + eps);
			float mean = in[3]->data[k], b = in[2]->data[k];

			for (uint64_t j = 0; j < inner; j++)
				q[j] = (p[j] - mean) * a + b;
		}
	return 0;
}

static int instnorm_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	float eps = (float)mu__attr_num(n, "epsilon", 1e-5);
	const mu_tensor_t *x = in[0];
	uint64_t c = x->dims[1], inner = c ? x->numel / x->dims[0] / c : 0;

	for (uint64_t i = 0; i < x->dims[0]; i++)
		for (uint64_t k = 0; k < c; k++) {
			const float *p = x->data + (i * c + k) * inner;
			float *q = out[0]->data + (i * c + k) * inner, mean = 0, var = 0;

			for (uint64_t j = 0; j < inner; j++)
				mean += p[j];
			mean /= (float)inner;
			for (uint64_t j = 0; j < inner; j++)
				var += (p[j] - mean) * (p[j] - mean);
			var /= (float)inner;
			for (uint64_t j = 0; j < inner; j++)
				q[j] = (p[j] - mean) / sqrtf(var + eps) * in[1]->data[k] + in[2]->data[k];
		}
	return 0;
}

static int eps_check(const mu__node_t *n, char *why, size_t wl)
{
	return want_num(n, "epsilon", why, wl);
}

const mu__op_t mu__op_batchnorm = {"batchnorm", 5, 5, 1, eps_check, bn_shape, batchnorm_run, norm_flops, 0, 0, NULL};
const mu__op_t mu__op_instance_norm = {"instance_norm", 3, 3, 1, eps_check, bn_shape, instnorm_run,
                                       norm_flops, 0, 0, NULL};



/* ---- lrn: x / (bias + alpha / size * sum of squares over the channels
 * around c)^beta (ONNX LRN) ---- */

static int lrn_check(const mu__node_t *n, char *why, size_t wl)
{
	int rc = mu__want_int(n, "size", 0, why, wl);

	if (rc == 0 && mu__attr_int(n, "size", 0) < 1)
		return mu__fail(why, wl, "node %.100s: lrn needs \"size\" >= 1%.0s", n->name, "");
	if (rc == 0)
		rc = want_num(n, "alpha", why, wl);
	if (rc == 0)
		rc = want_num(n, "beta", why, wl);
	return rc == 0 ? want_num(n, "bias", why, wl) : rc;
}

static int lrn_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                     size_t wl)
{
	if (in[0].rank < 2)
		return mu__fail(why, wl, "node %.100s: %.100s needs a channel dim", n->name, n->in[0]);
	out[0] = in[0];
	return 0;
}

static int lrn_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	const mu_tensor_t *x = in[0];
	int64_t size = mu__attr_int(n, "size", 1), lo = (size - 1) / 2, hi = size - 1 - lo;
	float alpha = (float)mu__attr_num(n, "alpha", 1e-4), beta = (float)mu__attr_num(n, "beta", 0.75);
	float bias = (float)mu__attr_num(n, "bias", 1.0);
	uint64_t c = x->dims[1], inner = c ? x->numel / x->dims[0] / c : 0;

	for (uint64_t b = 0; b < x->dims[0]; b++)
		for (int64_t k = 0; k < (int64_t)c; k++)
			for (uint64_t j = 0; j < inner; j++) {
				float ss = 0;

				for (int64_t q = k - lo; q <= k + hi; q++)
					if (q >= 0 && q < (int64_t)c) {
						float v = x->data[(b * c + (uint64_t)q) * inner + j];

						ss += v * v;
					}
				out[0]->data[(b * c + (uint64_t)k) * inner + j] =
				    x->data[(b * c + (uint64_t)k) * inner + j] / powf(bias + alpha / (float)size * ss, beta);
			}
	return 0;
}

const mu__op_t mu__op_lrn = {"lrn", 1, 1, 1, lrn_check, lrn_shape, lrn_run, norm_flops, 0, 0, NULL};

/* ---- det: the determinant of each [.., M, M] matrix, by LU with partial
 * pivoting in double ---- */

static int det_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                     size_t wl)
{
	if (in[0].rank < 2 || in[0].dims[in[0].rank - 1] != in[0].dims[in[0].rank - 2] ||
	    in[0].dims[in[0].rank - 1] > 4096)
		return mu__fail(why, wl, "node %.100s: %.100s is not a stack of square matrices (M <= 4096)",
		                n->name, n->in[0]);
	out[0] = in[0];
	out[0].rank -= 2;
	return 0;
}

static int det_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	uint64_t m = in[0]->dims[in[0]->rank - 1];
	double *a = mu__malloc((size_t)(m * m + 1) * sizeof(double));

	(void)n;
	if (a == NULL)
		return MU_ENOMEM;
	for (uint64_t k = 0; k < out[0]->numel; k++) {
		double det = 1;

		for (uint64_t i = 0; i < m * m; i++)
			a[i] = in[0]->data[k * m * m + i];
		for (uint64_t c = 0; c < m && det != 0; c++) {
			uint64_t p = c;

			for (uint64_t r = c + 1; r < m; r++)
				if (fabs(a[r * m + c]) > fabs(a[p * m + c]))
					p = r;
			if (p != c) {
				for (uint64_t j = 0; j < m; j++) {
					double t = a[c * m + j];

					a[c * m + j] = a[p * m + j];
					a[p * m + j] = t;
				}
				det = -det;
			}
			det *= a[c * m + c];
			for (uint64_t r = c + 1; det != 0 && r < m; r++) {
				double f = a[r * m + c] / a[c * m + c];

				for (uint64_t j = c; j < m; j++)
					a[r * m + j] -= f * a[c * m + j];
			}
		}
		out[0]->data[k] = (float)det;
	}
	mu__free(a);
	return 0;
}

static double det_flops(const mu__node_t *n, const mu__shape_t *in, const mu__shape_t *out)
{
	double m = (double)in[0].dims[in[0].rank - 1];

	(void)n;
	return (double)mu__shape_numel(&out[0]) * m * m * m * 2.0 / 3.0;
}

const mu__op_t mu__op_det = {"det", 1, 1, 1, NULL, det_shape, det_run, det_flops, 0, 0, NULL};
