/* SPDX-License-Identifier: MIT */
/*
 * `muster serve`: an OpenAI-compatible HTTP endpoint (mu_serve_*,
 * muster/serve.h) in front of the generation engine, over a model in this
 * process, over `muster stage` servers (--stages) or over devices from a
 * tracker (--tracker). It takes `muster generate`'s options for what runs
 * and how to sample (the defaults of requests that say nothing) and its
 * own for the HTTP side.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "muster/common.h"
#include "muster/serve.h"
#include "cli/cli_int.h"
#include "cli/gen_int.h"
#include "cli/progress_int.h"
#include "cli/svc_int.h"
#include "core/log_int.h"
#include "core/net_int.h"

#define SERVE_OPTS (7 + CLI_SVC_NOPTS)
#define MAX_STAGES 1024

typedef struct {
	const char *listen, *name, *max_body, *chat_template, *key_file;
	int max_conns, max_per_addr;
	char key[MU_SERVE_KEY_MAX + 1]; /* from key_file: what clients send as Bearer */
} serve_args_t;

/* What the options become: where the model runs and the HTTP side. */
typedef struct {
	mu_serve_opts_t o;
	mu_coord_opts_t coord;
	mu_cluster_opts_t cluster;
	char host[256], thost[256];
	char *stages;              /* --stages, split in place */
	const char *addrs[MAX_STAGES];
	mu_secure_t *sec;
} serve_run_t;

static void stop_server(void *srv)
{
	mu_serve_stop(srv);
}

/*
 * --api-key-file: its first line (without the newline) is the key clients
 * send as "Authorization: Bearer KEY" (mu_serve_read_key). 0, or 2 after
 * saying why.
 */
static int read_key(serve_args_t *sa)
{
	char why[1024] = "";
	struct stat st;
	int rc = mu_serve_read_key(sa->key_file, sa->key, sizeof(sa->key), why, sizeof(why));

	if (rc == MU_EARG) {
		fprintf(stderr, "muster serve: --api-key-file %s %s\n", sa->key_file, why);
		return 2;
	}
	if (rc != 0) {
		fprintf(stderr, "muster serve: --api-key-file: %s\n", why);
		return 2;
	}
	if (stat(sa->key_file, &st) == 0 && (st.st_mode & 077) != 0)
		fprintf(stderr, "muster serve: warning: --api-key-file %s can be read by other users "
		        "(chmod 600 it)\n", sa->key_file);
	return 0;
}

/* gen_args_opts's options, less those serve has no use for, with
 * --max-tokens and --parallel meaning what they mean here. */
static int gen_opts(gen_args_t *a, cli_opt_t *o)
{
	cli_opt_t all[GEN_MAX_OPTS];
	int i, k = 0, n = gen_args_opts(a, all);

	for (i = 0; i < n; i++) {
		if (strcmp(all[i].name, "json") == 0)
			continue;
		if (strcmp(all[i].name, "max-tokens") == 0)
			all[i].help = "a completion's length when the request gives no max_tokens "
			              "(default: the rest of the context)";
		if (strcmp(all[i].name, "parallel") == 0)
			all[i].help = "requests generated at once, batched and pipelined over the "
			              "stages; more wait their turn (default 4)";
		if (strcmp(all[i].name, "io-timeout") == 0)
			all[i].help = "a stage that makes no progress on a reply this long has failed; "
			              "requests wait this long for a lost stage to come back; also how "
			              "long a client may take to send a request or to take its stream's "
			              "next bytes (default 60)";
		if (strcmp(all[i].name, "seed") == 0)
			all[i].help = "seed of requests that give none (default: a random one each)";
		o[k++] = all[i];
	}
	return k;
}

static void narrate(void *ud, const char *line)
{
	(void)ud;
	cli_progress_clear();
	fprintf(stderr, "%s\n", line);
}

/* --stages and --tracker into where the model runs. 0, or the exit status
 * after saying why. */
static int placement(gen_args_t *a, serve_run_t *sr)
{
	char *save = NULL;
	int n = 0, rc;

	if ((a->stages != NULL || a->tracker != NULL) &&
	    (rc = cli_secure_apply(a->prog, &a->cs, &sr->sec)) != 0)
		return rc;
	mu_coord_opts_init(&sr->coord);
	sr->coord.io_timeout_ms = a->io_timeout * 1000;
	sr->coord.sec = sr->sec;
	sr->o.coord = &sr->coord;
	if (a->stages != NULL) {
		if ((sr->stages = strdup(a->stages)) == NULL)
			return 1;
		for (char *t = strtok_r(sr->stages, ",", &save); t != NULL;
		     t = strtok_r(NULL, ",", &save)) {
			if (n == MAX_STAGES) {
				n++; /* one too many: refused below */
				break;
			}
			sr->addrs[n++] = t;
		}
		if (n < 1 || n > MAX_STAGES) {
			fprintf(stderr, "%s: --stages takes HOST:PORT,... (1 to %d of them)\n", a->prog,
			        MAX_STAGES);
			return 2;
		}
		sr->o.stages = sr->addrs;
		sr->o.nstages = n;
	}
	/* a stage that comes back, or a device's replacement, is rebuilt */
	if (cli_parse_size(a->replay_mem != NULL ? a->replay_mem : "256M", &sr->o.replay_bytes)) {
		fprintf(stderr, "%s: --replay-mem is not a size (try 256M)\n", a->prog);
		return 2;
	}
	if (a->tracker == NULL)
		return 0;
	mu_cluster_opts_init(&sr->cluster);
	if (mu__split_hostport(a->tracker, sr->thost, sizeof(sr->thost),
	                       &sr->cluster.tracker_port) != 0) {
		fprintf(stderr, "%s: --tracker %s is not HOST:PORT\n", a->prog, a->tracker);
		return 2;
	}
	sr->cluster.tracker_host = sr->thost;
	sr->cluster.key = a->key;
	sr->cluster.devices = a->devices;
	sr->cluster.weights = a->weights == NULL || strcmp(a->weights, "auto") == 0
	                      ? MU_WEIGHTS_AUTO : strcmp(a->weights, "local") == 0
	                      ? MU_WEIGHTS_LOCAL : MU_WEIGHTS_STREAM;
	sr->cluster.coord = &sr->coord;
	sr->cluster.say = a->quiet ? NULL : narrate;
	if (a->quiet)
		cli_progress_enable(0);
	sr->o.cluster = &sr->cluster;
	sr->o.max_seqs = a->max_seqs;
	return 0;
}

/* The options into sr->o. 0, or the exit status after saying why. */
static int serve_opts(gen_args_t *a, const serve_args_t *sa, serve_run_t *sr)
{
	mu_serve_opts_t *o = &sr->o;
	uint64_t body;
	int i;

	mu_serve_opts_init(o);
	if (mu__split_hostport(sa->listen, sr->host, sizeof(sr->host), &o->port) != 0 ||
	    cli_parse_size(sa->max_body, &body) != 0 || body < 1024 || sa->max_conns < 1 ||
	    sa->max_per_addr < 0) {
		fprintf(stderr, "muster serve: --listen takes HOST:PORT, --max-body a size of 1K or "
		        "more, --max-connections 1 or more, --max-connections-per-address 0 or "
		        "more\n");
		return 2;
	}
	for (i = 0; sa->chat_template != NULL && mu_serve_chat_family(i) != NULL; i++)
		if (strcmp(mu_serve_chat_family(i), sa->chat_template) == 0)
			break;
	if (sa->chat_template != NULL && mu_serve_chat_family(i) == NULL) {
		fprintf(stderr, "muster serve: --chat-template is one of chatml, qwen3, llama3, "
		        "llama3.1, llama2, mistral\n");
		return 2;
	}
	o->model = a->model;
	o->tokenizer = a->tokenizer;
	o->threads = a->threads;
	o->ctx = a->ctx;
	o->chunk = a->chunk;
	o->kv_type = a->kv;
	o->parallel = a->parallel;
	o->batch = !a->no_batch;
	o->keepalive_ms = a->keepalive * 1000;
	o->host = sr->host;
	o->model_name = sa->name;
	o->max_conns = sa->max_conns;
	o->max_conns_per_addr = sa->max_per_addr;
	o->max_body = (size_t)body;
	o->io_timeout_ms = a->io_timeout * 1000;
	o->api_key = sa->key[0] != '\0' ? sa->key : NULL;
	o->max_tokens = a->max_tokens;
	o->temperature = (float)a->temperature;
	o->top_k = a->top_k;
	o->top_p = (float)a->top_p;
	o->have_seed = a->seed >= 0;
	o->seed = a->seed >= 0 ? (uint64_t)a->seed : 0;
	o->no_bos = a->no_bos;
	o->ignore_eos = a->ignore_eos;
	o->chat_template = sa->chat_template;
	return placement(a, sr);
}

static int serve(serve_run_t *sr, cli_svc_t *sv)
{
	mu_serve_t *srv = NULL;
	char why[1024] = "";
	int rc;

	sr->o.metrics = sv->reg;
	if ((rc = mu_serve_start(&sr->o, &srv, why, sizeof(why))) != 0) {
		fprintf(stderr, "muster serve: %s\n", why[0] ? why : mu_strerror(rc));
		return 1;
	}
	if ((rc = cli_svc_listen(sv, "muster serve", srv)) != 0) {
		mu_serve_free(srv);
		return rc;
	}
	cli_warn_open("serve", sr->host, mu_serve_port(srv), sr->o.api_key == NULL
	              ? "it has no --api-key-file, so anyone who can reach it generates with this model"
	              : "its HTTP has no TLS, so the API key and every prompt and reply cross the "
	                "network in the clear", "keep it on 127.0.0.1 behind a TLS proxy (nginx, "
	                "caddy) that others reach");
	printf("muster serve: listening on http://%s:%d (model %s, %d in flight, context %d, %s)\n",
	       sr->host, mu_serve_port(srv), mu_serve_model_name(srv), sr->o.parallel,
	       mu_serve_ctx(srv), mu_serve_where(srv));
	fflush(stdout);
	cli_on_signal(stop_server, srv);
	cli_svc_ready(sv, "serving HTTP");
	mu_serve_run(srv);
	cli_signal_disarm();
	cli_svc_stop(sv); /* its endpoint is on srv's loop */
	mu_serve_free(srv);
	return 0;
}

int cmd_serve(int argc, char **argv)
{
	serve_args_t sa = {"127.0.0.1:8080", NULL, "4M", NULL, NULL, 32, 0, ""};
	gen_args_t a;
	serve_run_t sr = {0};
	int npos, rc;
	cli_svc_t sv;
	cli_opt_t opts[SERVE_OPTS + GEN_MAX_OPTS] = {
		{"listen", OPT_STR, &sa.listen, "HOST:PORT", "where to take HTTP requests (default "
		 "127.0.0.1:8080; port 0 picks a free one, printed)"},
		{"model-name", OPT_STR, &sa.name, "NAME", "the model's id in the API (default: the "
		 "--model file or directory name)"},
		{"max-connections", OPT_INT, &sa.max_conns, "N", "HTTP connections at once; past it a "
		 "newcomer displaces the longest-idle one, and is closed only when all are busy "
		 "(default 32)"},
		{"max-connections-per-address", OPT_INT, &sa.max_per_addr, "N", "HTTP connections "
		 "from one client address; past it a newcomer displaces that address's longest-idle "
		 "one (default: a quarter of --max-connections, at least 4)"},
		{"max-body", OPT_STR, &sa.max_body, "SIZE", "largest request body (default 4M; larger "
		 "gets 413)"},
		{"chat-template", OPT_STR, &sa.chat_template, "NAME", "render chats as chatml, qwen3, "
		 "llama3, llama3.1, llama2 or mistral, whatever the model's template is"},
		{"api-key-file", OPT_STR, &sa.key_file, "FILE", "require this key (the file's first "
		 "line) as \"Authorization: Bearer KEY\" on every route but /health; 401 without it "
		 "(default: $MUSTER_API_KEY_FILE, else no key)"},
		CLI_SVC_OPTS(sv),
	};
	cli_cmd_t cmd = {
		"muster serve --model DIR|FILE.gguf|FILE.bin [--stages H:P,...] [--listen HOST:PORT] "
		"[options]",
		"Serve a decoder LLM over HTTP with the OpenAI API, as llama.cpp's server, vLLM and\n"
		"Ollama do: POST /v1/completions and /v1/chat/completions (with \"stream\": true,\n"
		"server-sent events), GET /v1/models and GET /health. Concurrent requests are\n"
		"generated together (--parallel), in this process or over `muster stage` servers\n"
		"(--stages); a client that disconnects cancels its sequence. Chats are rendered with\n"
		"the model's chat template (ChatML/Qwen, Llama 3 and 3.1+, Llama 2, Mistral [INST]).\n"
		"Sampling options are the defaults of requests that do not set them. One line per\n"
		"request goes to stderr; SIGINT or SIGTERM stops it after cancelling what runs.\n"
		"The HTTP side has no TLS: keep it on 127.0.0.1, or put a TLS proxy in front, and\n"
		"give --api-key-file when others can reach it (docs/security.md).",
		opts, SERVE_OPTS, 0, 0};

	gen_args_default(&a);
	a.prog = "muster serve";
	a.max_tokens = 0;
	a.parallel = 4;
	cli_svc_init(&sv);
	cmd.nopts += gen_opts(&a, opts + SERVE_OPTS);
	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if (a.parallel < 1) {
		fprintf(stderr, "muster serve: --parallel must be 1 or more\n");
		return 2;
	}
	if (sa.key_file == NULL && getenv("MUSTER_API_KEY_FILE") != NULL &&
	    getenv("MUSTER_API_KEY_FILE")[0] != '\0')
		sa.key_file = getenv("MUSTER_API_KEY_FILE");
	if (sa.key_file != NULL && (rc = read_key(&sa)) != 0)
		return rc;
	if ((rc = gen_args_check(&a)) != 0 || (rc = serve_opts(&a, &sa, &sr)) != 0 ||
	    (rc = cli_svc_start(&sv, "muster serve", MU_LOG_INFO)) != 0) {
		free(sr.stages);
		mu_secure_free(sr.sec);
		return rc;
	}
	/* Before any thread starts, so only cli_on_signal's thread sees them. */
	cli_block_signals();
	rc = serve(&sr, &sv);
	cli_svc_stop(&sv);
	free(sr.stages);
	mu_secure_free(sr.sec);
	return rc;
}
