/* SPDX-License-Identifier: MIT */
/*
 * A device of the main job: what `muster server` runs in each session.
 * It publishes its capabilities (memory budget, threads, address, the
 * models it holds) as md metadata, and in a session takes the stage a
 * coordinator assigns: loaded from its own copy of the model when it has
 * one (found by digest), else built from the graph and the weights the
 * coordinator streams. Then it serves forwards until the session ends,
 * and the stage is freed with it.
 *
 * A session that does not start with a pipeline message gets the echo
 * that `muster request` and the tests use to see a session arrive.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "muster/md.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/json_int.h"
#include "core/log_int.h"
#include "core/net_int.h"
#include "core/opts_int.h"
#include "pipeline/pipeline_int.h"
#include "core/time_int.h"

#define LOG "device"

typedef struct {
	char *dir;
	uint64_t digest;
	uint64_t param_bytes;
	int llm;            /* a decoder checkpoint, not a graph model */
	int layers;
} held_t;

struct mu_device_s {
	uint64_t mem;
	int threads;
	held_t *models;
	int nmodels;
	char *key;
	char *md_host;
	int md_port;
	mu_md_agent_t *md;
	char *caps;         /* the capabilities JSON */
	char *info;         /* INFO reply before a stage: caps + md address */
	char *cache_dir;
	mu_metrics_t *metrics;
};

const char *mu__device_cache_dir(const mu_device_t *d)
{
	return d->cache_dir;
}

uint64_t mu__device_mem(const mu_device_t *d)
{
	return d->mem;
}

int mu__device_threads(const mu_device_t *d)
{
	return d->threads;
}

/* A held model: a graph model directory, else a decoder checkpoint. */
static int open_held(held_t *h, const char *path, char *err, size_t el)
{
	char p[4200];
	mu__llm_src_t src;
	mu_model_t *m;
	int rc;

	snprintf(p, sizeof(p), "%s/model.json", path);
	if (access(p, F_OK) == 0) {
		if ((rc = mu_model_open(path, &m, err, el)) != 0)
			return rc;
		h->digest = mu_model_digest(m);
		h->param_bytes = mu_model_param_bytes(m);
		mu_model_close(m);
	} else {
		if ((rc = mu__llm_src_open(path, NULL, &src, err, el)) != 0)
			return rc;
		h->llm = 1;
		h->digest = mu__llm_digest(&src);
		h->layers = src.hp.n_layers;
		h->param_bytes = mu__llm_src_bytes(&src, 0, src.hp.n_layers);
		mu__llm_src_free(&src);
	}
	h->dir = mu__strdup(path);
	return h->dir != NULL ? 0 : MU_ENOMEM;
}


uint64_t mu_mem_available(void)
{
	char line[256];
	unsigned long long kb = 0;
	FILE *f = fopen("/proc/meminfo", "r");

	if (f == NULL)
		return 0;
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return (uint64_t)kb * 1024;
}

static void device_defaults(mu_device_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->struct_size = sizeof(*o);
	o->threads = 1;
	o->md_host = "0.0.0.0";
}

void mu_device_opts_init_size(mu_device_opts_t *o, size_t size)
{
	mu_device_opts_t d;

	device_defaults(&d);
	mu__opts_fill(o, size, &d, sizeof(d));
}

void mu_device_free(mu_device_t *d)
{
	if (d == NULL)
		return;
	mu_md_agent_free(d->md);
	for (int i = 0; i < d->nmodels; i++)
		mu__free(d->models[i].dir);
	mu__free(d->models);
	mu__free(d->key);
	mu__free(d->md_host);
	mu__free(d->caps);
	mu__free(d->info);
	mu__free(d->cache_dir);
	mu__free(d);
}

int mu_device_new(const mu_device_opts_t *uo, mu_device_t **out, char *err, size_t el)
{
	mu_device_opts_t oo, *o = &oo;
	mu_device_t *d;
	int rc = 0;

	*out = NULL;
	if (err == NULL)
		el = 0;
	device_defaults(o);
	if (mu__opts_read(o, sizeof(*o), uo) != 0) {
		snprintf(err, el, "device options not made by mu_device_opts_init, or asking for "
		         "what this library (%s) does not have", mu_version());
		return MU_EARG;
	}
	if (o->threads < 1 || o->nmodels < 0) {
		snprintf(err, el, "a device needs at least one thread");
		return MU_EARG;
	}
	d = mu__calloc(1, sizeof(*d));
	if (d == NULL)
		return MU_ENOMEM;
	d->mem = o->mem_budget != 0 ? o->mem_budget : mu_mem_available();
	d->threads = o->threads;
	d->md_port = o->md_port;
	d->metrics = o->metrics;
	d->key = mu__strdup(o->key != NULL ? o->key : "muster");
	d->md_host = mu__strdup(o->md_host != NULL ? o->md_host : "0.0.0.0");
	d->models = mu__calloc((size_t)o->nmodels + 1, sizeof(*d->models));
	d->cache_dir = o->cache_dir != NULL ? mu__strdup(o->cache_dir) : NULL;
	if (d->key == NULL || d->md_host == NULL || d->models == NULL ||
	    (o->cache_dir != NULL && d->cache_dir == NULL))
		rc = MU_ENOMEM;
	/* each model is opened once to know it by digest; nothing is loaded */
	for (int i = 0; rc == 0 && i < o->nmodels; i++) {
		rc = open_held(&d->models[i], o->models[i], err, el);
		if (rc == 0)
			d->nmodels++;
	}
	if (rc != 0) {
		mu_device_free(d);
		return rc;
	}
	*out = d;
	return 0;
}

static char *dump(cJSON *o)
{
	mu__buf_t b;
	char *s = NULL;

	mu__buf_init(&b, MU_MSG_MAX_TEXT);
	if (o != NULL && mu__json_dump(&b, o) == 0 && mu__buf_appendc(&b, '\0') == 0)
		s = mu__buf_take(&b, NULL);
	mu__buf_free(&b);
	cJSON_Delete(o);
	return s;
}

static cJSON *caps_json(const mu_device_t *d, const char *addr)
{
	cJSON *o = cJSON_CreateObject(), *a;
	char hex[20];

	cJSON_AddStringToObject(o, "key", d->key);
	cJSON_AddStringToObject(o, "address", addr);
	cJSON_AddNumberToObject(o, "mem_budget", (double)d->mem);
	cJSON_AddNumberToObject(o, "threads", d->threads);
	a = cJSON_AddArrayToObject(o, "models");
	for (int i = 0; i < d->nmodels; i++) {
		cJSON *m = cJSON_CreateObject();

		snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)d->models[i].digest);
		cJSON_AddStringToObject(m, "dir", d->models[i].dir);
		cJSON_AddStringToObject(m, "digest", hex);
		cJSON_AddNumberToObject(m, "param_bytes", (double)d->models[i].param_bytes);
		if (d->models[i].llm) {
			cJSON_AddStringToObject(m, "kind", "llm");
			cJSON_AddNumberToObject(m, "layers", d->models[i].layers);
		}
		cJSON_AddItemToArray(a, m);
	}
	cJSON_AddStringToObject(o, "muster", mu_version());
	return o;
}

/* host:port of the metadata listener as others dial it: the device's
 * published host when the listener is bound to a wildcard. */
static void md_address(const mu_device_t *d, const char *addr, char *out, size_t n)
{
	char host[256];
	int port;

	if (!mu__is_wildcard(d->md_host))
		snprintf(host, sizeof(host), "%s", d->md_host);
	else if (mu__split_hostport(addr, host, sizeof(host), &port) != 0)
		snprintf(host, sizeof(host), "%s", addr); /* a bare host */
	mu__hostport_text(host, mu_md_listen_port(d->md), out, n);
}

int mu_device_publish(mu_device_t *d, const char *addr, char *err, size_t el)
{
	mu_md_opts_t mo;
	char name[300], mdaddr[300], why[512];
	uint64_t op;
	int rc, status = 0;
	cJSON *info, *caps;

	if (err == NULL)
		el = 0;
	/* the agent is named after the address the tracker hands out, so a
	 * coordinator granted this device knows whose metadata to fetch */
	snprintf(name, sizeof(name), "muster-device/%s/%s", d->key, addr);
	mu_md_opts_init(&mo);
	mo.name = name;
	mo.listen = 1;
	mo.listen_host = d->md_host;
	mo.listen_port = d->md_port;
	mo.metrics = d->metrics;
	mu_md_agent_free(d->md);
	d->md = NULL;
	rc = mu_md_agent_new(&mo, &d->md, why, sizeof(why));
	if (rc != 0) {
		snprintf(err, el, "cannot start the metadata agent on %s port %d: %s", d->md_host,
		         d->md_port, why);
		return rc;
	}
	md_address(d, addr, mdaddr, sizeof(mdaddr));
	caps = caps_json(d, addr);
	cJSON_AddStringToObject(caps, "md_address", mdaddr);
	mu__free(d->caps);
	d->caps = dump(caps);
	if (d->caps == NULL)
		return MU_ENOMEM;
	rc = mu_md_set_local(d->md, NULL, d->caps, strlen(d->caps));
	/* with a store configured, publish there too; P2P peers fetch from us */
	if (rc == 0 && strcmp(mu_md_backend_name(d->md), "P2P") != 0) {
		rc = mu_md_send_local(d->md, NULL, NULL, &op);
		if (rc == 0)
			rc = mu_md_wait(d->md, op, 30000, &status);
		if (rc == 0)
			rc = status;
	}
	if (rc != 0) {
		snprintf(err, el, "cannot publish the device's metadata (%s): %s",
		         mu_md_backend_name(d->md), mu_strerror(rc));
		return rc;
	}
	info = cJSON_CreateObject();
	cJSON_AddStringToObject(info, "device", d->key);
	cJSON_AddStringToObject(info, "md_agent", name);
	cJSON_AddStringToObject(info, "md_backend", mu_md_backend_name(d->md));
	cJSON_AddNumberToObject(info, "md_port", mu_md_listen_port(d->md));
	cJSON_AddStringToObject(info, "md_address", mdaddr);
	mu__free(d->info);
	d->info = dump(info);
	mu__log(MU_LOG_INFO, LOG, "metadata of %s published (%s, P2P at %s): %.0f MiB for weights, "
	        "%d model%s held", name, mu_md_backend_name(d->md), mdaddr,
	        (double)d->mem / 1048576.0, d->nmodels, d->nmodels == 1 ? "" : "s");
	return d->info != NULL ? 0 : MU_ENOMEM;
}

const char *mu_device_describe(const mu_device_t *d)
{
	return d->caps;
}

/* ---- a session ---- */

/* A graph stage's forwards split their products over the device's threads
 * (an LLM stage's own kernel pool got as many when it was opened). */
static void ready(mu__serve_ctx_t *ctx, const mu_device_t *d, uint64_t id, mu_stage_t *s,
                  mu__reply_t *r)
{
	ctx->stage = s;
	if (s->llm == NULL)
		mu_stage_set_threads(s, d->threads);
	r->m = (mu__msg_t){MU_MSG_READY, 0, id, 0, 0, 0};
	r->text = (char *)mu_stage_describe(s);
}

static void assign(mu__serve_ctx_t *ctx, mu__device_sess_t *ss, const mu__msg_t *m, const char *body,
                   mu__reply_t *r)
{
	mu_device_t *d = ss->d;
	cJSON *o = NULL;
	const cJSON *w, *g, *dg;
	unsigned long long digest = 0;
	int idx, of, first, last, rc;
	double need;
	char err[768] = "";
	mu_stage_t *s = NULL;

	if (ctx->stage != NULL || ss->pending != NULL || ss->llm != NULL) {
		mu__reply_error(r, m->id, MU_EPROTO, 1, "this session already has a stage");
		return;
	}
	if (mu__json_parse(body, strlen(body), &o) != 0 || !cJSON_IsObject(o)) {
		cJSON_Delete(o);
		mu__reply_error(r, m->id, MU_EJSON, 1, "ASSIGN is not a JSON object");
		return;
	}
	ss->t0 = mu__clock_ms();
	if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "kind")) &&
	    strcmp(cJSON_GetObjectItemCaseSensitive(o, "kind")->valuestring, "llm") == 0) {
		const char *path = NULL;

		dg = cJSON_GetObjectItemCaseSensitive(o, "digest");
		if (cJSON_IsString(dg) && sscanf(dg->valuestring, "%llx", &digest) == 1)
			for (int i = 0; i < d->nmodels && path == NULL; i++)
				if (d->models[i].llm && d->models[i].digest == digest)
					path = d->models[i].dir;
		mu__device_assign_llm(ctx, ss, m, o, path, r);
		cJSON_Delete(o);
		return;
	}
	w = cJSON_GetObjectItemCaseSensitive(o, "weights");
	g = cJSON_GetObjectItemCaseSensitive(o, "graph");
	dg = cJSON_GetObjectItemCaseSensitive(o, "digest");
	/* every number range-checked before it becomes an int: node indices
	 * are non-negative ints, and cut() computes last - 1 */
	if (mu__json_int(cJSON_GetObjectItemCaseSensitive(o, "of"), 1, INT_MAX, &of) != 0 ||
	    mu__json_int(cJSON_GetObjectItemCaseSensitive(o, "stage"), 0, of - 1, &idx) != 0 ||
	    mu__json_int(cJSON_GetObjectItemCaseSensitive(o, "first"), 0, INT_MAX, &first) != 0 ||
	    mu__json_int(cJSON_GetObjectItemCaseSensitive(o, "last"), 0, INT_MAX, &last) != 0 ||
	    mu__json_double(cJSON_GetObjectItemCaseSensitive(o, "param_bytes"), 0,
	                    (double)MU_JSON_INT_MAX, &need) != 0 ||
	    !cJSON_IsString(w) || !cJSON_IsString(dg) || sscanf(dg->valuestring, "%llx", &digest) != 1) {
		cJSON_Delete(o);
		mu__reply_error(r, m->id, MU_EPROTO, 1, "ASSIGN lacks stage, of, first, last, "
		                "param_bytes, digest or weights, or one is out of range");
		return;
	}
	if (need > (double)d->mem) {
		cJSON_Delete(o);
		mu__reply_error(r, m->id, MU_ETOOBIG, 1, "stage %d/%d needs %.0f bytes of weights; this "
		                "device's budget is %llu", idx, of, need, (unsigned long long)d->mem);
		return;
	}
	if (strcmp(w->valuestring, "local") == 0) {
		const held_t *h = NULL;

		for (int i = 0; i < d->nmodels && h == NULL; i++)
			if (d->models[i].digest == digest)
				h = &d->models[i];
		if (h == NULL) {
			mu__reply_error(r, m->id, MU_EARG, 1, "this device holds no model with digest %016llx",
			                digest);
		} else if ((rc = mu_stage_load_range(h->dir, idx, of, first, last, &s, err, sizeof(err))) != 0) {
			mu__reply_error(r, m->id, rc, 1, "loading stage %d/%d from %s: %s", idx, of, h->dir, err);
		} else {
			mu__log(MU_LOG_INFO, LOG, "stage %d/%d (nodes %d..%d) loaded from %s", idx, of, first,
			        last - 1, h->dir);
			ready(ctx, d, m->id, s, r);
		}
	} else if (strcmp(w->valuestring, "stream") == 0 && cJSON_IsString(g)) {
		rc = mu__stage_new(g->valuestring, strlen(g->valuestring), first, last, idx, of, digest,
		                   cJSON_GetObjectItemCaseSensitive(o, "input_shapes"),
		                   cJSON_GetObjectItemCaseSensitive(o, "input_dtypes"), &s, err, sizeof(err));
		if (rc != 0) {
			mu__reply_error(r, m->id, rc, 1, "stage %d/%d: %s", idx, of, err);
		} else {
			ss->pending = s;
			ss->received = 0;
			ss->budget_need = (uint64_t)need;
			r->m = (mu__msg_t){MU_MSG_READY, 0, m->id, 0, 0, 0};
			r->text = mu__strdup("{\"weights\": \"stream\"}");
			r->text_owned = 1;
		}
	} else {
		mu__reply_error(r, m->id, MU_EPROTO, 1, "weights must be \"local\" or \"stream\" "
		                "(with the graph)");
	}
	cJSON_Delete(o);
}

static void weights(mu__device_sess_t *ss, const mu__msg_t *m, mu_tensor_list_t *in, mu__reply_t *r)
{
	char err[512];

	if (ss->pending == NULL) {
		mu__reply_error(r, m->id, MU_EPROTO, 1, "WEIGHTS before an ASSIGN that streams them");
		return;
	}
	for (size_t i = 0; i < in->n; i++) {
		mu_tensor_t *t = in->t[i];

		ss->received += mu_tensor_nbytes(t);
		if (ss->received > ss->d->mem) {
			mu__reply_error(r, m->id, MU_ETOOBIG, 1, "the weights sent pass this device's budget "
			                "of %llu bytes", (unsigned long long)ss->d->mem);
			return;
		}
		if (mu__stage_add_param(ss->pending, t, err, sizeof(err)) != 0) {
			mu__reply_error(r, m->id, MU_EPROTO, 1, "%s", err);
			return;
		}
		in->t[i] = NULL; /* the stage has it */
	}
	in->n = 0;
}

static void on_other(mu__serve_ctx_t *ctx, const mu__msg_t *m, const char *body,
                     mu_tensor_list_t *in, mu__reply_t *r)
{
	mu__device_sess_t *ss = ctx->other_ud;
	char err[512];

	switch (m->type) {
	case MU_MSG_INFO:
		r->m = (mu__msg_t){MU_MSG_INFO, 0, m->id, 0, 0, 0};
		r->text = ss->d->info != NULL ? ss->d->info : (char *)"{}";
		return;
	case MU_MSG_ASSIGN:
		assign(ctx, ss, m, body != NULL ? body : "", r);
		return;
	case MU_MSG_WEIGHTS:
		weights(ss, m, in, r);
		return;
	case MU_MSG_TENSOR:
		mu__device_tensor_llm(ss, m, body != NULL ? body : "", r);
		return;
	case MU_MSG_LOAD:
		if (ss->llm != NULL) {
			mu__device_load_llm(ctx, ss, m, r);
			return;
		}
		if (ss->pending == NULL) {
			mu__reply_error(r, m->id, MU_EPROTO, 1, "LOAD with no stage streaming");
			return;
		}
		if (mu__stage_finish(ss->pending, mu__clock_ms() - ss->t0, err, sizeof(err)) != 0) {
			mu__reply_error(r, m->id, MU_EPROTO, 1, "%s", err);
			return;
		}
		mu__log(MU_LOG_INFO, LOG, "stage %d/%d (nodes %d..%d) built from %llu streamed bytes",
		        ss->pending->index, ss->pending->of, ss->pending->plan.s[0].first,
		        ss->pending->plan.s[0].last - 1, (unsigned long long)ss->received);
		ready(ctx, ss->d, m->id, ss->pending, r);
		ss->pending = NULL;
		return;
	default:
		mu__reply_error(r, m->id, MU_EPROTO, 0, "a %s message is not expected here",
		                mu__msg_type_name(m->type));
	}
}

static void echo(mu_session_t *s)
{
	char buf[65536];
	size_t n, total = 0;

	/* -1: no timeout of our own; the client's -timeout or a server stop
	 * shuts the socket down under us */
	while (mu_session_recv(s, buf, sizeof(buf), &n, -1) == 0 && n > 0) {
		if (mu_session_send(s, buf, n, 30000) != 0)
			break;
		total += n;
	}
	if (total > 0)
		mu__log(MU_LOG_INFO, "server", "Echoed %zu bytes to %s", total, mu_session_peer(s));
}

void mu__device_ctx(mu__serve_ctx_t *ctx, mu__device_sess_t *ss, mu_device_t *d)
{
	memset(ctx, 0, sizeof(*ctx));
	memset(ss, 0, sizeof(*ss));
	ss->d = d;
	ctx->name = "session";
	ctx->idle_ms = -1;
	ctx->on_other = on_other;
	ctx->other_ud = ss;
}

void mu__device_ctx_done(mu__serve_ctx_t *ctx)
{
	mu__device_sess_t *ss = ctx->other_ud;

	mu_stage_free(ctx->stage);
	mu_stage_free(ss->pending);
	mu__llm_pending_free(ss->llm);
	ctx->stage = NULL;
	ss->pending = NULL;
	ss->llm = NULL;
}

void mu_device_session(mu_session_t *s, void *ud)
{
	mu_device_t *d = ud;
	unsigned char magic[4];
	size_t have = 0, n;
	mu__serve_ctx_t ctx;
	mu__chan_t c;
	mu__device_sess_t ss;
	int rc = 0;

	/* tell a pipeline session from a plain one by its first bytes */
	while (rc == 0 && have < sizeof(magic)) {
		rc = mu_session_recv(s, magic + have, sizeof(magic) - have, &n, -1);
		if (rc == 0 && n == 0)
			return;
		have += n;
		if (rc == 0 && memcmp(magic, MU_MSG_MAGIC, have) != 0)
			break;
	}
	if (rc != 0 || mu_session_unread(s, magic, have) != 0)
		return;
	if (have < sizeof(magic) || memcmp(magic, MU_MSG_MAGIC, 4) != 0) {
		echo(s);
		return;
	}
	mu__device_ctx(&ctx, &ss, d);
	mu__chan_init(&c, mu_session_stream(s), s, 30000, (uint64_t)1 << 30);
	rc = mu__serve_chan(&c, &ctx);
	if (rc != 0)
		mu__log(MU_LOG_INFO, LOG, "session with %s ended: %s", mu_session_peer(s), mu_strerror(rc));
	mu__device_ctx_done(&ctx);
}
