/* SPDX-License-Identifier: MIT */
/* Unit tests for src/core/strmap.c. */
#include <stdio.h>
#include <string.h>

#include "mu_test.h"

#include "core/alloc_int.h"
#include "core/strmap_int.h"

static void test_put_get_replace_remove(void **state)
{
	mu__strmap_t m;
	void *old = (void *)1;
	int a = 1, b = 2;

	(void)state;
	mu__strmap_init(&m);
	assert_null(mu__strmap_get(&m, "x", 1));
	assert_int_equal(mu__strmap_put(&m, "x", 1, &a, &old), 0);
	assert_null(old);
	assert_ptr_equal(mu__strmap_get(&m, "x", 1), &a);
	assert_int_equal(mu__strmap_put(&m, "x", 1, &b, &old), 0);
	assert_ptr_equal(old, &a);
	assert_int_equal(m.count, 1);
	assert_ptr_equal(mu__strmap_remove(&m, "x", 1), &b);
	assert_null(mu__strmap_remove(&m, "x", 1));
	assert_int_equal(m.count, 0);
	mu__strmap_free(&m, NULL);
}

static void test_binary_keys(void **state)
{
	mu__strmap_t m;
	int a = 1, b = 2, c = 3;

	(void)state;
	mu__strmap_init(&m);
	assert_int_equal(mu__strmap_put(&m, "a\0b", 3, &a, NULL), 0);
	assert_int_equal(mu__strmap_put(&m, "a\0c", 3, &b, NULL), 0);
	assert_int_equal(mu__strmap_put(&m, "", 0, &c, NULL), 0);
	assert_ptr_equal(mu__strmap_get(&m, "a\0b", 3), &a);
	assert_ptr_equal(mu__strmap_get(&m, "a\0c", 3), &b);
	assert_ptr_equal(mu__strmap_get(&m, "", 0), &c);
	assert_null(mu__strmap_get(&m, "a", 1));
	mu__strmap_free(&m, NULL);
}

static void test_many_keys_and_iteration(void **state)
{
	mu__strmap_t m;
	mu__strmap_entry_t *e = NULL;
	char key[32];
	size_t slot = 0, seen = 0;
	long i;

	(void)state;
	mu__strmap_init(&m);
	for (i = 0; i < 20000; i++) {
		snprintf(key, sizeof(key), "key/%ld", i);
		assert_int_equal(mu__strmap_put(&m, key, strlen(key), (void *)(i + 1), NULL), 0);
	}
	assert_int_equal(m.count, 20000);
	assert_true(m.count <= m.nslots);
	for (i = 0; i < 20000; i += 997) {
		snprintf(key, sizeof(key), "key/%ld", i);
		assert_ptr_equal(mu__strmap_get(&m, key, strlen(key)), (void *)(i + 1));
	}
	while ((e = mu__strmap_next(&m, &slot, e)) != NULL)
		seen++;
	assert_int_equal(seen, 20000);
	mu__strmap_free(&m, NULL);
}

static int freed;
static void count_free(void *v)
{
	(void)v;
	freed++;
}

static void test_free_values_and_oom(void **state)
{
	mu__strmap_t m;

	(void)state;
	mu__strmap_init(&m);
	mu__strmap_put(&m, "a", 1, &freed, NULL);
	mu__strmap_put(&m, "b", 1, &freed, NULL);
	mu_test_fail_after(0);
	assert_int_equal(mu__strmap_put(&m, "c", 1, &freed, NULL), MU_ENOMEM);
	mu_test_alloc_reset();
	assert_int_equal(m.count, 2);
	mu__strmap_free(&m, count_free);
	assert_int_equal(freed, 2);
}

static void test_keys_whole_or_nothing(void **state)
{
	mu__strmap_t m;
	char **keys = NULL;
	size_t n = 0, seen = 0;

	(void)state;
	mu__strmap_init(&m);
	assert_int_equal(mu__strmap_keys(&m, &keys, &n), 0);
	assert_int_equal(n, 0);
	assert_null(keys[0]);
	mu__strv_free(keys);
	mu__strmap_put(&m, "alpha", 5, NULL, NULL);
	mu__strmap_put(&m, "beta", 4, NULL, NULL);
	mu__strmap_put(&m, "gamma", 5, NULL, NULL);
	assert_int_equal(mu__strmap_keys(&m, &keys, &n), 0);
	assert_int_equal(n, 3);
	assert_null(keys[3]);
	for (size_t i = 0; i < n; i++)
		seen |= strcmp(keys[i], "alpha") == 0 ? 1u : strcmp(keys[i], "beta") == 0 ? 2u
		        : strcmp(keys[i], "gamma") == 0 ? 4u : 8u;
	assert_int_equal(seen, 7);
	mu__strv_free(keys);
	/* out of memory at the array or at any copy: an error, nothing leaked */
	for (long k = 0; k <= 3; k++) {
		keys = NULL;
		mu_test_fail_after(k);
		assert_int_equal(mu__strmap_keys(&m, &keys, &n), MU_ENOMEM);
		mu_test_alloc_reset();
		assert_null(keys);
	}
	mu__strmap_free(&m, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_put_get_replace_remove),
		cmocka_unit_test(test_binary_keys),
		cmocka_unit_test(test_many_keys_and_iteration),
		cmocka_unit_test(test_free_values_and_oom),
		cmocka_unit_test(test_keys_whole_or_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
