/* SPDX-License-Identifier: MIT */
/*
 * What the API server runs (model.c): the checkpoint and its tokenizer,
 * where its layers run (a decoder in this process, `muster stage`
 * servers, or devices from a tracker), and the generation engine over
 * them (pipeline/llm/engine_int.h). serve.c opens one for mu_serve_start.
 */
#ifndef MU_SERVE_MODEL_INT_H
#define MU_SERVE_MODEL_INT_H

#include <stddef.h>
#include <stdint.h>

#include "muster/serve.h"
#include "llm/llm_int.h"
#include "pipeline/llm/engine_int.h"

typedef struct {
	mu__llm_src_t src;
	int have_src;
	mu__tok_t *tok;
	mu__dec_t *dec;            /* in this process */
	void *remote;              /* over stages (mu__llm_coord_t) */
	void *cluster;             /* over devices (mu__llm_cluster_t) */
	mu__eng_link_t *links;     /* the engine's, one per stage */
	int nlinks;
	mu__eng_t *eng;
	int32_t ctx;               /* positions a sequence may use */
	char where[160];           /* "3 stages", "this process, 2 threads, ..." */
} mu__serve_model_t;

/*
 * Open what o (checked by the caller: its ranges hold) says to run, and
 * start the engine with o->parallel sequences in flight. 0, or an error
 * with err saying which step failed ("cannot open the model: ..."); m is
 * then closed.
 */
int mu__serve_model_open(mu__serve_model_t *m, const mu_serve_opts_t *o, char *err, size_t el);
/* Stop the engine and free everything; a zeroed m is a no-op. */
void mu__serve_model_close(mu__serve_model_t *m);

#endif
