/* SPDX-License-Identifier: MIT */
/*
 * A request's preparation (api_int.h): its body decoded (oai.c), its chat
 * rendered (chat.c) and tokenized, its completion planned, or for
 * /apply-template the reply written, all on one of libuv's worker threads
 * (uv_queue_work), so a big body never stalls the loop: /health and the
 * streams of other clients go on meanwhile. The result is posted back to
 * the loop, which starts the generation or answers.
 *
 * The worker reads the body where h2o holds it (req->entity) and the
 * server's parts that never change after mu__srv_new (options, tokenizer,
 * chat template); it touches nothing else. h2o disposes of a request only
 * when its connection fails under a read or a write, and neither happens
 * meanwhile: h2o reads no more once a request is whole, nothing writes
 * before the result is back, and a client seen gone (the tick) is cut off
 * only then.
 *
 * Memory: the body (h2o's), cJSON's tree (at most MU__OAI_MAX_VALUES
 * nodes, and the strings once more), the rendered prompt (its exact size,
 * reserved), and the ids: a small multiple of the body.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/json_int.h"
#include "core/time_int.h"
#include "serve/api_int.h"

typedef struct {
	uv_work_t work;
	mu__list_t node;          /* s->preps */
	mu__srv_t *s;
	h2o_req_t *req;
	mu__prep_kind_t kind;
	double t0;
	int gone, probed;         /* the loop's: the client went away meanwhile */
	/* the worker's results */
	mu__oai_req_t q;
	mu__oai_err_t e;
	int failed;
	int32_t *ids;
	size_t nids;
	mu__gen_ask_t a;
	mu__buf_t out;            /* /apply-template: the reply */
} prep_t;

/* ---- on the worker ---- */

#define BYTES_PER_POS 32   /* a prompt longer than ctx x this is checked first */

/*
 * Whether text is surely over the context, found without tokenizing all
 * of it (the tokenizer holds about ten times what it reads): a prefix of
 * ctx x BYTES_PER_POS bytes, cut at a space, that already makes more
 * tokens than the context holds, with room for what the cut may have
 * split (a word, a special token), means the whole does too.
 */
static int surely_too_long(mu__srv_t *s, const char *text, size_t len, int flags, size_t *ntok)
{
	size_t cut = (size_t)s->o.ctx * BYTES_PER_POS, k, n = 0;
	int32_t *ids = NULL;
	int over;

	if (len <= cut)
		return 0;
	for (k = cut; k > cut - 256 && text[k] != ' ' && text[k] != '\n'; k--)
		;
	if (text[k] != ' ' && text[k] != '\n')
		for (k = cut; k > 0 && ((unsigned char)text[k] & 0xC0) == 0x80; k--)
			;
	if (mu__tok_encode(s->tok, text, k, flags, &ids, &n) != 0)
		return 0;
	mu__free(ids);
	over = n > (size_t)s->o.ctx + (size_t)s->o.ctx / 8 + 256;
	*ntok = n;
	return over;
}

static int encode(mu__srv_t *s, const char *text, size_t len, int flags, int32_t **ids,
                  size_t *n, mu__oai_err_t *e)
{
	size_t part = 0;

	if (surely_too_long(s, text, len, flags, &part))
		return mu__oai_fail(e, 400, "invalid_request_error", "messages",
		                    "context_length_exceeded", "This model's maximum context length is "
		                    "%d tokens. However, the prompt holds more: its first %zu of %zu "
		                    "bytes are already %zu tokens. Please reduce the prompt.", s->o.ctx,
		                    (size_t)s->o.ctx * BYTES_PER_POS, len, part);
	if (mu__tok_encode(s->tok, text, len, flags, ids, n) != 0)
		return mu__oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
	return 0;
}

/* Bytes the chat renders to at most: every content, and room for the
 * template's own text per message. */
static size_t render_size(const mu__oai_req_t *q)
{
	size_t n = 4096;

	for (int i = 0; i < q->nmsgs; i++)
		n += q->msgs[i].content_len + q->msgs[i].reasoning_len + 256;
	return n;
}

/* The chat's prompt text into text (ids NULL), or its ids. */
static int chat_prompt(mu__srv_t *s, const mu__oai_req_t *q, int32_t **ids, size_t *n,
                       mu__buf_t *text, mu__oai_err_t *e)
{
	mu__chat_opts_t co = {q->enable_thinking};
	char why[600] = "";
	mu__buf_t own, *b = text != NULL ? text : &own;
	int rc;

	if (!s->have_chat)
		return mu__oai_fail(e, s->chat_why[0] && strstr(s->chat_why, "no chat template") ? 400
		                                                                                   : 501,
		                    "invalid_request_error", "messages", "chat_template_unsupported",
		                    "%s", s->chat_why);
	mu__buf_init(&own, (size_t)64 << 20);
	/* One allocation of the right size, not a doubling that may hold
	 * twice the prompt. */
	if (mu__buf_reserve(b, render_size(q)) == MU_ENOMEM)
		return mu__oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
	rc = mu__chat_render(&s->chat, q->msgs, q->nmsgs, &co, b, why, sizeof(why));
	if (rc != 0)
		mu__oai_fail(e, 400, "invalid_request_error", "messages", NULL, "%s", why);
	else if (text == NULL)
		rc = encode(s, b->data != NULL ? b->data : "", b->len, MU__TOK_SPECIAL, ids, n, e);
	mu__buf_free(&own);
	return rc != 0 ? -1 : 0;
}

static int prompt_ids(mu__srv_t *s, const mu__oai_req_t *q, int32_t **ids, size_t *n,
                      mu__oai_err_t *e)
{
	*ids = NULL;
	*n = 0;
	if (q->kind == MU__OAI_CHAT)
		return chat_prompt(s, q, ids, n, NULL, e);
	if (q->prompt_ids != NULL) {
		*ids = mu__memdup(q->prompt_ids, q->nprompt_ids * sizeof(int32_t));
		*n = q->nprompt_ids;
		return *ids != NULL ? 0 : mu__oai_fail(e, 500, "server_error", NULL, NULL, "out of "
		                                       "memory");
	}
	return encode(s, q->prompt, q->prompt_len, (s->o.no_bos ? 0 : MU__TOK_BOS) | MU__TOK_SPECIAL,
	              ids, n, e);
}

/* The completion's length and the sampling options. */
static int plan(mu__srv_t *s, const mu__oai_req_t *q, size_t n, mu__gen_ask_t *a,
                mu__oai_err_t *e)
{
	int64_t room = (int64_t)s->o.ctx - (int64_t)n;

	if (n == 0)
		return mu__oai_fail(e, 400, "invalid_request_error", "prompt", NULL, "the prompt is "
		                    "empty and the model's tokenizer adds no BOS: nothing to generate from");
	if (room < 1 || (q->max_tokens > 0 && q->max_tokens > room))
		return mu__oai_fail(e, 400, "invalid_request_error",
		                    q->max_tokens > 0 ? "max_tokens" : "messages",
		                    "context_length_exceeded", "This model's maximum context length is "
		                    "%d tokens. However, you requested %" PRId64 " tokens (%zu in the "
		                    "prompt, %" PRId64 " for the completion). Please reduce the prompt "
		                    "or the completion length.", s->o.ctx,
		                    (int64_t)n + (q->max_tokens > 0 ? q->max_tokens : 1), n,
		                    q->max_tokens > 0 ? q->max_tokens : 1);
	a->max_tokens = (int32_t)(q->max_tokens > 0 ? q->max_tokens
	                          : s->o.max_tokens > 0 && s->o.max_tokens < room ? s->o.max_tokens
	                          : room);
	a->sample = s->o.sample;
	if (q->has_temperature)
		a->sample.temperature = (float)q->temperature;
	if (q->has_top_k)
		a->sample.top_k = q->top_k;
	if (q->has_top_p) {
		/* top_p 0 keeps only the likeliest token. */
		a->sample.top_p = q->top_p > 0 ? (float)q->top_p : 1.0f;
		if (q->top_p == 0)
			a->sample.temperature = 0;
	}
	if (q->has_seed)
		a->sample.seed = q->seed;
	else if (!s->o.have_seed && getrandom(&a->sample.seed, sizeof(a->sample.seed), 0) !=
	         (ssize_t)sizeof(a->sample.seed))
		a->sample.seed = (uint64_t)mu__clock_ms();
	return 0;
}

static int template_reply(mu__srv_t *s, prep_t *p)
{
	mu__buf_t text;
	int rc;

	mu__buf_init(&text, (size_t)64 << 20);
	rc = chat_prompt(s, &p->q, NULL, NULL, &text, &p->e);
	if (rc == 0 && (mu__buf_reserve(&p->out, text.len + text.len / 8 + 64) == MU_ENOMEM ||
	                mu__buf_appends(&p->out, "{\"prompt\": ") != 0 ||
	                mu__json_dump_stringn(&p->out, text.data != NULL ? text.data : "",
	                                      text.len) != 0 ||
	                mu__buf_appends(&p->out, "}") != 0))
		rc = mu__oai_fail(&p->e, 500, "server_error", NULL, NULL, "out of memory");
	mu__buf_free(&text);
	return rc;
}

static void prep_work(uv_work_t *w)
{
	prep_t *p = mu__container_of(w, prep_t, work);
	mu__srv_t *s = p->s;
	h2o_req_t *req = p->req;
	mu__oai_kind_t kind = p->kind == MU__PREP_COMPLETIONS ? MU__OAI_COMPLETIONS : MU__OAI_CHAT;
	const mu__oai_req_t *q = &p->q;

	p->failed = 1;
	if (mu__oai_decode(kind, req->entity.base != NULL ? req->entity.base : "",
	                   req->entity.len, mu__tok_vocab_size(s->tok), &p->q, &p->e) != 0)
		return;
	if (p->kind == MU__PREP_TEMPLATE) {
		p->failed = template_reply(s, p) != 0;
		return;
	}
	if ((q->model != NULL && strcmp(q->model, s->o.model_name) != 0 &&
	     mu__oai_fail(&p->e, 404, "invalid_request_error", "model", "model_not_found", "The "
	                  "model `%.200s` does not exist: this server serves `%s`", q->model,
	                  s->o.model_name)) ||
	    prompt_ids(s, q, &p->ids, &p->nids, &p->e) != 0 || plan(s, q, p->nids, &p->a, &p->e) != 0)
		return;
	p->a.kind = kind;
	p->a.stream = q->stream;
	p->a.include_usage = q->include_usage;
	p->a.ids = p->ids;
	p->a.nids = p->nids;
	p->a.stop = q->stop;
	p->a.nstop = q->nstop;
	p->failed = 0;
}

/* ---- on the loop ---- */

static void prep_free(prep_t *p)
{
	mu__oai_req_free(&p->q);
	mu__free(p->ids);
	mu__buf_free(&p->out);
	mu__free(p);
}

static void prep_done(uv_work_t *w, int status)
{
	prep_t *p = mu__container_of(w, prep_t, work);
	mu__srv_t *s = p->s;
	h2o_req_t *req = p->req;

	mu__list_remove(&p->node);
	s->npreps--;
	if (status != 0) {
		mu__oai_fail(&p->e, 500, "server_error", NULL, NULL, "cannot prepare the request: %s",
		             uv_strerror(status));
		p->failed = 1;
	}
	if (p->gone) {
		char what[80];

		snprintf(what, sizeof(what), "%.*s %.*s", (int)req->method.len, req->method.base,
		         (int)req->path_normalized.len > 60 ? 60 : (int)req->path_normalized.len,
		         req->path_normalized.base);
		mu__srv_log(what, 499, 0, 0, p->t0, "client went away while its request was prepared");
		mu__http_abort(req);
		mu__http_send(req, 499, "text/plain", "", 0);
	} else if (s->stopping) {
		mu__oai_fail(&p->e, 503, "server_error", NULL, "shutting_down", "the server is "
		             "stopping");
		mu__srv_error(s, req, &p->e, p->t0);
	} else if (p->failed) {
		mu__srv_error(s, req, &p->e, p->t0);
	} else if (p->kind == MU__PREP_TEMPLATE) {
		mu__srv_reply_json(req, 200, &p->out, 0, p->t0, NULL);
	} else {
		mu__gen_start(s, req, &p->a, p->t0);
	}
	prep_free(p);
}

void mu__prep_start(mu__srv_t *s, h2o_req_t *req, mu__prep_kind_t kind, double t0)
{
	prep_t *p;
	mu__oai_err_t e;
	int rc;

	if (req->entity.len > s->o.max_body) {
		mu__oai_fail(&e, 413, "invalid_request_error", NULL, "request_too_large", "the body is "
		             "%zu bytes; this server takes at most %zu (--max-body)", req->entity.len,
		             s->o.max_body);
		mu__srv_error(s, req, &e, t0);
		return;
	}
	if ((p = mu__calloc(1, sizeof(*p))) == NULL) {
		mu__oai_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
		mu__srv_error(s, req, &e, t0);
		return;
	}
	p->s = s;
	p->req = req;
	p->kind = kind;
	p->t0 = t0;
	mu__buf_init(&p->out, (size_t)128 << 20);
	if ((rc = uv_queue_work(&s->loop, &p->work, prep_work, prep_done)) != 0) {
		prep_free(p);
		mu__oai_fail(&e, 500, "server_error", NULL, NULL, "cannot prepare the request: %s",
		             uv_strerror(rc));
		mu__srv_error(s, req, &e, t0);
		return;
	}
	mu__list_insert_tail(&s->preps, &p->node);
	s->npreps++;
}

void mu__prep_tick(mu__srv_t *s)
{
	mu__list_t *it;

	mu__list_foreach(it, &s->preps) {
		prep_t *p = mu__container_of(it, prep_t, node);

		if (!p->gone && mu__http_peer_gone(p->req, 0, &p->probed))
			p->gone = 1;
	}
}
