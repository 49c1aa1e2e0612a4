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
#include <stdio.h>
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

/*
 * A scratch directory for a test file's group: cmocka setup/teardown that
 * make /tmp/mu_<tag>_XXXXXX (tag set by MU_TEST_TMPDIR_TAG before the
 * include, else "t") and remove it with what it holds; mu_test_path(name)
 * is name inside it (one static buffer: use it before the next call).
 */
#ifndef MU_TEST_TMPDIR_TAG
#define MU_TEST_TMPDIR_TAG "t"
#endif
static char mu_test_dir[64];

static inline int mu_test_tmpdir_setup(void **state)
{
	(void)state;
	snprintf(mu_test_dir, sizeof(mu_test_dir), "/tmp/mu_%s_XXXXXX", MU_TEST_TMPDIR_TAG);
	return mkdtemp(mu_test_dir) == NULL ? -1 : 0;
}

static inline int mu_test_tmpdir_teardown(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", mu_test_dir);
	return system(cmd) == 0 ? 0 : -1;
}

static inline const char *mu_test_path(const char *name)
{
	static char p[192];

	snprintf(p, sizeof(p), "%s/%s", mu_test_dir, name);
	return p;
}

#endif
