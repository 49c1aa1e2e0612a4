/* SPDX-License-Identifier: MIT */
/*
 * Opening what the API server runs (model_int.h): mu_serve_opts_t's model
 * and placement as an LLM handle's options (mu_llm_open does the rest:
 * the checkpoint and its tokenizer, the layers here, on stages or on
 * devices, the engine over them). serve.c has checked their ranges.
 */
#include <stdio.h>
#include <string.h>

#include "muster/common.h"
#include "pipeline/llm/handle_int.h"
#include "serve/model_int.h"

int mu__serve_model_open(mu__serve_model_t *m, const mu_serve_opts_t *o, char *err, size_t el)
{
	mu_llm_opts_t lo;
	mu_llm_info_t info;
	int rc;

	memset(m, 0, sizeof(*m));
	mu_llm_opts_init(&lo);
	lo.tokenizer = o->tokenizer;
	lo.threads = o->threads;
	lo.max_sequences = o->parallel;
	lo.ctx = o->ctx;
	lo.chunk = o->chunk;
	lo.batch = o->batch;
	lo.io_timeout_ms = o->io_timeout_ms;
	lo.keepalive_ms = o->keepalive_ms;
	lo.stages = o->stages;
	lo.nstages = o->nstages;
	lo.coord = o->coord;
	lo.cluster = o->cluster;
	lo.device_sequences = o->max_seqs;
	lo.replay_bytes = o->replay_bytes;
	lo.kv_type = o->kv_type;
	if ((rc = mu_llm_open(o->model, &lo, &m->llm, err, el)) != 0)
		return rc;
	mu_llm_info(m->llm, &info);
	m->eng = mu__llm_engine(m->llm);
	m->tok = mu__llm_tok(m->llm);
	m->ctx = info.ctx;
	snprintf(m->where, sizeof(m->where), "%s", info.where);
	return 0;
}

void mu__serve_model_close(mu__serve_model_t *m)
{
	mu_llm_free(m->llm);
	memset(m, 0, sizeof(*m));
}
