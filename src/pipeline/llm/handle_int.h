/* SPDX-License-Identifier: MIT */
/*
 * include/muster/llm.h's handles as the library holds them: a model
 * (mu_llm_t, pipeline/llm/handle.c: opening it where its layers run),
 * its requests (pipeline/llm/request.c) and tokenizers
 * (pipeline/llm/tokenizer.c).
 *
 * The handle lives here, above the decoder and the engine (llm/), because
 * it reaches remote stages (the coordinator) and devices (the cluster) as
 * well as a decoder in this process: all three end up as links of one
 * engine, the one generation loop.
 *
 * Layers above (serve/) put their own requests to a handle's engine; they
 * reach it through mu__llm_engine and mu__llm_tok.
 */
#ifndef MU_PIPELINE_LLM_HANDLE_INT_H
#define MU_PIPELINE_LLM_HANDLE_INT_H

#include <uv.h>

#include "muster/llm.h"
#include "llm/engine_int.h"
#include "pipeline/llm/cluster_int.h"
#include "pipeline/llm/coord_int.h"

struct mu_tokenizer_s {
	mu__tok_t *t;
};

struct mu_llm_s {
	mu_llm_opts_t o;           /* as opened; stages, coord and cluster not kept */
	mu__llm_src_t src;         /* the checkpoint (the tokenizer; local weights) */
	int have_src;
	struct mu_tokenizer_s tok;
	mu__dec_t *dec;            /* in this process */
	mu__llm_coord_t *coord;    /* over `muster stage` servers (owned) */
	char (*sha)[65];           /* its tensors' SHA-256, which coord checks stages by */
	mu__llm_cluster_t *cluster; /* over devices (owned, and its coordinator) */
	mu__eng_link_t *links;     /* one per stage */
	int nlinks;
	mu__eng_t *eng;
	int32_t ctx;               /* positions a request may use */
	int threads;               /* in this process */
	int max_recoveries;        /* lost devices the engine may replace */
	char where[160];
	uv_mutex_t lock;           /* guards the done flags of waited requests */
	uv_cond_t done;            /* one of them ended */
};

/* The engine of llm (it lives as long as llm). */
mu__eng_t *mu__llm_engine(mu_llm_t *llm);
/* Its tokenizer. */
const mu__tok_t *mu__llm_tok(const mu_llm_t *llm);

#endif
