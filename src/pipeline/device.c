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
#include <stdio.h>
#include <string.h>

#include "muster/md.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/json_int.h"
#include "core/log_int.h"
#include "core/net_int.h"
#include "core/opts_int.h"
#include "core/time_int.h"
#include "pipeline/device_int.h"

#define LOG "device"

typedef struct {
	char *dir;
	const mu__stage_kind_t *kind; /* whose model it is */
	mu__held_t h;
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

const char *mu__device_held(const mu_device_t *d, const mu__stage_kind_t *k, uint64_t digest)
{
	for (int i = 0; i < d->nmodels; i++)
		if (d->models[i].kind == k && d->models[i].h.digest == digest)
			return d->models[i].dir;
	return NULL;
}

/* A held model: the first kind that knows it (mu__stage_kinds' order). */
static int open_held(held_t *h, const char *path, char *err, size_t el)
{
	int rc = 1;

	for (int i = 0; rc == 1 && mu__stage_kinds[i] != NULL; i++) {
		rc = mu__stage_kinds[i]->probe(path, &h->h, err, el);
		h->kind = mu__stage_kinds[i];
	}
	if (rc == 1) {
		snprintf(err, el, "%s is no model of a kind this device serves", path);
		rc = MU_EARG;
	}
	if (rc != 0)
		return rc;
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
		const held_t *h = &d->models[i];
		cJSON *m = cJSON_CreateObject();

		snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)h->h.digest);
		cJSON_AddStringToObject(m, "dir", h->dir);
		cJSON_AddStringToObject(m, "digest", hex);
		cJSON_AddNumberToObject(m, "param_bytes", (double)h->h.param_bytes);
		if (h->kind->held_caps != NULL)
			h->kind->held_caps(&h->h, m);
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

void mu__device_ready(mu__device_sess_t *ss, uint64_t id, mu_stage_t *s, mu__reply_t *r)
{
	ss->ctx->stage = s;
	mu__reply_text(r, MU_MSG_READY, id, mu_stage_describe(s));
}

static void drop_pending(mu__device_sess_t *ss)
{
	if (ss->kind != NULL)
		ss->kind->pending_free(ss->pending);
	ss->kind = NULL;
	ss->pending = NULL;
}

/* ASSIGN: the stage kind it names ("kind"; a graph stage without one, as
 * coordinators before kinds send) takes it from here. */
static void assign(mu__device_sess_t *ss, const mu__msg_t *m, const char *body, mu__reply_t *r)
{
	cJSON *o = NULL;
	const cJSON *kind;
	const mu__stage_kind_t *k;
	char names[128];

	if (ss->ctx->stage != NULL || ss->pending != NULL) {
		mu__reply_error(r, m->id, MU_EPROTO, 1, "this session already has a stage");
		return;
	}
	if (mu__json_parse(body, strlen(body), &o) != 0 || !cJSON_IsObject(o)) {
		cJSON_Delete(o);
		mu__reply_error(r, m->id, MU_EJSON, 1, "ASSIGN is not a JSON object");
		return;
	}
	ss->t0 = mu__clock_ms();
	kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
	k = kind == NULL ? &mu__stage_kind_graph
	    : cJSON_IsString(kind) ? mu__stage_kind_find(kind->valuestring) : NULL;
	if (k == NULL) {
		mu__stage_kind_names(names, sizeof(names));
		mu__reply_error(r, m->id, MU_EPROTO, 1, "ASSIGN: \"kind\" must be one of the stage "
		                "kinds this device serves: %s", names);
	} else {
		k->assign(ss, m, o, r);
	}
	cJSON_Delete(o);
}

static void on_other(mu__serve_ctx_t *ctx, const mu__msg_t *m, const char *body,
                     mu_tensor_list_t *in, mu__reply_t *r)
{
	mu__device_sess_t *ss = ctx->other_ud;

	switch (m->type) {
	case MU_MSG_INFO:
		mu__reply_text(r, MU_MSG_INFO, m->id, ss->d->info != NULL ? ss->d->info : "{}");
		return;
	case MU_MSG_ASSIGN:
		assign(ss, m, body, r);
		return;
	case MU_MSG_WEIGHTS:
	case MU_MSG_TENSOR:
		if (ss->pending == NULL || (ss->kind->dev_msgs & MU__MSG_BIT(m->type)) == 0) {
			mu__reply_error(r, m->id, MU_EPROTO, 1, "%s before an ASSIGN that streams them",
			                mu__msg_type_name(m->type));
			return;
		}
		ss->kind->receive(ss, m, body, in, r);
		return;
	case MU_MSG_LOAD:
		if (ss->pending == NULL) {
			mu__reply_error(r, m->id, MU_EPROTO, 1, "LOAD with no stage streaming");
			return;
		}
		ss->kind->load(ss, m, r);
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
	ss->ctx = ctx;
	ctx->name = "session";
	ctx->idle_ms = -1;
	ctx->on_other = on_other;
	ctx->other_ud = ss;
}

void mu__device_ctx_done(mu__serve_ctx_t *ctx)
{
	mu__device_sess_t *ss = ctx->other_ud;

	mu_stage_free(ctx->stage);
	ctx->stage = NULL;
	drop_pending(ss);
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
