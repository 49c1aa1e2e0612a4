/* SPDX-License-Identifier: MIT */
/*
 * Memory read bandwidth for bench/llm_types.py: the rate at which T threads
 * stream through a buffer far larger than the caches, the ceiling of a
 * decode step that reads every weight once.
 *
 *   readbw MIB PASSES T [T ...]
 *
 * prints one line "T GB/s" per thread count: the buffer's bytes over the
 * best of PASSES passes, each thread summing its own contiguous slice. The
 * loads are 32-byte AVX2 loads into four independent sums where the CPU
 * has AVX2, as a decode kernel's are (one 8-byte sum chains every load on
 * the previous add and measures the core, not the memory), else 16-byte
 * loads into four sums. bench/llm_types.py compiles it with the machine's
 * cc; it is not part of muster.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <immintrin.h>

#define MAX_THREADS 64

typedef uint64_t v2u64 __attribute__((vector_size(16)));

typedef struct {
	const uint64_t *a;
	size_t n; /* 8-byte words, a multiple of 16 */
	pthread_barrier_t *start;
	uint64_t sum;
} slice_t;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *a, size_t n)
{
	__m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
	uint64_t lanes[4];

	for (size_t i = 0; i < n; i += 16) {
		s0 = _mm256_add_epi64(s0, _mm256_load_si256((const __m256i *)(a + i)));
		s1 = _mm256_add_epi64(s1, _mm256_load_si256((const __m256i *)(a + i + 4)));
		s2 = _mm256_add_epi64(s2, _mm256_load_si256((const __m256i *)(a + i + 8)));
		s3 = _mm256_add_epi64(s3, _mm256_load_si256((const __m256i *)(a + i + 12)));
	}
	s0 = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
	memcpy(lanes, &s0, sizeof(lanes));
	return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

static uint64_t sum_sse2(const uint64_t *a, size_t n)
{
	const v2u64 *v = (const v2u64 *)a;
	v2u64 s0 = {0, 0}, s1 = s0, s2 = s0, s3 = s0;

	for (size_t i = 0; i < n / 2; i += 4) {
		s0 += v[i];
		s1 += v[i + 1];
		s2 += v[i + 2];
		s3 += v[i + 3];
	}
	s0 += s1 + s2 + s3;
	return s0[0] + s0[1];
}

static void *run_slice(void *arg)
{
	slice_t *s = arg;

	pthread_barrier_wait(s->start);
	s->sum = __builtin_cpu_supports("avx2") ? sum_avx2(s->a, s->n) : sum_sse2(s->a, s->n);
	return NULL;
}

/* Seconds of one pass of `threads` threads over the buffer. */
static double one_pass(const uint64_t *a, size_t words, int threads)
{
	pthread_t tid[MAX_THREADS];
	slice_t sl[MAX_THREADS];
	pthread_barrier_t start;
	size_t per = words / (size_t)threads / 16 * 16;
	double t0;

	pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
	for (int t = 0; t < threads; t++) {
		sl[t] = (slice_t){a + (size_t)t * per, per, &start, 0};
		pthread_create(&tid[t], NULL, run_slice, &sl[t]);
	}
	t0 = now_s();
	pthread_barrier_wait(&start);
	for (int t = 0; t < threads; t++)
		pthread_join(tid[t], NULL);
	t0 = now_s() - t0;
	pthread_barrier_destroy(&start);
	return t0 * (double)words / (double)(per * (size_t)threads);
}

/* A positive decimal number, or 0 when `s` is not one (or is over max). */
static long number(const char *s, long max)
{
	char *end;
	long v = strtol(s, &end, 10);

	return end == s || *end != '\0' || v < 1 || v > max ? 0 : v;
}

int main(int argc, char **argv)
{
	size_t bytes, words;
	uint64_t *a;
	long passes;

	if (argc < 4 || number(argv[1], 1 << 20) == 0 || number(argv[2], 1000) == 0) {
		fprintf(stderr, "usage: readbw MIB PASSES THREADS [THREADS ...]\n");
		return 2;
	}
	bytes = (size_t)number(argv[1], 1 << 20) << 20;
	passes = number(argv[2], 1000);
	words = bytes / 8;
	a = aligned_alloc(64, bytes);
	if (a == NULL) {
		fprintf(stderr, "readbw: cannot allocate %zu bytes\n", bytes);
		return 1;
	}
	memset(a, 1, bytes);
	for (int k = 3; k < argc; k++) {
		int threads = (int)number(argv[k], MAX_THREADS);
		double best = 1e30;

		if (threads == 0) {
			fprintf(stderr, "readbw: bad thread count %s\n", argv[k]);
			return 2;
		}
		for (long p = 0; p < passes; p++) {
			double t = one_pass(a, words, threads);

			best = t < best ? t : best;
		}
		printf("%d %.2f GB/s\n", threads, (double)bytes / best / 1e9);
	}
	free(a);
	return 0;
}
