/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/kern/blas.c: mu__sgemm over pools of 1 to 4 threads
 * gives one thread's bits, and those of one cblas_sgemm over the whole of
 * C for products cut by rows; products turned over (few rows, many
 * columns) within rounding of it; every transpose, alpha and beta, and a
 * C wider than its n; and it leaves OpenBLAS's thread count as it found it.
 * OpenBLAS runs on one thread here, as the contract in kern/blas_int.h
 * asks of the program.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "mu_test.h"

#include "kern/blas_int.h"

static float *randoms(size_t n, unsigned *seed)
{
	float *v = malloc(n * sizeof(float) + 4);

	assert_non_null(v);
	for (size_t i = 0; i < n; i++) {
		*seed = *seed * 1103515245u + 12345u;
		v[i] = (float)((*seed >> 8) & 0xffff) / 65536.0f - 0.5f;
	}
	return v;
}

typedef struct {
	int m, n, k, ta, tb;
	float alpha, beta;
	int pad; /* ldc = n + pad */
} shape_t;

/* Whether mu__sgemm cuts this shape by rows (the bits of one cblas_sgemm)
 * rather than turning it over (kern/blas_int.h). */
static int by_rows(const shape_t *s)
{
	return s->m >= 2 * MU__GEMM_ALIGN || s->n < 2 * MU__GEMM_ALIGN;
}

static void one(mu__pool_t *pool, const shape_t *s, unsigned seed)
{
	int lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n, ldc = s->n + s->pad;
	size_t nc = (size_t)s->m * ldc;
	float *a = randoms((size_t)s->m * s->k, &seed), *b = randoms((size_t)s->k * s->n, &seed);
	float *c0 = randoms(nc, &seed), *c1 = malloc(nc * 4 + 4), *c2 = malloc(nc * 4 + 4);
	float big = 0.0f, off = 0.0f;

	assert_non_null(c1);
	assert_non_null(c2);
	memcpy(c1, c0, nc * 4);
	memcpy(c2, c0, nc * 4);
	cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
	            s->tb ? CblasTrans : CblasNoTrans, s->m, s->n, s->k, s->alpha, a, lda, b, ldb,
	            s->beta, c0, ldc);
	mu__sgemm(NULL, s->ta, s->tb, s->m, s->n, s->k, s->alpha, a, lda, b, ldb, s->beta, c2, ldc);
	mu__sgemm(pool, s->ta, s->tb, s->m, s->n, s->k, s->alpha, a, lda, b, ldb, s->beta, c1, ldc);
	if (memcmp(c2, c1, nc * 4) != 0)
		fail_msg("m %d n %d k %d ta %d tb %d on %d threads: not one thread's bits", s->m, s->n,
		         s->k, s->ta, s->tb, mu__pool_threads(pool));
	if (by_rows(s) && memcmp(c0, c1, nc * 4) != 0)
		fail_msg("m %d n %d k %d ta %d tb %d on %d threads: not the whole call's bits", s->m,
		         s->n, s->k, s->ta, s->tb, mu__pool_threads(pool));
	/* a turned product is the same product: within rounding of one call */
	for (size_t i = 0; i < nc; i++) {
		float d = c0[i] - c1[i];

		big = fabsf(c0[i]) > big ? fabsf(c0[i]) : big;
		off = fabsf(d) > off ? fabsf(d) : off;
	}
	if (off > 1e-5f * (big + 1.0f))
		fail_msg("m %d n %d k %d ta %d tb %d: off one call by %g (largest %g)", s->m, s->n,
		         s->k, s->ta, s->tb, (double)off, (double)big);
	free(a);
	free(b);
	free(c0);
	free(c1);
	free(c2);
}

static void test_sgemm_bits(void **state)
{
	static const shape_t shapes[] = {
		{512, 300, 257, 0, 0, 1.0f, 0.0f, 0},   /* cut along rows */
		{1000, 77, 300, 0, 0, 1.0f, 0.0f, 0},   /* rows, not at 64 */
		{70, 700, 300, 0, 0, 1.0f, 0.0f, 0},    /* turned over */
		{333, 333, 513, 1, 0, 1.0f, 0.0f, 0},
		{200, 650, 129, 0, 1, 0.5f, 1.0f, 0},
		{640, 129, 777, 1, 1, -2.0f, 0.25f, 0},
		{300, 300, 100, 0, 0, 1.0f, 0.0f, 5},   /* C wider than n */
		{129, 64, 4096, 0, 1, 1.0f, 0.0f, 3},
		{1, 4096, 200, 0, 0, 1.0f, 0.0f, 0},    /* one row */
		{8, 8, 8, 0, 0, 1.0f, 0.0f, 0},         /* too small to cut */
	};
	int before;

	(void)state;
	before = openblas_get_num_threads();
	openblas_set_num_threads(1);
	for (int t = 1; t <= 4; t++) {
		mu__pool_t *p;

		assert_int_equal(mu__pool_new(t, &p), 0);
		for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
			one(p, &shapes[i], 7u + (unsigned)i);
		mu__pool_free(p);
		assert_int_equal(openblas_get_num_threads(), 1);
	}
	one(NULL, &shapes[0], 1);
	openblas_set_num_threads(before);
}

/* Random shapes, both ways, on 3 threads. */
static void test_sgemm_random(void **state)
{
	unsigned seed = 12345;
	mu__pool_t *p;

	(void)state;
	openblas_set_num_threads(1);
	assert_int_equal(mu__pool_new(3, &p), 0);
	for (int i = 0; i < 40; i++) {
		shape_t s;

		seed = seed * 1103515245u + 12345u;
		s.m = 1 + (int)((seed >> 8) % 900);
		seed = seed * 1103515245u + 12345u;
		s.n = 1 + (int)((seed >> 8) % 600);
		seed = seed * 1103515245u + 12345u;
		s.k = 1 + (int)((seed >> 8) % 900);
		s.ta = (int)(seed >> 20) & 1;
		s.tb = (int)(seed >> 21) & 1;
		s.alpha = 1.0f;
		s.beta = (seed >> 22) & 1 ? 0.0f : 1.0f;
		s.pad = (int)(seed >> 23) & 3;
		one(p, &s, seed);
	}
	mu__pool_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sgemm_bits),
		cmocka_unit_test(test_sgemm_random),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
