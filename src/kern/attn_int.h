/* SPDX-License-Identifier: MIT */
/*
 * What the attention kernels share among the kernel files (kern/attn.c,
 * the portable ones and the front; kern/attn_avx2.c) and their tests: one
 * instruction set's table of the two reads of a KV cache that
 * kern/kern_int.h's mu__attn_dot and mu__attn_mix define. The front picks
 * the table of the instruction set mu__kern_get() chose (the AVX2 one
 * for "avx2" and "avx2-vnni"), so MUSTER_KERNELS and mu__kern_force_isa
 * choose it too. Nothing outside src/kern/ and its tests includes this.
 */
#ifndef MU_KERN_ATTN_INT_H
#define MU_KERN_ATTN_INT_H

#include "kern/isa_int.h"

/* mu__attn_dot's and mu__attn_mix's arguments, after the front. */
typedef void (*mu__attn_dot_fn)(const float *q, const unsigned char *kv, size_t stride,
                                int64_t n, int32_t hd, float *s);
typedef void (*mu__attn_mix_fn)(const float *p, const unsigned char *kv, size_t stride,
                                int64_t n, int32_t hd, float *o);

/*
 * One instruction set's reads, indexed by mu__wtype_t: filled for the
 * types a KV cache is kept in (F32, F16 and Q8_0), NULL for the others.
 * Every table fills the same entries (the tests check it) and every
 * function gives the same bits as the portable one.
 */
typedef struct {
	const char *name;
	mu__attn_dot_fn dot[MU__WT_COUNT];
	mu__attn_mix_fn mix[MU__WT_COUNT];
} mu__attn_isa_t;

extern const mu__attn_isa_t mu__attn_portable;
/* kern/attn_avx2.c's, in a build with the AVX2 kernels (MU_HAVE_KERN_AVX2);
 * run only where mu__kern_avx2() is not NULL. */
extern const mu__attn_isa_t mu__attn_avx2;

/* The table in use: the AVX2 one when mu__kern_get() is an AVX2 table. */
const mu__attn_isa_t *mu__attn_get(void);

#endif
