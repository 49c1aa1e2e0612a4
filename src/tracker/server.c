/* SPDX-License-Identifier: MIT */
/*
 * The tracker service: libuv glue between sockets, the codec (proto.c) and
 * the matching (sched.c). One loop thread owns every connection; no peer can
 * block another (non-blocking I/O, per-connection buffers, output
 * backpressure) and no peer input can stop the process: a bad peer is logged
 * with the cause and disconnected.
 *
 * Connection states (conn_t.state):
 *   HANDSHAKE  waiting for the 4 magic bytes; the timeout timer runs.
 *   FRAMES     magic echoed; reading frames. The timer runs only while a
 *              frame is partly received, so idle servers are never cut.
 *   DRAINING   a STOP reply is queued; the socket closes once it is sent.
 *   CLOSING    uv_close() issued; freed when both handles have closed.
 */
#include <string.h>

#include "muster/tracker.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/endian_int.h"
#include "core/json_int.h"
#include "core/list_int.h"
#include "core/log_int.h"
#include "core/net_int.h"
#include "core/rand_int.h"
#include "core/service_int.h"
#include "tracker/proto_int.h"
#include "tracker/sched_int.h"

/* Stop reading from a peer whose unsent replies exceed this. */
#define WQ_HIGH (4u << 20)
#define WQ_LOW (1u << 20)
/* A server's merged UPDATE_INFO dict, as JSON text, stays under this. */
#define MAX_INFO_BYTES (64u << 10)
/* The largest reply we build (a SUMMARY of very many servers). */
#define MAX_REPLY_BYTES (64u << 20)
#define READ_CHUNK 65536

typedef enum {
	CONN_HANDSHAKE,
	CONN_FRAMES,
	CONN_DRAINING,
	CONN_CLOSING
} conn_state_t;

typedef struct {
	uv_tcp_t tcp;
	uv_timer_t timer;
	uv_shutdown_t shutdown;
	mu__list_t node; /* in mu_tracker_t.conns while not CLOSING */
	mu_tracker_t *t;
	conn_state_t state;
	int open_handles; /* freed when this drops to 0 */
	int paused;       /* reading stopped for backpressure */
	unsigned refused; /* PUTs and REQUESTs refused for a limit */
	mu__buf_t rbuf;
	cJSON *info; /* merged UPDATE_INFO dict; NULL before the first */
	mu__sched_owner_t owner;
	char ip[MU_ADDRSTRLEN];
	char name[MU_ADDRSTRLEN]; /* "ip:port" for log lines */
} conn_t;

typedef struct {
	uv_write_t req;
	char *data;
} wreq_t;

struct mu_tracker_s {
	mu__service_t svc;
	uv_tcp_t listener;
	mu__list_t conns;
	mu__sched_t sched;
	mu_tracker_opts_t opts;
	char host[256];
	int port;
	int listener_init; /* listener handle exists (and must be closed) */
	uv_mutex_t join_lock;
	int joined; /* under join_lock */
	char stop_key[64];
	char scratch[READ_CHUNK]; /* libuv reads land here, then go to rbuf */
};

#define TLOG(t, lvl, ...)                                                      \
	do {                                                                   \
		if ((lvl) <= MU_LOG_WARN || !(t)->opts.silent)                 \
			mu__log((lvl), "tracker", __VA_ARGS__);                \
	} while (0)

static void process(conn_t *c);
static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *buf);
static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* ---- closing ---- */

static void conn_handle_closed(uv_handle_t *h)
{
	conn_t *c = h->data;

	if (--c->open_handles > 0)
		return;
	mu__buf_free(&c->rbuf);
	cJSON_Delete(c->info);
	mu__free(c);
}

/* Forget the peer now (withdraw what it holds) and close its handles. */
static void conn_close(conn_t *c)
{
	if (c->state == CONN_CLOSING)
		return;
	c->state = CONN_CLOSING;
	mu__list_remove(&c->node);
	mu__sched_owner_release(&c->t->sched, &c->owner);
	TLOG(c->t, MU_LOG_INFO, "End session %s", c->name);
	uv_close((uv_handle_t *)&c->tcp, conn_handle_closed);
	uv_close((uv_handle_t *)&c->timer, conn_handle_closed);
}

static void conn_fail(conn_t *c, const char *what, int err)
{
	if (err != 0)
		TLOG(c->t, MU_LOG_WARN, "%s: %s (%s), closing", c->name, what,
		     mu_strerror(err));
	else
		TLOG(c->t, MU_LOG_WARN, "%s: %s, closing", c->name, what);
	conn_close(c);
}

/* ---- writing ---- */

static void write_cb(uv_write_t *req, int status)
{
	wreq_t *w = mu__container_of(req, wreq_t, req);
	conn_t *c = req->handle->data;

	mu__free(w->data);
	mu__free(w);
	if (status < 0 && status != UV_ECANCELED && c->state != CONN_CLOSING) {
		/* a peer that left while we answered is a disconnect, not a fault */
		if (status == UV_ECONNRESET || status == UV_EPIPE)
			conn_close(c);
		else
			conn_fail(c, "write failed", status);
		return;
	}
	if (c->paused && c->state == CONN_FRAMES &&
	    uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) < WQ_LOW) {
		c->paused = 0;
		TLOG(c->t, MU_LOG_DEBUG, "%s: reading again", c->name);
		uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
		process(c); /* frames that arrived before the pause */
	}
}

/* Queue the bytes of `out` (taken) on c. 0 or a libuv error. */
static int conn_send(conn_t *c, mu__buf_t *out)
{
	wreq_t *w;
	uv_buf_t b;
	size_t len;
	int rc;

	if (c->state == CONN_CLOSING) {
		mu__buf_free(out);
		return UV_ECANCELED;
	}
	w = mu__malloc(sizeof(*w));
	if (w == NULL) {
		mu__buf_free(out);
		return UV_ENOMEM;
	}
	w->data = mu__buf_take(out, &len);
	b = uv_buf_init(w->data, (unsigned)len);
	rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, write_cb);
	if (rc != 0) {
		mu__free(w->data);
		mu__free(w);
		return rc;
	}
	if (!c->paused &&
	    uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > WQ_HIGH) {
		/* The peer asks faster than it reads: stop reading until it
		 * catches up, rather than queue replies without bound. */
		c->paused = 1;
		uv_read_stop((uv_stream_t *)&c->tcp);
		TLOG(c->t, MU_LOG_DEBUG, "%s: slow reader, pausing", c->name);
	}
	return 0;
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

	if (c->state != CONN_FRAMES)
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
	if (rc == 0)
		TLOG(t, MU_LOG_INFO, "Offering matchkey %s at %s:%s to %s",
		     res->matchkey, res->addr, res->port, c->name);
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
	if ((c->refused & (c->refused - 1)) == 0)
		TLOG(c->t, MU_LOG_WARN, "%s: %s of key %s refused: %s (%u refused so far)",
		     c->name, m->code == MU_TC_PUT ? "PUT" : "REQUEST", m->key, why, c->refused);
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
	const char *addr = m->custom_addr != NULL ? m->custom_addr : c->ip;
	mu__buf_t port;
	int rc, refused = 0;

	mu__buf_init(&port, MU_TRACKER_MAX_STR + 2);
	rc = mu__json_dump(&port, m->port);
	if (rc == 0) {
		TLOG(c->t, MU_LOG_INFO, "Received key %s from %s: %s at %s:%s",
		     m->key, c->name, m->matchkey, addr, port.data);
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
	    !cJSON_ReplaceItemInArray(addr, 0, cJSON_CreateString(c->ip)))
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
	TLOG(c->t, MU_LOG_INFO, "Update info of %s: key %s", c->name,
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
		     c->name);
		return reply_int(c, MU_TC_FAIL);
	}
	TLOG(c->t, MU_LOG_INFO, "Stop requested by %s", c->name);
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
		TLOG(c->t, MU_LOG_WARN, "%s: bad message: %s, closing", c->name,
		     rc == MU_ENOMEM ? "out of memory" : why);
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
		     m.key, c->name, m.priority);
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
	if (rc != 0 && c->state != CONN_CLOSING)
		TLOG(c->t, MU_LOG_WARN, "%s: cannot serve code %d: %s, closing",
		     c->name, m.code, mu_strerror(rc));
	mu__tracker_msg_free(&m);
	return rc;
}

/* ---- reading ---- */

static void timer_cb(uv_timer_t *timer)
{
	conn_t *c = timer->data;

	conn_fail(c,
	          c->state == CONN_HANDSHAKE
	                  ? "no handshake within the timeout"
	                  : "frame not completed within the timeout",
	          0);
}

static void arm_timer(conn_t *c)
{
	uint64_t ms = (uint64_t)(c->t->opts.timeout * 1000.0);

	if (ms > 0)
		uv_timer_start(&c->timer, timer_cb, ms, 0);
}

static int do_handshake(conn_t *c)
{
	int32_t magic;
	mu__buf_t out;

	if (c->rbuf.len < 4)
		return 0;
	magic = mu_le32_get_signed(c->rbuf.data);
	if (magic != MU_TRACKER_MAGIC) {
		TLOG(c->t, MU_LOG_WARN,
		     "%s: invalid magic 0x%x (not a TVM tracker client), closing",
		     c->name, (unsigned)magic);
		return MU_EBADMAGIC;
	}
	mu__buf_init(&out, 4);
	mu__buf_append(&out, c->rbuf.data, 4); /* cannot fail: 4 <= max */
	mu__buf_consume(&c->rbuf, 4);
	uv_timer_stop(&c->timer);
	c->state = CONN_FRAMES;
	TLOG(c->t, MU_LOG_INFO, "Handshake with %s successful", c->name);
	return conn_send(c, &out);
}

/*
 * Consume what rbuf holds: the magic, then whole frames. Stops early when
 * the peer is closed, draining, or paused for backpressure.
 */
static void process(conn_t *c)
{
	size_t blen;
	int rc, progressed = 0;

	if (c->state == CONN_HANDSHAKE && (rc = do_handshake(c)) != 0) {
		conn_close(c);
		return;
	}
	while (c->state == CONN_FRAMES && !c->paused) {
		rc = mu__tracker_frame_peek(c->rbuf.data, c->rbuf.len,
		                            c->t->opts.max_frame, &blen);
		if (rc < 0) {
			TLOG(c->t, MU_LOG_WARN,
			     "%s: invalid message size %d (limit %u), closing",
			     c->name, (int)mu_le32_get_signed(c->rbuf.data),
			     c->t->opts.max_frame);
			conn_close(c);
			return;
		}
		if (rc == 0)
			break;
		if (handle_frame(c, c->rbuf.data + 4, blen) != 0) {
			conn_close(c);
			return;
		}
		if (c->state == CONN_CLOSING)
			return;
		mu__buf_consume(&c->rbuf, 4 + blen);
		progressed = 1;
	}
	if (c->state != CONN_FRAMES)
		return;
	/* The frame timer measures one partly received frame at a time. While
	 * paused, what waits in rbuf is ours to handle, not the peer's stall:
	 * write_cb re-arms the timer through process() when reading resumes. */
	if (c->rbuf.len == 0 || c->paused)
		uv_timer_stop(&c->timer);
	else if (progressed || !uv_is_active((uv_handle_t *)&c->timer))
		arm_timer(c);
}

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	conn_t *c = h->data;

	(void)hint;
	*buf = uv_buf_init(c->t->scratch, sizeof(c->t->scratch));
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	conn_t *c = s->data;
	int rc;

	if (nread == 0 || c->state == CONN_CLOSING)
		return;
	if (nread < 0) {
		if (nread != UV_EOF && nread != UV_ECONNRESET)
			TLOG(c->t, MU_LOG_WARN, "%s: read failed: %s", c->name,
			     uv_strerror((int)nread));
		conn_close(c);
		return;
	}
	if (c->state != CONN_HANDSHAKE && c->state != CONN_FRAMES)
		return; /* draining: whatever else it says is ignored */
	rc = mu__buf_append(&c->rbuf, buf->base, (size_t)nread);
	if (rc != 0) {
		conn_fail(c, "input buffer", rc);
		return;
	}
	process(c);
}

/* ---- accepting ---- */

static void on_connection(uv_stream_t *server, int status)
{
	mu_tracker_t *t = server->data;
	conn_t *c;
	int port = 0;

	if (status < 0) {
		TLOG(t, MU_LOG_WARN, "accept failed: %s", uv_strerror(status));
		return;
	}
	c = mu__calloc(1, sizeof(*c));
	if (c == NULL) {
		TLOG(t, MU_LOG_ERROR, "accept: out of memory");
		return;
	}
	c->t = t;
	c->tcp.data = c;
	c->timer.data = c;
	c->open_handles = 2;
	c->state = CONN_HANDSHAKE;
	mu__buf_init(&c->rbuf, 4 + (size_t)t->opts.max_frame + READ_CHUNK);
	mu__sched_owner_init(&c->owner);
	uv_tcp_init(&t->svc.loop, &c->tcp);
	uv_timer_init(&t->svc.loop, &c->timer);
	mu__list_insert_tail(&t->conns, &c->node);
	if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0 ||
	    mu__tcp_peer(&c->tcp, c->ip, sizeof(c->ip), &port) != 0) {
		conn_close(c); /* the peer left before we looked */
		return;
	}
	mu__hostport_text(c->ip, port, c->name, sizeof(c->name));
	uv_tcp_nodelay(&c->tcp, 1);
	TLOG(t, MU_LOG_INFO, "New session from %s", c->name);
	arm_timer(c);
	uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
}

/* ---- stopping ---- */

static void drained_cb(uv_shutdown_t *req, int status)
{
	(void)status;
	conn_close(req->data);
}

/* Loop thread, from mu__service_shutdown: close everything we own. */
static void service_stop_cb(mu__service_t *s)
{
	mu_tracker_t *t = mu__container_of(s, mu_tracker_t, svc);
	mu__list_t *it, *tmp;

	if (t->listener_init && !uv_is_closing((uv_handle_t *)&t->listener))
		uv_close((uv_handle_t *)&t->listener, NULL);
	mu__list_foreach_safe(it, tmp, &t->conns) {
		conn_t *c = mu__container_of(it, conn_t, node);

		if (c->state != CONN_DRAINING)
			conn_close(c);
	}
}

/* A STOP with the right key: let its reply go out, then stop everything. */
static void tracker_stop_by_peer(conn_t *c)
{
	c->state = CONN_DRAINING;
	uv_timer_stop(&c->timer);
	uv_read_stop((uv_stream_t *)&c->tcp);
	c->shutdown.data = c;
	if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, drained_cb) != 0)
		conn_close(c);
	mu__service_shutdown(&c->t->svc);
}

/* ---- public API ---- */

void mu_tracker_opts_init(mu_tracker_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->host = "0.0.0.0";
	o->port = 9190;
	o->port_end = 9199;
	o->reuse_addr = 1;
	o->timeout = 60;
	o->max_frame = MU_TRACKER_MAX_FRAME;
	o->max_keys = MU_SCHED_MAX_QUEUES;
	o->max_per_conn = MU_SCHED_MAX_PER_OWNER;
	o->max_keys_per_conn = MU_SCHED_MAX_KEYS_PER_OWNER;
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
	rc = uv_tcp_init(&t->svc.loop, &t->listener);
	if (rc != 0)
		return rc;
	t->listener_init = 1;
	t->listener.data = t;
	rc = mu__listen(&t->listener, &lo, &t->port);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&t->listener, lo.backlog,
		               on_connection);
	return rc;
}

int mu_tracker_start(const mu_tracker_opts_t *o, mu_tracker_t **out)
{
	mu_tracker_t *t;
	int rc;

	*out = NULL;
	if (o == NULL || o->timeout < 0 || o->max_frame == 0)
		return MU_EARG;
	t = mu__calloc(1, sizeof(*t));
	if (t == NULL)
		return MU_ENOMEM;
	t->opts = *o;
	snprintf(t->host, sizeof(t->host), "%s", o->host ? o->host : "0.0.0.0");
	t->opts.host = t->host;
	mu__list_init(&t->conns);
	mu__sched_init(&t->sched, deliver, t);
	t->sched.max_queues = o->max_keys ? o->max_keys : MU_SCHED_MAX_QUEUES;
	t->sched.max_per_owner = o->max_per_conn ? o->max_per_conn : MU_SCHED_MAX_PER_OWNER;
	t->sched.max_keys_per_owner =
		o->max_keys_per_conn ? o->max_keys_per_conn : MU_SCHED_MAX_KEYS_PER_OWNER;
	rc = mu__service_init(&t->svc, service_stop_cb);
	if (rc != 0) {
		mu__free(t);
		return rc;
	}
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
