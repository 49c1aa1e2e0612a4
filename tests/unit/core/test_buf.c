/* SPDX-License-Identifier: MIT */
/* Unit tests for src/core/buf.c: the bounded buffer every peer byte enters. */
#include "mu_test.h"

#include "core/alloc_int.h"
#include "core/buf_int.h"

static void test_append_and_nul(void **state)
{
	mu__buf_t b;

	(void)state;
	mu__buf_init(&b, 100);
	assert_int_equal(mu__buf_append(&b, "abc", 3), 0);
	assert_int_equal(mu__buf_appendc(&b, 'd'), 0);
	assert_int_equal(mu__buf_appends(&b, "ef"), 0);
	assert_int_equal(b.len, 6);
	assert_string_equal(b.data, "abcdef"); /* NUL kept after the content */
	mu__buf_free(&b);
	assert_null(b.data);
}

static void test_max_is_hard(void **state)
{
	mu__buf_t b;

	(void)state;
	mu__buf_init(&b, 10);
	assert_int_equal(mu__buf_append(&b, "0123456789", 10), 0);
	/* One byte over: refused, buffer unchanged. */
	assert_int_equal(mu__buf_appendc(&b, 'x'), MU_ETOOBIG);
	assert_int_equal(b.len, 10);
	assert_memory_equal(b.data, "0123456789", 10);
	assert_true(b.cap <= 10);
	/* A huge length never wraps around into a small allocation. */
	assert_int_equal(mu__buf_reserve(&b, SIZE_MAX), MU_ETOOBIG);
	assert_int_equal(mu__buf_reserve(&b, SIZE_MAX - 5), MU_ETOOBIG);
	mu__buf_free(&b);
}

static void test_growth_never_passes_max(void **state)
{
	mu__buf_t b;
	size_t i;

	(void)state;
	mu__buf_init(&b, 1000);
	for (i = 0; i < 1000; i++)
		assert_int_equal(mu__buf_appendc(&b, (char)('a' + i % 26)), 0);
	assert_int_equal(b.cap, 1000);
	assert_int_equal(mu__buf_appendc(&b, 'x'), MU_ETOOBIG);
	mu__buf_free(&b);
}

static void test_consume_and_take(void **state)
{
	mu__buf_t b;
	size_t len;
	char *p;

	(void)state;
	mu__buf_init(&b, 64);
	mu__buf_appends(&b, "headbody");
	mu__buf_consume(&b, 4);
	assert_string_equal(b.data, "body");
	mu__buf_consume(&b, 100); /* more than held: empties */
	assert_int_equal(b.len, 0);
	mu__buf_appends(&b, "xyz");
	p = mu__buf_take(&b, &len);
	assert_int_equal(len, 3);
	assert_string_equal(p, "xyz");
	assert_null(b.data);
	assert_int_equal(b.len, 0);
	mu__free(p);
	/* Still usable, with the same max, after take. */
	assert_int_equal(mu__buf_appends(&b, "again"), 0);
	mu__buf_free(&b);
}

static void test_consume_is_lazy(void **state)
{
	mu__buf_t b;
	size_t fp, n;
	char *p;
	int i;

	(void)state;
	mu__buf_init(&b, 1000);
	assert_int_equal(mu__buf_footprint(&b), 0);
	assert_int_equal(mu__buf_append(&b, "0123456789", 10), 0);
	fp = mu__buf_footprint(&b);
	assert_true(fp >= 11);
	/* consuming moves no bytes and frees nothing: the rest reads in order */
	for (i = 0; i < 4; i++)
		mu__buf_consume(&b, 2);
	assert_int_equal(b.len, 2);
	assert_memory_equal(b.data, "89", 3); /* and the NUL */
	assert_int_equal(mu__buf_footprint(&b), fp);
	/* room at the end comes from the front first, content kept */
	assert_int_equal(mu__buf_append(&b, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", 52), 0);
	assert_int_equal(b.len, 54);
	assert_memory_equal(b.data, "89abc", 5);
	assert_int_equal(b.data[54], '\0');
	mu__buf_consume(&b, 4);
	/* the limit counts content, not what was consumed */
	assert_int_equal(mu__buf_reserve(&b, 1000 - 50), 0);
	assert_int_equal(mu__buf_reserve(&b, 1000 - 49), MU_ETOOBIG);
	/* take hands over an allocation that starts with the content */
	p = mu__buf_take(&b, &n);
	assert_int_equal(n, 50);
	assert_memory_equal(p, "cdefg", 5);
	mu__free(p);
	assert_int_equal(mu__buf_footprint(&b), 0);
	/* reset after a consume gives the whole allocation back to fill */
	assert_int_equal(mu__buf_append(&b, "xyz", 3), 0);
	mu__buf_consume(&b, 1);
	fp = mu__buf_footprint(&b);
	mu__buf_reset(&b);
	assert_int_equal(b.skip, 0);
	assert_int_equal(mu__buf_footprint(&b), fp);
	mu__buf_consume(&b, 0);
	mu__buf_free(&b);
}

static void test_printf(void **state)
{
	mu__buf_t b;

	(void)state;
	mu__buf_init(&b, 16);
	assert_int_equal(mu__buf_printf(&b, "%d-%s", 42, "ok"), 0);
	assert_string_equal(b.data, "42-ok");
	assert_int_equal(mu__buf_printf(&b, "%s", "0123456789abc"), MU_ETOOBIG);
	assert_string_equal(b.data, "42-ok");
	mu__buf_free(&b);
}

static void test_out_of_memory(void **state)
{
	mu__buf_t b;

	(void)state;
	mu__buf_init(&b, 100);
	mu_test_fail_after(0);
	assert_int_equal(mu__buf_append(&b, "abc", 3), MU_ENOMEM);
	mu_test_alloc_reset();
	assert_int_equal(b.len, 0);
	assert_null(b.data);
	mu__buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_append_and_nul),
		cmocka_unit_test(test_max_is_hard),
		cmocka_unit_test(test_growth_never_passes_max),
		cmocka_unit_test(test_consume_and_take),
		cmocka_unit_test(test_consume_is_lazy),
		cmocka_unit_test(test_printf),
		cmocka_unit_test(test_out_of_memory),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
