/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/etcd/client.c against real etcd 3.4 members (see
 * etcd_fixture.h): every call, leases expiring, watches, a blob over the
 * request limit, a member that is down, one that answers garbage, and a
 * three-member cluster losing its leader.
 */
#include <errno.h>
#include <pthread.h>

#include "mu_test.h"

#include "muster/etcd.h"
#include "core/time_int.h"
#include "etcd_fixture.h"

static etcd_fixture_t fx;

static mu_etcd_t *client_ms(const char *endpoints, int timeout_ms)
{
	mu_etcd_opts_t o;
	mu_etcd_t *e;

	mu_etcd_opts_init(&o);
	o.endpoints = endpoints;
	o.timeout_ms = timeout_ms;
	assert_int_equal(mu_etcd_new(&o, &e), 0);
	return e;
}

static mu_etcd_t *client(const char *endpoints)
{
	return client_ms(endpoints, 3000);
}

static int setup1(void **state)
{
	(void)state;
	etcd_start(&fx, 1);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	etcd_stop(&fx);
	return 0;
}

static void test_kv_calls(void **state)
{
	mu_etcd_t *e = client(fx.endpoints);
	mu_etcd_range_t r;
	int64_t rev, n;
	int ok;

	(void)state;
	assert_int_equal(mu_etcd_put(e, "/ns/a/", 6, "", 0, 0, &rev), 0);
	assert_true(rev > 0);
	assert_int_equal(mu_etcd_put(e, "/ns/a/metadata", 14, "b\0lob", 5, 0, NULL), 0);
	assert_int_equal(mu_etcd_put(e, "/ns/a0", 6, "outside", 7, 0, NULL), 0);
	assert_int_equal(mu_etcd_get(e, "/ns/a/metadata", 14, 0, &r), 0);
	assert_int_equal(r.n, 1);
	assert_int_equal(r.kvs[0].vlen, 5);
	assert_memory_equal(r.kvs[0].value, "b\0lob", 5);
	mu_etcd_range_free(&r);
	assert_int_equal(mu_etcd_get(e, "/ns/a/", 6, 1, &r), 0);
	assert_int_equal(r.n, 2); /* the prefix stops before "/ns/a0" */
	mu_etcd_range_free(&r);
	assert_int_equal(mu_etcd_get(e, "/ns/zz", 6, 0, &r), 0);
	assert_int_equal(r.n, 0);
	assert_true(r.revision >= rev);
	mu_etcd_range_free(&r);
	assert_int_equal(mu_etcd_create(e, "/ns/once", 8, "1", 1, 0, &ok), 0);
	assert_true(ok);
	assert_int_equal(mu_etcd_create(e, "/ns/once", 8, "2", 1, 0, &ok), 0);
	assert_false(ok);
	assert_int_equal(mu_etcd_get(e, "/ns/once", 8, 0, &r), 0);
	assert_int_equal(mu_etcd_cas(e, "/ns/once", 8, r.kvs[0].mod_revision, "3", 1, 0, &ok), 0);
	assert_true(ok);
	assert_int_equal(mu_etcd_cas(e, "/ns/once", 8, r.kvs[0].mod_revision, "4", 1, 0, &ok), 0);
	assert_false(ok); /* stale revision */
	mu_etcd_range_free(&r);
	assert_int_equal(mu_etcd_delete(e, "/ns/a/", 6, 1, &n), 0);
	assert_true(n == 2);
	assert_int_equal(mu_etcd_delete(e, "/ns/a/", 6, 1, &n), 0);
	assert_true(n == 0);
	assert_string_equal(mu_etcd_last_error(e), "");
	mu_etcd_free(e);
}

static void test_leases(void **state)
{
	mu_etcd_t *e = client(fx.endpoints);
	mu_etcd_range_t r;
	int64_t id, ttl;

	(void)state;
	assert_int_equal(mu_etcd_lease_grant(e, 1, &id, &ttl), 0);
	assert_true(ttl >= 2); /* raised to the server's minimum */
	assert_int_equal(mu_etcd_put(e, "/l/k", 4, "v", 1, id, NULL), 0);
	assert_int_equal(mu_etcd_lease_keepalive(e, id, &ttl), 0);
	assert_true(ttl > 0);
	/* let it expire: the key goes with it, and keepalive says "gone"
	 * with a 200 and no TTL */
	sleep((unsigned)ttl + 2);
	assert_int_equal(mu_etcd_get(e, "/l/k", 4, 0, &r), 0);
	assert_int_equal(r.n, 0);
	mu_etcd_range_free(&r);
	assert_int_equal(mu_etcd_lease_keepalive(e, id, &ttl), 0);
	assert_true(ttl <= 0);
	assert_int_equal(mu_etcd_put(e, "/l/k", 4, "v", 1, id, NULL), -ENOENT);
	assert_int_equal(mu_etcd_lease_grant(e, 30, &id, &ttl), 0);
	assert_int_equal(mu_etcd_put(e, "/l/k2", 5, "v", 1, id, NULL), 0);
	assert_int_equal(mu_etcd_lease_revoke(e, id), 0);
	assert_int_equal(mu_etcd_get(e, "/l/k2", 5, 0, &r), 0);
	assert_int_equal(r.n, 0);
	mu_etcd_range_free(&r);
	mu_etcd_free(e);
}

typedef struct {
	int puts, deletes, ended;
	char last[64];
} seen_t;

static void watch_cb(void *ud, const mu_etcd_event_t *ev, int err)
{
	seen_t *s = ud;

	if (ev == NULL) {
		s->ended = err != 0 ? err : 1;
		return;
	}
	if (ev->type == MU_ETCD_EVENT_PUT)
		s->puts++;
	else
		s->deletes++;
	snprintf(s->last, sizeof(s->last), "%.*s", (int)ev->kv->vlen, ev->kv->value);
}

static void poll_until(mu_etcd_t *e, const int *counter, int want)
{
	int64_t deadline = mu__deadline(10000);

	while (*counter < want && mu__now_ms() < deadline)
		mu_etcd_poll(e, 100);
	assert_int_equal(*counter, want);
}

static void test_watch(void **state)
{
	mu_etcd_t *e = client(fx.endpoints), *w = client(fx.endpoints);
	mu_etcd_watch_t *wa, *wb;
	mu_etcd_range_t r;
	seen_t a = {0}, b = {0};
	int64_t rev;

	(void)state;
	assert_int_equal(mu_etcd_put(e, "/w/x", 4, "before", 6, 0, &rev), 0);
	/* from a past revision: history replays first */
	assert_int_equal(mu_etcd_watch(w, "/w/x", 4, 0, rev, watch_cb, &a, &wa), 0);
	assert_int_equal(mu_etcd_watch(w, "/w/", 3, MU_ETCD_PREFIX, 0, watch_cb, &b, &wb), 0);
	poll_until(w, &a.puts, 1);
	assert_string_equal(a.last, "before");
	mu_etcd_poll(w, 200); /* both streams are created before we write */
	assert_int_equal(mu_etcd_put(e, "/w/x", 4, "after", 5, 0, NULL), 0);
	assert_int_equal(mu_etcd_put(e, "/w/y", 4, "y", 1, 0, NULL), 0);
	assert_int_equal(mu_etcd_delete(e, "/w/", 3, 1, NULL), 0);
	poll_until(w, &a.deletes, 1);
	poll_until(w, &b.deletes, 2);
	assert_int_equal(a.puts, 2);
	assert_int_equal(b.puts, 2); /* "from now": the earlier put is not seen */
	mu_etcd_watch_cancel(wa);
	assert_int_equal(mu_etcd_get(e, "/w/", 3, 1, &r), 0);
	mu_etcd_range_free(&r);
	mu_etcd_watch_cancel(wb);
	mu_etcd_free(w);
	mu_etcd_free(e);
}

/* Compact the member's history up to rev with etcdctl (bounded). */
static void compact(int64_t rev)
{
	char ep[96], r[32];
	int status = -1, i;
	pid_t pid;

	snprintf(ep, sizeof(ep), "--endpoints=127.0.0.1:%d", fx.client_port[0]);
	snprintf(r, sizeof(r), "%lld", (long long)rev);
	if (access("/usr/bin/etcdctl", X_OK) != 0)
		fail_msg("/usr/bin/etcdctl is missing: make check installs Debian's etcd-client");
	pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, 1);
		dup2(null, 2);
		setenv("ETCDCTL_API", "3", 1);
		execl("/usr/bin/etcdctl", "etcdctl", ep, "--command-timeout=5s", "compact", r,
		      (char *)NULL);
		_exit(127);
	}
	for (i = 0; i < 200 && waitpid(pid, &status, WNOHANG) == 0; i++)
		usleep(50000);
	if (i == 200) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/*
 * A watch from a compacted revision: etcd creates it, then cancels it with
 * compact_revision and keeps the stream open. The caller hears MU_ETOOBIG
 * once; after cancelling the ended watch, other and new watches on the
 * same client still get their events.
 */
static void test_watch_from_a_compacted_revision(void **state)
{
	mu_etcd_t *e = client(fx.endpoints), *w = client(fx.endpoints);
	mu_etcd_watch_t *old, *other, *fresh;
	seen_t a = {0}, b = {0}, c = {0};
	int64_t r1, r3, deadline;

	(void)state;
	assert_int_equal(mu_etcd_put(e, "/c/x", 4, "1", 1, 0, &r1), 0);
	assert_int_equal(mu_etcd_put(e, "/c/x", 4, "2", 1, 0, NULL), 0);
	assert_int_equal(mu_etcd_put(e, "/c/x", 4, "3", 1, 0, &r3), 0);
	compact(r3);
	assert_int_equal(mu_etcd_watch(w, "/c/", 3, MU_ETCD_PREFIX, 0, watch_cb, &b, &other), 0);
	assert_int_equal(mu_etcd_watch(w, "/c/x", 4, 0, r1, watch_cb, &a, &old), 0);
	deadline = mu__deadline(10000);
	while (a.ended == 0 && mu__now_ms() < deadline)
		mu_etcd_poll(w, 100);
	assert_int_equal(a.ended, MU_ETOOBIG);
	assert_int_equal(a.puts, 0);
	assert_non_null(strstr(mu_etcd_last_error(w), "compacted"));
	mu_etcd_watch_cancel(old);
	assert_int_equal(mu_etcd_watch(w, "/c/x", 4, 0, r3, watch_cb, &c, &fresh), 0);
	poll_until(w, &c.puts, 1); /* r3 itself is still there */
	assert_int_equal(mu_etcd_put(e, "/c/x", 4, "4", 1, 0, NULL), 0);
	poll_until(w, &c.puts, 2);
	poll_until(w, &b.puts, 1);
	assert_int_equal(c.puts, 2);
	assert_string_equal(c.last, "4");
	assert_int_equal(b.puts, 1);
	mu_etcd_watch_cancel(fresh);
	mu_etcd_watch_cancel(other);
	mu_etcd_free(w);
	mu_etcd_free(e);
}

static void test_request_too_large(void **state)
{
	mu_etcd_t *e = client(fx.endpoints);
	size_t n = 1600000;
	char *blob = calloc(1, n);

	(void)state;
	assert_int_equal(mu_etcd_put(e, "/big", 4, blob, n, 0, NULL), MU_ETOOBIG);
	assert_non_null(strstr(mu_etcd_last_error(e), "too large"));
	assert_int_equal(mu_etcd_put(e, "/big", 4, blob, 1400000, 0, NULL), 0);
	free(blob);
	mu_etcd_free(e);
}

/* A listener that answers every request with `reply`, then hangs up;
 * with reply NULL it never answers, and hangs up when the client does. */
typedef struct {
	int fd, port;
	const char *reply;
	pthread_t th;
} liar_t;

static void *liar_main(void *arg)
{
	liar_t *l = arg;
	char buf[4096];
	int c;

	while ((c = accept(l->fd, NULL, NULL)) >= 0) {
		if (read(c, buf, sizeof(buf)) > 0 && l->reply != NULL)
			(void)!write(c, l->reply, strlen(l->reply));
		while (l->reply == NULL && read(c, buf, sizeof(buf)) > 0)
			;
		close(c);
	}
	return NULL;
}

static void liar_start(liar_t *l, const char *reply)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	l->fd = socket(AF_INET, SOCK_STREAM, 0);
	bind(l->fd, (struct sockaddr *)&sa, sizeof(sa));
	listen(l->fd, 8);
	getsockname(l->fd, (struct sockaddr *)&sa, &len);
	l->port = ntohs(sa.sin_port);
	l->reply = reply;
	pthread_create(&l->th, NULL, liar_main, l);
}

static void liar_stop(liar_t *l)
{
	shutdown(l->fd, SHUT_RDWR);
	close(l->fd);
	pthread_join(l->th, NULL);
}

static void test_dead_and_garbage_endpoints(void **state)
{
	char eps[512];
	mu_etcd_t *e;
	mu_etcd_range_t r;
	int dead = etcd_free_port();

	(void)state;
	/* nothing listens at `dead`: the call moves on to the live member */
	snprintf(eps, sizeof(eps), "127.0.0.1:%d;%s", dead, fx.endpoints);
	e = client(eps);
	assert_int_equal(mu_etcd_put(e, "/d", 2, "v", 1, 0, NULL), 0);
	mu_etcd_free(e);
	snprintf(eps, sizeof(eps), "http://127.0.0.1:%d", dead);
	e = client(eps);
	assert_int_equal(mu_etcd_get(e, "/d", 2, 0, &r), -ECONNREFUSED);
	assert_true(strlen(mu_etcd_last_error(e)) > 0);
	mu_etcd_free(e);
	/* an HTTP server that is not etcd, and a peer that is not HTTP */
	{
		liar_t web, junk;

		liar_start(&web, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n<html>");
		liar_start(&junk, "\x00\x01 not http at all\r\n\r\n");
		snprintf(eps, sizeof(eps), "127.0.0.1:%d", web.port);
		e = client(eps);
		assert_int_equal(mu_etcd_get(e, "/d", 2, 0, &r), MU_EPROTO);
		assert_non_null(strstr(mu_etcd_last_error(e), "not a JSON object"));
		mu_etcd_free(e);
		snprintf(eps, sizeof(eps), "127.0.0.1:%d", junk.port);
		e = client(eps);
		assert_int_equal(mu_etcd_get(e, "/d", 2, 0, &r), -ECONNREFUSED);
		mu_etcd_free(e);
		/* with a real member behind the liar, the call still succeeds */
		snprintf(eps, sizeof(eps), "127.0.0.1:%d,%s", junk.port, fx.endpoints);
		e = client(eps);
		assert_int_equal(mu_etcd_get(e, "/d", 2, 0, &r), 0);
		mu_etcd_range_free(&r);
		mu_etcd_free(e);
		liar_stop(&web);
		liar_stop(&junk);
	}
}

/*
 * A bad member first, a live one second. A lease grant is retried on the
 * live one within the call. A txn that failed on the bad one after being
 * sent is not (it might have applied), but the client has moved on: the
 * next txn goes to the live member, and so does every later call.
 */
static void failover_past(const char *reply, const char *key, int failure)
{
	char eps[512], port[32];
	mu_etcd_t *e;
	int64_t id, ttl;
	int ok;
	liar_t bad;

	liar_start(&bad, reply);
	snprintf(eps, sizeof(eps), "127.0.0.1:%d,%s", bad.port, fx.endpoints);
	snprintf(port, sizeof(port), "127.0.0.1:%d/", bad.port);
	e = client_ms(eps, 1000);
	assert_int_equal(mu_etcd_lease_grant(e, 30, &id, &ttl), 0);
	assert_int_equal(mu_etcd_lease_revoke(e, id), 0);
	mu_etcd_free(e);

	e = client_ms(eps, 1000);
	assert_int_equal(mu_etcd_create(e, key, strlen(key), "1", 1, 0, &ok), failure);
	assert_non_null(strstr(mu_etcd_last_error(e), port)); /* names the member */
	assert_int_equal(mu_etcd_create(e, key, strlen(key), "1", 1, 0, &ok), 0);
	assert_true(ok);
	assert_int_equal(mu_etcd_create(e, key, strlen(key), "2", 1, 0, &ok), 0);
	assert_false(ok);
	assert_int_equal(mu_etcd_lease_grant(e, 30, &id, &ttl), 0);
	assert_int_equal(mu_etcd_lease_revoke(e, id), 0);
	mu_etcd_free(e);
	liar_stop(&bad);
}

static void test_failover_past_a_bad_first_member(void **state)
{
	(void)state;
	failover_past("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n<html>", "/f/text", MU_EPROTO);
	failover_past("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\noops",
	              "/f/500", -ECONNREFUSED);
	failover_past(NULL, "/f/hang", -ETIMEDOUT);
}

/* Kill the leader of a 3-member cluster while writing: calls go on. */
static void test_cluster_leader_loss(void **state)
{
	mu_etcd_t *e, *w;
	mu_etcd_watch_t *wa;
	mu_etcd_range_t r;
	seen_t a = {0};
	int i, rc;

	(void)state;
	etcd_stop(&fx);
	etcd_start(&fx, 3);
	e = client(fx.endpoints);
	w = client(fx.endpoints);
	assert_int_equal(mu_etcd_watch(w, "/c/", 3, MU_ETCD_PREFIX, 0, watch_cb, &a, &wa), 0);
	mu_etcd_poll(w, 300);
	for (i = 0; i < 10; i++) {
		char key[16];

		if (i == 3)
			etcd_member_kill(&fx, 0); /* the first member; often the leader */
		if (i == 6)
			etcd_member_kill(&fx, 0);
		snprintf(key, sizeof(key), "/c/%d", i);
		rc = mu_etcd_put(e, key, strlen(key), "v", 1, 0, NULL);
		if (rc != 0) /* the election is still running: one more try */
			rc = mu_etcd_put(e, key, strlen(key), "v", 1, 0, NULL);
		assert_int_equal(rc, 0);
		mu_etcd_poll(w, 50);
	}
	poll_until(w, &a.puts, 10); /* the watch reconnected without a gap */
	assert_int_equal(mu_etcd_get(e, "/c/", 3, 1, &r), 0);
	assert_int_equal(r.n, 10);
	mu_etcd_range_free(&r);
	mu_etcd_watch_cancel(wa);
	mu_etcd_free(w);
	mu_etcd_free(e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_kv_calls, setup1, teardown),
		cmocka_unit_test_setup_teardown(test_leases, setup1, teardown),
		cmocka_unit_test_setup_teardown(test_watch, setup1, teardown),
		cmocka_unit_test_setup_teardown(test_watch_from_a_compacted_revision, setup1,
		                                teardown),
		cmocka_unit_test_setup_teardown(test_request_too_large, setup1, teardown),
		cmocka_unit_test_setup_teardown(test_dead_and_garbage_endpoints, setup1, teardown),
		cmocka_unit_test_setup_teardown(test_failover_past_a_bad_first_member, setup1, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_leader_loss, setup1, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
