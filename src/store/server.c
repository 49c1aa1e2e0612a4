/* SPDX-License-Identifier: MIT */
/*
 * The TCPStore server: libuv glue between connections (core/conn.c), the
 * codec (proto.c) and the store's semantics (kv.c). One loop thread owns
 * all state. Both dialects share one port and one key space; each
 * connection's dialect is decided from its first bytes (spec §10).
 *
 * Connection states (sconn_t.state):
 *   DETECT   no decision yet (fewer than 5 bytes, all consistent with v2)
 *   SERVING  decoding and executing requests; the request timer runs only
 *            while a request is partly received
 *   closed   mu__conn_close called; freed by core/conn.c's on_free
 */
#include <errno.h>
#include <string.h>

#include "muster/store.h"
#include "core/alloc_int.h"
#include "core/accept_int.h"
#include "core/conn_int.h"
#include "core/list_int.h"
#include "core/log_int.h"
#include "core/metrics_int.h"
#include "core/net_int.h"
#include "core/opts_int.h"
#include "core/service_int.h"
#include "store/kv_int.h"
#include "store/proto_int.h"

#define READ_CHUNK 65536

typedef enum { SC_DETECT, SC_SERVING } sconn_state_t;

typedef struct {
	mu__conn_t conn;         /* first: core/conn.c's callbacks get this */
	mu__store_peer_t peer;
	mu__list_t node;         /* in mu_store_server_t.conns */
	mu__list_t doomed_node;  /* in mu_store_server_t.doomed while a close is due */
	mu_store_server_t *s;
	sconn_state_t state;
	size_t need;             /* bytes to have before decoding again */
	int doomed;
} sconn_t;

struct mu_store_server_s {
	mu__service_t svc;
	mu__listener_t listener;
	mu__allow_t allow;       /* opts.allow, parsed */
	int listener_init;
	mu__list_t conns;
	mu__list_t doomed;       /* wake-up sends failed: close after this request */
	mu__store_t kv;
	mu__store_limits_t lim;
	mu__budget_t budget;
	mu_store_server_opts_t opts;
	char host[256];
	int port;
	uv_mutex_t join_lock;
	int joined;
	/* docs/metrics.md; each NULL without a registry */
	mu__metric_t *m_open, *m_conns, *m_cut, *m_ops, *m_keys, *m_watches;
	char scratch[READ_CHUNK];
};

#define SLOG(s, lvl, ...)                                                      \
	do {                                                                   \
		if ((lvl) <= MU_LOG_WARN || !(s)->opts.silent)                 \
			mu__log((lvl), "store", __VA_ARGS__);                  \
	} while (0)

/* ---- output ---- */

static void unref_done(void *arg)
{
	mu__store_val_unref(arg);
}

/* The kv's send callback: one reply (or wake-up) as one write. */
static int kv_send(void *ud, mu__store_peer_t *peer, const void *bytes,
                   size_t n, mu__store_val_t *tail)
{
	mu_store_server_t *s = ud;
	sconn_t *sc = mu__container_of(peer, sconn_t, peer);
	int rc;

	/* a woken waiter has just let go of its registrations */
	mu__conn_own(&sc->conn, peer->held);
	if (tail != NULL)
		mu__store_val_ref(tail);
	rc = mu__conn_send(&sc->conn, bytes, n, tail ? tail->data : NULL,
	                   tail ? tail->len : 0, tail ? unref_done : NULL, tail);
	if (rc != 0) {
		mu__store_val_unref(tail);
		/* never close from inside the kv: do it once the request is done */
		if (!sc->doomed) {
			sc->doomed = 1;
			mu__list_insert_tail(&s->doomed, &sc->doomed_node);
		}
	}
	return rc;
}

static void close_doomed(mu_store_server_t *s)
{
	mu__list_t *it;

	while ((it = mu__list_head(&s->doomed)) != NULL) {
		sconn_t *sc = mu__container_of(it, sconn_t, doomed_node);

		mu__list_remove(it);
		mu__conn_close(&sc->conn, MU_ENOMEM);
	}
}

/* ---- input ---- */

static const char *dialect_name(mu__store_dialect_t d)
{
	return d == MU_STORE_V1 ? "v1 (torch 1.x)" : "v2 (torch 2.x)";
}

static int detect(sconn_t *sc)
{
	int d = mu__store_detect(sc->conn.in.data, sc->conn.in.len);

	if (d == 0)
		return 0;
	mu__store_peer_init(&sc->peer, d == 2 ? MU_STORE_V2 : MU_STORE_V1);
	sc->state = SC_SERVING;
	SLOG(sc->s, MU_LOG_INFO, "%s speaks %s", sc->conn.peer,
	     dialect_name(sc->peer.dialect));
	return 1;
}

/* Decode and run one request; 1 when one ran, 0 when incomplete. */
static int serve_one(sconn_t *sc)
{
	mu_store_server_t *s = sc->s;
	mu__store_req_t req;
	size_t used = 0;
	uint64_t t0;
	int rc;

	if (sc->conn.in.len < sc->need)
		return 0;
	rc = mu__store_req_decode(sc->peer.dialect, sc->conn.in.data,
	                          sc->conn.in.len, &s->lim, &req, &used, &sc->need);
	if (rc == 0)
		return 0;
	if (rc < 0) {
		SLOG(s, MU_LOG_WARN, "%s: %s (opcode %u), closing", sc->conn.peer,
		     rc == MU_EPROTO ? "unknown opcode for its dialect"
		                     : rc == MU_ETOOBIG ? "a length or count over the limit"
		                                        : mu_strerror(rc),
		     (unsigned)(unsigned char)sc->conn.in.data[0]);
		mu__metric_add(s->m_cut, rc == MU_ETOOBIG ? "limit" : "protocol", 1);
		mu__conn_close(&sc->conn, rc);
		return 0;
	}
	t0 = uv_hrtime();
	rc = mu__store_exec(&s->kv, &sc->peer, &req, &s->lim);
	mu__metric_observe(s->m_ops, mu__store_op_name(req.op), (double)(uv_hrtime() - t0) / 1e9);
	mu__metric_set(s->m_keys, NULL, (double)s->kv.data.count);
	mu__metric_set(s->m_watches, NULL, (double)s->kv.nwatches);
	/* its waits and watches count against its budget */
	mu__conn_own(&sc->conn, sc->peer.held);
	if (rc != 0 && rc == MU_ETOOBIG && req.op == MU_SOP_WATCH_KEY) {
		SLOG(s, MU_LOG_WARN, "%s: too many watches (limit %zu per connection, %zu in all; "
		     "%zu held by all), closing", sc->conn.peer, s->lim.max_watches,
		     s->lim.max_watches_total, s->kv.nwatches);
	} else if (rc != 0 && rc != -ENOBUFS) {
		SLOG(s, MU_LOG_WARN, "%s: %s failed: %s, closing", sc->conn.peer,
		     mu__store_op_name(req.op),
		     rc == MU_EPROTO && req.op == MU_SOP_ADD ? "the stored value is not a number"
		     : rc == MU_EPROTO && req.op == MU_SOP_GET ? "no such key"
		     : rc == MU_EPROTO && !sc->peer.validated ? "VALIDATE missing or wrong"
		                                              : mu_strerror(rc));
	}
	if (rc != 0) {
		if (rc != -ENOBUFS) /* on_close counts those */
			mu__metric_add(s->m_cut, rc == MU_ETOOBIG ? "limit" : "protocol", 1);
		mu__store_req_free(&req);
		mu__conn_close(&sc->conn, rc);
		return 0;
	}
	mu__store_req_free(&req);
	mu__buf_consume(&sc->conn.in, used);
	sc->need = 1;
	return 1;
}

static void on_data(mu__conn_t *c)
{
	sconn_t *sc = (sconn_t *)c;
	int progressed = 0;

	if (sc->state == SC_DETECT && !detect(sc))
		return;
	/* stop at backpressure; core/conn.c calls back when it is lifted */
	while (!c->closing && !c->paused && c->in.len > 0 && serve_one(sc)) {
		progressed = 1;
		if (mu__conn_yield(c))
			break;
	}
	close_doomed(sc->s);
	if (c->closing)
		return;
	/* the request timer measures one partly received request; while the
	 * peer is paused for its budget, what waits is ours to serve */
	if (c->in.len == 0 || c->paused)
		mu__conn_timer(c, 0);
	else if (progressed || !uv_is_active((uv_handle_t *)&c->timer))
		mu__conn_timer(c, (uint64_t)(sc->s->opts.request_timeout * 1000.0));
}

static void on_timeout(mu__conn_t *c)
{
	sconn_t *sc = (sconn_t *)c;

	SLOG(sc->s, MU_LOG_WARN, "%s: request not completed within %g s, closing",
	     c->peer, sc->s->opts.request_timeout);
	mu__metric_add(sc->s->m_cut, "timeout", 1);
	mu__conn_close(c, -ETIMEDOUT);
}

static void on_close(mu__conn_t *c, int err)
{
	sconn_t *sc = (sconn_t *)c;

	mu__list_remove(&sc->node);
	if (sc->doomed)
		mu__list_remove(&sc->doomed_node);
	mu__store_peer_release(&sc->s->kv, &sc->peer);
	mu__conn_own(c, 0);
	mu__metric_add(sc->s->m_open, NULL, -1);
	mu__metric_set(sc->s->m_watches, NULL, (double)sc->s->kv.nwatches);
	if (err == -ENOBUFS)
		mu__metric_add(sc->s->m_cut, "budget", 1);
	if (err == 0)
		SLOG(sc->s, MU_LOG_INFO, "%s disconnected", c->peer);
}

static void on_free(mu__conn_t *c)
{
	mu__free(c);
}

static const mu__conn_ops_t conn_ops = {on_data, on_close, on_free, on_timeout, NULL, NULL, NULL};

static void on_connection(mu__listener_t *l, mu_stream_t *st)
{
	mu_store_server_t *s = l->data;
	sconn_t *sc;

	sc = mu__calloc(1, sizeof(*sc));
	if (sc == NULL) {
		mu__stream_close(st);
		return;
	}
	sc->s = s;
	sc->need = 1;
	sc->state = SC_DETECT;
	mu__store_peer_init(&sc->peer, MU_STORE_V1);
	mu__list_init(&sc->doomed_node);
	mu__list_insert_tail(&s->conns, &sc->node);
	mu__metric_add(s->m_conns, NULL, 1);
	mu__metric_add(s->m_open, NULL, 1); /* on_close takes it back, even on failure */
	if (mu__conn_accept(&sc->conn, &s->svc.loop, st, &conn_ops,
	                    s->lim.max_request + READ_CHUNK, s->scratch,
	                    sizeof(s->scratch), &s->budget) == 0)
		SLOG(s, MU_LOG_INFO, "New connection from %s", sc->conn.peer);
}

/* ---- service ---- */

static void service_stop_cb(mu__service_t *svc)
{
	mu_store_server_t *s = mu__container_of(svc, mu_store_server_t, svc);
	mu__list_t *it, *tmp;
	size_t n = 0, queued = 0;

	if (s->listener_init)
		mu__listener_close(&s->listener, NULL);
	mu__list_foreach_safe(it, tmp, &s->conns) {
		sconn_t *sc = mu__container_of(it, sconn_t, node);

		n++;
		queued += sc->conn.out_bytes;
		mu__conn_close(&sc->conn, 0);
	}
	if (svc->draining && svc->drain_late)
		SLOG(s, MU_LOG_WARN, "drain: deadline reached, closing %zu connection(s) with "
		     "%zu byte(s) of replies not yet written", n, queued);
	else if (svc->draining)
		SLOG(s, MU_LOG_INFO, "drain: every reply delivered");
}

/*
 * SIGTERM's drain: accept nothing more, read nothing more, and let what is
 * queued go out. Every request the store executed had its reply queued
 * whole at that moment (kv_send), so a client gets each reply whole or,
 * past the deadline, the connection closes; a waiter still waiting sees
 * the connection close.
 */
static void drain_start(mu__service_t *svc)
{
	mu_store_server_t *s = mu__container_of(svc, mu_store_server_t, svc);
	mu__list_t *it, *tmp;
	size_t n = 0;

	if (s->listener_init)
		mu__listener_close(&s->listener, NULL);
	mu__list_foreach_safe(it, tmp, &s->conns) {
		n++;
		/* no linger of its own: the service's deadline closes it */
		mu__conn_finish(&mu__container_of(it, sconn_t, node)->conn, 0, UINT64_MAX / 2);
	}
	SLOG(s, MU_LOG_INFO, "drain: stopped accepting; flushing replies to %zu connection(s)", n);
}

static size_t drain_tick(mu__service_t *svc)
{
	mu_store_server_t *s = mu__container_of(svc, mu_store_server_t, svc);
	mu__list_t *it, *tmp;
	size_t left = 0;

	mu__list_foreach_safe(it, tmp, &s->conns) {
		sconn_t *sc = mu__container_of(it, sconn_t, node);

		if (mu__conn_delivered(&sc->conn))
			mu__conn_close(&sc->conn, 0);
		else
			left++;
	}
	return left;
}

static const mu__service_drain_t drain_ops = {drain_start, drain_tick};

static void store_server_defaults(mu_store_server_opts_t *o)
{
	mu__store_limits_t l;

	mu__store_limits_init(&l);
	memset(o, 0, sizeof(*o));
	o->struct_size = sizeof(*o);
	o->host = "::";
	o->port = 29500;
	o->max_key_bytes = l.max_key;
	o->max_value_bytes = l.max_value;
	o->max_keys = l.max_keys;
	o->request_timeout = 60;
	mu_budget_init(&o->budget);
	o->max_watches = l.max_watches;
	o->max_watches_total = l.max_watches_total;
}

void mu_store_server_opts_init_size(mu_store_server_opts_t *o, size_t size)
{
	mu_store_server_opts_t d;

	store_server_defaults(&d);
	mu__opts_fill(o, size, &d, sizeof(d));
}

/* "::" without IPv6 on this host ends up on 0.0.0.0 (core/net.c): say so. */
static void note_v4_fallback(mu_store_server_t *s)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (strchr(s->host, ':') == NULL ||
	    getsockname(s->listener.fd, (struct sockaddr *)&ss, &len) != 0 ||
	    ss.ss_family != AF_INET)
		return;
	SLOG(s, MU_LOG_WARN, "IPv6 is unavailable here: listening on IPv4 only");
	snprintf(s->host, sizeof(s->host), "0.0.0.0");
}

static int store_listen(mu_store_server_t *s)
{
	mu__listen_opts_t lo = {s->host, s->opts.port, s->opts.port + 1, 1, 4096};
	int rc = mu__listener_start(&s->listener, &s->svc.loop, &lo, NULL, "store",
	                            on_connection, &s->port);

	if (rc != 0)
		return rc;
	s->listener_init = 1;
	s->listener.data = s;
	s->listener.allow = &s->allow;
	s->listener.m_refused = s->m_cut;
	if (rc == 0)
		note_v4_fallback(s);
	return rc;
}

static void metrics_init(mu_store_server_t *s, mu_metrics_t *m)
{
	s->m_open = mu__metric_family(m, MU_METRIC_GAUGE, "muster_store_connections_open",
	                              "Connections open now.", NULL, NULL, 0);
	s->m_conns = mu__metric_family(m, MU_METRIC_COUNTER, "muster_store_connections_total",
	                               "Connections accepted.", NULL, NULL, 0);
	s->m_cut = mu__metric_family(m, MU_METRIC_COUNTER, "muster_store_connections_refused_total",
	                             "Connections the store closed on a client, by reason: "
	                             "protocol, limit, timeout, budget.", "reason", NULL, 0);
	s->m_ops = mu__metric_family(m, MU_METRIC_HISTOGRAM, "muster_store_op_seconds",
	                             "Time to serve a request, by operation (a wait that "
	                             "blocks counts until it is queued).", "op",
	                             mu__metric_seconds, mu__metric_nseconds);
	s->m_keys = mu__metric_family(m, MU_METRIC_GAUGE, "muster_store_keys",
	                              "Keys stored now.", NULL, NULL, 0);
	s->m_watches = mu__metric_family(m, MU_METRIC_GAUGE, "muster_store_watches",
	                                 "v1 watches registered now.", NULL, NULL, 0);
	mu__metric_touch(s->m_open, NULL);
	mu__metric_touch(s->m_conns, NULL);
	mu__metric_touch(s->m_keys, NULL);
}

int mu_store_server_start(const mu_store_server_opts_t *uo, mu_store_server_t **out)
{
	mu_store_server_opts_t oo, *o = &oo;
	mu_store_server_t *s;
	int rc;

	*out = NULL;
	store_server_defaults(o);
	if (mu__opts_read(o, sizeof(*o), uo) != 0 || o->max_key_bytes == 0 || o->max_value_bytes == 0 ||
	    o->max_keys == 0 || o->request_timeout < 0 ||
	    o->max_value_bytes > ((size_t)1 << 40) || mu_budget_check(&o->budget) != 0 ||
	    o->max_watches == 0 || o->max_watches_total < o->max_watches)
		return MU_EARG;
	s = mu__calloc(1, sizeof(*s));
	if (s == NULL)
		return MU_ENOMEM;
	s->opts = *o;
	if (mu__allow_parse(o->allow, &s->allow, NULL, 0) != 0) {
		mu__free(s);
		return MU_EARG;
	}
	snprintf(s->host, sizeof(s->host), "%s", o->host ? o->host : "::");
	s->opts.host = s->host;
	s->lim.max_key = o->max_key_bytes;
	s->lim.max_value = o->max_value_bytes;
	s->lim.max_keys = o->max_keys;
	s->lim.max_request = o->max_value_bytes + (1u << 20);
	s->lim.max_watches = o->max_watches;
	s->lim.max_watches_total = o->max_watches_total;
	mu__budget_init(&s->budget, &o->budget, "store");
	metrics_init(s, o->metrics);
	mu__list_init(&s->conns);
	mu__list_init(&s->doomed);
	mu__store_init(&s->kv, kv_send, s);
	uv_mutex_init(&s->join_lock);
	rc = mu__service_init(&s->svc, service_stop_cb);
	if (rc == 0) {
		s->svc.drain = &drain_ops;
		rc = store_listen(s);
		if (rc == 0)
			rc = mu__service_start(&s->svc);
		if (rc != 0) {
			mu__service_join(&s->svc);
			mu__service_free(&s->svc);
		}
	}
	if (rc != 0) {
		mu__store_free(&s->kv);
		uv_mutex_destroy(&s->join_lock);
		mu__free(s);
		return rc;
	}
	SLOG(s, MU_LOG_INFO, "Bind to %s:%d", s->host, s->port);
	*out = s;
	return 0;
}

int mu_store_server_port(const mu_store_server_t *s)
{
	return s->port;
}

void mu_store_server_stop(mu_store_server_t *s)
{
	mu__service_stop(&s->svc);
}

void mu_store_server_drain(mu_store_server_t *s, double timeout)
{
	mu__service_drain(&s->svc, timeout <= 0 ? 0 : (uint64_t)(timeout * 1000.0));
}

void mu_store_server_wait(mu_store_server_t *s)
{
	uv_mutex_lock(&s->join_lock);
	if (!s->joined) {
		mu__service_join(&s->svc);
		s->joined = 1;
	}
	uv_mutex_unlock(&s->join_lock);
}

void mu_store_server_free(mu_store_server_t *s)
{
	if (s == NULL)
		return;
	mu_store_server_stop(s);
	mu_store_server_wait(s);
	mu__service_free(&s->svc);
	mu__store_free(&s->kv);
	uv_mutex_destroy(&s->join_lock);
	mu__free(s);
}
