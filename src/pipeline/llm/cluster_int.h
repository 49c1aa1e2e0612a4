/* SPDX-License-Identifier: MIT */
/*
 * A decoder LLM over devices found through the tracker (pipeline/llm/cluster.c).
 * One caller at a time; recover is called by the engine's thread.
 */
#ifndef MU_PIPELINE_LLM_CLUSTER_INT_H
#define MU_PIPELINE_LLM_CLUSTER_INT_H

#include "llm/plan_int.h"
#include "pipeline/llm/coord_int.h"
#include "pipeline/pipeline_int.h"

typedef struct mu__llm_cluster_s mu__llm_cluster_t;

typedef struct {
	mu__devpool_opts_t pool;   /* tracker, key, timeouts, narration */
	int devices;               /* to request */
	mu_weights_t weights;      /* from a device's copy, or streamed */
	int max_seqs;              /* sequences each stage keeps KV for */
	int32_t ctx;               /* positions of each */
	int max_chunk;
	int max_replacements;      /* lost devices replaced, in all */
	mu__llm_coord_opts_t coord;
} mu__llm_cluster_opts_t;

void mu__llm_cluster_opts_init(mu__llm_cluster_opts_t *o);

/*
 * Request the devices, cut the layers to fit each one's budget (weights
 * plus the KV cache for max_seqs x ctx), and load each stage: from the
 * device's own copy of src's checkpoint (by digest) or streamed, tensor by
 * tensor with SHA-256. src must outlive the cluster. MU_ETOOBIG with the
 * numbers in err when the model does not fit.
 */
int mu__llm_cluster_start(const mu__llm_src_t *src, const mu__llm_cluster_opts_t *o,
                          mu__llm_cluster_t **out, char *err, size_t el);
void mu__llm_cluster_close(mu__llm_cluster_t *c);
/* The engine's recover hook (ud: the cluster): stage k onto a new device. */
int mu__llm_cluster_recover(void *ud, int k, char *why, size_t wl);

typedef struct {
	const char *addr;
	uint64_t budget, weight_bytes, kv_bytes;
	int first, last;
	int streamed;              /* weights streamed, else its own copy */
	uint64_t sent, cached;     /* bytes streamed; bytes already in its cache */
	int replaced;
} mu__llm_cluster_stage_t;

int mu__llm_cluster_stages(const mu__llm_cluster_t *c);
void mu__llm_cluster_stage(const mu__llm_cluster_t *c, int i, mu__llm_cluster_stage_t *out);
mu__llm_coord_t *mu__llm_cluster_coord(mu__llm_cluster_t *c);
int mu__llm_cluster_replacements(const mu__llm_cluster_t *c);

#endif
