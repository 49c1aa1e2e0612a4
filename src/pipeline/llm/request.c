/* SPDX-License-Identifier: MIT */
/*
 * Generation requests on a handle (include/muster/llm.h): the prompt to
 * ids, a request to the engine, and the engine's callbacks turned into
 * the caller's: ids into text pieces (a streaming decoder primed with
 * the prompt), its stop reasons and figures into mu_llm_stats_t.
 *
 * A request is freed by whoever sees it last: the engine's on_done for
 * mu_llm_submit's (after calling the caller's on_done), the waiting
 * caller for mu_llm_generate's (on_done only marks it done, under the
 * handle's lock).
 */
#include <stdio.h>
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/error_int.h"
#include "core/opts_int.h"
#include "llm/gen_int.h"
#include "pipeline/llm/handle_int.h"

typedef struct {
	mu_llm_t *llm;
	mu_llm_gen_opts_t g;       /* the caller's options and callbacks */
	mu__textout_t to;
	int caller_stop;           /* on_token asked to stop */
	int waited;                /* mu_llm_generate's: the caller frees it */
	int done, rc;              /* waited: under llm->lock */
	mu_llm_stats_t st;
	char why[512];
} req_t;

static void gen_defaults(mu_llm_gen_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->struct_size = sizeof(*o);
	o->max_tokens = 256;
	o->temperature = 0.8;
	o->top_k = 40;
	o->top_p = 0.95;
}

void mu_llm_gen_opts_init_size(mu_llm_gen_opts_t *o, size_t size)
{
	mu_llm_gen_opts_t d;

	gen_defaults(&d);
	mu__opts_fill(o, size, &d, sizeof(d));
}

/* ---- the engine's callbacks, on its thread ---- */

static int eng_token(void *ud, int32_t id)
{
	req_t *q = ud;
	const char *text;
	size_t n;

	mu__textout_feed(&q->to, id, &text, &n);
	if (q->g.on_token != NULL && q->g.on_token(q->g.ud, id, text, n) != 0) {
		q->caller_stop = 1;
		return 1;
	}
	return 0;
}

static void eng_logits(void *ud, const float *logits, int32_t vocab)
{
	req_t *q = ud;

	q->g.on_logits(q->g.ud, logits, vocab);
}

static mu_llm_stop_t stop_of(int stop)
{
	return stop == MU__STOP_EOS ? MU_LLM_STOP_EOS
	     : stop == MU__STOP_CTX ? MU_LLM_STOP_CONTEXT : MU_LLM_STOP_LENGTH;
}

static void req_free(req_t *q)
{
	mu__textout_free(&q->to);
	mu__free(q);
}

static void eng_done(void *ud, int rc, const char *why, int stop, const mu__gen_stats_t *st)
{
	req_t *q = ud;
	mu_llm_t *l = q->llm;
	const char *text;
	size_t n;

	mu__textout_flush(&q->to, &text, &n);
	if (!q->caller_stop && q->g.on_token != NULL && n > 0)
		q->g.on_token(q->g.ud, -1, text, n);
	q->st = (mu_llm_stats_t){st->prompt_tokens, st->new_tokens, st->decode_steps,
	                         q->caller_stop ? MU_LLM_STOP_CALLER : stop_of(stop),
	                         st->prefill_s * 1e3, st->ttft_s * 1e3, st->decode_s * 1e3};
	if (q->caller_stop)
		rc = 0;
	snprintf(q->why, sizeof(q->why), "%s", rc != 0 && why != NULL ? why : "");
	if (!q->waited) {
		if (q->g.on_done != NULL)
			q->g.on_done(q->g.ud, rc, &q->st, q->why);
		req_free(q);
		return;
	}
	uv_mutex_lock(&l->lock);
	q->rc = rc;
	q->done = 1;
	uv_cond_broadcast(&l->done);
	uv_mutex_unlock(&l->lock);
}

/* ---- starting one ---- */

static int check_gen(const mu_llm_t *l, const mu_llm_gen_opts_t *g, char *err, size_t el)
{
	const char *bad = NULL;

	if (g->max_tokens < 0)
		bad = "max_tokens must be 0 or more";
	else if (!(g->temperature >= 0 && g->temperature <= 100))
		bad = "temperature must be 0 to 100";
	else if (g->top_k < 0)
		bad = "top_k must be 0 or more";
	else if (!(g->top_p > 0 && g->top_p <= 1))
		bad = "top_p must be in (0, 1]";
	else if (g->ctx < 0 || g->ctx > l->ctx)
		return mu__why(err, el, MU_EARG, "ctx %d is over the %d positions a request may use "
		               "here", (int)g->ctx, (int)l->ctx);
	else if (g->prompt_ids != NULL && (g->nprompt_ids < 1 || g->nprompt_ids > INT32_MAX))
		bad = "prompt_ids holds no id";
	for (size_t i = 0; bad == NULL && g->prompt_ids != NULL && i < g->nprompt_ids; i++)
		if (g->prompt_ids[i] < 0 || g->prompt_ids[i] >= l->src.hp.vocab)
			return mu__why(err, el, MU_EARG, "prompt_ids[%zu] = %d is not an id of the "
			               "vocabulary (0 to %d)", i, (int)g->prompt_ids[i],
			               (int)l->src.hp.vocab - 1);
	return bad != NULL ? mu__why(err, el, MU_EARG, "%s", bad) : 0;
}

/* The prompt as ids: the caller's, or the text encoded (with BOS unless
 * no_bos). An empty prompt without BOS has nothing to start from. */
static int prompt_ids(const mu_llm_t *l, const char *text, size_t len,
                      const mu_llm_gen_opts_t *g, int32_t **ids, size_t *n, char *err,
                      size_t el)
{
	*ids = NULL;
	*n = 0;
	if (g->prompt_ids != NULL) {
		*n = g->nprompt_ids;
		*ids = mu__memdup(g->prompt_ids, *n * sizeof(int32_t));
		if (*ids == NULL)
			return mu__why(err, el, MU_ENOMEM, "out of memory");
	} else if (mu__tok_encode(l->tok.t, text != NULL ? text : "", text != NULL ? len : 0,
	                          (g->no_bos ? 0 : MU__TOK_BOS) | MU__TOK_SPECIAL, ids, n) != 0) {
		return mu__why(err, el, MU_ENOMEM, "out of memory");
	}
	if (*n == 0) {
		mu__free(*ids);
		*ids = NULL;
		return mu__why(err, el, MU_EARG, "the prompt is empty and the tokenizer adds no BOS: "
		               "there is nothing to generate from");
	}
	return 0;
}

static int start(mu_llm_t *l, const char *prompt, size_t len, const mu_llm_gen_opts_t *uo,
                 int waited, req_t **out, uint64_t *id, char *err, size_t el)
{
	mu__eng_req_t r = {0};
	int32_t *ids = NULL;
	req_t *q;
	size_t n, neos;
	int rc;

	*out = NULL;
	if ((q = mu__calloc(1, sizeof(*q))) == NULL)
		return mu__why(err, el, MU_ENOMEM, "out of memory");
	gen_defaults(&q->g);
	if (uo == NULL || mu__opts_read(&q->g, sizeof(q->g), uo) != 0) {
		mu__free(q);
		return mu__why(err, el, MU_EARG, "the generation options were not set up by "
		               "mu_llm_gen_opts_init, or set fields this library does not have");
	}
	if ((rc = check_gen(l, &q->g, err, el)) != 0 ||
	    (rc = prompt_ids(l, prompt, len, &q->g, &ids, &n, err, el)) != 0) {
		mu__free(q);
		return rc;
	}
	r.ctx = q->g.ctx > 0 ? q->g.ctx : l->ctx;
	if (n > (size_t)r.ctx) {
		mu__free(ids);
		mu__free(q);
		return mu__why(err, el, MU_ETOOBIG, "the prompt is %zu tokens; the context is %d", n,
		               (int)r.ctx);
	}
	if (mu__textout_init(&q->to, l->tok.t, ids, n) != 0) {
		mu__free(ids);
		req_free(q);
		return mu__why(err, el, MU_ENOMEM, "out of memory");
	}
	q->llm = l;
	q->waited = waited;
	r.prompt = ids;
	r.nprompt = (int32_t)n;
	r.max_tokens = q->g.max_tokens;
	r.sample = (mu__sample_opts_t){(float)q->g.temperature, q->g.top_k, (float)q->g.top_p,
	                               q->g.seed};
	r.eos = mu__tok_eos(l->tok.t, &neos);
	r.neos = neos;
	r.ignore_eos = q->g.ignore_eos;
	r.on_token = eng_token;
	r.on_done = eng_done;
	r.on_logits = q->g.on_logits != NULL ? eng_logits : NULL;
	r.ud = q;
	rc = mu__eng_submit(l->eng, &r, id);
	mu__free(ids);
	if (rc != 0) {
		req_free(q);
		return mu__why(err, el, rc, "%s", rc == MU_ESTOPPED ? "the model cannot run any more: "
		               "a stage failed before" : mu_strerror(rc));
	}
	*out = q;
	return 0;
}

int mu_llm_generate(mu_llm_t *l, const char *prompt, size_t len, const mu_llm_gen_opts_t *o,
                    mu_llm_stats_t *st, char *err, size_t el)
{
	req_t *q;
	int rc = start(l, prompt, len, o, 1, &q, NULL, err, el);

	if (rc != 0)
		return rc;
	uv_mutex_lock(&l->lock);
	while (!q->done)
		uv_cond_wait(&l->done, &l->lock);
	uv_mutex_unlock(&l->lock);
	rc = q->rc;
	if (st != NULL)
		*st = q->st;
	if (rc != 0)
		mu__why(err, el, rc, "%s", q->why[0] ? q->why : mu_strerror(rc));
	req_free(q);
	return rc;
}

int mu_llm_submit(mu_llm_t *l, const char *prompt, size_t len, const mu_llm_gen_opts_t *o,
                  uint64_t *id, char *err, size_t el)
{
	req_t *q;

	return start(l, prompt, len, o, 0, &q, id, err, el);
}

void mu_llm_cancel(mu_llm_t *l, uint64_t id)
{
	mu__eng_cancel(l->eng, id);
}

void mu_llm_drain(mu_llm_t *l)
{
	mu__eng_drain(l->eng);
}
