/* SPDX-License-Identifier: MIT */
/*
 * muster's model: a graph IR (graph.c), its CPU ops (ops_*.c), the
 * executor (exec.c) and the partitioner (plan.c).
 *
 * The graph is JSON beside the weights (model.json next to
 * model.safetensors):
 *
 *   {"format": "muster-graph", "version": 1,
 *    "inputs":  [{"name": "x", "shape": [1, 25, 96]}],
 *    "outputs": ["y"],
 *    "nodes": [{"name": "fc1", "op": "gemm", "inputs": ["h", "W1", "b1"],
 *               "outputs": ["h1"], "attrs": {"transB": 1}}, ...]}
 *
 * Nodes are in topological order (checked). A node input is a graph
 * input, an earlier node's output, or else a weight ("param"), looked up
 * by name in the safetensors file. Every value has a dtype (mu_dtype_t):
 * a graph input's is declared ("dtype", F32 when absent), a weight's is
 * the file's (F16 and BF16 load as F32), a node output's is its op's.
 * Most ops compute in F32 only; the typed ones say which dtypes they take.
 */
#ifndef MU_GRAPH_GRAPH_INT_H
#define MU_GRAPH_GRAPH_INT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "muster/tensor.h"
#include "kern/kern_int.h"
#include "core/strmap_int.h"

#define MU_GRAPH_MAX_BYTES (64u << 20)
#define MU_GRAPH_MAX_NODES 1000000
#define MU_NODE_MAX_IO 64

typedef struct mu__op_s mu__op_t;

typedef struct {
	char *name;
	const mu__op_t *op;
	char **in;        /* nin names */
	int nin;
	char **out;
	int nout;
	cJSON *attrs;     /* an object (maybe empty), owned */
} mu__node_t;

typedef struct {
	char *name;
	uint32_t rank;
	uint64_t dims[MU_TENSOR_MAX_RANK];
	mu_dtype_t dtype;
} mu__io_t;

typedef struct {
	mu__node_t *nodes;
	int nnodes;
	mu__io_t *inputs;
	int ninputs;
	char **outputs;
	int noutputs;
	char **params;    /* names used by nodes that nothing defines */
	int nparams;
} mu__graph_t;

/* Parse and validate a graph (model.json's text, which pipeline/model.c
 * reads once per model). why names the node and the rule. */
int mu__graph_parse(const char *json, size_t len, mu__graph_t *g, char *why,
                    size_t wl);
void mu__graph_free(mu__graph_t *g);
int mu__graph_is_param(const mu__graph_t *g, const char *name);

/* ---- ops ---- */

/* A value's shape and dtype ({0} is a rank-0 F32). */
typedef struct {
	uint32_t rank;
	uint64_t dims[MU_TENSOR_MAX_RANK];
	mu_dtype_t dtype;
} mu__shape_t;

/*
 * One operation. check validates attrs and arity at load; shape computes
 * output shapes from input shapes (the executor allocates from it, the
 * planner estimates from it); run computes; flops estimates work.
 *
 * typed: 0 for an op that computes in F32 only: every input must be F32
 * and its outputs are (mu__op_shape checks and sets that, so its shape
 * function need not). 1: the shape function checks the inputs' dtypes and
 * sets every output's.
 *
 * A node has from min_out (0: nout) to nout outputs; shape and run fill
 * the node's n->nout of them.
 *
 * run_pool, set by the ops whose products go through mu__sgemm (matmul,
 * gemm, conv, conv_transpose), is run with the executor's pool to split
 * them over; the executor calls it instead of run, which is then the same
 * on no pool. The results do not depend on the pool (kern/blas_int.h).
 */
struct mu__op_s {
	const char *name;
	int min_in, max_in, nout;
	int (*check)(const mu__node_t *n, char *why, size_t wl);
	int (*shape)(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
	             char *why, size_t wl);
	int (*run)(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out);
	double (*flops)(const mu__node_t *n, const mu__shape_t *in, const mu__shape_t *out);
	int typed;
	int min_out;
	int (*run_pool)(mu__pool_t *pool, const mu__node_t *n, mu_tensor_t *const *in,
	                mu_tensor_t **out);
};

const mu__op_t *mu__op_find(const char *name);

/* n's output shapes and dtypes from its inputs', dtypes checked: what the
 * executor and the planner call (never op->shape directly). */
int mu__op_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                 char *why, size_t wl);

/* attribute helpers (defaults when absent; check() validates types) */
int64_t mu__attr_int(const mu__node_t *n, const char *k, int64_t dflt);
double mu__attr_num(const mu__node_t *n, const char *k, double dflt);
const char *mu__attr_str(const mu__node_t *n, const char *k, const char *dflt);
/* An integer list attr: *count entries into out (at most max); -1 absent. */
int mu__attr_ints(const mu__node_t *n, const char *k, int64_t *out, int max);

uint64_t mu__shape_numel(const mu__shape_t *s);
/* numpy broadcasting of a and b; MU_EPROTO when they do not broadcast. */
int mu__broadcast(const mu__shape_t *a, const mu__shape_t *b, mu__shape_t *out);
/* An axis in [-rank, rank) to [0, rank); -1 when out of range. */
int mu__axis(int64_t axis, uint32_t rank);

/* ---- executor ---- */

typedef struct mu__exec_s mu__exec_t;

/*
 * Run nodes [first, last) of g. `params` resolves weight names (the caller
 * loaded them); `inputs` holds what the range consumes from outside (model
 * inputs or boundary tensors). Tensors named in `want` are returned in
 * `out` (in that order); intermediates are freed after their last use.
 * A failing node is named in why.
 */
int mu__exec_run(const mu__graph_t *g, int first, int last,
                 const mu__strmap_t *params, const mu_tensor_list_t *inputs,
                 char *const *want, int nwant, mu_tensor_list_t *out,
                 char *why, size_t wl);
/* The same, the products split over pool (NULL: all on this thread, as
 * mu__exec_run); the outputs are the same bits either way. */
int mu__exec_run_pool(mu__pool_t *pool, const mu__graph_t *g, int first, int last,
                      const mu__strmap_t *params, const mu_tensor_list_t *inputs,
                      char *const *want, int nwant, mu_tensor_list_t *out,
                      char *why, size_t wl);

/* Shapes of every value of g from its declared input shapes (planning). */
int mu__graph_shapes(const mu__graph_t *g, const mu__strmap_t *param_shapes,
                     mu__strmap_t *shapes, double *node_flops, char *why,
                     size_t wl);

#endif
