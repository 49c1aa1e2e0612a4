/* SPDX-License-Identifier: MIT */
/*
 * P2P backend: NIXL's metadata sockets (p2p_proto.c's frames).
 *
 * Listener (optional; its own libuv loop thread): any number of
 * long-lived peers; LOAD frames are loaded, SEND is answered on the same
 * connection with LOAD and our full blob, INVL drops the named agent. A
 * frame started must be finished within 5 s (NIXL's rule); idle peers stay.
 *
 * Outgoing (the agent's worker thread): one cached connection per
 * "ip:port", blocking sockets with a deadline on every write and read
 * (NIXL sends without one, so a peer that stops reading wedges it). A
 * connection that failed, or whose reply never came, is dropped: the next
 * exchange dials again. So is a cached one found readable before use
 * (the peer closed or reset it, e.g. it restarted on the same port):
 * LOAD and INVL have no reply, and a frame written there would be
 * reported sent while going nowhere.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "muster/md.h"
#include "core/alloc_int.h"
#include "core/accept_int.h"
#include "core/conn_int.h"
#include "core/endian_int.h"
#include "core/log_int.h"
#include "core/net_int.h"
#include "core/service_int.h"
#include "core/sock_int.h"
#include "core/strmap_int.h"
#include "core/time_int.h"
#include "md/md_int.h"
#include "md/p2p_proto_int.h"

#define FRAME_MAX (MU_MD_MAX_BLOB + 64)
#define FRAME_DEADLINE_MS 5000
#define READ_CHUNK 65536

typedef struct {
	mu_md_agent_t *a;
	/* listener */
	mu__service_t svc;
	int svc_init, svc_started;
	mu__listener_t listener;
	int listener_init;
	mu__list_t conns;
	mu__budget_t budget;
	char scratch[READ_CHUNK];
	/* outgoing: "ip:port" -> mu_stream_t */
	mu__strmap_t out;
} p2p_t;

typedef struct {
	mu__conn_t conn;
	mu__list_t node;
	p2p_t *p;
} pconn_t;

/* ---- listener ---- */

static void free_cb(void *p)
{
	mu__free(p);
}

static void handle(pconn_t *pc, mu__p2p_cmd_t cmd, const char *arg, size_t n)
{
	mu_md_agent_t *a = pc->p->a;
	char name[MU_MD_NAME_MAX + 1] = "", label[MU_MD_LABEL_MAX + 1], why[128];
	mu__md_blob_t *b;
	mu__buf_t out;
	int rc;

	switch (cmd) {
	case MU_P2P_LOAD:
		if (mu__md_blob_label(arg, n, label, sizeof(label)) != 0)
			label[0] = '\0'; /* a full blob, or NIXL's */
		rc = mu__md_load_pushed(a, label, arg, n, name, sizeof(name));
		snprintf(why, sizeof(why), "pushed by %.100s", pc->conn.peer);
		mu__md_event(a, MU_MD_REMOTE_LOADED, rc, name, rc ? mu_strerror(rc) : why);
		break;
	case MU_P2P_SEND: /* answer with our full blob, even an empty one */
		/* the frame's header, then the blob's copy itself (no second copy) */
		b = mu__md_local_copy(a, NULL);
		mu__buf_init(&out, 64);
		rc = mu__p2p_frame(&out, MU_P2P_LOAD, NULL, 0);
		if (rc == 0) {
			mu_le64_put((unsigned char *)out.data, out.len - 8 + (b ? b->len : 0));
			rc = mu__conn_send(&pc->conn, out.data, out.len, b ? b->data : NULL,
			                   b ? b->len : 0, b ? free_cb : NULL, b);
		}
		mu__buf_free(&out);
		if (rc != 0) {
			mu__free(b);
			mu__conn_close(&pc->conn, rc);
		}
		break;
	default: /* INVL <name>: NIXL does not check that the sender is name */
		snprintf(name, sizeof(name), "%.*s", (int)(n < MU_MD_NAME_MAX ? n : MU_MD_NAME_MAX), arg);
		snprintf(why, sizeof(why), "invalidated by %.100s", pc->conn.peer);
		mu__md_drop(a, name, why);
		break;
	}
}

static void on_data(mu__conn_t *c)
{
	pconn_t *pc = (pconn_t *)c;
	mu__p2p_cmd_t cmd;
	const void *arg;
	size_t plen, argn;
	int rc, progressed = 0;

	while (!c->closing && !c->paused && (rc = mu__p2p_frame_peek(c->in.data, c->in.len, FRAME_MAX, &plen)) != 0) {
		if (rc < 0 || mu__p2p_parse(c->in.data + 8, plen, &cmd, &arg, &argn) != 0) {
			mu__log(MU_LOG_WARN, "md", "agent %s: %s sent %s, closing",
			        pc->p->a->name, c->peer,
			        rc == MU_ETOOBIG ? "a frame over the size limit"
			        : rc < 0 ? "a frame too short to hold a command"
			                 : "a frame that is not a NIXLCOMM command");
			mu__conn_close(c, rc < 0 ? rc : MU_EPROTO);
			return;
		}
		handle(pc, cmd, arg, argn);
		if (!c->closing)
			mu__buf_consume(&c->in, 8 + plen);
		progressed = 1;
		if (mu__conn_yield(c))
			break;
	}
	if (c->closing)
		return;
	if (c->in.len == 0 || c->paused)
		mu__conn_timer(c, 0);
	else if (progressed || !uv_is_active((uv_handle_t *)&c->timer))
		mu__conn_timer(c, FRAME_DEADLINE_MS);
}

static void on_timeout(mu__conn_t *c)
{
	mu__log(MU_LOG_WARN, "md", "agent %s: %s started a frame and stopped, closing",
	        ((pconn_t *)c)->p->a->name, c->peer);
	mu__conn_close(c, -ETIMEDOUT);
}

static void on_close(mu__conn_t *c, int err)
{
	(void)err;
	mu__list_remove(&((pconn_t *)c)->node);
}

static void on_free(mu__conn_t *c)
{
	mu__free(c);
}

static const mu__conn_ops_t conn_ops = {on_data, on_close, on_free, on_timeout, NULL, NULL, NULL};

static void on_connection(mu__listener_t *l, mu_stream_t *st)
{
	p2p_t *p = l->data;
	pconn_t *pc;

	if ((pc = mu__calloc(1, sizeof(*pc))) == NULL) {
		mu__stream_close(st);
		return;
	}
	pc->p = p;
	mu__list_insert_tail(&p->conns, &pc->node);
	mu__conn_accept(&pc->conn, &p->svc.loop, st, &conn_ops, FRAME_MAX + READ_CHUNK,
	                p->scratch, sizeof(p->scratch), &p->budget);
}

static void stop_cb(mu__service_t *svc)
{
	p2p_t *p = mu__container_of(svc, p2p_t, svc);
	mu__list_t *it, *tmp;

	if (p->listener_init)
		mu__listener_close(&p->listener, NULL);
	mu__list_foreach_safe(it, tmp, &p->conns)
		mu__conn_close(&mu__container_of(it, pconn_t, node)->conn, 0);
}

static int start_listener(p2p_t *p)
{
	mu_md_agent_t *a = p->a;
	mu__listen_opts_t lo = {a->o.listen_host, a->o.listen_port,
	                        a->o.listen_port + 1, 1, 128};
	int rc;

	if (mu_budget_check(&a->o.listen_budget) != 0)
		return MU_EARG;
	rc = mu__service_init(&p->svc, stop_cb);
	if (rc != 0)
		return rc;
	mu__budget_init(&p->budget, &a->o.listen_budget, "md");
	p->svc_init = 1;
	rc = mu__listener_start(&p->listener, &p->svc.loop, &lo, NULL, "md", on_connection,
	                        &a->listen_port);
	if (rc == 0) {
		p->listener_init = 1;
		p->listener.data = p;
	}
	if (rc == 0)
		rc = mu__service_start(&p->svc);
	p->svc_started = rc == 0;
	if (rc == 0)
		mu__log(MU_LOG_INFO, "md", "agent %s: P2P listener on %s:%d", a->name,
		        a->o.listen_host, a->listen_port);
	return rc;
}

/* ---- outgoing ---- */

static void drop_conn(p2p_t *p, const char *key)
{
	void *v = mu__strmap_remove(&p->out, key, strlen(key));

	if (v != NULL)
		mu__sock_close(v);
}

/*
 * The cached connection to op's peer if it is still good, or a new one.
 * Between exchanges nothing is due from the peer (a SEND's reply is read
 * whole), so a cached socket that is readable closed, reset or sent bytes
 * nobody asked for (mu__sock_idle_ok). A write there would still succeed
 * locally, its bytes lost to the peer's reset: this check is the only
 * chance to notice. (A peer that dies after it, while our frame is in
 * flight, is not noticed: LOAD and INVL have no reply, in NIXL's protocol
 * as in ours.)
 */
static int dial(p2p_t *p, const mu__md_op_t *op, char *key, size_t keylen,
                int64_t deadline, int *fresh, mu_stream_t **out)
{
	mu_stream_t *v;
	int rc;

	snprintf(key, keylen, "%s:%d", op->ip, op->port);
	v = mu__strmap_get(&p->out, key, strlen(key));
	if (v != NULL && mu__sock_idle_ok(v)) {
		*fresh = 0;
		*out = v;
		return 0;
	}
	if (v != NULL)
		drop_conn(p, key); /* the peer went away since: dial again */
	*fresh = 1;
	rc = mu__sock_connect(op->ip, op->port, NULL, deadline, out);
	if (rc != 0)
		return rc;
	if (mu__strmap_put(&p->out, key, strlen(key), *out, NULL) != 0) {
		mu__sock_close(*out);
		return MU_ENOMEM;
	}
	return 0;
}

/*
 * Send one frame to op's peer (retrying once on a fresh connection when
 * a cached one turns out dead), and with `reply`, read the answer.
 */
static int exchange(p2p_t *p, const mu__md_op_t *op, const mu__buf_t *frame,
                    mu__buf_t *reply, char *why, size_t wl)
{
	int64_t deadline = mu__deadline((int64_t)(p->a->o.op_timeout * 1000));
	char key[96];
	unsigned char hdr[8];
	size_t plen;
	mu_stream_t *fd;
	int fresh, rc, tries;

	for (tries = 0; tries < 2; tries++) {
		rc = dial(p, op, key, sizeof(key), deadline, &fresh, &fd);
		if (rc != 0) {
			snprintf(why, wl, "cannot reach %.100s: %.100s", key, mu_strerror(rc));
			return rc;
		}
		rc = mu__sock_send_all(fd, frame->data, frame->len, deadline);
		if (rc == 0 && reply != NULL) {
			rc = mu__sock_recv_all(fd, hdr, 8, deadline);
			if (rc == 0)
				rc = mu__p2p_frame_peek(hdr, 8, FRAME_MAX, &plen) < 0 ? MU_EPROTO : 0;
			if (rc == 0)
				rc = mu__buf_reserve(reply, plen);
			if (rc == 0)
				rc = mu__sock_recv_all(fd, reply->data, plen, deadline);
			if (rc == 0)
				reply->len = plen;
		}
		if (rc == 0)
			return 0;
		drop_conn(p, key);
		if (fresh || rc == -ETIMEDOUT)
			break; /* only a cached connection earns a second try */
	}
	snprintf(why, wl, "%.100s: %.100s", key,
	         rc == -ETIMEDOUT ? "no answer within the operation timeout"
	         : rc == MU_EEOF ? "the peer closed the connection" : mu_strerror(rc));
	return rc;
}

static int p2p_send(void *st, mu__md_op_t *op, char *why, size_t wl)
{
	mu__buf_t f;
	int rc;

	mu__buf_init(&f, FRAME_MAX);
	rc = mu__p2p_frame(&f, MU_P2P_LOAD, op->blob, op->len);
	if (rc == 0)
		rc = exchange(st, op, &f, NULL, why, wl);
	mu__buf_free(&f);
	return rc;
}

static int p2p_fetch(void *st, mu__md_op_t *op, char *why, size_t wl)
{
	p2p_t *p = st;
	mu__buf_t f, r;
	mu__p2p_cmd_t cmd;
	const void *arg;
	size_t argn;
	char label[MU_MD_LABEL_MAX + 1];
	int rc;

	mu__buf_init(&f, 64);
	mu__buf_init(&r, FRAME_MAX);
	rc = mu__p2p_frame(&f, MU_P2P_SEND, NULL, 0);
	if (rc == 0)
		rc = exchange(p, op, &f, &r, why, wl);
	if (rc == 0 && (mu__p2p_parse(r.data, r.len, &cmd, &arg, &argn) != 0 || cmd != MU_P2P_LOAD)) {
		snprintf(why, wl, "%.100s:%d answered SEND with something other than LOAD", op->ip, op->port);
		rc = MU_EPROTO;
	}
	if (rc == 0) {
		if (mu__md_blob_label(arg, argn, label, sizeof(label)) != 0)
			label[0] = '\0';
		/* NIXL loads whoever answers; the completion names them */
		rc = mu__md_load(p->a, label, arg, argn, op->name, sizeof(op->name));
		if (rc != 0)
			snprintf(why, wl, "the blob from %.100s:%d does not load: %.100s", op->ip,
			         op->port, rc == MU_EPROTO ? "not a metadata blob"
			                   : rc == -EEXIST ? "different metadata of that agent is loaded; invalidate it first"
			                                   : mu_strerror(rc));
	}
	mu__buf_free(&f);
	mu__buf_free(&r);
	return rc;
}

static int p2p_invalidate(void *st, mu__md_op_t *op, char *why, size_t wl)
{
	p2p_t *p = st;
	mu__buf_t f;
	int rc;

	mu__buf_init(&f, 64 + MU_MD_NAME_MAX);
	rc = mu__p2p_frame(&f, MU_P2P_INVL, p->a->name, strlen(p->a->name));
	if (rc == 0)
		rc = exchange(p, op, &f, NULL, why, wl);
	mu__buf_free(&f);
	return rc;
}

/* ---- lifecycle ---- */

static void p2p_close(void *st)
{
	p2p_t *p = st;
	mu__strmap_entry_t *e = NULL;
	size_t slot = 0;

	if (p == NULL)
		return;
	if (p->svc_init) {
		if (p->svc_started)
			mu__service_stop(&p->svc);
		mu__service_join(&p->svc);
		mu__service_free(&p->svc);
	}
	while ((e = mu__strmap_next(&p->out, &slot, e)) != NULL)
		mu__sock_close(e->value);
	mu__strmap_free(&p->out, NULL);
	mu__free(p);
}

static int p2p_open(mu_md_agent_t *a, void **st)
{
	p2p_t *p = mu__calloc(1, sizeof(*p));
	int rc = 0;

	if (p == NULL)
		return MU_ENOMEM;
	p->a = a;
	mu__list_init(&p->conns);
	mu__strmap_init(&p->out);
	if (a->o.listen)
		rc = start_listener(p);
	if (rc != 0) {
		mu__md_setup_error(a, "agent %.64s: cannot listen on %.64s:%d: %s", a->name,
		                   a->o.listen_host, a->o.listen_port, mu_strerror(rc));
		p2p_close(p);
		return rc;
	}
	*st = p;
	return 0;
}

const mu__md_backend_t mu__md_backend_p2p = {
	MU_MD_BACKEND_VERSION, "P2P", p2p_open, p2p_close,
	p2p_send, p2p_fetch, p2p_invalidate, NULL, NULL,
};
