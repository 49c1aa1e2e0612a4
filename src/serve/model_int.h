/* SPDX-License-Identifier: MIT */
/*
 * What the API server runs (model.c): an LLM handle (include/muster/llm.h)
 * opened where mu_serve_opts_t says (a decoder in this process, `muster
 * stage` servers, or devices from a tracker), whose engine
 * (llm/engine_int.h) the server puts its requests to. serve.c opens one
 * for mu_serve_start.
 */
#ifndef MU_SERVE_MODEL_INT_H
#define MU_SERVE_MODEL_INT_H

#include <stddef.h>
#include <stdint.h>

#include "muster/llm.h"
#include "muster/serve.h"
#include "llm/engine_int.h"

typedef struct {
	mu_llm_t *llm;
	mu__eng_t *eng;            /* the handle's */
	const mu__tok_t *tok;      /* the handle's */
	int32_t ctx;               /* positions a sequence may use */
	char where[160];           /* "3 stages", "this process, 2 threads, ..." */
} mu__serve_model_t;

/*
 * Open what o (checked by the caller: its ranges hold) says to run, with
 * o->parallel sequences in flight. 0, or an error with err saying which
 * step failed ("cannot open the model: ..."); m is then closed.
 */
int mu__serve_model_open(mu__serve_model_t *m, const mu_serve_opts_t *o, char *err, size_t el);
/* Stop the engine and free everything; a zeroed m is a no-op. */
void mu__serve_model_close(mu__serve_model_t *m);

#endif
