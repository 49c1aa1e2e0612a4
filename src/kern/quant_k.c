/* SPDX-License-Identifier: MIT */
/*
 * The reference quantizers of the K-quants (Q2_K .. Q6_K, superblocks of
 * 256 elements), as ggml quantizes them without an importance matrix:
 * per sub-block a search for the scale (and min) of least weighted error,
 * then the sub-block scales quantized against one f16 superblock scale,
 * then every element quantized again against the scale it will be read
 * with. The layouts are ggml-common.h's (docs/quantize.md lists them).
 *
 * Built with -ffp-contract=off: each expression is ggml's, evaluated in
 * its order, so the bytes are ggml_quantize_chunk's.
 */
#include <math.h>
#include <string.h>

#include "kern/quant_int.h"

#define QK 256
#define EPS 1e-15f /* a group below this magnitude is all zeros */

static int clampi(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static float get16(const uint8_t *p)
{
	return mu__f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* x^2-weighted fit of L (offset by nmax) for levels -nmax .. nmax-1: the
 * scale mapping the largest magnitude to -nmax, then 18 nearby ones. */
static float make_qx(int n, int nmax, const float *x, int8_t *L)
{
	float max = 0, amax = 0, iscale, sumlx = 0, suml2 = 0, scale, best;

	for (int i = 0; i < n; i++)
		if (fabsf(x[i]) > amax) {
			amax = fabsf(x[i]);
			max = x[i];
		}
	if (amax < EPS) {
		memset(L, 0, (size_t)n);
		return 0.f;
	}
	iscale = -nmax / max;
	for (int i = 0; i < n; i++) {
		int l = clampi(mu__quant_nearest(iscale * x[i]), -nmax, nmax - 1);
		float w = x[i] * x[i];

		L[i] = (int8_t)(l + nmax);
		sumlx += w * x[i] * l;
		suml2 += w * l * l;
	}
	scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
	best = scale * sumlx;
	for (int is = -9; is <= 9; is++) {
		if (is == 0)
			continue;
		iscale = -(nmax + 0.1f * is) / max;
		sumlx = suml2 = 0;
		for (int i = 0; i < n; i++) {
			int l = clampi(mu__quant_nearest(iscale * x[i]), -nmax, nmax - 1);
			float w = x[i] * x[i];

			sumlx += w * x[i] * l;
			suml2 += w * l * l;
		}
		if (suml2 > 0 && sumlx * sumlx > best * suml2) {
			for (int i = 0; i < n; i++)
				L[i] = (int8_t)(nmax + clampi(mu__quant_nearest(iscale * x[i]), -nmax, nmax - 1));
			scale = sumlx / suml2;
			best = scale * sumlx;
		}
	}
	return scale;
}

/* Q3_K's fit: levels -4 .. 3 from the largest magnitude, then up to five
 * passes moving one element at a time where that lowers the error. */
static float make_q3(const float *x, int8_t *L)
{
	const int n = 16, nmax = 4;
	float max = 0, amax = 0, iscale, sumlx = 0, suml2 = 0;

	for (int i = 0; i < n; i++)
		if (fabsf(x[i]) > amax) {
			amax = fabsf(x[i]);
			max = x[i];
		}
	if (amax < EPS) {
		memset(L, 0, (size_t)n);
		return 0.f;
	}
	iscale = -nmax / max;
	for (int i = 0; i < n; i++) {
		int l = clampi(mu__quant_nearest(iscale * x[i]), -nmax, nmax - 1);
		float w = x[i] * x[i];

		L[i] = (int8_t)l;
		sumlx += w * x[i] * l;
		suml2 += w * l * l;
	}
	for (int itry = 0; itry < 5; itry++) {
		int changed = 0;

		for (int i = 0; i < n; i++) {
			float w = x[i] * x[i], slx = sumlx - w * x[i] * L[i], sl2;
			int nl;

			if (!(slx > 0))
				continue;
			sl2 = suml2 - w * L[i] * L[i];
			nl = clampi(mu__quant_nearest(x[i] * sl2 / slx), -nmax, nmax - 1);
			if (nl == L[i])
				continue;
			slx += w * x[i] * nl;
			sl2 += w * nl * nl;
			if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
				L[i] = (int8_t)nl;
				sumlx = slx;
				suml2 = sl2;
				changed++;
			}
		}
		if (!changed)
			break;
	}
	for (int i = 0; i < n; i++)
		L[i] = (int8_t)(L[i] + nmax);
	return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* A search of the (scale, min) for levels 0 .. nmax: nstep + 1 trial
 * scales, each with the least-squares scale and min of its levels, the
 * one of least weighted error (absolute if mad, squared otherwise) kept.
 * Returns the scale; *the_min is the min negated (>= 0). */
typedef struct {
	float rmin, rdelta;
	int nstep, mad;
} qkx_t;

static float make_qkx(int n, int nmax, const float *x, const float *w, uint8_t *L,
                      float *the_min, const qkx_t *p)
{
	float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
	float iscale, scale, best = 0;
	uint8_t aux[32];

	for (int i = 1; i < n; i++) {
		if (x[i] < min)
			min = x[i];
		if (x[i] > max)
			max = x[i];
		sum_w += w[i];
		sum_x += w[i] * x[i];
	}
	if (min > 0)
		min = 0;
	if (max == min) {
		memset(L, 0, (size_t)n);
		*the_min = -min;
		return 0.f;
	}
	iscale = nmax / (max - min);
	scale = 1 / iscale;
	for (int i = 0; i < n; i++) {
		float diff;

		L[i] = (uint8_t)clampi(mu__quant_nearest(iscale * (x[i] - min)), 0, nmax);
		diff = scale * L[i] + min - x[i];
		diff = p->mad ? fabsf(diff) : diff * diff;
		best += w[i] * diff;
	}
	for (int is = 0; is <= p->nstep; is++) {
		float sum_l = 0, sum_l2 = 0, sum_xl = 0, D;

		iscale = (p->rmin + p->rdelta * is + nmax) / (max - min);
		for (int i = 0; i < n; i++) {
			int l = clampi(mu__quant_nearest(iscale * (x[i] - min)), 0, nmax);

			aux[i] = (uint8_t)l;
			sum_l += w[i] * l;
			sum_l2 += w[i] * l * l;
			sum_xl += w[i] * l * x[i];
		}
		D = sum_w * sum_l2 - sum_l * sum_l;
		if (D > 0) {
			float ts = (sum_w * sum_xl - sum_x * sum_l) / D;
			float tm = (sum_l2 * sum_x - sum_l * sum_xl) / D, err = 0;

			if (tm > 0) {
				tm = 0;
				ts = sum_xl / sum_l2;
			}
			for (int i = 0; i < n; i++) {
				float diff = ts * aux[i] + tm - x[i];

				diff = p->mad ? fabsf(diff) : diff * diff;
				err += w[i] * diff;
			}
			if (err < best) {
				memcpy(L, aux, (size_t)n);
				best = err;
				scale = ts;
				min = tm;
			}
		}
	}
	*the_min = -min;
	return scale;
}

/* Four 2-bit planes: byte l of each 32 holds elements l, l+32, l+64, l+96. */
static void pack2(const uint8_t *L, uint8_t *qs)
{
	for (int j = 0; j < QK; j += 128)
		for (int l = 0; l < 32; l++)
			qs[j / 4 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 |
			                          L[j + l + 96] << 6);
}

/* Q2_K, 84 bytes: 16 bytes of 4-bit scale | 4-bit min, 64 bytes of 2-bit
 * quants, f16 d, f16 dmin; x = d*sc*q - dmin*m per sub-block of 16. */
static void q2_block(const float *x, uint8_t *b)
{
	static const qkx_t p = {-0.5f, 0.1f, 15, 1};
	uint8_t L[QK];
	float w[16], mins[16], scales[16], max_scale = 0, max_min = 0, dd, dm;

	for (int j = 0; j < 16; j++) {
		for (int l = 0; l < 16; l++)
			w[l] = fabsf(x[16 * j + l]);
		scales[j] = make_qkx(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], &p);
		if (scales[j] > max_scale)
			max_scale = scales[j];
		if (mins[j] > max_min)
			max_min = mins[j];
	}
	memset(b, 0, 16);
	if (max_scale > 0) {
		float iscale = 15.f / max_scale;

		for (int j = 0; j < 16; j++)
			b[j] = (uint8_t)mu__quant_nearest(iscale * scales[j]);
	}
	put16(b + 80, mu__quant_h(max_scale > 0 ? max_scale / 15.f : 0.f));
	if (max_min > 0) {
		float iscale = 15.f / max_min;

		for (int j = 0; j < 16; j++)
			b[j] |= (uint8_t)((unsigned)mu__quant_nearest(iscale * mins[j]) << 4);
	}
	put16(b + 82, mu__quant_h(max_min > 0 ? max_min / 15.f : 0.f));
	dd = get16(b + 80);
	dm = get16(b + 82);
	for (int j = 0; j < 16; j++) {
		float d = dd * (b[j] & 0xf), m;

		if (d == 0)
			continue;
		m = dm * (b[j] >> 4);
		for (int i = 0; i < 16; i++)
			L[16 * j + i] = (uint8_t)clampi(mu__quant_nearest((x[16 * j + i] + m) / d), 0, 3);
	}
	pack2(L, b + 16);
}

void mu__quant_q2_k(const float *x, int64_t cols, void *row)
{
	for (int64_t i = 0; i < cols / QK; i++)
		q2_block(x + QK * i, (uint8_t *)row + 84 * i);
}

/* Sub-block j's 6-bit Q3_K scale from its 12 bytes (low nibbles in bytes
 * 0..7, high pairs in 8..11), minus 32. */
static int q3_scale(const uint8_t *s, int j)
{
	int lo = j < 8 ? s[j] & 0xf : s[j - 8] >> 4;

	return (int8_t)((lo | ((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32);
}

/* Q3_K, 110 bytes: hmask[32] (the third bit: bit k of byte m is element
 * 32k+m), 64 bytes of 2-bit quants, 12 bytes of 6-bit scales, f16 d;
 * x = d*(sc-32)*(q-4) per sub-block of 16. */
static void q3_block(const float *x, uint8_t *b)
{
	int8_t L[QK];
	float scales[16], max_scale = 0, amax = 0, dd;
	uint8_t *s = b + 96, U[QK];

	for (int j = 0; j < 16; j++) {
		scales[j] = make_q3(x + 16 * j, L + 16 * j);
		if (fabsf(scales[j]) > amax) {
			amax = fabsf(scales[j]);
			max_scale = scales[j];
		}
	}
	memset(s, 0, 12);
	if (max_scale != 0) {
		float iscale = -32.f / max_scale;

		for (int j = 0; j < 16; j++) {
			int8_t l = (int8_t)mu__quant_nearest(iscale * scales[j]);

			l = (int8_t)(clampi(l, -32, 31) + 32);
			if (j < 8)
				s[j] = (uint8_t)(l & 0xf);
			else
				s[j - 8] |= (uint8_t)((l & 0xf) << 4);
			s[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
		}
		put16(b + 108, mu__quant_h(1 / iscale));
	} else {
		put16(b + 108, mu__quant_h(0.f));
	}
	dd = get16(b + 108);
	for (int j = 0; j < 16; j++) {
		float d = dd * q3_scale(s, j);

		if (d == 0)
			continue;
		for (int i = 0; i < 16; i++)
			L[16 * j + i] = (int8_t)(clampi(mu__quant_nearest(x[16 * j + i] / d), -4, 3) + 4);
	}
	memset(b, 0, 32);
	for (int j = 0; j < QK; j++) {
		U[j] = (uint8_t)L[j];
		if (U[j] > 3) {
			b[j % 32] |= (uint8_t)(1u << (j / 32));
			U[j] = (uint8_t)(U[j] - 4);
		}
	}
	pack2(U, b + 32);
}

void mu__quant_q3_k(const float *x, int64_t cols, void *row)
{
	for (int64_t i = 0; i < cols / QK; i++)
		q3_block(x + QK * i, (uint8_t *)row + 110 * i);
}

/* Sub-block j's 6-bit scale and min from Q4_K/Q5_K's 12 bytes. */
static void scale_min(int j, const uint8_t *q, int *d, int *m)
{
	if (j < 4) {
		*d = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*d = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

/*
 * What Q4_K and Q5_K share: b starts f16 d, f16 dmin, 12 bytes of eight
 * 6-bit scales and mins; L gets the levels 0 .. nmax of the 256 elements
 * (x = d*sc*q - dmin*m per sub-block of 32).
 */
static void qk_scales(const float *x, int nmax, const qkx_t *p, uint8_t *b, uint8_t *L)
{
	float w[32], mins[8], scales[8], max_scale = 0, max_min = 0, isc, imn, dd, dm;
	uint8_t *s = b + 4;

	for (int j = 0; j < 8; j++) {
		float sum_x2 = 0, av;

		for (int l = 0; l < 32; l++)
			sum_x2 += x[32 * j + l] * x[32 * j + l];
		av = sqrtf(sum_x2 / 32);
		for (int l = 0; l < 32; l++)
			w[l] = av + fabsf(x[32 * j + l]);
		scales[j] = make_qkx(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], p);
		if (scales[j] > max_scale)
			max_scale = scales[j];
		if (mins[j] > max_min)
			max_min = mins[j];
	}
	isc = max_scale > 0 ? 63.f / max_scale : 0.f;
	imn = max_min > 0 ? 63.f / max_min : 0.f;
	for (int j = 0; j < 8; j++) {
		uint8_t ls = (uint8_t)mu__quant_nearest(isc * scales[j]);
		uint8_t lm = (uint8_t)mu__quant_nearest(imn * mins[j]);

		ls = ls < 63 ? ls : 63;
		lm = lm < 63 ? lm : 63;
		if (j < 4) {
			s[j] = ls;
			s[j + 4] = lm;
		} else {
			s[j + 4] = (uint8_t)((ls & 0xf) | (lm & 0xf) << 4);
			s[j - 4] |= (uint8_t)((ls >> 4) << 6);
			s[j] |= (uint8_t)((lm >> 4) << 6);
		}
	}
	put16(b, mu__quant_h(max_scale / 63.f));
	put16(b + 2, mu__quant_h(max_min / 63.f));
	dd = get16(b);
	dm = get16(b + 2);
	for (int j = 0; j < 8; j++) {
		int sc, m;
		float d, mm;

		scale_min(j, s, &sc, &m);
		d = dd * sc;
		if (d == 0)
			continue;
		mm = dm * m;
		for (int i = 0; i < 32; i++)
			L[32 * j + i] = (uint8_t)clampi(mu__quant_nearest((x[32 * j + i] + mm) / d), 0, nmax);
	}
}

/* Q4_K, 144 bytes: d, dmin, 12 bytes of scales, 128 bytes of nibbles
 * (per 64 elements: 32 bytes, elements l low and l+32 high). */
void mu__quant_q4_k(const float *x, int64_t cols, void *row)
{
	static const qkx_t p = {-1.f, 0.1f, 20, 0};
	uint8_t L[QK];

	for (int64_t i = 0; i < cols / QK; i++, x += QK) {
		uint8_t *b = (uint8_t *)row + 144 * i, *q = b + 16;

		qk_scales(x, 15, &p, b, L);
		for (int j = 0; j < QK; j += 64, q += 32)
			for (int l = 0; l < 32; l++)
				q[l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
	}
}

/* Q5_K, 176 bytes: d, dmin, 12 bytes of scales, qh[32] (the fifth bits:
 * bit 2k of byte l is element 64k+l, bit 2k+1 element 64k+32+l), then
 * Q4_K's 128 bytes of nibbles. */
void mu__quant_q5_k(const float *x, int64_t cols, void *row)
{
	static const qkx_t p = {-0.5f, 0.1f, 15, 0};
	uint8_t L[QK];

	for (int64_t i = 0; i < cols / QK; i++, x += QK) {
		uint8_t *b = (uint8_t *)row + 176 * i, *qh = b + 16, *ql = b + 48;
		uint8_t m1 = 1, m2 = 2;

		qk_scales(x, 31, &p, b, L);
		memset(qh, 0, 32);
		for (int n = 0; n < QK; n += 64, ql += 32) {
			for (int j = 0; j < 32; j++) {
				int l1 = L[n + j], l2 = L[n + j + 32];

				if (l1 > 15) {
					l1 -= 16;
					qh[j] |= m1;
				}
				if (l2 > 15) {
					l2 -= 16;
					qh[j] |= m2;
				}
				ql[j] = (uint8_t)(l1 | l2 << 4);
			}
			m1 = (uint8_t)(m1 << 2);
			m2 = (uint8_t)(m2 << 2);
		}
	}
}

/* Q6_K, 210 bytes: ql[128] (low nibbles), qh[64] (high pairs), 16 int8
 * scales, f16 d; x = d*sc*(q-32) per sub-block of 16. */
static void q6_block(const float *x, uint8_t *b)
{
	int8_t L[QK], *sc = (int8_t *)(b + 192);
	float scales[16], max_scale = 0, max_abs = 0, iscale, dd;
	uint8_t *ql = b, *qh = b + 128;

	for (int ib = 0; ib < 16; ib++) {
		scales[ib] = make_qx(16, 32, x + 16 * ib, L + 16 * ib);
		if (fabsf(scales[ib]) > max_abs) {
			max_abs = fabsf(scales[ib]);
			max_scale = scales[ib];
		}
	}
	if (max_abs < EPS) {
		memset(b, 0, 210);
		return;
	}
	iscale = -128.f / max_scale;
	put16(b + 208, mu__quant_h(1 / iscale));
	for (int ib = 0; ib < 16; ib++) {
		int v = mu__quant_nearest(iscale * scales[ib]);

		sc[ib] = (int8_t)(v < 127 ? v : 127);
	}
	dd = get16(b + 208);
	for (int j = 0; j < 16; j++) {
		float d = dd * sc[j];

		if (d == 0)
			continue;
		for (int i = 0; i < 16; i++)
			L[16 * j + i] = (int8_t)(clampi(mu__quant_nearest(x[16 * j + i] / d), -32, 31) + 32);
	}
	for (int j = 0; j < QK; j += 128, ql += 64, qh += 32)
		for (int l = 0; l < 32; l++) {
			uint8_t q1 = L[j + l] & 0xf, q2 = L[j + l + 32] & 0xf;
			uint8_t q3 = L[j + l + 64] & 0xf, q4 = L[j + l + 96] & 0xf;

			ql[l] = (uint8_t)(q1 | q3 << 4);
			ql[l + 32] = (uint8_t)(q2 | q4 << 4);
			qh[l] = (uint8_t)((L[j + l] >> 4) | (L[j + l + 32] >> 4) << 2 |
			                  (L[j + l + 64] >> 4) << 4 | (L[j + l + 96] >> 4) << 6);
		}
}

void mu__quant_q6_k(const float *x, int64_t cols, void *row)
{
	for (int64_t i = 0; i < cols / QK; i++)
		q6_block(x + QK * i, (uint8_t *)row + 210 * i);
}
