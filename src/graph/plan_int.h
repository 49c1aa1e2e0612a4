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

#endif
