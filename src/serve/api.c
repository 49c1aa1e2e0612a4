/* SPDX-License-Identifier: MIT */
/*
 * `muster serve`'s server (api_int.h): the loop, the routes, and turning
 * an OpenAI request into what the engine runs.
 *
 *   GET  /health                200 {"status": "ok", ...}, 503 once the
 *                               engine cannot run (a stage failed), or
 *                               while a stage is down (its name, since
 *                               when, why: "stages_down")
 *   GET  /v1/models             the one model served
 *   POST /v1/completions        prompt -> text
 *   POST /v1/chat/completions   messages -> the chat template -> text
 *   POST /apply-template        messages -> {"prompt": the rendered text}
 *                               (llama.cpp's server has it too: to see
 *                               what a chat becomes)
 *
 * Every request gets one log line when it ends: method, path, status,
 * prompt+completion tokens, milliseconds (and why it stopped).
 */
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include <openssl/crypto.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/error_int.h"
#include "core/json_int.h"
#include "core/log_int.h"
#include "core/time_int.h"
#include "serve/api_int.h"

#define LOG "serve"
#define TICK_MS 200    /* how often clients are checked for having gone */

void mu__srv_log(const char *what, int status, int32_t prompt, int32_t completion, double t0,
                 const char *note)
{
	mu__log(MU_LOG_INFO, LOG, "%s %d %d+%d tokens %.1f ms%s%s", what, status, prompt, completion,
	        mu__clock_ms() - t0, note != NULL && note[0] ? " | " : "", note != NULL ? note : "");
}

static void what_of(h2o_req_t *req, char *out, size_t n)
{
	int plen = (int)req->path_normalized.len > 60 ? 60 : (int)req->path_normalized.len;

	snprintf(out, n, "%.*s %.*s", (int)req->method.len, req->method.base, plen,
	         req->path_normalized.base);
}

void mu__srv_reply_json(h2o_req_t *req, int status, mu__buf_t *b, int32_t prompt, double t0,
                        const char *note)
{
	char what[80];

	what_of(req, what, sizeof(what));
	mu__http_send(req, status, "application/json", b->data != NULL ? b->data : "", b->len);
	mu__srv_log(what, status, prompt, 0, t0, note);
}

void mu__srv_error(mu__srv_t *s, h2o_req_t *req, const mu__oai_err_t *e, double t0)
{
	mu__buf_t b;

	(void)s;
	mu__buf_init(&b, 1 << 16);
	mu__oai_error_json(e, &b);
	mu__srv_reply_json(req, e->status, &b, 0, t0, e->message);
	mu__buf_free(&b);
}

/* ---- the routes ---- */

static int is(h2o_iovec_t v, const char *s)
{
	return v.len == strlen(s) && memcmp(v.base, s, v.len) == 0;
}

/* The stages that are down (being reconnected), as /health's
 * "stages_down"; the first one's text in first. The number of them. */
static int stages_down(mu__srv_t *s, mu__buf_t *b, char *first, size_t fl)
{
	mu__eng_down_t d;
	int n = 0;

	for (int k = 0; k < mu__eng_stages(s->eng); k++) {
		if (!mu__eng_stage_down(s->eng, k, &d))
			continue;
		if (n++ == 0)
			mu__eng_down_text(&d, first, fl);
		mu__buf_printf(b, "%s{\"stage\": %d, \"name\": ", n > 1 ? ", " : "", k);
		mu__json_dump_string(b, d.name);
		mu__buf_printf(b, ", \"since\": %lld, \"down_s\": %.1f, \"lost\": ",
		               (long long)d.since, d.down_ms / 1e3);
		mu__json_dump_string(b, d.lost);
		mu__buf_appends(b, ", \"reconnecting\": ");
		mu__json_dump_string(b, d.retry);
		mu__buf_appends(b, "}");
	}
	return n;
}

static void health(mu__srv_t *s, h2o_req_t *req, double t0)
{
	mu__buf_t b, down;
	char first[1400] = "";
	int bad;

	mu__buf_init(&down, 1 << 16);
	bad = stages_down(s, &down, first, sizeof(first)) > 0 || s->engine_error[0] != 0;
	mu__buf_init(&b, 1 << 16);
	mu__buf_printf(&b, "{\"status\": \"%s\", \"model\": ", bad ? "error" : "ok");
	mu__json_dump_string(&b, s->o.model_name);
	mu__buf_printf(&b, ", \"requests\": %d, \"preparing\": %d, \"connections\": %d, "
	               "\"served\": %" PRIu64 ", \"where\": ", s->ngens, s->npreps,
	               mu__http_conns(s->http), s->served);
	mu__json_dump_string(&b, s->o.where != NULL ? s->o.where : "");
	if (bad) {
		mu__buf_appends(&b, ", \"error\": ");
		mu__json_dump_string(&b, s->engine_error[0] ? s->engine_error : first);
	}
	if (first[0])
		mu__buf_printf(&b, ", \"stages_down\": [%.*s]", (int)down.len, down.data);
	mu__buf_appends(&b, "}");
	mu__srv_reply_json(req, bad ? 503 : 200, &b, 0, t0, NULL);
	mu__buf_free(&b);
	mu__buf_free(&down);
}

/*
 * Whether req carries "Authorization: Bearer <key>", as OpenAI's clients
 * send their API key. The comparison takes the same time wherever the
 * first difference is (CRYPTO_memcmp), so timing tells nothing of the key.
 */
static int authorized(const h2o_req_t *req, const char *key)
{
	static const char bearer[] = "Bearer ";
	size_t kl = strlen(key), bl = sizeof(bearer) - 1;
	ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1);
	const h2o_iovec_t *v;

	if (i < 0)
		return 0;
	v = &req->headers.entries[i].value;
	return v->len == bl + kl && strncasecmp(v->base, bearer, bl) == 0 &&
	       CRYPTO_memcmp(v->base + bl, key, kl) == 0;
}

static void refuse_unauthorized(h2o_req_t *req, double t0)
{
	static const h2o_iovec_t scheme = {H2O_STRLIT("Bearer")};
	struct sockaddr_storage ss;
	char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";
	socklen_t sl = req->conn->callbacks->get_peername(req->conn, (struct sockaddr *)&ss);
	int has = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1) >= 0;
	mu__oai_err_t e;

	if (sl > 0)
		getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port, sizeof(port),
		            NI_NUMERICHOST | NI_NUMERICSERV);
	mu__log(MU_LOG_WARN, LOG, "refused %s:%s: %s", host, port,
	        has ? "wrong API key" : "no API key (Authorization: Bearer)");
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_WWW_AUTHENTICATE, NULL, scheme.base,
	               scheme.len);
	mu__oai_fail(&e, 401, "invalid_request_error", NULL, "invalid_api_key", "%s",
	             has ? "Incorrect API key provided" : "This server needs an API key "
	             "(Authorization: Bearer KEY)");
	mu__srv_error(NULL, req, &e, t0);
}

static void on_req(void *ud, h2o_req_t *req)
{
	mu__srv_t *s = ud;
	double t0 = mu__clock_ms();
	h2o_iovec_t p = req->path_normalized, m = req->method;
	int post = is(m, "POST"), get = is(m, "GET");
	mu__oai_err_t e;
	mu__buf_t b;

	s->served++;
	if (s->stopping) {
		mu__oai_fail(&e, 503, "server_error", NULL, "shutting_down", "the server is stopping");
		mu__srv_error(s, req, &e, t0);
	} else if (s->o.api_key != NULL && !is(p, "/health") && !authorized(req, s->o.api_key)) {
		refuse_unauthorized(req, t0);
	} else if (is(p, "/health") && get) {
		health(s, req, t0);
	} else if (is(p, "/v1/models") && get) {
		mu__buf_init(&b, 1 << 16);
		mu__oai_models(s->o.model_name, s->started, s->o.ctx, &b);
		mu__srv_reply_json(req, 200, &b, 0, t0, NULL);
		mu__buf_free(&b);
	} else if (is(p, "/v1/completions") && post) {
		mu__prep_start(s, req, MU__PREP_COMPLETIONS, t0);
	} else if (is(p, "/v1/chat/completions") && post) {
		mu__prep_start(s, req, MU__PREP_CHAT, t0);
	} else if (is(p, "/apply-template") && post) {
		mu__prep_start(s, req, MU__PREP_TEMPLATE, t0);
	} else if (is(p, "/health") || is(p, "/v1/models") || is(p, "/v1/completions") ||
	           is(p, "/v1/chat/completions") || is(p, "/apply-template")) {
		mu__oai_fail(&e, 405, "invalid_request_error", NULL, "method_not_allowed", "%.*s is not "
		             "allowed on %.*s", (int)m.len > 16 ? 16 : (int)m.len, m.base,
		             (int)p.len > 60 ? 60 : (int)p.len, p.base);
		mu__srv_error(s, req, &e, t0);
	} else {
		mu__oai_fail(&e, 404, "invalid_request_error", NULL, "not_found", "no route %.*s %.*s "
		             "(this server has /v1/completions, /v1/chat/completions, /v1/models, "
		             "/health)", (int)m.len > 16 ? 16 : (int)m.len, m.base,
		             (int)p.len > 60 ? 60 : (int)p.len, p.base);
		mu__srv_error(s, req, &e, t0);
	}
}

/* ---- the loop ---- */

static void on_wake(uv_async_t *a)
{
	mu__srv_t *s = mu__container_of(a, mu__srv_t, wake);

	mu__gen_take_news(s);
	if (__atomic_load_n(&s->stop_asked, __ATOMIC_RELAXED) == 1 && !s->stopping)
		uv_stop(&s->loop);
}

static void on_tick(uv_timer_t *t)
{
	mu__srv_t *s = mu__container_of(t, mu__srv_t, tick);

	mu__gen_tick(s);
	mu__prep_tick(s);
}

/* The end-of-turn token of the chat template, as one id. */
static void find_eot(mu__srv_t *s)
{
	const char *t = s->have_chat ? mu__chat_end_of_turn(&s->chat) : "";
	int32_t *ids = NULL;
	size_t n = 0;

	s->eot = -1;
	if (t[0] && mu__tok_encode(s->tok, t, strlen(t), MU__TOK_SPECIAL, &ids, &n) == 0 && n == 1)
		s->eot = ids[0];
	mu__free(ids);
}

static void setup_chat(mu__srv_t *s)
{
	int32_t b = mu__tok_bos(s->tok);
	size_t ne;
	const int32_t *e = mu__tok_eos(s->tok, &ne);
	const char *bos = b >= 0 ? mu__tok_piece(s->tok, b, NULL) : "";
	const char *eos = ne > 0 ? mu__tok_piece(s->tok, e[0], NULL) : "";

	if (s->o.chat_template != NULL)
		s->have_chat = mu__chat_by_name(s->o.chat_template, bos, eos, &s->chat) == 0;
	else
		s->have_chat = mu__chat_detect(mu__tok_chat_template(s->tok), bos, eos, &s->chat,
		                               s->chat_why, sizeof(s->chat_why)) == 0;
	find_eot(s);
	if (s->have_chat)
		mu__log(MU_LOG_INFO, LOG, "chat template: %s%s", mu__chat_name(s->chat.kind),
		        s->chat.default_system != NULL ? " (with the template's default system prompt)"
		                                       : "");
	else
		mu__log(MU_LOG_INFO, LOG, "/v1/chat/completions is unavailable: %s", s->chat_why);
}

static void metrics_init(mu__srv_t *s, mu_metrics_t *m)
{
	s->m_reqs = mu__metric_family(m, MU_METRIC_COUNTER, "muster_serve_requests_total",
	                              "Completion and chat requests answered, by HTTP status "
	                              "(499: the client went away).", "status", NULL, 0);
	s->m_secs = mu__metric_family(m, MU_METRIC_HISTOGRAM, "muster_serve_request_seconds",
	                              "Time to answer a completion or chat request.", NULL,
	                              mu__metric_seconds, mu__metric_nseconds);
	s->m_prompt = mu__metric_family(m, MU_METRIC_COUNTER, "muster_serve_prompt_tokens_total",
	                                "Prompt tokens of answered requests.", NULL, NULL, 0);
	s->m_completion = mu__metric_family(m, MU_METRIC_COUNTER,
	                                    "muster_serve_completion_tokens_total",
	                                    "Tokens generated.", NULL, NULL, 0);
	s->m_running = mu__metric_family(m, MU_METRIC_GAUGE, "muster_serve_requests_running",
	                                 "Requests being generated now.", NULL, NULL, 0);
	mu__metric_touch(s->m_prompt, NULL);
	mu__metric_touch(s->m_completion, NULL);
	mu__metric_touch(s->m_running, NULL);
}

int mu__srv_new(const mu__srv_opts_t *o, mu__eng_t *e, const mu__tok_t *tok, mu__srv_t **out,
                char *why, size_t wl)
{
	mu__http_opts_t ho = {o->host, o->port, o->max_conns, o->max_per_addr,
	                      o->max_body * 4 > ((size_t)16 << 20) ? o->max_body * 4
	                                                           : (size_t)16 << 20,
	                      o->io_timeout_ms, on_req, NULL};
	mu__srv_t *s;
	int rc;

	*out = NULL;
	if ((s = mu__calloc(1, sizeof(*s))) == NULL)
		return MU_ENOMEM;
	s->o = *o;
	s->eng = e;
	s->tok = tok;
	s->started = (int64_t)time(NULL);
	metrics_init(s, o->metrics);
	mu__list_init(&s->dirty);
	mu__list_init(&s->gens);
	mu__list_init(&s->preps);
	if ((rc = uv_loop_init(&s->loop)) != 0) {
		mu__free(s);
		return mu__why(why, wl, rc, "%s", uv_strerror(rc));
	}
	uv_mutex_init(&s->lock);
	uv_async_init(&s->loop, &s->wake, on_wake);
	uv_timer_init(&s->loop, &s->tick);
	ho.ud = s;
	if ((rc = mu__http_start(&s->loop, &ho, &s->http, &s->port, why, wl)) != 0) {
		mu__srv_free(s);
		return rc;
	}
	setup_chat(s);
	uv_timer_start(&s->tick, on_tick, TICK_MS, TICK_MS);
	*out = s;
	return 0;
}

uv_loop_t *mu__srv_loop(mu__srv_t *s)
{
	return &s->loop;
}

int mu__srv_port(const mu__srv_t *s)
{
	return s->port;
}

void mu__srv_stop(mu__srv_t *s)
{
	__atomic_store_n(&s->stop_asked, 1, __ATOMIC_RELAXED);
	uv_async_send(&s->wake);
}

static void http_closed(void *ud)
{
	(void)ud; /* mu__srv_run counts connections itself */
}

int mu__srv_run(mu__srv_t *s)
{
	uv_run(&s->loop, UV_RUN_DEFAULT);
	/* Stopping: no new connections; what runs is cancelled and answered;
	 * idle connections close. A client that does not read its reply is
	 * cut off after --io-timeout (the tick). */
	s->stopping = 1;
	mu__log(MU_LOG_INFO, LOG, "stopping: %d requests running, %d connections", s->ngens,
	        mu__http_conns(s->http));
	mu__gen_cancel_all(s);
	mu__http_stop(s->http, 0, http_closed, s);
	while (s->ngens > 0 || s->npreps > 0 || mu__http_conns(s->http) > 0)
		uv_run(&s->loop, UV_RUN_ONCE);
	return 0;
}

static void closed_nothing(uv_handle_t *h)
{
	(void)h;
}

void mu__srv_free(mu__srv_t *s)
{
	if (s == NULL)
		return;
	mu__http_free(s->http);
	uv_close((uv_handle_t *)&s->wake, closed_nothing);
	uv_close((uv_handle_t *)&s->tick, closed_nothing);
	uv_run(&s->loop, UV_RUN_DEFAULT);
	if (uv_loop_close(&s->loop) != 0)
		mu__log(MU_LOG_WARN, LOG, "the loop still had handles open at exit");
	uv_mutex_destroy(&s->lock);
	if (s->have_chat)
		mu__chat_free(&s->chat);
	mu__free(s);
}
