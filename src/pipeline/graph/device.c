/* SPDX-License-Identifier: MIT */
/*
 * A device given a graph stage (ASSIGN with no "kind", or "kind":
 * "graph"): loaded from its own copy of the model (a model directory,
 * found by digest), or built from the graph's text in ASSIGN and the
 * weights the coordinator then streams in WEIGHTS frames; LOAD checks
 * that every weight came. The stage kind's device side
 * (mu__stage_kind_t's probe, assign, receive, load); pipeline/device.c
 * is the device.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc_int.h"
#include "core/json_int.h"
#include "core/log_int.h"
#include "core/time_int.h"
#include "graph/model_int.h"
#include "pipeline/device_int.h"
#include "pipeline/graph/stage_int.h"

#define LOG "device"

/* A stage whose weights are streaming. */
typedef struct {
	mu_stage_t *s;
	uint64_t received;      /* weight bytes so far */
} gpending_t;

int mu__graph_dev_probe(const char *path, mu__held_t *h, char *err, size_t el)
{
	char p[4200];
	mu_model_t *m;
	int rc;

	snprintf(p, sizeof(p), "%s/model.json", path);
	if (access(p, F_OK) != 0)
		return 1; /* not a model directory */
	if ((rc = mu_model_open(path, &m, err, el)) != 0)
		return rc;
	h->digest = mu_model_digest(m);
	h->param_bytes = mu_model_param_bytes(m);
	mu_model_close(m);
	return 0;
}

void mu__graph_dev_pending_free(void *pending)
{
	gpending_t *p = pending;

	if (p == NULL)
		return;
	mu_stage_free(p->s);
	mu__free(p);
}

/* The graph stage's forwards use the device's OpenBLAS threads. */
static void ready(mu__device_sess_t *ss, uint64_t id, mu_stage_t *s, mu__reply_t *r)
{
	mu_stage_set_threads(s, mu__device_threads(ss->d));
	mu__device_ready(ss, id, s, r);
}

static void assign_local(mu__device_sess_t *ss, const mu__msg_t *m, uint64_t digest, int idx,
                         int of, int first, int last, mu__reply_t *r)
{
	const char *dir = mu__device_held(ss->d, &mu__stage_kind_graph, digest);
	char err[768] = "";
	mu_stage_t *s = NULL;
	int rc;

	if (dir == NULL) {
		mu__reply_error(r, m->id, MU_EARG, 1, "this device holds no model with digest %016llx",
		                (unsigned long long)digest);
	} else if ((rc = mu_stage_load_range(dir, idx, of, first, last, &s, err, sizeof(err))) != 0) {
		mu__reply_error(r, m->id, rc, 1, "loading stage %d/%d from %s: %s", idx, of, dir, err);
	} else {
		mu__log(MU_LOG_INFO, LOG, "stage %d/%d (nodes %d..%d) loaded from %s", idx, of, first,
		        last - 1, dir);
		ready(ss, m->id, s, r);
	}
}

static void assign_stream(mu__device_sess_t *ss, const mu__msg_t *m, const cJSON *o,
                          uint64_t digest, int idx, int of, int first, int last, mu__reply_t *r)
{
	const cJSON *g = cJSON_GetObjectItemCaseSensitive(o, "graph");
	gpending_t *p = mu__calloc(1, sizeof(*p));
	char err[768] = "";
	int rc;

	if (p == NULL) {
		mu__reply_error(r, m->id, MU_ENOMEM, 1, "out of memory");
		return;
	}
	rc = mu__stage_new(g->valuestring, strlen(g->valuestring), first, last, idx, of, digest,
	                   cJSON_GetObjectItemCaseSensitive(o, "input_shapes"),
	                   cJSON_GetObjectItemCaseSensitive(o, "input_dtypes"), &p->s, err,
	                   sizeof(err));
	if (rc != 0) {
		mu__free(p);
		mu__reply_error(r, m->id, rc, 1, "stage %d/%d: %s", idx, of, err);
		return;
	}
	ss->kind = &mu__stage_kind_graph;
	ss->pending = p;
	r->m = (mu__msg_t){MU_MSG_READY, 0, m->id, 0, 0, 0};
	r->text = mu__strdup("{\"weights\": \"stream\"}");
	r->text_owned = 1;
}

void mu__graph_dev_assign(mu__device_sess_t *ss, const mu__msg_t *m, const cJSON *o,
                          mu__reply_t *r)
{
	const cJSON *w = cJSON_GetObjectItemCaseSensitive(o, "weights");
	const cJSON *dg = cJSON_GetObjectItemCaseSensitive(o, "digest");
	unsigned long long digest = 0;
	int idx, of, first, last;
	double need;

	/* every number range-checked before it becomes an int: node indices
	 * are non-negative ints, and cut() computes last - 1 */
	if (mu__json_int(cJSON_GetObjectItemCaseSensitive(o, "of"), 1, INT_MAX, &of) != 0 ||
	    mu__json_int(cJSON_GetObjectItemCaseSensitive(o, "stage"), 0, of - 1, &idx) != 0 ||
	    mu__json_int(cJSON_GetObjectItemCaseSensitive(o, "first"), 0, INT_MAX, &first) != 0 ||
	    mu__json_int(cJSON_GetObjectItemCaseSensitive(o, "last"), 0, INT_MAX, &last) != 0 ||
	    mu__json_double(cJSON_GetObjectItemCaseSensitive(o, "param_bytes"), 0,
	                    (double)MU_JSON_INT_MAX, &need) != 0 ||
	    !cJSON_IsString(w) || !cJSON_IsString(dg) || sscanf(dg->valuestring, "%llx", &digest) != 1) {
		mu__reply_error(r, m->id, MU_EPROTO, 1, "ASSIGN lacks stage, of, first, last, "
		                "param_bytes, digest or weights, or one is out of range");
		return;
	}
	if (need > (double)mu__device_mem(ss->d)) {
		mu__reply_error(r, m->id, MU_ETOOBIG, 1, "stage %d/%d needs %.0f bytes of weights; this "
		                "device's budget is %llu", idx, of, need,
		                (unsigned long long)mu__device_mem(ss->d));
		return;
	}
	if (strcmp(w->valuestring, "local") == 0)
		assign_local(ss, m, digest, idx, of, first, last, r);
	else if (strcmp(w->valuestring, "stream") == 0 &&
	         cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "graph")))
		assign_stream(ss, m, o, digest, idx, of, first, last, r);
	else
		mu__reply_error(r, m->id, MU_EPROTO, 1, "weights must be \"local\" or \"stream\" "
		                "(with the graph)");
}

/* WEIGHTS: each tensor of the frame is one of the stage's weights. */
void mu__graph_dev_weights(mu__device_sess_t *ss, const mu__msg_t *m, const char *body,
                           mu_tensor_list_t *in, mu__reply_t *r)
{
	gpending_t *p = ss->pending;
	char err[512];

	(void)body;
	for (size_t i = 0; i < in->n; i++) {
		mu_tensor_t *t = in->t[i];

		p->received += mu_tensor_nbytes(t);
		if (p->received > mu__device_mem(ss->d)) {
			mu__reply_error(r, m->id, MU_ETOOBIG, 1, "the weights sent pass this device's budget "
			                "of %llu bytes", (unsigned long long)mu__device_mem(ss->d));
			return;
		}
		if (mu__stage_add_param(p->s, t, err, sizeof(err)) != 0) {
			mu__reply_error(r, m->id, MU_EPROTO, 1, "%s", err);
			return;
		}
		in->t[i] = NULL; /* the stage has it */
	}
	in->n = 0;
}

void mu__graph_dev_load(mu__device_sess_t *ss, const mu__msg_t *m, mu__reply_t *r)
{
	gpending_t *p = ss->pending;
	mu_stage_t *s = p->s;
	char err[512];
	int first, last;

	if (mu__stage_finish(s, mu__clock_ms() - ss->t0, err, sizeof(err)) != 0) {
		mu__reply_error(r, m->id, MU_EPROTO, 1, "%s", err);
		return;
	}
	mu__graph_stage_nodes(s, &first, &last);
	mu__log(MU_LOG_INFO, LOG, "stage %d/%d (nodes %d..%d) built from %llu streamed bytes",
	        s->index, s->of, first, last - 1, (unsigned long long)p->received);
	p->s = NULL;
	mu__graph_dev_pending_free(p);
	ss->pending = NULL;
	ss->kind = NULL;
	ready(ss, m->id, s, r);
}
