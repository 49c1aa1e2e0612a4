/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/md/{agent,worker,backend_*}.c: agents in this
 * process exchanging through P2P, a TCPStore (muster's, on a thread) and a
 * real etcd member (etcd_fixture.h).
 */
#include <errno.h>
#include <poll.h>

#include "mu_test.h"

#include "muster/md.h"
#include "muster/store.h"
#include "core/time_int.h"
#include "etcd_fixture.h"

#define T 10000

static mu_md_agent_t *agent(const char *name, int listen, const char *etcd,
                            const char *ts)
{
	mu_md_opts_t o;
	mu_md_agent_t *a;

	mu_md_opts_init(&o);
	o.name = name;
	o.listen = listen;
	o.listen_host = "127.0.0.1";
	o.listen_port = 0;
	o.no_env = 1;
	o.etcd_endpoints = etcd;
	o.tcpstore_endpoint = ts;
	o.etcd_watch_timeout = 2;
	o.store_timeout = 2;
	o.lease_ttl = 2;
	assert_int_equal(mu_md_agent_new(&o, &a), 0);
	return a;
}

static int done(mu_md_agent_t *a, uint64_t op)
{
	int st = -1;

	assert_int_equal(mu_md_wait(a, op, T, &st), 0);
	return st;
}

static void assert_payload(mu_md_agent_t *a, const char *who, const char *label,
                           const char *want)
{
	void *blob;
	size_t n, pn;
	const void *p;

	assert_int_equal(mu_md_get_remote(a, who, label, &blob, &n), 0);
	assert_int_equal(mu_md_blob_payload(blob, n, &p, &pn), 0);
	assert_int_equal(pn, strlen(want));
	assert_memory_equal(p, want, pn);
	mu_free(blob);
}

static void test_p2p_push_pull_invalidate(void **state)
{
	mu_md_agent_t *a = agent("A", 1, NULL, NULL), *b = agent("B", 1, NULL, NULL);
	mu_md_peer_t pa = {"127.0.0.1", mu_md_listen_port(a)};
	mu_md_peer_t pb = {"127.0.0.1", mu_md_listen_port(b)};
	mu_md_event_t ev;
	struct pollfd pfd;
	uint64_t op;

	(void)state;
	assert_string_equal(mu_md_backend_name(a), "P2P");
	assert_int_equal(mu_md_set_local(a, NULL, "a-full", 6), 0);
	assert_int_equal(mu_md_set_local(b, NULL, "b-full", 6), 0);
	assert_int_equal(mu_md_set_local(a, "conn", "a-part", 6), 0);
	/* push: A sends to B's listener */
	assert_int_equal(mu_md_send_local(a, &pb, NULL, &op), 0);
	assert_int_equal(done(a, op), 0);
	pfd.fd = mu_md_event_fd(b);
	pfd.events = POLLIN;
	assert_int_equal(poll(&pfd, 1, T), 1); /* B hears of it */
	assert_int_equal(mu_md_next_event(b, &ev), 0);
	assert_int_equal(ev.kind, MU_MD_REMOTE_LOADED);
	assert_string_equal(ev.name, "A");
	assert_payload(b, "A", NULL, "a-full");
	/* a partial blob files under its own label */
	assert_int_equal(mu_md_send_local(a, &pb, "conn", &op), 0);
	assert_int_equal(done(a, op), 0);
	for (;;) {
		void *blob = NULL;
		size_t n;

		if (mu_md_get_remote(b, "A", "conn", &blob, &n) == 0) {
			mu_free(blob);
			break;
		}
		poll(NULL, 0, 10);
	}
	assert_payload(b, "A", "conn", "a-part");
	/* pull: A fetches from B, B answers on the same connection */
	assert_int_equal(mu_md_fetch_remote(a, "B", &pb, NULL, &op), 0);
	assert_int_equal(done(a, op), 0);
	assert_payload(a, "B", NULL, "b-full");
	/* invalidate: B drops A */
	assert_int_equal(mu_md_invalidate_local(a, &pb, &op), 0);
	assert_int_equal(done(a, op), 0);
	while (mu_md_check_remote(b, "A") == 0)
		poll(NULL, 0, 10);
	/* a peer that is not there: the failure is reported, with a cause */
	pa.port = etcd_free_port();
	assert_int_equal(mu_md_send_local(b, &pa, NULL, &op), 0);
	assert_int_equal(done(b, op), -ECONNREFUSED);
	mu_md_agent_free(a);
	mu_md_agent_free(b);
}

static void test_load_rules(void **state)
{
	mu_md_agent_t *a = agent("A", 0, NULL, NULL);
	void *b1, *b2, *own;
	size_t n1, n2, no;
	char who[64];

	(void)state;
	mu_md_blob_make("X", "one", 3, &b1, &n1);
	mu_md_blob_make("X", "two", 3, &b2, &n2);
	mu_md_blob_make("A", "me", 2, &own, &no);
	assert_int_equal(mu_md_load_remote(a, NULL, b1, n1, who, sizeof(who)), 0);
	assert_string_equal(who, "X");
	assert_int_equal(mu_md_load_remote(a, NULL, b1, n1, who, sizeof(who)), 0); /* idempotent */
	assert_int_equal(mu_md_load_remote(a, NULL, b2, n2, who, sizeof(who)), -EEXIST);
	assert_int_equal(mu_md_load_remote(a, NULL, own, no, who, sizeof(who)), MU_EARG);
	assert_int_equal(mu_md_load_remote(a, NULL, "junk", 4, who, sizeof(who)), MU_EPROTO);
	assert_int_equal(mu_md_invalidate_remote(a, "X"), 0);
	assert_int_equal(mu_md_invalidate_remote(a, "X"), -ENOENT);
	assert_int_equal(mu_md_load_remote(a, NULL, b2, n2, who, sizeof(who)), 0);
	/* no store and no peer: nowhere to send */
	assert_int_equal(mu_md_send_local(a, NULL, NULL, NULL), MU_EARG);
	assert_int_equal(mu_md_set_local_blob(a, NULL, b1, n1), MU_EARG); /* X's blob */
	mu_free(b1);
	mu_free(b2);
	mu_free(own);
	mu_md_agent_free(a);
}

static void test_both_stores_is_an_error(void **state)
{
	mu_md_opts_t o;
	mu_md_agent_t *a;

	(void)state;
	mu_md_opts_init(&o);
	o.name = "A";
	o.no_env = 1;
	o.etcd_endpoints = "http://127.0.0.1:1";
	o.tcpstore_endpoint = "127.0.0.1:2";
	assert_int_equal(mu_md_agent_new(&o, &a), MU_EARG);
	assert_null(a);
	/* the environment: MUSTER_ wins over NIXL_, and set-but-empty counts */
	setenv("NIXL_TCPSTORE_ENDPOINT", "127.0.0.1:2", 1);
	o.no_env = 0;
	o.etcd_endpoints = NULL;
	o.tcpstore_endpoint = NULL;
	assert_int_equal(mu_md_agent_new(&o, &a), 0);
	assert_string_equal(mu_md_backend_name(a), "TCPStore");
	mu_md_agent_free(a);
	setenv("MUSTER_ETCD_ENDPOINTS", "http://127.0.0.1:1", 1);
	assert_int_equal(mu_md_agent_new(&o, &a), MU_EARG); /* both now */
	unsetenv("NIXL_TCPSTORE_ENDPOINT");
	setenv("MUSTER_ETCD_ENDPOINTS", "", 1);
	assert_int_equal(mu_md_agent_new(&o, &a), MU_EARG); /* empty */
	unsetenv("MUSTER_ETCD_ENDPOINTS");
}

/* publish, fetch (already there, and not yet there), invalidate */
static void exchange_through_store(const char *etcd, const char *ts)
{
	mu_md_agent_t *a = agent("A", 0, etcd, ts), *b = agent("B", 0, etcd, ts);
	uint64_t op, late;
	int st;

	assert_int_equal(mu_md_set_local(a, NULL, "a-full", 6), 0);
	assert_int_equal(mu_md_send_local(a, NULL, NULL, &op), 0);
	assert_int_equal(done(a, op), 0);
	assert_int_equal(mu_md_fetch_remote(b, "A", NULL, NULL, &op), 0);
	assert_int_equal(done(b, op), 0);
	assert_payload(b, "A", NULL, "a-full");
	/* B asks for a label A has not published yet; A publishes it later */
	assert_int_equal(mu_md_fetch_remote(b, "A", NULL, "late", &late), 0);
	assert_int_equal(mu_md_wait(b, late, 200, &st), -ETIMEDOUT);
	assert_int_equal(mu_md_set_local(a, "late", "a-late", 6), 0);
	assert_int_equal(mu_md_send_local(a, NULL, "late", &op), 0);
	assert_int_equal(done(a, op), 0);
	assert_int_equal(done(b, late), 0);
	assert_payload(b, "A", "late", "a-late");
	/* never published: a timeout, with a cause */
	assert_int_equal(mu_md_fetch_remote(b, "nobody", NULL, NULL, &op), 0);
	assert_int_equal(done(b, op), -ETIMEDOUT);
	assert_int_equal(mu_md_invalidate_local(a, NULL, &op), 0);
	assert_int_equal(done(a, op), 0);
	mu_md_agent_free(a);
	mu_md_agent_free(b);
}

static void test_tcpstore(void **state)
{
	mu_store_server_opts_t o;
	mu_store_server_t *s;
	char ep[64];

	(void)state;
	mu_store_server_opts_init(&o);
	o.host = "127.0.0.1";
	o.port = 0;
	o.silent = 1;
	assert_int_equal(mu_store_server_start(&o, &s), 0);
	snprintf(ep, sizeof(ep), "127.0.0.1:%d", mu_store_server_port(s));
	exchange_through_store(NULL, ep);
	mu_store_server_free(s);
}

static void test_etcd(void **state)
{
	etcd_fixture_t fx;
	mu_md_agent_t *a, *b;
	uint64_t op;
	int64_t t0;

	(void)state;
	etcd_start(&fx, 1);
	exchange_through_store(fx.endpoints, NULL);
	/* invalidation reaches a peer that fetched: it watches the marker */
	a = agent("A", 0, fx.endpoints, NULL);
	b = agent("B", 0, fx.endpoints, NULL);
	assert_int_equal(mu_md_set_local(a, NULL, "x", 1), 0);
	assert_int_equal(mu_md_send_local(a, NULL, NULL, &op), 0);
	assert_int_equal(done(a, op), 0);
	assert_int_equal(mu_md_fetch_remote(b, "A", NULL, NULL, &op), 0);
	assert_int_equal(done(b, op), 0);
	assert_int_equal(mu_md_invalidate_local(a, NULL, &op), 0);
	assert_int_equal(done(a, op), 0);
	t0 = mu__now_ms();
	while (mu_md_check_remote(b, "A") == 0 && mu__now_ms() - t0 < T)
		poll(NULL, 0, 20);
	assert_int_equal(mu_md_check_remote(b, "A"), -ENOENT);
	/* an agent that vanishes without a word: its lease (2 s) expires and
	 * the peer drops it */
	assert_int_equal(mu_md_send_local(a, NULL, NULL, &op), 0);
	assert_int_equal(done(a, op), 0);
	assert_int_equal(mu_md_fetch_remote(b, "A", NULL, NULL, &op), 0);
	assert_int_equal(done(b, op), 0);
	mu_md_agent_free(a);
	t0 = mu__now_ms();
	while (mu_md_check_remote(b, "A") == 0 && mu__now_ms() - t0 < T)
		poll(NULL, 0, 50);
	assert_int_equal(mu_md_check_remote(b, "A"), -ENOENT);
	mu_md_agent_free(b);
	etcd_stop(&fx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_p2p_push_pull_invalidate),
		cmocka_unit_test(test_load_rules),
		cmocka_unit_test(test_both_stores_is_an_error),
		cmocka_unit_test(test_tcpstore),
		cmocka_unit_test(test_etcd),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
