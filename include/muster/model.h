/* SPDX-License-Identifier: MIT */
/*
 * The model layer: a model directory opened and checked, plans that cut
 * it into contiguous stages, and a whole run in one process.
 *
 * A model is a directory: model.json (the graph, see docs/model-format.md)
 * and model.safetensors (its weights). mu_model_open checks the graph
 * against the weights' header and infers every value's shape; nothing is
 * loaded until something runs. A plan cuts the graph's nodes into
 * contiguous stages, balanced by weight bytes or compute, or fitted to
 * devices' memory budgets. mu_model_run is the reference a split run
 * (include/muster/pipeline.h) must match bit for bit.
 *
 * Calls that can fail for a reason a person must read take `err` (errlen
 * bytes, may be NULL) and write the cause there (see common.h).
 */
#ifndef MUSTER_MODEL_H
#define MUSTER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "muster/common.h"
#include "muster/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- models and plans ---- */

typedef struct mu_model_s mu_model_t;

/*
 * Open a model directory: parse and check the graph, map the weights and
 * validate their header, infer every value's shape. Nothing is loaded.
 */
MU_EXTERN int mu_model_open(const char *dir, mu_model_t **out, char *err,
                            size_t errlen);
MU_EXTERN void mu_model_close(mu_model_t *m);
MU_EXTERN int mu_model_nodes(const mu_model_t *m);
/* The graph's declared inputs: how many, and input i's name and shape. */
MU_EXTERN int mu_model_inputs(const mu_model_t *m);
MU_EXTERN void mu_model_input(const mu_model_t *m, int i, const char **name,
                              uint32_t *rank, uint64_t *dims);
/* Input i's declared dtype. */
MU_EXTERN mu_dtype_t mu_model_input_dtype(const mu_model_t *m, int i);
/* Bytes of all weights the graph uses, as loaded (F16 and BF16 as F32). */
MU_EXTERN uint64_t mu_model_param_bytes(const mu_model_t *m);
/* A digest of the graph and weight header: stages of one model agree. */
MU_EXTERN uint64_t mu_model_digest(const mu_model_t *m);

typedef enum {
	MU_SPLIT_PARAMS = 0, /* balance weight bytes (what each machine holds) */
	MU_SPLIT_FLOPS = 1   /* balance estimated compute */
} mu_split_t;

typedef struct {
	int first, last;          /* nodes [first, last) */
	uint64_t param_bytes;
	double flops;
	int ninputs, noutputs, nparams;
	const char *const *inputs;   /* names, valid while the plan lives */
	const char *const *outputs;
	const char *const *params;
} mu_stage_info_t;

typedef struct mu_plan_s mu_plan_t;

/*
 * Split into n contiguous stages balanced by `by`. n larger than the
 * number of nodes is MU_EARG.
 */
MU_EXTERN int mu_plan_balanced(const mu_model_t *m, int n, mu_split_t by,
                               mu_plan_t **out, char *err, size_t errlen);
/*
 * Split into at most nb stages so each stage's weights fit the budget of
 * the device it goes to. The budgets may come in any order (the order a
 * tracker granted the devices, say): every order of the devices is tried
 * (the given order, largest first and smallest first past 6 devices), and
 * the fit whose largest stage is smallest wins, then the one using fewest
 * devices, then the given order. A device with no room for its share gets
 * no stage. device[i] (nb entries; the first mu_plan_stages(*out) are set)
 * gets the budget index of stage i's device. MU_ETOOBIG, with the numbers
 * in err, when the model fits no order of the devices.
 */
MU_EXTERN int mu_plan_budgets(const mu_model_t *m, const uint64_t *budget,
                              int nb, mu_plan_t **out, int *device, char *err,
                              size_t errlen);
MU_EXTERN int mu_plan_stages(const mu_plan_t *p);
MU_EXTERN void mu_plan_stage(const mu_plan_t *p, int i, mu_stage_info_t *out);
MU_EXTERN void mu_plan_free(mu_plan_t *p);

/*
 * Run the whole model in this process (the reference a split run must
 * match bit for bit). inputs by name; the graph's outputs are appended to
 * out in the graph's order.
 */
MU_EXTERN int mu_model_run(mu_model_t *m, const mu_tensor_list_t *inputs,
                           mu_tensor_list_t *out, char *err, size_t errlen);

/*
 * How many OpenBLAS threads the model's forwards (mu_model_run), or the
 * stage's (mu_stage_forward), use; 1 unless set. OpenBLAS has one thread
 * count for the whole process, shared with everything else in it that
 * uses OpenBLAS (numpy, under the Python binding): a forward sets it as
 * it starts and puts the caller's count back as it returns, so outside
 * the library's calls the count is whatever the program set. Forwards
 * that overlap in one process run at the count of the first to start.
 * MU_EARG for threads < 1. Not during a forward of the same object.
 */
MU_EXTERN int mu_model_set_threads(mu_model_t *m, int threads);

/*
 * Tensors to and from a safetensors file (inputs and outputs of runs):
 * read appends copies to out, each in the dtype it is stored in (F8
 * refused); write stores each tensor in its dtype.
 */
MU_EXTERN int mu_safetensors_read(const char *path, mu_tensor_list_t *out,
                                  char *err, size_t errlen);
MU_EXTERN int mu_safetensors_write(const char *path,
                                   const mu_tensor_list_t *l);

/*
 * A safetensors file written as a stream: the header of tensors described
 * up front, then their data in the same order, a piece at a time, so a
 * file far larger than memory (a generated model's weights, a row at a
 * time) is written holding one piece. The bytes are those
 * mu_safetensors_write writes for the same tensors. A writer is used by
 * one thread at a time.
 */
typedef struct {
	const char *name;       /* NUL-terminated */
	mu_dtype_t dtype;
	uint32_t rank;          /* at most MU_TENSOR_MAX_RANK */
	const uint64_t *dims;   /* rank entries (may be NULL for rank 0) */
} mu_safetensors_desc_t;

typedef struct mu_safetensors_writer_s mu_safetensors_writer_t;

/*
 * Create path (truncated if it exists) and write the header of the n
 * tensors d describes; d is read during the call only. 0; MU_EARG (a name
 * NULL, a dtype that is not one, rank over the limit, dims NULL with a
 * rank); MU_ETOOBIG (a tensor's size overflows, or the header is over
 * the 100 MiB a reader accepts); MU_ENOMEM; -errno when the file cannot
 * be created or written, with the cause in err. On failure *out is NULL
 * and nothing stays open (a file may be left behind, incomplete).
 */
MU_EXTERN int mu_safetensors_writer_open(const char *path,
                                         const mu_safetensors_desc_t *d,
                                         size_t n,
                                         mu_safetensors_writer_t **out,
                                         char *err, size_t errlen);
/*
 * Append count elements of the tensor being written, in host order
 * (stored little-endian), of its dtype's size each. The tensors fill in
 * the order described; a put may complete the current tensor but not run
 * past it (MU_EARG, nothing written, the writer as it was). -EIO when the
 * write fails: then every later put and the close fail with it too.
 */
MU_EXTERN int mu_safetensors_writer_put(mu_safetensors_writer_t *w,
                                        const void *data, uint64_t count);
/*
 * Close the file and free the writer (NULL: a no-op returning 0). 0;
 * -EIO when a write failed or less data was put than the header
 * announced (the file is then incomplete: remove it).
 */
MU_EXTERN int mu_safetensors_writer_close(mu_safetensors_writer_t *w);

/*
 * A new tensor, named as t, holding t's values in dtype `to`, by the
 * rules of the graph's `cast` op (docs/model-format.md, numpy's astype):
 * floats round to nearest even (F16 and BF16 too), a float becomes an
 * integer by truncation toward zero, integers wrap to the target's low
 * bits, anything non-zero becomes BOOL 1; exact wherever `to` holds the
 * value. MU_EARG for a `to` that is not a dtype, MU_ENOMEM; *out is NULL
 * on failure.
 */
MU_EXTERN int mu_tensor_cast(const mu_tensor_t *t, mu_dtype_t to,
                             mu_tensor_t **out);

#ifdef __cplusplus
}
#endif
#endif
