/* SPDX-License-Identifier: MIT */
/*
 * Stages of a graph: contiguous node ranges and their boundaries.
 */
#ifndef MU_GRAPH_PLAN_INT_H
#define MU_GRAPH_PLAN_INT_H

#include <stdint.h>

#include "graph/graph_int.h"

typedef struct {
	int first, last;      /* nodes [first, last) */
	char **inputs;        /* from outside: model inputs and boundaries (sorted) */
	int ninputs;
	char **outputs;       /* handed on: read later, or model outputs */
	int noutputs;
	char **params;        /* weights it loads (sorted) */
	int nparams;
	uint64_t param_bytes; /* as f32 */
	double flops;
} mu__stage_t;

typedef struct {
	mu__stage_t *s;
	int n;
} mu__plan_t;

/*
 * Stages from cut points: stage i is nodes [cuts[i], cuts[i+1]). bytes
 * maps param names to their f32 size (may be NULL); flops is per node (may
 * be NULL). MU_EARG for cuts that are not strictly increasing in range.
 */
int mu__plan_from_cuts(const mu__graph_t *g, const int *cuts, int n,
                       const mu__strmap_t *bytes, const double *flops,
                       mu__plan_t *p);
void mu__plan_free(mu__plan_t *p);

/* Cut points (k+1 of them) balancing per-node weights over k stages. */
int mu__plan_balanced(const double *w, int n, int k, int *cuts);

/*
 * Cut per-node weights w[0..n) over devices of budget[0..nb), in order:
 * device k takes nodes [cuts[k], cuts[k+1]) (maybe none) whose weights sum
 * to at most budget[k], and the largest stage is as small as it can be
 * (to within half a unit). MU_ETOOBIG when no cut fits.
 */
int mu__plan_fit(const double *w, int n, const uint64_t *budget, int nb, int *cuts);

/* Devices up to this many are tried in every order (6! = 720 fits). */
#define MU_PLAN_PERMUTE_MAX 6

/*
 * Judges a fit mu__plan_fit_any found: order[k] is the budget index of the
 * k-th device in pipeline order, which takes nodes [cuts[k], cuts[k+1]).
 * 0 accepts it, MU_ETOOBIG rejects it (another order is tried), any other
 * error stops the search and is returned.
 */
typedef int (*mu__plan_accept_cb)(const int *order, const int *cuts, int nb, void *ud);

/*
 * mu__plan_fit over the devices in whatever order fits best, so the result
 * does not depend on the order the budgets come in (e.g. the order a
 * tracker granted the devices): every order when nb <= MU_PLAN_PERMUTE_MAX,
 * else the given order, largest budget first and smallest first. Of the
 * fits accept takes (NULL: all), the one whose largest stage is smallest
 * wins, then the one using fewest devices, then the earliest order tried
 * (the given one first). order gets nb entries (budget index of each
 * device in pipeline order), cuts nb + 1 as for mu__plan_fit. MU_ETOOBIG
 * when no order fits; order and cuts are then unspecified.
 */
int mu__plan_fit_any(const double *w, int n, const uint64_t *budget, int nb,
                     mu__plan_accept_cb accept, void *ud, int *order, int *cuts);

#endif
