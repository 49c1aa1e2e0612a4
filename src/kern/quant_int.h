/* SPDX-License-Identifier: MIT */
/*
 * The reference quantizers: a row of f32 to ggml's blocks, for every type
 * `muster model quantize` writes, keyed by ggml's type id (GGUF's tensor
 * type), not by mu__wtype_t: they are what a GGUF file holds, whether the
 * kernels compute the type yet or not. When a type enters mu__wtypes its
 * function here is that entry's from_f32.
 *
 * Each gives the bytes ggml_quantize_chunk gives without an importance
 * matrix, bit for bit (tests/interop/test_quantize.py compares them with
 * libggml-base's): the same search for scales and the same float
 * operations in the same order, built with -ffp-contract=off. Rows with
 * NaN or inf have no undefined behaviour here; they give ggml's bytes on
 * x86 too (ggml's casts there are x86's truncation, spelt out here).
 *
 * Pure functions of their input: no allocation, no state, any thread.
 */
#ifndef MU_KERN_QUANT_INT_H
#define MU_KERN_QUANT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "kern/kern_int.h"

/* ggml's type ids of the types the quantizers write. */
enum {
	MU__GGML_F32 = 0, MU__GGML_F16 = 1, MU__GGML_Q4_0 = 2, MU__GGML_Q4_1 = 3,
	MU__GGML_Q5_0 = 6, MU__GGML_Q5_1 = 7, MU__GGML_Q8_0 = 8, MU__GGML_Q2_K = 10,
	MU__GGML_Q3_K = 11, MU__GGML_Q4_K = 12, MU__GGML_Q5_K = 13, MU__GGML_Q6_K = 14,
	MU__GGML_IQ4_NL = 20, MU__GGML_IQ4_XS = 23, MU__GGML_BF16 = 30
};

/* One quantizer: its type's block (elements) and bytes per block, and the
 * row conversion (cols a multiple of block). */
typedef struct {
	uint32_t ggml;
	const char *name;
	int32_t block;
	uint32_t block_bytes;
	mu__from_f32_fn from_f32;
} mu__quant_t;

/* The quantizer of ggml type id t, or NULL when there is none. */
const mu__quant_t *mu__quant(uint32_t t);

/* The quantizers one by one (mu__from_f32_fn: x[cols] -> row). */
void mu__quant_f32(const float *x, int64_t cols, void *row);
void mu__quant_f16(const float *x, int64_t cols, void *row);
void mu__quant_bf16(const float *x, int64_t cols, void *row);
void mu__quant_q4_0(const float *x, int64_t cols, void *row);
void mu__quant_q4_1(const float *x, int64_t cols, void *row);
void mu__quant_q5_0(const float *x, int64_t cols, void *row);
void mu__quant_q5_1(const float *x, int64_t cols, void *row);
void mu__quant_q8_0(const float *x, int64_t cols, void *row);
void mu__quant_iq4_nl(const float *x, int64_t cols, void *row);
void mu__quant_q2_k(const float *x, int64_t cols, void *row);
void mu__quant_q3_k(const float *x, int64_t cols, void *row);
void mu__quant_q4_k(const float *x, int64_t cols, void *row);
void mu__quant_q5_k(const float *x, int64_t cols, void *row);
void mu__quant_q6_k(const float *x, int64_t cols, void *row);
void mu__quant_iq4_xs(const float *x, int64_t cols, void *row);

/* Shared by the two files of quantizers (quant_32.c, quant_k.c). */
uint16_t mu__quant_h(float f);       /* f32 to f16 bits, ggml's rounding */
int mu__quant_nearest(float f);      /* ggml's nearest_int: half to even */
int mu__quant_iq4_index(float x);    /* the nearest entry of the IQ4 table */
extern const int8_t mu__quant_iq4_values[16];
/* One IQ4 block (32 elements) or superblock (256) as ggml lays it out. */
void mu__quant_iq4_block(const float *x, int sb, uint8_t *blk);

#endif
