/* SPDX-License-Identifier: MIT */
/*
 * Graph IR: parse and validate model.json (see model_int.h). Every node
 * must name a known op with the right arity and valid attributes, and use
 * only values defined before it; whatever it uses that nothing defines is
 * a param (a weight). Sizes and counts are capped before anything grows.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/error_int.h"
#include "core/json_int.h"
#include "core/strmap_int.h"
#include "graph/graph_int.h"

#define NAME_MAX_LEN 4096

static char *name_of(const cJSON *v)
{
	if (!cJSON_IsString(v) || v->valuestring[0] == '\0' ||
	    strlen(v->valuestring) > NAME_MAX_LEN)
		return NULL;
	return mu__strdup(v->valuestring);
}

/* names: a JSON list of strings -> a malloc'ed array */
static int name_list(const cJSON *arr, char ***out, int *n, int max)
{
	const cJSON *it;
	int i = 0;

	*out = NULL;
	*n = 0;
	if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) > max)
		return MU_EPROTO;
	*out = mu__calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof(**out));
	if (*out == NULL)
		return MU_ENOMEM;
	cJSON_ArrayForEach(it, arr) {
		if (((*out)[i] = name_of(it)) == NULL)
			return MU_EPROTO;
		*n = ++i;
	}
	return 0;
}

static void free_names(char **v, int n)
{
	for (int i = 0; i < n; i++)
		mu__free(v[i]);
	mu__free(v);
}

static int parse_input(const cJSON *o, mu__io_t *io)
{
	const cJSON *shape = cJSON_GetObjectItemCaseSensitive(o, "shape"), *d;
	const cJSON *dt = cJSON_GetObjectItemCaseSensitive(o, "dtype");

	io->name = name_of(cJSON_GetObjectItemCaseSensitive(o, "name"));
	if (io->name == NULL || !cJSON_IsArray(shape) ||
	    cJSON_GetArraySize(shape) > MU_TENSOR_MAX_RANK)
		return MU_EPROTO;
	if (dt != NULL && (!cJSON_IsString(dt) || mu_dtype_from_name(dt->valuestring) < 0))
		return MU_EPROTO;
	io->dtype = dt != NULL ? (mu_dtype_t)mu_dtype_from_name(dt->valuestring) : MU_DTYPE_F32;
	cJSON_ArrayForEach(d, shape) {
		if (!mu__json_is_int(d, 0, 1e15))
			return MU_EPROTO;
		io->dims[io->rank++] = (uint64_t)d->valuedouble;
	}
	return 0;
}

static int parse_node(const cJSON *o, int idx, mu__node_t *n, char *why, size_t wl)
{
	const cJSON *op = cJSON_GetObjectItemCaseSensitive(o, "op");
	const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(o, "attrs");
	char idxs[32];
	int rc;

	snprintf(idxs, sizeof(idxs), "#%d", idx);
	n->name = name_of(cJSON_GetObjectItemCaseSensitive(o, "name"));
	if (n->name == NULL)
		n->name = mu__strdup(idxs);
	if (n->name == NULL)
		return MU_ENOMEM;
	if (!cJSON_IsString(op) || (n->op = mu__op_find(op->valuestring)) == NULL)
		return mu__why(why, wl, MU_EPROTO, "node %.100s: unknown op %.100s", n->name,
		            cJSON_IsString(op) ? op->valuestring : "(none)");
	rc = name_list(cJSON_GetObjectItemCaseSensitive(o, "inputs"), &n->in, &n->nin, MU_NODE_MAX_IO);
	if (rc == 0)
		rc = name_list(cJSON_GetObjectItemCaseSensitive(o, "outputs"), &n->out, &n->nout, MU_NODE_MAX_IO);
	if (rc != 0)
		return mu__why(why, wl, rc, "node %.100s: inputs and outputs must be lists of names%.0s", n->name, "");
	if (n->nin < n->op->min_in || n->nin > n->op->max_in || n->nout > n->op->nout ||
	    n->nout < (n->op->min_out ? n->op->min_out : n->op->nout))
		return mu__why(why, wl, MU_EPROTO, "node %.100s: wrong number of inputs or outputs for %.100s",
		            n->name, n->op->name);
	if (attrs != NULL && !cJSON_IsObject(attrs))
		return mu__why(why, wl, MU_EPROTO, "node %.100s: attrs must be an object%.0s", n->name, "");
	n->attrs = attrs != NULL ? cJSON_Duplicate(attrs, 1) : cJSON_CreateObject();
	if (n->attrs == NULL)
		return MU_ENOMEM;
	return n->op->check != NULL ? n->op->check(n, why, wl) : 0;
}

/*
 * Topological order and params: every input is a graph input, an earlier
 * output, or a param; no value is defined twice.
 */
static int resolve(mu__graph_t *g, char *why, size_t wl)
{
	mu__strmap_t defined, params;
	int i, j, rc = 0;

	mu__strmap_init(&defined);
	mu__strmap_init(&params);
	for (i = 0; rc == 0 && i < g->ninputs; i++)
		if (mu__strmap_get(&defined, g->inputs[i].name, strlen(g->inputs[i].name)) != NULL)
			rc = mu__why(why, wl, MU_EPROTO, "input %.100s is declared twice%.0s", g->inputs[i].name, "");
		else
			rc = mu__strmap_put(&defined, g->inputs[i].name, strlen(g->inputs[i].name), g, NULL);
	for (i = 0; rc == 0 && i < g->nnodes; i++) {
		mu__node_t *n = &g->nodes[i];

		for (j = 0; rc == 0 && j < n->nin; j++)
			if (mu__strmap_get(&defined, n->in[j], strlen(n->in[j])) == NULL &&
			    mu__strmap_get(&params, n->in[j], strlen(n->in[j])) == NULL) {
				/* a later node may define it: then the order is wrong */
				for (int k = i; k < g->nnodes && rc == 0; k++)
					for (int o = 0; o < g->nodes[k].nout; o++)
						if (strcmp(g->nodes[k].out[o], n->in[j]) == 0)
							rc = mu__why(why, wl, MU_EPROTO,
							          "node %.100s uses %.100s before it is computed", n->name, n->in[j]);
				if (rc == 0)
					rc = mu__strmap_put(&params, n->in[j], strlen(n->in[j]), g, NULL);
			}
		for (j = 0; rc == 0 && j < n->nout; j++) {
			if (mu__strmap_get(&defined, n->out[j], strlen(n->out[j])) != NULL ||
			    mu__strmap_get(&params, n->out[j], strlen(n->out[j])) != NULL)
				rc = mu__why(why, wl, MU_EPROTO, "node %.100s redefines %.100s", n->name, n->out[j]);
			else
				rc = mu__strmap_put(&defined, n->out[j], strlen(n->out[j]), g, NULL);
		}
	}
	for (i = 0; rc == 0 && i < g->noutputs; i++)
		if (mu__strmap_get(&defined, g->outputs[i], strlen(g->outputs[i])) == NULL)
			rc = mu__why(why, wl, MU_EPROTO, "output %.100s is never computed%.0s", g->outputs[i], "");
	if (rc == 0) {
		mu__strmap_entry_t *e = NULL;
		size_t slot = 0;

		g->params = mu__calloc(params.count + 1, sizeof(*g->params));
		if (g->params == NULL)
			rc = MU_ENOMEM;
		while (rc == 0 && (e = mu__strmap_next(&params, &slot, e)) != NULL) {
			g->params[g->nparams] = mu__strdup(e->key);
			if (g->params[g->nparams] == NULL)
				rc = MU_ENOMEM;
			else
				g->nparams++;
		}
	}
	mu__strmap_free(&defined, NULL);
	mu__strmap_free(&params, NULL);
	return rc;
}

int mu__graph_parse(const char *json, size_t len, mu__graph_t *g, char *why, size_t wl)
{
	const cJSON *fmt, *nodes, *inputs, *it;
	cJSON *root = NULL;
	int rc, i = 0;

	memset(g, 0, sizeof(*g));
	if (len > MU_GRAPH_MAX_BYTES)
		return mu__why(why, wl, MU_ETOOBIG, "graph of %.100s is over %.100s", "that size", "64 MiB");
	rc = mu__json_parse(json, len, &root);
	if (rc != 0)
		return mu__why(why, wl, rc, "graph is not valid JSON%.0s%.0s", "", "");
	fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
	nodes = cJSON_GetObjectItemCaseSensitive(root, "nodes");
	inputs = cJSON_GetObjectItemCaseSensitive(root, "inputs");
	if (!cJSON_IsObject(root) || !cJSON_IsString(fmt) ||
	    strcmp(fmt->valuestring, "muster-graph") != 0 ||
	    !mu__json_is_int(cJSON_GetObjectItemCaseSensitive(root, "version"), 1, 1)) {
		cJSON_Delete(root);
		return mu__why(why, wl, MU_EPROTO, "not a muster-graph version 1%.0s%.0s", "", "");
	}
	if (!cJSON_IsArray(nodes) || cJSON_GetArraySize(nodes) > MU_GRAPH_MAX_NODES ||
	    !cJSON_IsArray(inputs) || cJSON_GetArraySize(inputs) > MU_NODE_MAX_IO) {
		cJSON_Delete(root);
		return mu__why(why, wl, MU_EPROTO, "graph needs \"inputs\" and \"nodes\" lists%.0s%.0s", "", "");
	}
	g->inputs = mu__calloc((size_t)cJSON_GetArraySize(inputs) + 1, sizeof(*g->inputs));
	g->nodes = mu__calloc((size_t)cJSON_GetArraySize(nodes) + 1, sizeof(*g->nodes));
	rc = g->inputs == NULL || g->nodes == NULL ? MU_ENOMEM : 0;
	cJSON_ArrayForEach(it, inputs) {
		if (rc != 0)
			break;
		rc = parse_input(it, &g->inputs[g->ninputs]);
		g->ninputs++;
		if (rc != 0)
			mu__why(why, wl, rc, "each graph input needs a name and a shape (and a known dtype)%.0s%.0s", "", "");
	}
	cJSON_ArrayForEach(it, nodes) {
		if (rc != 0)
			break;
		rc = parse_node(it, i, &g->nodes[i], why, wl);
		g->nnodes = ++i;
	}
	if (rc == 0 && name_list(cJSON_GetObjectItemCaseSensitive(root, "outputs"), &g->outputs,
	                         &g->noutputs, MU_NODE_MAX_IO) != 0)
		rc = mu__why(why, wl, MU_EPROTO, "graph needs an \"outputs\" list of names%.0s%.0s", "", "");
	cJSON_Delete(root);
	if (rc == 0)
		rc = resolve(g, why, wl);
	if (rc != 0)
		mu__graph_free(g);
	return rc;
}

void mu__graph_free(mu__graph_t *g)
{
	int i;

	for (i = 0; i < g->nnodes; i++) {
		mu__free(g->nodes[i].name);
		free_names(g->nodes[i].in, g->nodes[i].nin);
		free_names(g->nodes[i].out, g->nodes[i].nout);
		cJSON_Delete(g->nodes[i].attrs);
	}
	mu__free(g->nodes);
	for (i = 0; i < g->ninputs; i++)
		mu__free(g->inputs[i].name);
	mu__free(g->inputs);
	free_names(g->outputs, g->noutputs);
	free_names(g->params, g->nparams);
	memset(g, 0, sizeof(*g));
}

int mu__graph_is_param(const mu__graph_t *g, const char *name)
{
	for (int i = 0; i < g->nparams; i++)
		if (strcmp(g->params[i], name) == 0)
			return 1;
	return 0;
}
