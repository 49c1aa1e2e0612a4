/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the kernels' public face (src/kern/api.c,
 * include/muster/kern.h), used as a program would: the weight types by
 * name and code, every argument a caller can get wrong refused with
 * MU_EARG (and nothing written), rows converted both ways, the pool, and
 * products that give exactly the bits of the library's own mu__matmul for
 * every type, on every thread count.
 */
#include <errno.h>
#include <math.h>

#include "mu_test.h"

#include "muster/kern.h"
#include "kern/kern_int.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float rndf(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((double)(uint32_t)(rng >> 16) / 2147483648.0 - 1.0);
}

static void test_wtypes(void **state)
{
	int n = mu_wtype_count();

	(void)state;
	assert_int_equal(n, MU__WT_COUNT);
	for (int t = 0; t < n; t++) {
		const char *name = mu_wtype_name(t);

		assert_non_null(name);
		assert_int_equal(mu_wtype_from_name(name), t);
		assert_int_equal(mu_wtype_block(t), mu__wtypes[t].block);
		assert_int_equal(mu_wtype_row_bytes(t, 4 * mu_wtype_block(t)),
		                 mu__wtype_row_bytes((mu__wtype_t)t, 4 * mu_wtype_block(t)));
	}
	assert_int_equal(mu_wtype_row_bytes(mu_wtype_from_name("Q8_0"), 64), 68);
	assert_int_equal(mu_wtype_row_bytes(mu_wtype_from_name("Q8_0"), 48), 0);
	assert_int_equal(mu_wtype_block(mu_wtype_from_name("Q4_0")), 32);
	assert_int_equal(mu_wtype_block(mu_wtype_from_name("BF16")), 1);
	assert_int_equal(mu_wtype_from_name("IQ2_XXS"), MU_EARG); /* ggml's, not computed */
	assert_int_equal(mu_wtype_from_name("f32"), MU_EARG);
	assert_int_equal(mu_wtype_from_name(NULL), MU_EARG);
	assert_null(mu_wtype_name(-1));
	assert_null(mu_wtype_name(n));
	assert_int_equal(mu_wtype_block(n), 0);
	assert_int_equal(mu_wtype_row_bytes(-1, 32), 0);
	assert_int_equal(mu_wtype_row_bytes(0, 0), 0);
}

/* A width every type can hold: three blocks, at least 96 elements. */
static int64_t width(int t)
{
	int64_t b = mu_wtype_block(t);

	return b * (b >= 32 ? 3 : 96 / b);
}

/* A row of type t from x by mu_wtype_from_f32; for a type muster reads
 * but does not quantize (IQ4_NL), which that refuses with -ENOTSUP, random
 * blocks whose f16 scale (their first two bytes) is in +-2^-4. */
static void make_row(int t, const float *x, int64_t cols, unsigned char *row)
{
	size_t rb = mu_wtype_row_bytes(t, cols), bb = rb / (size_t)(cols / mu_wtype_block(t));

	if (mu__wtypes[t].from_f32 != NULL) {
		assert_int_equal(mu_wtype_from_f32(t, x, cols, row), 0);
		return;
	}
	assert_int_equal(mu_wtype_from_f32(t, x, cols, row), -ENOTSUP);
	for (size_t i = 0; i < rb; i++)
		row[i] = (unsigned char)(rndf() * 128 + 128);
	for (size_t b = 0; b < rb / bb; b++) {
		uint16_t h = mu__f32_to_f16(rndf() / 16);

		memcpy(row + b * bb, &h, 2);
	}
}

/* Rows both ways equal the table's conversions; bad arguments write nothing. */
static void test_rows(void **state)
{
	(void)state;
	for (int t = 0; t < mu_wtype_count(); t++) {
		int64_t cols = width(t);
		size_t rb = mu_wtype_row_bytes(t, cols);
		float *x = malloc(sizeof(float) * (size_t)cols), *back = malloc(sizeof(float) * (size_t)cols);
		float *want = malloc(sizeof(float) * (size_t)cols);
		unsigned char *row = malloc(rb), *ref = malloc(rb);

		assert_true(rb > 0 && x && back && want && row && ref);
		for (int64_t k = 0; k < cols; k++)
			x[k] = rndf() * 5;
		make_row(t, x, cols, row);
		if (mu__wtypes[t].from_f32 != NULL)
			mu__wtypes[t].from_f32(x, cols, ref);
		else
			memcpy(ref, row, rb);
		assert_memory_equal(row, ref, rb);
		assert_int_equal(mu_wtype_to_f32(t, row, cols, back), 0);
		mu__wtypes[t].to_f32(ref, cols, want);
		assert_memory_equal(back, want, sizeof(float) * (size_t)cols);
		free(x);
		free(back);
		free(want);
		free(row);
		free(ref);
	}
}

static void test_rows_args(void **state)
{
	float x[64] = {0}, back[64];
	unsigned char row[300];

	(void)state;
	memset(row, 0x11, sizeof(row));
	memset(back, 0x11, sizeof(back));
	assert_int_equal(mu_wtype_from_f32(mu_wtype_from_name("Q8_0"), x, 33, row), MU_EARG);
	assert_int_equal(mu_wtype_from_f32(-1, x, 32, row), MU_EARG);
	assert_int_equal(mu_wtype_from_f32(0, NULL, 32, row), MU_EARG);
	assert_int_equal(mu_wtype_from_f32(0, x, 32, NULL), MU_EARG);
	assert_int_equal(mu_wtype_to_f32(mu_wtype_from_name("Q4_0"), row, 16, back), MU_EARG);
	assert_int_equal(mu_wtype_to_f32(mu_wtype_count(), row, 32, back), MU_EARG);
	assert_int_equal(mu_wtype_to_f32(0, NULL, 32, back), MU_EARG);
	assert_int_equal(mu_wtype_to_f32(0, row, 0, back), MU_EARG);
	for (size_t i = 0; i < sizeof(row); i++)
		assert_int_equal(row[i], 0x11);
	for (int k = 0; k < 64; k++)
		assert_int_equal(((unsigned char *)back)[4 * k], 0x11);
}

typedef struct {
	int hits[1000];
} hits_t;

static void count(void *arg, int64_t lo, int64_t hi)
{
	hits_t *h = arg;

	for (int64_t i = lo; i < hi; i++)
		h->hits[i]++; /* each index is this range's alone */
}

static void test_pool(void **state)
{
	mu_pool_t *p = (mu_pool_t *)1;
	hits_t h;

	(void)state;
	assert_int_equal(mu_pool_new(0, &p), MU_EARG);
	assert_null(p);
	assert_int_equal(mu_pool_new(MU__POOL_MAX_THREADS + 1, &p), MU_EARG);
	assert_int_equal(mu_pool_new(1, NULL), MU_EARG);
	assert_int_equal(mu_pool_new(3, &p), 0);
	assert_int_equal(mu_pool_threads(p), 3);
	assert_int_equal(mu_pool_threads(NULL), 1);
	for (int with = 0; with < 2; with++) {
		memset(&h, 0, sizeof(h));
		mu_pool_run(with ? p : NULL, count, &h, 1000);
		for (int i = 0; i < 1000; i++)
			assert_int_equal(h.hits[i], 1);
	}
	memset(&h, 0, sizeof(h));
	mu_pool_run(p, count, &h, 0);
	mu_pool_run(p, NULL, &h, 10); /* does nothing */
	for (int i = 0; i < 1000; i++)
		assert_int_equal(h.hits[i], 0);
	mu_pool_free(p);
	mu_pool_free(NULL);
}

/* Every type: mu_matmul gives mu__matmul's bits, with and without a pool,
 * with and without bias, for 1 and several rows of x. */
static void test_matmul_bits(void **state)
{
	enum { ROWS = 37, N = 5 };
	float bias[ROWS], y[N * ROWS], want[N * ROWS];
	mu_pool_t *p;

	(void)state;
	assert_int_equal(mu_pool_new(2, &p), 0);
	for (int r = 0; r < ROWS; r++)
		bias[r] = rndf();
	for (int t = 0; t < mu_wtype_count(); t++) {
		int64_t cols = width(t);
		size_t rb = mu_wtype_row_bytes(t, cols);
		unsigned char *data = malloc(rb * ROWS);
		float *f = malloc(sizeof(float) * (size_t)cols), *x = malloc(sizeof(float) * (size_t)(N * cols));
		mu_wmat_t w = {t, data, ROWS, cols};
		mu__wmat_t m = {(mu__wtype_t)t, data, ROWS, cols};

		assert_true(data && f && x);
		for (int64_t k = 0; k < N * cols; k++)
			x[k] = rndf() * 2;
		for (int r = 0; r < ROWS; r++) {
			for (int64_t k = 0; k < cols; k++)
				f[k] = rndf();
			make_row(t, f, cols, data + (size_t)r * rb);
		}
		for (int n = 1; n <= N; n += N - 1)
			for (int with = 0; with < 4; with++) {
				mu_pool_t *pool = with & 1 ? p : NULL;
				const float *b = with & 2 ? bias : NULL;

				memset(y, 0xff, sizeof(y));
				assert_int_equal(mu_matmul(pool, &w, x, n, y, b), 0);
				assert_int_equal(mu__matmul(NULL, &m, x, n, want, b), 0);
				if (memcmp(y, want, sizeof(float) * (size_t)(n * ROWS)) != 0)
					fail_msg("%s: mu_matmul differs from mu__matmul (n %d, case %d)",
					         mu_wtype_name(t), n, with);
			}
		free(data);
		free(f);
		free(x);
	}
	mu_pool_free(p);
}

/* What a caller can get wrong is MU_EARG and leaves y alone; n or rows 0
 * does nothing; the only other failure is no memory for x's quants. */
static void test_matmul_args(void **state)
{
	float x[64] = {0}, y[8];
	unsigned char q[2 * 34] = {0};
	int q8 = mu_wtype_from_name("Q8_0");
	mu_wmat_t w = {q8, q, 2, 32};

	(void)state;
	memset(y, 0x33, sizeof(y));
	assert_int_equal(mu_matmul(NULL, NULL, x, 1, y, NULL), MU_EARG);
	assert_int_equal(mu_matmul(NULL, &w, x, -1, y, NULL), MU_EARG);
	assert_int_equal(mu_matmul(NULL, &w, NULL, 1, y, NULL), MU_EARG);
	assert_int_equal(mu_matmul(NULL, &w, x, 1, NULL, NULL), MU_EARG);
	w.cols = 48; /* not whole Q8_0 blocks */
	assert_int_equal(mu_matmul(NULL, &w, x, 1, y, NULL), MU_EARG);
	w.cols = 32;
	w.type = mu_wtype_count();
	assert_int_equal(mu_matmul(NULL, &w, x, 1, y, NULL), MU_EARG);
	w.type = q8;
	w.rows = -1;
	assert_int_equal(mu_matmul(NULL, &w, x, 1, y, NULL), MU_EARG);
	w.rows = 2;
	w.data = NULL;
	assert_int_equal(mu_matmul(NULL, &w, x, 1, y, NULL), MU_EARG);
	for (int i = 0; i < 8; i++)
		assert_int_equal(((unsigned char *)y)[4 * i], 0x33);
	w.data = q;
	assert_int_equal(mu_matmul(NULL, &w, NULL, 0, NULL, NULL), 0);
	w.rows = 0;
	assert_int_equal(mu_matmul(NULL, &w, x, 1, y, NULL), 0);
	w.rows = 2;
	mu_test_fail_after(0);
	assert_int_equal(mu_matmul(NULL, &w, x, 1, y, NULL), MU_ENOMEM);
	mu_test_alloc_reset();
	assert_int_equal(((unsigned char *)y)[0], 0x33);
	assert_int_equal(mu_matmul(NULL, &w, x, 1, y, NULL), 0);
	assert_true(y[0] == 0 && y[1] == 0);
}

static void test_isa(void **state)
{
	(void)state;
	assert_string_equal(mu_kern_isa(), mu__kern_isa());
	print_message("mu_kern_isa: %s\n", mu_kern_isa());
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wtypes),
		cmocka_unit_test(test_rows),
		cmocka_unit_test(test_rows_args),
		cmocka_unit_test(test_pool),
		cmocka_unit_test(test_matmul_bits),
		cmocka_unit_test(test_matmul_args),
		cmocka_unit_test(test_isa),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
