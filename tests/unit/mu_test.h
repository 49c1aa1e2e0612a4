/* SPDX-License-Identifier: MIT */
/*
 * What every unit test includes: cmocka, and an allocator that fails on
 * demand (fault injection through mu_set_allocator, as rax-oom-test does).
 */
#ifndef MU_TEST_H
#define MU_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "muster/common.h"

/* Allocations left before they start failing; -1 = never fail. */
static long mu_test_allocs_left = -1;

static void *mu_test_malloc(size_t n)
{
	if (mu_test_allocs_left == 0)
		return NULL;
	if (mu_test_allocs_left > 0)
		mu_test_allocs_left--;
	return malloc(n);
}

static void *mu_test_realloc(void *p, size_t n)
{
	if (mu_test_allocs_left == 0)
		return NULL;
	if (mu_test_allocs_left > 0)
		mu_test_allocs_left--;
	return realloc(p, n);
}

/*
 * From now on, let n allocations succeed and fail every later one: the
 * library's, and cJSON's, whose hooks the library leaves to the host
 * program (this test) to set.
 */
static inline void mu_test_fail_after(long n)
{
	cJSON_Hooks hooks = {mu_test_malloc, free};

	mu_set_allocator(mu_test_malloc, mu_test_realloc, free);
	cJSON_InitHooks(&hooks);
	mu_test_allocs_left = n;
}

static inline void mu_test_alloc_reset(void)
{
	mu_test_allocs_left = -1;
	mu_set_allocator(malloc, realloc, free);
	cJSON_InitHooks(NULL);
}

#endif
