/* SPDX-License-Identifier: MIT */
/*
 * The VNNI prefill of the K-quants and IQ4_XS, part of kern/avx2_k.c (it
 * includes this file in its VNNI build, kern/vnni_k.c; it is compiled
 * nowhere else). The lanes of a vector are eight rows of W: per panel of
 * x, a group of eight rows is unpacked to an interleaved scratch, one
 * vector holding four consecutive quants of each row (unsigned: the
 * signed types' q + o, o = 4, 32 or 128), and vpdpbusd adds each x row's
 * broadcast four quants times them, exact in int32 (wrapping adds give
 * the exact sum too, since the whole one fits); each sub-block's sum is
 * multiplied by the eight rows' scales (pmulld). The offsets and the mins
 * are one madd of x's bsums with pairs of o * scale (or min) per two
 * sub-blocks: S_b = the sum minus o times that, M = that. The float chain
 * is kern/avx2_k.c's, once per eight outputs. (Built on its own, as the
 * source glob does, it is empty.)
 */
#if defined(MU__KERN_K8_PART)
#define R8 8
#define RN8 6

/* Eight rows' superblock b: q[g] lane r = quants 4g..4g+3 of row r; sc[s]
 * lane r = row r's scale of elements 16s..16s+15 (int32); mp[h] lane r
 * = row r's (v(2h), v(2h + 1)) as int16, v the mins or o * the scales. */
typedef struct {
	__m256i q[64], sc[16], mp[8];
	__m256 d, dm;
} iblk_t;

AI int k8_off(int t)
{
	return t == K3 ? 4 : t == K6 ? 32 : t == KX ? 128 : 0;
}

/* The 8x8 int32 transpose: v[k] lane r becomes v[r] lane k. */
AI void tr8(__m256i v[8])
{
	__m256i t[8], u[8];

#pragma GCC unroll 8
	for (int h = 0; h < 2; h++) {
		t[4 * h] = _mm256_unpacklo_epi32(v[4 * h], v[4 * h + 1]);
		t[4 * h + 1] = _mm256_unpackhi_epi32(v[4 * h], v[4 * h + 1]);
		t[4 * h + 2] = _mm256_unpacklo_epi32(v[4 * h + 2], v[4 * h + 3]);
		t[4 * h + 3] = _mm256_unpackhi_epi32(v[4 * h + 2], v[4 * h + 3]);
		u[4 * h] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
		u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
		u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
		u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
	}
#pragma GCC unroll 8
	for (int k = 0; k < 4; k++) {
		v[k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x20);
		v[4 + k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x31);
	}
}

/* Superblock at w of eight rows rb bytes apart into ib. */
AI void unpack8(int t, const unsigned char *w, size_t rb, iblk_t *ib)
{
	const int mins = t == K2 || t == K4 || t == K5, o = k8_off(t);
	ublk_t u[R8];
	int8_t sc[R8][16];
	int16_t mn[R8][16];
	int32_t scl[16][R8];
	int16_t mpl[8][R8][2];
	float d[R8], dm[R8];

	for (int r = 0; r < R8; r++) {
		unpack(t, w + (size_t)r * rb, &u[r]);
		_mm_storeu_si128((__m128i *)(void *)sc[r], u[r].sc);
		if (mins)
			_mm256_storeu_si256((__m256i *)(void *)mn[r], u[r].mn);
		d[r] = u[r].d;
		dm[r] = mins ? u[r].dmin : 0.0f;
	}
	for (int c = 0; c < 8; c++) {
		__m256i v[8];

#pragma GCC unroll 8
		for (int r = 0; r < R8; r++)
			v[r] = _mm256_add_epi8(u[r].q[c], _mm256_set1_epi8((char)o));
		tr8(v);
#pragma GCC unroll 8
		for (int k = 0; k < 8; k++)
			ib->q[8 * c + k] = v[k];
	}
	for (int r = 0; r < R8; r++)
		for (int g = 0; g < 16; g++) {
			scl[g][r] = sc[r][g];
			mpl[g / 2][r][g % 2] = (int16_t)(mins ? mn[r][g] : o * sc[r][g]);
		}
	for (int g = 0; g < 16; g++)
		ib->sc[g] = _mm256_loadu_si256((const __m256i *)(const void *)scl[g]);
	for (int h = 0; h < 8; h++)
		ib->mp[h] = _mm256_loadu_si256((const __m256i *)(const void *)mpl[h]);
	ib->d = _mm256_loadu_ps(d);
	ib->dm = _mm256_loadu_ps(dm);
}

/* One superblock's integer sums of eight rows against rn rows of x (xb[i]
 * at the block): p[i] = S_b (the offsets taken off), m[i] = M. */
AI void sums8(int t, const iblk_t *ib, const unsigned char *const xb[RN8], int rn, __m256i p[RN8], __m256i m[RN8])
{
	const int mins = t == K2 || t == K4 || t == K5, o = k8_off(t);
	const int gs = t == K4 || t == K5 || t == KX ? 2 : 1; /* sub-blocks per scale */

#pragma GCC unroll 8
	for (int i = 0; i < RN8; i++)
		p[i] = m[i] = _mm256_setzero_si256();
#pragma GCC unroll 16
	for (int g = 0; g < 16; g += gs) {
		__m256i s[RN8];

#pragma GCC unroll 8
		for (int i = 0; i < RN8; i++)
			s[i] = _mm256_setzero_si256();
#pragma GCC unroll 8
		for (int e = 0; e < 4 * gs; e++) {
			__m256i q = ib->q[4 * g + e];

#pragma GCC unroll 8
			for (int i = 0; i < rn && i < RN8; i++)
				s[i] = _mm256_dpbusd_epi32(s[i], q, _mm256_set1_epi32((int)ld32(xb[i] + 4 + 16 * g + 4 * e)));
		}
#pragma GCC unroll 8
		for (int i = 0; i < rn && i < RN8; i++)
			p[i] = _mm256_add_epi32(p[i], _mm256_mullo_epi32(s[i], ib->sc[g]));
	}
#pragma GCC unroll 8
	for (int i = 0; i < rn && i < RN8; i++) {
		if (!mins && !o)
			break;
#pragma GCC unroll 8
		for (int h = 0; h < 8; h++)
			m[i] = _mm256_add_epi32(
			    m[i], _mm256_madd_epi16(ib->mp[h], _mm256_set1_epi32((int)ld32(xb[i] + 260 + 4 * h))));
		if (!mins)
			p[i] = _mm256_sub_epi32(p[i], m[i]);
	}
}

/* Rows r..r + 7 (ib, unpacked) by x rows i0..i0 + rn - 1: every
 * superblock, then y. */
AI void tile8(const mu__mm_job_t *j, int t, const iblk_t *ib, int64_t r, int64_t i0, int rn)
{
	const int mins = t == K2 || t == K4 || t == K5;
	int64_t nb = j->w->cols / 256;
	__m256 acc[RN8], accm[RN8];

#pragma GCC unroll 8
	for (int i = 0; i < RN8; i++)
		acc[i] = accm[i] = _mm256_setzero_ps();
	for (int64_t b = 0; b < nb; b++) {
		const unsigned char *xb[RN8] = {0};
		__m256i p[RN8], m[RN8];

#pragma GCC unroll 8
		for (int i = 0; i < rn && i < RN8; i++)
			xb[i] = j->xa + (size_t)(i0 + i) * j->xa_row + (size_t)b * MU__Q8K_BYTES;
		sums8(t, ib + b, xb, rn, p, m);
#pragma GCC unroll 8
		for (int i = 0; i < rn && i < RN8; i++) {
			__m256 dx = _mm256_set1_ps(mu__ldf(xb[i])), e;

			e = nan_first(_mm256_mul_ps(dx, ib[b].d), dx);
			acc[i] = nan_first(_mm256_fmadd_ps(e, _mm256_cvtepi32_ps(p[i]), acc[i]), e);
			if (!mins)
				continue;
			e = nan_first(_mm256_mul_ps(dx, ib[b].dm), dx);
			accm[i] = nan_first(
			    _mm256_fmadd_ps(e, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_setzero_si256(), m[i])), accm[i]),
			    e);
		}
	}
#pragma GCC unroll 8
	for (int i = 0; i < rn && i < RN8; i++) {
		float *y = j->y + (i0 + i) * j->w->rows + r;
		__m256 v = nan_first(_mm256_add_ps(acc[i], accm[i]), acc[i]);

		if (j->bias)
			v = nan_first(_mm256_add_ps(v, _mm256_loadu_ps(j->bias + r)), v);
		_mm256_storeu_ps(y, v);
	}
}

/* Rows [r0, r1) (a multiple of 8 of them) for every row of x, x in panels
 * that stay in L2, each group of eight rows unpacked once per panel; 0
 * when the scratch cannot be had (the caller then takes the 4-row path). */
static int drive8(const mu__mm_job_t *j, int t, int64_t r0, int64_t r1)
{
	int64_t n = j->n, nb = j->w->cols / 256, p1, panel = PANEL_BYTES / (int64_t)j->xa_row;
	size_t rb = mu__wtype_row_bytes(j->w->type, j->w->cols), bb = rb / (size_t)nb;
	unsigned char *mem = mu__malloc((size_t)nb * sizeof(iblk_t) + 32);
	iblk_t *ib = mem ? (iblk_t *)(void *)(mem + (32 - (uintptr_t)mem % 32) % 32) : NULL;

	if (!ib)
		return 0;
	panel = panel < RN8 ? RN8 : panel - panel % RN8;
	for (int64_t p0 = 0; p0 < n; p0 = p1) {
		p1 = n - p0 < panel ? n : p0 + panel;
		for (int64_t r = r0; r < r1; r += R8) {
			for (int64_t b = 0; b < nb; b++)
				unpack8(t, (const unsigned char *)j->w->data + (size_t)r * rb + (size_t)b * bb, rb, ib + b);
			for (int64_t i = p0; i < p1; i += RN8) {
				if (p1 - i >= RN8)
					tile8(j, t, ib, r, i, RN8);
				else
					tile8(j, t, ib, r, i, (int)(p1 - i));
			}
		}
	}
	mu__free(mem);
	return 1;
}

#else
typedef int mu__kern_avx2_k8_unused_t;
#endif
