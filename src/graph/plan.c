/* SPDX-License-Identifier: MIT */
/*
 * A graph's stages: contiguous node ranges (never backwards: a stage only
 * consumes what earlier stages or the caller produce) and each one's
 * boundary: what it needs from outside, what it must hand on (anything a
 * later stage reads, and model outputs), and which weights it loads.
 * Where the cuts go is core/cut.c's (graph/model.c gives it each node's
 * bytes or flops).
 */
#include <stdlib.h>
#include <string.h>

#include "core/alloc_int.h"
#include "core/strmap_int.h"
#include "graph/plan_int.h"

/* Append name to a set-like list (kept in first-seen order). */
static int add_name(char ***v, int *n, mu__strmap_t *seen, const char *name)
{
	char **p;

	if (mu__strmap_get(seen, name, strlen(name)) != NULL)
		return 0;
	p = mu__realloc(*v, sizeof(*p) * ((size_t)*n + 2));
	if (p == NULL)
		return MU_ENOMEM;
	*v = p;
	if ((p[*n] = mu__strdup(name)) == NULL)
		return MU_ENOMEM;
	p[++*n] = NULL;
	return mu__strmap_put(seen, name, strlen(name), seen, NULL);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int stage_io(const mu__graph_t *g, int first, int last, const mu__strmap_t *bytes,
                    mu__stage_t *s)
{
	mu__strmap_t made, in_seen, out_seen, p_seen;
	int i, j, rc = 0;

	memset(s, 0, sizeof(*s));
	s->first = first;
	s->last = last;
	mu__strmap_init(&made);
	mu__strmap_init(&in_seen);
	mu__strmap_init(&out_seen);
	mu__strmap_init(&p_seen);
	for (i = first; rc == 0 && i < last; i++) {
		const mu__node_t *n = &g->nodes[i];

		for (j = 0; rc == 0 && j < n->nin; j++) {
			const char *x = n->in[j];

			if (mu__graph_is_param(g, x)) {
				if (mu__strmap_get(&p_seen, x, strlen(x)) == NULL) {
					const uint64_t *b = bytes ? mu__strmap_get(bytes, x, strlen(x)) : NULL;

					s->param_bytes += b != NULL ? *b : 0;
				}
				rc = add_name(&s->params, &s->nparams, &p_seen, x);
			} else if (mu__strmap_get(&made, x, strlen(x)) == NULL) {
				rc = add_name(&s->inputs, &s->ninputs, &in_seen, x);
			}
		}
		for (j = 0; rc == 0 && j < n->nout; j++)
			rc = mu__strmap_put(&made, n->out[j], strlen(n->out[j]), &made, NULL);
	}
	/* outputs: what is made here and read later, or is a model output */
	for (i = first; rc == 0 && i < last; i++)
		for (j = 0; rc == 0 && j < g->nodes[i].nout; j++) {
			const char *x = g->nodes[i].out[j];
			int needed = 0;

			for (int k = 0; k < g->noutputs && !needed; k++)
				needed = strcmp(g->outputs[k], x) == 0;
			for (int k = last; k < g->nnodes && !needed; k++)
				for (int m = 0; m < g->nodes[k].nin && !needed; m++)
					needed = strcmp(g->nodes[k].in[m], x) == 0;
			if (needed)
				rc = add_name(&s->outputs, &s->noutputs, &out_seen, x);
		}
	if (rc == 0 && s->ninputs > 1) /* sorted, as rlx's stages list them */
		qsort(s->inputs, (size_t)s->ninputs, sizeof(char *), cmp_str);
	if (rc == 0 && s->nparams > 1) /* (qsort of NULL, 0 is undefined) */
		qsort(s->params, (size_t)s->nparams, sizeof(char *), cmp_str);
	mu__strmap_free(&made, NULL);
	mu__strmap_free(&in_seen, NULL);
	mu__strmap_free(&out_seen, NULL);
	mu__strmap_free(&p_seen, NULL);
	return rc;
}

void mu__plan_free(mu__plan_t *p)
{
	for (int i = 0; i < p->n; i++) {
		mu__stage_t *s = &p->s[i];

		for (int j = 0; j < s->ninputs; j++)
			mu__free(s->inputs[j]);
		for (int j = 0; j < s->noutputs; j++)
			mu__free(s->outputs[j]);
		for (int j = 0; j < s->nparams; j++)
			mu__free(s->params[j]);
		mu__free(s->inputs);
		mu__free(s->outputs);
		mu__free(s->params);
	}
	mu__free(p->s);
	memset(p, 0, sizeof(*p));
}

int mu__plan_from_cuts(const mu__graph_t *g, const int *cuts, int n,
                       const mu__strmap_t *bytes, const double *flops, mu__plan_t *p)
{
	int i, rc = 0;

	memset(p, 0, sizeof(*p));
	p->s = mu__calloc((size_t)n + 1, sizeof(*p->s));
	if (p->s == NULL)
		return MU_ENOMEM;
	for (i = 0; rc == 0 && i < n; i++) {
		if (cuts[i] >= cuts[i + 1] || cuts[i] < 0 || cuts[i + 1] > g->nnodes) {
			rc = MU_EARG; /* stages are non-empty and in order */
			break;
		}
		rc = stage_io(g, cuts[i], cuts[i + 1], bytes, &p->s[i]);
		p->n = i + 1;
		for (int k = cuts[i]; flops != NULL && k < cuts[i + 1]; k++)
			p->s[i].flops += flops[k];
	}
	if (rc != 0)
		mu__plan_free(p);
	return rc;
}
