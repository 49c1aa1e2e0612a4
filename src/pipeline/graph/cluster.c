/* SPDX-License-Identifier: MIT */
/*
 * The main job for a graph model, coordinator side: the lifecycle is
 * pipeline/cluster.c's (devices from the tracker, the plan to their
 * budgets, each stage assigned and loaded, a lost device replaced); this
 * file is the graph kind's part of it: the plan (mu_plan_budgets), a
 * stage's ASSIGN (its node range, and the graph and input shapes when
 * its weights are streamed), the weights streamed from our mapped file a
 * bounded frame at a time, and the coordinator that runs the forwards,
 * which run again after a replacement.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/json_int.h"
#include "core/opts_int.h"
#include "core/progress_int.h"
#include "core/rand_int.h"
#include "formats/safetensors_int.h"
#include "graph/model_int.h"
#include "pipeline/cluster_int.h"
#include "pipeline/devices_int.h"
#include "pipeline/graph/coord_int.h"
#include "pipeline/opts_int.h"

#define STREAM_FRAME_BYTES ((uint64_t)64 << 20)

struct mu_cluster_s {
	mu__cluster_t base;     /* the lifecycle: devices, stages placed */
	mu_model_t *m;
	mu_cluster_opts_t o;    /* o.coord points at co */
	mu_coord_opts_t co;
	mu_plan_t *plan;
	mu_coord_t *coord;
};

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

/* ---- the graph kind's steps of the lifecycle ---- */

static int kind_plan(void *ud, const uint64_t *budget, int nd, int *device, int *n, char *err,
                     size_t el)
{
	mu_cluster_t *c = ud;
	int rc = mu_plan_budgets(c->m, budget, nd, &c->plan, device, err, el);

	if (rc == MU_ETOOBIG) {
		char why[512];

		snprintf(why, sizeof(why), "%s", err);
		snprintf(err, el, "the model cannot be split over the %d device%s granted: %s", nd,
		         nd == 1 ? "" : "s", why);
	}
	if (rc != 0)
		return rc;
	*n = mu_plan_stages(c->plan);
	if ((rc = mu__coord_new(*n, &c->co, &c->coord)) != 0)
		return rc;
	mu__devpool_say(&c->base.pool, "the model (%.1f MiB of weights, %d nodes) is cut into %d stage%s:",
	                (double)mu_model_param_bytes(c->m) / 1048576.0, mu_model_nodes(c->m), *n,
	                *n == 1 ? "" : "s");
	return 0;
}

static uint64_t kind_need(void *ud, int i)
{
	mu_stage_info_t si;

	mu_plan_stage(((mu_cluster_t *)ud)->plan, i, &si);
	return si.param_bytes;
}

static void kind_range(void *ud, int i, char *buf, size_t n)
{
	mu_stage_info_t si;

	mu_plan_stage(((mu_cluster_t *)ud)->plan, i, &si);
	snprintf(buf, n, "nodes %d..%d", si.first, si.last - 1);
}

/* ASSIGN: the node range; streamed, also the graph and its input shapes. */
static int kind_assign(void *ud, int i, int stream, char **body, char *err, size_t el)
{
	mu_cluster_t *c = ud;
	mu_stage_info_t si;
	cJSON *o = cJSON_CreateObject(), *shapes, *dtypes;
	char hex[20];
	mu__buf_t b;
	int rc;

	mu_plan_stage(c->plan, i, &si);
	snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)c->m->digest);
	cJSON_AddNumberToObject(o, "stage", i);
	cJSON_AddNumberToObject(o, "of", c->base.n);
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
	*body = rc == 0 ? mu__buf_take(&b, NULL) : NULL;
	mu__buf_free(&b);
	if (rc != 0)
		snprintf(err, el, "the stage's description is over 64 MiB");
	return rc;
}

static int kind_stream(void *ud, int i, mu__chan_t *ch, const char *ready, const char *addr,
                       char *err, size_t el)
{
	mu_cluster_t *c = ud;
	mu_stage_info_t si;

	(void)ready; /* the device wants the stage's weights, all of them */
	mu_plan_stage(c->plan, i, &si);
	return stream_weights(c, ch, &si, err, el, addr);
}

static int kind_set(void *ud, int i, mu_session_t *sess, const char *addr, const char *desc,
                    char *err, size_t el)
{
	return mu__coord_set(((mu_cluster_t *)ud)->coord, i, sess, addr, desc, err, el);
}

static int kind_check(void *ud, char *err, size_t el)
{
	return mu__coord_check(((mu_cluster_t *)ud)->coord, err, el);
}

static void kind_placed(void *ud, int i, const char *addr, int streamed, double ms)
{
	mu_cluster_t *c = ud;
	mu_stage_info_t si;

	(void)ms;
	mu_plan_stage(c->plan, i, &si);
	mu__devpool_say(&c->base.pool, "  stage %d (nodes %d..%d, %.1f MiB) -> %s, %s", i, si.first,
	                si.last - 1, (double)si.param_bytes / 1048576.0, addr,
	                streamed ? "weights streamed from here" : "weights from its own copy");
}

static const mu__cluster_kind_t graph_kind = {
	"model", kind_plan, kind_need, kind_range, kind_assign, kind_stream, kind_set, kind_check,
	kind_placed,
};

/* ---- the run ---- */

void mu_cluster_close(mu_cluster_t *c)
{
	if (c == NULL)
		return;
	mu_coord_close(c->coord); /* CLOSE to each: the devices register again */
	mu_plan_free(c->plan);
	mu__cluster_free(&c->base);
	mu__free(c);
}

int mu_cluster_start(mu_model_t *m, const mu_cluster_opts_t *uo, mu_cluster_t **out, char *err,
                     size_t el)
{
	mu__cluster_opts_t lo;
	mu_cluster_t *c;
	char own[1024];
	int rc;

	*out = NULL;
	if (err == NULL) { /* the steps quote each other's errors: keep them */
		err = own;
		el = sizeof(own);
	}
	if ((c = mu__calloc(1, sizeof(*c))) == NULL)
		return MU_ENOMEM;
	mu__cluster_defaults(&c->o);
	mu__coord_defaults(&c->co);
	if (mu__opts_read(&c->o, sizeof(c->o), uo) != 0 ||
	    (c->o.coord != NULL && mu__opts_read(&c->co, sizeof(c->co), c->o.coord) != 0)) {
		snprintf(err, el, "cluster options not made by mu_cluster_opts_init, or asking for "
		         "what this library (%s) does not have", mu_version());
		mu__free(c);
		return MU_EARG;
	}
	if (c->o.devices < 1 || c->o.key == NULL || c->o.tracker_host == NULL) {
		snprintf(err, el, "a cluster run needs a tracker, a key and at least one device");
		mu__free(c);
		return MU_EARG;
	}
	c->m = m;
	c->o.coord = &c->co;
	lo = (mu__cluster_opts_t){
		.pool = {c->o.tracker_host, c->o.key, c->o.tracker_port, c->o.priority,
		         c->o.request_timeout_ms, c->co.io_timeout_ms, c->co.max_frame_bytes,
		         c->co.sec, c->o.say, c->o.ud},
		.devices = c->o.devices, .weights = c->o.weights, .digest = m->digest,
		.max_replacements = c->o.max_replacements};
	if ((rc = mu__cluster_start(&c->base, &graph_kind, c, &lo, err, el)) != 0) {
		mu_cluster_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

int mu_cluster_forward_many(mu_cluster_t *c, const mu_tensor_list_t *in, int m,
                            mu_tensor_list_t *out, char *err, size_t el)
{
	char why[1024], own[1024];
	int rc;

	if (err == NULL) {
		err = own;
		el = sizeof(own);
	}
	for (;;) {
		int k;

		rc = m == 1 ? mu_coord_forward(c->coord, in, out, err, el)
		            : mu_coord_forward_many(c->coord, in, m, out, err, el);
		if (rc == 0)
			return 0;
		k = mu__coord_failed_stage(c->coord);
		if (k < 0 || c->base.replacements >= c->o.max_replacements)
			return rc;
		for (int j = 0; j < m; j++) { /* whatever came back is run again */
			mu_tensor_list_free(&out[j]);
			mu_tensor_list_init(&out[j]);
		}
		mu__devpool_say(&c->base.pool, "%s", err);
		snprintf(why, sizeof(why), "%s", err);
		rc = mu__cluster_replace(&c->base, k, err, el);
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
	return c->base.n;
}

int mu_cluster_replacements(const mu_cluster_t *c)
{
	return c->base.replacements;
}

void mu_cluster_stage(const mu_cluster_t *c, int i, mu_cluster_stage_t *s)
{
	const mu__placed_t *p = &c->base.placed[i];
	mu_stage_info_t si;

	mu_plan_stage(c->plan, i, &si);
	s->address = p->addr;
	s->budget = p->budget;
	s->streamed = p->streamed;
	s->replaced = p->replaced;
	s->first = si.first;
	s->last = si.last;
	s->param_bytes = si.param_bytes;
	mu_coord_timing(c->coord, i, &s->timing);
}
