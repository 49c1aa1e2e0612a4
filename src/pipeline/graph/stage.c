/* SPDX-License-Identifier: MIT */
/*
 * The graph stage kind: a contiguous range of a graph's nodes with only
 * the weights those nodes read. Loaded from a model directory (its own
 * tensors read from the mapped file, nothing else touched) or assigned
 * over a session (the graph as text, the weights streamed in frames;
 * pipeline/graph/device.c). Forwards check their inputs by name, shape
 * and dtype before anything runs. Its table (mu__stage_kind_graph) is at
 * the end.
 */
#include <stdio.h>
#include <string.h>

#include <uv.h>

#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/json_int.h"
#include "core/log_int.h"
#include "core/proc_int.h"
#include "core/strmap_int.h"
#include "core/time_int.h"
#include "graph/graph_int.h"
#include "graph/model_int.h"
#include "graph/plan_int.h"
#include "formats/safetensors_int.h"
#include "pipeline/graph/stage_int.h"

#define LOG "stage"

/* A graph stage: the common head first (pipeline/stage_int.h). */
typedef struct {
	mu_stage_t base;
	mu_model_t *model;     /* owned, when loaded from a directory */
	mu__graph_t own;       /* the graph, when assigned over a session */
	const mu__graph_t *g;
	mu__plan_t plan;       /* one stage: the range and its boundary */
	mu__strmap_t in_shapes;/* input -> mu__shape_t, when known */
	mu__strmap_t params;   /* name -> mu_tensor_t */
	uint64_t resident;     /* bytes of the weights held */
	uint64_t rss;          /* the process's resident set after loading */
	double load_ms;
	uv_mutex_t lock;       /* one forward at a time */
	mu__pool_t *pool;      /* its forwards' products split over it; NULL:
	                        * one thread (mu_stage_set_threads) */
} gstage_t;

/* Every stage of this file's functions is a graph stage (the table's). */
static gstage_t *gs(mu_stage_t *s)
{
	return (gstage_t *)s;
}

static void tensor_free(void *t)
{
	mu_tensor_free(t);
}

static gstage_t *stage_alloc(void)
{
	gstage_t *s = mu__calloc(1, sizeof(*s));

	if (s == NULL)
		return NULL;
	s->base.kind = &mu__stage_kind_graph;
	mu__strmap_init(&s->in_shapes);
	mu__strmap_init(&s->params);
	uv_mutex_init(&s->lock);
	return s;
}

static int set_threads(mu_stage_t *st, int threads)
{
	gstage_t *s = gs(st);
	int rc;

	uv_mutex_lock(&s->lock); /* not under a forward */
	rc = mu__model_pool_set(&s->pool, threads);
	uv_mutex_unlock(&s->lock);
	return rc;
}

static void stage_free(mu_stage_t *st)
{
	gstage_t *s = gs(st);

	mu__strmap_free(&s->params, tensor_free);
	mu__strmap_free(&s->in_shapes, mu__free);
	mu__plan_free(&s->plan);
	if (s->g == &s->own)
		mu__graph_free(&s->own);
	mu_model_close(s->model);
	mu__free(s->base.desc);
	mu__pool_free(s->pool);
	uv_mutex_destroy(&s->lock);
	mu__free(s);
}

void mu__graph_stage_nodes(const mu_stage_t *st, int *first, int *last)
{
	const gstage_t *s = (const gstage_t *)st;

	*first = s->plan.s[0].first;
	*last = s->plan.s[0].last;
}

static int put_shape(gstage_t *s, const char *name, const mu__shape_t *sh)
{
	mu__shape_t *c = mu__memdup(sh, sizeof(*sh));

	if (c == NULL)
		return MU_ENOMEM;
	if (mu__strmap_put(&s->in_shapes, name, strlen(name), c, NULL) != 0) {
		mu__free(c);
		return MU_ENOMEM;
	}
	return 0;
}

static int cut(gstage_t *s, int first, int last, const mu__strmap_t *bytes,
               const double *flops, char *err, size_t el)
{
	int cuts[2] = {first, last};

	if (first < 0 || last > s->g->nnodes || first >= last) {
		/* last - 1 in a wider type: last may be INT_MIN from a C caller */
		snprintf(err, el, "nodes %d..%lld are not a range of this %d-node graph", first,
		         (long long)last - 1, s->g->nnodes);
		return MU_EARG;
	}
	return mu__plan_from_cuts(s->g, cuts, 1, bytes, flops, &s->plan);
}

int mu__stage_new(const char *graph_json, size_t len, int first, int last, int index, int of,
                  uint64_t digest, const cJSON *in_shapes, const cJSON *in_dtypes,
                  mu_stage_t **out, char *err, size_t el)
{
	char why[512] = "";
	gstage_t *s = stage_alloc();
	const cJSON *it;
	int rc;

	*out = NULL;
	if (s == NULL)
		return MU_ENOMEM;
	s->base.index = index;
	s->base.of = of;
	s->base.digest = digest;
	rc = mu__graph_parse(graph_json, len, &s->own, why, sizeof(why));
	if (rc != 0) {
		snprintf(err, el, "the assigned graph is not valid: %s", why);
		s->g = NULL; /* a failed parse frees what it made */
		stage_free(&s->base);
		return rc;
	}
	s->g = &s->own;
	rc = cut(s, first, last, NULL, NULL, err, el);
	cJSON_ArrayForEach(it, in_shapes) {
		const cJSON *dt = cJSON_GetObjectItemCaseSensitive(in_dtypes, it->string);
		mu__shape_t sh = {0};
		const cJSON *d;

		if (rc != 0)
			break;
		if (dt != NULL && (!cJSON_IsString(dt) || mu_dtype_from_name(dt->valuestring) < 0)) {
			snprintf(err, el, "the dtype of %.200s is not one muster knows", it->string);
			rc = MU_EPROTO;
			break;
		}
		if (dt != NULL)
			sh.dtype = (mu_dtype_t)mu_dtype_from_name(dt->valuestring);
		if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) > MU_TENSOR_MAX_RANK) {
			snprintf(err, el, "the shape of %.200s is not a list of at most 8 dims", it->string);
			rc = MU_EPROTO;
			break;
		}
		cJSON_ArrayForEach(d, it) {
			if (mu__json_u64(d, MU_JSON_INT_MAX, &sh.dims[sh.rank]) != 0) {
				snprintf(err, el, "the shape of %.200s has a dim that is not a size", it->string);
				rc = MU_EPROTO;
				break;
			}
			sh.rank++;
		}
		if (rc == 0)
			rc = put_shape(s, it->string, &sh);
	}
	if (rc != 0) {
		stage_free(&s->base);
		return rc;
	}
	*out = &s->base;
	return 0;
}

static int is_param(const gstage_t *s, const char *name)
{
	for (int i = 0; i < s->plan.s[0].nparams; i++)
		if (strcmp(s->plan.s[0].params[i], name) == 0)
			return 1;
	return 0;
}

int mu__stage_add_param(mu_stage_t *st, mu_tensor_t *t, char *err, size_t el)
{
	gstage_t *s = gs(st);

	if (!is_param(s, t->name)) {
		snprintf(err, el, "%.200s is not a weight of this stage", t->name);
		return MU_EPROTO;
	}
	if (mu__strmap_get(&s->params, t->name, strlen(t->name)) != NULL) {
		snprintf(err, el, "weight %.200s was sent twice", t->name);
		return MU_EPROTO;
	}
	if (mu__strmap_put(&s->params, t->name, strlen(t->name), t, NULL) != 0)
		return MU_ENOMEM;
	s->resident += mu_tensor_nbytes(t);
	return 0;
}

static int describe(gstage_t *s)
{
	const mu__stage_t *io = &s->plan.s[0];
	cJSON *o = cJSON_CreateObject(), *a, *x;
	char hex[20];
	mu__buf_t b;
	int rc;

	if (o == NULL)
		return MU_ENOMEM;
	snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)s->base.digest);
	cJSON_AddNumberToObject(o, "stage", s->base.index);
	cJSON_AddNumberToObject(o, "of", s->base.of);
	cJSON_AddNumberToObject(o, "first", io->first);
	cJSON_AddNumberToObject(o, "last", io->last);
	cJSON_AddNumberToObject(o, "nodes", s->g->nnodes);
	cJSON_AddStringToObject(o, "digest", hex);
	a = cJSON_AddArrayToObject(o, "inputs");
	for (int i = 0; a != NULL && i < io->ninputs; i++) {
		const mu__shape_t *sh = mu__strmap_get(&s->in_shapes, io->inputs[i], strlen(io->inputs[i]));
		cJSON *d = cJSON_CreateArray();

		x = cJSON_CreateObject();
		cJSON_AddStringToObject(x, "name", io->inputs[i]);
		for (uint32_t k = 0; sh != NULL && k < sh->rank; k++)
			cJSON_AddItemToArray(d, cJSON_CreateNumber((double)sh->dims[k]));
		cJSON_AddItemToObject(x, "shape", sh != NULL ? d : cJSON_CreateNull());
		if (sh == NULL)
			cJSON_Delete(d);
		cJSON_AddItemToArray(a, x);
	}
	a = cJSON_AddArrayToObject(o, "outputs");
	for (int i = 0; a != NULL && i < io->noutputs; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(io->outputs[i]));
	a = cJSON_AddArrayToObject(o, "model_outputs");
	for (int i = 0; a != NULL && i < s->g->noutputs; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(s->g->outputs[i]));
	cJSON_AddNumberToObject(o, "params", io->nparams);
	cJSON_AddNumberToObject(o, "resident_bytes", (double)s->resident);
	cJSON_AddNumberToObject(o, "rss_bytes", (double)s->rss);
	cJSON_AddNumberToObject(o, "load_ms", s->load_ms);
	mu__buf_init(&b, MU_MSG_MAX_TEXT);
	rc = mu__json_dump(&b, o);
	cJSON_Delete(o);
	if (rc == 0)
		rc = mu__buf_appendc(&b, '\0');
	if (rc != 0) {
		mu__buf_free(&b);
		return rc;
	}
	mu__free(s->base.desc);
	s->base.desc = mu__buf_take(&b, NULL);
	return s->base.desc != NULL ? 0 : MU_ENOMEM;
}

int mu__stage_finish(mu_stage_t *st, double load_ms, char *err, size_t el)
{
	gstage_t *s = gs(st);
	const mu__stage_t *io = &s->plan.s[0];
	int rc;

	for (int i = 0; i < io->nparams; i++)
		if (mu__strmap_get(&s->params, io->params[i], strlen(io->params[i])) == NULL) {
			snprintf(err, el, "weight %.200s was never sent", io->params[i]);
			return MU_EPROTO;
		}
	s->load_ms = load_ms;
	s->rss = mu__self_rss();
	rc = describe(s);
	if (rc != 0)
		snprintf(err, el, "out of memory describing the stage");
	return rc;
}

/* first < 0: the balanced n-way split's stage i */
static int load(const char *dir, int i, int n, int first, int last, mu_stage_t **out, char *err,
                size_t el)
{
	double t0 = mu__clock_ms();
	gstage_t *s;
	mu_plan_t *plan = NULL;
	mu_stage_info_t si;
	int rc;

	*out = NULL;
	if (err == NULL)
		el = 0;
	if (n < 1 || i < 0 || i >= n) {
		snprintf(err, el, "stage %d of %d does not exist (stages count from 0)", i, n);
		return MU_EARG;
	}
	if ((s = stage_alloc()) == NULL)
		return MU_ENOMEM;
	s->base.index = i;
	s->base.of = n;
	rc = mu_model_open(dir, &s->model, err, el);
	if (rc == 0) {
		s->g = &s->model->g;
		s->base.digest = s->model->digest;
	}
	if (rc == 0 && first < 0) {
		rc = mu_plan_balanced(s->model, n, MU_SPLIT_PARAMS, &plan, err, el);
		if (rc == 0) {
			mu_plan_stage(plan, i, &si);
			first = si.first;
			last = si.last;
		}
		mu_plan_free(plan);
	}
	if (rc == 0)
		rc = cut(s, first, last, &s->model->pbytes, s->model->flops, err, el);
	for (int k = 0; rc == 0 && k < s->plan.s[0].ninputs; k++) {
		const char *x = s->plan.s[0].inputs[k];
		const mu__shape_t *sh = mu__strmap_get(&s->model->shapes, x, strlen(x));

		if (sh != NULL)
			rc = put_shape(s, x, sh);
	}
	/* only this stage's weights: the rest of the file is never touched */
	for (int k = 0; rc == 0 && k < s->plan.s[0].nparams; k++) {
		const char *p = s->plan.s[0].params[k];
		mu_tensor_t *t;

		rc = mu__st_load(&s->model->st, mu__st_find(&s->model->st, p), &t);
		if (rc == 0 && (rc = mu__stage_add_param(&s->base, t, err, el)) != 0)
			mu_tensor_free(t);
		else if (rc != 0)
			snprintf(err, el, "loading weight %.200s: %s", p, mu_strerror(rc));
	}
	if (rc == 0)
		rc = mu__stage_finish(&s->base, mu__clock_ms() - t0, err, el);
	if (rc != 0) {
		stage_free(&s->base);
		return rc;
	}
	*out = &s->base;
	return 0;
}

int mu_stage_load(const char *dir, int i, int n, mu_stage_t **out, char *err, size_t el)
{
	return load(dir, i, n, -1, -1, out, err, el);
}

int mu_stage_load_range(const char *dir, int i, int n, int first, int last, mu_stage_t **out,
                        char *err, size_t el)
{
	if (first < 0) {
		if (err != NULL)
			snprintf(err, el, "a stage's first node cannot be %d", first);
		return MU_EARG;
	}
	return load(dir, i, n, first, last, out, err, el);
}

static int check_inputs(gstage_t *s, const mu_tensor_list_t *in, char *err, size_t el)
{
	const mu__stage_t *io = &s->plan.s[0];
	char a[128], b[128];

	for (size_t i = 0; i < in->n; i++) {
		const mu_tensor_t *t = in->t[i];
		const mu__shape_t *sh;
		int wanted = 0;

		for (int k = 0; k < io->ninputs && !wanted; k++)
			wanted = strcmp(io->inputs[k], t->name) == 0;
		if (!wanted) {
			snprintf(err, el, "%.200s is not an input of this stage", t->name);
			return MU_EPROTO;
		}
		for (size_t k = 0; k < i; k++)
			if (strcmp(in->t[k]->name, t->name) == 0) {
				snprintf(err, el, "input %.200s was sent twice", t->name);
				return MU_EPROTO;
			}
		sh = mu__strmap_get(&s->in_shapes, t->name, strlen(t->name));
		if (sh != NULL && (sh->rank != t->rank ||
		                   memcmp(sh->dims, t->dims, sizeof(uint64_t) * sh->rank) != 0)) {
			mu__dims_text(t->rank, t->dims, a, sizeof(a));
			mu__dims_text(sh->rank, sh->dims, b, sizeof(b));
			snprintf(err, el, "input %.200s has shape %s; the stage takes %s", t->name, a, b);
			return MU_EPROTO;
		}
		if (sh != NULL && sh->dtype != t->dtype) {
			snprintf(err, el, "input %.200s is %s; the stage takes %s", t->name,
			         mu_dtype_name((int)t->dtype), mu_dtype_name((int)sh->dtype));
			return MU_EPROTO;
		}
	}
	for (int k = 0; k < io->ninputs; k++)
		if (mu_tensor_list_find(in, io->inputs[k]) == NULL) {
			snprintf(err, el, "input %.200s is missing", io->inputs[k]);
			return MU_EPROTO;
		}
	return 0;
}

int mu_stage_forward(mu_stage_t *st, const mu_tensor_list_t *in, mu_tensor_list_t *out,
                     char *err, size_t el)
{
	gstage_t *s = gs(st);
	const mu__stage_t *io;
	char why[512] = "";
	int rc;

	if (err == NULL)
		el = 0;
	if (st == NULL || st->kind != &mu__stage_kind_graph) {
		snprintf(err, el, "mu_stage_forward runs graph stages, not one of kind %s",
		         st != NULL ? st->kind->name : "(none)");
		return MU_EARG;
	}
	io = &s->plan.s[0];
	rc = check_inputs(s, in, err, el);
	if (rc != 0)
		return rc;
	uv_mutex_lock(&s->lock);
	rc = mu__exec_run_pool(s->pool, s->g, io->first, io->last, &s->params, in, io->outputs,
	                       io->noutputs, out, why, sizeof(why));
	uv_mutex_unlock(&s->lock);
	if (rc != 0)
		snprintf(err, el, "%s", why);
	return rc;
}

/* FORWARD: the stage's inputs in, a RESULT of its outputs. */
static void handle(mu_stage_t *s, uint64_t owner, const char *who, const mu__msg_t *m,
                   const char *body, mu_tensor_list_t *in, mu__reply_t *r)
{
	char why[768] = "";
	double t0 = mu__clock_ms();
	int rc = mu_stage_forward(s, in, &r->out, why, sizeof(why));

	(void)owner;
	(void)body;
	if (rc != 0) { /* a well-formed request that failed: the connection stays */
		mu__log(MU_LOG_WARN, LOG, "%s: forward %llu failed: %s", who, (unsigned long long)m->id,
		        why);
		mu__reply_error(r, m->id, rc, 0, "%s", why);
		return;
	}
	r->m = (mu__msg_t){MU_MSG_RESULT, 0, m->id, (uint64_t)((mu__clock_ms() - t0) * 1e6), 0, 0};
}

const mu__stage_kind_t mu__stage_kind_graph = {
	.version = MU__STAGE_KIND_VERSION,
	.name = "graph",
	.msgs = MU__MSG_BIT(MU_MSG_FORWARD),
	.dev_msgs = MU__MSG_BIT(MU_MSG_WEIGHTS),
	.handle = handle,
	.set_threads = set_threads,
	.free = stage_free,
	.probe = mu__graph_dev_probe,
	.assign = mu__graph_dev_assign,
	.receive = mu__graph_dev_weights,
	.load = mu__graph_dev_load,
	.pending_free = mu__graph_dev_pending_free,
};
