/* SPDX-License-Identifier: MIT */
/*
 * Which type each tensor of a GGUF checkpoint gets when the file is
 * quantized as a given file type: llama.cpp's llama_model_quantize's
 * rules without an importance matrix (formats/quant_rules.c; the rules in
 * words are docs/quantize.md's). Pure: the state is the caller's.
 */
#ifndef MU_FORMATS_QUANT_RULES_INT_H
#define MU_FORMATS_QUANT_RULES_INT_H

#include <stddef.h>
#include <stdint.h>

/* A file type: llama.cpp's name and number (general.file_type), the
 * ggml type most tensors get; why is non-NULL for the ones muster refuses
 * (those that need an importance matrix, or a type muster cannot write). */
typedef struct {
	const char *name;
	uint32_t ftype;
	uint32_t def;
	const char *why;
} mu__qftype_t;

/* The file type called name (exact, ggml's case), or NULL. */
const mu__qftype_t *mu__qftype(const char *name);
/* The names muster writes, ", "-separated. */
const char *mu__qftype_list(void);

/*
 * What the rules count as they go, over the tensors in llama.cpp's order
 * (mu__quant_order). Fill the model's part (from its metadata) and the
 * counts with mu__quant_plan_init; then call mu__quant_pick once per
 * tensor in that order.
 */
typedef struct {
	int n_gqa;       /* head_count / head_count_kv (integer), 0 unknown */
	int n_expert;
	int falcon;      /* general.architecture is "falcon" */
	int n_layer;     /* block_count */
	int tied;        /* no output.weight: token_embd is the output too */
	int n_attn_v, i_attn_v, i_ffn_down, i_ffn_gate, i_ffn_up;
	int fallbacks;   /* tensors sent to another type by their shape */
} mu__qplan_t;

/* Count what the rules need from the tensor names (n_attn_v, tied). */
void mu__quant_plan_names(mu__qplan_t *p, const char *const *names, size_t n);

/*
 * The type of a tensor of ggml type cur and shape ne (innermost first,
 * unused dims 1), called name. Tensors the rules leave alone keep cur. -1 (with why)
 * when the tensor is a layer's the model's block_count does not have and
 * the model has experts (llama.cpp reads the layer from the name then).
 */
int64_t mu__quant_pick(mu__qplan_t *p, const mu__qftype_t *ft, const char *name,
                       const uint64_t ne[4], uint32_t cur, char *why, size_t wl);

/* llama.cpp's order of a model's tensors: by layer (blk.N., none first),
 * then by name. A qsort comparator on const char * elements. */
int mu__quant_order(const void *a, const void *b);

#endif
