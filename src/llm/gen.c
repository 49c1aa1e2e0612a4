/* SPDX-License-Identifier: MIT */
/*
 * The generation loop over a chain (llm/gen_int.h), and the chain of a
 * decoder in this process.
 */
#include <errno.h>
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/error_int.h"
#include "core/time_int.h"
#include "llm/gen_int.h"

static int local_open(void *ud, uint64_t id, int32_t ctx, char *why, size_t wl)
{
	return mu__dec_seq_open(ud, 0, id, ctx, why, wl);
}

static int local_forward(void *ud, uint64_t id, int32_t pos, int32_t n, const int32_t *tokens,
                         float *logits, char *why, size_t wl)
{
	return mu__dec_forward(ud, 0, id, pos, n, tokens, NULL, logits, 0, why, wl);
}

static void local_close(void *ud, uint64_t id)
{
	mu__dec_seq_close(ud, 0, id);
}

void mu__chain_local(mu__chain_t *c, mu__dec_t *d, int32_t max_chunk)
{
	c->open = local_open;
	c->forward = local_forward;
	c->close = local_close;
	c->ud = d;
	c->max_chunk = max_chunk;
	c->vocab = mu__dec_hp(d)->vocab;
}

static double now_s(void)
{
	return mu__clock_ms() / 1e3;
}

static int is_eos(const mu__tok_t *tok, int32_t id)
{
	size_t n, i;
	const int32_t *e = mu__tok_eos(tok, &n);

	for (i = 0; i < n; i++)
		if (e[i] == id)
			return 1;
	return 0;
}

/* The prompt as ids: the caller's, or the text encoded (with BOS unless
 * no_bos). An empty prompt without BOS has nothing to start from. */
static int prompt_ids(const mu__tok_t *tok, const char *text, size_t len,
                      const mu__gen_opts_t *o, int32_t **ids, size_t *n, char *why, size_t wl)
{
	if (o->prompt_ids != NULL) {
		*n = (size_t)o->nprompt_ids;
		*ids = mu__memdup(o->prompt_ids, *n * sizeof(int32_t));
		if (*ids == NULL)
			return MU_ENOMEM;
	} else if (mu__tok_encode(tok, text, len, (o->no_bos ? 0 : MU__TOK_BOS) | MU__TOK_SPECIAL,
	                          ids, n) != 0) {
		return MU_ENOMEM;
	}
	if (*n == 0) {
		mu__free(*ids);
		*ids = NULL;
		return mu__why(why, wl, MU_EARG, "the prompt is empty and the tokenizer adds no BOS: "
		               "there is nothing to generate from");
	}
	return 0;
}

/* Prefill the prompt in chunks; logits of its last position. */
static int prefill(const mu__chain_t *c, uint64_t id, const int32_t *ids, int32_t n,
                   float *logits, char *why, size_t wl)
{
	int32_t pos, k;
	int rc;

	for (pos = 0; pos < n; pos += k) {
		k = n - pos < c->max_chunk ? n - pos : c->max_chunk;
		if ((rc = c->forward(c->ud, id, pos, k, ids + pos, logits, why, wl)) != 0)
			return rc;
	}
	return 0;
}

int mu__textout_init(mu__textout_t *o, const mu__tok_t *t, const int32_t *prompt, size_t n)
{
	const char *s;
	size_t len, i;

	mu__tok_stream_init(&o->ts, t);
	o->cap = mu__tok_stream_cap(t);
	if ((o->buf = mu__malloc(o->cap)) == NULL)
		return MU_ENOMEM;
	for (i = 0; i < n; i++)
		mu__textout_feed(o, prompt[i], &s, &len);
	return 0;
}

void mu__textout_feed(mu__textout_t *o, int32_t id, const char **text, size_t *len)
{
	*len = 0;
	*text = o->buf;
	mu__tok_stream_feed(&o->ts, id, o->buf, o->cap, len);
}

void mu__textout_flush(mu__textout_t *o, const char **text, size_t *len)
{
	*len = 0;
	*text = o->buf;
	mu__tok_stream_flush(&o->ts, o->buf, o->cap, len);
}

void mu__textout_free(mu__textout_t *o)
{
	mu__free(o->buf);
	o->buf = NULL;
}

static void emit(const mu__gen_opts_t *o, mu__textout_t *to, int32_t id)
{
	const char *text;
	size_t tn;

	if (id >= 0)
		mu__textout_feed(to, id, &text, &tn);
	else
		mu__textout_flush(to, &text, &tn);
	if (o->on_token != NULL && (id >= 0 || tn > 0))
		o->on_token(o->ud, id, text, tn);
}

static int decode_loop(const mu__chain_t *c, const mu__tok_t *tok, const mu__gen_opts_t *o,
                       mu__sampler_t *sm, float *logits, int32_t pos, double t0,
                       mu__gen_stats_t *st, mu__textout_t *ts, char *why, size_t wl)
{
	int32_t next;
	double t;
	int rc;

	for (;;) {
		if (o->on_logits != NULL)
			o->on_logits(o->ud, logits, c->vocab);
		next = mu__sample(sm, logits);
		if (st->new_tokens == 0)
			st->ttft_s = now_s() - t0;
		if (!o->ignore_eos && is_eos(tok, next)) {
			st->stop = MU__STOP_EOS;
			return 0;
		}
		st->new_tokens++;
		emit(o, ts, next);
		if (st->new_tokens >= o->max_tokens) {
			st->stop = MU__STOP_LENGTH;
			return 0;
		}
		if (pos >= o->ctx) {
			st->stop = MU__STOP_CTX;
			return 0;
		}
		t = now_s();
		rc = c->forward(c->ud, o->seq_id, pos, 1, &next, logits, why, wl);
		st->decode_s += now_s() - t;
		st->decode_steps++;
		if (rc != 0)
			return rc;
		pos++;
	}
}

int mu__generate(const mu__chain_t *c, const mu__tok_t *tok, const char *prompt,
                 size_t len, const mu__gen_opts_t *o, mu__gen_stats_t *st,
                 char *why, size_t wl)
{
	int32_t *ids = NULL;
	float *logits = NULL;
	mu__textout_t to = {0};
	mu__sampler_t sm;
	double t0 = now_s();
	size_t n = 0;
	int rc;

	memset(st, 0, sizeof(*st));
	if ((rc = prompt_ids(tok, prompt, len, o, &ids, &n, why, wl)) != 0)
		return rc;
	st->prompt_tokens = (int32_t)n;
	if (n > (size_t)o->ctx) {
		mu__free(ids);
		return mu__why(why, wl, MU_ETOOBIG, "the prompt is %zu tokens; the context is %d (--ctx)",
		               n, o->ctx);
	}
	if ((rc = mu__sampler_init(&sm, &o->sample, c->vocab)) != 0 ||
	    (logits = mu__malloc((size_t)c->vocab * sizeof(float))) == NULL ||
	    mu__textout_init(&to, tok, ids, n) != 0) {
		mu__free(ids);
		mu__free(logits);
		mu__sampler_free(&sm);
		mu__textout_free(&to);
		return MU_ENOMEM;
	}
	rc = c->open(c->ud, o->seq_id, o->ctx, why, wl);
	if (rc == 0) {
		rc = prefill(c, o->seq_id, ids, (int32_t)n, logits, why, wl);
		st->prefill_s = now_s() - t0;
		if (rc == 0 && o->max_tokens > 0)
			rc = decode_loop(c, tok, o, &sm, logits, (int32_t)n, t0, st, &to, why, wl);
		emit(o, &to, -1);
		c->close(c->ud, o->seq_id);
	}
	mu__free(ids);
	mu__free(logits);
	mu__sampler_free(&sm);
	mu__textout_free(&to);
	return rc;
}
