/* SPDX-License-Identifier: MIT */
/*
 * The AVX2+FMA+F16C products of the K-quants and IQ4_XS against Q8_K
 * activations, bit for bit the arithmetic of kern/isa_int.h (the portable
 * definition is kern/portable_k.c). Built with -mavx2 -mfma -mf16c and
 * -ffp-contract=off; kern/vnni_k.c builds it again with MU_KERN_VNNI for
 * the AVX512-VNNI table (the same code plus kern/avx2_k8.c's prefill:
 * the integer sums are the same whichever instructions make them).
 *
 * Per superblock and row of W, the 256 quants are unpacked once to eight
 * vectors of 32 bytes (unsigned for the types with mins, signed for the
 * others) and the scales to one byte per 16 elements; then for each row of
 * x in the tile, chunk c of 32 elements gives maddubs's 16 exact pair sums
 * (|pair| <= 2 * 127 * 127 < 2^15), madd with [scale(32c) x8, scale(32c +
 * 16) x8] gives lane l = the four elements 32c + 4l..4l+3 times their
 * scale, and eight chunks added make eight partial sums of S_b. Signed
 * quants go through maddubs as |q| times x with q's sign; the mins' sum M
 * is a madd of x's bsums with the mins. The float part is done once per
 * eight outputs: the tile's (row, x row) vectors are summed across their
 * lanes by hadd into vectors whose lanes are the outputs (exact integers,
 * any order), then one cvt, one mul by d * dx and one fma each for S_b
 * and -M. Tiles of W rows far apart by panels of x, as kern/avx2.c's
 * DRIVER. The VNNI build's prefill takes rows of W by eights instead, one
 * row per lane (kern/avx2_k8.c, included below); the plain AVX2 build
 * keeps these tiles, whose maddubs pairs stay under 2^15 only with the
 * sign trick.
 */
#include "core/alloc_int.h"
#include "kern/isa_int.h"

#if defined(MU_KERN_VNNI) && !(defined(__AVX512VNNI__) && defined(__AVX512VL__))
#define MU__KERN_SKIP 1
#endif

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && !defined(MU__KERN_SKIP)

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))
#define TM 4
#define TN 3
#define PANEL_BYTES (768 << 10)

#if defined(MU_KERN_VNNI)
#define KQ_FN(t) mu__mm_##t##_vnni
#else
#define KQ_FN(t) mu__mm_##t##_avx2
#endif

enum { K2, K3, K4, K5, K6, KX };

/* A superblock of W unpacked: q[c] holds elements 32c..32c+31 (for the
 * signed types, qa = |q|); sc has a byte per 16 elements; mn an int16 per
 * 16 elements (types with mins). */
typedef struct {
	__m256i q[8], qa[8], s[8], mn;
	__m128i sc;
	float d, dmin;
} ublk_t;

AI __m256i ld256(const unsigned char *p)
{
	return _mm256_loadu_si256((const __m256i *)(const void *)p);
}

AI __m128i ld128(const unsigned char *p)
{
	return _mm_loadu_si128((const __m128i *)(const void *)p);
}

AI uint32_t ld32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

/* Q4_K/Q5_K's 8 scales (bytes 0..7) and 8 mins (8..15) of the 12 bytes. */
AI __m128i k4_scales(const unsigned char *s)
{
	uint32_t a = ld32(s), b = ld32(s + 4), c = ld32(s + 8);
	uint32_t sl = a & 0x3f3f3f3fu, sh = (c & 0x0f0f0f0fu) | (((a >> 6) & 0x03030303u) << 4);
	uint32_t ml = b & 0x3f3f3f3fu, mh = ((c >> 4) & 0x0f0f0f0fu) | (((b >> 6) & 0x03030303u) << 4);

	return _mm_setr_epi32((int)sl, (int)sh, (int)ml, (int)mh);
}

/* pshufb controls: chunk c's two scale bytes, 2c eight times, 2c + 1
 * eight times. */
static const unsigned char scale_ctl[8][16] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},
    {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13},
    {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

/* The int16 scale vectors of the eight chunks: [scale(32c) x8,
 * scale(32c + 16) x8] from sc's byte per 16 elements. */
AI void chunk_scales(__m128i sc, __m256i s[8])
{
#pragma GCC unroll 8
	for (int c = 0; c < 8; c++)
		s[c] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, ld128(scale_ctl[c])));
}

#define M3 _mm256_set1_epi8(3)
#define M15 _mm256_set1_epi8(15)

AI void up_q2_k(const unsigned char *b, ublk_t *u)
{
	__m128i s = ld128(b);

#pragma GCC unroll 2
	for (int h = 0; h < 2; h++) {
		__m256i v = ld256(b + 16 + 32 * h);

#pragma GCC unroll 4
		for (int j = 0; j < 4; j++)
			u->q[4 * h + j] = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), M3);
	}
	u->sc = _mm_and_si128(s, _mm_set1_epi8(15));
	u->mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(15)));
	u->d = _cvtsh_ss(mu__ld16(b + 80));
	u->dmin = _cvtsh_ss(mu__ld16(b + 82));
}

AI void up_q3_k(const unsigned char *b, ublk_t *u)
{
	__m256i hm = ld256(b);
	uint32_t a = ld32(b + 96), bb = ld32(b + 100), c = ld32(b + 104);

#pragma GCC unroll 2
	for (int h = 0; h < 2; h++) {
		__m256i v = ld256(b + 32 + 32 * h);

#pragma GCC unroll 4
		for (int j = 0; j < 4; j++) {
			__m256i lo = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), M3);
			__m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), _mm256_set1_epi8(1));

			/* low - 4 where the high bit is clear */
			u->q[4 * h + j] =
			    _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hb, 2)), _mm256_set1_epi8(4));
		}
	}
	u->sc = _mm_sub_epi8(
	    _mm_setr_epi32((int)((a & 0x0f0f0f0fu) | ((c & 0x03030303u) << 4)),
	                   (int)((bb & 0x0f0f0f0fu) | (((c >> 2) & 0x03030303u) << 4)),
	                   (int)(((a >> 4) & 0x0f0f0f0fu) | (((c >> 4) & 0x03030303u) << 4)),
	                   (int)(((bb >> 4) & 0x0f0f0f0fu) | (((c >> 6) & 0x03030303u) << 4))),
	    _mm_set1_epi8(32));
	u->d = _cvtsh_ss(mu__ld16(b + 108));
}

/* Q4_K, and Q5_K with q5: chunk 2j is qs[32j..]'s low nibbles, 2j + 1 the
 * high ones; Q5_K's bit c of qh[l] is 16 for element 32c + l. */
AI void up_k45(const unsigned char *b, ublk_t *u, int q5)
{
	__m128i sm = k4_scales(b + 4);
	const unsigned char *qs = b + (q5 ? 48 : 16);
	__m256i qh = q5 ? ld256(b + 16) : _mm256_setzero_si256();

#pragma GCC unroll 4
	for (int j = 0; j < 4; j++) {
		__m256i v = ld256(qs + 32 * j);

		u->q[2 * j] = _mm256_and_si256(v, M15);
		u->q[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), M15);
	}
#pragma GCC unroll 8
	for (int c = 0; q5 && c < 8; c++)
		u->q[c] = _mm256_or_si256(
		    u->q[c], _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, c), 4),
		                              _mm256_set1_epi8(16)));
	u->sc = _mm_unpacklo_epi8(sm, sm);
	u->mn = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));
	u->d = _cvtsh_ss(mu__ld16(b));
	u->dmin = _cvtsh_ss(mu__ld16(b + 2));
}

AI void up_q6_k(const unsigned char *b, ublk_t *u)
{
#pragma GCC unroll 2
	for (int h = 0; h < 2; h++) {
		__m256i l0 = ld256(b + 64 * h), l1 = ld256(b + 64 * h + 32), qh = ld256(b + 128 + 32 * h);

#pragma GCC unroll 4
		for (int t = 0; t < 4; t++) {
			__m256i lo = _mm256_and_si256(_mm256_srli_epi16(t % 2 ? l1 : l0, 4 * (t / 2)), M15);
			__m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * t), M3);

			u->q[4 * h + t] =
			    _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi8(32));
		}
	}
	u->sc = ld128(b + 192);
	u->d = _cvtsh_ss(mu__ld16(b + 208));
}

/* IQ4_XS: ls of block ib is nibble ib of scales_l (as one u32) and bits
 * 2ib, 2ib + 1 of scales_h; the quants are the code book's bytes. */
AI void up_iq4_xs(const unsigned char *b, ublk_t *u)
{
	const __m256i book = _mm256_broadcastsi128_si256(ld128((const unsigned char *)mu__iq4nl_values));
	__m128i lo = _mm_set1_epi32((int)ld32(b + 4)), hi = _mm_set1_epi32((int)mu__ld16(b + 2));
	__m128i m15 = _mm_set1_epi32(15), m3 = _mm_set1_epi32(3), l0, l1, h0, h1, s;

	l0 = _mm_and_si128(_mm_srlv_epi32(lo, _mm_setr_epi32(0, 4, 8, 12)), m15);
	l1 = _mm_and_si128(_mm_srlv_epi32(lo, _mm_setr_epi32(16, 20, 24, 28)), m15);
	h0 = _mm_and_si128(_mm_srlv_epi32(hi, _mm_setr_epi32(0, 2, 4, 6)), m3);
	h1 = _mm_and_si128(_mm_srlv_epi32(hi, _mm_setr_epi32(8, 10, 12, 14)), m3);
	s = _mm_packs_epi32(_mm_or_si128(l0, _mm_slli_epi32(h0, 4)), _mm_or_si128(l1, _mm_slli_epi32(h1, 4)));
	s = _mm_sub_epi16(s, _mm_set1_epi16(32));
	s = _mm_packs_epi16(s, s);
#pragma GCC unroll 8
	for (int ib = 0; ib < 8; ib++) {
		__m128i v = ld128(b + 8 + 16 * ib);
		__m256i n = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, _mm_set1_epi8(15))),
		                                    _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(15)), 1);

		u->q[ib] = _mm256_shuffle_epi8(book, n);
	}
	u->sc = _mm_unpacklo_epi8(s, s);
	u->d = _cvtsh_ss(mu__ld16(b));
}

/* Superblock b of type t into u; signed types also get |q|. */
AI void unpack(int t, const unsigned char *b, ublk_t *u)
{
	if (t == K2)
		up_q2_k(b, u);
	else if (t == K3)
		up_q3_k(b, u);
	else if (t == K4 || t == K5)
		up_k45(b, u, t == K5);
	else if (t == K6)
		up_q6_k(b, u);
	else
		up_iq4_xs(b, u);
	if (t == K3 || t == K6 || t == KX)
#pragma GCC unroll 8
		for (int c = 0; c < 8; c++)
			u->qa[c] = _mm256_sign_epi8(u->q[c], u->q[c]);
	chunk_scales(u->sc, u->s);
}

/* Four int32 vectors v[0..3] summed across their lanes, in halves: lane
 * a of the result holds v[a]'s low half's sum, lane 4 + a its high
 * half's (exact, in any order). */
AI __m256i red4(__m256i v0, __m256i v1, __m256i v2, __m256i v3)
{
	return _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
}

/* Two of red4's vectors to one: lane 4h + a the sum of v[h]'s lanes a and
 * 4 + a. */
AI __m256i red_pair(__m256i v0, __m256i v1)
{
	return _mm256_add_epi32(_mm256_permute2x128_si256(v0, v1, 0x20), _mm256_permute2x128_si256(v0, v1, 0x31));
}

/*
 * r, but a where a is a NaN: which of two NaNs an instruction returns
 * follows its operand order, which a compiler may swap (it takes mul, add
 * and fma's product as commutative); the portable chain returns dx's NaN
 * from d * dx, the product's from fma and acc's from acc + accm (all
 * NaNs here are quiet: the quantizer's and vcvtph2ps's).
 */
AI __m256 nan_first(__m256 r, __m256 a)
{
	return _mm256_blendv_ps(r, a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}

/*
 * A tile's float chains: output (row a, x row i) is lane i * TM + a of
 * acc[0..1] (and of accm), so that a superblock's S_b and M of all the
 * tile's outputs take one cvt, one mul and one fma per eight.
 */
typedef struct {
	__m256 acc[2], accm[2];
} kacc_t;

AI void kacc_zero(kacc_t *k)
{
	k->acc[0] = k->acc[1] = k->accm[0] = k->accm[1] = _mm256_setzero_ps();
}

/* One superblock of rm rows of W (u[a], or with wb, a decode's rn = 1,
 * wb[a] unpacked as it is used) against rn rows of x (xb[i], at the
 * block): the tile's S_b (and M) into k's chains. */
AI void sblk(int t, const ublk_t *const u[TM], const unsigned char *const *wb, const unsigned char *const xb[TN],
             int rm, int rn, kacc_t *k)
{
	const int mins = t == K2 || t == K4 || t == K5;
	__m256i sv[4], mv[4];
	float d[TM] = {0}, dm[TM] = {0}, dx[4] = {0};
	__m256 dv, dmv, dxv[2];

	sv[0] = sv[1] = sv[2] = sv[3] = mv[0] = mv[1] = mv[2] = mv[3] = _mm256_setzero_si256();
#pragma GCC unroll 8
	for (int i = 0; i < rn && i < TN; i++) {
		__m256i s[TM], m[TM];

#pragma GCC unroll 8
		for (int a = 0; a < TM; a++) {
			ublk_t uo;
			const ublk_t *ua = u[a];

			s[a] = m[a] = _mm256_setzero_si256();
			if (a >= rm)
				continue;
			if (wb) {
				unpack(t, wb[a], &uo);
				ua = &uo;
			}
			d[a] = ua->d;
			dm[a] = mins ? ua->dmin : 0.0f;
#pragma GCC unroll 8
			for (int c = 0; c < 8; c++) {
				__m256i xv = ld256(xb[i] + 4 + 32 * c), p;

				if (mins)
					p = _mm256_maddubs_epi16(ua->q[c], xv);
				else
					p = _mm256_maddubs_epi16(ua->qa[c], _mm256_sign_epi8(xv, ua->q[c]));
				s[a] = _mm256_add_epi32(s[a], _mm256_madd_epi16(p, ua->s[c]));
			}
			if (mins)
				m[a] = _mm256_madd_epi16(ld256(xb[i] + 260), ua->mn);
		}
		sv[i] = red4(s[0], s[1], s[2], s[3]);
		if (mins)
			mv[i] = red4(m[0], m[1], m[2], m[3]);
	}
	sv[0] = red_pair(sv[0], sv[1]);
	sv[1] = red_pair(sv[2], sv[3]);
	mv[0] = red_pair(mv[0], mv[1]);
	mv[1] = red_pair(mv[2], mv[3]);
#pragma GCC unroll 8
	for (int i = 0; i < rn && i < TN; i++)
		dx[i] = mu__ldf(xb[i]);
	dv = _mm256_broadcast_ps((const __m128 *)(const void *)d);
	dmv = _mm256_broadcast_ps((const __m128 *)(const void *)dm);
	dxv[0] = _mm256_setr_m128(_mm_set1_ps(dx[0]), _mm_set1_ps(dx[1]));
	dxv[1] = _mm256_setr_m128(_mm_set1_ps(dx[2]), _mm_set1_ps(dx[3]));
	for (int h = 0; h < 2; h++) {
		__m256 e;

		if (h && rn <= 2)
			break;
		e = nan_first(_mm256_mul_ps(dxv[h], dv), dxv[h]);
		k->acc[h] = nan_first(_mm256_fmadd_ps(e, _mm256_cvtepi32_ps(sv[h]), k->acc[h]), e);
		if (!mins)
			continue;
		e = nan_first(_mm256_mul_ps(dxv[h], dmv), dxv[h]);
		k->accm[h] = nan_first(
		    _mm256_fmadd_ps(e, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_setzero_si256(), mv[h])),
		                    k->accm[h]),
		    e);
	}
}

/* y = acc + accm (+ bias) of the tile's outputs: rows r + a * rs by x rows
 * i0 + i. */
AI void kacc_store(const mu__mm_job_t *j, const kacc_t *k, int64_t r, int64_t rs, int64_t i0, int rm, int rn)
{
	float y[16];

	_mm256_storeu_ps(y, nan_first(_mm256_add_ps(k->acc[0], k->accm[0]), k->acc[0]));
	_mm256_storeu_ps(y + 8, nan_first(_mm256_add_ps(k->acc[1], k->accm[1]), k->acc[1]));
#pragma GCC unroll 8
	for (int a = 0; a < rm; a++)
#pragma GCC unroll 8
		for (int i = 0; i < rn; i++) {
			float v = y[i * TM + a];

			j->y[(i0 + i) * j->w->rows + r + a * rs] = j->bias ? v + j->bias[r + a * rs] : v;
		}
}

/* A tile: W rows r + a * rs (a < rm) by x rows i0.. i0 + rn - 1, each
 * superblock unpacked as it comes (decode: every row is read once). */
AI void tile(const mu__mm_job_t *j, int t, int64_t r, int64_t rs, int64_t i0, int rm, int rn)
{
	int64_t nb = j->w->cols / 256;
	size_t rb = mu__wtype_row_bytes(j->w->type, j->w->cols), bb = rb / (size_t)nb;
	const unsigned char *w = (const unsigned char *)j->w->data + (size_t)r * rb;
	kacc_t k;

	kacc_zero(&k);
	for (int64_t b = 0; b < nb; b++) {
		const unsigned char *xb[TN] = {0}, *wb[TM] = {0};
		const ublk_t *u[TM] = {0};
		ublk_t uu[TM];

#pragma GCC unroll 8
		for (int i = 0; i < rn && i < TN; i++)
			xb[i] = j->xa + (size_t)(i0 + i) * j->xa_row + (size_t)b * MU__Q8K_BYTES;
#pragma GCC unroll 8
		for (int a = 0; a < rm; a++) {
			wb[a] = w + (size_t)a * (size_t)rs * rb + (size_t)b * bb;
			u[a] = &uu[a];
			if (rn > 1)
				unpack(t, wb[a], &uu[a]);
		}
		sblk(t, u, rn > 1 ? NULL : wb, xb, rm, rn, &k);
	}
	kacc_store(j, &k, r, rs, i0, rm, rn);
}

/*
 * A prefill unpacks a tile's rows of W once per panel of x, KB
 * superblocks at a time (a ublk_t is 832 bytes: runs of 4 stay in L1):
 * superblock b0 + b of row a is ub[a * KB + b]. A tile's chains wait in
 * st between the runs; the arithmetic is tile's, step for step.
 */
#define KB 4
typedef kacc_t kstate_t;

AI void tile_s(const mu__mm_job_t *j, int t, const ublk_t *ub, kstate_t *st, int64_t r, int64_t rs, int64_t i0,
               int rm, int rn, int64_t b0, int64_t b1)
{
	kacc_t k;

	if (b0)
		k = *st;
	else
		kacc_zero(&k);
	for (int64_t b = b0; b < b1; b++) {
		const unsigned char *xb[TN] = {0};
		const ublk_t *u[TM] = {0};

#pragma GCC unroll 8
		for (int i = 0; i < rn; i++)
			xb[i] = j->xa + (size_t)(i0 + i) * j->xa_row + (size_t)b * MU__Q8K_BYTES;
#pragma GCC unroll 8
		for (int a = 0; a < rm; a++)
			u[a] = ub + (size_t)(a * KB + (b - b0));
		sblk(t, u, NULL, xb, rm, rn, &k);
	}
	*st = k;
	if (b1 == j->w->cols / 256)
		kacc_store(j, &k, r, rs, i0, rm, rn);
}

/* Rows [r0, r1) of W (rm of them, rs apart from r) against x rows [p0, p1)
 * through the scratch ub and the states st. */
AI void panel_s(const mu__mm_job_t *j, int t, ublk_t *ub, kstate_t *st, int64_t r, int64_t rs, int rm,
                int64_t p0, int64_t p1)
{
	int64_t nb = j->w->cols / 256, b1;
	size_t rb = mu__wtype_row_bytes(j->w->type, j->w->cols), bb = rb / (size_t)nb;
	const unsigned char *w = (const unsigned char *)j->w->data;

	for (int64_t b0 = 0; b0 < nb; b0 = b1) {
		b1 = nb - b0 < KB ? nb : b0 + KB;
		for (int a = 0; a < rm; a++)
			for (int64_t b = b0; b < b1; b++)
				unpack(t, w + (size_t)(r + a * rs) * rb + (size_t)b * bb, ub + (size_t)(a * KB + (b - b0)));
		for (int64_t i = p0; i < p1; i += TN) {
			int rn = p1 - i < TN ? (int)(p1 - i) : TN;
			kstate_t *s = st + (i - p0) / TN;

			if (rm == TM && rn == TN)
				tile_s(j, t, ub, s, r, rs, i, TM, TN, b0, b1);
			else if (rm == TM)
				tile_s(j, t, ub, s, r, rs, i, TM, rn, b0, b1);
			else
				tile_s(j, t, ub, s, r, rs, i, rm, rn, b0, b1);
		}
	}
}

/* Rows [r0, r1) of W for every row of x: tiles of TM rows of W, q apart,
 * by TN rows of x; a prefill (n > TN) takes x in panels that stay in L2
 * (kern/avx2.c's DRIVER) and unpacks each tile's rows once per panel (the
 * bits are the same: tile_s does tile's arithmetic on the same vectors). */
AI void drive4(const mu__mm_job_t *j, int t, int64_t r0, int64_t r1)
{
	int64_t n = j->n, q = (r1 - r0) / TM, p1;
	int64_t panel = PANEL_BYTES / (int64_t)j->xa_row;
	size_t sub = (size_t)(TM * KB) * sizeof(ublk_t);
	size_t nst = (size_t)((n < panel ? n : panel) / TN + 2);
	unsigned char *mem = n > TN ? mu__malloc(sub + nst * sizeof(kstate_t) + 32) : NULL;
	ublk_t *ub = mem ? (ublk_t *)(void *)(mem + (32 - (uintptr_t)mem % 32) % 32) : NULL;

	panel = panel < TN ? TN : panel - panel % TN;
	for (int64_t p0 = 0; p0 < n; p0 = p1) {
		p1 = n - p0 < panel ? n : p0 + panel;
		for (int64_t g = 0; g <= q; g++) {
			int64_t r = g < q ? r0 + g : r0 + TM * q, rs = g < q ? q : 1;
			int rm = g < q ? TM : (int)(r1 - r0 - TM * q);

			if (rm > 0 && ub)
				panel_s(j, t, ub, (kstate_t *)(void *)((unsigned char *)ub + sub), r, rs, rm, p0, p1);
			else if (rm == TM && n == 1) /* decode */
				tile(j, t, r, rs, 0, TM, 1);
			else if (rm == TM)
				tile(j, t, r, rs, 0, TM, (int)n);
			else if (rm > 0)
				tile(j, t, r, rs, 0, rm, (int)n);
		}
	}
	mu__free(mem);
}

#if defined(MU_KERN_VNNI)
#define MU__KERN_K8_PART 1
#include "kern/avx2_k8.c"
#endif

/* Rows [r0, r1) of W for every row of x: a VNNI prefill takes them by
 * eights (kern/avx2_k8.c), the rest drive4's tiles. */
AI void drive(const mu__mm_job_t *j, int t, int64_t r0, int64_t r1)
{
#if defined(MU_KERN_VNNI)
	int64_t r8 = r0 + (r1 - r0) / R8 * R8;

	if (j->n > TN && r8 > r0 && drive8(j, t, r0, r8))
		r0 = r8;
#endif
	if (r0 < r1)
		drive4(j, t, r0, r1);
}

#define KQ_MM(name, t) \
	void KQ_FN(name)(const mu__mm_job_t *j, int64_t r0, int64_t r1) { drive(j, t, r0, r1); }
KQ_MM(q2_k, K2)
KQ_MM(q3_k, K3)
KQ_MM(q4_k, K4)
KQ_MM(q5_k, K5)
KQ_MM(q6_k, K6)
KQ_MM(iq4_xs, KX)

#else
typedef int mu__kern_avx2_k_unused_t;
#endif
