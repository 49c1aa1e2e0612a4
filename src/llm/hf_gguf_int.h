/* SPDX-License-Identifier: MIT */
/*
 * An HF checkpoint directory as the GGUF that tools/llm_convert.py
 * hf-to-gguf makes of it, in memory, for the quantizer (mu_hf_quantize,
 * llm/hf_quant.c): the metadata is written as a GGUF image (header and
 * key-values, no tensors) by the writer below and parsed back; the
 * tokenizer's part comes from llm/hf_gguf_tok.c.
 */
#ifndef MU_LLM_HF_GGUF_INT_H
#define MU_LLM_HF_GGUF_INT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/buf_int.h"

/* Key-values being written: each call appends one (the first failure is
 * kept in rc and later calls do nothing). */
typedef struct {
	mu__buf_t b;
	uint64_t nkv;
	int rc;
} mu__kvw_t;

void mu__kvw_init(mu__kvw_t *w);
void mu__kvw_u32(mu__kvw_t *w, const char *key, uint32_t v);
void mu__kvw_f32(mu__kvw_t *w, const char *key, float v);
void mu__kvw_bool(mu__kvw_t *w, const char *key, int v);
void mu__kvw_str(mu__kvw_t *w, const char *key, const char *s, size_t len);
/* An array of n strings: begin, then n mu__kvw_elem_str. */
void mu__kvw_arr_str(mu__kvw_t *w, const char *key, uint64_t n);
void mu__kvw_elem_str(mu__kvw_t *w, const char *s, size_t len);
/* An array of n 4-byte numbers (F32 or I32 elements), little-endian. */
void mu__kvw_arr_u32(mu__kvw_t *w, const char *key, uint32_t etype, const uint32_t *v,
                     uint64_t n);

/*
 * The tokenizer.ggml.* keys of dir's tokenizer.json (and
 * tokenizer_config.json when present), as tools/llm_tok.py gguf_tokenizer
 * and llm_convert.py gguf_tokenizer_metadata write them; cfg is
 * config.json (its bos/eos ids win), vocab its vocab_size. 0, or
 * MU_EPROTO / MU_EJSON / -errno / MU_ENOMEM with why naming the file and
 * field.
 */
int mu__hf_gguf_tokenizer(mu__kvw_t *w, const char *dir, const cJSON *cfg, int64_t vocab,
                          char *why, size_t wl);

#endif
