/* SPDX-License-Identifier: MIT */
/*
 * `muster serve`: an OpenAI-compatible HTTP endpoint (src/serve/) in front
 * of the generation engine, over a model in this process or over `muster
 * stage` servers (--stages). It takes `muster generate`'s options for
 * what runs and how to sample (the defaults of requests that say nothing)
 * and its own for the HTTP side. Where the model runs is gen_run_open's
 * business, so devices from a tracker come in there.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "muster/common.h"
#include "cli/cli_int.h"
#include "cli/gen_int.h"
#include "cli/svc_int.h"
#include "core/buf_int.h"
#include "core/log_int.h"
#include "core/net_int.h"
#include "pipeline/llm/handle_int.h"
#include "serve/api_int.h"

#define SERVE_OPTS (6 + CLI_SVC_NOPTS)
#define KEY_MAX 512 /* bytes of an API key */

typedef struct {
	const char *listen, *name, *max_body, *chat_template, *key_file;
	int max_conns;
	char key[KEY_MAX + 1]; /* from key_file: what clients send as Bearer */
} serve_args_t;

static void stop_server(void *srv)
{
	mu__srv_stop(srv);
}

/* The id clients name: the checkpoint's file or directory name. */
static void default_name(const char *path, char *out, size_t n)
{
	size_t len = strlen(path);
	const char *p;

	while (len > 1 && path[len - 1] == '/')
		len--;
	for (p = path + len; p > path && p[-1] != '/'; p--)
		;
	snprintf(out, n, "%.*s", (int)(len - (size_t)(p - path)), p);
}

/*
 * --api-key-file: its first line (without the newline) is the key clients
 * send as "Authorization: Bearer KEY", printable ASCII, 1 to KEY_MAX
 * bytes. 0, or 2 after saying why.
 */
static int read_key(serve_args_t *sa)
{
	mu__buf_t b;
	char why[512];
	struct stat st;
	size_t n;

	if (mu__buf_read_file(&b, sa->key_file, KEY_MAX + 2, why, sizeof(why)) != 0) {
		fprintf(stderr, "muster serve: --api-key-file: %s\n", why);
		return 2;
	}
	n = b.len;
	while (n > 0 && (b.data[n - 1] == '\n' || b.data[n - 1] == '\r'))
		n--;
	for (size_t i = 0; i < n; i++)
		if (b.data[i] < 0x21 || b.data[i] > 0x7e)
			n = 0; /* not one printable word: refused below */
	if (n == 0 || n > KEY_MAX) {
		mu__buf_free(&b);
		fprintf(stderr, "muster serve: --api-key-file %s must hold one key of 1 to %d "
		        "printable characters, without spaces\n", sa->key_file, KEY_MAX);
		return 2;
	}
	memcpy(sa->key, b.data, n);
	sa->key[n] = '\0';
	mu__buf_free(&b);
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
			              "also how long a client may take to send a request or to take its "
			              "stream's next bytes (default 60)";
		if (strcmp(all[i].name, "seed") == 0)
			all[i].help = "seed of requests that give none (default: a random one each)";
		o[k++] = all[i];
	}
	return k;
}

static int serve(gen_run_t *r, const gen_args_t *a, const serve_args_t *sa, cli_svc_t *sv)
{
	mu__srv_opts_t o = {0};
	mu__chat_tmpl_t probe;
	mu__srv_t *srv = NULL;
	char host[256], name[256], why[1024] = "";
	uint64_t body;
	int rc;

	if (mu__split_hostport(sa->listen, host, sizeof(host), &o.port) != 0 ||
	    cli_parse_size(sa->max_body, &body) != 0 || body < 1024 || sa->max_conns < 1) {
		fprintf(stderr, "muster serve: --listen takes HOST:PORT, --max-body a size of 1K or "
		        "more, --max-connections 1 or more\n");
		return 2;
	}
	default_name(a->model, name, sizeof(name));
	o.host = host;
	o.model_name = sa->name != NULL ? sa->name : name;
	o.max_conns = sa->max_conns;
	o.max_body = (size_t)body;
	o.io_timeout_ms = a->io_timeout * 1000;
	o.sample = (mu__sample_opts_t){(float)a->temperature, a->top_k, (float)a->top_p, r->seed};
	o.have_seed = a->seed >= 0;
	o.max_tokens = a->max_tokens;
	o.ctx = r->info.ctx;
	o.no_bos = a->no_bos;
	o.ignore_eos = a->ignore_eos;
	o.chat_template = sa->chat_template;
	o.where = r->info.where;
	o.metrics = sv->reg;
	o.api_key = sa->key[0] != '\0' ? sa->key : NULL;
	if (sa->chat_template != NULL && mu__chat_by_name(sa->chat_template, "", "", &probe) != 0) {
		fprintf(stderr, "muster serve: --chat-template is one of chatml, qwen3, llama3, "
		        "llama3.1, llama2, mistral\n");
		return 2;
	}
	if (sa->chat_template != NULL)
		mu__chat_free(&probe);
	rc = mu__srv_new(&o, mu__llm_engine(r->llm), mu__llm_tok(r->llm), &srv, why, sizeof(why));
	if (rc != 0) {
		fprintf(stderr, "muster serve: %s\n", why[0] ? why : mu_strerror(rc));
		return 1;
	}
	if ((rc = cli_svc_listen(sv, "muster serve", mu__srv_loop(srv))) != 0) {
		mu__srv_free(srv);
		return rc;
	}
	printf("muster serve: listening on http://%s:%d (model %s, %d in flight, context %d, %s)\n",
	       host, mu__srv_port(srv), o.model_name, a->parallel, o.ctx, r->info.where);
	fflush(stdout);
	cli_on_signal(stop_server, srv);
	cli_svc_ready(sv, "serving HTTP");
	mu__srv_run(srv);
	cli_signal_disarm();
	cli_svc_stop(sv); /* its endpoint is on srv's loop */
	mu__srv_free(srv);
	return 0;
}

int cmd_serve(int argc, char **argv)
{
	serve_args_t sa = {"127.0.0.1:8080", NULL, "4M", NULL, NULL, 32, ""};
	gen_args_t a;
	gen_run_t r;
	int npos, rc;
	cli_svc_t sv;
	cli_opt_t opts[SERVE_OPTS + GEN_MAX_OPTS] = {
		{"listen", OPT_STR, &sa.listen, "HOST:PORT", "where to take HTTP requests (default "
		 "127.0.0.1:8080; port 0 picks a free one, printed)"},
		{"model-name", OPT_STR, &sa.name, "NAME", "the model's id in the API (default: the "
		 "--model file or directory name)"},
		{"max-connections", OPT_INT, &sa.max_conns, "N", "HTTP connections at once; more are "
		 "closed as they come (default 32)"},
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
	if ((rc = cli_svc_start(&sv, "muster serve", MU_LOG_INFO)) != 0)
		return rc;
	/* Before any thread starts, so only cli_on_signal's thread sees them. */
	cli_block_signals();
	if ((rc = gen_run_open(&a, &r)) != 0) {
		cli_svc_stop(&sv);
		return rc;
	}
	rc = serve(&r, &a, &sa, &sv);
	gen_run_close(&r);
	cli_svc_stop(&sv);
	return rc;
}
