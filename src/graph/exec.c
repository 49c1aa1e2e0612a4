/* SPDX-License-Identifier: MIT */
/*
 * The executor: runs a contiguous range of a graph's nodes on the CPU,
 * one after another, each output allocated from its op's shape function,
 * every intermediate freed after its last use. The same code runs a whole
 * model in one process and each stage of a split one, which is what makes
 * a split run's outputs bit-identical to the whole run's.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc_int.h"
#include "core/strmap_int.h"
#include "graph/graph_int.h"
#include "graph/ops_int.h"

typedef struct {
	mu_tensor_t *t;
	int owned;
	int last;     /* index of the last node of the range that reads it */
} val_t;

static void val_free(void *v)
{
	val_t *x = v;

	if (x->owned)
		mu_tensor_free(x->t);
	mu__free(x);
}

/* On failure t is not taken: the caller still owns it. */
static int put(mu__strmap_t *env, mu_tensor_t *t, int owned)
{
	val_t *v = mu__calloc(1, sizeof(*v));
	void *old = NULL;

	if (v == NULL)
		return MU_ENOMEM;
	v->t = t;
	v->owned = owned;
	v->last = INT_MAX; /* set by mark_last */
	if (mu__strmap_put(env, t->name, strlen(t->name), v, &old) != 0) {
		mu__free(v);
		return MU_ENOMEM;
	}
	if (old != NULL) /* a name given twice in inputs: the last one wins */
		val_free(old);
	return 0;
}

/* Last readers of each value, so the range frees what it no longer needs;
 * values the caller wants are never freed early. */
static void mark_last(const mu__graph_t *g, int first, int last, mu__strmap_t *lastuse)
{
	for (int i = first; i < last; i++)
		for (int j = 0; j < g->nodes[i].nin; j++)
			mu__strmap_put(lastuse, g->nodes[i].in[j], strlen(g->nodes[i].in[j]),
			               (void *)(intptr_t)(i + 1), NULL);
}

static int run_node(mu__pool_t *pool, const mu__node_t *n, mu__strmap_t *env,
                    const mu__strmap_t *params, char *why, size_t wl)
{
	mu_tensor_t *in[MU_NODE_MAX_IO], *out[MU_NODE_MAX_IO] = {0};
	mu__shape_t si[MU_NODE_MAX_IO], so[MU_NODE_MAX_IO];
	int j, rc = 0;

	for (j = 0; j < n->nin; j++) {
		val_t *v = mu__strmap_get(env, n->in[j], strlen(n->in[j]));

		in[j] = v != NULL ? v->t : params != NULL ? mu__strmap_get(params, n->in[j], strlen(n->in[j])) : NULL;
		if (in[j] == NULL) {
			snprintf(why, wl, "node %.100s: %.100s is missing (not an input, not computed, not a loaded weight)",
			         n->name, n->in[j]);
			return MU_EPROTO;
		}
		mu__shape_of(in[j], &si[j]);
	}
	rc = mu__op_shape(n, si, so, why, wl);
	for (j = 0; rc == 0 && j < n->nout; j++)
		rc = mu_tensor_new_typed(n->out[j], so[j].dtype, so[j].rank, so[j].dims, &out[j]);
	if (rc == 0) {
		rc = n->op->run_pool != NULL ? n->op->run_pool(pool, n, in, out) : n->op->run(n, in, out);
		if (rc != 0)
			snprintf(why, wl, "node %.100s (%s) failed: %s", n->name, n->op->name,
			         rc == MU_EPROTO ? "bad input values (an id outside the table?)" : mu_strerror(rc));
	} else if (rc == MU_ENOMEM) {
		snprintf(why, wl, "node %.100s: out of memory for its outputs", n->name);
	}
	for (j = 0; j < n->nout; j++) {
		if (rc == 0 && (rc = put(env, out[j], 1)) == 0)
			continue;
		mu_tensor_free(out[j]); /* not in env: ours to free */
	}
	return rc;
}

static void drop_dead(const mu__node_t *n, int idx, mu__strmap_t *env, const mu__strmap_t *lastuse)
{
	for (int j = 0; j < n->nin; j++) {
		intptr_t lu = (intptr_t)mu__strmap_get(lastuse, n->in[j], strlen(n->in[j]));
		val_t *v = mu__strmap_get(env, n->in[j], strlen(n->in[j]));

		if (v != NULL && v->owned && v->last == INT_MAX && lu == idx + 1)
			val_free(mu__strmap_remove(env, n->in[j], strlen(n->in[j])));
	}
}

int mu__exec_run(const mu__graph_t *g, int first, int last,
                 const mu__strmap_t *params, const mu_tensor_list_t *inputs,
                 char *const *want, int nwant, mu_tensor_list_t *out,
                 char *why, size_t wl)
{
	return mu__exec_run_pool(NULL, g, first, last, params, inputs, want, nwant, out, why, wl);
}

int mu__exec_run_pool(mu__pool_t *pool, const mu__graph_t *g, int first, int last,
                      const mu__strmap_t *params, const mu_tensor_list_t *inputs,
                      char *const *want, int nwant, mu_tensor_list_t *out,
                      char *why, size_t wl)
{
	mu__strmap_t env, lastuse;
	int i, rc = 0;

	mu__strmap_init(&env);
	mu__strmap_init(&lastuse);
	mark_last(g, first, last, &lastuse);
	for (i = 0; rc == 0 && inputs != NULL && (size_t)i < inputs->n; i++)
		rc = put(&env, inputs->t[i], 0);
	for (i = first; rc == 0 && i < last; i++) {
		rc = run_node(pool, &g->nodes[i], &env, params, why, wl);
		if (rc == 0) {
			/* wanted values must survive their last reader */
			for (int k = 0; k < nwant; k++) {
				val_t *v = mu__strmap_get(&env, want[k], strlen(want[k]));

				if (v != NULL)
					v->last = -1;
			}
			drop_dead(&g->nodes[i], i, &env, &lastuse);
		}
	}
	for (i = 0; rc == 0 && i < nwant; i++) {
		val_t *v = mu__strmap_remove(&env, want[i], strlen(want[i]));
		mu_tensor_t *t = NULL;

		if (v == NULL) {
			snprintf(why, wl, "%.200s is not produced by nodes %d..%d", want[i], first, last - 1);
			rc = MU_EPROTO;
			break;
		}
		if (v->owned) {
			t = v->t;
			v->owned = 0;
		} else if ((rc = mu_tensor_new_typed(v->t->name, v->t->dtype, v->t->rank, v->t->dims,
		                                     &t)) == 0 && t->numel > 0) {
			memcpy(t->raw, v->t->raw, mu_tensor_nbytes(t)); /* an input passed through */
		}
		val_free(v);
		if (rc == 0 && (rc = mu_tensor_list_push(out, t)) != 0)
			mu_tensor_free(t);
	}
	mu__strmap_free(&env, val_free);
	mu__strmap_free(&lastuse, NULL);
	return rc;
}

/* ---- shape inference, for planning ---- */

int mu__graph_shapes(const mu__graph_t *g, const mu__strmap_t *param_shapes,
                     mu__strmap_t *shapes, double *node_flops, char *why, size_t wl)
{
	int i, j, rc = 0;

	for (i = 0; rc == 0 && i < g->ninputs; i++) {
		mu__shape_t *s = mu__calloc(1, sizeof(*s));

		if (s == NULL)
			return MU_ENOMEM;
		s->rank = g->inputs[i].rank;
		s->dtype = g->inputs[i].dtype;
		memcpy(s->dims, g->inputs[i].dims, sizeof(s->dims));
		rc = mu__strmap_put(shapes, g->inputs[i].name, strlen(g->inputs[i].name), s, NULL);
		if (rc != 0)
			mu__free(s);
	}
	for (i = 0; rc == 0 && i < g->nnodes; i++) {
		const mu__node_t *n = &g->nodes[i];
		mu__shape_t si[MU_NODE_MAX_IO], so[MU_NODE_MAX_IO];

		for (j = 0; j < n->nin; j++) {
			const mu__shape_t *s = mu__strmap_get(shapes, n->in[j], strlen(n->in[j]));

			if (s == NULL)
				s = mu__strmap_get(param_shapes, n->in[j], strlen(n->in[j]));
			if (s == NULL) {
				snprintf(why, wl, "node %.100s: no shape for %.100s (a weight missing from the file?)",
				         n->name, n->in[j]);
				return MU_EPROTO;
			}
			si[j] = *s;
		}
		rc = mu__op_shape(n, si, so, why, wl);
		if (node_flops != NULL && rc == 0)
			node_flops[i] = n->op->flops(n, si, so);
		for (j = 0; rc == 0 && j < n->nout; j++) {
			mu__shape_t *s = mu__memdup(&so[j], sizeof(so[j]));

			rc = s == NULL ? MU_ENOMEM
			               : mu__strmap_put(shapes, n->out[j], strlen(n->out[j]), s, NULL);
			if (rc != 0)
				mu__free(s);
		}
	}
	return rc;
}
