/* SPDX-License-Identifier: MIT */
/*
 * The public calls of decoder LLM stages (include/muster/pipeline.h):
 * loading a stage of a checkpoint (mu_stage_load_llm, over stage.c's
 * mu__stage_open_llm) and placement alone (mu_llm_plan, over the split of
 * llm/src.c and the device fit of cluster.c). What a stage does once
 * loaded is stage.c's.
 */
#include <stdio.h>
#include <string.h>

#include "muster/llm.h"
#include "muster/pipeline.h"
#include "core/alloc_int.h"
#include "core/error_int.h"
#include "core/opts_int.h"
#include "llm/llm_int.h"
#include "llm/plan_int.h"
#include "pipeline/llm/stage_int.h"

#define PLAN_MAX_DEVICES 64
#define PLAN_MAX_STAGES 1024

/* ---- loading a stage ---- */

static void stage_defaults(mu_llm_stage_opts_t *o)
{
	mu__llm_stage_opts_t d;

	mu__llm_stage_opts_init(&d);
	memset(o, 0, sizeof(*o));
	o->struct_size = sizeof(*o);
	o->index = 0;
	o->of = 1;
	o->first = -1;
	o->last = -1;
	o->threads = d.threads;
	o->max_seqs = d.max_seqs;
	o->kv_bytes = d.kv_bytes;
	o->max_chunk = d.max_chunk;
	o->max_seqs_per_conn = 0;
	o->seq_idle_ms = 600000;
	o->kv_type = d.kv_type;
}

void mu_llm_stage_opts_init_size(mu_llm_stage_opts_t *o, size_t size)
{
	mu_llm_stage_opts_t d;

	stage_defaults(&d);
	mu__opts_fill(o, size, &d, sizeof(d));
}

int mu_stage_load_llm(const char *path, const mu_llm_stage_opts_t *uo, mu_stage_t **out,
                      char *err, size_t errlen)
{
	char none[1];
	mu_llm_stage_opts_t o;
	mu__llm_stage_opts_t lo;

	*out = NULL;
	stage_defaults(&o);
	if (path == NULL || mu__opts_read(&o, sizeof(o), uo) != 0)
		return mu__why(err, errlen, MU_EARG, "no checkpoint, or options not set by "
		               "mu_llm_stage_opts_init");
	if (o.threads < 1 || o.max_seqs < 1 || o.max_chunk < 1 || o.index < 0 || o.of < 1 ||
	    (o.first >= 0 && o.last <= o.first) || mu_llm_kv_type_name(o.kv_type) == NULL)
		return mu__why(err, errlen, MU_EARG, "threads, max_seqs and max_chunk must be 1 or "
		               "more, index 0 or more of 1 or more, layers [first, last) not empty, "
		               "kv_type a mu_llm_kv_type_t");
	mu__llm_stage_opts_init(&lo);
	lo.threads = o.threads;
	lo.max_seqs = o.max_seqs;
	lo.kv_bytes = o.kv_bytes;
	lo.max_chunk = o.max_chunk;
	lo.max_seqs_per_owner = o.max_seqs_per_conn > 0 ? o.max_seqs_per_conn
	                        : o.max_seqs / 2 > 1 ? o.max_seqs / 2 : 1;
	if (lo.max_seqs_per_owner > o.max_seqs)
		lo.max_seqs_per_owner = o.max_seqs;
	lo.seq_idle_ms = o.seq_idle_ms > 0 ? o.seq_idle_ms : 0;
	lo.kv_type = o.kv_type;
	/* stage.c writes its reasons unchecked: give it somewhere to */
	return mu__stage_open_llm(path, o.tokenizer, o.index, o.of, o.first, o.last, &lo, out,
	                          err != NULL ? err : none, err != NULL ? errlen : sizeof(none));
}

/* ---- placement alone ---- */

struct mu_llm_plan_s {
	char arch[64];
	int layers;
	int n;
	mu_llm_plan_stage_t *st;
};

static void plan_defaults(mu_llm_plan_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->struct_size = sizeof(*o);
	o->stages = 1;
	o->ctx = 2048;
	o->max_seqs = 1;
	o->kv_type = MU_LLM_KV_F16;
}

void mu_llm_plan_opts_init_size(mu_llm_plan_opts_t *o, size_t size)
{
	mu_llm_plan_opts_t d;

	plan_defaults(&d);
	mu__opts_fill(o, size, &d, sizeof(d));
}

static void add_stage(mu_llm_plan_t *p, const mu__llm_src_t *src, const mu_llm_plan_opts_t *o,
                      int device, int a, int b)
{
	mu_llm_plan_stage_t *s = &p->st[p->n++];

	s->device = device;
	s->first = a;
	s->last = b;
	s->embeds = a == 0;
	s->head = b == src->hp.n_layers;
	s->weight_bytes = mu__llm_src_bytes(src, a, b);
	s->kv_bytes = mu__llm_kv_bytes(src, a, b, o->ctx, o->max_seqs, o->kv_type);
}

/* Cut src as o says into p->st. 0, or an error with err. */
static int cut(mu_llm_plan_t *p, const mu__llm_src_t *src, const mu_llm_plan_opts_t *o,
               char *err, size_t el)
{
	int order[PLAN_MAX_DEVICES], at[PLAN_MAX_STAGES + 1], i, prev = 0, rc;

	if (o->nbudgets > 0) {
		rc = mu__llm_plan(src, o->ctx, o->max_seqs, o->kv_type, o->budgets, o->nbudgets, order,
		                  at, err, el);
		for (i = 0; rc == 0 && i < o->nbudgets; prev = at[i], i++)
			if (at[i] > prev) /* a device with nothing to take has no stage */
				add_stage(p, src, o, order[i], prev, at[i]);
		return rc;
	}
	if ((rc = mu__llm_split(src, o->stages, at)) != 0)
		return mu__why(err, el, rc, "%d stages of a model of %d layers", o->stages,
		               src->hp.n_layers);
	for (i = 0; i < o->stages; i++)
		if (at[i + 1] > at[i])
			add_stage(p, src, o, -1, at[i], at[i + 1]);
	return 0;
}

int mu_llm_plan(const char *path, const mu_llm_plan_opts_t *uo, mu_llm_plan_t **out,
                char *err, size_t errlen)
{
	char none[1];
	char *e = err != NULL ? err : none;
	size_t el = err != NULL ? errlen : sizeof(none);
	mu_llm_plan_opts_t o;
	mu__llm_src_t src;
	mu_llm_plan_t *p;
	int rc;

	*out = NULL;
	plan_defaults(&o);
	if (path == NULL || mu__opts_read(&o, sizeof(o), uo) != 0 || o.ctx < 1 || o.max_seqs < 1 ||
	    (o.nbudgets > 0 ? o.nbudgets > PLAN_MAX_DEVICES || o.budgets == NULL
	                    : o.stages < 1 || o.stages > PLAN_MAX_STAGES))
		return mu__why(e, el, MU_EARG, "a plan needs a checkpoint, 1 to %d stages or 1 to %d "
		               "budgets, ctx and max_seqs 1 or more", PLAN_MAX_STAGES,
		               PLAN_MAX_DEVICES);
	if ((rc = mu__llm_src_open(path, NULL, &src, e, el)) != 0)
		return rc;
	if ((rc = mu__kv_check(o.kv_type, &src.hp, e, el)) != 0) {
		mu__llm_src_free(&src);
		return rc;
	}
	p = mu__calloc(1, sizeof(*p));
	if (p == NULL || (p->st = mu__calloc((size_t)(o.nbudgets > 0 ? o.nbudgets : o.stages),
	                                     sizeof(*p->st))) == NULL) {
		mu__free(p);
		mu__llm_src_free(&src);
		return mu__why(e, el, MU_ENOMEM, "out of memory");
	}
	snprintf(p->arch, sizeof(p->arch), "%s", src.hp.arch);
	p->layers = src.hp.n_layers;
	rc = cut(p, &src, &o, e, el);
	mu__llm_src_free(&src);
	if (rc != 0) {
		mu_llm_plan_free(p);
		return rc;
	}
	*out = p;
	return 0;
}

const char *mu_llm_plan_arch(const mu_llm_plan_t *p)
{
	return p->arch;
}

int mu_llm_plan_layers(const mu_llm_plan_t *p)
{
	return p->layers;
}

int mu_llm_plan_stages(const mu_llm_plan_t *p)
{
	return p->n;
}

void mu_llm_plan_stage(const mu_llm_plan_t *p, int i, mu_llm_plan_stage_t *out)
{
	if (i >= 0 && i < p->n)
		*out = p->st[i];
	else
		memset(out, 0, sizeof(*out));
}

void mu_llm_plan_free(mu_llm_plan_t *p)
{
	if (p == NULL)
		return;
	mu__free(p->st);
	mu__free(p);
}
