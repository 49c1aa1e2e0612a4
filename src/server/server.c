/* SPDX-License-Identifier: MIT */
/*
 * The device server's loop thread: accepts clients (core/accept.c, under
 * the server's mu_secure_t), reads their TVM handshake on core/conn.c with
 * a deadline and the server's budget (a client that connects and says
 * nothing holds nobody up), checks the matchkey, and hands the stream of a
 * successful connection to a session thread running the caller's handler.
 * Registration with the tracker runs beside it (register.c).
 *
 * Handshake connection states (hs_conn_t.state):
 *   HELLO    reading RPC_MAGIC, the length and the key string; timer runs
 *   WAITING  standalone only: a good hello, waiting for the session slot
 *            for at most queue_timeout (then told the device is busy)
 *   ANSWER   reply queued (SUCCESS: hand the stream off after it is
 *            written; MISMATCH: finish the connection after it)
 *   CLOSING  mu__conn_close called; freed by core/conn.c's on_free
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "muster/server.h"
#include "core/alloc_int.h"
#include "core/accept_int.h"
#include "core/buf_int.h"
#include "core/conn_int.h"
#include "core/log_int.h"
#include "core/metrics_int.h"
#include "core/net_int.h"
#include "core/opts_int.h"
#include "core/rand_int.h"
#include "core/time_int.h"
#include "server/handshake_int.h"
#include "server/server_int.h"
#include "server/session_int.h"

typedef enum { HS_HELLO, HS_WAITING, HS_ANSWER, HS_CLOSING } hs_state_t;

typedef struct {
	mu__conn_t conn;  /* first: core/conn.c's callbacks get this */
	mu__list_t node;  /* in handshakes or waiting, while not CLOSING */
	mu_server_t *s;
	hs_state_t state;
	int success;      /* the answer being written is SUCCESS */
	int handed;       /* the stream went to a session */
	size_t used;      /* bytes of conn.in that were the hello */
	double timeout;   /* the client's -timeout */
	double since;     /* WAITING: since when (mu__clock_ms) */
	mu__buf_t out;    /* the answer, referenced by its write */
} hs_conn_t;

/* ---- sessions ---- */

static void answer(hs_conn_t *c, int success);

static void close_loop_handles(mu_server_t *s)
{
	uv_close((uv_handle_t *)&s->session_done, NULL);
	uv_close((uv_handle_t *)&s->session_timer, NULL);
}

/*
 * The session slot is free again (a session ended, or one that was granted
 * never started). Tracker mode: the registrar offers a fresh matchkey.
 * Standalone: the next client in line gets the slot.
 */
static void release_slot(mu_server_t *s, int served)
{
	mu__list_t *next = NULL;
	int stopping;

	uv_timer_stop(&s->session_timer);
	uv_mutex_lock(&s->lock);
	s->busy = 0;
	s->sessions += served;
	s->session_ended = !s->standalone;
	stopping = s->stopping;
	uv_cond_broadcast(&s->cond);
	if (!stopping && (next = mu__list_head(&s->waiting)) != NULL)
		s->busy = 1;
	uv_mutex_unlock(&s->lock);
	if (stopping)
		close_loop_handles(s);
	else if (next != NULL)
		answer(mu__container_of(next, hs_conn_t, node), 1);
}

static void session_main(void *arg)
{
	mu_server_t *s = arg;

	s->opts.on_session(s->active, s->opts.ud);
	uv_async_send(&s->session_done);
}

static void session_done_cb(uv_async_t *a)
{
	mu_server_t *s = a->data;

	if (s->active == NULL)
		return;
	uv_thread_join(&s->active_thread);
	SLOG(s, MU_LOG_INFO, "Session with %s ended", mu_session_peer(s->active));
	mu__metric_set(s->m_active, NULL, 0);
	mu__metric_observe(s->m_duration, NULL, (mu__clock_ms() - s->session_start) / 1000.0);
	mu__session_free(s->active);
	s->active = NULL;
	release_slot(s, 1);
}

static void session_timeout_cb(uv_timer_t *t)
{
	mu_server_t *s = t->data;

	if (s->active == NULL)
		return;
	SLOG(s, MU_LOG_INFO, "Session with %s reached its -timeout; closing it",
	     mu_session_peer(s->active));
	mu__stream_abort(s->active->st);
}

/*
 * SUCCESS is out: take the stream out of the loop and start a session
 * thread on it, with the bytes that came behind the hello.
 */
static void hand_off(hs_conn_t *c)
{
	mu_server_t *s = c->s;
	mu_stream_t *st = NULL;
	mu__buf_t early;

	/* the early bytes live in conn.in, which the detach frees */
	mu__buf_init(&early, c->conn.in.len);
	c->handed = 1; /* before the detach closes c: its slot goes on */
	if (mu__buf_append(&early, c->conn.in.data + c->used, c->conn.in.len - c->used) == 0 &&
	    mu__conn_detach(&c->conn, &st) == 0)
		s->active = mu__session_new(st, c->timeout, early.data, early.len);
	mu__buf_free(&early);
	if (s->active != NULL && s->opts.session_timeout > 0)
		s->active->wait_limit_ms = (int)(s->opts.session_timeout * 1000.0);
	if (s->active == NULL ||
	    uv_thread_create(&s->active_thread, session_main, s) != 0) {
		SLOG(s, MU_LOG_ERROR, "cannot start a session for %s", c->conn.peer);
		mu__session_free(s->active); /* closes the stream */
		s->active = NULL;
		mu__conn_close(&c->conn, 0);
		release_slot(s, 0);
		return;
	}
	SLOG(s, MU_LOG_INFO, "Session with %s started", s->active->peer);
	s->session_start = mu__clock_ms();
	mu__metric_add(s->m_sessions, NULL, 1);
	mu__metric_set(s->m_active, NULL, 1);
	if (c->timeout > 0)
		uv_timer_start(&s->session_timer, session_timeout_cb,
		               (uint64_t)(c->timeout * 1000.0), 0);
}

/* The answer is written (or dropped: the connection is closing). */
static void answer_done(void *arg)
{
	hs_conn_t *c = arg;

	if (c->conn.closing)
		return; /* on_close has seen to the slot */
	if (c->success)
		hand_off(c);
	else
		mu__conn_finish(&c->conn, 0, 1000);
}

/* Queue the answer to a complete hello. */
static void answer(hs_conn_t *c, int success)
{
	int rc;

	c->state = HS_ANSWER;
	c->success = success;
	mu__conn_hold(&c->conn, 1);
	mu__conn_timer(&c->conn, 0);
	mu__buf_reset(&c->out);
	rc = mu__rpc_reply_encode(&c->out, success, c->s->key);
	if (rc == 0)
		rc = mu__conn_send(&c->conn, NULL, 0, c->out.data, c->out.len, answer_done, c);
	if (rc != 0)
		mu__conn_close(&c->conn, rc); /* on_close gives the slot back */
}

/*
 * Decide on a complete hello. Tracker mode: the current matchkey, once
 * shown, is used up (a second client with it gets MISMATCH) until the
 * registrar offers a fresh one after the session. Standalone: the key is
 * the matchkey; a client arriving while a session runs waits its turn.
 */
static void judge(hs_conn_t *c, const char *mk, size_t mklen)
{
	mu_server_t *s = c->s;
	int ok, wait = 0;

	uv_mutex_lock(&s->lock);
	/* an empty matchkey is used up in tracker mode; standalone it is the
	 * key, and TVM's default key is empty (rpc.connect sends "client:") */
	ok = !s->stopping && (s->standalone || s->matchkey[0] != '\0') &&
	     strlen(s->matchkey) == mklen && memcmp(s->matchkey, mk, mklen) == 0;
	if (ok && s->busy)
		wait = 1; /* standalone only: tracker mode clears the key when busy */
	else if (ok) {
		s->busy = 1;
		if (!s->standalone)
			s->matchkey[0] = '\0';
	}
	uv_mutex_unlock(&s->lock);
	if (!ok) {
		SLOG(s, MU_LOG_INFO, "Mismatch from %s: matchkey \"%.*s\" is not current",
		     c->conn.peer, (int)(mklen > 200 ? 200 : mklen), mk);
		answer(c, 0);
	} else if (wait) {
		c->state = HS_WAITING;
		mu__conn_hold(&c->conn, 1);
		c->since = mu__clock_ms();
		mu__conn_timer(&c->conn, s->opts.queue_timeout > 0
		               ? (uint64_t)(s->opts.queue_timeout * 1000.0) : 0);
		SLOG(s, MU_LOG_INFO, "%s waits for the session of %s to end (at most %g s)", c->conn.peer,
		     s->active != NULL ? mu_session_peer(s->active) : "another client",
		     s->opts.queue_timeout);
		mu__list_remove(&c->node);
		mu__list_insert_tail(&s->waiting, &c->node);
	} else {
		answer(c, 1);
	}
}

static void hs_data(mu__conn_t *cc)
{
	hs_conn_t *c = (hs_conn_t *)cc;
	const char *key, *mk;
	size_t keylen, mklen;
	int rc;

	if (c->state != HS_HELLO)
		return;
	rc = mu__rpc_hello_peek(cc->in.data, cc->in.len, MU_RPC_MAX_KEY, &key, &keylen);
	if (rc == 0)
		return;
	if (rc < 0) {
		SLOG(c->s, MU_LOG_WARN, "%s: bad handshake (%s), closing", cc->peer,
		     mu_strerror(rc));
		mu__conn_close(cc, rc);
		return;
	}
	c->used = 8 + keylen;
	if (mu__rpc_parse_client_key(key, keylen, &mk, &mklen, &c->timeout) != 0) {
		SLOG(c->s, MU_LOG_INFO, "%s: key string \"%.*s\" is not client:MATCHKEY[ -timeout=N]",
		     cc->peer, (int)(keylen > 200 ? 200 : keylen), key);
		answer(c, 0);
		return;
	}
	judge(c, mk, mklen);
}

/* WAITING past queue_timeout: MISMATCH and why, then close. */
static void answer_busy(hs_conn_t *c)
{
	mu_server_t *s = c->s;
	char why[256];
	int rc;

	snprintf(why, sizeof(why), "busy: this device serves one session at a time; the session "
	         "of %s has run %.1f s and %g s of waiting (--queue-timeout) passed",
	         s->active != NULL ? mu_session_peer(s->active) : "another client",
	         (mu__clock_ms() - s->session_start) / 1000.0, s->opts.queue_timeout);
	SLOG(s, MU_LOG_WARN, "%s: told the device is busy: %s", c->conn.peer, why + 6);
	mu__list_remove(&c->node); /* out of line */
	c->state = HS_ANSWER;
	c->success = 0;
	mu__conn_timer(&c->conn, 0);
	mu__buf_reset(&c->out);
	rc = mu__rpc_busy_encode(&c->out, why);
	if (rc == 0)
		rc = mu__conn_send(&c->conn, NULL, 0, c->out.data, c->out.len, answer_done, c);
	if (rc != 0)
		mu__conn_close(&c->conn, rc);
}

static void hs_timeout(mu__conn_t *cc)
{
	hs_conn_t *c = (hs_conn_t *)cc;

	if (c->state == HS_WAITING) {
		answer_busy(c);
		return;
	}

	SLOG(c->s, MU_LOG_WARN, "%s: no handshake within %g s, closing", cc->peer,
	     c->s->opts.handshake_timeout);
	mu__conn_close(cc, -ETIMEDOUT);
}

static void hs_closed(mu__conn_t *cc, int err)
{
	hs_conn_t *c = (hs_conn_t *)cc;
	hs_state_t was = c->state;

	c->state = HS_CLOSING;
	mu__list_remove(&c->node);
	if (c->handed)
		return;
	if (err != 0 && was == HS_HELLO && err != -ETIMEDOUT)
		SLOG(c->s, MU_LOG_INFO, "%s left during the handshake (%s)", cc->peer,
		     mu_strerror(err));
	/* the slot was taken for it: give it back (not while stopping: the
	 * stop closes the loop's handles itself) */
	if (was == HS_ANSWER && c->success && !c->s->loop_stopping)
		release_slot(c->s, 0);
}

static void hs_free(mu__conn_t *cc)
{
	hs_conn_t *c = (hs_conn_t *)cc;

	mu__buf_free(&c->out);
	mu__free(c);
}

static const mu__conn_ops_t hs_ops = {hs_data, hs_closed, hs_free, hs_timeout, NULL, NULL, NULL};

static void on_connection(mu__listener_t *l, mu_stream_t *st)
{
	mu_server_t *s = l->data;
	hs_conn_t *c;

	if ((c = mu__calloc(1, sizeof(*c))) == NULL) {
		mu__stream_close(st);
		return;
	}
	c->s = s;
	c->state = HS_HELLO;
	mu__buf_init(&c->out, 16 + MU_RPC_MAX_KEY);
	mu__list_insert_tail(&s->handshakes, &c->node);
	if (mu__conn_accept(&c->conn, &s->svc.loop, st, &hs_ops,
	                    8 + MU_RPC_MAX_KEY + sizeof(s->scratch), s->scratch,
	                    sizeof(s->scratch), &s->budget) != 0)
		return;
	if (s->opts.handshake_timeout > 0)
		mu__conn_timer(&c->conn, (uint64_t)(s->opts.handshake_timeout * 1000.0));
}

/* ---- stopping ---- */

static void close_all(mu__list_t *l)
{
	mu__list_t *it, *tmp;

	mu__list_foreach_safe(it, tmp, l)
		mu__conn_close(&mu__container_of(it, hs_conn_t, node)->conn, 0);
}

static void service_stop_cb(mu__service_t *svc)
{
	mu_server_t *s = mu__container_of(svc, mu_server_t, svc);

	uv_mutex_lock(&s->lock);
	s->stopping = 1;
	uv_cond_broadcast(&s->cond);
	uv_mutex_unlock(&s->lock);
	s->loop_stopping = 1;
	if (s->listener_init)
		mu__listener_close(&s->listener, NULL);
	close_all(&s->handshakes);
	close_all(&s->waiting);
	if (s->active != NULL) /* its handler sees I/O fail and returns */
		mu__stream_abort(s->active->st);
	else
		close_loop_handles(s);
}

/* ---- public API ---- */

static void server_defaults(mu_server_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->struct_size = sizeof(*o);
	o->host = "0.0.0.0";
	o->port = 9090;
	o->port_end = 9199;
	o->handshake_timeout = 10;
	o->queue_timeout = 10;
	o->session_timeout = 300;
	o->poll_period = 2;
	o->retry_max = 8;
	mu_budget_init(&o->budget);
}

void mu_server_opts_init_size(mu_server_opts_t *o, size_t size)
{
	mu_server_opts_t d;

	server_defaults(&d);
	mu__opts_fill(o, size, &d, sizeof(d));
}

static int server_init(mu_server_t *s, const mu_server_opts_t *o)
{
	if (o->key == NULL || (o->key[0] == '\0' && o->tracker_host != NULL) ||
	    o->on_session == NULL ||
	    o->handshake_timeout < 0 || !(o->queue_timeout >= 0) || o->poll_period <= 0 || o->retry_max <= 0 ||
	    !(o->session_timeout >= 0 && o->session_timeout <= INT_MAX / 1000) ||
	    mu_budget_check(&o->budget) != 0 ||
	    mu__copy_str(s->host, sizeof(s->host), o->host ? o->host : "0.0.0.0") ||
	    mu__copy_str(s->key, sizeof(s->key), o->key) ||
	    mu__copy_str(s->tracker_host, sizeof(s->tracker_host), o->tracker_host) ||
	    mu__copy_str(s->custom_addr, sizeof(s->custom_addr), o->custom_addr) ||
	    strlen(o->key) + 24 >= MU_MATCHKEY_MAX)
		return MU_EARG;
	s->opts = *o;
	s->opts.host = s->host;
	s->opts.key = s->key;
	s->opts.tracker_host = o->tracker_host ? s->tracker_host : NULL;
	s->opts.custom_addr = o->custom_addr ? s->custom_addr : NULL;
	s->standalone = o->tracker_host == NULL;
	if (s->standalone) /* TVM: without a tracker the matchkey is the key */
		memcpy(s->matchkey, s->key, strlen(s->key) + 1);
	mu__list_init(&s->handshakes);
	mu__list_init(&s->waiting);
	mu__budget_init(&s->budget, &o->budget, "server");
	return 0;
}

static int server_listen(mu_server_t *s)
{
	mu__listen_opts_t lo = {s->host, s->opts.port, s->opts.port_end, 1, 128};
	int rc;

	rc = uv_async_init(&s->svc.loop, &s->session_done, session_done_cb);
	if (rc != 0)
		return rc;
	s->session_done.data = s;
	uv_timer_init(&s->svc.loop, &s->session_timer);
	s->session_timer.data = s;
	rc = mu__listener_start(&s->listener, &s->svc.loop, &lo, s->opts.sec, "server",
	                        on_connection, &s->port);
	if (rc != 0)
		return rc;
	s->listener_init = 1;
	s->listener.data = s;
	return 0;
}

/* The address to publish: see mu_server_host. */
static void reach_host(mu_server_t *s)
{
	int v6 = strchr(s->host, ':') != NULL;

	if (s->custom_addr[0] != '\0') {
		snprintf(s->reach_host, sizeof(s->reach_host), "%s", s->custom_addr);
		return;
	}
	if (!mu__is_wildcard(s->host)) {
		snprintf(s->reach_host, sizeof(s->reach_host), "%s", s->host);
		return;
	}
	if (!s->standalone && mu__route_source(s->tracker_host, s->opts.tracker_port,
	                                       s->reach_host, sizeof(s->reach_host)) == 0 &&
	    !mu__is_wildcard(s->reach_host))
		return;
	snprintf(s->reach_host, sizeof(s->reach_host), "%s", v6 ? "::1" : "127.0.0.1");
}

static int start_registrar(mu_server_t *s)
{
	int rc = 0;

	uv_mutex_lock(&s->join_lock);
	if (!s->standalone && !s->registrar_started && !s->joined) {
		rc = uv_thread_create(&s->registrar, mu__server_registrar, s);
		s->registrar_started = rc == 0;
	}
	uv_mutex_unlock(&s->join_lock);
	return rc;
}

int mu_server_start(const mu_server_opts_t *uo, mu_server_t **out)
{
	mu_server_opts_t oo, *o = &oo;
	mu_server_t *s;
	int rc;

	*out = NULL;
	server_defaults(o);
	if (mu__opts_read(o, sizeof(*o), uo) != 0)
		return MU_EARG;
	s = mu__calloc(1, sizeof(*s));
	if (s == NULL)
		return MU_ENOMEM;
	rc = server_init(s, o);
	if (rc == 0)
		rc = mu__service_init(&s->svc, service_stop_cb);
	s->m_sessions = mu__metric_family(o->metrics, MU_METRIC_COUNTER,
	                                  "muster_server_sessions_total", "Sessions served.",
	                                  NULL, NULL, 0);
	s->m_active = mu__metric_family(o->metrics, MU_METRIC_GAUGE, "muster_server_session_active",
	                                "1 while a session runs (one at a time).", NULL, NULL, 0);
	s->m_duration = mu__metric_family(o->metrics, MU_METRIC_HISTOGRAM,
	                                  "muster_server_session_seconds",
	                                  "How long sessions lasted.", NULL, mu__metric_seconds,
	                                  mu__metric_nseconds);
	mu__metric_touch(s->m_sessions, NULL);
	mu__metric_touch(s->m_active, NULL);
	if (rc != 0) {
		mu__free(s);
		return rc;
	}
	uv_mutex_init(&s->lock);
	uv_cond_init(&s->cond);
	uv_mutex_init(&s->join_lock);
	rc = server_listen(s);
	if (rc == 0)
		rc = mu__service_start(&s->svc);
	if (rc == 0)
		reach_host(s);
	if (rc == 0 && !o->defer_register)
		rc = start_registrar(s);
	if (rc != 0) {
		s->joined = 0;
		mu_server_free(s);
		return rc;
	}
	SLOG(s, MU_LOG_INFO, "Bind to %s:%d, reachable at %s%s", s->host, s->port, s->reach_host,
	     s->standalone ? " (standalone: no tracker, matchkey is the key)" : "");
	*out = s;
	return 0;
}

int mu_server_port(const mu_server_t *s)
{
	return s->port;
}

int mu_server_register(mu_server_t *s)
{
	return start_registrar(s);
}

const char *mu_server_host(const mu_server_t *s)
{
	return s->reach_host;
}

void mu_server_matchkey(mu_server_t *s, char *buf, size_t len)
{
	uv_mutex_lock(&s->lock);
	snprintf(buf, len, "%s", s->matchkey);
	uv_mutex_unlock(&s->lock);
}

unsigned long mu_server_sessions(mu_server_t *s)
{
	unsigned long n;

	uv_mutex_lock(&s->lock);
	n = s->sessions;
	uv_mutex_unlock(&s->lock);
	return n;
}

void mu_server_stop(mu_server_t *s)
{
	mu__service_stop(&s->svc);
	mu_server_wait(s);
}

void mu_server_wait(mu_server_t *s)
{
	uv_mutex_lock(&s->join_lock);
	if (!s->joined) {
		mu__service_join(&s->svc);
		/* the loop is gone; make sure the registrar sees it too */
		uv_mutex_lock(&s->lock);
		s->stopping = 1;
		uv_cond_broadcast(&s->cond);
		uv_mutex_unlock(&s->lock);
		if (s->registrar_started)
			uv_thread_join(&s->registrar);
		s->joined = 1;
	}
	uv_mutex_unlock(&s->join_lock);
}

void mu_server_free(mu_server_t *s)
{
	if (s == NULL)
		return;
	mu_server_stop(s);
	mu__service_free(&s->svc);
	uv_mutex_destroy(&s->join_lock);
	uv_cond_destroy(&s->cond);
	uv_mutex_destroy(&s->lock);
	mu__free(s);
}
