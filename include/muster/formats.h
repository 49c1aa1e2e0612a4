/* SPDX-License-Identifier: MIT */
/*
 * Model files as files: quantizing a GGUF checkpoint into another
 * (`muster model quantize`, docs/quantize.md). The rules that pick each
 * tensor's type are llama.cpp's llama_model_quantize's without an
 * importance matrix, and the quantizers give ggml's bytes, so the output
 * is the file llama.cpp's own quantizer writes for the same input and
 * type, tensor for tensor.
 */
#ifndef MUSTER_FORMATS_H
#define MUSTER_FORMATS_H

#include <stddef.h>
#include <stdint.h>

#include "muster/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MU_QUANT_MAX_TYPES 16

/* What a quantization wrote, per tensor type (a plain data struct). */
typedef struct {
	int ntypes;
	struct {
		char name[16];     /* ggml's name of the type: "Q4_K" */
		uint64_t tensors;  /* how many tensors have it */
		uint64_t elements; /* their elements */
		uint64_t bytes;    /* their bytes in the output */
	} type[MU_QUANT_MAX_TYPES];
	uint64_t tensors, elements;
	uint64_t in_bytes, out_bytes; /* tensor data, in and out */
	int fallbacks;     /* tensors whose rows did not fit the type's blocks */
} mu_quant_summary_t;

/*
 * Quantize the GGUF file in into the GGUF file out as file type `type`
 * (llama.cpp's names: "Q4_K_M", "Q8_0", "F16"; mu_quant_types lists them)
 * on threads threads (1 .. 1024; the file is the same for any count).
 * Every metadata key of in is kept (general.file_type and
 * general.quantization_version set, split keys dropped), tensors keep
 * their names and shapes, in llama.cpp's order (by layer, then name). out is written under a temporary name
 * beside it and renamed when complete: on failure nothing is left at out
 * (nor the temporary). Reports progress (muster/common.h). 0 and *sum
 * filled (sum may be NULL), or with err: MU_EARG for an unknown type or
 * one that needs an importance matrix or a thread count out of range,
 * -errno for files, MU_EPROTO for an
 * input that is not a GGUF file muster reads or has a tensor of a type it
 * cannot read, MU_ENOMEM. Blocking; any thread.
 */
MU_EXTERN int mu_gguf_quantize(const char *in, const char *out, const char *type, int threads,
                               mu_quant_summary_t *sum, char *err, size_t errlen);

/*
 * The same from an HF checkpoint directory in: config.json,
 * tokenizer.json (with tokenizer_config.json when there is one) and
 * model.safetensors or the shards of model.safetensors.index.json, in
 * F32, F16 or BF16, of a LlamaForCausalLM, MistralForCausalLM (GGUF
 * architecture "llama", the Q/K rows put back in GGUF's order) or
 * Qwen2ForCausalLM ("qwen2"). out is the file mu_gguf_quantize writes
 * from the GGUF that tools/llm_convert.py hf-to-gguf makes of in with
 * --type the source's type: metadata from config.json and the
 * tokenizer's arrays from tokenizer.json, 1-D tensors in F32, a
 * rope_freqs.weight for llama3 RoPE scaling. Errors as mu_gguf_quantize's;
 * MU_EPROTO names the file and the field or tensor that is missing, not
 * supported or of the wrong shape.
 */
MU_EXTERN int mu_hf_quantize(const char *in, const char *out, const char *type, int threads,
                             mu_quant_summary_t *sum, char *err, size_t errlen);

/* The file types mu_gguf_quantize takes, ", "-separated (static). */
MU_EXTERN const char *mu_quant_types(void);

#ifdef __cplusplus
}
#endif

#endif
