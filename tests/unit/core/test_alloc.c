/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/core/alloc.c: mu_set_allocator reaches the library's
 * own allocations and leaves the host program's cJSON hooks alone (cJSON
 * is the system's shared library, one set of hooks per process).
 */
#include "mu_test.h"

#include "core/alloc_int.h"
#include "core/json_int.h"

static size_t host_allocs, lib_allocs;

static void *host_malloc(size_t n)
{
	host_allocs++;
	return malloc(n);
}

static void *lib_malloc(size_t n)
{
	lib_allocs++;
	return malloc(n);
}

static void *lib_realloc(void *p, size_t n)
{
	lib_allocs++;
	return realloc(p, n);
}

static void test_cjson_hooks_stay_the_hosts(void **state)
{
	cJSON_Hooks host = {host_malloc, free};
	cJSON *o, *v = NULL;
	size_t h, l;
	char *p;

	(void)state;
	cJSON_InitHooks(&host); /* the host program's own choice */
	mu_set_allocator(lib_malloc, lib_realloc, free);
	h = host_allocs;
	l = lib_allocs;
	o = cJSON_CreateObject(); /* the host's own cJSON use */
	assert_non_null(o);
	assert_true(host_allocs > h);
	assert_int_equal(lib_allocs, l);
	cJSON_Delete(o);
	h = host_allocs;
	assert_int_equal(mu__json_parse("{\"a\": [1, 2]}", 13, &v), 0); /* the library's */
	assert_true(host_allocs > h);
	assert_int_equal(lib_allocs, l);
	cJSON_Delete(v);
	p = mu__strdup("mine"); /* the library's own memory: its allocator */
	assert_non_null(p);
	assert_true(lib_allocs > l);
	mu__free(p);
	mu_set_allocator(NULL, NULL, NULL);
	l = lib_allocs;
	mu__free(mu__strdup("libc again"));
	assert_int_equal(lib_allocs, l);
	cJSON_InitHooks(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cjson_hooks_stay_the_hosts),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
