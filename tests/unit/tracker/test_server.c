/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/tracker/server.c through the public API: a tracker on
 * its own thread, driven by the blocking client. Raw-socket cases (bad
 * peers) live in tests/interop/test_tracker_badinput.py.
 */
#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "mu_test.h"

#include "muster/tracker.h"
#include "core/json_int.h"
#include "core/sock_int.h"
#include "core/time_int.h"

#define T 5000 /* ms: every call is bounded */

static mu_tracker_t *start(void)
{
	mu_tracker_opts_t o;
	mu_tracker_t *t;

	mu_tracker_opts_init(&o);
	o.host = "127.0.0.1";
	o.port = 0;
	o.silent = 1;
	assert_int_equal(mu_tracker_start(&o, &t), 0);
	assert_true(mu_tracker_port(t) > 0);
	return t;
}

static mu_tracker_client_t *dial(mu_tracker_t *t)
{
	mu_tracker_client_t *c;

	assert_int_equal(mu_tracker_client_connect("127.0.0.1", mu_tracker_port(t), T, &c), 0);
	return c;
}

/* queue_info[key][field] from a fresh SUMMARY, or -1. */
static int queue_count(mu_tracker_t *t, const char *key, const char *field)
{
	mu_tracker_client_t *c = dial(t);
	char *json;
	cJSON *v, *q;
	int n = -1;

	assert_int_equal(mu_tracker_client_summary(c, T, &json), 0);
	assert_int_equal(mu__json_parse(json, strlen(json), &v), 0);
	q = cJSON_GetObjectItem(cJSON_GetObjectItem(v, "queue_info"), key);
	if (q != NULL)
		n = cJSON_GetObjectItem(q, field)->valueint;
	cJSON_Delete(v);
	mu_free(json);
	mu_tracker_client_close(c);
	return n;
}

static void test_register_request_grant(void **state)
{
	mu_tracker_t *t = start();
	mu_tracker_client_t *srv = dial(t), *cl = dial(t);
	mu_tracker_grant_t g;
	char **keys;
	size_t n;

	(void)state;
	assert_int_equal(mu_tracker_client_ping(cl, T), 0);
	assert_int_equal(mu_tracker_client_update_info(srv, "server:rasp", NULL, 9090, T), 0);
	assert_int_equal(mu_tracker_client_put(srv, "rasp", 9090, "rasp:0.1", NULL, T), 0);
	assert_int_equal(mu_tracker_client_pending(srv, T, &keys, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(keys[0], "rasp:0.1");
	mu_tracker_strv_free(keys);
	assert_int_equal(mu_tracker_client_request(cl, "rasp", 1, T, &g), 0);
	assert_string_equal(g.addr, "127.0.0.1"); /* the server's peer IP */
	assert_int_equal(g.port, 9090);
	assert_string_equal(g.matchkey, "rasp:0.1");
	/* handed out: no longer pending for its server */
	assert_int_equal(mu_tracker_client_pending(srv, T, &keys, &n), 0);
	assert_int_equal(n, 0);
	assert_null(keys[0]);
	mu_tracker_strv_free(keys);
	/* custom address is used verbatim */
	assert_int_equal(mu_tracker_client_put(srv, "rasp", 9091, "rasp:0.2", "10.9.8.7", T), 0);
	assert_int_equal(mu_tracker_client_request(cl, "rasp", 1, T, &g), 0);
	assert_string_equal(g.addr, "10.9.8.7");
	assert_int_equal(g.port, 9091);
	mu_tracker_client_close(srv);
	mu_tracker_client_close(cl);
	mu_tracker_free(t);
}

static void test_request_timeout_drops_request(void **state)
{
	mu_tracker_t *t = start();
	mu_tracker_client_t *cl = dial(t);
	mu_tracker_grant_t g;
	int64_t t0 = mu__now_ms();

	(void)state;
	assert_int_equal(mu_tracker_client_request(cl, "none", 1, 200, &g), -ETIMEDOUT);
	assert_true(mu__now_ms() - t0 >= 190);
	/* the connection is closed, so a late grant can never be misread */
	assert_int_equal(mu_tracker_client_ping(cl, T), -ENOTCONN);
	mu_tracker_client_close(cl);
	/* and the tracker drops the request of the closed connection */
	for (int i = 0; i < 100 && queue_count(t, "none", "pending") != 0; i++)
		usleep(10000);
	assert_int_equal(queue_count(t, "none", "pending"), 0);
	mu_tracker_free(t);
}

static void test_close_withdraws_without_update_info(void **state)
{
	mu_tracker_t *t = start();
	mu_tracker_client_t *srv = dial(t);

	(void)state;
	/* no UPDATE_INFO: TVM's Python tracker would leak this resource */
	assert_int_equal(mu_tracker_client_put(srv, "k", 1, "k:1", NULL, T), 0);
	assert_int_equal(queue_count(t, "k", "free"), 1);
	mu_tracker_client_close(srv);
	for (int i = 0; i < 100 && queue_count(t, "k", "free") != 0; i++)
		usleep(10000);
	assert_int_equal(queue_count(t, "k", "free"), 0);
	mu_tracker_free(t);
}

static void test_stop_key(void **state)
{
	mu_tracker_t *t = start();
	mu_tracker_client_t *c = dial(t);
	const char *key = mu_tracker_stop_key(t);

	(void)state;
	assert_true(strncmp(key, "tracker:0.", 10) == 0);
	assert_int_equal(mu_tracker_client_stop(c, "tracker:wrong", T), MU_EFAIL);
	/* a wrong key changes nothing; the connection stays usable */
	assert_int_equal(mu_tracker_client_ping(c, T), 0);
	assert_int_equal(mu_tracker_client_stop(c, key, T), 0);
	mu_tracker_client_close(c);
	mu_tracker_wait(t); /* returns because the tracker stopped itself */
	assert_int_equal(mu_tracker_client_connect("127.0.0.1", mu_tracker_port(t), 500, &c), -ECONNREFUSED);
	mu_tracker_free(t);
}

static void test_second_tracker_takes_next_port(void **state)
{
	mu_tracker_opts_t o;
	mu_tracker_t *a = start(), *b, *c;

	(void)state;
	mu_tracker_opts_init(&o);
	o.host = "127.0.0.1";
	o.silent = 1;
	o.port = mu_tracker_port(a);
	o.port_end = o.port + 10;
	if (mu_tracker_start(&o, &b) == 0) {
		assert_true(mu_tracker_port(b) > o.port);
		mu_tracker_free(b);
	}
	o.port_end = o.port + 1;
	assert_int_equal(mu_tracker_start(&o, &c), MU_EBIND);
	assert_null(c);
	mu_tracker_free(a);
}

static void test_stop_with_clients_connected(void **state)
{
	mu_tracker_t *t = start();
	mu_tracker_client_t *srv = dial(t), *cl = dial(t);
	mu_tracker_grant_t g;

	(void)state;
	assert_int_equal(mu_tracker_client_put(srv, "k", 1, "k:1", NULL, T), 0);
	mu_tracker_stop(t);
	/* the tracker closed them; the client sees it instead of hanging */
	assert_int_equal(mu_tracker_client_request(cl, "other", 1, T, &g), MU_EEOF);
	mu_tracker_client_close(srv);
	mu_tracker_client_close(cl);
	mu_tracker_free(t);
}

static void test_bad_options(void **state)
{
	mu_tracker_opts_t o;
	mu_tracker_t *t;

	(void)state;
	mu_tracker_opts_init(&o);
	o.timeout = -1;
	assert_int_equal(mu_tracker_start(&o, &t), MU_EARG);
	assert_null(t);
	mu_tracker_opts_init(&o);
	o.host = "no.such.host.invalid";
	assert_int_equal(mu_tracker_start(&o, &t), MU_ERESOLVE);
	mu_tracker_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_register_request_grant),
		cmocka_unit_test(test_request_timeout_drops_request),
		cmocka_unit_test(test_close_withdraws_without_update_info),
		cmocka_unit_test(test_stop_key),
		cmocka_unit_test(test_second_tracker_takes_next_port),
		cmocka_unit_test(test_stop_with_clients_connected),
		cmocka_unit_test(test_bad_options),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
