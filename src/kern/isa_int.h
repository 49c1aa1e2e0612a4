/* SPDX-License-Identifier: MIT */
/*
 * What the kernel files share among themselves (kern.c, kern/types.c,
 * kern/portable.c, kern/avx2.c) and with their tests: one instruction
 * set's table of kernels, and the scalar definitions every table must
 * agree with bit for bit. Nothing outside the files of src/kern/ and its
 * tests includes this; the decoder sees kern/kern_int.h only.
 *
 * The arithmetic of one output element, y = bias + sum_k W[k] * x[k]
 * (every path, every n, every thread count):
 *   - F32/F16/BF16: eight float lanes acc[0..7], all +0; for each group g
 *     of eight k (k = 8g + l; past cols both factors are 0), acc[l] =
 *     fma(W[k], x[k], acc[l]), W[k] converted exactly to f32 first; then
 *     y = ((acc0+acc4) + (acc2+acc6)) + ((acc1+acc5) + (acc3+acc7));
 *   - every integer type: one float acc, +0, and one float chain over the
 *     row's blocks in order, acc = fma(d_b, (float)S_b, acc), where S_b is
 *     the exact integer sum of the block's products and d_b one f32
 *     product of scales:
 *     Q8_0/Q4_0/Q5_0/IQ4_NL, per block b of 32 (x first in the Q8_0
 *     activation format, MU__ACTFMT_Q8_0, each block as mu__q8_act_block
 *     makes it), the weights as signed integers wq (Q8_0: q; Q4_0:
 *     nibble - 8; Q5_0: 5-bit q - 16; IQ4_NL: the int8 value of its
 *     table): d_b = dw_b * dx_b and S_b = the sum of wq[k] * xq[k] over
 *     the block's 32 k;
 *     Q4_1/Q5_1 (x = d*q + m; x in the Q8_1 format, MU__ACTFMT_Q8_1: the
 *     Q8_0 blocks plus sx_b = f16(dx_b unrounded * sum of xq)): the same
 *     with the unsigned q, and one more float accm, +0 at first:
 *     accm = fma(mw_b, sx_b, accm) per block, in block order;
 *     the K-quants and IQ4_XS, per superblock of 256 (x first in the Q8_K
 *     format, MU__ACTFMT_Q8_K, each block as mu__q8k_block makes it), with
 *     each type's integer quants q_k and sub-block scales as ggml defines
 *     them (Q3_K, Q6_K: signed q; Q2_K, Q4_K, Q5_K: unsigned q and mins;
 *     IQ4_XS: q the int8 value of IQ4_NL's table, scale ls - 32): d_b =
 *     f16(dw) * dx and S_b = the sum of scale(k) * q_k * x_k over the 256
 *     k; for the types with mins, accm (+0 at first): M = the exact
 *     integer sum over sub-blocks j of min_j * (the sum of x's quants in
 *     j, from the block's bsums), dm = f16(dmin) * dx, accm = fma(dm,
 *     (float)-M, accm), superblock by superblock (-M, not -dm: a NaN dm
 *     keeps its sign, where x86's fnmadd, which compilers make of
 *     fma(-a, b, c), would not flip it);
 *   - then y = acc + accm for Q4_1/Q5_1 and for every superblock type
 *     (with or without mins), y = acc for the others, and y + bias when
 *     there is one.
 * A block's sum is one number, so an instruction set may give the lanes
 * of its vectors to different output elements (rows of W, rows of x) and
 * lay the weights out as it likes; only the float chain is fixed. The
 * integer sums are exact in int32, and in the int16 pairs of AVX2's
 * maddubs: |xq| <= 127 and every weight type's |wq| <= 127 (Q5_1's q <=
 * 31, IQ4_NL's table -127..113), so a pair is at most 2 * 127 * 127 <
 * 2^15. An exact sum is the same in any order, so an instruction set may
 * add it as it likes. A 32-block's |S_b| <= 32 * 127 * 127 < 2^24 is
 * exact in f32 too; a superblock's is exact in int32 (|S_b| <= 256 * 128
 * * 32 * 127 < 2^31 for Q6_K, the largest; |M| <= 16 * 63 * 16 * 127)
 * and (float)S_b rounds it to nearest, even on a tie, as every
 * instruction set's conversion does.
 */
#ifndef MU_KERN_ISA_INT_H
#define MU_KERN_ISA_INT_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kern/kern_int.h"

/* One matmul as the kernels see it, after kern.c checked the shapes. */
typedef struct {
	const mu__wmat_t *w;
	const float *x;           /* n rows of w->cols floats */
	/* The same rows in w's activation format (mu__wtypes[type].act): row
	 * i at xa + i * xa_row. For MU__ACTFMT_F32 that is x itself. */
	const unsigned char *xa;
	size_t xa_row;
	int64_t n;
	float *y;                 /* n rows of w->rows */
	const float *bias;        /* w->rows, or NULL */
} mu__mm_job_t;

/* Output rows [r0, r1) of every row of x. */
typedef void (*mu__mm_fn)(const mu__mm_job_t *j, int64_t r0, int64_t r1);
/* One row of x (cols a multiple of the format's block) into the format's
 * row form at out (mu__actfmt_row_bytes bytes). */
typedef void (*mu__actfmt_fn)(const float *x, int64_t cols, void *out);

/*
 * One instruction set's kernels: a product for every weight type, indexed
 * by mu__wtype_t, and a row quantizer for every activation format but F32
 * (which is x as it is), indexed by mu__actfmt_t. Every entry is filled
 * (the tests check it), and every function of every table gives the same
 * bits for the same input.
 */
typedef struct {
	const char *name;
	mu__mm_fn mm[MU__WT_COUNT];
	mu__actfmt_fn act[MU__ACTFMT_COUNT];
} mu__kern_isa_t;

extern const mu__kern_isa_t mu__kern_portable;
/* The AVX2+FMA+F16C table, or NULL when this build or CPU has none. */
const mu__kern_isa_t *mu__kern_avx2(void);
/* The table named ("portable", "avx2", "avx2-vnni"), or NULL when this
 * build or CPU cannot run it. */
const mu__kern_isa_t *mu__kern_isa_by_name(const char *name);
/* Table i of those this build has, whether or not this CPU runs them
 * (portable first), or NULL past the last: for tests that check each
 * table is complete. */
const mu__kern_isa_t *mu__kern_isa_built(int i);
/* The table in use (chosen once: MUSTER_KERNELS, then the CPU's best). */
const mu__kern_isa_t *mu__kern_get(void);

/* A row of Q8_0 activations (MU__ACTFMT_Q8_0): row i's quants and scales. */
static inline const int8_t *mu__xq(const mu__mm_job_t *j, int64_t i)
{
	return (const int8_t *)(j->xa + (size_t)i * j->xa_row);
}

static inline const float *mu__xd(const mu__mm_job_t *j, int64_t i)
{
	return (const float *)(const void *)(j->xa + (size_t)i * j->xa_row + (size_t)j->w->cols);
}

/* A row of Q8_1 activations (MU__ACTFMT_Q8_1): the Q8_0 row's quants and
 * scales (mu__xq, mu__xd), then the blocks' sums s. */
static inline const float *mu__xs(const mu__mm_job_t *j, int64_t i)
{
	return mu__xd(j, i) + j->w->cols / MU__QBLOCK;
}

/* ---- scalar definitions (inline: the portable kernels' inner loops) ---- */

static inline uint32_t mu__f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static inline float mu__bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

/* Exact; a NaN keeps its payload and becomes quiet, as F16C's vcvtph2ps. */
static inline float mu__h2f(uint16_t h)
{
	uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;

	if (e == 0x1f)
		return mu__bits_f32(s | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0));
	if (e != 0)
		return mu__bits_f32(s | ((e + 112) << 23) | (m << 13));
	/* zero or subnormal: m * 2^-24, exact in f32 */
	return mu__bits_f32(s | mu__f32_bits((float)m * 0x1p-24f));
}

static inline float mu__bf2f(uint16_t h)
{
	return mu__bits_f32((uint32_t)h << 16);
}

static inline uint16_t mu__ld16(const unsigned char *p)
{
	uint16_t v;

	memcpy(&v, p, 2); /* little-endian host (checked in kern.c) */
	return v;
}

static inline float mu__ldf(const unsigned char *p)
{
	float v;

	memcpy(&v, p, 4);
	return v;
}

/* The fixed reduction of the eight lanes (see the file comment). */
static inline float mu__hsum8(const float a[8])
{
	float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];

	return (s0 + s2) + (s1 + s3);
}

/*
 * One block of 32 floats to Q8_0 as llama.cpp's reference quantizer does:
 * d = max|x| / 127, q = roundf(x / d) computed as x * (1/d), d stored as
 * f16. Where llama.cpp is undefined we define: a block holding a NaN or an
 * infinity gets d = NaN and q = 0 (so products with it are NaN), and q is
 * clamped to [-127, 127] (a NaN from 0 * inf, when 1/d overflows, is 0).
 * Never -128, which the AVX2 sign trick relies on.
 */
void mu__q8_block(const float *x, int8_t *q, uint16_t *dh);

/*
 * One block of 32 activations to Q8_0 (MU__ACTFMT_Q8_0, and the first
 * part of Q8_1) as ggml's CPU backend quantizes x on x86 at run time
 * (quantize_row_q8_0 with AVX2), which is what llama.cpp's products see
 * there: d = max|x| / 127 stored as f16, q = x * (127 / max|x|) rounded
 * to nearest, halves to even. Not the reference rule of mu__q8_block
 * (x * (1/d), halves away from zero), which llama.cpp's quantizer writes
 * into files: the two differ by one in some quants. NaNs, infinities and
 * the clamp to [-127, 127] as mu__q8_block (ggml's own is undefined
 * there: an infinite 127/max gives it -128).
 */
void mu__q8_act_block(const float *x, int8_t *q, uint16_t *dh);

/*
 * The rest of a Q8_1 activation row (MU__ACTFMT_Q8_1) whose first part,
 * the Q8_0 row form of x (cols quants, then cols/32 scales), is already at
 * out: each block's s, as llama.cpp's reference quantize_row_q8_1 makes
 * it: s = f16(d * (float)sum of the 32 q), d = max|x| / 127 before its
 * rounding to f16, stored as f32 after the scales. A block with a NaN or
 * an infinity (d NaN, as mu__q8_act_block) gets s = NaN. Every instruction
 * set's Q8_1 quantizer calls this one, so their bytes agree.
 */
void mu__q8_1_sums(const float *x, int64_t cols, void *out);

/* IQ4_NL's 16 values (ggml's kvalues_iq4nl): a nibble k stands for
 * mu__iq4nl_values[k] * d. */
extern const int8_t mu__iq4nl_values[16];

/* ---- the K-quants and IQ4_XS (kern/types_k.c, kern/portable_k.c,
 * kern/avx2_k.c) ---- */

/* A block of Q8_K activations: f32 d @0, int8 q[256] @4, int16 bsums[16]
 * @260 (the sum of each 16 q). */
#define MU__Q8K_BYTES 292

/* One block of 256 floats to Q8_K as ggml's quantize_row_q8_K_ref does,
 * with mu__q8_block's rule for NaNs and infinities (kern/types_k.c). */
void mu__q8k_block(const float *x, unsigned char *blk);
/* The Q8_K row quantizer of every table, and its row read back. */
void mu__act_q8_k(const float *x, int64_t cols, void *out);
void mu__act_q8_k_to_f32(const void *row, int64_t cols, float *out);

/* ggml's dequantize_row_<type>, bit for bit. */
void mu__q2_k_to_f32(const void *row, int64_t cols, float *out);
void mu__q3_k_to_f32(const void *row, int64_t cols, float *out);
void mu__q4_k_to_f32(const void *row, int64_t cols, float *out);
void mu__q5_k_to_f32(const void *row, int64_t cols, float *out);
void mu__q6_k_to_f32(const void *row, int64_t cols, float *out);
void mu__iq4_xs_to_f32(const void *row, int64_t cols, float *out);

/* The integer parts of the blocks, as the products read them (IQ4_XS's
 * quants are mu__iq4nl_values): Q4_K/Q5_K's scale and min j (0..7) of the
 * 12 scale bytes s; Q3_K's 16 scales (minus 32); IQ4_XS's scale ib (ls -
 * 32) of block b; Q6_K's signed quant e of block b. */
void mu__k4_scale_min(const unsigned char *s, int j, int *sc, int *mn);
void mu__k3_scales(const unsigned char *s, int sc[16]);
int mu__iq4xs_scale(const unsigned char *b, int ib);
int mu__q6_k_quant(const unsigned char *b, int e);

/* The products, one per table (kern/portable_k.c, kern/avx2_k.c and its
 * rebuild kern/vnni_k.c); MU__KQ_MM(q4_k) names the one of the file that
 * includes this, avx2.c or vnni.c. */
#define MU__KQ_DECL(isa)                                                    \
	void mu__mm_q2_k_##isa(const mu__mm_job_t *j, int64_t r0, int64_t r1);  \
	void mu__mm_q3_k_##isa(const mu__mm_job_t *j, int64_t r0, int64_t r1);  \
	void mu__mm_q4_k_##isa(const mu__mm_job_t *j, int64_t r0, int64_t r1);  \
	void mu__mm_q5_k_##isa(const mu__mm_job_t *j, int64_t r0, int64_t r1);  \
	void mu__mm_q6_k_##isa(const mu__mm_job_t *j, int64_t r0, int64_t r1);  \
	void mu__mm_iq4_xs_##isa(const mu__mm_job_t *j, int64_t r0, int64_t r1);
MU__KQ_DECL(portable)
MU__KQ_DECL(avx2)
MU__KQ_DECL(vnni)
#if defined(MU_KERN_VNNI)
#define MU__KQ_MM(t) mu__mm_##t##_vnni
#else
#define MU__KQ_MM(t) mu__mm_##t##_avx2
#endif

/* The AVX2 products of the 32-element types (kern/avx2_32.c and its
 * rebuild kern/vnni_32.c), named as MU__KQ_MM names the K-quants'. */
#define MU__K32_DECL(isa)                                                    \
	void mu__mm_q8_0_##isa(const mu__mm_job_t *j, int64_t r0, int64_t r1);   \
	void mu__mm_q4_0_##isa(const mu__mm_job_t *j, int64_t r0, int64_t r1);   \
	void mu__mm_q4_1_##isa(const mu__mm_job_t *j, int64_t r0, int64_t r1);   \
	void mu__mm_q5_0_##isa(const mu__mm_job_t *j, int64_t r0, int64_t r1);   \
	void mu__mm_q5_1_##isa(const mu__mm_job_t *j, int64_t r0, int64_t r1);   \
	void mu__mm_iq4_nl_##isa(const mu__mm_job_t *j, int64_t r0, int64_t r1);
MU__K32_DECL(avx2)
MU__K32_DECL(vnni)
#define MU__K32_MM(t) MU__KQ_MM(t)

#endif
