/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer driver: a model.json as the loader takes it. mu__graph_parse
 * validates it; a graph that passes goes through shape inference
 * (mu__graph_shapes) with weight shapes from an extra top-level "params"
 * object of the input (name -> shape; [4] when absent, ignored by the
 * parser) and dtypes from "param_dtypes" (name -> "I64" ...; F32 when
 * absent), through the planner (cuts at the middle, balanced by flops),
 * and, when every value is small, through the executor on made-up data,
 * so every op's shape and run code sees hostile graphs.
 */
#include <stdint.h>
#include <string.h>

#include <cblas.h>
#include <cjson/cJSON.h>

#include "core/alloc_int.h"
#include "core/cut_int.h"
#include "core/strmap_int.h"
#include "graph/dtype_int.h"
#include "graph/graph_int.h"
#include "graph/plan_int.h"

#define SMALL 4096 /* elements per value for the executor to run */

int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	openblas_set_num_threads(1);
	return 0;
}

/* Weight shapes: from "params" when given, else [4]; dtypes from
 * "param_dtypes", else F32. */
static void param_shapes(const mu__graph_t *g, const cJSON *given, const cJSON *dtypes,
                         mu__shape_t *ps, mu__strmap_t *m)
{
	for (int i = 0; i < g->nparams; i++) {
		const cJSON *s = cJSON_GetObjectItemCaseSensitive(given, g->params[i]), *d;
		const cJSON *dt = cJSON_GetObjectItemCaseSensitive(dtypes, g->params[i]);

		ps[i].dtype = cJSON_IsString(dt) && mu_dtype_from_name(dt->valuestring) >= 0
		                      ? (mu_dtype_t)mu_dtype_from_name(dt->valuestring) : MU_DTYPE_F32;
		ps[i].rank = 1;
		ps[i].dims[0] = 4;
		if (cJSON_IsArray(s) && cJSON_GetArraySize(s) <= MU_TENSOR_MAX_RANK) {
			ps[i].rank = 0;
			cJSON_ArrayForEach(d, s)
				ps[i].dims[ps[i].rank++] = cJSON_IsNumber(d) && d->valuedouble >= 0 &&
				                           d->valuedouble < 64 ? (uint64_t)d->valuedouble : 1;
		}
		mu__strmap_put(m, g->params[i], strlen(g->params[i]), &ps[i], NULL);
	}
}

static int small(const mu__strmap_t *shapes)
{
	mu__strmap_entry_t *e = NULL;
	size_t slot = 0;

	while ((e = mu__strmap_next(shapes, &slot, e)) != NULL) {
		const mu__shape_t *s = e->value;
		uint64_t n = 1;

		for (uint32_t i = 0; i < s->rank; i++) {
			if (s->dims[i] > SMALL)
				return 0;
			n *= s->dims[i];
			if (n > SMALL)
				return 0;
		}
	}
	return 1;
}

static int small_params(const mu__shape_t *ps, int n)
{
	for (int i = 0; i < n; i++) {
		uint64_t k = 1;

		for (uint32_t j = 0; j < ps[i].rank; j++)
			k *= ps[i].dims[j]; /* each dim < 64: no overflow in 8 */
		if (k > SMALL)
			return 0;
	}
	return 1;
}

static mu_tensor_t *filled(const char *name, const mu__shape_t *s)
{
	mu_tensor_t *t;

	if (mu_tensor_new_typed(name, s->dtype, s->rank, s->dims, &t) != 0)
		return NULL;
	for (uint64_t i = 0; i < t->numel; i++) /* valid ids for a small embedding */
		mu__put_i(t->dtype, t->raw, i, (int64_t)(i % 3), 0);
	return t;
}

static void run(const mu__graph_t *g, const mu__shape_t *ps, const mu__strmap_t *shapes)
{
	mu__strmap_t params;
	mu_tensor_list_t in, out, owned;
	char why[256];

	mu__strmap_init(&params);
	mu_tensor_list_init(&in);
	mu_tensor_list_init(&out);
	mu_tensor_list_init(&owned);
	for (int i = 0; i < g->nparams; i++) {
		mu_tensor_t *t = filled(g->params[i], &ps[i]);

		if (t != NULL && mu_tensor_list_push(&owned, t) == 0)
			mu__strmap_put(&params, t->name, strlen(t->name), t, NULL);
	}
	for (int i = 0; i < g->ninputs; i++) {
		mu_tensor_t *t = filled(g->inputs[i].name,
		                        mu__strmap_get(shapes, g->inputs[i].name, strlen(g->inputs[i].name)));

		if (t != NULL)
			mu_tensor_list_push(&in, t);
	}
	mu__exec_run(g, 0, g->nnodes, &params, &in, g->outputs, g->noutputs, &out, why, sizeof(why));
	mu_tensor_list_free(&out);
	mu_tensor_list_free(&in);
	mu_tensor_list_free(&owned);
	mu__strmap_free(&params, NULL);
}

static void plan(const mu__graph_t *g, const double *flops)
{
	int cuts[4] = {0, g->nnodes / 2, g->nnodes, 0}, k = g->nnodes < 3 ? g->nnodes : 3;
	mu__plan_t p;

	if (g->nnodes >= 2 && mu__plan_from_cuts(g, cuts, 2, NULL, flops, &p) == 0)
		mu__plan_free(&p);
	if (k >= 1)
		mu__cut_balanced(&(mu__cut_items_t){flops, g->nnodes, 0}, k, MU__CUT_FILL, cuts);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	mu__strmap_t pmap, shapes;
	mu__shape_t *ps;
	double *flops;
	cJSON *root;
	mu__graph_t g;
	char why[256];

	if (size > (1u << 20) ||
	    mu__graph_parse((const char *)data, size, &g, why, sizeof(why)) != 0)
		return 0;
	root = cJSON_ParseWithLength((const char *)data, size);
	ps = mu__calloc((size_t)g.nparams + 1, sizeof(*ps));
	flops = mu__calloc((size_t)g.nnodes + 1, sizeof(*flops));
	mu__strmap_init(&pmap);
	mu__strmap_init(&shapes);
	if (ps != NULL && flops != NULL) {
		param_shapes(&g, cJSON_GetObjectItemCaseSensitive(root, "params"),
		             cJSON_GetObjectItemCaseSensitive(root, "param_dtypes"), ps, &pmap);
		if (mu__graph_shapes(&g, &pmap, &shapes, flops, why, sizeof(why)) == 0) {
			plan(&g, flops);
			if (small(&shapes) && small_params(ps, g.nparams))
				run(&g, ps, &shapes);
		}
	}
	mu__strmap_free(&shapes, mu__free);
	mu__strmap_free(&pmap, NULL);
	mu__free(flops);
	mu__free(ps);
	cJSON_Delete(root);
	mu__graph_free(&g);
	return 0;
}
