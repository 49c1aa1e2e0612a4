/* SPDX-License-Identifier: MIT */
/*
 * One connection of `muster stage`'s server (stage_server.c has the
 * server): a message's header is checked before its body is read; a
 * frame body is read straight into the tensors; what may wait for the
 * stage's compute (the messages of its kind) runs on libuv's thread pool
 * while the loop goes on serving everyone else, and mu__pipe_handle
 * (serve.c) answers everything; the reply is written from the tensors'
 * memory. A connection that breaks the protocol, or that ends or stalls
 * (past the I/O timeout) in the middle of a message, is told why and
 * closed. A closed connection's state on the stage (an LLM's sequences)
 * is released through the stage's kind.
 */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc_int.h"
#include "core/endian_int.h"
#include "core/log_int.h"
#include "core/time_int.h"
#include "pipeline/stage_server_int.h"

#define LOG "stage"
#define LINGER_MS 200 /* an ERROR gets this long to reach the peer */

typedef mu__sconn_t sconn_t;

/* A RESULT being written: what its buffers point into. */
typedef struct {
	mu_stage_server_t *srv;
	uv_buf_t *bufs;
	unsigned char *hdrs;
	mu_tensor_list_t out;
} wres_t;

static void sc_reset(sconn_t *sc);
static void sc_data(mu__conn_t *c);

/* A connection on its way out (lingering after an ERROR) no longer counts
 * against the limit. */
static void uncount(sconn_t *sc)
{
	if (!sc->uncounted) {
		sc->uncounted = 1;
		sc->srv->nconns--;
	}
}

/* Tell the peer why (when its stream can still carry a reply) and close. */
void mu__sconn_fail(sconn_t *sc, int code, const char *fmt, ...)
{
	char text[512];
	unsigned char h[MU_MSG_HEADER];
	mu__msg_t m = {MU_MSG_ERROR, code, sc->m.id, 0, 0, 0};
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	mu__log(MU_LOG_WARN, LOG, "%s: closing %s: %s", sc->srv->name, sc->conn.peer, text);
	mu__metric_add(sc->srv->m_cut, code == -ETIMEDOUT ? "timeout" : code == MU_ETOOBIG ? "limit"
	                               : "protocol", 1);
	uncount(sc);
	m.len = strlen(text);
	mu__msg_encode(&m, h);
	/* the header is copied, the text too: one buffer */
	{
		size_t n = sizeof(h) + m.len;
		unsigned char *b = mu__malloc(n);

		if (b != NULL) {
			memcpy(b, h, sizeof(h));
			memcpy(b + sizeof(h), text, m.len);
			mu__conn_send(&sc->conn, b, n, NULL, 0, NULL, NULL);
			mu__free(b);
		}
	}
	mu__conn_finish(&sc->conn, code, LINGER_MS);
}

static void wres_free(wres_t *w)
{
	mu__free(w->bufs);
	mu__free(w->hdrs);
	mu_tensor_list_free(&w->out);
	mu__free(w);
}

/* The RESULT went out (or was dropped with its connection). */
static void result_sent(void *arg)
{
	wres_t *w = arg;
	mu_stage_server_t *srv = w->srv;

	wres_free(w);
	mu__stage_server_counted(srv); /* may stop the server: its reply is out */
}

/* Write a RESULT from the tensors' memory: header, count, then per tensor
 * its header bytes and its data. The tensors move to the write. */
static int send_result(sconn_t *sc)
{
	mu_tensor_list_t *l;
	size_t i, hsz = 0, off;
	unsigned n = 0;
	wres_t *w = mu__calloc(1, sizeof(*w));
	int rc;

	if (w == NULL)
		return MU_ENOMEM;
	w->srv = sc->srv;
	w->out = sc->reply.out;
	mu_tensor_list_init(&sc->reply.out);
	l = &w->out;
	for (i = 0; i < l->n; i++)
		hsz += mu__frame_header_size(l->t[i]);
	w->hdrs = mu__malloc(MU_MSG_HEADER + 4 + hsz);
	w->bufs = mu__calloc(2 * l->n + 2, sizeof(uv_buf_t));
	if (w->hdrs == NULL || w->bufs == NULL) {
		wres_free(w);
		return MU_ENOMEM;
	}
	sc->reply.m.len = mu_frame_size(l);
	mu__msg_encode_frame(&sc->reply.m, l, w->hdrs);
	mu_le32_put(w->hdrs + MU_MSG_HEADER, (uint32_t)l->n);
	w->bufs[n++] = uv_buf_init((char *)w->hdrs, MU_MSG_HEADER + 4);
	off = MU_MSG_HEADER + 4;
	for (i = 0; i < l->n; i++) {
		size_t h = mu__frame_header_size(l->t[i]);

		mu__frame_header(l->t[i], w->hdrs + off);
		w->bufs[n++] = uv_buf_init((char *)w->hdrs + off, (unsigned)h);
		off += h;
		if (l->t[i]->numel > 0)
			w->bufs[n++] = uv_buf_init((char *)l->t[i]->raw, (unsigned)mu_tensor_nbytes(l->t[i]));
	}
	/* charged with what this write keeps besides the tensors' bytes */
	rc = mu__conn_sendv(&sc->conn, w->bufs, n,
	                    sizeof(*w) + MU_MSG_HEADER + 4 + hsz + (2 * l->n + 2) * sizeof(uv_buf_t),
	                    result_sent, w);
	if (rc != 0)
		wres_free(w);
	else
		mu__metric_add(sc->srv->m_out, NULL, (double)(MU_MSG_HEADER + sc->reply.m.len));
	return rc;
}

static void free_cb(void *p)
{
	mu__free(p);
}

/* Header and text as one write: the text is the stage's description (it
 * outlives the server), or an owned one that moves to the write. */
static int send_text(sconn_t *sc)
{
	mu__reply_t *r = &sc->reply;
	unsigned char h[MU_MSG_HEADER];
	char *own = r->text_owned ? r->text : NULL;
	int rc;

	r->m.len = r->text != NULL ? strlen(r->text) : 0;
	mu__msg_encode(&r->m, h);
	rc = mu__conn_send(&sc->conn, h, sizeof(h), r->text, r->m.len, own ? free_cb : NULL, own);
	if (rc == 0)
		mu__metric_add(sc->srv->m_out, NULL, (double)(sizeof(h) + r->m.len));
	if (rc == 0 && own != NULL) {
		r->text = NULL;
		r->text_owned = 0;
	}
	return rc;
}

/* A reply is ready: what it computed goes to the metrics. */
static void count_reply(mu_stage_server_t *srv, const mu__reply_t *r)
{
	uint64_t kv;
	int seqs;

	if (srv->m_msgs == NULL)
		return;
	if (r->m.type == MU_MSG_RESULT) {
		mu__metric_add(srv->m_fwd, NULL, 1);
		mu__metric_add(srv->m_tok, NULL, (double)r->positions);
		mu__metric_observe(srv->m_compute, NULL, (double)r->m.aux / 1e9);
	}
	if (srv->stage != NULL && srv->stage->kind->usage != NULL) {
		srv->stage->kind->usage(srv->stage, &kv, &seqs);
		mu__metric_set(srv->m_kv, NULL, (double)kv);
		mu__metric_set(srv->m_seqs, NULL, (double)seqs);
	}
}

/* The reply is ready (loop thread): send it, then read the next message. */
static void replied(sconn_t *sc)
{
	mu__reply_t *r = &sc->reply;
	int rc = 0;

	count_reply(sc->srv, r);
	if (r->m.type == MU_MSG_RESULT)
		rc = send_result(sc);
	else if (r->m.type != 0)
		rc = send_text(sc);
	if (rc == 0 && r->fatal && r->m.type == MU_MSG_ERROR) {
		uncount(sc);
		mu__conn_finish(&sc->conn, r->m.status, LINGER_MS);
	} else if (rc != 0 || r->fatal)
		mu__conn_close(&sc->conn, rc);
	mu__reply_free(r);
	if (sc->conn.closing || sc->conn.draining)
		return;
	sc_reset(sc);
	mu__conn_hold(&sc->conn, 0);
	if (!sc->in_data)
		sc_data(&sc->conn); /* a request that came in behind this one */
}

static void work_cb(uv_work_t *w)
{
	sconn_t *sc = w->data;

	mu__pipe_handle(&sc->srv->ctx, sc->serial, &sc->m, sc->text.data != NULL ? sc->text.data : "",
	                &sc->in, &sc->reply);
}

static void after_work_cb(uv_work_t *w, int status)
{
	sconn_t *sc = w->data;

	(void)status;
	sc->computing = 0;
	mu_tensor_list_free(&sc->in);
	mu_tensor_list_init(&sc->in);
	if (sc->freed) { /* the connection went away while we computed */
		mu__reply_free(&sc->reply);
		mu__free(sc);
		return;
	}
	replied(sc);
}

/* A whole message is in: answer it (a forward on the thread pool). */
static void dispatch(sconn_t *sc)
{
	const char *body = sc->text.data;

	sc->state = SC_BUSY;
	sc->nmsgs++;
	mu__metric_add(sc->srv->m_msgs, mu__msg_type_name(sc->m.type), 1);
	mu__metric_add(sc->srv->m_in, NULL, (double)(MU_MSG_HEADER + sc->m.len));
	mu__conn_hold(&sc->conn, 1);
	mu__conn_timer(&sc->conn, 0);
	/* Compute, and anything that waits for the compute's lock (what the
	 * stage's kind answers), runs off the loop. A JSON body is made a
	 * string first. */
	if (mu__pipe_may_wait(&sc->srv->ctx, &sc->m) && mu__buf_appendc(&sc->text, '\0') == 0) {
		sc->work.data = sc;
		if (uv_queue_work(sc->conn.loop, &sc->work, work_cb, after_work_cb) == 0) {
			sc->computing = 1;
			return;
		}
	}
	if (mu__buf_appendc(&sc->text, '\0') != 0)
		body = "";
	mu__pipe_handle(&sc->srv->ctx, sc->serial, &sc->m, body, &sc->in, &sc->reply);
	mu_tensor_list_free(&sc->in);
	mu_tensor_list_init(&sc->in);
	replied(sc);
}

static void sc_reset(sconn_t *sc)
{
	if (sc->fr_live)
		mu__frame_reader_free(&sc->fr);
	sc->fr_live = 0;
	mu__buf_reset(&sc->text);
	sc->state = SC_HEADER;
	sc->left = 0;
	sc->deadline = 0;
	sc->timer_is_deadline = 0;
	sc->why[0] = '\0';
}

/* Progress on a message restarts the stall clock, within the message's
 * deadline (from its first byte); between messages the idle limit (if
 * any) applies, before the first one the silent limit. */
static void arm_timer(sconn_t *sc)
{
	int idle = sc->state == SC_HEADER && sc->conn.in.len == 0;
	int ms = !idle ? sc->srv->o.io_timeout_ms
	         : sc->nmsgs == 0 ? sc->srv->o.silent_timeout_ms : sc->srv->o.idle_timeout_ms;
	double now = mu__clock_ms();

	if (!idle && sc->deadline == 0 && sc->srv->o.body_timeout_ms > 0)
		sc->deadline = now + sc->srv->o.body_timeout_ms;
	sc->timer_is_deadline = 0;
	if (!idle && sc->deadline > 0 && (ms <= 0 || sc->deadline - now < ms)) {
		ms = sc->deadline - now < 1 ? 1 : (int)(sc->deadline - now);
		sc->timer_is_deadline = 1;
	}
	if (idle)
		sc->last_msg = now;
	mu__conn_timer(&sc->conn, ms > 0 ? (uint64_t)ms : 0);
}

/* The frame reader asks before a tensor's storage is allocated: what the
 * frame declares so far (and the text held) must fit the budgets. */
static int sc_admit(void *ud, uint64_t declared)
{
	sconn_t *sc = ud;
	size_t n = mu__buf_footprint(&sc->text);

	if (declared > SIZE_MAX - n)
		declared = SIZE_MAX - n;
	/* one message of up to --max-frame tensor bytes (and its text) is let
	 * in whatever --conn-budget says, which bounds replies held */
	return mu__conn_input_admit(&sc->conn, n + (size_t)declared,
	                            (size_t)sc->srv->o.max_frame_bytes + n, sc->why, sizeof(sc->why));
}

static void frame_progress(sconn_t *sc, int rc)
{
	if (rc == 1 && sc->left != 0)
		rc = MU_EPROTO; /* the frame ended inside the body */
	else if (rc == 0 && sc->left == 0)
		rc = MU_EPROTO; /* the body ended inside the frame */
	if (rc < 0 && sc->why[0] != '\0') {
		mu__sconn_fail(sc, rc, "the %s frame declares tensors of %s", mu__msg_type_name(sc->m.type),
		               sc->why);
		return;
	}
	if (rc < 0) {
		mu__sconn_fail(sc, rc, "bad %s frame: %s", mu__msg_type_name(sc->m.type), mu_strerror(rc));
		return;
	}
	if (rc == 1 && mu__msg_frame_check(sc->version, &sc->fr.got) != 0) {
		mu__sconn_fail(sc, MU_EPROTO, "bad %s frame: a version-%d header carries only F32 "
		               "tensors", mu__msg_type_name(sc->m.type), sc->version);
		return;
	}
	if (rc == 1) {
		rc = mu__frame_reader_take(&sc->fr, &sc->in);
		if (rc != 0) {
			mu__sconn_fail(sc, rc, "out of memory for a frame");
			return;
		}
		dispatch(sc);
	}
}

static void start_body(sconn_t *sc)
{
	mu_frame_limits_t lim;

	sc->left = sc->m.len;
	if (mu__msg_is_frame(sc->m.type)) {
		mu_frame_limits_init(&lim);
		lim.max_bytes = sc->srv->o.max_frame_bytes;
		mu__frame_reader_init(&sc->fr, &lim);
		sc->fr.admit = sc_admit;
		sc->fr.admit_ud = sc;
		sc->fr_live = 1;
		sc->state = SC_FRAME;
		if (sc->left == 0)
			frame_progress(sc, 0);
	} else {
		sc->state = SC_TEXT;
		if (sc->left == 0)
			dispatch(sc);
	}
}

/* The message being received, held outside conn.in: the frame's declared
 * tensors, or the text body. */
static void count_input(sconn_t *sc)
{
	size_t n = mu__buf_footprint(&sc->text);

	if (sc->fr_live)
		n += (size_t)sc->fr.bytes;
	mu__conn_input(&sc->conn, n);
}

static void sc_data(mu__conn_t *c)
{
	sconn_t *sc = (sconn_t *)c;
	mu__buf_t *in = &c->in;
	int was = sc->in_data;

	/* a reply sent at once (INFO, an ERROR) comes back to this loop, not
	 * into a new call: a thousand pipelined messages are a loop here, not
	 * a thousand nested calls */
	sc->in_data = 1;
	while (!c->closing && !c->draining && !c->paused && sc->state != SC_BUSY && in->len > 0) {
		size_t k;
		int rc;

		switch (sc->state) {
		case SC_HEADER:
			if (in->len < MU_MSG_HEADER || mu__conn_yield(c))
				goto out;
			rc = mu__msg_decode((const unsigned char *)in->data, sc->srv->o.max_frame_bytes, &sc->m);
			sc->version = mu__msg_version((const unsigned char *)in->data);
			mu__buf_consume(in, MU_MSG_HEADER);
			if (rc != 0) {
				sc->m.id = 0;
				mu__sconn_fail(sc, rc, "bad message header: %s", mu_strerror(rc));
				goto out;
			}
			start_body(sc);
			break;
		case SC_TEXT:
			k = in->len < sc->left ? in->len : (size_t)sc->left;
			if (mu__buf_append(&sc->text, in->data, k) != 0) {
				mu__sconn_fail(sc, MU_ENOMEM, "out of memory for a message body");
				goto out;
			}
			mu__buf_consume(in, k);
			sc->left -= k;
			if (sc->left == 0)
				dispatch(sc);
			break;
		case SC_FRAME: {
			size_t used = 0;

			k = in->len < sc->left ? in->len : (size_t)sc->left;
			rc = mu__frame_reader_feed(&sc->fr, in->data, k, &used);
			mu__buf_consume(in, used);
			sc->left -= used;
			if (rc != 0 || sc->left == 0)
				frame_progress(sc, rc);
			else if (used < k)
				frame_progress(sc, MU_EPROTO);
			break;
		}
		case SC_BUSY:
			break;
		}
	}
out:
	sc->in_data = was;
	count_input(sc);
	/* while paused for its budget, what waits is ours to answer, not the
	 * peer's stall: the budget's grace governs it, conn.c calls us back */
	if (!c->closing && !c->draining && c->paused)
		mu__conn_timer(c, 0);
	else if (!c->closing && !c->draining && sc->state != SC_BUSY)
		arm_timer(sc);
}

/* Straight into the tensor being received, when its data is due. */
static void *sc_alloc(mu__conn_t *c, size_t *n)
{
	sconn_t *sc = (sconn_t *)c;
	void *p;

	if (sc->state != SC_FRAME)
		return NULL;
	p = mu__frame_reader_space(&sc->fr, n);
	if (p != NULL && *n > sc->left)
		*n = (size_t)sc->left;
	return p != NULL && *n > 0 ? p : NULL;
}

static void sc_direct(mu__conn_t *c, size_t n)
{
	sconn_t *sc = (sconn_t *)c;
	int rc = mu__frame_reader_wrote(&sc->fr, n);

	sc->left -= n;
	if (rc != 0 || sc->left == 0)
		frame_progress(sc, rc);
	count_input(sc);
	if (!c->closing && !c->draining && sc->state == SC_FRAME)
		arm_timer(sc);
}

/* The message in progress was cut short by rc (a stall or the end). */
static void fail_cut_short(sconn_t *sc, int rc)
{
	char why[256], what[32];

	if (sc->state == SC_HEADER) {
		sc->m.id = 0; /* still the last message's */
		mu__cut_short(why, sizeof(why), "header", sc->conn.in.len, MU_MSG_HEADER, rc,
		              sc->srv->o.io_timeout_ms);
	} else {
		snprintf(what, sizeof(what), "%s body", mu__msg_type_name(sc->m.type));
		mu__cut_short(why, sizeof(why), what, sc->m.len - sc->left, sc->m.len, rc,
		              sc->srv->o.io_timeout_ms);
	}
	mu__sconn_fail(sc, rc == -ETIMEDOUT ? rc : MU_EPROTO, "%s", why);
}

static void sc_timeout(mu__conn_t *c)
{
	sconn_t *sc = (sconn_t *)c;

	if (sc->state == SC_BUSY)
		return; /* not armed while a reply is due */
	/* Which limit fired is what arm_timer armed, not a clock reading: the
	 * loop's cached time the timer counts from can lag mu__clock_ms() by
	 * more than a millisecond, so a deadline timer may run just before the
	 * deadline by that clock (a CI run reported a stall for it). */
	if ((sc->state != SC_HEADER || c->in.len > 0) && sc->timer_is_deadline) {
		mu__sconn_fail(sc, -ETIMEDOUT, "%s: %llu of %llu bytes came in %g s (--body-timeout)",
		               sc->state == SC_HEADER ? "a message header was cut short"
		               : "a message body was cut short", (unsigned long long)(sc->state == SC_HEADER
		               ? c->in.len : sc->m.len - sc->left), (unsigned long long)(sc->state ==
		               SC_HEADER ? MU_MSG_HEADER : sc->m.len), sc->srv->o.body_timeout_ms / 1000.0);
		return;
	}
	if (sc->state != SC_HEADER || c->in.len > 0) {
		fail_cut_short(sc, -ETIMEDOUT);
		return;
	}
	sc->m.id = 0;
	if (sc->nmsgs == 0)
		mu__sconn_fail(sc, -ETIMEDOUT, "nothing received in %g s since connecting",
		          sc->srv->o.silent_timeout_ms / 1000.0);
	else
		mu__sconn_fail(sc, -ETIMEDOUT, "idle for %g s since the last message (--idle-timeout)",
		          sc->srv->o.idle_timeout_ms / 1000.0);
}

/*
 * The peer shut its sending side (it can still read). Between messages a
 * goodbye: what is still queued for it (a RESULT being written) goes out
 * before we close, so a client may send its requests and shut down at
 * once. Inside a message: a message cut short, which it is told about.
 * (Reading is held while a message is answered, so the end of the stream
 * is seen only between messages or inside one.)
 */
static int sc_eof(mu__conn_t *c)
{
	sconn_t *sc = (sconn_t *)c;
	int linger = sc->srv->o.io_timeout_ms > 0 ? sc->srv->o.io_timeout_ms : LINGER_MS;

	if (sc->state == SC_HEADER && c->in.len == 0) {
		uncount(sc);
		mu__conn_finish(c, 0, (uint64_t)linger);
		return 1;
	}
	fail_cut_short(sc, MU_EEOF);
	return 1;
}

typedef struct {
	uv_work_t work;
	mu_stage_server_t *srv;
	uint64_t owner;
} release_t;

static void release_work(uv_work_t *w)
{
	release_t *r = w->data;

	r->srv->stage->kind->release(r->srv->stage, r->owner);
}

static void release_done(uv_work_t *w, int status)
{
	(void)status;
	mu__free(w->data);
}

/* What a closed connection held on the stage (an LLM's sequences) is
 * freed off the loop: a forward of another connection may hold the
 * stage's lock for a while. */
static void release_owner(mu_stage_server_t *srv, uint64_t owner)
{
	mu_stage_t *s = srv->stage;
	release_t *r = mu__calloc(1, sizeof(*r));

	if (r == NULL) { /* rare: free them here, waiting for the lock */
		s->kind->release(s, owner);
		return;
	}
	r->srv = srv;
	r->owner = owner;
	r->work.data = r;
	if (uv_queue_work(&srv->svc.loop, &r->work, release_work, release_done) != 0) {
		s->kind->release(s, owner);
		mu__free(r);
	}
}

static void sc_close(mu__conn_t *c, int err)
{
	sconn_t *sc = (sconn_t *)c;

	if (err != 0 && err != -ETIMEDOUT)
		mu__log(MU_LOG_INFO, LOG, "%s: %s closed: %s", sc->srv->name, c->peer, mu_strerror(err));
	else
		mu__log(MU_LOG_DEBUG, LOG, "%s: %s closed", sc->srv->name, c->peer);
	mu__list_remove(&sc->node);
	if (!sc->uncounted)
		sc->srv->nconns--;
	mu__metric_add(sc->srv->m_open, NULL, -1);
	if (err == -ENOBUFS)
		mu__metric_add(sc->srv->m_cut, "budget", 1);
	if (sc->srv->stage != NULL && sc->srv->stage->kind->release != NULL)
		release_owner(sc->srv, sc->serial);
}

static void sc_free(mu__conn_t *c)
{
	sconn_t *sc = (sconn_t *)c;

	sc_reset(sc);
	mu__buf_free(&sc->text);
	if (sc->computing) {
		sc->freed = 1; /* the forward still runs: after_work_cb frees us */
		return;
	}
	mu__reply_free(&sc->reply);
	mu_tensor_list_free(&sc->in);
	mu__free(sc);
}

static const mu__conn_ops_t sc_ops = {sc_data,    sc_close, sc_free, sc_timeout,
                                      sc_alloc,   sc_direct, sc_eof};

void mu__sconn_accept(mu_stage_server_t *srv, mu_stream_t *st)
{
	sconn_t *sc = mu__calloc(1, sizeof(*sc));

	if (sc == NULL) {
		mu__stream_close(st);
		return;
	}
	sc->srv = srv;
	sc->serial = ++srv->serials;
	sc->since = mu__clock_ms();
	mu__buf_init(&sc->text, MU_MSG_MAX_TEXT + 1);
	mu_tensor_list_init(&sc->in);
	mu__reply_init(&sc->reply);
	mu__list_insert_tail(&srv->conns, &sc->node);
	srv->nconns++;
	mu__metric_add(srv->m_conns, NULL, 1);
	mu__metric_add(srv->m_open, NULL, 1); /* sc_close takes it back, even on failure */
	if (mu__conn_accept(&sc->conn, &srv->svc.loop, st, &sc_ops, 2 * sizeof(srv->scratch),
	                    srv->scratch, sizeof(srv->scratch), &srv->budget) != 0)
		return;
	mu__log(MU_LOG_INFO, LOG, "%s: connection from %s", srv->name, sc->conn.peer);
	if (srv->nconns > srv->o.max_conns)
		mu__stage_server_over_limit(srv, sc);
	if (!sc->uncounted)
		arm_timer(sc);
}
