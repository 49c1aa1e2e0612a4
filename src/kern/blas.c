/* SPDX-License-Identifier: MIT */
/*
 * mu__sgemm: a product cut into row pieces of C, one cblas_sgemm per piece
 * on the pool (see kern/blas_int.h for why the pieces' bits are the whole
 * call's, and why a product with few rows is turned over first). OpenBLAS's
 * own thread count is left as the program set it.
 */
#include <stdlib.h>

#include <cblas.h>

#include "kern/blas_int.h"

/* Below this many multiply-adds a product runs in one call: cutting it
 * costs more than it saves (OpenBLAS itself threads only above m n k =
 * 65536 * 4, its GEMM_MULTITHREAD_THRESHOLD). */
#define MU__GEMM_SPLIT_MIN (1 << 18)
/* Pieces per thread, for balance on a shared machine; more would pack B
 * more often. */
#define MU__GEMM_PIECES 2
/* The transpose's square tile, in elements. */
#define MU__GEMM_TILE 32

typedef struct {
	int ta, tb;
	int64_t m, n, k, units, pieces;
	float alpha, beta;
	const float *a, *b;
	int64_t lda, ldb, ldc;
	float *c;
} gemm_t;

static void call(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                 int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
	cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
	            (blasint)m, (blasint)n, (blasint)k, alpha, a, (blasint)lda, b, (blasint)ldb,
	            beta, c, (blasint)ldc);
}

/* Pieces [lo, hi): piece p is units [p U / P, (p + 1) U / P) of ALIGN rows
 * each, the last one cut at m. */
static void pieces(void *arg, int64_t lo, int64_t hi)
{
	const gemm_t *g = arg;
	int64_t from = lo * g->units / g->pieces * MU__GEMM_ALIGN;
	int64_t to = hi * g->units / g->pieces * MU__GEMM_ALIGN;

	if (to > g->m)
		to = g->m;
	call(g->ta, g->tb, to - from, g->n, g->k, g->alpha, g->ta ? g->a + from : g->a + from * g->lda,
	     g->lda, g->b, g->ldb, g->beta, g->c + from * g->ldc, g->ldc);
}

/* The product cut along C's rows over the pool: the bits of one call. */
static void by_rows(mu__pool_t *pool, int ta, int tb, int64_t m, int64_t n, int64_t k,
                    float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                    float beta, float *c, int64_t ldc)
{
	int64_t threads = mu__pool_threads(pool);
	gemm_t g = {ta, tb, m, n, k, (m + MU__GEMM_ALIGN - 1) / MU__GEMM_ALIGN, 0,
	            alpha, beta, a, b, lda, ldb, ldc, c};

	g.pieces = g.units < threads * MU__GEMM_PIECES ? g.units : threads * MU__GEMM_PIECES;
	if (threads == 1 || g.pieces < 2)
		call(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
	else
		mu__pool_run(pool, pieces, &g, g.pieces);
}

/* C = T^T + beta C, T n x m row-major, in square tiles. */
static void add_transposed(const float *t, int64_t m, int64_t n, float beta, float *c,
                           int64_t ldc)
{
	for (int64_t i0 = 0; i0 < m; i0 += MU__GEMM_TILE)
		for (int64_t j0 = 0; j0 < n; j0 += MU__GEMM_TILE) {
			int64_t i1 = i0 + MU__GEMM_TILE < m ? i0 + MU__GEMM_TILE : m;
			int64_t j1 = j0 + MU__GEMM_TILE < n ? j0 + MU__GEMM_TILE : n;

			for (int64_t i = i0; i < i1; i++)
				for (int64_t j = j0; j < j1; j++) {
					float v = t[j * m + i];

					/* beta 0 overwrites C, NaNs and all, as BLAS does */
					c[i * ldc + j] = beta == 0.0f ? v : beta * c[i * ldc + j] + v;
				}
		}
}

void mu__sgemm(mu__pool_t *pool, int ta, int tb, int64_t m, int64_t n, int64_t k,
               float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
               float beta, float *c, int64_t ldc)
{
	float *t;

	/* The route depends on the shape alone, never on the thread count, so
	 * every pool gives the same bits. */
	if ((double)m * (double)n * (double)k < MU__GEMM_SPLIT_MIN) {
		call(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
		return;
	}
	if (m >= 2 * MU__GEMM_ALIGN || n < 2 * MU__GEMM_ALIGN) {
		by_rows(pool, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
		return;
	}
	/* Few rows, many columns: T = op(B)^T op(A)^T has n rows to cut. */
	t = malloc((size_t)m * (size_t)n * sizeof(float));
	if (!t) {
		/* No room to turn it over: one call, whose bits may differ from
		 * the turned product's in the last place (said in blas_int.h). */
		call(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
		return;
	}
	by_rows(pool, !tb, !ta, n, m, k, alpha, b, ldb, a, lda, 0.0f, t, m);
	add_transposed(t, m, n, beta, c, ldc);
	free(t);
}
