/* SPDX-License-Identifier: MIT */
/*
 * One peer of the tracker, on the loop thread: the magic handshake, frames
 * fed to the codec (proto.c), the handlers, replies queued on core/conn.c
 * (which enforces the peer's budget), and the scheduler's grants delivered.
 * No peer input can stop the process: a bad peer is logged with the cause
 * and disconnected. Its states are in tracker/server_int.h; the service
 * around it is server.c.
 */
#include <errno.h>
#include <string.h>

#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/endian_int.h"
#include "core/json_int.h"
#include "tracker/proto_int.h"
#include "tracker/server_int.h"

/* A server's merged UPDATE_INFO dict, as JSON text, stays under this. */
#define MAX_INFO_BYTES (64u << 10)
/* The largest reply we build (a SUMMARY of very many servers). */
#define MAX_REPLY_BYTES (64u << 20)

/* ---- closing ---- */

void mu__tracker_conn_close(mu__tracker_conn_t *c)
{
	c->logged = 1;
	mu__conn_close(&c->conn, 0);
}

static void on_close(mu__conn_t *cc, int err)
{
	mu__tracker_conn_t *c = (mu__tracker_conn_t *)cc;

	/* what conn.c saw (a read or write error, an oversized buffer); a
	 * peer cut off for its budget is logged there */
	if (err != 0 && !c->logged && err != -ENOBUFS)
		MU__TLOG(c->t, MU_LOG_WARN, "%s: %s, closing", cc->peer, mu_strerror(err));
	mu__metric_add(c->t->m_open, NULL, -1);
	if (err == -ENOBUFS)
		mu__metric_add(c->t->m_cut, "budget", 1);
	mu__list_remove(&c->node);
	mu__sched_owner_release(&c->t->sched, &c->owner);
	MU__TLOG(c->t, MU_LOG_INFO, "End session %s", cc->peer);
}

static void on_free(mu__conn_t *cc)
{
	mu__tracker_conn_t *c = (mu__tracker_conn_t *)cc;

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
static int conn_send(mu__tracker_conn_t *c, mu__buf_t *out)
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

static int reply_json(mu__tracker_conn_t *c, const cJSON *v)
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

static int reply_int(mu__tracker_conn_t *c, int v)
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

int mu__tracker_deliver(void *ud, mu__sched_owner_t *o, const mu__sched_res_t *res)
{
	mu_tracker_t *t = ud;
	mu__tracker_conn_t *c = mu__container_of(o, mu__tracker_conn_t, owner);
	cJSON *reply = cJSON_CreateArray(), *v = cJSON_CreateArray();
	int rc = MU_ENOMEM;

	if (c->state != MU__TRACKER_FRAMES || c->conn.closing)
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
		MU__TLOG(t, MU_LOG_INFO, "Offering matchkey %s at %s:%s to %s",
		     res->matchkey, res->addr, res->port, c->conn.peer);
		mu__metric_add(t->m_grants, mu__sched_res_key(res), 1);
		mu__metric_observe(t->m_wait, mu__sched_res_key(res), t->sched.waited_ms / 1000.0);
	}
out:
	cJSON_Delete(reply);
	return rc;
}

/* ---- message handlers ---- */

/*
 * The scheduler refused a PUT or REQUEST for one of its limits; nothing
 * changed. Answer with TVM's FAIL code and keep the peer: PUT gets -1 (as
 * STOP with a wrong key does), REQUEST [-1, "why"], which TVM's
 * TrackerSession.request reports ("Invalid return value [-1, ...]") and a
 * muster client returns as MU_EFAIL. Logged on a peer's 1st, 2nd, 4th,
 * 8th... refusal, so a flood of refused messages does not flood the log.
 */
static int refuse(mu__tracker_conn_t *c, const mu__tracker_msg_t *m)
{
	cJSON *reply;
	char why[200];
	int rc = MU_ENOMEM;

	mu__sched_refusal(&c->t->sched, why, sizeof(why));
	c->refused++;
	mu__metric_add(c->t->m_refused, m->code == MU_TC_PUT ? "put" : "request", 1);
	if ((c->refused & (c->refused - 1)) == 0)
		MU__TLOG(c->t, MU_LOG_WARN, "%s: %s of key %s refused: %s (%u refused so far)",
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

static int on_put(mu__tracker_conn_t *c, const mu__tracker_msg_t *m)
{
	const char *addr = m->custom_addr != NULL ? m->custom_addr : c->conn.ip;
	mu__buf_t port;
	int rc, refused = 0;

	mu__buf_init(&port, MU_TRACKER_MAX_STR + 2);
	rc = mu__json_dump(&port, m->port);
	if (rc == 0) {
		MU__TLOG(c->t, MU_LOG_INFO, "Received key %s from %s: %s at %s:%s",
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

static int merge_info(mu__tracker_conn_t *c, cJSON *info)
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

static int on_update_info(mu__tracker_conn_t *c, const mu__tracker_msg_t *m)
{
	const cJSON *key;
	int rc = merge_info(c, m->info);

	if (rc != 0)
		return rc;
	key = cJSON_GetObjectItemCaseSensitive(c->info, "key");
	MU__TLOG(c->t, MU_LOG_INFO, "Update info of %s: key %s", c->conn.peer,
	     cJSON_IsString(key) ? key->valuestring : "(none)");
	return reply_int(c, MU_TC_SUCCESS);
}

static int is_server_info(const cJSON *info)
{
	const cJSON *key = cJSON_GetObjectItemCaseSensitive(info, "key");

	return cJSON_IsString(key) && strncmp(key->valuestring, "server", 6) == 0;
}

static int on_summary(mu__tracker_conn_t *c)
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
		mu__tracker_conn_t *o = mu__container_of(it, mu__tracker_conn_t, node);

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

static int on_pending(mu__tracker_conn_t *c)
{
	cJSON *arr = cJSON_CreateArray();
	int rc = arr != NULL ? mu__sched_pending(&c->owner, arr) : MU_ENOMEM;

	if (rc == 0)
		rc = reply_json(c, arr);
	cJSON_Delete(arr);
	return rc;
}

static int on_stop(mu__tracker_conn_t *c, const mu__tracker_msg_t *m)
{
	int rc;

	if (!cJSON_IsString(m->stop_key) ||
	    strcmp(m->stop_key->valuestring, c->t->stop_key) != 0) {
		MU__TLOG(c->t, MU_LOG_WARN, "%s: STOP with a wrong key, ignored",
		     c->conn.peer);
		return reply_int(c, MU_TC_FAIL);
	}
	MU__TLOG(c->t, MU_LOG_INFO, "Stop requested by %s", c->conn.peer);
	rc = reply_int(c, MU_TC_SUCCESS);
	if (rc == 0)
		mu__tracker_stop_by_peer(c);
	return rc;
}

/* Handle one frame body. Non-zero means the peer must be disconnected. */
static int handle_frame(mu__tracker_conn_t *c, const char *body, size_t len)
{
	mu__tracker_msg_t m;
	char why[160];
	int rc = mu__tracker_msg_parse(body, len, &m, why, sizeof(why));

	if (rc != 0) {
		MU__TLOG(c->t, MU_LOG_WARN, "%s: bad message: %s, closing", c->conn.peer,
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
		MU__TLOG(c->t, MU_LOG_INFO, "Request using key %s from %s, priority %g",
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
		MU__TLOG(c->t, MU_LOG_WARN, "%s: cannot serve code %d: %s, closing",
		     c->conn.peer, m.code, mu_strerror(rc));
	mu__tracker_msg_free(&m);
	return rc;
}

/* ---- reading ---- */

static void on_timeout(mu__conn_t *cc)
{
	mu__tracker_conn_t *c = (mu__tracker_conn_t *)cc;

	MU__TLOG(c->t, MU_LOG_WARN, "%s: %s, closing", cc->peer,
	     c->state == MU__TRACKER_HANDSHAKE ? "no handshake within the timeout"
	                                : "frame not completed within the timeout");
	mu__metric_add(c->t->m_cut, "timeout", 1);
	mu__tracker_conn_close(c);
}

static void arm_timer(mu__tracker_conn_t *c)
{
	uint64_t ms = (uint64_t)(c->t->opts.timeout * 1000.0);

	if (ms > 0)
		mu__conn_timer(&c->conn, ms);
}

static int do_handshake(mu__tracker_conn_t *c)
{
	mu__buf_t *in = &c->conn.in;
	int32_t magic;
	mu__buf_t out;

	if (in->len < 4)
		return 0;
	magic = mu_le32_get_signed(in->data);
	if (magic != MU_TRACKER_MAGIC) {
		MU__TLOG(c->t, MU_LOG_WARN,
		     "%s: invalid magic 0x%x (not a TVM tracker client), closing",
		     c->conn.peer, (unsigned)magic);
		mu__metric_add(c->t->m_cut, "protocol", 1);
		return MU_EBADMAGIC;
	}
	mu__buf_init(&out, 4);
	mu__buf_append(&out, in->data, 4); /* cannot fail: 4 <= max */
	mu__buf_consume(in, 4);
	mu__conn_timer(&c->conn, 0);
	c->state = MU__TRACKER_FRAMES;
	MU__TLOG(c->t, MU_LOG_INFO, "Handshake with %s successful", c->conn.peer);
	return conn_send(c, &out);
}

/*
 * Consume what conn.in holds: the magic, then whole frames. Stops early
 * when the peer is closed, draining, or paused for its budget.
 */
static void on_data(mu__conn_t *cc)
{
	mu__tracker_conn_t *c = (mu__tracker_conn_t *)cc;
	mu__buf_t *in = &cc->in;
	size_t blen;
	int rc, progressed = 0;

	if (c->state == MU__TRACKER_HANDSHAKE && (rc = do_handshake(c)) != 0) {
		mu__tracker_conn_close(c);
		return;
	}
	while (c->state == MU__TRACKER_FRAMES && !cc->paused && !cc->closing) {
		rc = mu__tracker_frame_peek(in->data, in->len, c->t->opts.max_frame, &blen);
		if (rc < 0) {
			MU__TLOG(c->t, MU_LOG_WARN,
			     "%s: invalid message size %d (limit %u), closing",
			     cc->peer, (int)mu_le32_get_signed(in->data),
			     c->t->opts.max_frame);
			mu__metric_add(c->t->m_cut, "limit", 1);
			mu__tracker_conn_close(c);
			return;
		}
		if (rc == 0)
			break;
		if (handle_frame(c, in->data + 4, blen) != 0) {
			mu__tracker_conn_close(c);
			return;
		}
		if (cc->closing)
			return;
		mu__buf_consume(in, 4 + blen);
		progressed = 1;
		if (mu__conn_yield(cc))
			break;
	}
	if (c->state != MU__TRACKER_FRAMES || cc->closing)
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

void mu__tracker_on_connection(mu__listener_t *l, mu_stream_t *st)
{
	mu_tracker_t *t = l->data;
	mu__tracker_conn_t *c;

	c = mu__calloc(1, sizeof(*c));
	if (c == NULL) {
		MU__TLOG(t, MU_LOG_ERROR, "accept: out of memory");
		mu__stream_close(st);
		return;
	}
	c->t = t;
	c->state = MU__TRACKER_HANDSHAKE;
	c->logged = 1; /* a peer that left before we looked is no news */
	mu__sched_owner_init(&c->owner);
	mu__list_insert_tail(&t->conns, &c->node);
	mu__metric_add(t->m_conns, NULL, 1);
	mu__metric_add(t->m_open, NULL, 1); /* on_close takes it back, even on failure */
	if (mu__conn_accept(&c->conn, &t->svc.loop, st, &conn_ops,
	                    4 + (size_t)t->opts.max_frame + MU__TRACKER_READ_CHUNK, t->scratch,
	                    sizeof(t->scratch), &t->budget) != 0)
		return;
	c->logged = 0;
	MU__TLOG(t, MU_LOG_INFO, "New session from %s", c->conn.peer);
	arm_timer(c);
}

