/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/md/{agent,worker,backend_*}.c: agents in this
 * process exchanging through P2P, a TCPStore (muster's, on a thread) and a
 * real etcd member (etcd_fixture.h).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>

#include "mu_test.h"

#include "muster/md.h"
#include "muster/store.h"
#include "core/time_int.h"
#include "md/md_int.h"
#include "etcd_fixture.h"

#define T 10000

static mu_md_agent_t *agent_on(const char *name, int listen, int port,
                               const char *etcd, const char *ts)
{
	mu_md_opts_t o;
	mu_md_agent_t *a;

	mu_md_opts_init(&o);
	o.name = name;
	o.listen = listen;
	o.listen_host = "127.0.0.1";
	o.listen_port = port;
	o.no_env = 1;
	o.etcd_endpoints = etcd;
	o.tcpstore_endpoint = ts;
	o.etcd_watch_timeout = 2;
	o.store_timeout = 2;
	o.lease_ttl = 2;
	assert_int_equal(mu_md_agent_new(&o, &a, NULL, 0), 0);
	return a;
}

static mu_md_agent_t *agent(const char *name, int listen, const char *etcd,
                            const char *ts)
{
	return agent_on(name, listen, 0, etcd, ts);
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
	char why[256];
	char *eb = NULL;
	size_t ebl = 0;

	(void)state;
	mu_md_opts_init(&o);
	o.name = "A";
	o.no_env = 1;
	o.etcd_endpoints = "http://127.0.0.1:1";
	o.tcpstore_endpoint = "127.0.0.1:2";
	eb = why;
	ebl = sizeof(why);
	/* the caller is told why, not only MU_EARG */
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), MU_EARG);
	assert_null(a);
	assert_non_null(strstr(why, "mutually exclusive"));
	assert_non_null(strstr(why, "etcd_endpoints"));
	assert_non_null(strstr(why, "tcpstore_endpoint"));
	/*
	 * The environment: the store comes from one source taken whole (the
	 * API, else MUSTER_*, else NIXL_*); only within one source are both
	 * stores an error. Set-but-empty counts.
	 */
	setenv("NIXL_TCPSTORE_ENDPOINT", "127.0.0.1:2", 1);
	o.no_env = 0;
	o.etcd_endpoints = NULL;
	o.tcpstore_endpoint = NULL;
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), 0);
	assert_string_equal(why, ""); /* cleared on success */
	assert_string_equal(mu_md_backend_name(a), "TCPStore");
	mu_md_agent_free(a);
	setenv("NIXL_ETCD_ENDPOINTS", "http://127.0.0.1:1", 1);
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), MU_EARG); /* both NIXL_ */
	assert_non_null(strstr(why, "NIXL_ETCD_ENDPOINTS"));
	assert_non_null(strstr(why, "NIXL_TCPSTORE_ENDPOINT"));
	assert_non_null(strstr(why, "mutually exclusive"));
	/* the API's store: NIXL_'s are not looked at */
	o.etcd_endpoints = "http://127.0.0.1:3";
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), 0);
	assert_string_equal(mu_md_backend_name(a), "ETCD");
	mu_md_agent_free(a);
	o.etcd_endpoints = NULL;
	o.tcpstore_endpoint = "127.0.0.1:4";
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), 0);
	assert_string_equal(mu_md_backend_name(a), "TCPStore");
	mu_md_agent_free(a);
	o.tcpstore_endpoint = NULL;
	/* a MUSTER_ store: NIXL_'s are not looked at either */
	setenv("MUSTER_ETCD_ENDPOINTS", "http://127.0.0.1:1", 1);
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), 0);
	assert_string_equal(mu_md_backend_name(a), "ETCD");
	mu_md_agent_free(a);
	unsetenv("MUSTER_ETCD_ENDPOINTS");
	setenv("MUSTER_TCPSTORE_ENDPOINT", "127.0.0.1:5", 1);
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), 0);
	assert_string_equal(mu_md_backend_name(a), "TCPStore");
	mu_md_agent_free(a);
	setenv("MUSTER_ETCD_ENDPOINTS", "", 1);
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), MU_EARG); /* both MUSTER_ */
	assert_non_null(strstr(why, "MUSTER_ETCD_ENDPOINTS"));
	assert_non_null(strstr(why, "MUSTER_TCPSTORE_ENDPOINT"));
	assert_non_null(strstr(why, "mutually exclusive"));
	unsetenv("MUSTER_TCPSTORE_ENDPOINT");
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), MU_EARG); /* empty */
	assert_non_null(strstr(why, "MUSTER_ETCD_ENDPOINTS is set but empty"));
	unsetenv("MUSTER_ETCD_ENDPOINTS");
	unsetenv("NIXL_ETCD_ENDPOINTS");
	unsetenv("NIXL_TCPSTORE_ENDPOINT");
	/* a bad endpoint, a missing name: said too; a short buffer truncates */
	o.tcpstore_endpoint = "127.0.0.1:abc";
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), MU_EARG);
	assert_non_null(strstr(why, "not host:port"));
	ebl = 8;
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), MU_EARG);
	assert_int_equal(strlen(why), 7);
	ebl = sizeof(why);
	o.name = NULL;
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), MU_EARG);
	assert_non_null(strstr(why, "name"));
	/* without a buffer it still fails the same way */
	eb = NULL;
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), MU_EARG);
}

/* The TCPStore timeouts: the API's, else MUSTER_, else NIXL_ variables
 * (milliseconds), else 30 s and 5 s; the variables only for a TCPStore. */
static void test_tcpstore_timeouts(void **state)
{
	mu_md_opts_t o;
	mu_md_agent_t *a;
	char why[256];
	char *eb = NULL;
	size_t ebl = 0;

	(void)state;
	mu_md_opts_init(&o);
	o.name = "A";
	o.tcpstore_endpoint = "127.0.0.1:2";
	eb = why;
	ebl = sizeof(why);
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), 0);
	assert_true(a->o.store_timeout == 30 && a->o.op_timeout == 5);
	mu_md_agent_free(a);
	setenv("NIXL_TCPSTORE_TIMEOUT_MS", "1500", 1);
	setenv("NIXL_TCPSTORE_OP_TIMEOUT_MS", "250", 1);
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), 0);
	assert_true(a->o.store_timeout == 1.5 && a->o.op_timeout == 0.25);
	mu_md_agent_free(a);
	setenv("MUSTER_TCPSTORE_OP_TIMEOUT_MS", "750", 1);
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), 0);
	assert_true(a->o.store_timeout == 1.5 && a->o.op_timeout == 0.75);
	mu_md_agent_free(a);
	o.store_timeout = 7; /* the API's value wins */
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), 0);
	assert_true(a->o.store_timeout == 7 && a->o.op_timeout == 0.75);
	mu_md_agent_free(a);
	o.no_env = 1;
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), 0);
	assert_true(a->o.store_timeout == 7 && a->o.op_timeout == 5);
	mu_md_agent_free(a);
	o.no_env = 0;
	/* not a TCPStore: the variables do not apply */
	o.tcpstore_endpoint = NULL;
	o.etcd_endpoints = "http://127.0.0.1:1";
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), 0);
	assert_true(a->o.op_timeout == 5);
	mu_md_agent_free(a);
	o.etcd_endpoints = NULL;
	o.tcpstore_endpoint = "127.0.0.1:2";
	/* a bad value is refused, naming the variable */
	setenv("MUSTER_TCPSTORE_OP_TIMEOUT_MS", "5s", 1);
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), MU_EARG);
	assert_non_null(strstr(why, "MUSTER_TCPSTORE_OP_TIMEOUT_MS=\"5s\""));
	unsetenv("MUSTER_TCPSTORE_OP_TIMEOUT_MS");
	setenv("NIXL_TCPSTORE_OP_TIMEOUT_MS", "0", 1);
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), MU_EARG);
	assert_non_null(strstr(why, "NIXL_TCPSTORE_OP_TIMEOUT_MS"));
	unsetenv("NIXL_TCPSTORE_OP_TIMEOUT_MS");
	unsetenv("NIXL_TCPSTORE_TIMEOUT_MS");
	o.op_timeout = -1;
	assert_int_equal(mu_md_agent_new(&o, &a, eb, ebl), MU_EARG);
	assert_non_null(strstr(why, "op_timeout must be >= 0"));
}

static int fake_open(mu_md_agent_t *a, void **st)
{
	(void)a;
	*st = NULL;
	return 0;
}

static void fake_close(void *st)
{
	(void)st;
}

static int fake_op(void *st, mu__md_op_t *op, char *why, size_t wl)
{
	(void)st;
	(void)op;
	(void)why;
	(void)wl;
	return 0;
}

/* A method table of another version, or missing a method, is refused. */
static void test_backend_table_checked(void **state)
{
	mu__md_backend_t b = {MU_MD_BACKEND_VERSION, "fake", fake_open, fake_close,
	                      fake_op, fake_op, fake_op, NULL, NULL};
	mu_md_agent_t *a = agent("A", 0, NULL, NULL);
	char why[256];

	(void)state;
	a->setup_err = why;
	a->setup_errlen = sizeof(why);
	assert_int_equal(mu__md_backend_check(a, &b), 0);
	assert_int_equal(mu__md_backend_check(a, &mu__md_backend_p2p), 0);
	assert_int_equal(mu__md_backend_check(a, &mu__md_backend_tcpstore), 0);
	assert_int_equal(mu__md_backend_check(a, &mu__md_backend_etcd), 0);
	b.version = MU_MD_BACKEND_VERSION + 1;
	assert_int_equal(mu__md_backend_check(a, &b), -ENOTSUP);
	assert_non_null(strstr(why, "fake backend's method table is version"));
	b.version = MU_MD_BACKEND_VERSION;
	b.fetch = NULL;
	a->setup_said = 0;
	assert_int_equal(mu__md_backend_check(a, &b), -ENOTSUP);
	a->setup_err = NULL;
	a->setup_errlen = 0;
	mu_md_agent_free(a);
}

/* A listen port in use: MU_EBIND, and the words name the address. */
static void test_listen_port_in_use_says_so(void **state)
{
	mu_md_agent_t *a = agent("A", 1, NULL, NULL), *b;
	mu_md_opts_t o;
	char why[256], want[64];
	char *eb = NULL;
	size_t ebl = 0;

	(void)state;
	mu_md_opts_init(&o);
	o.name = "B";
	o.no_env = 1;
	o.listen = 1;
	o.listen_host = "127.0.0.1";
	o.listen_port = mu_md_listen_port(a);
	eb = why;
	ebl = sizeof(why);
	assert_int_equal(mu_md_agent_new(&o, &b, eb, ebl), MU_EBIND);
	snprintf(want, sizeof(want), "cannot listen on 127.0.0.1:%d", o.listen_port);
	assert_non_null(strstr(why, want));
	mu_md_agent_free(a);
}

/* Wait (bounded) until a has loaded (want 1) or dropped (want 0) name. */
static int loaded_within(mu_md_agent_t *a, const char *name, int want, int ms)
{
	int64_t deadline = mu__deadline(ms);

	while ((mu_md_check_remote(a, name) == 0) != want && mu__now_ms() < deadline)
		poll(NULL, 0, 10);
	return (mu_md_check_remote(a, name) == 0) == want;
}

/*
 * B keeps a connection to A's listener; A goes and a new A listens on the
 * same port. B's next push and INVL must reach the new A: a frame written
 * into the old connection would be reported sent and go nowhere.
 */
static void test_p2p_peer_restarted_on_the_same_port(void **state)
{
	mu_md_agent_t *a = agent("A", 1, NULL, NULL), *b = agent("B", 0, NULL, NULL);
	int port = mu_md_listen_port(a);
	mu_md_peer_t pa = {"127.0.0.1", port};
	void *blob;
	size_t n;
	uint64_t op;

	(void)state;
	assert_int_equal(mu_md_set_local(b, NULL, "b", 1), 0);
	assert_int_equal(mu_md_send_local(b, &pa, NULL, &op), 0);
	assert_int_equal(done(b, op), 0);
	assert_true(loaded_within(a, "B", 1, T));
	/* push: the first one after the restart arrives */
	mu_md_agent_free(a);
	a = agent_on("A", 1, port, NULL, NULL);
	assert_int_equal(mu_md_send_local(b, &pa, NULL, &op), 0);
	assert_int_equal(done(b, op), 0);
	assert_true(loaded_within(a, "B", 1, 2000));
	/* INVL: the same */
	mu_md_agent_free(a);
	a = agent_on("A", 1, port, NULL, NULL);
	assert_int_equal(mu_md_get_local(b, NULL, &blob, &n), 0);
	assert_int_equal(mu_md_load_remote(a, NULL, blob, n, NULL, 0), 0);
	mu_free(blob);
	assert_int_equal(mu_md_invalidate_local(b, &pa, &op), 0);
	assert_int_equal(done(b, op), 0);
	assert_true(loaded_within(a, "B", 0, 2000));
	mu_md_agent_free(a);
	mu_md_agent_free(b);
}

/*
 * When mu_md_wait returns, the op's event is already queued (the CLI
 * prints its detail right after the wait). Fast failures (a refused
 * connection) make the race between the two as tight as it gets.
 */
static void test_event_queued_before_wait_returns(void **state)
{
	mu_md_agent_t *b = agent("B", 0, NULL, NULL);
	mu_md_peer_t dead = {"127.0.0.1", etcd_free_port()};
	mu_md_event_t ev;
	char want[64];
	uint64_t op;
	int i, st;

	(void)state;
	snprintf(want, sizeof(want), "127.0.0.1:%d", dead.port);
	assert_int_equal(mu_md_set_local(b, NULL, "b", 1), 0);
	for (i = 0; i < 2000; i++) {
		assert_int_equal(mu_md_send_local(b, &dead, NULL, &op), 0);
		assert_int_equal(mu_md_wait(b, op, T, &st), 0);
		assert_int_equal(st, -ECONNREFUSED);
		assert_int_equal(mu_md_next_event(b, &ev), 0);
		assert_true(ev.op == op);
		assert_int_equal(ev.status, -ECONNREFUSED);
		assert_non_null(strstr(ev.detail, want));
		assert_int_equal(mu_md_next_event(b, &ev), -EAGAIN);
	}
	mu_md_agent_free(b);
}

/* ---- the on_event callback ---- */

/* What an agent's on_event saw; it runs on the worker and listener
 * threads, hence the lock. */
typedef struct {
	pthread_mutex_t lock;
	mu_md_event_t ev[32];
	int n;
	int calls[6]; /* by kind */
	void *ud_seen;
} seen_t;

static void seen_cb(void *ud, const mu_md_event_t *ev)
{
	seen_t *s = ud;

	pthread_mutex_lock(&s->lock);
	s->ud_seen = ud;
	if (ev->kind >= 1 && ev->kind <= 5)
		s->calls[ev->kind]++;
	if (s->n < 32)
		s->ev[s->n++] = *ev;
	pthread_mutex_unlock(&s->lock);
}

/* The count of kind-events seen, once it reaches want (bounded wait). */
static int seen_kind(seen_t *s, mu_md_event_kind_t kind, int want)
{
	int64_t deadline = mu__deadline(T);
	int n;

	for (;;) {
		pthread_mutex_lock(&s->lock);
		n = s->calls[kind];
		pthread_mutex_unlock(&s->lock);
		if (n >= want || mu__now_ms() >= deadline)
			return n;
		poll(NULL, 0, 5);
	}
}

/* The last event s saw, a copy. */
static mu_md_event_t seen_last(seen_t *s)
{
	mu_md_event_t ev;

	pthread_mutex_lock(&s->lock);
	assert_true(s->n > 0);
	ev = s->ev[s->n - 1];
	pthread_mutex_unlock(&s->lock);
	return ev;
}

static mu_md_agent_t *agent_cb(const char *name, seen_t *s)
{
	mu_md_opts_t o;
	mu_md_agent_t *a;

	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
	mu_md_opts_init(&o);
	o.name = name;
	o.listen = 1;
	o.listen_host = "127.0.0.1";
	o.listen_port = 0;
	o.no_env = 1;
	o.on_event = seen_cb;
	o.ud = s;
	assert_int_equal(mu_md_agent_new(&o, &a, NULL, 0), 0);
	return a;
}

/* The callback's event and the queued one are the same report. */
static void assert_same_as_queued(mu_md_agent_t *a, const mu_md_event_t *cb)
{
	mu_md_event_t q;

	assert_int_equal(mu_md_next_event(a, &q), 0);
	assert_true(q.op == cb->op);
	assert_int_equal(q.kind, cb->kind);
	assert_int_equal(q.status, cb->status);
	assert_string_equal(q.name, cb->name);
	assert_string_equal(q.detail, cb->detail);
}

/*
 * on_event is called once per completion and per unsolicited event, with
 * the caller's ud and the op id, kind, status and name the call had; the
 * same event is queued. A call that fails at once never calls it.
 */
static void test_on_event_p2p(void **state)
{
	seen_t sa, sb;
	mu_md_agent_t *a = agent_cb("A", &sa), *b = agent_cb("B", &sb);
	mu_md_peer_t pb = {"127.0.0.1", mu_md_listen_port(b)};
	mu_md_peer_t dead = {"127.0.0.1", etcd_free_port()};
	mu_md_event_t ev;
	char want[64];
	uint64_t op;

	(void)state;
	assert_int_equal(mu_md_set_local(a, NULL, "a-full", 6), 0);
	assert_int_equal(mu_md_set_local(b, NULL, "b-full", 6), 0);
	/* synchronous failures: no callback */
	assert_int_equal(mu_md_send_local(a, &pb, "nolabel", &op), -ENOENT);
	assert_int_equal(mu_md_fetch_remote(a, "A", &pb, NULL, &op), MU_EARG);
	assert_int_equal(sa.n, 0);
	/* SENT at A, REMOTE_LOADED (unsolicited, op 0) at B */
	assert_int_equal(mu_md_send_local(a, &pb, NULL, &op), 0);
	assert_int_equal(done(a, op), 0);
	assert_int_equal(seen_kind(&sa, MU_MD_SENT, 1), 1);
	ev = seen_last(&sa);
	assert_true(ev.op == op);
	assert_int_equal(ev.kind, MU_MD_SENT);
	assert_int_equal(ev.status, 0);
	assert_true(sa.ud_seen == &sa);
	assert_same_as_queued(a, &ev);
	assert_int_equal(seen_kind(&sb, MU_MD_REMOTE_LOADED, 1), 1);
	ev = seen_last(&sb);
	assert_true(ev.op == 0);
	assert_int_equal(ev.status, 0);
	assert_string_equal(ev.name, "A");
	assert_true(sb.ud_seen == &sb);
	assert_same_as_queued(b, &ev);
	/* FETCHED at A, naming who answered */
	assert_int_equal(mu_md_fetch_remote(a, "B", &pb, NULL, &op), 0);
	assert_int_equal(done(a, op), 0);
	assert_int_equal(seen_kind(&sa, MU_MD_FETCHED, 1), 1);
	ev = seen_last(&sa);
	assert_true(ev.op == op);
	assert_int_equal(ev.kind, MU_MD_FETCHED);
	assert_int_equal(ev.status, 0);
	assert_string_equal(ev.name, "B");
	assert_same_as_queued(a, &ev);
	/* INVALIDATED at A, REMOTE_DROPPED of A at B */
	assert_int_equal(mu_md_invalidate_local(a, &pb, &op), 0);
	assert_int_equal(done(a, op), 0);
	assert_int_equal(seen_kind(&sa, MU_MD_INVALIDATED, 1), 1);
	ev = seen_last(&sa);
	assert_true(ev.op == op);
	assert_int_equal(ev.kind, MU_MD_INVALIDATED);
	assert_int_equal(ev.status, 0);
	assert_same_as_queued(a, &ev);
	assert_int_equal(seen_kind(&sb, MU_MD_REMOTE_DROPPED, 1), 1);
	ev = seen_last(&sb);
	assert_true(ev.op == 0);
	assert_int_equal(ev.kind, MU_MD_REMOTE_DROPPED);
	assert_string_equal(ev.name, "A");
	assert_non_null(strstr(ev.detail, "invalidated by"));
	assert_same_as_queued(b, &ev);
	/* a failure: the callback carries the status and the cause */
	assert_int_equal(mu_md_send_local(a, &dead, NULL, &op), 0);
	assert_int_equal(done(a, op), -ECONNREFUSED);
	assert_int_equal(seen_kind(&sa, MU_MD_SENT, 2), 2);
	ev = seen_last(&sa);
	assert_true(ev.op == op);
	assert_int_equal(ev.status, -ECONNREFUSED);
	snprintf(want, sizeof(want), "127.0.0.1:%d", dead.port);
	assert_non_null(strstr(ev.detail, want));
	assert_same_as_queued(a, &ev);
	/* exactly one call per event, none of a kind that did not happen */
	mu_md_agent_free(a);
	mu_md_agent_free(b);
	assert_int_equal(sa.n, 4);
	assert_int_equal(sa.calls[MU_MD_SENT], 2);
	assert_int_equal(sa.calls[MU_MD_FETCHED], 1);
	assert_int_equal(sa.calls[MU_MD_INVALIDATED], 1);
	assert_int_equal(sa.calls[MU_MD_REMOTE_LOADED] + sa.calls[MU_MD_REMOTE_DROPPED], 0);
	assert_int_equal(sb.n, 2);
	assert_int_equal(sb.calls[MU_MD_REMOTE_LOADED], 1);
	assert_int_equal(sb.calls[MU_MD_REMOTE_DROPPED], 1);
	pthread_mutex_destroy(&sa.lock);
	pthread_mutex_destroy(&sb.lock);
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
		cmocka_unit_test(test_tcpstore_timeouts),
		cmocka_unit_test(test_backend_table_checked),
		cmocka_unit_test(test_listen_port_in_use_says_so),
		cmocka_unit_test(test_p2p_peer_restarted_on_the_same_port),
		cmocka_unit_test(test_event_queued_before_wait_returns),
		cmocka_unit_test(test_on_event_p2p),
		cmocka_unit_test(test_tcpstore),
		cmocka_unit_test(test_etcd),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
