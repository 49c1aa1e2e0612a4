/* SPDX-License-Identifier: MIT */
/*
 * What `muster generate` (and the commands built on it) share: the options
 * that say which model and how to sample, and opening the model where it
 * runs (in this process, over stages, over devices from a tracker) as one
 * handle of include/muster/llm.h.
 */
#ifndef MU_CLI_GEN_INT_H
#define MU_CLI_GEN_INT_H

#include <cjson/cJSON.h>

#include "muster/llm.h"
#include "cli/cli_int.h"

#define GEN_MAX_OPTS 40

typedef struct {
	const char *prog;     /* "muster generate", for messages */
	const char *model, *tokenizer, *stages, *tracker, *key, *weights, *replay_mem;
	const char *kv_type;  /* --kv-type, checked by gen_args_check */
	int kv;               /* ... as a mu_llm_kv_type_t */
	int threads, ctx, max_tokens, top_k, chunk, json, no_bos, ignore_eos, io_timeout;
	int parallel, no_batch, devices, max_seqs, quiet, keepalive;
	int device_timeout;   /* --device-timeout: seconds for the tracker's devices */
	double temperature, top_p, seed;
	cli_secure_t cs;      /* --secret-file, --tls-*: toward stages and devices */
} gen_args_t;

typedef struct {
	gen_args_t a;
	mu_llm_t *llm;
	mu_llm_info_t info;   /* info.where: "3 stages", "this process, 2 threads, ..." */
	const mu_tokenizer_t *tok;
	uint64_t seed;        /* --seed, or a random one */
	int json;
	int tracker;          /* over devices from the tracker */
	mu_secure_t *sec;     /* from a.cs; freed by gen_run_close */
} gen_run_t;

void gen_args_default(gen_args_t *a);
/* Fill opts with the shared options; returns how many. */
int gen_args_opts(gen_args_t *a, cli_opt_t *opts);
/* Check them after cli_parse (gen_run_open does): 0, or 2 after printing
 * why. */
int gen_args_check(gen_args_t *a);
/* Open the model where it runs, with room for --parallel requests at
 * once (1 without it). 0, or the exit status after printing why. */
int gen_run_open(const gen_args_t *a, gen_run_t *r);
void gen_run_close(gen_run_t *r);
/* A request's options as the command line gives them (sampling, length,
 * BOS, EOS); the caller adds its callbacks. */
void gen_run_request(const gen_run_t *r, mu_llm_gen_opts_t *g);
/* --parallel: every line of text a prompt (text is modified). The exit
 * status. */
int gen_run_parallel(gen_run_t *r, char *text);
/* "eos", "length", "context" (or "stopped"). */
const char *gen_stop_name(mu_llm_stop_t s);

/* The model and placement, as fields of a JSON report. */
void gen_run_json(const gen_run_t *r, cJSON *j);

#endif
