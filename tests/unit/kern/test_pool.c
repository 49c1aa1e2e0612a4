/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the kernels' thread pool (src/kern/pool.c): n = 0, n
 * below the thread count, every index run exactly once in non-empty
 * ranges, the workers really taking work, many short jobs in a row, jobs
 * after the workers went to sleep, and pools freed busy or asleep; the
 * indexed run's thread numbers, each within the pool and never running
 * two ranges at once (what per-thread scratch relies on).
 */
#include <stdatomic.h>
#include <unistd.h>

#include <uv.h>

#include "mu_test.h"

#include "kern/kern_int.h"

enum { TMAX = 4 };

typedef struct {
	atomic_int hits[4096];
	atomic_int calls, bad, nthreads;
	uv_thread_t seen[8];
	uv_mutex_t mu;
	int wait_for_two; /* each chunk waits (up to 5 s) until two threads ran */
} cover_t;

static void cover_fn(void *arg, int64_t lo, int64_t hi)
{
	cover_t *c = arg;
	uv_thread_t me = uv_thread_self();
	int known = 0;

	atomic_fetch_add(&c->calls, 1);
	if (!(lo >= 0 && lo < hi && hi <= 4096))
		atomic_store(&c->bad, 1);
	for (int64_t i = lo; i < hi && i < 4096 && i >= 0; i++)
		atomic_fetch_add(&c->hits[i], 1);
	uv_mutex_lock(&c->mu);
	for (int k = 0; k < c->nthreads; k++)
		known |= uv_thread_equal(&c->seen[k], &me);
	if (!known && c->nthreads < 8)
		c->seen[c->nthreads++] = me;
	uv_mutex_unlock(&c->mu);
	for (int ms = 0; c->wait_for_two && atomic_load(&c->nthreads) < 2 && ms < 5000; ms++)
		usleep(1000);
}

static void cover(mu__pool_t *p, int64_t n, int wait_for_two)
{
	cover_t *c = calloc(1, sizeof(*c));

	assert_non_null(c);
	assert_int_equal(uv_mutex_init(&c->mu), 0);
	c->wait_for_two = wait_for_two;
	mu__pool_run(p, cover_fn, c, n);
	assert_int_equal(atomic_load(&c->bad), 0);
	for (int64_t i = 0; i < 4096; i++)
		assert_int_equal(atomic_load(&c->hits[i]), i < n ? 1 : 0);
	if (n == 0)
		assert_int_equal(atomic_load(&c->calls), 0);
	assert_true(atomic_load(&c->calls) <= (n < 64 ? n : 64));
	if (wait_for_two)
		assert_true(atomic_load(&c->nthreads) >= 2);
	uv_mutex_destroy(&c->mu);
	free(c);
}

static void test_pool(void **state)
{
	mu__pool_t *pools[TMAX], *p;
	static const int64_t ns[] = {0, 1, 2, 3, 5, 7, 16, 100, 1000, 4096};

	for (int t = 0; t < TMAX; t++)
		assert_int_equal(mu__pool_new(t + 1, &pools[t]), 0);
	assert_int_equal(mu__pool_new(0, &p), MU_EARG);
	assert_null(p);
	mu__pool_free(NULL);
	assert_int_equal(mu__pool_threads(NULL), 1);
	for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
		cover(NULL, ns[k], 0);
		for (int t = 0; t < TMAX; t++) {
			assert_int_equal(mu__pool_threads(pools[t]), t + 1);
			cover(pools[t], ns[k], 0);
		}
	}
	/* the workers do take work (each chunk waits for a second thread) */
	for (int t = 1; t < TMAX; t++)
		cover(pools[t], 64, 1);
	/* many short jobs in a row, then jobs after the workers fell asleep */
	for (int r = 0; r < 20000; r++)
		cover(pools[r % TMAX], r % 9, 0);
	for (int r = 0; r < 6; r++) {
		usleep(3000);
		cover(pools[3], 4096, 0);
	}
	/* a pool started and freed at once, and one freed while asleep */
	assert_int_equal(mu__pool_new(3, &p), 0);
	mu__pool_free(p);
	assert_int_equal(mu__pool_new(3, &p), 0);
	cover(p, 10, 0);
	usleep(3000);
	mu__pool_free(p);
	for (int t = 0; t < TMAX; t++)
		mu__pool_free(pools[t]);
}

typedef struct {
	atomic_int hits[4096];
	atomic_int busy[TMAX]; /* ranges running on thread i now */
	atomic_int used[TMAX]; /* ranges thread i ran */
	atomic_int bad;
	int threads;
} indexed_t;

static void indexed_fn(void *arg, int64_t lo, int64_t hi, int thread)
{
	indexed_t *c = arg;

	if (thread < 0 || thread >= c->threads || lo < 0 || lo >= hi || hi > 4096) {
		atomic_store(&c->bad, 1);
		return;
	}
	if (atomic_fetch_add(&c->busy[thread], 1) != 0)
		atomic_store(&c->bad, 2); /* two ranges at once on one thread */
	atomic_fetch_add(&c->used[thread], 1);
	for (int64_t i = lo; i < hi; i++)
		atomic_fetch_add(&c->hits[i], 1);
	usleep(200); /* long enough for the others to overlap */
	atomic_fetch_sub(&c->busy[thread], 1);
}

static void test_pool_indexed(void **state)
{
	static const int64_t ns[] = {0, 1, 3, 17, 256, 4096};

	(void)state;
	for (int t = 1; t <= TMAX; t++) {
		mu__pool_t *p;
		int others = 0;

		assert_int_equal(mu__pool_new(t, &p), 0);
		for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
			indexed_t *c = calloc(1, sizeof(*c));

			assert_non_null(c);
			c->threads = t;
			mu__pool_run_indexed(p, indexed_fn, c, ns[k]);
			assert_int_equal(atomic_load(&c->bad), 0);
			for (int64_t i = 0; i < 4096; i++)
				assert_int_equal(atomic_load(&c->hits[i]), i < ns[k] ? 1 : 0);
			for (int i = 1; i < TMAX; i++)
				others += atomic_load(&c->used[i]);
			free(c);
		}
		if (t == 1)
			assert_int_equal(others, 0); /* the caller alone: thread 0 */
		mu__pool_free(p);
	}
	/* no pool: the caller runs it all as thread 0 */
	{
		indexed_t *c = calloc(1, sizeof(*c));

		assert_non_null(c);
		c->threads = 1;
		mu__pool_run_indexed(NULL, indexed_fn, c, 100);
		assert_int_equal(atomic_load(&c->bad), 0);
		assert_int_equal(atomic_load(&c->used[0]), 1);
		free(c);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pool),
		cmocka_unit_test(test_pool_indexed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
