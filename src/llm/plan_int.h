/* SPDX-License-Identifier: MIT */
/*
 * Where a decoder's layers go (llm/plan.c): placed on devices so that
 * each one's share fits its budget with the KV cache its sequences will
 * need. (mu__llm_split, the cut into n stages by weight bytes, is in
 * llm/llm_int.h.)
 */
#ifndef MU_LLM_PLAN_INT_H
#define MU_LLM_PLAN_INT_H

#include <stddef.h>
#include <stdint.h>

#include "llm/llm_int.h"

/*
 * Cut src's layers over nd devices of these budgets so that each
 * device's share (its weights, plus the KV cache for max_seqs sequences
 * of ctx positions in type kv_type) fits, and the fullest device (share over budget) is
 * as empty as it can be. The devices are tried in every order up to 6 of
 * them, else in the given order, largest first and smallest first; ties
 * go to fewer devices, then to the order tried first (core/cut_int.h's
 * mu__cut_fit_any). Device order[i] takes layers up to cut[i], from where
 * order[i-1] stopped (a device with nothing to take gets an empty
 * range); order and cut have nd entries. MU_ETOOBIG with the numbers in
 * err when nothing fits; MU_EARG when the head dim cannot take kv_type.
 */
int mu__llm_plan(const mu__llm_src_t *src, int32_t ctx, int max_seqs, int kv_type,
                 const uint64_t *budget, int nd, int *order, int *cut, char *err, size_t el);
/* Bytes of KV cache layers [a, b) need for max_seqs x ctx positions in
 * type kv_type (a mu__kv_t). */
uint64_t mu__llm_kv_bytes(const mu__llm_src_t *src, int a, int b, int32_t ctx, int max_seqs,
                          int kv_type);

#endif
