/* SPDX-License-Identifier: MIT */
/*
 * Generation: a prompt is encoded, prefilled in chunks, then tokens are
 * sampled and fed back one at a time until EOS, the token budget or the
 * context runs out. What runs the layers is a chain: this process's
 * decoder (mu__chain_local) or stages over the network (the pipeline's
 * coordinator), behind the same three calls.
 */
#ifndef MU_LLM_GEN_INT_H
#define MU_LLM_GEN_INT_H

#include <stdint.h>

#include "llm/llm_int.h"

typedef struct {
	/* Reserve a sequence of ctx positions on every stage. */
	int (*open)(void *ud, uint64_t id, int32_t ctx, char *why, size_t wl);
	/* Positions [pos, pos + n) of sequence id; the logits of the last
	 * one into logits[vocab]. */
	int (*forward)(void *ud, uint64_t id, int32_t pos, int32_t n,
	               const int32_t *tokens, float *logits, char *why, size_t wl);
	/* Free it everywhere (errors are logged, not returned). */
	void (*close)(void *ud, uint64_t id);
	void *ud;
	int32_t max_chunk;   /* positions per forward */
	int32_t vocab;
} mu__chain_t;

/*
 * The text of new tokens as they come: a streaming decoder primed with the
 * prompt's ids (so the leading-space rules see where the text starts),
 * then fed each new id; what it holds back at the end (a cut-short UTF-8
 * character) comes out of flush.
 */
typedef struct {
	mu__tok_stream_t ts;
	char *buf;
	size_t cap;
} mu__textout_t;

int mu__textout_init(mu__textout_t *o, const mu__tok_t *t, const int32_t *prompt,
                     size_t n);
void mu__textout_feed(mu__textout_t *o, int32_t id, const char **text, size_t *len);
void mu__textout_flush(mu__textout_t *o, const char **text, size_t *len);
void mu__textout_free(mu__textout_t *o);

/* A chain over one decoder holding every layer. */
void mu__chain_local(mu__chain_t *c, mu__dec_t *d, int32_t max_chunk);

typedef struct {
	mu__sample_opts_t sample;
	int32_t max_tokens;   /* at most this many new tokens */
	int32_t ctx;          /* positions reserved for the sequence */
	int no_bos;           /* do not prepend BOS */
	int ignore_eos;       /* go on past EOS (benchmarks) */
	const int32_t *prompt_ids; /* instead of text: these ids, as given */
	int32_t nprompt_ids;
	uint64_t seq_id;
	/* Each new token, with the text it completes (may be empty while a
	 * UTF-8 character is still partial); at the end, id -1 with the bytes
	 * held back, if any. */
	void (*on_token)(void *ud, int32_t id, const char *text, size_t len);
	/* Optional: every step's logits (the prompt's last, then each new
	 * token's) before sampling. */
	void (*on_logits)(void *ud, const float *logits, int32_t vocab);
	void *ud;
} mu__gen_opts_t;

typedef enum { MU__STOP_EOS, MU__STOP_LENGTH, MU__STOP_CTX } mu__stop_t;

typedef struct {
	int32_t prompt_tokens, new_tokens;
	double prefill_s;     /* prompt forwards */
	double ttft_s;        /* start to the first new token */
	double decode_s;      /* forwards of the tokens fed back */
	int32_t decode_steps;
	mu__stop_t stop;
} mu__gen_stats_t;

/*
 * Generate from prompt (len bytes, UTF-8) or o->prompt_ids. 0 with stats
 * filled, or an error with why (a prompt longer than the context is
 * MU_ETOOBIG, naming both lengths). The sequence is closed on every path.
 */
int mu__generate(const mu__chain_t *c, const mu__tok_t *tok, const char *prompt,
                 size_t len, const mu__gen_opts_t *o, mu__gen_stats_t *st,
                 char *why, size_t wl);

#endif
