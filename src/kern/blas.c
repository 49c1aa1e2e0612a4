/* SPDX-License-Identifier: MIT */
/*
 * OpenBLAS's process-wide thread count, set for the library's forwards
 * only and restored after them (see model/blas_int.h). OpenBLAS 0.3.21,
 * Debian 12's, has no per-call or per-thread count
 * (openblas_set_num_threads_local came in 0.3.27), so this counts the
 * forwards in flight under a lock and touches the setting only when the
 * first starts and the last ends.
 */
#include <cblas.h>
#include <uv.h>

#include "kern/blas_int.h"

static uv_once_t once = UV_ONCE_INIT;
static uv_mutex_t lock;
static int active;     /* forwards between enter and leave */
static int saved;      /* the count before the first of them */
static int current;    /* the count they run at */

static void init_once(void)
{
	uv_mutex_init(&lock); /* a default pthread mutex: cannot fail on Linux */
}

void mu__blas_enter(int threads)
{
	uv_once(&once, init_once);
	uv_mutex_lock(&lock);
	if (active++ == 0) {
		saved = openblas_get_num_threads();
		current = threads < 1 ? 1 : threads;
		if (current != saved)
			openblas_set_num_threads(current);
	}
	uv_mutex_unlock(&lock);
}

void mu__blas_leave(void)
{
	uv_mutex_lock(&lock);
	if (--active == 0 && current != saved)
		openblas_set_num_threads(saved);
	uv_mutex_unlock(&lock);
}
