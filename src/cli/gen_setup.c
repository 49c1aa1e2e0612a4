/* SPDX-License-Identifier: MIT */
/*
 * Opening what `muster generate` runs: see gen_int.h.
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
#include "pipeline/llm/cluster_int.h"
#include "pipeline/llm/coord_int.h"
#include "pipeline/llm/link_int.h"

#define GEN_DEFAULT_CTX 4096

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
	a->keepalive = 60;
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
		{"weights", OPT_STR, &a->weights, "auto|local|stream", "with --tracker: from each "
		 "device's own copy when it has one (auto, the default), only so, or always streamed"},
		{"max-sequences", OPT_INT, &a->max_seqs, "N", "with --tracker: sequences each device "
		 "keeps a KV cache for (default: --parallel, else 1)"},
		{"replay-mem", OPT_STR, &a->replay_mem, "SIZE", "with --tracker: activations kept to "
		 "rebuild a lost device's KV cache (default 256M)"},
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
		{"io-timeout", OPT_INT, &a->io_timeout, "SECONDS", "with --stages: a stage that makes no "
		 "progress on a reply this long has failed (default 60)"},
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

static int fail(const gen_args_t *a, const char *what, const char *why)
{
	fprintf(stderr, "%s: %s%s%s\n", a->prog, what, why[0] ? ": " : "", why);
	return 1;
}

int gen_args_check(const gen_args_t *a)
{
	const char *bad = NULL;
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
	else if (!(a->seed >= -1 && a->seed < 18446744073709551616.0))
		bad = "--seed must be a non-negative integer";
	else if (a->replay_mem != NULL && cli_parse_size(a->replay_mem, &size) != 0)
		bad = "--replay-mem is not a size (try 256M)"; /* even unused: never ignored */
	if (bad != NULL)
		fprintf(stderr, "%s: %s\n", a->prog, bad);
	return bad != NULL ? 2 : 0;
}

static int open_local(gen_run_t *r)
{
	mu__dec_opts_t o = {r->a.threads, r->a.parallel > 0 ? r->a.parallel : 1, UINT64_MAX,
	                    r->a.chunk};
	char why[1024] = "";
	int rc;

	rc = mu__dec_new(&r->src, 0, r->src.hp.n_layers, &o, &r->dec, why, sizeof(why));
	if (rc == 0) /* the weights resident before anything is timed, as a stage does */
		mu__llm_src_touch(&r->src, 0, r->src.hp.n_layers);
	if (rc != 0)
		return fail(&r->a, "cannot set up the model", why);
	mu__chain_local(&r->chain, r->dec, r->a.chunk);
	snprintf(r->where, sizeof(r->where), "this process, %d thread%s, kernels %s", r->a.threads,
	         r->a.threads == 1 ? "" : "s", mu__kern_isa());
	return 0;
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

static int open_remote(gen_run_t *r)
{
	mu__llm_coord_opts_t o;
	mu__llm_coord_t *c;
	char *copy = strdup(r->a.stages), *v[1024], why[1024] = "";
	int n, rc;

	if (copy == NULL)
		return fail(&r->a, "out of memory", "");
	n = split_addrs(copy, v, 1024);
	if (n < 1) {
		free(copy);
		fprintf(stderr, "%s: --stages takes HOST:PORT,... (1 to 1024 of them)\n", r->a.prog);
		return 2;
	}
	mu__llm_coord_opts_init(&o);
	o.io_timeout_ms = r->a.io_timeout * 1000;
	o.sec = r->sec;
	rc = mu__llm_coord_connect((const char *const *)v, n, &o, &c, why, sizeof(why));
	free(copy);
	if (rc != 0)
		return fail(&r->a, "cannot use the stages", why);
	r->remote = c;
	mu__llm_coord_chain(c, &r->chain, r->a.chunk);
	if (r->chain.vocab != r->src.hp.vocab) {
		snprintf(why, sizeof(why), "their model has a vocabulary of %d, --model's %d",
		         r->chain.vocab, r->src.hp.vocab);
		return fail(&r->a, "the stages serve another model", why);
	}
	if (r->g.ctx > mu__llm_coord_ctx(c))
		r->g.ctx = mu__llm_coord_ctx(c);
	snprintf(r->where, sizeof(r->where), "%d stage%s", n, n == 1 ? "" : "s");
	return 0;
}

static void narrate(void *ud, const char *line)
{
	(void)ud;
	cli_progress_clear();
	fprintf(stderr, "%s\n", line);
}

static int open_cluster(gen_run_t *r)
{
	mu__llm_cluster_opts_t o;
	mu__llm_cluster_t *c;
	char host[256], why[1024] = "";
	int port, rc;

	if (mu__split_hostport(r->a.tracker, host, sizeof(host), &port) != 0) {
		fprintf(stderr, "%s: --tracker %s is not HOST:PORT\n", r->a.prog, r->a.tracker);
		return 2;
	}
	if (cli_parse_size(r->a.replay_mem != NULL ? r->a.replay_mem : "256M", &r->replay_bytes)) {
		fprintf(stderr, "%s: --replay-mem is not a size (try 256M)\n", r->a.prog);
		return 2;
	}
	mu__llm_cluster_opts_init(&o);
	mu__llm_coord_opts_init(&o.coord);
	o.pool.tracker_host = host;
	o.pool.tracker_port = port;
	o.pool.key = r->a.key;
	o.pool.io_timeout_ms = r->a.io_timeout * 1000;
	o.coord.io_timeout_ms = o.pool.io_timeout_ms;
	o.pool.sec = r->sec;
	o.coord.sec = r->sec;
	o.pool.say = r->a.quiet ? NULL : narrate;
	if (r->a.quiet)
		cli_progress_enable(0);
	o.devices = r->a.devices;
	o.weights = r->a.weights == NULL || strcmp(r->a.weights, "auto") == 0 ? MU_WEIGHTS_AUTO
	          : strcmp(r->a.weights, "local") == 0 ? MU_WEIGHTS_LOCAL : MU_WEIGHTS_STREAM;
	o.max_seqs = r->a.max_seqs > 0 ? r->a.max_seqs : r->a.parallel > 0 ? r->a.parallel : 1;
	o.ctx = r->g.ctx;
	o.max_chunk = r->a.chunk;
	rc = mu__llm_cluster_start(&r->src, &o, &c, why, sizeof(why));
	if (rc != 0)
		return fail(&r->a, "cannot place the model on the devices", why);
	r->cluster = c;
	snprintf(r->where, sizeof(r->where), "%d device%s from the tracker",
	         mu__llm_cluster_stages(c), mu__llm_cluster_stages(c) == 1 ? "" : "s");
	return 0;
}

int gen_run_open(const gen_args_t *a, gen_run_t *r)
{
	char why[1024] = "";
	int rc;

	memset(r, 0, sizeof(*r));
	r->a = *a;
	if ((rc = gen_args_check(a)) != 0)
		return rc;
	if ((rc = mu__llm_src_open(a->model, a->tokenizer, &r->src, why, sizeof(why))) != 0)
		return fail(&r->a, "cannot open the model", why);
	r->have_src = 1;
	if ((rc = r->src.tokenizer(&r->src, &r->tok, why, sizeof(why))) != 0) {
		gen_run_close(r);
		return fail(&r->a, "cannot load the tokenizer", why);
	}
	if (a->seed < 0) {
		if (getrandom(&r->seed, sizeof(r->seed), 0) != (ssize_t)sizeof(r->seed))
			r->seed = 0x5eed;
	} else {
		r->seed = (uint64_t)a->seed;
	}
	r->json = a->json;
	r->g.sample.temperature = (float)a->temperature;
	r->g.sample.top_k = a->top_k;
	r->g.sample.top_p = (float)a->top_p;
	r->g.sample.seed = r->seed;
	r->g.max_tokens = a->max_tokens;
	r->g.ctx = a->ctx > 0 ? a->ctx : (r->src.hp.ctx < GEN_DEFAULT_CTX ? r->src.hp.ctx : GEN_DEFAULT_CTX);
	r->g.no_bos = a->no_bos;
	r->g.ignore_eos = a->ignore_eos;
	r->g.seq_id = 1;
	if ((a->stages != NULL || a->tracker != NULL) &&
	    (rc = cli_secure_apply(a->prog, &r->a.cs, &r->sec)) != 0) {
		gen_run_close(r);
		return rc;
	}
	if (a->stages != NULL)
		rc = open_remote(r);
	else if (a->tracker != NULL)
		rc = open_cluster(r);
	else
		rc = open_local(r);
	if (rc != 0)
		gen_run_close(r);
	return rc;
}

/* The links over whatever the run holds: the local decoder, stages, or
 * devices from the tracker. */
static int make_links(gen_run_t *r, int s)
{
	mu__llm_coord_t *co = r->cluster != NULL ? mu__llm_cluster_coord(r->cluster) : r->remote;
	int i, k = co != NULL ? mu__llm_coord_stages(co) : 1;
	mu__eng_link_t *l = mu__calloc((size_t)k, sizeof(*l));

	if (l == NULL)
		return MU_ENOMEM;
	if (co == NULL && mu__link_local(r->dec, r->a.chunk, s, &l[0]) != 0) {
		mu__free(l);
		return MU_ENOMEM;
	}
	for (i = 0; co != NULL && i < k; i++)
		mu__llm_coord_link(co, i, r->a.chunk, &l[i]);
	r->links = l;
	r->nlinks = k;
	return 0;
}

int gen_run_engine(gen_run_t *r, int parallel, mu__eng_t **out)
{
	mu__eng_opts_t o = {.dim = r->src.hp.dim, .vocab = r->src.hp.vocab, .ctx_max = r->g.ctx,
	                    .max_active = parallel, .batch = !r->a.no_batch,
	                    .io_timeout_ms = r->a.io_timeout * 1000};
	int rc;

	*out = NULL;
	/* devices end sessions idle past their --session-timeout (300 s by
	 * default): a long-lived coordinator (muster serve) shows it is there */
	if (r->cluster != NULL || r->remote != NULL)
		o.keepalive_ms = r->a.keepalive * 1000;
	if (r->cluster != NULL) {
		o.recover = mu__llm_cluster_recover;
		o.recover_ud = r->cluster;
		o.max_recoveries = 3;
		o.replay_bytes = r->replay_bytes;
	}
	if (r->links == NULL && (rc = make_links(r, parallel)) != 0)
		return rc;
	return mu__eng_new(r->links, r->nlinks, &o, out);
}

void gen_run_close(gen_run_t *r)
{
	if (r->remote == NULL && r->cluster == NULL && r->links != NULL)
		mu__link_local_free(&r->links[0]);
	mu__free(r->links);
	mu__dec_free(r->dec);
	mu__llm_coord_free(r->remote);
	mu__llm_cluster_close(r->cluster);
	mu__tok_free(r->tok);
	if (r->have_src)
		mu__llm_src_free(&r->src);
	mu_secure_free(r->sec);
	memset(r, 0, sizeof(*r));
}

void gen_run_json(const gen_run_t *r, cJSON *j)
{
	const mu__llm_hp_t *h = &r->src.hp;
	cJSON *m = cJSON_AddObjectToObject(j, "model");

	cJSON_AddStringToObject(m, "arch", h->arch);
	cJSON_AddStringToObject(m, "format", r->src.fmt == MU__FMT_HF ? "hf" :
	                                    r->src.fmt == MU__FMT_GGUF ? "gguf" : "llama2.c");
	cJSON_AddNumberToObject(m, "layers", h->n_layers);
	cJSON_AddNumberToObject(m, "dim", h->dim);
	cJSON_AddNumberToObject(m, "vocab", h->vocab);
	cJSON_AddNumberToObject(m, "weight_bytes",
	                        (double)mu__llm_src_bytes(&r->src, 0, h->n_layers));
	cJSON_AddStringToObject(j, "where", r->where);
}
