/* SPDX-License-Identifier: MIT */
/*
 * mu__sgemm: a product cut into tile-aligned pieces of C, one cblas_sgemm
 * per piece on the pool (see kern/blas_int.h for why the pieces' bits are
 * the whole call's). OpenBLAS's own thread count is left as the program
 * set it.
 */
#include <cblas.h>

#include "kern/blas_int.h"

/* Below this many multiply-adds a product runs in one call: cutting it
 * costs more than it saves (OpenBLAS itself threads only above m n k =
 * 65536 * 4, its GEMM_MULTITHREAD_THRESHOLD). */
#define MU__GEMM_SPLIT_MIN (1 << 18)
/* Pieces per thread, for balance on a shared machine; more would pack B
 * (for a cut along rows) more often. */
#define MU__GEMM_PIECES 2

typedef struct {
	int ta, tb, rows;   /* rows: pieces are rows of C, else columns */
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
 * (or columns) each, the last one cut at m (or n). */
static void pieces(void *arg, int64_t lo, int64_t hi)
{
	const gemm_t *g = arg;
	int64_t from = lo * g->units / g->pieces * MU__GEMM_ALIGN;
	int64_t to = hi * g->units / g->pieces * MU__GEMM_ALIGN, r;

	if (g->rows) {
		r = (to < g->m ? to : g->m) - from;
		call(g->ta, g->tb, r, g->n, g->k, g->alpha, g->ta ? g->a + from : g->a + from * g->lda,
		     g->lda, g->b, g->ldb, g->beta, g->c + from * g->ldc, g->ldc);
	} else {
		r = (to < g->n ? to : g->n) - from;
		call(g->ta, g->tb, g->m, r, g->k, g->alpha, g->a, g->lda,
		     g->tb ? g->b + from * g->ldb : g->b + from, g->ldb, g->beta, g->c + from, g->ldc);
	}
}

void mu__sgemm(mu__pool_t *pool, int ta, int tb, int64_t m, int64_t n, int64_t k,
               float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
               float beta, float *c, int64_t ldc)
{
	int64_t um = (m + MU__GEMM_ALIGN - 1) / MU__GEMM_ALIGN;
	int64_t un = (n + MU__GEMM_ALIGN - 1) / MU__GEMM_ALIGN;
	int threads = mu__pool_threads(pool);
	gemm_t g = {ta, tb, um >= un, m, n, k, 0, 0, alpha, beta, a, b, lda, ldb, ldc, c};

	g.units = g.rows ? um : un;
	g.pieces = g.units < (int64_t)threads * MU__GEMM_PIECES ? g.units
	                                                        : (int64_t)threads * MU__GEMM_PIECES;
	if (threads == 1 || g.pieces < 2 || (double)m * (double)n * (double)k < MU__GEMM_SPLIT_MIN) {
		call(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
		return;
	}
	mu__pool_run(pool, pieces, &g, g.pieces);
}
