/* SPDX-License-Identifier: MIT */
/*
 * The id tensors of SEQ_FORWARD and SEQ_BATCH (docs/protocols/pipeline.md,
 * "Sequences"), built by the coordinator (pipeline/llm/coord.c) and read by
 * a stage (pipeline/llm/stage.c), apart from any I/O: the token ids
 * "tokens" [n] and a batch's "items" [k, 4], each row (sequence,
 * position, positions, all_logits).
 *
 * They go out as I32. A stage reads I32, and F32 holding exact integers
 * below 2^24: the form of muster before I32 ids, which coordinators of
 * that version send, and which a coordinator sends to a stage whose INFO
 * does not say "ids": "I32" (stages of that version misread I32). Any
 * other dtype or shape is refused with the cause, never read as F32.
 */
#ifndef MU_PIPELINE_LLM_SEQMSG_INT_H
#define MU_PIPELINE_LLM_SEQMSG_INT_H

#include <stddef.h>
#include <stdint.h>

#include "muster/tensor.h"
#include "llm/llm_int.h"

/* F32 carries every integer below this exactly: the ids of the old form. */
#define MU__SEQ_F32_IDS 16777216

/* ---- the coordinator's side: 0, or MU_ETOOBIG with why for an id the
 * form cannot carry, MU_ENOMEM ---- */

/* "tokens" [n] of tok[0..n): I32, or F32 when f32 is set. */
int mu__seq_tokens_new(const int32_t *tok, int32_t n, int f32, mu_tensor_t **out, char *why,
                       size_t wl);
/* "items" [k, 4] of it[0..k): I32 (sequence ids below 2^31), or F32 (all
 * below 2^24) when f32 is set. */
int mu__seq_items_new(const mu__dec_item_t *it, int k, int f32, mu_tensor_t **out, char *why,
                      size_t wl);

/* ---- the stage's side: the count read, or -1 with why ---- */

/* t must be [n] with 1 <= n <= max, every id in [0, vocab); into tok. */
int32_t mu__seq_tokens_read(const mu_tensor_t *t, int32_t max, int32_t vocab, int32_t *tok,
                            char *why, size_t wl);
/* t must be [k, 4] with 1 <= k <= max, every value a non-negative
 * integer (all_logits 0 or 1 in I32); into it. The positions (n) are
 * the caller's to bound. */
int mu__seq_items_read(const mu_tensor_t *t, int max, mu__dec_item_t *it, char *why, size_t wl);

#endif
