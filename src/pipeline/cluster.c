/* SPDX-License-Identifier: MIT */
/*
 * The main job, coordinator side: devices found through the tracker, not
 * by address. Request N devices of a key (by priority), open a session on
 * each, fetch each one's capabilities (md metadata: P2P from the device,
 * or the configured store), cut the model so each stage fits its device's
 * budget, hand each device its stage (from its own copy of the model, or
 * streamed from our mapped file a bounded frame at a time), then run
 * forwards. A device lost mid-run is replaced: another is requested, its
 * stage loaded there, and the forwards that were in flight run again.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "muster/md.h"
#include "muster/server.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/json_int.h"
#include "core/net_int.h"
#include "core/rand_int.h"
#include "pipeline/pipeline_int.h"

#define STREAM_FRAME_BYTES ((uint64_t)64 << 20)

typedef struct {
	mu_session_t *sess;
	char addr[300];
	uint64_t budget;
	int threads;
	int nheld;
	uint64_t held[64];      /* digests of the models it holds */
} device_t;

typedef struct {
	char addr[300];
	uint64_t budget;
	int streamed;
	int replaced;
} placed_t;

struct mu_cluster_s {
	mu_model_t *m;
	mu_cluster_opts_t o;
	char *key, *thost;
	mu_md_agent_t *md;
	mu_plan_t *plan;
	mu_coord_t *coord;
	placed_t *placed;
	int n;
	int replacements;
	char *graph;            /* model.json's text, for streaming */
	size_t graph_len;
};

void mu_cluster_opts_init(mu_cluster_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->tracker_host = "127.0.0.1";
	o->tracker_port = 9190;
	o->devices = 1;
	o->request_timeout_ms = 30000;
	o->weights = MU_WEIGHTS_AUTO;
	o->max_replacements = 3;
	mu_coord_opts_init(&o->coord);
}

static void say(const mu_cluster_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(const mu_cluster_t *c, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	if (c->o.say == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	c->o.say(c->o.ud, line);
}

/* ---- one device ---- */

static int exchange(mu__chan_t *ch, mu__msg_t *m, const char *body, int want, char **reply,
                    char *err, size_t el, const char *addr)
{
	char *text = NULL;
	uint64_t id = m->id;
	int rc = mu__msg_send(ch, m, body, body != NULL ? strlen(body) : 0);

	if (rc == 0)
		rc = mu__msg_recv(ch, m, ch->io_ms);
	if (rc == 0 && !mu__msg_is_frame(m->type))
		rc = mu__msg_recv_body(ch, m, &text);
	if (rc != 0) {
		snprintf(err, el, "device %s: %s", addr, mu_strerror(rc));
		return rc;
	}
	if (m->type == MU_MSG_ERROR) {
		snprintf(err, el, "device %s refused: %s", addr, text);
		mu__free(text);
		return m->status < 0 ? m->status : MU_EFAIL;
	}
	if (m->type != want || m->id != id) {
		snprintf(err, el, "device %s answered %s to request %llu", addr,
		         mu__msg_type_name(m->type), (unsigned long long)id);
		mu__free(text);
		return MU_EPROTO;
	}
	*reply = text;
	return 0;
}

/* The device's capabilities, through md: the store when both sides use
 * the same one, else P2P from the device's metadata listener. */
static int fetch_caps(mu_cluster_t *c, device_t *d, const char *info, char *err, size_t el)
{
	cJSON *o = NULL, *caps = NULL;
	const cJSON *agent, *backend, *port, *it;
	char host[256];
	mu_md_peer_t peer;
	uint64_t op;
	int rc, status = 0, p;
	void *blob = NULL;
	const void *payload;
	size_t n, pn;

	rc = mu__json_parse(info, strlen(info), &o);
	agent = cJSON_GetObjectItemCaseSensitive(o, "md_agent");
	backend = cJSON_GetObjectItemCaseSensitive(o, "md_backend");
	port = cJSON_GetObjectItemCaseSensitive(o, "md_port");
	if (rc != 0 || !cJSON_IsString(agent) || !cJSON_IsString(backend) ||
	    mu__json_int(port, 0, 65535, &peer.port) != 0 ||
	    mu__split_hostport(d->addr, host, sizeof(host), &p) != 0) {
		snprintf(err, el, "device %s does not describe its metadata agent (is it a muster server "
		         "of this version?)", d->addr);
		cJSON_Delete(o);
		return MU_EPROTO;
	}
	peer.ip = host;
	if (strcmp(backend->valuestring, "P2P") != 0 &&
	    strcmp(backend->valuestring, mu_md_backend_name(c->md)) == 0)
		rc = mu_md_fetch_remote(c->md, agent->valuestring, NULL, NULL, &op);
	else
		rc = mu_md_fetch_remote(c->md, agent->valuestring, &peer, NULL, &op);
	if (rc == 0)
		rc = mu_md_wait(c->md, op, c->o.request_timeout_ms, &status);
	if (rc == 0)
		rc = status;
	if (rc == 0)
		rc = mu_md_get_remote(c->md, agent->valuestring, NULL, &blob, &n);
	if (rc == 0)
		rc = mu_md_blob_payload(blob, n, &payload, &pn);
	if (rc == 0)
		rc = mu__json_parse(payload, pn, &caps);
	if (rc == 0 &&
	    (mu__json_u64(cJSON_GetObjectItemCaseSensitive(caps, "mem_budget"), UINT64_MAX,
	                  &d->budget) != 0 ||
	     mu__json_int(cJSON_GetObjectItemCaseSensitive(caps, "threads"), 1, INT_MAX,
	                  &d->threads) != 0))
		rc = MU_EPROTO; /* numbers missing or out of range */
	if (rc != 0) {
		snprintf(err, el, "device %s: cannot fetch its metadata (agent %s, %s): %s", d->addr,
		         agent->valuestring, backend->valuestring, mu_strerror(rc));
	} else {
		cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(caps, "models")) {
			const cJSON *dg = cJSON_GetObjectItemCaseSensitive(it, "digest");
			unsigned long long v;

			if (d->nheld < 64 && cJSON_IsString(dg) && sscanf(dg->valuestring, "%llx", &v) == 1)
				d->held[d->nheld++] = v;
		}
		say(c, "  %s: %.1f MiB for weights, %d thread%s, %s the model (metadata of %s via %s)",
		    d->addr, (double)d->budget / 1048576.0, d->threads, d->threads == 1 ? "" : "s",
		    d->nheld > 0 ? "holds a copy of" : "no copy of", agent->valuestring,
		    strcmp(backend->valuestring, mu_md_backend_name(c->md)) == 0 &&
		            strcmp(backend->valuestring, "P2P") != 0 ? backend->valuestring : "P2P");
	}
	mu_md_invalidate_remote(c->md, agent->valuestring);
	mu__free(blob);
	cJSON_Delete(caps);
	cJSON_Delete(o);
	return rc;
}

static int request_error(mu_cluster_t *c, int rc, char *err, size_t el)
{
	snprintf(err, el, "no device of key %s from the tracker at %s:%d within %.0f s: %s", c->key,
	         c->thost, c->o.tracker_port, c->o.request_timeout_ms / 1000.0, mu_strerror(rc));
	return rc;
}

/* Learn what a granted device offers: INFO, then its md metadata. */
static int describe_device(mu_cluster_t *c, device_t *d, char *err, size_t el)
{
	mu__msg_t m = {MU_MSG_INFO, 0, 1, 0, 0};
	mu__chan_t ch;
	char *info = NULL;
	int rc;

	snprintf(d->addr, sizeof(d->addr), "%s", mu_session_peer(d->sess));
	mu__chan_init(&ch, mu_session_fd(d->sess), d->sess, c->o.coord.io_timeout_ms,
	              c->o.coord.max_frame_bytes);
	rc = exchange(&ch, &m, NULL, MU_MSG_INFO, &info, err, el, d->addr);
	if (rc == 0)
		rc = fetch_caps(c, d, info, err, el);
	mu__free(info);
	if (rc != 0) {
		mu_session_close(d->sess);
		d->sess = NULL;
	}
	return rc;
}

/* Ask the tracker for one more device and learn what it offers. */
static int get_device(mu_cluster_t *c, device_t *d, char *err, size_t el)
{
	int rc;

	memset(d, 0, sizeof(*d));
	rc = mu_session_request(c->thost, c->o.tracker_port, c->key, c->o.priority, 0, 5,
	                        c->o.request_timeout_ms, &d->sess);
	if (rc != 0)
		return request_error(c, rc, err, el);
	return describe_device(c, d, err, el);
}

typedef struct {
	mu_cluster_t *c;
	device_t *d;
	int rc;
	pthread_t th;
} req_t;

static void *request_main(void *arg)
{
	req_t *r = arg;

	r->rc = mu_session_request(r->c->thost, r->c->o.tracker_port, r->c->key, r->c->o.priority,
	                           0, 5, r->c->o.request_timeout_ms, &r->d->sess);
	return NULL;
}

/*
 * All n requests at once: the tracker queues them by priority, so a
 * higher-priority job gets the devices freed first, all of them, rather
 * than one in turn with whoever else is waiting.
 */
static int get_devices(mu_cluster_t *c, device_t *devs, int n, char *err, size_t el)
{
	req_t *r = mu__calloc((size_t)n, sizeof(*r));
	int rc = 0, started = 0;

	if (r == NULL)
		return MU_ENOMEM;
	for (int i = 0; i < n; i++) {
		memset(&devs[i], 0, sizeof(devs[i]));
		r[i] = (req_t){c, &devs[i], 0, 0};
		if (pthread_create(&r[i].th, NULL, request_main, &r[i]) != 0) {
			r[i].rc = MU_ENOMEM;
			break;
		}
		started++;
	}
	for (int i = 0; i < started; i++)
		pthread_join(r[i].th, NULL);
	for (int i = 0; i < n && rc == 0; i++)
		if ((rc = r[i].rc) != 0 || i >= started)
			request_error(c, rc != 0 ? rc : MU_ENOMEM, err, el);
	for (int i = 0; i < started && rc == 0; i++)
		rc = describe_device(c, &devs[i], err, el);
	mu__free(r);
	return rc;
}

static int holds(const device_t *d, uint64_t digest)
{
	for (int i = 0; i < d->nheld; i++)
		if (d->held[i] == digest)
			return 1;
	return 0;
}

/* Stream stage i's weights: bounded frames, read from the mapped file,
 * whose pages leave our resident set once sent. */
static int stream_weights(mu_cluster_t *c, mu__chan_t *ch, const mu_stage_info_t *si, char *err,
                          size_t el, const char *addr)
{
	mu_tensor_list_t l;
	uint64_t bytes = 0;
	const mu__st_entry_t *sent[4096];
	int ns = 0, rc = 0;

	mu_tensor_list_init(&l);
	for (int k = 0; rc == 0 && k <= si->nparams; k++) {
		const mu__st_entry_t *e = k < si->nparams ? mu__st_find(&c->m->st, si->params[k]) : NULL;
		mu_tensor_t *t = NULL;

		if (e != NULL && (rc = mu__st_view(&c->m->st, e, &t)) == 0 &&
		    (rc = mu_tensor_list_push(&l, t)) != 0)
			mu_tensor_free(t);
		if (rc != 0)
			break;
		if (e != NULL) {
			bytes += mu__st_loaded_bytes(e);
			if (ns < 4096)
				sent[ns++] = e;
		}
		if (l.n > 0 && (e == NULL || bytes >= STREAM_FRAME_BYTES || ns == 4096)) {
			mu__msg_t m = {MU_MSG_WEIGHTS, 0, 0, 0, 0};

			rc = mu__msg_send_frame(ch, &m, &l);
			mu_tensor_list_free(&l);
			for (int j = 0; j < ns; j++)
				mu__st_drop(&c->m->st, sent[j]);
			ns = 0;
			bytes = 0;
		}
	}
	mu_tensor_list_free(&l);
	if (rc != 0)
		snprintf(err, el, "device %s: streaming weights: %s", addr, mu_strerror(rc));
	return rc;
}

/* Give device d stage i; on success its session moves to the coordinator. */
static int assign(mu_cluster_t *c, int i, device_t *d, char *err, size_t el)
{
	mu_stage_info_t si;
	cJSON *o = cJSON_CreateObject(), *shapes, *dtypes;
	mu__msg_t m = {MU_MSG_ASSIGN, 0, 2, 0, 0};
	mu__chan_t ch;
	char hex[20], *body = NULL, *reply = NULL;
	int stream, rc;
	mu__buf_t b;

	mu_plan_stage(c->plan, i, &si);
	if (c->o.weights == MU_WEIGHTS_LOCAL && !holds(d, c->m->digest)) {
		snprintf(err, el, "device %s holds no copy of the model, and weights must be local", d->addr);
		cJSON_Delete(o);
		return MU_EARG;
	}
	stream = c->o.weights == MU_WEIGHTS_STREAM || !holds(d, c->m->digest);
	snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)c->m->digest);
	cJSON_AddNumberToObject(o, "stage", i);
	cJSON_AddNumberToObject(o, "of", c->n);
	cJSON_AddNumberToObject(o, "first", si.first);
	cJSON_AddNumberToObject(o, "last", si.last);
	cJSON_AddStringToObject(o, "digest", hex);
	cJSON_AddNumberToObject(o, "param_bytes", (double)si.param_bytes);
	cJSON_AddStringToObject(o, "weights", stream ? "stream" : "local");
	if (stream) {
		cJSON_AddItemToObject(o, "graph", cJSON_CreateString(c->graph));
		shapes = cJSON_AddObjectToObject(o, "input_shapes");
		dtypes = cJSON_AddObjectToObject(o, "input_dtypes");
		for (int k = 0; k < si.ninputs; k++) {
			const mu__shape_t *sh = mu__strmap_get(&c->m->shapes, si.inputs[k], strlen(si.inputs[k]));
			cJSON *a = cJSON_CreateArray();

			for (uint32_t j = 0; sh != NULL && j < sh->rank; j++)
				cJSON_AddItemToArray(a, cJSON_CreateNumber((double)sh->dims[j]));
			cJSON_AddItemToObject(shapes, si.inputs[k], a);
			if (sh != NULL && sh->dtype != MU_DTYPE_F32) /* F32 when absent */
				cJSON_AddStringToObject(dtypes, si.inputs[k], mu_dtype_name((int)sh->dtype));
		}
	}
	mu__buf_init(&b, MU_MSG_MAX_TEXT);
	rc = mu__json_dump(&b, o) == 0 && mu__buf_appendc(&b, '\0') == 0 ? 0 : MU_ETOOBIG;
	cJSON_Delete(o);
	body = rc == 0 ? mu__buf_take(&b, NULL) : NULL;
	mu__buf_free(&b);
	if (rc != 0) {
		snprintf(err, el, "the stage's description is over 64 MiB");
		return rc;
	}
	mu__chan_init(&ch, mu_session_fd(d->sess), d->sess, c->o.coord.io_timeout_ms,
	              c->o.coord.max_frame_bytes);
	rc = exchange(&ch, &m, body, MU_MSG_READY, &reply, err, el, d->addr);
	mu__free(body);
	if (rc == 0 && stream) {
		mu__free(reply);
		reply = NULL;
		rc = stream_weights(c, &ch, &si, err, el, d->addr);
		m = (mu__msg_t){MU_MSG_LOAD, 0, 3, 0, 0};
		if (rc == 0)
			rc = exchange(&ch, &m, NULL, MU_MSG_READY, &reply, err, el, d->addr);
	}
	if (rc == 0)
		rc = mu__coord_set(c->coord, i, d->sess, d->addr, reply, err, el);
	mu__free(reply);
	if (rc == 0) {
		placed_t *p = &c->placed[i];

		snprintf(p->addr, sizeof(p->addr), "%s", d->addr);
		p->budget = d->budget;
		p->streamed = stream;
		d->sess = NULL; /* the coordinator's now */
		say(c, "  stage %d (nodes %d..%d, %.1f MiB) -> %s, %s", i, si.first, si.last - 1,
		    (double)si.param_bytes / 1048576.0, p->addr,
		    stream ? "weights streamed from here" : "weights from its own copy");
	}
	return rc;
}

/* ---- the run ---- */

static int read_graph(mu_cluster_t *c, char *err, size_t el)
{
	char path[4096], tmp[65536];
	mu__buf_t b;
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "%s/model.json", c->m->dir);
	if ((f = fopen(path, "rb")) == NULL) {
		snprintf(err, el, "cannot read %s: %s", path, strerror(errno));
		return -errno;
	}
	mu__buf_init(&b, MU_GRAPH_MAX_BYTES);
	while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
		if (mu__buf_append(&b, tmp, n) != 0)
			break;
	fclose(f);
	c->graph_len = b.len;
	c->graph = mu__buf_take(&b, NULL);
	mu__buf_free(&b);
	return c->graph != NULL ? 0 : MU_ENOMEM;
}

void mu_cluster_close(mu_cluster_t *c)
{
	if (c == NULL)
		return;
	mu_coord_close(c->coord); /* CLOSE to each: the devices register again */
	mu_plan_free(c->plan);
	mu_md_agent_free(c->md);
	mu__free(c->placed);
	mu__free(c->graph);
	mu__free(c->key);
	mu__free(c->thost);
	mu__free(c);
}

int mu_cluster_start(mu_model_t *m, const mu_cluster_opts_t *o, mu_cluster_t **out, char *err,
                     size_t el)
{
	mu_cluster_t *c;
	mu_md_opts_t mo;
	device_t *devs = NULL;
	uint64_t *budget = NULL;
	int *device = NULL, got = 0, rc;
	char name[96];

	*out = NULL;
	if (err == NULL)
		el = 0;
	if (o->devices < 1 || o->key == NULL || o->tracker_host == NULL) {
		snprintf(err, el, "a cluster run needs a tracker, a key and at least one device");
		return MU_EARG;
	}
	c = mu__calloc(1, sizeof(*c));
	if (c == NULL)
		return MU_ENOMEM;
	c->m = m;
	c->o = *o;
	c->key = mu__strdup(o->key);
	c->thost = mu__strdup(o->tracker_host);
	devs = mu__calloc((size_t)o->devices, sizeof(*devs));
	budget = mu__calloc((size_t)o->devices, sizeof(*budget));
	device = mu__calloc((size_t)o->devices, sizeof(*device));
	rc = c->key == NULL || c->thost == NULL || devs == NULL || budget == NULL || device == NULL
	             ? MU_ENOMEM : read_graph(c, err, el);
	if (rc == 0) {
		char tag[40];

		if (mu__random_key("", tag, sizeof(tag)) != 0)
			snprintf(tag, sizeof(tag), "%ld", (long)getpid());
		snprintf(name, sizeof(name), "muster-coordinator/%ld/%s", (long)getpid(), tag);
		mu_md_opts_init(&mo);
		mo.name = name;
		rc = mu_md_agent_new(&mo, &c->md);
		if (rc != 0)
			snprintf(err, el, "cannot start a metadata agent: %s (are both an etcd and a "
			         "TCPStore configured?)", mu_strerror(rc));
	}
	if (rc == 0)
		say(c, "asking the tracker at %s:%d for %d device%s of key \"%s\" (priority %g)",
		    c->thost, o->tracker_port, o->devices, o->devices == 1 ? "" : "s", c->key,
		    o->priority);
	got = o->devices;
	if (rc == 0)
		rc = get_devices(c, devs, got, err, el);
	for (int i = 0; rc == 0 && i < got; i++)
		budget[i] = devs[i].budget;
	if (rc == 0) {
		rc = mu_plan_budgets(m, budget, got, &c->plan, device, err, el);
		if (rc == MU_ETOOBIG) {
			char why[512];

			snprintf(why, sizeof(why), "%s", err);
			snprintf(err, el, "the model cannot be split over the %d device%s granted: %s", got,
			         got == 1 ? "" : "s", why);
		}
	}
	if (rc == 0) {
		c->n = mu_plan_stages(c->plan);
		c->placed = mu__calloc((size_t)c->n, sizeof(*c->placed));
		rc = c->placed == NULL ? MU_ENOMEM : mu__coord_new(c->n, &o->coord, &c->coord);
	}
	if (rc == 0)
		say(c, "the model (%.1f MiB of weights, %d nodes) is cut into %d stage%s:",
		    (double)mu_model_param_bytes(m) / 1048576.0, mu_model_nodes(m), c->n,
		    c->n == 1 ? "" : "s");
	for (int i = 0; rc == 0 && i < c->n; i++)
		rc = assign(c, i, &devs[device[i]], err, el);
	if (rc == 0)
		rc = mu__coord_check(c->coord, err, el);
	/* devices granted but not used go back to the pool */
	for (int i = 0; devs != NULL && i < got; i++)
		if (devs[i].sess != NULL) {
			if (rc == 0)
				say(c, "  %s is not needed (%.1f MiB budget): released", devs[i].addr,
				    (double)devs[i].budget / 1048576.0);
			mu_session_close(devs[i].sess);
		}
	mu__free(devs);
	mu__free(budget);
	mu__free(device);
	if (rc != 0) {
		mu_cluster_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* Put stage k on a new device after its device was lost. */
static int replace(mu_cluster_t *c, int k, char *err, size_t el)
{
	mu_stage_info_t si;
	device_t d;
	int rc;

	mu_plan_stage(c->plan, k, &si);
	for (int tries = 0; tries < 3; tries++) {
		rc = get_device(c, &d, err, el);
		if (rc != 0)
			return rc;
		if (d.budget >= si.param_bytes) {
			rc = assign(c, k, &d, err, el);
			if (rc == 0) {
				c->placed[k].replaced++;
				c->replacements++;
				return 0;
			}
		} else {
			say(c, "  %s has %.1f MiB for weights, stage %d needs %.1f MiB: released", d.addr,
			    (double)d.budget / 1048576.0, k, (double)si.param_bytes / 1048576.0);
			rc = MU_ETOOBIG;
			snprintf(err, el, "no device with %.1f MiB for stage %d came", (double)si.param_bytes / 1048576.0, k);
		}
		mu_session_close(d.sess);
	}
	return rc;
}

int mu_cluster_forward_many(mu_cluster_t *c, const mu_tensor_list_t *in, int m,
                            mu_tensor_list_t *out, char *err, size_t el)
{
	char why[1024];
	int rc;

	if (err == NULL)
		el = 0;
	for (;;) {
		int k;

		rc = m == 1 ? mu_coord_forward(c->coord, in, out, err, el)
		            : mu_coord_forward_many(c->coord, in, m, out, err, el);
		if (rc == 0)
			return 0;
		k = mu__coord_failed_stage(c->coord);
		if (k < 0 || c->replacements >= c->o.max_replacements)
			return rc;
		for (int j = 0; j < m; j++) { /* whatever came back is run again */
			mu_tensor_list_free(&out[j]);
			mu_tensor_list_init(&out[j]);
		}
		say(c, "%s", err);
		say(c, "device %s (stage %d) is lost; asking the tracker for another", c->placed[k].addr, k);
		snprintf(why, sizeof(why), "%s", err);
		rc = replace(c, k, err, el);
		if (rc != 0) {
			char again[1024];

			snprintf(again, sizeof(again), "%s", err);
			snprintf(err, el, "%s; no replacement: %s", why, again);
			return rc;
		}
	}
}

int mu_cluster_stages(const mu_cluster_t *c)
{
	return c->n;
}

int mu_cluster_replacements(const mu_cluster_t *c)
{
	return c->replacements;
}

void mu_cluster_stage(const mu_cluster_t *c, int i, mu_cluster_stage_t *s)
{
	mu_stage_info_t si;

	mu_plan_stage(c->plan, i, &si);
	s->address = c->placed[i].addr;
	s->budget = c->placed[i].budget;
	s->streamed = c->placed[i].streamed;
	s->replaced = c->placed[i].replaced;
	s->first = si.first;
	s->last = si.last;
	s->param_bytes = si.param_bytes;
	mu_coord_timing(c->coord, i, &s->timing);
}
