/* SPDX-License-Identifier: MIT */
/*
 * The objects behind include/muster/model.h (model.c): a model opened
 * from its directory and a plan cut from it, open to the pipeline, which
 * builds its stages on them; and small helpers both layers use.
 */
#ifndef MU_GRAPH_MODEL_INT_H
#define MU_GRAPH_MODEL_INT_H

#include <stddef.h>
#include <stdint.h>

#include "muster/model.h"
#include "core/strmap_int.h"
#include "graph/graph_int.h"
#include "graph/plan_int.h"
#include "formats/safetensors_int.h"

struct mu_model_s {
	char *dir;
	char *text;            /* model.json as read, once: parsed, digested and
	                        * streamed to devices (cluster.c) */
	size_t text_len;
	mu__graph_t g;
	mu__st_file_t st;
	mu__strmap_t pbytes;   /* param -> uint64_t f32 bytes */
	mu__strmap_t pshapes;  /* param -> mu__shape_t */
	mu__strmap_t shapes;   /* every value -> mu__shape_t */
	double *flops;         /* per node */
	uint64_t param_bytes;
	uint64_t digest;
	mu__strmap_t loaded;   /* mu_model_run's weights: name -> tensor */
	mu__pool_t *pool;      /* mu_model_run's products split over it;
	                        * NULL: one thread (mu_model_set_threads) */
};

struct mu_plan_s {
	mu__plan_t p;
};

/* FNV-1a, 64 bits, continued from h (start with MU_FNV_INIT). */
#define MU_FNV_INIT 0xcbf29ce484222325ULL
uint64_t mu__fnv(uint64_t h, const void *p, size_t n);

/* *pool becomes a pool of threads threads (NULL for 1), the old one freed:
 * mu_model_set_threads and mu_stage_set_threads. MU_EARG for threads < 1;
 * when the threads cannot start, the error and *pool unchanged. */
int mu__model_pool_set(mu__pool_t **pool, int threads);

/* "[1, 2400]" */
void mu__dims_text(uint32_t rank, const uint64_t *dims, char *buf, size_t len);

#endif
