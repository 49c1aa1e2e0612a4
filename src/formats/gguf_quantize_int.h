/* SPDX-License-Identifier: MIT */
/*
 * The quantizer of mu_gguf_quantize (formats/gguf_quantize.c) on a GGUF
 * already in memory: g's metadata and tensors, each tensor's data where
 * its data pointer says (a mapped GGUF file's data area, or any other
 * bytes in the tensor's type: llm/hf_quant.c gives it an HF directory's
 * safetensors). rows, when not NULL, gives per tensor of g (in g's order)
 * NULL or a row order: row r of the output is row rows[i][r] of the data
 * (HF's Q/K rows put back in GGUF's order), for any output type.
 * in_name names the input on the progress line. Errors as
 * mu_gguf_quantize's; err is set for each.
 */
#ifndef MU_FORMATS_GGUF_QUANTIZE_INT_H
#define MU_FORMATS_GGUF_QUANTIZE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "muster/formats.h"
#include "formats/gguf_int.h"

int mu__gguf_quantize_parsed(const mu__gguf_t *g, const uint32_t *const *rows,
                             const char *in_name, const char *out, const char *type, int threads,
                             mu_quant_summary_t *sum, char *err, size_t errlen);

#endif
