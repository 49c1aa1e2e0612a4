/* SPDX-License-Identifier: MIT */
/*
 * The kernels' thread pool: threads - 1 workers on libuv threads, plus the
 * caller, run one job at a time. A job is [0, n) cut into chunks that the
 * threads claim from an atomic counter, so a thread the machine holds back
 * (others share its cores) delays only the chunk it holds.
 *
 * A job ends when its chunks are done, not when every worker has looked
 * at it: on a shared machine a worker may not run for milliseconds, and
 * the caller (or another worker) takes its chunks meanwhile. So a late
 * worker may wake to a job that is over, or already the next one. It
 * claims a chunk with a compare-and-swap on one word holding the job's
 * number and the next chunk, and reads the job's fields (atomics) before
 * that CAS: if the CAS succeeds, the job was not over, so the fields it
 * read were that job's; if not, it read nothing it will use.
 *
 * A decode step calls the pool several times per layer with little work
 * each, so waking must be fast: a waiting thread spins on the job counter
 * for a while (MU__POOL_SPIN_NS) before it sleeps on a condition variable,
 * and the caller only takes the mutex to signal when someone sleeps. The
 * sleeper counts and the counters they wait on are sequentially consistent
 * atomics: a sleeper announces itself, then looks at the counter; the
 * other side moves the counter, then looks at the sleepers. One of them
 * sees the other, so no wakeup is lost.
 *
 * The results never depend on which thread ran which chunk: callers give
 * each index its own output (the kernels' determinism rests on that).
 */
#include <stdatomic.h>
#include <stdint.h>

#include <uv.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "kern/kern_int.h"

/* How long a waiting thread spins before it sleeps. */
#define MU__POOL_SPIN_NS 200000u
/* Chunks per thread in a job, for balance on a shared machine. */
#define MU__POOL_CHUNKS 4

struct mu_pool_s {
	int threads;
	uv_thread_t *tid; /* threads - 1 */
	int started;      /* workers running */
	uv_mutex_t mu;
	uv_cond_t wake;   /* workers sleep on it, waiting for a job */
	uv_cond_t done;   /* the caller sleeps on it, waiting for the chunks */
	atomic_uint_fast32_t gen;   /* job number; bumped to start one */
	atomic_int sleepers;        /* workers asleep (or about to be) on wake */
	atomic_int caller_asleep;
	atomic_int stop;
	/* the current job: written by the caller before it sets claim */
	_Atomic(mu__pool_fn) fn;
	_Atomic(void *) arg;
	atomic_int_fast64_t n, chunk;
	atomic_uint_fast32_t nchunks;
	atomic_uint_fast64_t claim;  /* job number << 32 | next chunk */
	atomic_uint_fast32_t finished; /* chunks done */
};

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* Run chunks of job g until none is left (or the job is not g's). */
static void work(mu__pool_t *p, uint32_t g)
{
	for (;;) {
		uint64_t c = atomic_load(&p->claim);
		uint32_t idx = (uint32_t)c;
		mu__pool_fn fn;
		void *arg;
		int64_t n, chunk, lo;

		if ((uint32_t)(c >> 32) != g || idx >= atomic_load_explicit(&p->nchunks, memory_order_relaxed))
			return;
		fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
		arg = atomic_load_explicit(&p->arg, memory_order_relaxed);
		n = atomic_load_explicit(&p->n, memory_order_relaxed);
		chunk = atomic_load_explicit(&p->chunk, memory_order_relaxed);
		if (!atomic_compare_exchange_weak(&p->claim, &c, c + 1))
			continue;
		lo = (int64_t)idx * chunk;
		fn(arg, lo, n - lo < chunk ? n : lo + chunk);
		if (atomic_fetch_add(&p->finished, 1) + 1 ==
		        atomic_load_explicit(&p->nchunks, memory_order_relaxed) &&
		    atomic_load(&p->caller_asleep)) {
			uv_mutex_lock(&p->mu);
			uv_cond_signal(&p->done);
			uv_mutex_unlock(&p->mu);
		}
	}
}

/* Spin until *v differs from old (1) or the spin time is up (0). */
static int spin_u32(atomic_uint_fast32_t *v, uint32_t old)
{
	uint64_t t0 = uv_hrtime();

	for (unsigned i = 1;; i++) {
		if (atomic_load_explicit(v, memory_order_acquire) != old)
			return 1;
		cpu_relax();
		if ((i & 63) == 0 && uv_hrtime() - t0 > MU__POOL_SPIN_NS)
			return 0;
	}
}

static void worker(void *arg)
{
	mu__pool_t *p = arg;
	uint32_t seen = 0;

	for (;;) {
		if (!spin_u32(&p->gen, seen)) {
			uv_mutex_lock(&p->mu);
			atomic_fetch_add(&p->sleepers, 1);
			while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
				uv_cond_wait(&p->wake, &p->mu);
			atomic_fetch_sub(&p->sleepers, 1);
			uv_mutex_unlock(&p->mu);
		}
		if (atomic_load(&p->stop))
			return;
		seen = (uint32_t)atomic_load(&p->gen);
		work(p, seen);
	}
}

int mu__pool_new(int threads, mu__pool_t **out)
{
	mu__pool_t *p;

	*out = NULL;
	if (threads < 1 || threads > MU__POOL_MAX_THREADS)
		return MU_EARG;
	p = mu__calloc(1, sizeof(*p));
	if (p == NULL)
		return MU_ENOMEM;
	p->threads = threads;
	if (threads > 1 && (p->tid = mu__calloc((size_t)threads - 1, sizeof(*p->tid))) == NULL) {
		mu__free(p);
		return MU_ENOMEM;
	}
	if (uv_mutex_init(&p->mu) != 0) {
		mu__free(p->tid);
		mu__free(p);
		return MU_ENOMEM;
	}
	if (uv_cond_init(&p->wake) != 0) {
		uv_mutex_destroy(&p->mu);
		mu__free(p->tid);
		mu__free(p);
		return MU_ENOMEM;
	}
	if (uv_cond_init(&p->done) != 0) {
		uv_cond_destroy(&p->wake);
		uv_mutex_destroy(&p->mu);
		mu__free(p->tid);
		mu__free(p);
		return MU_ENOMEM;
	}
	for (int i = 0; i < threads - 1; i++) {
		int rc = uv_thread_create(&p->tid[i], worker, p);

		if (rc != 0) {
			mu__pool_free(p);
			return rc;
		}
		p->started++;
	}
	*out = p;
	return 0;
}

void mu__pool_free(mu__pool_t *p)
{
	if (p == NULL)
		return;
	uv_mutex_lock(&p->mu);
	atomic_store(&p->stop, 1);
	uv_cond_broadcast(&p->wake);
	uv_mutex_unlock(&p->mu);
	for (int i = 0; i < p->started; i++)
		uv_thread_join(&p->tid[i]);
	uv_cond_destroy(&p->done);
	uv_cond_destroy(&p->wake);
	uv_mutex_destroy(&p->mu);
	mu__free(p->tid);
	mu__free(p);
}

int mu__pool_threads(const mu__pool_t *p)
{
	return p ? p->threads : 1;
}

void mu__pool_run(mu__pool_t *p, mu__pool_fn fn, void *arg, int64_t n)
{
	int64_t chunks, chunk;
	uint32_t g, nch;

	if (n <= 0)
		return;
	if (p == NULL || p->threads == 1 || n == 1) {
		fn(arg, 0, n);
		return;
	}
	chunks = (int64_t)p->threads * MU__POOL_CHUNKS;
	chunk = (n + chunks - 1) / chunks;
	nch = (uint32_t)((n + chunk - 1) / chunk);
	g = (uint32_t)atomic_load(&p->gen) + 1;
	atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
	atomic_store_explicit(&p->arg, arg, memory_order_relaxed);
	atomic_store_explicit(&p->n, n, memory_order_relaxed);
	atomic_store_explicit(&p->chunk, chunk, memory_order_relaxed);
	atomic_store_explicit(&p->nchunks, nch, memory_order_relaxed);
	atomic_store(&p->finished, 0);
	atomic_store(&p->claim, (uint64_t)g << 32);
	atomic_store(&p->gen, g);
	if (atomic_load(&p->sleepers) > 0) {
		uv_mutex_lock(&p->mu);
		uv_cond_broadcast(&p->wake);
		uv_mutex_unlock(&p->mu);
	}
	work(p, g);
	/* the others may still run the chunks they took */
	{
		uint64_t t0 = uv_hrtime();

		for (unsigned i = 1; atomic_load(&p->finished) < nch; i++) {
			cpu_relax();
			if ((i & 63) == 0 && uv_hrtime() - t0 > MU__POOL_SPIN_NS)
				break;
		}
	}
	if (atomic_load(&p->finished) < nch) {
		uv_mutex_lock(&p->mu);
		atomic_store(&p->caller_asleep, 1);
		while (atomic_load(&p->finished) < nch)
			uv_cond_wait(&p->done, &p->mu);
		atomic_store(&p->caller_asleep, 0);
		uv_mutex_unlock(&p->mu);
	}
}
