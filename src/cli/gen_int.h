/* SPDX-License-Identifier: MIT */
/*
 * What `muster generate` (and the commands built on it) share: the options
 * that say which model and how to sample, and opening what runs it (a
 * decoder in this process, or stages over the network) behind one chain.
 */
#ifndef MU_CLI_GEN_INT_H
#define MU_CLI_GEN_INT_H

#include <cjson/cJSON.h>

#include "cli/cli_int.h"
#include "llm/gen_int.h"
#include "llm/llm_int.h"
#include "pipeline/llm/engine_int.h"

#define GEN_MAX_OPTS 32

typedef struct {
	const char *prog;     /* "muster generate", for messages */
	const char *model, *tokenizer, *stages, *tracker, *key, *weights, *replay_mem;
	int threads, ctx, max_tokens, top_k, chunk, json, no_bos, ignore_eos, io_timeout;
	int parallel, no_batch, devices, max_seqs, quiet, keepalive;
	double temperature, top_p, seed;
	cli_secure_t cs;      /* --secret-file, --tls-*: toward stages and devices */
} gen_args_t;

typedef struct {
	gen_args_t a;
	mu__llm_src_t src;
	int have_src;
	mu__tok_t *tok;
	mu__dec_t *dec;       /* in this process */
	void *remote;         /* over stages */
	void *cluster;        /* over devices from the tracker */
	uint64_t replay_bytes;
	mu__chain_t chain;
	mu__gen_opts_t g;
	uint64_t seed;
	int json;
	char where[160];      /* "3 stages", "this process, 2 threads" */
	mu__eng_link_t *links; /* gen_run_engine's, freed by gen_run_close */
	int nlinks;
	mu_secure_t *sec;      /* from a.cs; freed by gen_run_close */
} gen_run_t;

void gen_args_default(gen_args_t *a);
/* Fill opts with the shared options; returns how many. */
int gen_args_opts(gen_args_t *a, cli_opt_t *opts);
/* Check them after cli_parse (gen_run_open does): 0, or 2 after printing
 * why. */
int gen_args_check(const gen_args_t *a);
/* Open the model, its tokenizer and the chain. 0, or the exit status
 * after printing why. */
int gen_run_open(const gen_args_t *a, gen_run_t *r);
void gen_run_close(gen_run_t *r);
/*
 * The engine over what the run holds (the local decoder or the stages),
 * with at most `parallel` sequences in flight; free it with mu__eng_free
 * before gen_run_close. 0 or MU_ENOMEM.
 */
int gen_run_engine(gen_run_t *r, int parallel, mu__eng_t **out);
/* --parallel: every line of text a prompt (text is modified). The exit
 * status. */
int gen_run_parallel(gen_run_t *r, char *text);
/* One prompt through the engine (devices from the tracker, which can be
 * replaced mid-generation), its text streamed as it comes. */
int gen_run_engine_one(gen_run_t *r, const char *text, size_t len, const int32_t *ids,
                       int32_t nids);

/* The model and placement, as fields of a JSON report. */
void gen_run_json(const gen_run_t *r, cJSON *j);

#endif
