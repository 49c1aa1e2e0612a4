/* SPDX-License-Identifier: MIT */
/*
 * The tracker service: libuv glue between connections (core/conn.c, which
 * also enforces each peer's budget), the codec (proto.c) and the matching
 * (sched.c). One loop thread owns every connection; no peer can block
 * another (non-blocking I/O, per-connection buffers, the budget) and no
 * peer input can stop the process: a bad peer is logged with the cause and
 * disconnected.
 *
 * Connection states (conn_t.state):
 *   HANDSHAKE  waiting for the 4 magic bytes; the timeout timer runs.
 *   FRAMES     magic echoed; reading frames. The timer runs only while a
 *              frame is partly received, so idle servers are never cut.
 *   DRAINING   a STOP reply is queued; the socket closes once it is sent
 *              (mu__conn_finish).
 *   closed     mu__conn_close called; freed by core/conn.c's on_free.
 */
#include <errno.h>
#include <string.h>

#include "muster/tracker.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/accept_int.h"
#include "core/conn_int.h"
#include "core/endian_int.h"
#include "core/json_int.h"
#include "core/list_int.h"
#include "core/log_int.h"
#include "core/metrics_int.h"
#include "core/net_int.h"
#include "core/opts_int.h"
#include "core/rand_int.h"
#include "core/service_int.h"
#include "tracker/proto_int.h"
#include "tracker/sched_int.h"

/* A server's merged UPDATE_INFO dict, as JSON text, stays under this. */
#define MAX_INFO_BYTES (64u << 10)
/* The largest reply we build (a SUMMARY of very many servers). */
#define MAX_REPLY_BYTES (64u << 20)
#define READ_CHUNK 65536
/* A STOP's reply gets this long to reach its sender. */
#define STOP_LINGER_MS 1000

typedef enum {
	CONN_HANDSHAKE,
	CONN_FRAMES,
	CONN_DRAINING
} conn_state_t;

typedef struct {
	mu__conn_t conn;  /* first: core/conn.c's callbacks get this */
	mu__list_t node;  /* in mu_tracker_t.conns until closed */
	mu_tracker_t *t;
	conn_state_t state;
	int logged;       /* why it closes is logged already */
	unsigned refused; /* PUTs and REQUESTs refused for a limit */
	cJSON *info; /* merged UPDATE_INFO dict; NULL before the first */
	mu__sched_owner_t owner;
} conn_t;

struct mu_tracker_s {
	mu__service_t svc;
	mu__listener_t listener;
	mu__allow_t allow;       /* opts.allow, parsed */
	mu__list_t conns;
	mu__sched_t sched;
	mu__budget_t budget;
	mu_tracker_opts_t opts;
	char host[256];
	int port;
	int listener_init; /* listener handle exists (and must be closed) */
	uv_mutex_t join_lock;
	int joined; /* under join_lock */
	char stop_key[64];
	/* docs/metrics.md; each NULL without a registry */
	mu__metric_t *m_open, *m_conns, *m_cut, *m_grants, *m_wait, *m_waiting, *m_free,
		*m_refused;
	char scratch[READ_CHUNK]; /* libuv reads land here, then go to conn.in */
};

#define TLOG(t, lvl, ...)                                                      \
	do {                                                                   \
		if ((lvl) <= MU_LOG_WARN || !(t)->opts.silent)                 \
			mu__log((lvl), "tracker", __VA_ARGS__);                \
	} while (0)

/* ---- closing ---- */

/* Close c, the reason (if any) logged already. */
static void conn_close(conn_t *c)
{
	c->logged = 1;
	mu__conn_close(&c->conn, 0);
}

static void on_close(mu__conn_t *cc, int err)
{
	conn_t *c = (conn_t *)cc;

	/* what conn.c saw (a read or write error, an oversized buffer); a
	 * peer cut off for its budget is logged there */
	if (err != 0 && !c->logged && err != -ENOBUFS)
		TLOG(c->t, MU_LOG_WARN, "%s: %s, closing", cc->peer, mu_strerror(err));
	mu__metric_add(c->t->m_open, NULL, -1);
	if (err == -ENOBUFS)
		mu__metric_add(c->t->m_cut, "budget", 1);
	mu__list_remove(&c->node);
	mu__sched_owner_release(&c->t->sched, &c->owner);
	TLOG(c->t, MU_LOG_INFO, "End session %s", cc->peer);
}

static void on_free(mu__conn_t *cc)
{
	conn_t *c = (conn_t *)cc;

	cJSON_Delete(c->info);
	mu__free(c);
}

/* ---- writing ---- */

static void free_cb(void *p)
{
	mu__free(p);
}

/* Queue the bytes of `out` (taken) on c: copied when small (conn.c
 * gathers those), else handed over. 0 or an error. */
static int conn_send(conn_t *c, mu__buf_t *out)
{
	size_t len;
	char *data = mu__buf_take(out, &len);
	int rc;

	if (data == NULL)
		return MU_ENOMEM;
	if (len <= 1024) {
		rc = mu__conn_send(&c->conn, data, len, NULL, 0, NULL, NULL);
		mu__free(data);
		return rc;
	}
	rc = mu__conn_send(&c->conn, NULL, 0, data, len, free_cb, data);
	if (rc != 0)
		mu__free(data);
	return rc;
}

static int reply_json(conn_t *c, const cJSON *v)
{
	mu__buf_t out;
	int rc;

	mu__buf_init(&out, MAX_REPLY_BYTES);
	rc = mu__tracker_frame_json(&out, v);
	if (rc != 0) {
		mu__buf_free(&out);
		return rc;
	}
	return conn_send(c, &out);
}

static int reply_int(conn_t *c, int v)
{
	mu__buf_t out;
	int rc;

	mu__buf_init(&out, 64);
	rc = mu__tracker_frame_int(&out, v);
	if (rc != 0) {
		mu__buf_free(&out);
		return rc;
	}
	return conn_send(c, &out);
}

/* ---- the scheduler's delivery ---- */

static int deliver(void *ud, mu__sched_owner_t *o, const mu__sched_res_t *res)
{
	mu_tracker_t *t = ud;
	conn_t *c = mu__container_of(o, conn_t, owner);
	cJSON *reply = cJSON_CreateArray(), *v = cJSON_CreateArray();
	int rc = MU_ENOMEM;

	if (c->state != CONN_FRAMES || c->conn.closing)
		goto out; /* the requester is going away: a failed delivery */
	if (reply == NULL || v == NULL ||
	    !cJSON_AddItemToArray(reply, cJSON_CreateNumber(MU_TC_SUCCESS)) ||
	    !cJSON_AddItemToArray(reply, v)) {
		cJSON_Delete(v);
		goto out;
	}
	if (!cJSON_AddItemToArray(v, cJSON_CreateString(res->addr)) ||
	    !cJSON_AddItemToArray(v, cJSON_CreateRaw(res->port)) ||
	    !cJSON_AddItemToArray(v, cJSON_CreateString(res->matchkey)))
		goto out;
	rc = reply_json(c, reply);
	if (rc == 0) {
		TLOG(t, MU_LOG_INFO, "Offering matchkey %s at %s:%s to %s",
		     res->matchkey, res->addr, res->port, c->conn.peer);
		mu__metric_add(t->m_grants, mu__sched_res_key(res), 1);
		mu__metric_observe(t->m_wait, mu__sched_res_key(res), t->sched.waited_ms / 1000.0);
	}
out:
	cJSON_Delete(reply);
	return rc;
}

/* ---- message handlers ---- */

static void tracker_stop_by_peer(conn_t *c);

/*
 * The scheduler refused a PUT or REQUEST for one of its limits; nothing
 * changed. Answer with TVM's FAIL code and keep the peer: PUT gets -1 (as
 * STOP with a wrong key does), REQUEST [-1, "why"], which TVM's
 * TrackerSession.request reports ("Invalid return value [-1, ...]") and a
 * muster client returns as MU_EFAIL. Logged on a peer's 1st, 2nd, 4th,
 * 8th... refusal, so a flood of refused messages does not flood the log.
 */
static int refuse(conn_t *c, const mu__tracker_msg_t *m)
{
	cJSON *reply;
	char why[200];
	int rc = MU_ENOMEM;

	mu__sched_refusal(&c->t->sched, why, sizeof(why));
	c->refused++;
	mu__metric_add(c->t->m_refused, m->code == MU_TC_PUT ? "put" : "request", 1);
	if ((c->refused & (c->refused - 1)) == 0)
		TLOG(c->t, MU_LOG_WARN, "%s: %s of key %s refused: %s (%u refused so far)",
		     c->conn.peer, m->code == MU_TC_PUT ? "PUT" : "REQUEST", m->key, why, c->refused);
	if (m->code == MU_TC_PUT)
		return reply_int(c, MU_TC_FAIL);
	reply = cJSON_CreateArray();
	if (reply != NULL && cJSON_AddItemToArray(reply, cJSON_CreateNumber(MU_TC_FAIL)) &&
	    cJSON_AddItemToArray(reply, cJSON_CreateString(why)))
		rc = reply_json(c, reply);
	cJSON_Delete(reply);
	return rc;
}

static int on_put(conn_t *c, const mu__tracker_msg_t *m)
{
	const char *addr = m->custom_addr != NULL ? m->custom_addr : c->conn.ip;
	mu__buf_t port;
	int rc, refused = 0;

	mu__buf_init(&port, MU_TRACKER_MAX_STR + 2);
	rc = mu__json_dump(&port, m->port);
	if (rc == 0) {
		TLOG(c->t, MU_LOG_INFO, "Received key %s from %s: %s at %s:%s",
		     m->key, c->conn.peer, m->matchkey, addr, port.data);
		rc = mu__sched_put(&c->t->sched, &c->owner, m->key, addr,
		                   port.data, m->matchkey);
		refused = rc == MU_ETOOBIG;
	}
	mu__buf_free(&port);
	if (refused)
		return refuse(c, m);
	return rc != 0 ? rc : reply_int(c, MU_TC_SUCCESS);
}

static int merge_info(conn_t *c, cJSON *info)
{
	cJSON *item, *addr, *old;
	mu__buf_t text;
	int rc;

	if (c->info == NULL && (c->info = cJSON_CreateObject()) == NULL)
		return MU_ENOMEM;
	/* dict.update(): a field seen before keeps its place, new ones go last */
	while ((item = info->child) != NULL) {
		cJSON_DetachItemViaPointer(info, item);
		old = cJSON_GetObjectItemCaseSensitive(c->info, item->string);
		if (old != NULL)
			cJSON_ReplaceItemViaPointer(c->info, old, item);
		else if (!cJSON_AddItemToObject(c->info, item->string, item)) {
			cJSON_Delete(item);
			return MU_ENOMEM;
		}
	}
	addr = cJSON_GetObjectItemCaseSensitive(c->info, "addr");
	if (cJSON_IsNull(cJSON_GetArrayItem(addr, 0)) &&
	    !cJSON_ReplaceItemInArray(addr, 0, cJSON_CreateString(c->conn.ip)))
		return MU_ENOMEM;
	mu__buf_init(&text, MAX_INFO_BYTES);
	rc = mu__json_dump(&text, c->info);
	mu__buf_free(&text);
	return rc;
}

static int on_update_info(conn_t *c, const mu__tracker_msg_t *m)
{
	const cJSON *key;
	int rc = merge_info(c, m->info);

	if (rc != 0)
		return rc;
	key = cJSON_GetObjectItemCaseSensitive(c->info, "key");
	TLOG(c->t, MU_LOG_INFO, "Update info of %s: key %s", c->conn.peer,
	     cJSON_IsString(key) ? key->valuestring : "(none)");
	return reply_int(c, MU_TC_SUCCESS);
}

static int is_server_info(const cJSON *info)
{
	const cJSON *key = cJSON_GetObjectItemCaseSensitive(info, "key");

	return cJSON_IsString(key) && strncmp(key->valuestring, "server", 6) == 0;
}

static int on_summary(conn_t *c)
{
	cJSON *reply = cJSON_CreateArray(), *st = cJSON_CreateObject();
	cJSON *qi = cJSON_AddObjectToObject(st, "queue_info");
	cJSON *si = cJSON_AddArrayToObject(st, "server_info");
	mu__list_t *it;
	int rc = MU_ENOMEM;

	if (reply == NULL || st == NULL || qi == NULL || si == NULL ||
	    !cJSON_AddItemToArray(reply, cJSON_CreateNumber(MU_TC_SUCCESS)) ||
	    !cJSON_AddItemToArray(reply, st)) {
		cJSON_Delete(st);
		goto out;
	}
	st = NULL;
	if (mu__sched_queue_info(&c->t->sched, qi) != 0)
		goto out;
	mu__list_foreach(it, &c->t->conns) {
		conn_t *o = mu__container_of(it, conn_t, node);

		/* A reference, not a copy: the dict is only read while we dump. */
		if (is_server_info(o->info) &&
		    !cJSON_AddItemToArray(si, cJSON_CreateObjectReference(o->info->child)))
			goto out;
	}
	rc = reply_json(c, reply);
out:
	cJSON_Delete(reply);
	return rc;
}

static int on_pending(conn_t *c)
{
	cJSON *arr = cJSON_CreateArray();
	int rc = arr != NULL ? mu__sched_pending(&c->owner, arr) : MU_ENOMEM;

	if (rc == 0)
		rc = reply_json(c, arr);
	cJSON_Delete(arr);
	return rc;
}

static int on_stop(conn_t *c, const mu__tracker_msg_t *m)
{
	int rc;

	if (!cJSON_IsString(m->stop_key) ||
	    strcmp(m->stop_key->valuestring, c->t->stop_key) != 0) {
		TLOG(c->t, MU_LOG_WARN, "%s: STOP with a wrong key, ignored",
		     c->conn.peer);
		return reply_int(c, MU_TC_FAIL);
	}
	TLOG(c->t, MU_LOG_INFO, "Stop requested by %s", c->conn.peer);
	rc = reply_int(c, MU_TC_SUCCESS);
	if (rc == 0)
		tracker_stop_by_peer(c);
	return rc;
}

/* Handle one frame body. Non-zero means the peer must be disconnected. */
static int handle_frame(conn_t *c, const char *body, size_t len)
{
	mu__tracker_msg_t m;
	char why[160];
	int rc = mu__tracker_msg_parse(body, len, &m, why, sizeof(why));

	if (rc != 0) {
		TLOG(c->t, MU_LOG_WARN, "%s: bad message: %s, closing", c->conn.peer,
		     rc == MU_ENOMEM ? "out of memory" : why);
		mu__metric_add(c->t->m_cut, "protocol", 1);
		return rc;
	}
	switch (m.code) {
	case MU_TC_PING:
		rc = reply_int(c, MU_TC_SUCCESS);
		break;
	case MU_TC_STOP:
		rc = on_stop(c, &m);
		break;
	case MU_TC_PUT:
		rc = on_put(c, &m);
		break;
	case MU_TC_REQUEST:
		TLOG(c->t, MU_LOG_INFO, "Request using key %s from %s, priority %g",
		     m.key, c->conn.peer, m.priority);
		rc = mu__sched_request(&c->t->sched, &c->owner, m.key, m.priority);
		if (rc == MU_ETOOBIG)
			rc = refuse(c, &m);
		break;
	case MU_TC_UPDATE_INFO:
		rc = on_update_info(c, &m);
		break;
	case MU_TC_SUMMARY:
		rc = on_summary(c);
		break;
	default: /* GET_PENDING_MATCHKEYS: the parser let nothing else through */
		rc = on_pending(c);
		break;
	}
	if (rc != 0 && !c->conn.closing && rc != -ENOBUFS)
		TLOG(c->t, MU_LOG_WARN, "%s: cannot serve code %d: %s, closing",
		     c->conn.peer, m.code, mu_strerror(rc));
	mu__tracker_msg_free(&m);
	return rc;
}

/* ---- reading ---- */

static void on_timeout(mu__conn_t *cc)
{
	conn_t *c = (conn_t *)cc;

	TLOG(c->t, MU_LOG_WARN, "%s: %s, closing", cc->peer,
	     c->state == CONN_HANDSHAKE ? "no handshake within the timeout"
	                                : "frame not completed within the timeout");
	mu__metric_add(c->t->m_cut, "timeout", 1);
	conn_close(c);
}

static void arm_timer(conn_t *c)
{
	uint64_t ms = (uint64_t)(c->t->opts.timeout * 1000.0);

	if (ms > 0)
		mu__conn_timer(&c->conn, ms);
}

static int do_handshake(conn_t *c)
{
	mu__buf_t *in = &c->conn.in;
	int32_t magic;
	mu__buf_t out;

	if (in->len < 4)
		return 0;
	magic = mu_le32_get_signed(in->data);
	if (magic != MU_TRACKER_MAGIC) {
		TLOG(c->t, MU_LOG_WARN,
		     "%s: invalid magic 0x%x (not a TVM tracker client), closing",
		     c->conn.peer, (unsigned)magic);
		mu__metric_add(c->t->m_cut, "protocol", 1);
		return MU_EBADMAGIC;
	}
	mu__buf_init(&out, 4);
	mu__buf_append(&out, in->data, 4); /* cannot fail: 4 <= max */
	mu__buf_consume(in, 4);
	mu__conn_timer(&c->conn, 0);
	c->state = CONN_FRAMES;
	TLOG(c->t, MU_LOG_INFO, "Handshake with %s successful", c->conn.peer);
	return conn_send(c, &out);
}

/*
 * Consume what conn.in holds: the magic, then whole frames. Stops early
 * when the peer is closed, draining, or paused for its budget.
 */
static void on_data(mu__conn_t *cc)
{
	conn_t *c = (conn_t *)cc;
	mu__buf_t *in = &cc->in;
	size_t blen;
	int rc, progressed = 0;

	if (c->state == CONN_HANDSHAKE && (rc = do_handshake(c)) != 0) {
		conn_close(c);
		return;
	}
	while (c->state == CONN_FRAMES && !cc->paused && !cc->closing) {
		rc = mu__tracker_frame_peek(in->data, in->len, c->t->opts.max_frame, &blen);
		if (rc < 0) {
			TLOG(c->t, MU_LOG_WARN,
			     "%s: invalid message size %d (limit %u), closing",
			     cc->peer, (int)mu_le32_get_signed(in->data),
			     c->t->opts.max_frame);
			mu__metric_add(c->t->m_cut, "limit", 1);
			conn_close(c);
			return;
		}
		if (rc == 0)
			break;
		if (handle_frame(c, in->data + 4, blen) != 0) {
			conn_close(c);
			return;
		}
		if (cc->closing)
			return;
		mu__buf_consume(in, 4 + blen);
		progressed = 1;
		if (mu__conn_yield(cc))
			break;
	}
	if (c->state != CONN_FRAMES || cc->closing)
		return;
	/* The frame timer measures one partly received frame at a time. While
	 * paused, what waits in the buffer is ours to handle, not the peer's
	 * stall: conn.c calls on_data again when the peer is read again. */
	if (in->len == 0 || cc->paused)
		mu__conn_timer(cc, 0);
	else if (progressed || !uv_is_active((uv_handle_t *)&cc->timer))
		arm_timer(c);
}

static const mu__conn_ops_t conn_ops = {on_data, on_close, on_free, on_timeout, NULL, NULL, NULL};

/* ---- accepting ---- */

static void on_connection(mu__listener_t *l, mu_stream_t *st)
{
	mu_tracker_t *t = l->data;
	conn_t *c;

	c = mu__calloc(1, sizeof(*c));
	if (c == NULL) {
		TLOG(t, MU_LOG_ERROR, "accept: out of memory");
		mu__stream_close(st);
		return;
	}
	c->t = t;
	c->state = CONN_HANDSHAKE;
	c->logged = 1; /* a peer that left before we looked is no news */
	mu__sched_owner_init(&c->owner);
	mu__list_insert_tail(&t->conns, &c->node);
	mu__metric_add(t->m_conns, NULL, 1);
	mu__metric_add(t->m_open, NULL, 1); /* on_close takes it back, even on failure */
	if (mu__conn_accept(&c->conn, &t->svc.loop, st, &conn_ops,
	                    4 + (size_t)t->opts.max_frame + READ_CHUNK, t->scratch,
	                    sizeof(t->scratch), &t->budget) != 0)
		return;
	c->logged = 0;
	TLOG(t, MU_LOG_INFO, "New session from %s", c->conn.peer);
	arm_timer(c);
}

/* ---- stopping ---- */

/* Loop thread, from mu__service_shutdown: close everything we own. */
static void service_stop_cb(mu__service_t *s)
{
	mu_tracker_t *t = mu__container_of(s, mu_tracker_t, svc);
	mu__list_t *it, *tmp;
	size_t n = 0, queued = 0;

	if (t->listener_init)
		mu__listener_close(&t->listener, NULL);
	mu__list_foreach_safe(it, tmp, &t->conns) {
		conn_t *c = mu__container_of(it, conn_t, node);

		n++;
		queued += c->conn.out_bytes;
		if (c->state != CONN_DRAINING || s->draining)
			conn_close(c);
	}
	if (s->draining && s->drain_late)
		TLOG(t, MU_LOG_WARN, "drain: deadline reached, closing %zu connection(s) with "
		     "%zu byte(s) of replies not yet written", n, queued);
	else if (s->draining)
		TLOG(t, MU_LOG_INFO, "drain: every reply delivered");
}

/*
 * SIGTERM's drain: accept nothing more, read nothing more, and let what is
 * queued go out. A grant is queued whole when it is made (one write), so
 * a requester either gets it whole or, past the deadline, not at all; a
 * registered server's devices simply go when its connection closes.
 */
static void drain_start(mu__service_t *s)
{
	mu_tracker_t *t = mu__container_of(s, mu_tracker_t, svc);
	mu__list_t *it, *tmp;
	size_t n = 0;

	if (t->listener_init)
		mu__listener_close(&t->listener, NULL);
	mu__list_foreach_safe(it, tmp, &t->conns) {
		conn_t *c = mu__container_of(it, conn_t, node);

		n++;
		c->state = CONN_DRAINING; /* deliver() grants nothing more */
		c->logged = 1;
		/* no linger of its own: the service's deadline closes it */
		mu__conn_finish(&c->conn, 0, UINT64_MAX / 2);
	}
	TLOG(t, MU_LOG_INFO, "drain: stopped accepting; flushing replies to %zu connection(s)", n);
}

static size_t drain_tick(mu__service_t *s)
{
	mu_tracker_t *t = mu__container_of(s, mu_tracker_t, svc);
	mu__list_t *it, *tmp;
	size_t left = 0;

	mu__list_foreach_safe(it, tmp, &t->conns) {
		conn_t *c = mu__container_of(it, conn_t, node);

		if (mu__conn_delivered(&c->conn))
			conn_close(c);
		else
			left++;
	}
	return left;
}

static const mu__service_drain_t drain_ops = {drain_start, drain_tick};

/* A STOP with the right key: let its reply go out, then stop everything. */
static void tracker_stop_by_peer(conn_t *c)
{
	c->state = CONN_DRAINING;
	mu__conn_finish(&c->conn, 0, STOP_LINGER_MS);
	mu__service_shutdown(&c->t->svc);
}

/* ---- public API ---- */

static void tracker_defaults(mu_tracker_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->struct_size = sizeof(*o);
	o->host = "0.0.0.0";
	o->port = 9190;
	o->port_end = 9199;
	o->reuse_addr = 1;
	o->timeout = 60;
	o->max_frame = MU_TRACKER_MAX_FRAME;
	o->max_keys = MU_SCHED_MAX_QUEUES;
	o->max_per_conn = MU_SCHED_MAX_PER_OWNER;
	o->max_keys_per_conn = MU_SCHED_MAX_KEYS_PER_OWNER;
	mu_budget_init(&o->budget);
}

void mu_tracker_opts_init_size(mu_tracker_opts_t *o, size_t size)
{
	mu_tracker_opts_t d;

	tracker_defaults(&d);
	mu__opts_fill(o, size, &d, sizeof(d));
}

static int tracker_listen(mu_tracker_t *t)
{
	mu__listen_opts_t lo;
	int rc;

	lo.host = t->host;
	lo.port = t->opts.port;
	lo.port_end = t->opts.port_end;
	lo.reuse_addr = t->opts.reuse_addr;
	lo.backlog = 1024;
	rc = mu__listener_start(&t->listener, &t->svc.loop, &lo, NULL, "tracker",
	                        on_connection, &t->port);
	if (rc != 0)
		return rc;
	t->listener_init = 1;
	t->listener.data = t;
	t->listener.allow = &t->allow;
	t->listener.m_refused = t->m_cut;
	return 0;
}

/* The scheduler's queues changed: the per-key gauges follow. */
static void observe_queue(void *ud, const char *key, size_t nfree, size_t nwaiting)
{
	mu_tracker_t *t = ud;

	mu__metric_set(t->m_free, key, (double)nfree);
	mu__metric_set(t->m_waiting, key, (double)nwaiting);
}

static void metrics_init(mu_tracker_t *t, mu_metrics_t *m)
{
	t->m_open = mu__metric_family(m, MU_METRIC_GAUGE, "muster_tracker_connections_open",
	                              "Connections open now.", NULL, NULL, 0);
	t->m_conns = mu__metric_family(m, MU_METRIC_COUNTER, "muster_tracker_connections_total",
	                               "Connections accepted.", NULL, NULL, 0);
	t->m_cut = mu__metric_family(m, MU_METRIC_COUNTER,
	                             "muster_tracker_connections_refused_total",
	                             "Connections the tracker closed on a peer, by reason: "
	                             "protocol, limit, timeout, budget.", "reason", NULL, 0);
	t->m_grants = mu__metric_family(m, MU_METRIC_COUNTER, "muster_tracker_grants_total",
	                                "Devices granted to requests, by device key.", "key",
	                                NULL, 0);
	t->m_wait = mu__metric_family(m, MU_METRIC_HISTOGRAM, "muster_tracker_wait_seconds",
	                              "How long granted requests waited, by device key.", "key",
	                              mu__metric_seconds, mu__metric_nseconds);
	t->m_waiting = mu__metric_family(m, MU_METRIC_GAUGE, "muster_tracker_queue_depth",
	                                 "Requests waiting for a device, by device key.", "key",
	                                 NULL, 0);
	t->m_free = mu__metric_family(m, MU_METRIC_GAUGE, "muster_tracker_free_devices",
	                              "Devices registered and free, by device key.", "key",
	                              NULL, 0);
	t->m_refused = mu__metric_family(m, MU_METRIC_COUNTER, "muster_tracker_refused_total",
	                                 "PUTs and REQUESTs refused for a limit, by op.", "op",
	                                 NULL, 0);
	mu__metric_touch(t->m_open, NULL);
	mu__metric_touch(t->m_conns, NULL);
	if (m != NULL)
		t->sched.observe = observe_queue;
}

int mu_tracker_start(const mu_tracker_opts_t *uo, mu_tracker_t **out)
{
	mu_tracker_opts_t oo, *o = &oo;
	mu_tracker_t *t;
	int rc;

	*out = NULL;
	tracker_defaults(o);
	if (mu__opts_read(o, sizeof(*o), uo) != 0 || o->timeout < 0 || o->max_frame == 0 || mu_budget_check(&o->budget) != 0)
		return MU_EARG;
	t = mu__calloc(1, sizeof(*t));
	if (t == NULL)
		return MU_ENOMEM;
	t->opts = *o;
	if (mu__allow_parse(o->allow, &t->allow, NULL, 0) != 0) {
		mu__free(t);
		return MU_EARG;
	}
	snprintf(t->host, sizeof(t->host), "%s", o->host ? o->host : "0.0.0.0");
	t->opts.host = t->host;
	mu__list_init(&t->conns);
	mu__sched_init(&t->sched, deliver, t);
	mu__budget_init(&t->budget, &t->opts.budget, "tracker");
	metrics_init(t, o->metrics);
	t->sched.max_queues = o->max_keys ? o->max_keys : MU_SCHED_MAX_QUEUES;
	t->sched.max_per_owner = o->max_per_conn ? o->max_per_conn : MU_SCHED_MAX_PER_OWNER;
	t->sched.max_keys_per_owner =
		o->max_keys_per_conn ? o->max_keys_per_conn : MU_SCHED_MAX_KEYS_PER_OWNER;
	rc = mu__service_init(&t->svc, service_stop_cb);
	if (rc != 0) {
		mu__free(t);
		return rc;
	}
	t->svc.drain = &drain_ops;
	uv_mutex_init(&t->join_lock);
	rc = mu__random_key("tracker", t->stop_key, sizeof(t->stop_key));
	if (rc == 0)
		rc = tracker_listen(t);
	if (rc == 0)
		rc = mu__service_start(&t->svc);
	if (rc != 0) {
		mu__service_join(&t->svc); /* closes the listener, if opened */
		mu__service_free(&t->svc);
		mu__sched_free(&t->sched);
		mu__free(t);
		return rc;
	}
	TLOG(t, MU_LOG_INFO, "Bind to %s:%d", t->host, t->port);
	*out = t;
	return 0;
}

int mu_tracker_port(const mu_tracker_t *t)
{
	return t->port;
}

const char *mu_tracker_stop_key(const mu_tracker_t *t)
{
	return t->stop_key;
}

void mu_tracker_wait(mu_tracker_t *t)
{
	/* Several threads may wait; the first joins, the others block on the
	 * lock until it has. */
	uv_mutex_lock(&t->join_lock);
	if (!t->joined) {
		mu__service_join(&t->svc);
		t->joined = 1;
	}
	uv_mutex_unlock(&t->join_lock);
}

void mu_tracker_stop(mu_tracker_t *t)
{
	mu__service_stop(&t->svc); /* a no-op once the loop has stopped */
	mu_tracker_wait(t);
}

void mu_tracker_drain(mu_tracker_t *t, double timeout)
{
	mu__service_drain(&t->svc, timeout <= 0 ? 0 : (uint64_t)(timeout * 1000.0));
}

void mu_tracker_free(mu_tracker_t *t)
{
	if (t == NULL)
		return;
	mu_tracker_stop(t);
	mu__service_free(&t->svc);
	uv_mutex_destroy(&t->join_lock);
	mu__sched_free(&t->sched);
	mu__free(t);
}
