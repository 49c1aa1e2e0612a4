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
#include "core/opts_int.h"
#include "core/progress_int.h"
#include "core/rand_int.h"
#include "formats/safetensors_int.h"
#include "graph/model_int.h"
#include "pipeline/devices_int.h"
#include "pipeline/graph/coord_int.h"

#define STREAM_FRAME_BYTES ((uint64_t)64 << 20)

typedef struct {
	char addr[300];
	uint64_t budget;
	int streamed;
	int replaced;
} placed_t;

struct mu_cluster_s {
	mu_model_t *m;
	mu_cluster_opts_t o;    /* o.coord points at co */
	mu_coord_opts_t co;
	mu__devpool_t pool;     /* the tracker, the key, the md agent */
	mu_plan_t *plan;
	mu_coord_t *coord;
	placed_t *placed;
	int n;
	int replacements;
};

static void cluster_defaults(mu_cluster_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->struct_size = sizeof(*o);
	o->tracker_host = "127.0.0.1";
	o->tracker_port = 9190;
	o->devices = 1;
	o->request_timeout_ms = 30000;
	o->weights = MU_WEIGHTS_AUTO;
	o->max_replacements = 3;
	o->coord = NULL;
}

void mu_cluster_opts_init_size(mu_cluster_opts_t *o, size_t size)
{
	mu_cluster_opts_t d;

	cluster_defaults(&d);
	mu__opts_fill(o, size, &d, sizeof(d));
}

/* ---- one device ---- */

/* Stream stage i's weights: bounded frames, read from the mapped file,
 * whose pages leave our resident set once sent. */
static int stream_weights(mu_cluster_t *c, mu__chan_t *ch, const mu_stage_info_t *si, char *err,
                          size_t el, const char *addr)
{
	mu_tensor_list_t l;
	uint64_t bytes = 0, done = 0, total = 0;
	const mu__st_entry_t *sent[4096];
	int ns = 0, rc = 0;
	mu__progress_t pr;

	for (int k = 0; k < si->nparams; k++) {
		const mu__st_entry_t *e = mu__st_find(&c->m->st, si->params[k]);

		total += e != NULL ? mu__st_loaded_bytes(e) : 0;
	}
	mu__progress_start(&pr, total, "weights -> %s", addr);
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
			mu__msg_t m = {MU_MSG_WEIGHTS, 0, 0, 0, 0, 0};

			rc = mu__msg_send_frame(ch, &m, &l);
			mu_tensor_list_free(&l);
			done += bytes;
			if (rc == 0)
				mu__progress_bytes(&pr, done);
			for (int j = 0; j < ns; j++)
				mu__st_drop(&c->m->st, sent[j]);
			ns = 0;
			bytes = 0;
		}
	}
	mu_tensor_list_free(&l);
	mu__progress_end(&pr);
	if (rc != 0)
		snprintf(err, el, "device %s: streaming weights: %s", addr, mu_strerror(rc));
	return rc;
}

/* Give device d stage i; on success its session moves to the coordinator. */
static int assign(mu_cluster_t *c, int i, mu__device_t *d, char *err, size_t el)
{
	mu_stage_info_t si;
	cJSON *o = cJSON_CreateObject(), *shapes, *dtypes;
	mu__msg_t m = {MU_MSG_ASSIGN, 0, 2, 0, 0, 0};
	mu__chan_t ch;
	char hex[20], *body = NULL, *reply = NULL;
	int stream, rc;
	mu__buf_t b;

	mu_plan_stage(c->plan, i, &si);
	if (c->o.weights == MU_WEIGHTS_LOCAL && !mu__device_holds(d, c->m->digest)) {
		snprintf(err, el, "device %s holds no copy of the model, and weights must be local", d->addr);
		cJSON_Delete(o);
		return MU_EARG;
	}
	stream = c->o.weights == MU_WEIGHTS_STREAM || !mu__device_holds(d, c->m->digest);
	snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)c->m->digest);
	cJSON_AddNumberToObject(o, "stage", i);
	cJSON_AddNumberToObject(o, "of", c->n);
	cJSON_AddNumberToObject(o, "first", si.first);
	cJSON_AddNumberToObject(o, "last", si.last);
	cJSON_AddStringToObject(o, "digest", hex);
	cJSON_AddNumberToObject(o, "param_bytes", (double)si.param_bytes);
	cJSON_AddStringToObject(o, "weights", stream ? "stream" : "local");
	if (stream) {
		cJSON_AddItemToObject(o, "graph", cJSON_CreateString(c->m->text));
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
	mu__chan_init(&ch, mu_session_stream(d->sess), d->sess, c->co.io_timeout_ms,
	              c->co.max_frame_bytes);
	rc = mu__device_exchange(&ch, &m, body, MU_MSG_READY, &reply, err, el, d->addr);
	mu__free(body);
	if (rc == 0 && stream) {
		mu__free(reply);
		reply = NULL;
		rc = stream_weights(c, &ch, &si, err, el, d->addr);
		m = (mu__msg_t){MU_MSG_LOAD, 0, 3, 0, 0, 0};
		if (rc == 0)
			rc = mu__device_exchange(&ch, &m, NULL, MU_MSG_READY, &reply, err, el, d->addr);
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
		mu__devpool_say(&c->pool, "  stage %d (nodes %d..%d, %.1f MiB) -> %s, %s", i, si.first, si.last - 1,
		    (double)si.param_bytes / 1048576.0, p->addr,
		    stream ? "weights streamed from here" : "weights from its own copy");
	}
	return rc;
}

/* ---- the run ---- */

void mu_cluster_close(mu_cluster_t *c)
{
	if (c == NULL)
		return;
	mu_coord_close(c->coord); /* CLOSE to each: the devices register again */
	mu_plan_free(c->plan);
	mu__devpool_free(&c->pool);
	mu__free(c->placed);
	mu__free(c);
}

int mu_cluster_start(mu_model_t *m, const mu_cluster_opts_t *uo, mu_cluster_t **out, char *err,
                     size_t el)
{
	mu_cluster_opts_t oo, *o = &oo;
	mu_coord_opts_t co;
	mu__devpool_opts_t po;
	mu_cluster_t *c;
	mu__device_t *devs = NULL;
	uint64_t *budget = NULL;
	int *device = NULL, got = 0, rc;

	*out = NULL;
	if (err == NULL)
		el = 0;
	cluster_defaults(o);
	mu__coord_defaults(&co);
	if (mu__opts_read(o, sizeof(*o), uo) != 0 ||
	    (o->coord != NULL && mu__opts_read(&co, sizeof(co), o->coord) != 0)) {
		snprintf(err, el, "cluster options not made by mu_cluster_opts_init, or asking for "
		         "what this library (%s) does not have", mu_version());
		return MU_EARG;
	}
	if (o->devices < 1 || o->key == NULL || o->tracker_host == NULL) {
		snprintf(err, el, "a cluster run needs a tracker, a key and at least one device");
		return MU_EARG;
	}
	po = (mu__devpool_opts_t){o->tracker_host, o->key, o->tracker_port, o->priority,
	                          o->request_timeout_ms, co.io_timeout_ms, co.max_frame_bytes,
	                          co.sec, o->say, o->ud};
	c = mu__calloc(1, sizeof(*c));
	if (c == NULL)
		return MU_ENOMEM;
	c->m = m;
	c->o = *o;
	c->co = co;
	c->o.coord = &c->co;
	devs = mu__calloc((size_t)o->devices, sizeof(*devs));
	budget = mu__calloc((size_t)o->devices, sizeof(*budget));
	device = mu__calloc((size_t)o->devices, sizeof(*device));
	rc = devs == NULL || budget == NULL || device == NULL ? MU_ENOMEM : 0;
	if (rc == 0)
		rc = mu__devpool_init(&c->pool, &po, err, el);
	if (rc == 0)
		mu__devpool_say(&c->pool, "asking the tracker at %s:%d for %d device%s of key \"%s\" (priority %g)",
		    o->tracker_host, o->tracker_port, o->devices, o->devices == 1 ? "" : "s", o->key,
		    o->priority);
	got = o->devices;
	if (rc == 0)
		rc = mu__devpool_get_many(&c->pool, devs, got, err, el);
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
		rc = c->placed == NULL ? MU_ENOMEM : mu__coord_new(c->n, &c->co, &c->coord);
	}
	if (rc == 0)
		mu__devpool_say(&c->pool, "the model (%.1f MiB of weights, %d nodes) is cut into %d stage%s:",
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
				mu__devpool_say(&c->pool, "  %s is not needed (%.1f MiB budget): released", devs[i].addr,
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
	mu__device_t d;
	int rc;

	mu_plan_stage(c->plan, k, &si);
	for (int tries = 0; tries < 3; tries++) {
		rc = mu__devpool_get(&c->pool, &d, err, el);
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
			mu__devpool_say(&c->pool, "  %s has %.1f MiB for weights, stage %d needs %.1f MiB: released", d.addr,
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
		mu__devpool_say(&c->pool, "%s", err);
		mu__devpool_say(&c->pool, "device %s (stage %d) is lost; asking the tracker for another", c->placed[k].addr, k);
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
