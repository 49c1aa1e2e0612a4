/* SPDX-License-Identifier: MIT */
/*
 * Stages of decoder LLMs (pipeline/llm/stage.c): layers [first, last) of
 * a checkpoint serving sequences; the stage kind "llm". Its device side
 * (ASSIGN with "kind": "llm", TENSOR, LOAD) is pipeline/llm/device.c.
 */
#ifndef MU_PIPELINE_LLM_STAGE_INT_H
#define MU_PIPELINE_LLM_STAGE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "llm/llm_int.h"
#include "pipeline/stage_int.h"

typedef struct {
	int threads;          /* compute threads */
	int max_seqs;         /* sequences open at once (all connections) */
	uint64_t kv_bytes;    /* KV cache all sequences may reserve */
	int max_chunk;        /* positions per SEQ_FORWARD */
	int max_seqs_per_owner; /* of them, open by one connection; 0: all */
	int seq_idle_ms;      /* a sequence unused this long is closed at the
	                       * next SEQ_OPEN; 0: never */
	int kv_type;          /* a mu__kv_t: for a SEQ_OPEN that names none
	                       * (default f16); one that names it gets its own */
} mu__llm_stage_opts_t;

void mu__llm_stage_opts_init(mu__llm_stage_opts_t *o);
/*
 * Load the stage of a checkpoint (an HF directory, GGUF or llama2.c file):
 * layers [first, last) when first >= 0, else stage index of `of` split by
 * weight bytes. The stage's own weights are made resident; nothing else
 * of the files is read.
 */
int mu__stage_open_llm(const char *path, const char *tok_path, int index, int of,
                       int first, int last, const mu__llm_stage_opts_t *o,
                       mu_stage_t **out, char *err, size_t el);
/* The same from an open source (taken: freed with the stage, or on
 * failure) whose digest is given (a stage assembled from streamed
 * tensors cannot compute the whole checkpoint's), and the SHA-256 of its
 * tensors (hex[i] for src->t[i], checked as they came) for its weights
 * digest. */
int mu__stage_from_llm_src(mu__llm_src_t *src, uint64_t digest, const char (*hex)[65],
                           int index, int of, int first, int last,
                           const mu__llm_stage_opts_t *o, mu_stage_t **out, char *err,
                           size_t el);

/* The kind's device side (pipeline/llm/device.c), for its table. */
int mu__llm_dev_probe(const char *path, mu__held_t *h, char *err, size_t el);
void mu__llm_dev_held_caps(const mu__held_t *h, struct cJSON *m);
void mu__llm_dev_assign(mu__device_sess_t *ss, const mu__msg_t *m, const struct cJSON *o,
                        mu__reply_t *r);
void mu__llm_dev_tensor(mu__device_sess_t *ss, const mu__msg_t *m, const char *body,
                        mu_tensor_list_t *in, mu__reply_t *r);
void mu__llm_dev_load(mu__device_sess_t *ss, const mu__msg_t *m, mu__reply_t *r);
void mu__llm_dev_pending_free(void *pending);

#endif
