/* SPDX-License-Identifier: MIT */
/*
 * The AVX2 products of the types of 32-element blocks (Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1, IQ4_NL), built with kern/avx2.c's flags; kern/vnni_32.c
 * builds it again with MU_KERN_VNNI for the AVX512-VNNI table, where one
 * vpdpbusd (exact in int32, never the saturating vpdpbusds) takes the
 * place of maddubs + madd.
 *
 * kern/isa_int.h fixes one float chain per output element over the
 * blocks, acc = fma(dw * dx, (float)S, acc), S the block's exact integer
 * sum. So the eight lanes of a vector are eight rows of W (a DRIVER's
 * strided rows r + a * rs, see GROUPS): the integer work gives each lane its row's S,
 * and the cvt, the scale product and the fma are done once for eight
 * output elements.
 *
 * The weights enter the integer sums unsigned, as maddubs and vpdpbusd
 * take their first operand: Q4_0's nibble n is w + 8, Q5_0's q is w + 16,
 * and with VNNI Q8_0 and IQ4_NL add 128 (a flip of the sign bit); the sum
 * of the offset times x's quants comes back off as an exact integer. Plain
 * AVX2 keeps Q8_0 and IQ4_NL signed and multiplies |w| by x with w's sign
 * (255 * 127 twice would overflow maddubs' int16 pairs).
 *
 * A decode (tile_d, n <= 3) reads each block of eight rows (Q8_0: four,
 * see TR) as it goes, two rows a vector ([row a's elements 0..15 | row
 * b's 0..15] against x's first half in both halves, then the second
 * halves), so three horizontal adds give the eight rows' S. A prefill (tile_u) first unpacks the eight
 * rows once per panel of x into a scratch where one vector holds four
 * consecutive quants of each row (lane a = row a), so that a row of x
 * broadcasts its matching four bytes into one vpdpbusd per four quants of
 * the eight rows: no horizontal work at all.
 */
#include "kern/isa_int.h"

#if defined(MU_KERN_VNNI) && !(defined(__AVX512VNNI__) && defined(__AVX512VL__))
#define MU__KERN_SKIP 1
#endif

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && !defined(MU__KERN_SKIP)

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

/* Bytes of x in a panel, as kern/avx2.c's float kernels. */
#define PANEL_BYTES (768 << 10)

/* Whether type t has mins (x = d*q + m, Q8_1 activations, unsigned q). */
#define MINS(t) ((t) == MU__WT_Q4_1 || (t) == MU__WT_Q5_1)
/* log2 of the offset added to t's weights (0: none), and whether plain
 * AVX2 keeps them signed (the sign trick). */
#if defined(MU_KERN_VNNI)
#define SIGNED(t) 0
#define OFFSH(t)                                                                        \
	((t) == MU__WT_Q4_0 ? 3                                                         \
	 : (t) == MU__WT_Q5_0 ? 4                                                       \
	 : (t) == MU__WT_Q8_0 || (t) == MU__WT_IQ4_NL ? 7                              \
	                                               : 0)
#else
#define SIGNED(t) ((t) == MU__WT_Q8_0 || (t) == MU__WT_IQ4_NL)
#define OFFSH(t) ((t) == MU__WT_Q4_0 ? 3 : (t) == MU__WT_Q5_0 ? 4 : 0)
#endif
/* Groups of four quants whose maddubs int16 pairs may be added before one
 * madd (plain AVX2): 16 products of q <= 15 by |x| <= 127 stay under
 * 2^15, 8 of q <= 31; a signed pair alone may reach 2 * 128 * 127. */
#define GPM(t) (SIGNED(t) ? 1 : (t) == MU__WT_Q4_0 || (t) == MU__WT_Q4_1 ? 8 : 4)

/* 32 nibbles at qs, in element order: byte j's low one is element j, its
 * high one element j + 16. */
AI __m256i nib32(const unsigned char *qs)
{
	__m128i q = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(15);

	return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(q, m)),
	                               _mm_and_si128(_mm_srli_epi16(q, 4), m), 1);
}

/* The fifth bits at qh (bit j for element j) as bytes of 16 or 0. */
AI __m256i bits32(const unsigned char *qh)
{
	const __m256i bm = _mm256_set1_epi64x(0x8040201008040201ll);
	uint32_t h;
	__m256i v;

	memcpy(&h, qh, 4);
	/* byte j gets byte j / 8 of qh (each 128-bit half holds all four) */
	v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
	                        _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll,
	                                           0x0303030303030303ll));
	return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bm), bm), _mm256_set1_epi8(16));
}

/* The 32 quants of a weight block in element order, as the sums take
 * them: w + (1 << OFFSH(t)) unsigned, or w signed for SIGNED(t). */
AI __m256i ldq(mu__wtype_t t, const unsigned char *blk)
{
	const __m256i flip = _mm256_set1_epi8((char)(SIGNED(t) ? 0 : 0x80));

	if (t == MU__WT_Q8_0)
		return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 2)), flip);
	if (t == MU__WT_Q4_0 || t == MU__WT_Q4_1)
		return nib32(blk + 2 + 2 * MINS(t));
	if (t == MU__WT_Q5_0 || t == MU__WT_Q5_1)
		return _mm256_or_si256(nib32(blk + 6 + 2 * MINS(t)), bits32(blk + 2 + 2 * MINS(t)));
	/* IQ4_NL: each nibble looks its value up in the table */
	return _mm256_xor_si256(
	    _mm256_shuffle_epi8(
	        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)mu__iq4nl_values)),
	        nib32(blk + 2)),
	    flip);
}

/* acc + the products of w and x by fours (lane l: bytes 4l..4l+3). */
AI __m256i dot(mu__wtype_t t, __m256i acc, __m256i w, __m256i x)
{
#if defined(MU_KERN_VNNI)
	(void)t;
	return _mm256_dpbusd_epi32(acc, w, x);
#else
	__m256i p = SIGNED(t) ? _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
	                      : _mm256_maddubs_epi16(w, x);

	return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
#endif
}

/* Eight f16 at p[a] + off as f32, lane a. */
AI __m256 ld8h(const unsigned char *const p[8], size_t off)
{
	__m128i h = _mm_cvtsi32_si128(mu__ld16(p[0] + off));

	h = _mm_insert_epi16(h, mu__ld16(p[1] + off), 1);
	h = _mm_insert_epi16(h, mu__ld16(p[2] + off), 2);
	h = _mm_insert_epi16(h, mu__ld16(p[3] + off), 3);
	h = _mm_insert_epi16(h, mu__ld16(p[4] + off), 4);
	h = _mm_insert_epi16(h, mu__ld16(p[5] + off), 5);
	h = _mm_insert_epi16(h, mu__ld16(p[6] + off), 6);
	h = _mm_insert_epi16(h, mu__ld16(p[7] + off), 7);
	return _mm256_cvtph_ps(h);
}

/* The tile's eight rows of W: row a at r + a * rs for a < rm; the lanes
 * past rm repeat row r (computed, never stored). */
AI void rows8(const mu__mm_job_t *j, int64_t r, int64_t rs, int rm, const unsigned char *wr[8])
{
	size_t rb = mu__wtype_row_bytes(j->w->type, j->w->cols);

#pragma GCC unroll 8
	for (int a = 0; a < 8; a++)
		wr[a] = (const unsigned char *)j->w->data + (size_t)(r + (a < rm ? a : 0) * rs) * rb;
}

/* y of rows r + a * rs (a < rm) for x row i: acc (+ accm) (+ bias). */
AI void store8(const mu__mm_job_t *j, int64_t r, int64_t rs, int rm, int64_t i, __m256 acc, __m256 accm,
               int mins)
{
	float o[8], *y = j->y + i * j->w->rows + r;

	if (mins)
		acc = _mm256_add_ps(acc, accm);
	if (j->bias) {
		float b[8] = {0};

		for (int a = 0; a < rm; a++)
			b[a] = j->bias[r + a * rs];
		acc = _mm256_add_ps(acc, _mm256_loadu_ps(b));
	}
	_mm256_storeu_ps(o, acc);
	for (int a = 0; a < rm; a++)
		y[a * rs] = o[a];
}

/* ---- decode: two rows a vector, their lanes added into eight rows ---- */

/* Where a block's quants (nibbles) begin. */
#define QS(t) ((t) == MU__WT_Q4_1 ? 4 : (t) == MU__WT_Q5_0 ? 6 : (t) == MU__WT_Q5_1 ? 8 : 2)

/* 16 bytes at a then 16 at b. */
AI __m256i ld2(const unsigned char *a, const unsigned char *b)
{
	return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
	                               _mm_loadu_si128((const __m128i *)b), 1);
}

/* Bytes of 16 or 0: bit j of h's byte idx[j] (idx within each half). */
AI __m256i bits16(__m256i h, __m256i idx)
{
	const __m256i bm = _mm256_set1_epi64x(0x8040201008040201ll);

	return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(h, idx), bm), bm),
	                        _mm256_set1_epi8(16));
}

/* Rows a and b's quants as the sums take them (as ldq gives them), in two
 * vectors: lo = [a's elements 0..15 | b's 0..15], hi = [16..31 | 16..31]. */
AI void ldq2(mu__wtype_t t, const unsigned char *a, const unsigned char *b, __m256i *lo, __m256i *hi)
{
	const __m256i flip = _mm256_set1_epi8((char)(SIGNED(t) ? 0 : 0x80)), m = _mm256_set1_epi8(15);
	__m256i v;

	if (t == MU__WT_Q8_0) {
		*lo = _mm256_xor_si256(ld2(a + 2, b + 2), flip);
		*hi = _mm256_xor_si256(ld2(a + 18, b + 18), flip);
		return;
	}
	v = ld2(a + QS(t), b + QS(t));
	*lo = _mm256_and_si256(v, m);
	*hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
	if (t == MU__WT_IQ4_NL) {
		__m256i tbl = _mm256_broadcastsi128_si256(
		    _mm_loadu_si128((const __m128i *)(const void *)mu__iq4nl_values));

		*lo = _mm256_xor_si256(_mm256_shuffle_epi8(tbl, *lo), flip);
		*hi = _mm256_xor_si256(_mm256_shuffle_epi8(tbl, *hi), flip);
	} else if (t == MU__WT_Q5_0 || t == MU__WT_Q5_1) {
		uint32_t ha, hb;
		__m256i h;

		memcpy(&ha, a + QS(t) - 4, 4);
		memcpy(&hb, b + QS(t) - 4, 4);
		h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi32((int)ha)),
		                            _mm_set1_epi32((int)hb), 1);
		*lo = _mm256_or_si256(*lo, bits16(h, _mm256_setr_epi64x(0, 0x0101010101010101ll, 0,
		                                                        0x0101010101010101ll)));
		*hi = _mm256_or_si256(*hi, bits16(h, _mm256_setr_epi64x(0x0202020202020202ll,
		                                                        0x0303030303030303ll,
		                                                        0x0202020202020202ll,
		                                                        0x0303030303030303ll)));
	}
}

/* c + the products of a pair of rows (ldq2) and x's halves (each in both
 * halves of xl, xh), by fours: lanes 0..3 row a, 4..7 row b. */
AI __m256i dot2(mu__wtype_t t, __m256i c, __m256i lo, __m256i hi, __m256i xl, __m256i xh)
{
#if defined(MU_KERN_VNNI)
	(void)t;
	return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(c, lo, xl), hi, xh);
#else
	const __m256i one = _mm256_set1_epi16(1);

	if (SIGNED(t)) /* a pair may reach 2 * 128 * 127: no int16 sums */
		return _mm256_add_epi32(
		    _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(lo, lo),
		                                                               _mm256_sign_epi8(xl, lo)),
		                                          one)),
		    _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(hi, hi), _mm256_sign_epi8(xh, hi)), one));
	/* four products of q <= 31 by |x| <= 127 stay under 2^15 */
	return _mm256_add_epi32(
	    c, _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, xl), _mm256_maddubs_epi16(hi, xh)), one));
#endif
}

/* Minus the offset times x's quants, in lanes that add up to it in each
 * half, as dot2's c: the offset comes off every row's S. */
AI __m256i offset2(mu__wtype_t t, __m256i xl, __m256i xh)
{
	const __m256i off = _mm256_set1_epi8((char)(1 << OFFSH(t)));

	return _mm256_sub_epi32(_mm256_setzero_si256(), dot2(MU__WT_Q4_0, _mm256_setzero_si256(), off, off, xl, xh));
}

/* The largest number of rows of x a decode tile takes. */
#define DN 3
/* How far ahead a decode prefetches each row (eight streams of W: without
 * it the 4-bit types read 14-16 GB/s from memory, with it 21-25; Q8_0's
 * four streams measured 0.39 ms at 2048x5632 without, 0.42-0.44 with). */
#define PF 1024
/* Rows of W a decode tile takes: Q8_0, bound by memory alone, reads four
 * streams of W faster than eight (27 against 32 GB/s measured) and leaves
 * half the lanes of its float work idle; the others take eight. */
#define TR(t) ((t) == MU__WT_Q8_0 ? 4 : 8)

AI void tile_d(const mu__mm_job_t *j, mu__wtype_t t, int64_t r, int64_t rs, int64_t i0, int rm, int rn)
{
	int64_t nb = j->w->cols / MU__QBLOCK;
	size_t bb = mu__wtypes[t].block_bytes;
	const unsigned char *wr[8];
	const int8_t *xq[DN];
	const float *xd[DN], *xs[DN];
	__m256 acc[DN], accm[DN];

	rows8(j, r, rs, rm, wr);
#pragma GCC unroll 4
	for (int i = 0; i < rn; i++) {
		xq[i] = mu__xq(j, i0 + i);
		xd[i] = mu__xd(j, i0 + i);
		xs[i] = MINS(t) ? mu__xs(j, i0 + i) : NULL;
		acc[i] = accm[i] = _mm256_setzero_ps();
	}
	for (int64_t b = 0; b < nb; b++) {
		size_t o = (size_t)b * bb;
		__m256i xl[DN], xh[DN], c[DN], p[DN][4];
		__m256 dw = ld8h(wr, o), mw = MINS(t) ? ld8h(wr, o + 2) : dw;

#pragma GCC unroll 4
		for (int i = 0; i < rn; i++) {
			xl[i] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(xq[i] + b * MU__QBLOCK)));
			xh[i] = _mm256_broadcastsi128_si256(
			    _mm_loadu_si128((const __m128i *)(xq[i] + b * MU__QBLOCK + 16)));
			c[i] = OFFSH(t) ? offset2(t, xl[i], xh[i]) : _mm256_setzero_si256();
		}
		/* pair k: rows k and k + TR/2, so that the adds leave row a in
		 * lane a */
#pragma GCC unroll 4
		for (int k = 0; k < 4; k++) {
			const unsigned char *wa = wr[k] + o, *wb = wr[(k + TR(t) / 2) & 7] + o;
			__m256i lo, hi;

			if (k >= TR(t) / 2)
				break;

			if (t != MU__WT_Q8_0) { /* its four streams read faster without */
				_mm_prefetch((const char *)(wa + PF), _MM_HINT_T0);
				_mm_prefetch((const char *)(wb + PF), _MM_HINT_T0);
			}
			ldq2(t, wa, wb, &lo, &hi);
#pragma GCC unroll 4
			for (int i = 0; i < rn; i++)
				p[i][k] = dot2(t, c[i], lo, hi, xl[i], xh[i]);
		}
#pragma GCC unroll 4
		for (int i = 0; i < rn; i++) {
			__m256i s;

			if (TR(t) == 8) {
				s = _mm256_hadd_epi32(_mm256_hadd_epi32(p[i][0], p[i][1]),
				                      _mm256_hadd_epi32(p[i][2], p[i][3]));
			} else { /* [r0 r1 r0 r1 | r2 r3 r2 r3], then r0..r3 twice */
				s = _mm256_hadd_epi32(p[i][0], p[i][1]);
				s = _mm256_permute4x64_epi64(_mm256_hadd_epi32(s, s), 0x88);
			}

			acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(xd[i] + b)),
			                         _mm256_cvtepi32_ps(s), acc[i]);
			if (MINS(t))
				accm[i] = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(xs[i] + b), accm[i]);
		}
	}
#pragma GCC unroll 4
	for (int i = 0; i < rn; i++)
		store8(j, r, rs, rm, i0 + i, acc[i], accm[i], MINS(t));
}

/* ---- prefill: eight rows unpacked to fours of quants, lane a = row a ---- */

#define UNPACK_BLOCKS 512 /* cols up to 16384 */
/* The panel's sums of x's quants per block (int16: |sum| <= 32 * 127). */
#define XSUM_MAX 16384
typedef struct {
	/* q[b][g] lane a: quants 4g..4g+3 of row a's block b, as ldq gives */
	__m256i q[UNPACK_BLOCKS][8];
	__m256 d[UNPACK_BLOCKS], m[UNPACK_BLOCKS]; /* lane a: row a's d, m */
} unpacked_t;

AI void unpack8(const mu__mm_job_t *j, mu__wtype_t t, int64_t r, int64_t rs, int rm, unpacked_t *u)
{
	int64_t nb = j->w->cols / MU__QBLOCK;
	size_t bb = mu__wtypes[t].block_bytes;
	const unsigned char *wr[8];

	rows8(j, r, rs, rm, wr);
	for (int64_t b = 0; b < nb; b++) {
		size_t o = (size_t)b * bb;
		__m256i v[8], s[8];

#pragma GCC unroll 8
		for (int a = 0; a < 8; a++)
			v[a] = ldq(t, wr[a] + o);
		/* the 8x8 transpose of the rows' dwords */
#pragma GCC unroll 4
		for (int a = 0; a < 8; a += 4) {
			__m256i l0 = _mm256_unpacklo_epi32(v[a], v[a + 1]), h0 = _mm256_unpackhi_epi32(v[a], v[a + 1]);
			__m256i l1 = _mm256_unpacklo_epi32(v[a + 2], v[a + 3]);
			__m256i h1 = _mm256_unpackhi_epi32(v[a + 2], v[a + 3]);

			s[a] = _mm256_unpacklo_epi64(l0, l1);     /* dwords 0, 4 */
			s[a + 1] = _mm256_unpackhi_epi64(l0, l1); /* 1, 5 */
			s[a + 2] = _mm256_unpacklo_epi64(h0, h1); /* 2, 6 */
			s[a + 3] = _mm256_unpackhi_epi64(h0, h1); /* 3, 7 */
		}
#pragma GCC unroll 4
		for (int g = 0; g < 4; g++) {
			u->q[b][g] = _mm256_permute2x128_si256(s[g], s[g + 4], 0x20);
			u->q[b][g + 4] = _mm256_permute2x128_si256(s[g], s[g + 4], 0x31);
		}
		u->d[b] = ld8h(wr, o);
		if (MINS(t))
			u->m[b] = ld8h(wr, o + 2);
	}
}

/* The largest number of rows of x a prefill tile takes. */
#if defined(MU_KERN_VNNI)
#define UN 4
#else
#define UN 3
#endif

/* x's four quants 4g..4g+3 in every lane. */
AI __m256i x4(const int8_t *p)
{
	int v;

	memcpy(&v, p, 4);
	return _mm256_set1_epi32(v);
}

/* One block's S of the eight unpacked rows for rn rows of x, before the
 * offset: vpdpbusd, or maddubs pairs added GPM groups at a time. */
AI void sums_u(mu__wtype_t t, const __m256i *q, const int8_t *const xq[UN], int rn, __m256i s[UN])
{
#pragma GCC unroll 4
	for (int i = 0; i < rn; i++)
		s[i] = _mm256_setzero_si256();
#if defined(MU_KERN_VNNI)
#pragma GCC unroll 8
	for (int g = 0; g < 8; g++)
#pragma GCC unroll 4
		for (int i = 0; i < rn; i++)
			s[i] = _mm256_dpbusd_epi32(s[i], q[g], x4(xq[i] + 4 * g));
#else
#pragma GCC unroll 8
	for (int g0 = 0; g0 < 8; g0 += GPM(t)) {
		__m256i h[UN];

#pragma GCC unroll 4
		for (int i = 0; i < rn; i++)
			h[i] = _mm256_setzero_si256();
		for (int k = 0; k < GPM(t); k++) {
			int g = g0 + k;
			__m256i w = q[g], aw = SIGNED(t) ? _mm256_sign_epi8(w, w) : w;

#pragma GCC unroll 4
			for (int i = 0; i < rn; i++) {
				__m256i xb = x4(xq[i] + 4 * g);

				h[i] = _mm256_add_epi16(
				    h[i], _mm256_maddubs_epi16(aw, SIGNED(t) ? _mm256_sign_epi8(xb, w) : xb));
			}
		}
#pragma GCC unroll 4
		for (int i = 0; i < rn; i++)
			s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(h[i], _mm256_set1_epi16(1)));
	}
#endif
}

/* Rows of x i0..i0+rn-1 (their quant sums at xsum, nb a row) against the
 * unpacked rows. */
AI void tile_u(const mu__mm_job_t *j, mu__wtype_t t, const unpacked_t *u, const int16_t *xsum, int64_t r,
               int64_t rs, int64_t i0, int rm, int rn)
{
	int64_t nb = j->w->cols / MU__QBLOCK;
	const int8_t *xq[UN];
	const float *xd[UN], *xs[UN];
	__m256 acc[UN], accm[UN];

#pragma GCC unroll 4
	for (int i = 0; i < rn; i++) {
		xq[i] = mu__xq(j, i0 + i);
		xd[i] = mu__xd(j, i0 + i);
		xs[i] = MINS(t) ? mu__xs(j, i0 + i) : NULL;
		acc[i] = accm[i] = _mm256_setzero_ps();
	}
	for (int64_t b = 0; b < nb; b++) {
		__m256i s[UN];

		sums_u(t, u->q[b], xq, rn, s);
#pragma GCC unroll 4
		for (int i = 0; i < rn; i++) {
			xq[i] += MU__QBLOCK;
			if (OFFSH(t))
				s[i] = _mm256_sub_epi32(s[i], _mm256_set1_epi32(xsum[i * nb + b] * (1 << OFFSH(t))));
			acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(u->d[b], _mm256_broadcast_ss(xd[i] + b)),
			                         _mm256_cvtepi32_ps(s[i]), acc[i]);
			if (MINS(t))
				accm[i] = _mm256_fmadd_ps(u->m[b], _mm256_broadcast_ss(xs[i] + b), accm[i]);
		}
	}
#pragma GCC unroll 4
	for (int i = 0; i < rn; i++)
		store8(j, r, rs, rm, i0 + i, acc[i], accm[i], MINS(t));
}

/* ---- drivers ---- */

/*
 * Rows [r0, r1) of W in groups of R rows q = (r1 - r0) / R apart (far
 * apart rows stream from memory at full speed where neighbours did not,
 * see kern/avx2.c), the rows left over in one last group of neighbours.
 */
#define GROUPS(r0, r1, R, body)                                                  \
	do {                                                                     \
		int64_t q_ = ((r1) - (r0)) / (R);                                \
		for (int64_t g_ = 0; g_ <= q_; g_++) {                           \
			int64_t r = g_ < q_ ? (r0) + g_ : (r0) + (R)*q_;         \
			int64_t rs = g_ < q_ ? q_ : 1;                           \
			int rm = g_ < q_ ? (R) : (int)((r1) - (r0) - (R)*q_);    \
			if (rm > 0)                                              \
				body;                                            \
		}                                                                \
	} while (0)

AI void direct(const mu__mm_job_t *j, mu__wtype_t t, int64_t r0, int64_t r1)
{
	int64_t n = j->n;

	GROUPS(r0, r1, TR(t), {
		for (int64_t i = 0; i < n; i += DN) {
			if (n - i >= 3)
				tile_d(j, t, r, rs, i, rm, 3);
			else if (n - i == 2)
				tile_d(j, t, r, rs, i, rm, 2);
			else
				tile_d(j, t, r, rs, i, rm, 1);
		}
	});
}

/* The quant sums of x rows [p0, p1) per block, nb a row. */
static void xsums(const mu__mm_job_t *j, int64_t p0, int64_t p1, int16_t *xsum)
{
	int64_t nb = j->w->cols / MU__QBLOCK;

	for (int64_t i = p0; i < p1; i++) {
		const int8_t *xq = mu__xq(j, i);

		for (int64_t b = 0; b < nb; b++) {
			int s = 0;

			for (int k = 0; k < MU__QBLOCK; k++)
				s += xq[b * MU__QBLOCK + k];
			xsum[(i - p0) * nb + b] = (int16_t)s;
		}
	}
}

AI void unpacked(const mu__mm_job_t *j, mu__wtype_t t, int64_t r0, int64_t r1, unpacked_t *u,
                 int16_t *xsum)
{
	int64_t n = j->n, nb = j->w->cols / MU__QBLOCK, panel = PANEL_BYTES / (int64_t)j->xa_row, p1;

	if (panel > XSUM_MAX / nb)
		panel = XSUM_MAX / nb;
	panel = panel < UN ? UN : panel - panel % UN;
	for (int64_t p0 = 0; p0 < n; p0 = p1) {
		p1 = n - p0 < panel ? n : p0 + panel;
		if (OFFSH(t))
			xsums(j, p0, p1, xsum);
		GROUPS(r0, r1, 8, {
			unpack8(j, t, r, rs, rm, u);
			for (int64_t i = p0; i < p1; i += UN) {
				const int16_t *xs = xsum + (i - p0) * nb;

				if (p1 - i >= UN)
					tile_u(j, t, u, xs, r, rs, i, rm, UN);
				else if (p1 - i == 3)
					tile_u(j, t, u, xs, r, rs, i, rm, 3);
				else if (p1 - i == 2)
					tile_u(j, t, u, xs, r, rs, i, rm, 2);
				else
					tile_u(j, t, u, xs, r, rs, i, rm, 1);
			}
		});
	}
}

/* A decode (n <= DN, or rows too long for the scratch) reads W directly;
 * a prefill unpacks each group of eight rows once per panel of x. */
#define MM32(name, t)                                                            \
	void name(const mu__mm_job_t *j, int64_t r0, int64_t r1)                 \
	{                                                                        \
		unpacked_t u;                                                    \
		int16_t xsum[XSUM_MAX];                                          \
		if (j->n <= DN || j->w->cols > UNPACK_BLOCKS * MU__QBLOCK)       \
			direct(j, t, r0, r1);                                    \
		else                                                             \
			unpacked(j, t, r0, r1, &u, xsum);                        \
	}
MM32(MU__K32_MM(q8_0), MU__WT_Q8_0)
MM32(MU__K32_MM(q4_0), MU__WT_Q4_0)
MM32(MU__K32_MM(q4_1), MU__WT_Q4_1)
MM32(MU__K32_MM(q5_0), MU__WT_Q5_0)
MM32(MU__K32_MM(q5_1), MU__WT_Q5_1)
MM32(MU__K32_MM(iq4_nl), MU__WT_IQ4_NL)

#else
/* Not an x86 build: kern.c never asks for the table. */
typedef int mu__kern_avx2_32_unused_t;
#endif
