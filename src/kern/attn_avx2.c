/* SPDX-License-Identifier: MIT */
/*
 * The AVX2+FMA+F16C reads of a KV cache: kern/kern_int.h's mu__attn_dot
 * and mu__attn_mix, the same operations as kern/attn.c's portable ones,
 * eight elements to a register. This file alone is compiled with -mavx2
 * -mfma -mf16c (and -ffp-contract=off); kern/attn.c calls into it only
 * when mu__kern_get() chose an AVX2 table, that is on a CPU with all
 * three.
 *
 * The dot takes eight positions at a time: each group of q is loaded once
 * for eight keys, whose accumulators are eight independent fma chains,
 * and their lanes are reduced together by shuffles that add the same
 * pairs in the same order as the definition. The mix keeps up to 64
 * elements of o in registers across every position (eight chains again),
 * in chunks when hd is larger; each element still takes its positions in
 * order. F16 goes to f32 by vcvtph2ps (exact, as mu__h2f); a Q8_0 value is
 * d * (float)q, one vmulps.
 */
#include "kern/attn_int.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

/* Positions per step of the dot; registers of o per chunk of the mix. */
#define NP 8
#define NR 8

AI __m256i tail_mask(int rem)
{
	return _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Elements e..e+7 of a row of a float type (F32 or F16), exactly as f32. */
AI __m256 ld8(mu__wtype_t t, const unsigned char *r, int32_t e)
{
	if (t == MU__WT_F32)
		return _mm256_loadu_ps((const float *)(const void *)(r + 4 * (size_t)e));
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(r + 2 * (size_t)e)));
}

/* The rem < 8 elements from e on, zeros after (nothing past them read). */
AI __m256 ld8_tail(mu__wtype_t t, const unsigned char *r, int32_t e, int rem)
{
	unsigned char tmp[16] = {0};

	if (t == MU__WT_F32)
		return _mm256_maskload_ps((const float *)(const void *)(r + 4 * (size_t)e),
		                          tail_mask(rem));
	memcpy(tmp, r + 2 * (size_t)e, (size_t)rem * 2);
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)tmp));
}

/* A Q8_0 block's d, and its eight values from c: d * (float)q. */
AI __m256 q8_d(const unsigned char *blk)
{
	return _mm256_set1_ps(_cvtsh_ss(mu__ld16(blk)));
}

AI __m256 q8_8(__m256 d, const unsigned char *blk, int c)
{
	__m128i q = _mm_loadl_epi64((const __m128i *)(const void *)(blk + 2 + c));

	return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
}

/* One position's lanes reduced: (s0 + s2) + (s1 + s3), s_l = a_l + a_(l+4). */
AI float hsum(__m256 a)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	__m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));

	return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

/* Eight positions' lanes reduced at once, each as hsum does (the same
 * operands on each side of every add): lane i of the result is a[i]'s. */
AI __m256 hsum8(const __m256 a[8])
{
	__m256 s[4], t[2], u;

#pragma GCC unroll 8
	for (int i = 0; i < 4; i++) /* [s0..s3 of a[2i] | s0..s3 of a[2i+1]] */
		s[i] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x20),
		                     _mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x31));
#pragma GCC unroll 8
	for (int i = 0; i < 2; i++) /* [t0 t1 of a[4i], of a[4i+2] | of a[4i+1], of a[4i+3]] */
		t[i] = _mm256_add_ps(_mm256_shuffle_ps(s[2 * i], s[2 * i + 1], 0x44),
		                     _mm256_shuffle_ps(s[2 * i], s[2 * i + 1], 0xee));
	/* t0 + t1: [a0 a2 a4 a6 | a1 a3 a5 a7] */
	u = _mm256_add_ps(_mm256_shuffle_ps(t[0], t[1], 0x88), _mm256_shuffle_ps(t[0], t[1], 0xdd));
	return _mm256_permutevar8x32_ps(u, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* s[i] = q . key i for the np positions at kv (np is NP or 1). */
AI void dot_np(mu__wtype_t t, const float *q, const unsigned char *kv, size_t stride, int32_t hd,
               float *s, int np)
{
	__m256 acc[NP];
	int32_t e = 0;

#pragma GCC unroll 8
	for (int i = 0; i < np; i++)
		acc[i] = _mm256_setzero_ps();
	if (t == MU__WT_Q8_0) {
		for (; e < hd; e += MU__QBLOCK) {
			size_t bo = (size_t)(e / MU__QBLOCK) * 34;
			__m256 qv[4];

#pragma GCC unroll 8
			for (int c = 0; c < 4; c++)
				qv[c] = _mm256_loadu_ps(q + e + 8 * c);
#pragma GCC unroll 8
			for (int i = 0; i < np; i++) {
				const unsigned char *blk = kv + (size_t)i * stride + bo;
				__m256 d = q8_d(blk);

#pragma GCC unroll 8
				for (int c = 0; c < 4; c++)
					acc[i] = _mm256_fmadd_ps(qv[c], q8_8(d, blk, 8 * c), acc[i]);
			}
		}
	} else {
		for (; e + 8 <= hd; e += 8) {
			__m256 qv = _mm256_loadu_ps(q + e);

#pragma GCC unroll 8
			for (int i = 0; i < np; i++)
				acc[i] = _mm256_fmadd_ps(qv, ld8(t, kv + (size_t)i * stride, e), acc[i]);
		}
		if (e < hd) { /* past hd, both factors are 0 */
			__m256 qv = _mm256_maskload_ps(q + e, tail_mask(hd - e));

#pragma GCC unroll 8
			for (int i = 0; i < np; i++)
				acc[i] = _mm256_fmadd_ps(qv, ld8_tail(t, kv + (size_t)i * stride, e, hd - e),
				                         acc[i]);
		}
	}
	if (np == NP)
		_mm256_storeu_ps(s, hsum8(acc));
	else
#pragma GCC unroll 8
		for (int i = 0; i < np; i++)
			s[i] = hsum(acc[i]);
}

AI void dot_rows(mu__wtype_t t, const float *q, const unsigned char *kv, size_t stride,
                 int64_t n, int32_t hd, float *s)
{
	int64_t j = 0;

	for (; j + NP <= n; j += NP)
		dot_np(t, q, kv + (size_t)j * stride, stride, hd, s + j, NP);
	for (; j < n; j++)
		dot_np(t, q, kv + (size_t)j * stride, stride, hd, s + j, 1);
}

/* o[e0 .. e0 + 8 * nr) (nr <= NR registers; e0 a multiple of 32 for
 * Q8_0) += every position's p * value, position by position. */
AI void mix_chunk(mu__wtype_t t, const float *p, const unsigned char *kv, size_t stride,
                  int64_t n, int32_t e0, float *o, int nr)
{
	__m256 acc[NR];

#pragma GCC unroll 8
	for (int r = 0; r < nr; r++)
		acc[r] = _mm256_loadu_ps(o + e0 + 8 * r);
	for (int64_t j = 0; j < n; j++) {
		const unsigned char *row = kv + (size_t)j * stride;
		__m256 pj = _mm256_broadcast_ss(p + j), d = _mm256_setzero_ps();

#pragma GCC unroll 8
		for (int r = 0; r < nr; r++) {
			__m256 v;

			if (t == MU__WT_Q8_0) {
				const unsigned char *blk = row + (size_t)(e0 / MU__QBLOCK + r / 4) * 34;

				if (r % 4 == 0)
					d = q8_d(blk);
				v = q8_8(d, blk, 8 * (r % 4));
			} else {
				v = ld8(t, row, e0 + 8 * r);
			}
			acc[r] = _mm256_fmadd_ps(pj, v, acc[r]);
		}
	}
#pragma GCC unroll 8
	for (int r = 0; r < nr; r++)
		_mm256_storeu_ps(o + e0 + 8 * r, acc[r]);
}

/* The last rem < 8 elements of o, from e0 (F32 and F16 only). */
AI void mix_tail(mu__wtype_t t, const float *p, const unsigned char *kv, size_t stride,
                 int64_t n, int32_t e0, float *o, int rem)
{
	__m256i m = tail_mask(rem);
	__m256 acc = _mm256_maskload_ps(o + e0, m);

	for (int64_t j = 0; j < n; j++)
		acc = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j),
		                      ld8_tail(t, kv + (size_t)j * stride, e0, rem), acc);
	_mm256_maskstore_ps(o + e0, m, acc);
}

AI void mix_rows(mu__wtype_t t, const float *p, const unsigned char *kv, size_t stride,
                 int64_t n, int32_t hd, float *o)
{
	int32_t e = 0;

	for (; e + 8 * NR <= hd; e += 8 * NR)
		mix_chunk(t, p, kv, stride, n, e, o, NR);
	/* the rest of the registers, each count its own unrolled loop */
	switch ((hd - e) / 8) {
	case 7: mix_chunk(t, p, kv, stride, n, e, o, 7); break;
	case 6: mix_chunk(t, p, kv, stride, n, e, o, 6); break;
	case 5: mix_chunk(t, p, kv, stride, n, e, o, 5); break;
	case 4: mix_chunk(t, p, kv, stride, n, e, o, 4); break;
	case 3: mix_chunk(t, p, kv, stride, n, e, o, 3); break;
	case 2: mix_chunk(t, p, kv, stride, n, e, o, 2); break;
	case 1: mix_chunk(t, p, kv, stride, n, e, o, 1); break;
	default: break;
	}
	e += (hd - e) / 8 * 8;
	if (e < hd)
		mix_tail(t, p, kv, stride, n, e, o, hd - e);
}

#define READS(T, t)                                                                        \
	static void dot_##t(const float *q, const unsigned char *kv, size_t stride, int64_t n, \
	                    int32_t hd, float *s)                                             \
	{                                                                                      \
		dot_rows(T, q, kv, stride, n, hd, s);                                              \
	}                                                                                      \
	static void mix_##t(const float *p, const unsigned char *kv, size_t stride, int64_t n, \
	                    int32_t hd, float *o)                                             \
	{                                                                                      \
		mix_rows(T, p, kv, stride, n, hd, o);                                              \
	}
READS(MU__WT_F32, f32)
READS(MU__WT_F16, f16)
READS(MU__WT_Q8_0, q8_0)

const mu__attn_isa_t mu__attn_avx2 = {
    "avx2",
    {[MU__WT_F32] = dot_f32, [MU__WT_F16] = dot_f16, [MU__WT_Q8_0] = dot_q8_0},
    {[MU__WT_F32] = mix_f32, [MU__WT_F16] = mix_f16, [MU__WT_Q8_0] = mix_q8_0},
};

#else
/* Not an x86 build: kern/attn.c never asks for the table. */
typedef int mu__attn_avx2_unused_t;
#endif
