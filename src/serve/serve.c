/* SPDX-License-Identifier: MIT */
/*
 * The public API server (include/muster/serve.h): checking the options,
 * the API key file, and putting together what runs (model.c) and the
 * server over it (api.c). The routes and the generations are api.c's and
 * api_gen.c's.
 */
#include <stdio.h>
#include <string.h>

#include "muster/serve.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/error_int.h"
#include "core/log_int.h"
#include "core/opts_int.h"
#include "serve/api_int.h"
#include "serve/model_int.h"
#include "serve/serve_int.h"

struct mu_serve_s {
	mu__serve_model_t m;
	mu__srv_t *srv;
	char name[256];                 /* the model's id in the API */
	char key[MU_SERVE_KEY_MAX + 1]; /* "" : no key */
};

static void serve_defaults(mu_serve_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->struct_size = sizeof(*o);
	o->replay_bytes = (uint64_t)256 << 20;
	o->threads = 1;
	o->chunk = 256;
	o->parallel = 4;
	o->batch = 1;
	o->keepalive_ms = 60000;
	o->host = "127.0.0.1";
	o->port = 8080;
	o->max_conns = 32;
	o->max_body = (size_t)4 << 20;
	o->io_timeout_ms = 60000;
	o->temperature = 0.8f;
	o->top_k = 40;
	o->top_p = 0.95f;
	o->kv_type = MU_LLM_KV_F16;
}

void mu_serve_opts_init_size(mu_serve_opts_t *o, size_t size)
{
	mu_serve_opts_t d;

	serve_defaults(&d);
	mu__opts_fill(o, size, &d, sizeof(d));
}

const char *mu_serve_chat_family(int i)
{
	/* mu__chat_name's kinds run from MU__CHAT_CHATML to MU__CHAT_MISTRAL */
	return i >= 0 && i <= MU__CHAT_MISTRAL - MU__CHAT_CHATML
	       ? mu__chat_name((mu__chat_kind_t)(MU__CHAT_CHATML + i)) : NULL;
}

static int known_family(const char *name)
{
	for (int i = 0; mu_serve_chat_family(i) != NULL; i++)
		if (strcmp(mu_serve_chat_family(i), name) == 0)
			return 1;
	return 0;
}

/* What is wrong with o, or NULL. */
static const char *bad_opts(const mu_serve_opts_t *o)
{
	if (o->model == NULL)
		return "no model";
	if (o->threads < 1 || o->threads > 1024)
		return "threads must be 1 to 1024";
	if (o->ctx < 0 || o->max_tokens < 0)
		return "ctx and max_tokens must be 0 or more";
	if (o->chunk < 1 || o->chunk > 8192)
		return "chunk must be 1 to 8192";
	if (o->parallel < 1 || o->parallel > 4096 || o->max_seqs < 0)
		return "parallel must be 1 to 4096, max_seqs 0 or more";
	if (o->stages != NULL && (o->nstages < 1 || o->nstages > 1024))
		return "stages must be 1 to 1024 addresses";
	if (o->stages != NULL && o->cluster != NULL)
		return "the model runs over stages or over devices from a tracker, not both";
	if (o->keepalive_ms < 0 || o->io_timeout_ms < 1)
		return "keepalive_ms must be 0 or more, io_timeout_ms 1 or more";
	if (o->max_conns < 1 || o->max_body < 1024 || o->max_conns_per_addr < 0)
		return "max_conns must be 1 or more, max_body 1024 or more, max_conns_per_addr 0 or "
		       "more";
	if (!(o->temperature >= 0 && o->temperature <= 100) || o->top_k < 0 ||
	    !(o->top_p > 0 && o->top_p <= 1))
		return "temperature must be 0 to 100, top_k 0 or more, top_p in (0, 1]";
	if (o->chat_template != NULL && !known_family(o->chat_template))
		return "chat_template is one of chatml, qwen3, llama3, llama3.1, llama2, mistral";
	return NULL;
}

int mu_serve_read_key(const char *path, char *key, size_t size, char *err, size_t errlen)
{
	mu__buf_t b;
	size_t n;
	int rc;

	if (path == NULL || key == NULL || size < MU_SERVE_KEY_MAX + 1)
		return mu__why(err, errlen, MU_EARG, "no file, or no room for the key");
	if ((rc = mu__buf_read_file(&b, path, MU_SERVE_KEY_MAX + 2, err, errlen)) != 0)
		return rc;
	n = b.len;
	while (n > 0 && (b.data[n - 1] == '\n' || b.data[n - 1] == '\r'))
		n--;
	for (size_t i = 0; i < n; i++)
		if (b.data[i] < 0x21 || b.data[i] > 0x7e)
			n = 0; /* not one printable word: refused below */
	if (n == 0 || n > MU_SERVE_KEY_MAX) {
		mu__buf_free(&b);
		return mu__why(err, errlen, MU_EARG, "must hold one key of 1 to %d printable "
		               "characters, without spaces", MU_SERVE_KEY_MAX);
	}
	memcpy(key, b.data, n);
	key[n] = '\0';
	mu__buf_free(&b);
	return 0;
}

/* The id clients name by default: the checkpoint's file or directory name. */
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

static int take_key(mu_serve_t *s, const mu_serve_opts_t *o, char *err, size_t el)
{
	char why[1024] = "";
	int rc;

	if (o->api_key != NULL) {
		if (o->api_key[0] == '\0' || strlen(o->api_key) > MU_SERVE_KEY_MAX)
			return mu__why(err, el, MU_EARG, "api_key must be 1 to %d bytes",
			               MU_SERVE_KEY_MAX);
		snprintf(s->key, sizeof(s->key), "%s", o->api_key);
	} else if (o->api_key_file != NULL) {
		rc = mu_serve_read_key(o->api_key_file, s->key, sizeof(s->key), why, sizeof(why));
		if (rc != 0)
			return mu__why(err, el, rc, "api_key_file %s: %s", o->api_key_file, why);
	}
	return 0;
}

static void srv_opts(const mu_serve_t *s, const mu_serve_opts_t *o, mu__srv_opts_t *so)
{
	memset(so, 0, sizeof(*so));
	so->host = o->host;
	so->port = o->port;
	so->model_name = s->name;
	so->max_conns = o->max_conns;
	/* a quarter, but at least 4 (all of them below 4): a client keeps a
	 * few connections of a small server */
	so->max_per_addr = o->max_conns_per_addr > 0 ? o->max_conns_per_addr
	                   : o->max_conns / 4 > 4 ? o->max_conns / 4
	                   : o->max_conns < 4 ? o->max_conns : 4;
	so->max_body = o->max_body;
	so->io_timeout_ms = o->io_timeout_ms;
	so->sample.temperature = o->temperature;
	so->sample.top_k = o->top_k;
	so->sample.top_p = o->top_p;
	so->sample.seed = o->seed;
	so->have_seed = o->have_seed;
	so->max_tokens = o->max_tokens;
	so->ctx = s->m.ctx;
	so->no_bos = o->no_bos;
	so->ignore_eos = o->ignore_eos;
	so->chat_template = o->chat_template;
	so->where = s->m.where;
	so->metrics = o->metrics;
	so->api_key = s->key[0] != '\0' ? s->key : NULL;
}

int mu_serve_start(const mu_serve_opts_t *uo, mu_serve_t **out, char *err, size_t errlen)
{
	mu_serve_opts_t o;
	mu__srv_opts_t so;
	mu_serve_t *s;
	const char *bad;
	int rc;

	*out = NULL;
	serve_defaults(&o);
	if (mu__opts_read(&o, sizeof(o), uo) != 0)
		return mu__why(err, errlen, MU_EARG, "the options were not set by mu_serve_opts_init");
	if ((bad = bad_opts(&o)) != NULL)
		return mu__why(err, errlen, MU_EARG, "%s", bad);
	if ((s = mu__calloc(1, sizeof(*s))) == NULL)
		return mu__why(err, errlen, MU_ENOMEM, "out of memory");
	if (o.model_name != NULL)
		snprintf(s->name, sizeof(s->name), "%s", o.model_name);
	else
		default_name(o.model, s->name, sizeof(s->name));
	if ((rc = take_key(s, &o, err, errlen)) != 0 ||
	    (rc = mu__serve_model_open(&s->m, &o, err, errlen)) != 0) {
		mu__free(s);
		return rc;
	}
	srv_opts(s, &o, &so);
	if ((rc = mu__srv_new(&so, s->m.eng, s->m.tok, &s->srv, err, errlen)) != 0) {
		mu__serve_model_close(&s->m);
		mu__free(s);
		return rc;
	}
	*out = s;
	return 0;
}

int mu_serve_port(const mu_serve_t *s)
{
	return mu__srv_port(s->srv);
}

int mu_serve_ctx(const mu_serve_t *s)
{
	return s->m.ctx;
}

const char *mu_serve_where(const mu_serve_t *s)
{
	return s->m.where;
}

const char *mu_serve_model_name(const mu_serve_t *s)
{
	return s->name;
}

int mu_serve_run(mu_serve_t *s)
{
	return mu__srv_run(s->srv);
}

void mu_serve_stop(mu_serve_t *s)
{
	mu__srv_stop(s->srv);
}

void mu_serve_free(mu_serve_t *s)
{
	if (s == NULL)
		return;
	/* the server first: it holds requests of the engine's */
	mu__srv_free(s->srv);
	mu__serve_model_close(&s->m);
	mu__free(s);
}

uv_loop_t *mu__serve_loop(mu_serve_t *s)
{
	return mu__srv_loop(s->srv);
}
