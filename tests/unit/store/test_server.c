/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/store/{server,client}.c through the public API: a
 * store on a thread of this process and the C client in both dialects.
 * Torch as the peer is in tests/interop/test_store_*.py.
 */
#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include "mu_test.h"

#include "muster/store.h"
#include "core/time_int.h"

static mu_store_server_t *srv;

static int setup(void **state)
{
	mu_store_server_opts_t o;

	(void)state;
	mu_store_server_opts_init(&o);
	o.host = "127.0.0.1";
	o.port = 0;
	o.silent = 1;
	o.max_value_bytes = 1u << 20;
	return mu_store_server_start(&o, &srv);
}

static int teardown(void **state)
{
	(void)state;
	mu_store_server_free(srv);
	return 0;
}

static mu_store_client_t *client(mu_store_dialect_t d)
{
	mu_store_client_opts_t o;
	mu_store_client_t *c;

	mu_store_client_opts_init(&o);
	o.port = mu_store_server_port(srv);
	o.dialect = d;
	o.timeout_ms = 5000;
	assert_int_equal(mu_store_client_connect(&o, &c), 0);
	return c;
}

static void test_both_dialects_share_keys(void **state)
{
	mu_store_client_t *v1 = client(MU_STORE_DIALECT_V1), *v2 = client(MU_STORE_AUTO);
	mu_store_value_t v;
	int64_t n;

	(void)state;
	assert_int_equal(mu_store_client_dialect(v2), MU_STORE_DIALECT_V2);
	assert_int_equal(mu_store_set(v1, "k", "v\0w", 3), 0);
	assert_int_equal(mu_store_get(v2, "k", &v), 0);
	assert_int_equal(v.len, 3);
	assert_memory_equal(v.data, "v\0w", 3);
	mu_free(v.data);
	assert_int_equal(mu_store_add(v2, "n", 40, &n), 0);
	assert_int_equal(mu_store_add(v1, "n", 2, &n), 0);
	assert_true(n == 42);
	assert_int_equal(mu_store_num_keys(v1, &n), 0);
	assert_true(n == 2);
	/* APPEND exists only in v2 */
	assert_int_equal(mu_store_append(v1, "k", "x", 1), -ENOTSUP);
	mu_store_client_close(v1);
	mu_store_client_close(v2);
}

static void test_wait_timeout_keeps_the_client_usable(void **state)
{
	mu_store_dialect_t d[2] = {MU_STORE_DIALECT_V1, MU_STORE_DIALECT_V2};

	(void)state;
	for (int i = 0; i < 2; i++) {
		mu_store_client_t *c = client(d[i]), *w = client(d[i]);
		const char *key = i == 0 ? "never1" : "never2";
		mu_store_value_t v;
		int64_t t0 = mu__now_ms();

		assert_int_equal(mu_store_wait(c, &key, 1, 200), -ETIMEDOUT);
		assert_true(mu__now_ms() - t0 >= 190);
		/* the key appears later: no stale STOP_WAITING may be read as
		 * the reply to the next request (v2 cancels, v1 reconnects) */
		assert_int_equal(mu_store_set(w, key, "x", 1), 0);
		assert_int_equal(mu_store_set(c, "after", "y", 1), 0);
		assert_int_equal(mu_store_get(c, "after", &v), 0);
		assert_int_equal(v.len, 1);
		assert_memory_equal(v.data, "y", 1);
		mu_free(v.data);
		mu_store_client_close(c);
		mu_store_client_close(w);
	}
}

static void test_compare_set_check_delete_multi(void **state)
{
	mu_store_client_t *c = client(MU_STORE_DIALECT_V2);
	const char *keys[] = {"m1", "m2"};
	mu_store_value_t vals[2] = {{"a", 1}, {"", 0}}, out[2], v;
	int ready, deleted;

	(void)state;
	assert_int_equal(mu_store_compare_set(c, "cs", "e", 1, "d", 1, &v), 0);
	assert_memory_equal(v.data, "e", 1); /* missing + non-empty expected */
	mu_free(v.data);
	assert_int_equal(mu_store_check(c, keys, 2, &ready), 0);
	assert_false(ready);
	assert_int_equal(mu_store_multi_set(c, keys, vals, 2), 0);
	assert_int_equal(mu_store_check(c, keys, 2, &ready), 0);
	assert_true(ready);
	assert_int_equal(mu_store_multi_get(c, keys, 2, out), 0);
	assert_int_equal(out[0].len, 1);
	assert_int_equal(out[1].len, 0);
	mu_free(out[0].data);
	mu_free(out[1].data);
	assert_int_equal(mu_store_delete(c, "m1", &deleted), 0);
	assert_true(deleted);
	assert_int_equal(mu_store_delete(c, "m1", &deleted), 0);
	assert_false(deleted);
	mu_store_client_close(c);
}

static void test_over_limit_value_closes_only_that_client(void **state)
{
	mu_store_client_t *big = client(MU_STORE_DIALECT_V2), *ok = client(MU_STORE_DIALECT_V2);
	char *blob = calloc(1, (1u << 20) + 1);
	mu_store_value_t v;
	int64_t n;
	int ready = 1;

	(void)state;
	/* the SET itself has no reply (it may still see the close while
	 * sending). The server closes that connection before it reads any
	 * later request: the next call fails on it, or notices before using
	 * it; either way the call after it is on a new connection */
	(void)mu_store_set(big, "x", blob, (1u << 20) + 1);
	if (mu_store_num_keys(big, &n) != 0)
		assert_int_equal(mu_store_num_keys(big, &n), 0);
	assert_int_equal(mu_store_check(big, (const char *[]){"x"}, 1, &ready), 0);
	assert_false(ready);
	assert_int_equal(mu_store_set(ok, "y", blob, 1u << 20), 0);
	assert_int_equal(mu_store_get(ok, "y", &v), 0);
	assert_int_equal(v.len, 1u << 20);
	mu_free(v.data);
	free(blob);
	mu_store_client_close(big);
	mu_store_client_close(ok);
}

static void test_connect_retries_until_the_server_is_up(void **state)
{
	mu_store_client_opts_t o;
	mu_store_client_t *c;
	int64_t t0 = mu__now_ms();

	(void)state;
	mu_store_client_opts_init(&o);
	o.port = mu_store_server_port(srv);
	mu_store_server_free(srv);
	srv = NULL;
	o.timeout_ms = 400;
	assert_int_equal(mu_store_client_connect(&o, &c), -ECONNREFUSED);
	assert_true(mu__now_ms() - t0 >= 350); /* it kept trying */
	assert_null(c);
	setup(NULL);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_both_dialects_share_keys),
		T(test_wait_timeout_keeps_the_client_usable),
		T(test_compare_set_check_delete_multi),
		T(test_over_limit_value_closes_only_that_client),
		T(test_connect_retries_until_the_server_is_up),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
