/* SPDX-License-Identifier: MIT */
/*
 * The partitioner: cuts a graph's node list into contiguous stages (never
 * backwards: a stage only consumes what earlier stages or the caller
 * produce), balanced by parameter bytes, by estimated compute, or packed
 * into per-stage memory budgets; then works out each stage's boundary:
 * what it needs from outside, what it must hand on (anything a later
 * stage reads, and model outputs), and which weights it loads.
 */
#include <stdio.h>
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

/*
 * Cut w[0..n) into k contiguous non-empty parts, each summing to at most
 * cap, filling greedily: 1 when it fits, 0 when it cannot.
 */
static int greedy(const double *w, int n, int k, double cap, int *cuts)
{
	int part = 0;
	double sum = 0;

	cuts[0] = 0;
	for (int i = 0; i < n; i++) {
		/* start the next part at i when this one is not empty and either
		 * the cap would be passed or the nodes left (i..n-1) are just
		 * enough for one per part still to come */
		if (i > cuts[part] && part < k - 1 &&
		    (sum + w[i] > cap || n - i == k - part - 1)) {
			cuts[++part] = i;
			sum = 0;
		}
		sum += w[i];
		if (sum > cap)
			return 0;
	}
	cuts[k] = n;
	return part == k - 1;
}

int mu__plan_balanced(const double *w, int n, int k, int *cuts)
{
	double lo = 0, hi = 0;
	int *try;

	if (k < 1 || n < k)
		return MU_EARG;
	for (int i = 0; i < n; i++) {
		hi += w[i];
		lo = w[i] > lo ? w[i] : lo;
	}
	if (!greedy(w, n, k, hi, cuts))
		return MU_EARG;
	try = mu__calloc((size_t)k + 1, sizeof(int));
	if (try == NULL)
		return MU_ENOMEM;
	/* the best cap is in [lo, hi]: lo itself first, then bisect until
	 * lo and hi are adjacent doubles (a fixed tolerance would be too
	 * coarse for weights below 1, such as flops in GFLOP) */
	if (greedy(w, n, k, lo, try)) {
		memcpy(cuts, try, sizeof(int) * ((size_t)k + 1));
		hi = lo;
	}
	while (hi > lo) {
		double mid = lo + (hi - lo) / 2;

		if (mid <= lo || mid >= hi)
			break;
		if (greedy(w, n, k, mid, try)) {
			hi = mid;
			memcpy(cuts, try, sizeof(int) * ((size_t)k + 1));
		} else {
			lo = mid;
		}
	}
	mu__free(try);
	return 0;
}

/* Fill devices in order, each up to min(cap, its budget); 1 when every
 * node found a place. cuts[k]..cuts[k+1] is device k's (maybe empty). */
static int pack(const double *w, int n, const uint64_t *budget, int nb, double cap, int *cuts)
{
	int i = 0;

	for (int k = 0; k < nb; k++) {
		double sum = 0, lim = (double)budget[k] < cap ? (double)budget[k] : cap;

		cuts[k] = i;
		while (i < n && sum + w[i] <= lim)
			sum += w[i++];
	}
	cuts[nb] = i;
	return i == n;
}

int mu__plan_fit(const double *w, int n, const uint64_t *budget, int nb, int *cuts)
{
	double lo = 0, hi = 0;

	if (nb < 1 || n < 0)
		return MU_EARG;
	for (int i = 0; i < n; i++) {
		hi += w[i];
		lo = w[i] > lo ? w[i] : lo;
	}
	/* filling greedily is the best a given cap can do (a device that takes
	 * less only leaves more for the later ones), so the smallest cap that
	 * still places every node is found by bisection */
	if (!pack(w, n, budget, nb, hi, cuts))
		return MU_ETOOBIG;
	if (pack(w, n, budget, nb, lo, cuts))
		return 0;
	while (hi - lo > 0.5) {
		double mid = lo + (hi - lo) / 2;

		if (pack(w, n, budget, nb, mid, cuts))
			hi = mid;
		else
			lo = mid;
	}
	pack(w, n, budget, nb, hi, cuts);
	return 0;
}

/* The next permutation of v[0..n) in lexicographic order; 0 after the last. */
static int next_order(int *v, int n)
{
	int i = n - 2, j = n - 1, t;

	while (i >= 0 && v[i] >= v[i + 1])
		i--;
	if (i < 0)
		return 0;
	while (v[j] <= v[i])
		j--;
	t = v[i], v[i] = v[j], v[j] = t;
	for (int a = i + 1, b = n - 1; a < b; a++, b--)
		t = v[a], v[a] = v[b], v[b] = t;
	return 1;
}

/* Heuristic orders for many devices: 0 given, 1 largest first, 2 smallest. */
static void heuristic_order(const uint64_t *budget, int nb, int which, int *v)
{
	for (int i = 0; i < nb; i++)
		v[i] = i;
	for (int i = 1; which != 0 && i < nb; i++) { /* stable insertion sort */
		int x = v[i], j = i;

		while (j > 0 && (which == 1 ? budget[v[j - 1]] < budget[x] : budget[v[j - 1]] > budget[x])) {
			v[j] = v[j - 1];
			j--;
		}
		v[j] = x;
	}
}

/* Largest stage and devices used of cuts over w. */
static void score(const double *w, const int *cuts, int nb, double *largest, int *used)
{
	*largest = 0;
	*used = 0;
	for (int k = 0; k < nb; k++) {
		double sum = 0;

		for (int i = cuts[k]; i < cuts[k + 1]; i++)
			sum += w[i];
		*largest = sum > *largest ? sum : *largest;
		*used += cuts[k + 1] > cuts[k];
	}
}

int mu__plan_fit_any(const double *w, int n, const uint64_t *budget, int nb,
                     mu__plan_accept_cb accept, void *ud, int *order, int *cuts)
{
	uint64_t *pb;
	int *v, *c, tries = 0, found = 0, rc = 0, bused = 0;
	double best = 0;

	if (nb < 1 || n < 0)
		return MU_EARG;
	pb = mu__calloc((size_t)nb, sizeof(*pb));
	v = mu__calloc((size_t)nb, sizeof(*v));
	c = mu__calloc((size_t)nb + 1, sizeof(*c));
	if (pb == NULL || v == NULL || c == NULL)
		rc = MU_ENOMEM;
	for (int i = 0; i < nb; i++)
		v[i] = i; /* the given order first: it wins ties */
	while (rc == 0) {
		double largest;
		int used, r;

		for (int k = 0; k < nb; k++)
			pb[k] = budget[v[k]];
		r = mu__plan_fit(w, n, pb, nb, c);
		if (r == 0) {
			score(w, c, nb, &largest, &used);
			if ((!found || largest < best || (largest == best && used < bused)) &&
			    (accept == NULL || (r = accept(v, c, nb, ud)) == 0)) {
				found = 1;
				best = largest;
				bused = used;
				memcpy(order, v, sizeof(int) * (size_t)nb);
				memcpy(cuts, c, sizeof(int) * ((size_t)nb + 1));
			} else if (r != 0 && r != MU_ETOOBIG) {
				rc = r;
			}
		} else if (r != MU_ETOOBIG) {
			rc = r;
		}
		if (nb <= MU_PLAN_PERMUTE_MAX ? !next_order(v, nb) : ++tries == 3)
			break;
		if (nb > MU_PLAN_PERMUTE_MAX)
			heuristic_order(budget, nb, tries, v);
	}
	mu__free(pb);
	mu__free(v);
	mu__free(c);
	if (rc == 0 && !found)
		rc = MU_ETOOBIG;
	return rc;
}
