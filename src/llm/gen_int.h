/* SPDX-License-Identifier: MIT */
/*
 * What generation reports, and the text of its tokens as they come. The
 * loop itself is the engine's (llm/engine_int.h): a single sequence is
 * the engine with one request.
 */
#ifndef MU_LLM_GEN_INT_H
#define MU_LLM_GEN_INT_H

#include <stdint.h>

#include "llm/llm_int.h"

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

/* Why a sequence stopped: EOS, its token budget, or its context. */
typedef enum { MU__STOP_EOS, MU__STOP_LENGTH, MU__STOP_CTX } mu__stop_t;

typedef struct {
	int32_t prompt_tokens, new_tokens;
	double prefill_s;     /* the prompt's forwards (to its logits) */
	double ttft_s;        /* admitted to the first new token */
	double decode_s;      /* the first new token to the end */
	int32_t decode_steps; /* new tokens fed back */
	mu__stop_t stop;
} mu__gen_stats_t;

#endif
