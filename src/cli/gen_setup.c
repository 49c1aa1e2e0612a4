/* SPDX-License-Identifier: MIT */
/*
 * Opening what `muster generate` runs (gen_int.h): its options checked,
 * then one mu_llm_open, which says itself what failed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "muster/common.h"
#include "cli/gen_int.h"
#include "cli/progress_int.h"
#include "core/alloc_int.h"
#include "core/net_int.h"

void gen_args_default(gen_args_t *a)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	memset(a, 0, sizeof(*a));
	a->prog = "muster generate";
	a->threads = n > 0 ? (int)n : 1;
	a->max_tokens = 256;
	a->top_k = 40;
	a->top_p = 0.95;
	a->temperature = 0.8;
	a->chunk = 256;
	a->seed = -1;
	a->io_timeout = 60;
	a->devices = 1;
	a->device_timeout = 30;
	a->keepalive = 60;
	a->kv = MU_LLM_KV_F16;
	cli_secure_init(&a->cs);
}

int gen_args_opts(gen_args_t *a, cli_opt_t *o)
{
	cli_opt_t v[] = {
		{"model", OPT_STR, &a->model, "PATH", "an HF checkpoint directory, a GGUF file or a "
		 "llama2.c checkpoint"},
		{"tokenizer", OPT_STR, &a->tokenizer, "FILE", "a llama2.c checkpoint's tokenizer "
		 "(default: tokenizer.bin or tok<vocab>.bin beside it)"},
		{"stages", OPT_STR, &a->stages, "H:P,...", "run over these `muster stage` servers, in "
		 "order, instead of in this process"},
		{"tracker", OPT_STR, &a->tracker, "HOST:PORT", "run over devices from this tracker "
		 "(`muster server --key KEY`), cut to fit their memory; a device lost on the way is "
		 "replaced and the text goes on unchanged"},
		{"key", OPT_STR, &a->key, "KEY", "with --tracker: the devices' key"},
		{"devices", OPT_INT, &a->devices, "N", "with --tracker: how many to request (default 1)"},
		{"device-timeout", OPT_INT, &a->device_timeout, "SECONDS", "with --tracker: wait this "
		 "long for the devices; then say what the tracker has (default 30)"},
		{"weights", OPT_STR, &a->weights, "auto|local|stream", "with --tracker: from each "
		 "device's own copy when it has one (auto, the default), only so, or always streamed"},
		{"max-sequences", OPT_INT, &a->max_seqs, "N", "with --tracker: sequences each device "
		 "keeps a KV cache for (default: --parallel, else 1)"},
		{"replay-mem", OPT_STR, &a->replay_mem, "SIZE", "with --stages or --tracker: activations "
		 "kept to rebuild a lost stage's or device's KV cache (default 256M)"},
		{"quiet", OPT_FLAG, &a->quiet, NULL, "with --tracker: no narration of the placement, no progress"},
		{"keepalive", OPT_INT, &a->keepalive, "SECONDS", "with --stages or --tracker: ping idle "
		 "stages this often, so devices keep the session (default 60; 0: never)"},
		{"threads", OPT_INT, &a->threads, "N", "compute threads in this process (default: the "
		 "machine's cores)"},
		{"ctx", OPT_INT, &a->ctx, "N", "positions (prompt + new tokens) to reserve (default: "
		 "the model's, at most 4096)"},
		{"max-tokens", OPT_INT, &a->max_tokens, "N", "new tokens at most (default 256)"},
		{"temperature", OPT_DOUBLE, &a->temperature, "T", "0 picks the likeliest token "
		 "(default 0.8)"},
		{"top-k", OPT_INT, &a->top_k, "K", "sample among the K likeliest, 0 for all (default 40)"},
		{"top-p", OPT_DOUBLE, &a->top_p, "P", "then among the fewest whose probability adds up "
		 "to P (default 0.95)"},
		{"seed", OPT_DOUBLE, &a->seed, "S", "seed of the sampler; the same seed gives the same "
		 "text (default: random, printed with --json)"},
		{"chunk", OPT_INT, &a->chunk, "N", "prompt positions per forward (default 256)"},
		{"kv-type", OPT_STR, &a->kv_type, cli_kv_choices(), "what the KV cache keeps keys "
		 "and values in, here and on the stages or devices: f16 rounds to nearest even, "
		 "q8_0 is blocks of 32 as the Q8_0 weights (head dims of whole blocks); default f16, "
		 "as llama.cpp's"},
		{"io-timeout", OPT_INT, &a->io_timeout, "SECONDS", "with --stages: a stage that makes no "
		 "progress on a reply this long has failed, and what waits for a lost stage to come "
		 "back waits this long (default 60)"},
		{"parallel", OPT_INT, &a->parallel, "S", "with --prompt-file: every line is a prompt, "
		 "S of them generated at once (batched and pipelined over the stages)"},
		{"no-batch", OPT_FLAG, &a->no_batch, NULL, "with --parallel: one sequence per batch "
		 "(to measure what batching gives)"},
		{"no-bos", OPT_FLAG, &a->no_bos, NULL, "do not start the prompt with BOS"},
		{"ignore-eos", OPT_FLAG, &a->ignore_eos, NULL, "go on past the end-of-text token"},
		{"json", OPT_FLAG, &a->json, NULL, "print one JSON object at the end instead of "
		 "streaming"},
		CLI_SECURE_OPTS(a->cs),
	};

	_Static_assert(sizeof(v) / sizeof(v[0]) <= GEN_MAX_OPTS, "GEN_MAX_OPTS is too small");
	memcpy(o, v, sizeof(v));
	return (int)(sizeof(v) / sizeof(v[0]));
}

int gen_args_check(gen_args_t *a)
{
	const char *bad = NULL;
	char why[256];
	uint64_t size;

	if (a->model == NULL)
		bad = "--model PATH is required (see --help)";
	else if (a->threads < 1 || a->threads > 1024)
		bad = "--threads must be 1 to 1024";
	else if (a->ctx < 0)
		bad = "--ctx must be positive";
	else if (a->max_tokens < 0)
		bad = "--max-tokens must be 0 or more";
	else if (!(a->temperature >= 0 && a->temperature <= 100))
		bad = "--temperature must be 0 to 100";
	else if (a->top_k < 0)
		bad = "--top-k must be 0 or more";
	else if (!(a->top_p > 0 && a->top_p <= 1))
		bad = "--top-p must be in (0, 1]";
	else if (a->chunk < 1 || a->chunk > 8192)
		bad = "--chunk must be 1 to 8192";
	else if ((a->tracker != NULL) != (a->key != NULL) || (a->tracker && a->stages))
		bad = "--tracker goes with --key (and not with --stages)";
	else if (a->devices < 1 || a->devices > 64 || a->max_seqs < 0)
		bad = "--devices must be 1 to 64";
	else if (a->weights != NULL && strcmp(a->weights, "auto") != 0 &&
	         strcmp(a->weights, "local") != 0 && strcmp(a->weights, "stream") != 0)
		bad = "--weights must be auto, local or stream";
	else if (a->parallel < 0 || a->parallel > 4096)
		bad = "--parallel must be 1 to 4096";
	else if (a->keepalive < 0 || a->keepalive > 86400)
		bad = "--keepalive must be 0 to 86400 seconds";
	else if (a->io_timeout < 1 || a->io_timeout > 86400)
		bad = "--io-timeout must be 1 to 86400 seconds";
	else if (a->device_timeout < 1 || a->device_timeout > 86400)
		bad = "--device-timeout must be 1 to 86400 seconds";
	else if (!(a->seed >= -1 && a->seed < 18446744073709551616.0))
		bad = "--seed must be a non-negative integer";
	else if (a->replay_mem != NULL && cli_parse_size(a->replay_mem, &size) != 0)
		bad = "--replay-mem is not a size (try 256M)"; /* even unused: never ignored */
	else if (a->kv_type != NULL && mu_llm_kv_type_parse(a->kv_type, &a->kv, why, sizeof(why)))
		bad = why; /* "--kv-type: a KV cache type is f32, f16 or q8_0, not 'x'" */
	if (bad != NULL)
		fprintf(stderr, "%s: %s%s\n", a->prog, bad == why ? "--kv-type: " : "", bad);
	return bad != NULL ? 2 : 0;
}

/* Split "H:P,H:P,..." in place into at most max addresses. */
static int split_addrs(char *s, char **v, int max)
{
	char *save = NULL;
	int n = 0;

	for (char *t = strtok_r(s, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
		if (n == max)
			return -1;
		v[n++] = t;
	}
	return n;
}

static void narrate(void *ud, const char *line)
{
	(void)ud;
	cli_progress_clear();
	fprintf(stderr, "%s\n", line);
}

/* What mu_llm_open reads: the handle's options and, over the network,
 * the coordinator's and the cluster's, which they point to. */
typedef struct {
	mu_llm_opts_t o;
	mu_coord_opts_t coord;
	mu_cluster_opts_t cluster;
	char host[256];
	char *stages;         /* --stages, split in place */
	char *addrs[1024];
} gen_open_t;

/* --tracker's part: the cluster of devices. 0, or the exit status after
 * saying why. */
static int tracker_opts(gen_run_t *r, gen_open_t *g)
{
	const gen_args_t *a = &r->a;
	mu_cluster_opts_t *c = &g->cluster;
	uint64_t replay;
	int port;

	if (mu__split_hostport(a->tracker, g->host, sizeof(g->host), &port) != 0) {
		fprintf(stderr, "%s: --tracker %s is not HOST:PORT\n", a->prog, a->tracker);
		return 2;
	}
	if (cli_parse_size(a->replay_mem != NULL ? a->replay_mem : "256M", &replay) != 0) {
		fprintf(stderr, "%s: --replay-mem is not a size (try 256M)\n", a->prog);
		return 2;
	}
	mu_cluster_opts_init(c);
	c->tracker_host = g->host;
	c->tracker_port = port;
	c->key = a->key;
	c->devices = a->devices;
	c->request_timeout_ms = a->device_timeout * 1000;
	c->weights = a->weights == NULL || strcmp(a->weights, "auto") == 0 ? MU_WEIGHTS_AUTO
	           : strcmp(a->weights, "local") == 0 ? MU_WEIGHTS_LOCAL : MU_WEIGHTS_STREAM;
	c->coord = &g->coord;
	c->say = a->quiet ? NULL : narrate;
	if (a->quiet)
		cli_progress_enable(0);
	g->o.cluster = c;
	g->o.device_sequences = a->max_seqs;
	g->o.replay_bytes = replay;
	r->tracker = 1;
	return 0;
}

/* --stages's part. 0, or the exit status after saying why. */
static int stages_opts(gen_run_t *r, gen_open_t *g)
{
	int n;

	if ((g->stages = strdup(r->a.stages)) == NULL) {
		fprintf(stderr, "%s: out of memory\n", r->a.prog);
		return 1;
	}
	if ((n = split_addrs(g->stages, g->addrs, 1024)) < 1) {
		fprintf(stderr, "%s: --stages takes HOST:PORT,... (1 to 1024 of them)\n", r->a.prog);
		return 2;
	}
	g->o.stages = (const char *const *)g->addrs;
	g->o.nstages = n;
	/* checked by the argument checks: a stage that comes back is rebuilt */
	if (r->a.replay_mem != NULL)
		cli_parse_size(r->a.replay_mem, &g->o.replay_bytes);
	return 0;
}

static int open_llm(gen_run_t *r)
{
	const gen_args_t *a = &r->a;
	gen_open_t *g = calloc(1, sizeof(*g));
	char err[2048] = "";
	int rc = 0;

	if (g == NULL) {
		fprintf(stderr, "%s: out of memory\n", a->prog);
		return 1;
	}
	mu_llm_opts_init(&g->o);
	g->o.tokenizer = a->tokenizer;
	g->o.threads = a->threads;
	g->o.max_sequences = a->parallel > 0 ? a->parallel : 1;
	g->o.ctx = a->ctx;
	g->o.chunk = a->chunk;
	g->o.batch = !a->no_batch;
	g->o.io_timeout_ms = a->io_timeout * 1000;
	g->o.keepalive_ms = a->keepalive * 1000;
	g->o.kv_type = a->kv;
	mu_coord_opts_init(&g->coord);
	g->coord.io_timeout_ms = g->o.io_timeout_ms;
	g->coord.sec = r->sec;
	g->o.coord = &g->coord;
	if (a->stages != NULL)
		rc = stages_opts(r, g);
	else if (a->tracker != NULL)
		rc = tracker_opts(r, g);
	if (rc == 0 && (rc = mu_llm_open(a->model, &g->o, &r->llm, err, sizeof(err))) != 0) {
		fprintf(stderr, "%s: %s\n", a->prog, err[0] ? err : mu_strerror(rc));
		rc = 1;
	}
	free(g->stages);
	free(g);
	if (rc != 0)
		return rc;
	mu_llm_info(r->llm, &r->info);
	r->tok = mu_llm_tokenizer(r->llm);
	return 0;
}

int gen_run_open(const gen_args_t *a, gen_run_t *r)
{
	int rc;

	memset(r, 0, sizeof(*r));
	r->a = *a;
	if ((rc = gen_args_check(&r->a)) != 0)
		return rc;
	if (a->seed < 0) {
		if (getrandom(&r->seed, sizeof(r->seed), 0) != (ssize_t)sizeof(r->seed))
			r->seed = 0x5eed;
	} else {
		r->seed = (uint64_t)a->seed;
	}
	r->json = a->json;
	if ((a->stages != NULL || a->tracker != NULL) &&
	    (rc = cli_secure_apply(a->prog, &r->a.cs, &r->sec)) != 0) {
		gen_run_close(r);
		return rc;
	}
	if ((rc = open_llm(r)) != 0)
		gen_run_close(r);
	return rc;
}

void gen_run_request(const gen_run_t *r, mu_llm_gen_opts_t *g)
{
	mu_llm_gen_opts_init(g);
	g->max_tokens = r->a.max_tokens;
	g->temperature = r->a.temperature;
	g->top_k = r->a.top_k;
	g->top_p = r->a.top_p;
	g->seed = r->seed;
	g->no_bos = r->a.no_bos;
	g->ignore_eos = r->a.ignore_eos;
}

void gen_run_close(gen_run_t *r)
{
	mu_llm_free(r->llm);
	mu_secure_free(r->sec);
	memset(r, 0, sizeof(*r));
}

const char *gen_stop_name(mu_llm_stop_t s)
{
	return s == MU_LLM_STOP_EOS ? "eos" : s == MU_LLM_STOP_LENGTH ? "length"
	     : s == MU_LLM_STOP_CONTEXT ? "context" : "stopped";
}

void gen_run_json(const gen_run_t *r, cJSON *j)
{
	const mu_llm_info_t *h = &r->info;
	cJSON *m = cJSON_AddObjectToObject(j, "model");

	cJSON_AddStringToObject(m, "arch", h->arch);
	cJSON_AddStringToObject(m, "format", h->format == MU_LLM_HF ? "hf" :
	                                    h->format == MU_LLM_GGUF ? "gguf" : "llama2.c");
	cJSON_AddNumberToObject(m, "layers", h->layers);
	cJSON_AddNumberToObject(m, "dim", h->dim);
	cJSON_AddNumberToObject(m, "vocab", h->vocab);
	cJSON_AddNumberToObject(m, "weight_bytes", (double)h->weight_bytes);
	cJSON_AddStringToObject(j, "where", h->where);
}
