/* SPDX-License-Identifier: MIT */
/*
 * The AVX2+FMA+F16C kernels of the float types, the activation quantizers
 * and the table. This file alone is compiled with -mavx2 -mfma -mf16c (and
 * -ffp-contract=off); nothing in it runs until kern.c has seen the CPU
 * support all three, so the same binary runs on any x86-64. kern/vnni.c
 * builds it a second time with MU_KERN_VNNI, for CPUs that also have
 * AVX512-VNNI and AVX512-VL: the "avx2-vnni" table. The products of the
 * 32-element types are kern/avx2_32.c's (and kern/vnni_32.c's), those of
 * the superblock types kern/avx2_k.c's (kern/vnni_k.c's).
 *
 * Each float output element is one __m256 of eight lanes that accumulates
 * along k from 0 to cols, then reduces as kern/isa_int.h defines, so a
 * result never depends on the tile, the thread or n. For speed the loops
 * are blocked in registers as llamafile's tinyBLAS does: a tile of up to 4
 * rows of W by 3 rows of x shares each load among its 12 independent
 * accumulators (with 3 rows of x and one of W, the 16 registers); a tile's
 * rows of W lie far apart in memory (see DRIVER); and x is walked in
 * panels of rows that stay in the L2 cache while the thread's rows of W
 * stream past them.
 */
#include "kern/isa_int.h"

#if defined(MU_KERN_VNNI) && !(defined(__AVX512VNNI__) && defined(__AVX512VL__))
#define MU__KERN_SKIP 1
#endif

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && !defined(MU__KERN_SKIP)

#include <float.h>
#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

/* The largest tile any driver uses: TM rows of W by TN rows of x. */
#define TM 4
#define TN 3
/* Bytes of x in a panel: the rows of W are read from memory once per
 * panel, so larger is better until x falls out of the L2 (1 MiB on Zen 4);
 * 768 KiB measured best there, 192 KiB took twice the time at 2048x5632. */
#define PANEL_BYTES (768 << 10)

AI float hsum(__m256 a)
{
	/* s_l = a_l + a_(l+4); t0 = s0 + s2, t1 = s1 + s3; t0 + t1 */
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	__m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));

	return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

/* Eight weights from p as f32 (exact conversions). */
AI __m256 ldw(mu__wtype_t t, const unsigned char *p)
{
	if (t == MU__WT_F32)
		return _mm256_loadu_ps((const float *)p);
	if (t == MU__WT_F16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
	return _mm256_castsi256_ps(
	    _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* The last rem < 8 weights of a row, zeros after. */
AI __m256 ldw_tail(mu__wtype_t t, const unsigned char *p, int rem, __m256i mask)
{
	unsigned char tmp[16] = {0};

	if (t == MU__WT_F32)
		return _mm256_maskload_ps((const float *)p, mask);
	memcpy(tmp, p, (size_t)rem * 2);
	return ldw(t, tmp);
}

AI __m256i tail_mask(int rem)
{
	return _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Store a tile: acc[a][i] is W row r + a * rs by x row i0 + i. */
AI void store(const mu__mm_job_t *j, int64_t r, int64_t rs, int64_t i0, int rm, int rn, __m256 acc[TM][TN])
{
#pragma GCC unroll 4
	for (int a = 0; a < rm; a++) {
		float b = j->bias ? j->bias[r + a * rs] : 0.0f;

#pragma GCC unroll 4
		for (int i = 0; i < rn; i++) {
			float s = hsum(acc[a][i]);

			j->y[(i0 + i) * j->w->rows + r + a * rs] = j->bias ? s + b : s;
		}
	}
}

/* ---- F32, F16, BF16 ---- */

AI void tile_f(const mu__mm_job_t *j, mu__wtype_t t, int64_t r, int64_t rs, int64_t i0, int rm, int rn)
{
	int64_t cols = j->w->cols, k;
	size_t es = t == MU__WT_F32 ? 4 : 2, rb = (size_t)cols * es;
	const unsigned char *w = (const unsigned char *)j->w->data + (size_t)r * rb;
	const float *x = j->x + i0 * cols;
	__m256 acc[TM][TN], xv[TN];

#pragma GCC unroll 4
	for (int a = 0; a < rm; a++)
#pragma GCC unroll 4
		for (int i = 0; i < rn; i++)
			acc[a][i] = _mm256_setzero_ps();
	for (k = 0; k + 8 <= cols; k += 8) {
#pragma GCC unroll 4
		for (int i = 0; i < rn; i++)
			xv[i] = _mm256_loadu_ps(x + i * cols + k);
#pragma GCC unroll 4
		for (int a = 0; a < rm; a++) {
			__m256 wv = ldw(t, w + a * rs * rb + (size_t)k * es);

#pragma GCC unroll 4
			for (int i = 0; i < rn; i++)
				acc[a][i] = _mm256_fmadd_ps(wv, xv[i], acc[a][i]);
		}
	}
	if (k < cols) {
		int rem = (int)(cols - k);
		__m256i mask = tail_mask(rem);

#pragma GCC unroll 4
		for (int i = 0; i < rn; i++)
			xv[i] = _mm256_maskload_ps(x + i * cols + k, mask);
#pragma GCC unroll 4
		for (int a = 0; a < rm; a++) {
			__m256 wv = ldw_tail(t, w + a * rs * rb + (size_t)k * es, rem, mask);

#pragma GCC unroll 4
			for (int i = 0; i < rn; i++)
				acc[a][i] = _mm256_fmadd_ps(wv, xv[i], acc[a][i]);
		}
	}
	store(j, r, rs, i0, rm, rn, acc);
}

/* ---- drivers: panels of x, tiles of W by x ---- */

/* The tiles of up to RM x RN a driver may call, for rm of them. */
#define TILE_CASES(fn, t, rm, RM, RN)                                              \
	case rm * 4 + 1: if (rm <= RM) fn(j, t, r, rs, i, rm, 1); break;           \
	case rm * 4 + 2: if (rm <= RM && 2 <= RN) fn(j, t, r, rs, i, rm, 2); break; \
	case rm * 4 + 3: if (rm <= RM && 3 <= RN) fn(j, t, r, rs, i, rm, 3); break;

/*
 * Rows [r0, r1) of W for every row of x, in tiles of up to RM rows of W by
 * RN rows of x. A tile's rows of W are not neighbours but q = (r1 - r0) /
 * RM rows apart: reading a few rows that lie a few KiB apart at once ran
 * at half the memory bandwidth of one stream on the machine we measured
 * (a Zen 4 EPYC), while streams far apart ran at full speed, and a decode
 * step is all memory. The rows left over go in one last tile of
 * neighbours. For a prefill, x is walked in panels that stay in L2 while
 * the rows of W stream past; a tile of W stays in L1/L2 across a panel.
 */
#define DRIVER(name, fn, t, RM, RN)                                                \
	static void name(const mu__mm_job_t *j, int64_t r0, int64_t r1)            \
	{                                                                          \
		int64_t n = j->n, q = (r1 - r0) / RM, p0, p1, g, i;                \
		int64_t panel = PANEL_BYTES / (int64_t)j->xa_row;                  \
		panel = panel < RN ? RN : panel - panel % RN;                       \
		for (p0 = 0; p0 < n; p0 = p1) {                                     \
			p1 = n - p0 < panel ? n : p0 + panel;                      \
			for (g = 0; g <= q; g++) {                                  \
				int64_t r = g < q ? r0 + g : r0 + RM * q;           \
				int64_t rs = g < q ? q : 1;                         \
				int rm = g < q ? RM : (int)(r1 - r0 - RM * q);      \
				for (i = p0; rm > 0 && i < p1; i += RN) {           \
					int rn = p1 - i < RN ? (int)(p1 - i) : RN;  \
					switch (rm * 4 + rn) {                      \
					TILE_CASES(fn, t, 1, RM, RN)                \
					TILE_CASES(fn, t, 2, RM, RN)                \
					TILE_CASES(fn, t, 3, RM, RN)                \
					TILE_CASES(fn, t, 4, RM, RN)                \
					}                                           \
				}                                                   \
			}                                                           \
		}                                                                   \
	}

DRIVER(mm_f32, tile_f, MU__WT_F32, 4, 3)
DRIVER(mm_f16, tile_f, MU__WT_F16, 4, 3)
DRIVER(mm_bf16, tile_f, MU__WT_BF16, 4, 3)

/* ---- x to Q8_0 activations, byte for byte as mu__q8_act_block ---- */

/* Q8_0 activations (MU__ACTFMT_Q8_0): cols quants, then cols/32 f32 scales. */
static void act_q8_0(const float *x, int64_t cols, void *out)
{
	const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	int8_t *q = out;
	float *d = (float *)(void *)((unsigned char *)out + cols);

	for (int64_t b = 0; b < cols / MU__QBLOCK; b++, x += MU__QBLOCK, q += MU__QBLOCK) {
		__m256 v[4], m, bad = _mm256_setzero_ps(), vid;
		__m128 m4;
		float amax, id;
		__m256i iv[4], p;

		for (int k = 0; k < 4; k++) {
			v[k] = _mm256_loadu_ps(x + 8 * k);
			bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_and_ps(v[k], absm),
			                                      _mm256_set1_ps(FLT_MAX), _CMP_NLE_UQ));
		}
		if (_mm256_movemask_ps(bad)) {
			uint16_t dh;

			mu__q8_act_block(x, q, &dh);
			d[b] = mu__h2f(dh);
			continue;
		}
		m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], absm), _mm256_and_ps(v[1], absm)),
		                  _mm256_max_ps(_mm256_and_ps(v[2], absm), _mm256_and_ps(v[3], absm)));
		m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
		m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
		amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
		id = amax != 0 ? 127.0f / amax : 0.0f;
		d[b] = mu__h2f(mu__f32_to_f16(amax / 127.0f));
		vid = _mm256_set1_ps(id);
		for (int k = 0; k < 4; k++) {
			__m256 t = _mm256_mul_ps(v[k], vid);

			t = _mm256_and_ps(t, _mm256_cmp_ps(t, t, _CMP_ORD_Q)); /* NaN -> 0 */
			t = _mm256_min_ps(_mm256_max_ps(t, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
			iv[k] = _mm256_cvtps_epi32(
			    _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
		}
		/* packs work within 128-bit halves: put the dwords back in order */
		p = _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
		p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
		_mm256_storeu_si256((__m256i *)q, p);
	}
}

/* Q8_1 activations: the Q8_0 row form, then the sums as mu__q8_1_sums. */
static void act_q8_1(const float *x, int64_t cols, void *out)
{
	act_q8_0(x, cols, out);
	mu__q8_1_sums(x, cols, out);
}

#if defined(MU_KERN_VNNI)
const mu__kern_isa_t mu__kern_vnni_table = {
	"avx2-vnni",
#else
const mu__kern_isa_t mu__kern_avx2_table = {
	"avx2",
#endif
	{
		[MU__WT_F32] = mm_f32,
		[MU__WT_F16] = mm_f16,
		[MU__WT_BF16] = mm_bf16,
		[MU__WT_Q8_0] = MU__K32_MM(q8_0),
		[MU__WT_Q4_0] = MU__K32_MM(q4_0),
		[MU__WT_Q4_1] = MU__K32_MM(q4_1),
		[MU__WT_Q5_0] = MU__K32_MM(q5_0),
		[MU__WT_Q5_1] = MU__K32_MM(q5_1),
		[MU__WT_IQ4_NL] = MU__K32_MM(iq4_nl),
		[MU__WT_Q2_K] = MU__KQ_MM(q2_k),
		[MU__WT_Q3_K] = MU__KQ_MM(q3_k),
		[MU__WT_Q4_K] = MU__KQ_MM(q4_k),
		[MU__WT_Q5_K] = MU__KQ_MM(q5_k),
		[MU__WT_Q6_K] = MU__KQ_MM(q6_k),
		[MU__WT_IQ4_XS] = MU__KQ_MM(iq4_xs),
	},
	{[MU__ACTFMT_Q8_0] = act_q8_0, [MU__ACTFMT_Q8_1] = act_q8_1, [MU__ACTFMT_Q8_K] = mu__act_q8_k},
};

#else
/* Not an x86 build: kern.c never asks for the table. */
typedef int mu__kern_avx2_unused_t;
#endif
