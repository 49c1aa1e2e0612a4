/* SPDX-License-Identifier: MIT */
/*
 * One generation behind an HTTP request (api_int.h).
 *
 * A gen_t is held by two parties: the engine (from mu__eng_submit until
 * its on_done has been taken by the loop: eng_done) and h2o (until it
 * disposes of the request: req == NULL). It is freed, on the loop, when
 * both have let go. Its fields are in three groups: the engine thread's
 * (the text decoder and the stop scanner), the shared ones (under the
 * server's lock: text not yet taken, the end), and the loop's.
 *
 * A client that goes away (its connection is reset or closed while we
 * compute, mu__http_peer_gone; it fails under a write; or it stops reading
 * for io_timeout)
 * gets its sequence cancelled at once (mu__eng_cancel), so the engine
 * frees its KV cache on every stage; the request is logged with status
 * 499 once the engine has let go.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/log_int.h"
#include "core/rand_int.h"
#include "core/time_int.h"
#include "serve/api_int.h"

#define LOG "serve"
#define STREAM_BUDGET ((size_t)1 << 20) /* bytes queued for a client not reading */

typedef struct {
	mu__list_t node;          /* s->gens */
	mu__list_t dnode;         /* s->dirty, while on_dirty */
	mu__srv_t *s;
	h2o_req_t *req;           /* NULL once h2o disposed of it */
	void **slot;
	h2o_generator_t hgen;
	uint64_t eid;
	char id[48];
	char what[80];            /* "POST /v1/completions", for the log */
	mu__oai_head_t head;
	int stream, include_usage;
	int32_t nprompt;
	double t0;
	/* the engine's thread */
	mu__textout_t to;
	int stop_hit;
	/* shared: under s->lock */
	mu__stopscan_t scan;      /* fed on the engine's thread, writes inbox */
	mu__buf_t inbox;
	int on_dirty, done, rc;
	int32_t ntok;
	const char *finish;
	char why[300];
	/* the loop's */
	int eng_done, gone, status, first_sent, final_queued, final_sent, sending, probed;
	double send_t0;
	mu__buf_t text, pend, wire;
} gen_t;

/* ---- the engine's side ---- */

static void mark_dirty(gen_t *g)
{
	if (!g->on_dirty) {
		g->on_dirty = 1;
		mu__list_insert_tail(&g->s->dirty, &g->dnode);
	}
}

static int gen_token(void *ud, int32_t id)
{
	gen_t *g = ud;
	mu__srv_t *s = g->s;
	const char *t;
	size_t n;
	int hit;

	mu__textout_feed(&g->to, id, &t, &n);
	uv_mutex_lock(&s->lock);
	hit = mu__stopscan_feed(&g->scan, t, n, &g->inbox);
	g->ntok++;
	mark_dirty(g);
	uv_async_send(&s->wake);
	uv_mutex_unlock(&s->lock);
	if (hit == 1)
		g->stop_hit = 1;
	/* A stop string, or text the loop has not taken piling up. */
	return hit != 0;
}

static void gen_done(void *ud, int rc, const char *why, int stop, const mu__gen_stats_t *st)
{
	gen_t *g = ud;
	mu__srv_t *s = g->s; /* g may be freed once the lock is let go */
	const char *t;
	size_t n;

	uv_mutex_lock(&s->lock);
	if (!g->stop_hit) {
		mu__textout_flush(&g->to, &t, &n);
		if (mu__stopscan_feed(&g->scan, t, n, &g->inbox) == 1)
			g->stop_hit = 1;
		mu__stopscan_flush(&g->scan, &g->inbox);
	}
	g->done = 1;
	g->rc = g->stop_hit ? 0 : rc;
	g->finish = g->stop_hit || stop == MU__STOP_EOS ? "stop" : "length";
	g->ntok = st->new_tokens;
	snprintf(g->why, sizeof(g->why), "%s", why != NULL ? why : "");
	mark_dirty(g);
	/* Under the lock: once the loop takes this news it may free g, and
	 * once every gen is gone the server (and its wake) may go. */
	uv_async_send(&s->wake);
	uv_mutex_unlock(&s->lock);
}

/* ---- the loop's side ---- */

static void gen_free(gen_t *g)
{
	mu__srv_t *s = g->s;
	const char *note = g->gone ? "client went away, sequence cancelled" : g->rc != 0 ? g->why
	                   : g->finish;

	mu__srv_log(g->what, g->gone ? 499 : g->status, g->nprompt, g->ntok, g->t0, note);
	if (s->m_reqs != NULL) {
		char code[16];

		snprintf(code, sizeof(code), "%d", g->gone ? 499 : g->status);
		mu__metric_add(s->m_reqs, code, 1);
		mu__metric_observe(s->m_secs, NULL, (mu__clock_ms() - g->t0) / 1000.0);
		mu__metric_add(s->m_prompt, NULL, g->nprompt);
		mu__metric_add(s->m_completion, NULL, g->ntok);
	}
	mu__list_remove(&g->node);
	s->ngens--;
	mu__metric_set(s->m_running, NULL, s->ngens);
	mu__textout_free(&g->to);
	mu__stopscan_free(&g->scan);
	mu__buf_free(&g->inbox);
	mu__buf_free(&g->text);
	mu__buf_free(&g->pend);
	mu__buf_free(&g->wire);
	mu__free(g);
}

/* The client went away or stopped reading: cancel, and make h2o close
 * the connection so it disposes of the request. */
static void abandon(gen_t *g, const char *why)
{
	if (g->gone)
		return;
	g->gone = 1;
	mu__log(MU_LOG_INFO, LOG, "%s: %s after %d tokens; cancelling its sequence", g->id, why,
	        g->ntok);
	if (!g->eng_done)
		mu__eng_cancel(g->s->eng, g->eid);
	if (g->req != NULL)
		mu__http_abort(g->req);
}

static void pump(gen_t *g)
{
	h2o_iovec_t iov;
	mu__buf_t t;

	if (g->req == NULL || g->sending || g->final_sent || g->pend.len == 0)
		return;
	t = g->wire;
	g->wire = g->pend;
	g->pend = t;
	mu__buf_reset(&g->pend);
	iov = h2o_iovec_init(g->wire.data, g->wire.len);
	g->sending = 1;
	g->send_t0 = mu__clock_ms();
	g->final_sent = g->final_queued;
	h2o_send(g->req, &iov, 1, g->final_queued ? H2O_SEND_STATE_FINAL
	                                          : H2O_SEND_STATE_IN_PROGRESS);
}

static void on_proceed(h2o_generator_t *hg, h2o_req_t *req)
{
	gen_t *g = mu__container_of(hg, gen_t, hgen);

	(void)req;
	g->sending = 0;
	mu__buf_reset(&g->wire);
	pump(g);
}

static void on_stop(h2o_generator_t *hg, h2o_req_t *req)
{
	/* h2o disposes of the request next: on_dispose does the work. */
	(void)hg;
	(void)req;
}

/* Why a generation failed, as the API reports it. */
static void failed(const gen_t *g, mu__oai_err_t *e)
{
	if (g->s->stopping)
		mu__oai_fail(e, 503, "server_error", NULL, "shutting_down", "the server is stopping");
	else if (g->rc == MU__ENG_EDOWN) /* a stage is down: /health says which */
		mu__oai_fail(e, 503, "server_error", NULL, "stage_down", "%s", g->why);
	else
		mu__oai_fail(e, 500, "server_error", NULL, NULL, "generation failed: %s", g->why);
}

static void stream_advance(gen_t *g)
{
	mu__oai_usage_t u = {g->nprompt, g->ntok};
	int rc = 0;

	if (g->gone)
		mu__buf_reset(&g->text);
	if (g->text.len > 0 || (!g->first_sent && g->head.kind == MU__OAI_CHAT)) {
		rc = mu__oai_chunk(&g->head, g->text.data, g->text.len, !g->first_sent, NULL,
		                   g->include_usage, &g->pend);
		g->first_sent = 1;
		mu__buf_reset(&g->text);
	}
	if (rc == 0 && g->eng_done && !g->final_queued) {
		if (g->rc != 0 && !g->gone) {
			mu__oai_err_t e;

			failed(g, &e);
			rc = mu__buf_appends(&g->pend, "data: ");
			rc = rc ? rc : mu__oai_error_json(&e, &g->pend);
			rc = rc ? rc : mu__buf_appends(&g->pend, "\n\n");
		} else {
			rc = mu__oai_chunk(&g->head, "", 0, !g->first_sent, g->finish, g->include_usage,
			                   &g->pend);
			if (rc == 0 && g->include_usage)
				rc = mu__oai_usage_chunk(&g->head, &u, &g->pend);
		}
		rc = rc ? rc : mu__buf_appends(&g->pend, "data: [DONE]\n\n");
		g->final_queued = 1;
	}
	if (rc != 0) {
		/* Past the budget: a client that does not read its events. */
		g->final_queued = 1;
		abandon(g, "stopped reading (over its stream budget)");
		return;
	}
	pump(g);
}

static void whole_reply(gen_t *g)
{
	mu__oai_usage_t u = {g->nprompt, g->ntok};
	mu__buf_t out;
	int rc;

	if (g->gone) {
		/* The connection is shut down: this write fails and h2o lets go. */
		mu__http_send(g->req, 499, "text/plain", "", 0);
		return;
	}
	mu__buf_init(&out, (size_t)1 << 30);
	if (g->rc != 0) {
		mu__oai_err_t e;

		failed(g, &e);
		rc = mu__oai_error_json(&e, &out);
		g->status = e.status;
	} else {
		rc = mu__oai_result(&g->head, g->text.data != NULL ? g->text.data : "", g->text.len,
		                    g->finish, &u, &out);
		g->status = 200;
	}
	if (rc != 0) {
		g->status = 500;
		mu__buf_reset(&out);
		mu__buf_appends(&out, "{\"error\": {\"message\": \"out of memory\", \"type\": "
		                "\"server_error\", \"param\": null, \"code\": null}}");
	}
	mu__http_send(g->req, g->status, "application/json", out.data != NULL ? out.data : "",
	              out.len);
	mu__buf_free(&out);
}

static void advance(gen_t *g)
{
	if (g->req == NULL) {
		if (g->eng_done)
			gen_free(g);
		return;
	}
	if (g->eng_done && g->rc != 0 && g->rc != MU_ESTOPPED)
		snprintf(g->s->last_error, sizeof(g->s->last_error), "%s", g->why);
	if (g->stream)
		stream_advance(g);
	else if (g->eng_done)
		whole_reply(g);
}

void mu__gen_take_news(mu__srv_t *s)
{
	for (;;) {
		gen_t *g;
		int rc;

		uv_mutex_lock(&s->lock);
		if (mu__list_empty(&s->dirty)) {
			uv_mutex_unlock(&s->lock);
			return;
		}
		g = mu__container_of(mu__list_head(&s->dirty), gen_t, dnode);
		mu__list_remove(&g->dnode);
		g->on_dirty = 0;
		rc = mu__buf_append(&g->text, g->inbox.data, g->inbox.len);
		mu__buf_reset(&g->inbox);
		if (g->done)
			g->eng_done = 1;
		uv_mutex_unlock(&s->lock);
		if (rc != 0)
			abandon(g, "produced more text than a reply may hold");
		advance(g);
	}
}

/* h2o is done with the request (replied, or its connection closed). */
static void on_dispose(void *slot)
{
	gen_t *g = *(gen_t **)slot;

	if (g == NULL)
		return;
	g->req = NULL;
	if (!g->eng_done)
		abandon(g, "connection closed");
	else
		gen_free(g);
}

void mu__gen_tick(mu__srv_t *s)
{
	double now = mu__clock_ms();
	mu__list_t *it;

	mu__list_foreach(it, &s->gens) {
		gen_t *g = mu__container_of(it, gen_t, node);

		if (g->req == NULL || g->gone)
			continue;
		if (!g->eng_done &&
		    mu__http_peer_gone(g->req, g->first_sent || g->sending || g->final_sent,
		                       &g->probed))
			abandon(g, "client closed the connection");
		else if (g->sending && now - g->send_t0 > s->o.io_timeout_ms)
			abandon(g, "client stopped reading (--io-timeout)");
	}
}

void mu__gen_cancel_all(mu__srv_t *s)
{
	mu__list_t *it;

	mu__list_foreach(it, &s->gens) {
		gen_t *g = mu__container_of(it, gen_t, node);

		if (!g->eng_done)
			mu__eng_cancel(s->eng, g->eid);
	}
}

/* The engine's stop ids: the tokenizer's EOS ids and the template's
 * end-of-turn (into v, at most cap). */
static size_t stop_ids(const mu__srv_t *s, int32_t *v, size_t cap)
{
	size_t n, i, k = 0;
	const int32_t *e = mu__tok_eos(s->tok, &n);

	for (i = 0; i < n && k < cap; i++)
		v[k++] = e[i];
	for (i = 0; i < k && v[i] != s->eot; i++)
		;
	if (s->eot >= 0 && i == k && k < cap)
		v[k++] = s->eot;
	return k;
}

static int gen_init(mu__srv_t *s, gen_t *g, const mu__gen_ask_t *a, double t0)
{
	uint64_t r = 0;

	g->s = s;
	g->t0 = t0;
	g->stream = a->stream;
	g->include_usage = a->include_usage;
	g->nprompt = (int32_t)a->nids;
	mu__random_bytes(&r, sizeof(r));
	snprintf(g->id, sizeof(g->id), "%s-%016" PRIx64 "%06" PRIx64,
	         a->kind == MU__OAI_CHAT ? "chatcmpl" : "cmpl", r, ++s->next_id & 0xffffff);
	g->head = (mu__oai_head_t){a->kind, g->id, (int64_t)time(NULL), s->o.model_name};
	mu__buf_init(&g->inbox, (size_t)16 << 20);
	mu__buf_init(&g->text, (size_t)64 << 20);
	mu__buf_init(&g->pend, STREAM_BUDGET);
	mu__buf_init(&g->wire, STREAM_BUDGET);
	g->hgen.proceed = on_proceed;
	g->hgen.stop = on_stop;
	if (mu__textout_init(&g->to, s->tok, a->ids, a->nids) != 0)
		return MU_ENOMEM;
	return mu__stopscan_init(&g->scan, a->stop, a->nstop);
}

static void refused(mu__srv_t *s, h2o_req_t *req, gen_t *g, int rc, double t0)
{
	mu__oai_err_t e;

	if (g != NULL) {
		mu__textout_free(&g->to);
		mu__stopscan_free(&g->scan);
		mu__free(g);
	}
	if (rc == MU_ESTOPPED)
		mu__oai_fail(&e, 503, "server_error", NULL, "engine_stopped", "the model cannot run "
		             "any more: %s", s->engine_error[0] ? s->engine_error : "a stage failed");
	else if (rc == MU_EARG)
		mu__oai_fail(&e, 400, "invalid_request_error", NULL, "context_length_exceeded",
		             "the prompt does not fit the context");
	else
		mu__oai_fail(&e, 500, "server_error", NULL, NULL, "cannot start: %s", mu_strerror(rc));
	if (rc == MU_ESTOPPED && !s->engine_error[0])
		snprintf(s->engine_error, sizeof(s->engine_error), "%s",
		         s->last_error[0] ? s->last_error : "a stage failed");
	mu__srv_error(s, req, &e, t0);
}

void mu__gen_start(mu__srv_t *s, h2o_req_t *req, const mu__gen_ask_t *a, double t0)
{
	static const h2o_iovec_t sse = {H2O_STRLIT("text/event-stream")};
	static const h2o_iovec_t nocache = {H2O_STRLIT("no-cache")};
	gen_t *g = mu__calloc(1, sizeof(*g));
	int32_t eos[64];
	mu__eng_req_t q = {0};
	int rc;

	if (g == NULL || gen_init(s, g, a, t0) != 0) {
		refused(s, req, g, MU_ENOMEM, t0);
		return;
	}
	q.prompt = a->ids;
	q.nprompt = (int32_t)a->nids;
	q.ctx = (int32_t)a->nids + a->max_tokens;
	q.max_tokens = a->max_tokens;
	q.sample = a->sample;
	q.eos = eos;
	q.neos = stop_ids(s, eos, 64);
	q.ignore_eos = s->o.ignore_eos;
	q.on_token = gen_token;
	q.on_done = gen_done;
	q.ud = g;
	if ((rc = mu__eng_submit(s->eng, &q, &g->eid)) != 0) {
		refused(s, req, g, rc, t0);
		return;
	}
	snprintf(g->what, sizeof(g->what), "%.*s %.*s", (int)req->method.len, req->method.base,
	         (int)req->path_normalized.len > 60 ? 60 : (int)req->path_normalized.len,
	         req->path_normalized.base);
	g->req = req;
	g->slot = mu__http_on_dispose(req, on_dispose);
	*g->slot = g;
	mu__list_insert_tail(&s->gens, &g->node);
	s->ngens++;
	mu__metric_set(s->m_running, NULL, s->ngens);
	if (!g->stream)
		return;
	g->status = 200;
	req->res.status = 200;
	req->res.reason = "OK";
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, sse.base, sse.len);
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, nocache.base,
	               nocache.len);
	/*
	 * A stream ends its connection ("Connection: close"). Debian 12's
	 * Node.js (18.20.4+dfsg-1~deb12u3) under node-fetch 2, which the
	 * openai@4 client uses, fails every chunked response on a kept-alive
	 * connection with "Premature close", whatever the server (Python's
	 * http.server too); with the connection closing it reads the stream
	 * whole. One TCP connection per stream costs nothing next to the
	 * tokens it carries; whole (non-stream) replies stay kept-alive.
	 */
	req->http1_is_persistent = 0;
	h2o_start_response(req, &g->hgen);
	/* Chat streams open with the assistant's role, so the client sees the
	 * reply start before the first token. */
	if (a->kind == MU__OAI_CHAT)
		stream_advance(g);
}
