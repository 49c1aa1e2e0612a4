/* SPDX-License-Identifier: MIT */
/*
 * The reference quantizers of the types with blocks of 32 (Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0, IQ4_NL), the float types, the IQ4 scale search that
 * IQ4_XS shares, and the table keyed by ggml type id (kern/quant_int.h).
 * The K-quants are in kern/quant_k.c.
 *
 * Built with -ffp-contract=off: each expression is ggml's, evaluated in
 * its order, so the bytes are ggml_quantize_chunk's.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kern/quant_int.h"

/* IQ4's 16 levels (ggml-common.h's table, the format's definition). */
const int8_t mu__quant_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                         1,    13,   25,  38,  53,  69,  89,  113};

uint16_t mu__quant_h(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	/* ggml keeps no NaN payload: a NaN is 0x7e00 with its sign */
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u);
	return mu__f32_to_f16(f);
}

/*
 * Round to the nearest integer, ties to even, by adding 1.5 * 2^23 and
 * reading the mantissa (ggml's nearest_int, valid for |f| < 2^22, which
 * every caller's argument is).
 */
int mu__quant_nearest(float f)
{
	float v = f + 12582912.f;
	int32_t i;

	memcpy(&i, &v, 4);
	return (i & 0x007fffff) - 0x00400000;
}

/*
 * ggml converts floats to 8-bit quants with C casts, which x86 does as a
 * truncation to int32 (INT32_MIN for NaN and for what is out of range)
 * kept to its low byte. The same here, defined for every input: the bytes
 * of finite rows are ggml's, and a NaN or inf gives x86's.
 */
static int32_t trunc32(float v)
{
	return v > -2147483648.f && v < 2147483648.f ? (int32_t)v : INT32_MIN;
}

static int8_t to_i8(float v)
{
	return (int8_t)(uint8_t)((uint32_t)trunc32(v) & 0xffu);
}

static int min15(int v)
{
	return v < 15 ? v : 15;
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

void mu__quant_f32(const float *x, int64_t cols, void *row)
{
	memcpy(row, x, (size_t)cols * 4);
}

void mu__quant_f16(const float *x, int64_t cols, void *row)
{
	for (int64_t i = 0; i < cols; i++)
		put16((uint8_t *)row + 2 * i, mu__quant_h(x[i]));
}

void mu__quant_bf16(const float *x, int64_t cols, void *row)
{
	for (int64_t i = 0; i < cols; i++)
		put16((uint8_t *)row + 2 * i, mu__f32_to_bf16(x[i]));
}

/* The element of largest magnitude (the first of equals), with its sign. */
static float signed_max(const float *x, int n)
{
	float amax = 0, max = 0;

	for (int j = 0; j < n; j++)
		if (amax < fabsf(x[j])) {
			amax = fabsf(x[j]);
			max = x[j];
		}
	return max;
}

static void min_max(const float *x, int n, float *min, float *max)
{
	*min = FLT_MAX;
	*max = -FLT_MAX;
	for (int j = 0; j < n; j++) {
		if (x[j] < *min)
			*min = x[j];
		if (x[j] > *max)
			*max = x[j];
	}
}

/* Q4_0, 18 bytes: f16 d, 16 bytes of nibbles (element j low, j+16 high);
 * d = max / -8 so the largest magnitude is exactly -8. */
void mu__quant_q4_0(const float *x, int64_t cols, void *row)
{
	uint8_t *b = row;

	for (int64_t i = 0; i < cols / 32; i++, x += 32, b += 18) {
		float d = signed_max(x, 32) / -8, id = d != 0 ? 1.0f / d : 0.0f;

		put16(b, mu__quant_h(d));
		for (int j = 0; j < 16; j++) {
			uint8_t q0 = (uint8_t)min15(to_i8(x[j] * id + 8.5f));
			uint8_t q1 = (uint8_t)min15(to_i8(x[j + 16] * id + 8.5f));

			b[2 + j] = (uint8_t)(q0 | q1 << 4);
		}
	}
}

/* Q4_1, 20 bytes: f16 d, f16 m, 16 bytes of nibbles; x = d*q + m. */
void mu__quant_q4_1(const float *x, int64_t cols, void *row)
{
	uint8_t *b = row;

	for (int64_t i = 0; i < cols / 32; i++, x += 32, b += 20) {
		float min, max, d, id;

		min_max(x, 32, &min, &max);
		d = (max - min) / 15;
		id = d != 0 ? 1.0f / d : 0.0f;
		put16(b, mu__quant_h(d));
		put16(b + 2, mu__quant_h(min));
		for (int j = 0; j < 16; j++) {
			uint8_t q0 = (uint8_t)min15(to_i8((x[j] - min) * id + 0.5f));
			uint8_t q1 = (uint8_t)min15(to_i8((x[j + 16] - min) * id + 0.5f));

			b[4 + j] = (uint8_t)(q0 | q1 << 4);
		}
	}
}

/* The low nibbles and the fifth bits (qh bit j for element j) of a block
 * of 5-bit quants. */
static void pack5(const uint8_t *q, uint8_t *qh, uint8_t *qs)
{
	uint32_t h = 0;

	for (int j = 0; j < 16; j++) {
		qs[j] = (uint8_t)((q[j] & 0xf) | (q[j + 16] & 0xf) << 4);
		h |= (uint32_t)(q[j] >> 4 & 1) << j;
		h |= (uint32_t)(q[j + 16] >> 4 & 1) << (j + 16);
	}
	for (int k = 0; k < 4; k++)
		qh[k] = (uint8_t)(h >> 8 * k);
}

/* Q5_0, 22 bytes: f16 d, u32 qh, 16 bytes of nibbles; x = d*(q - 16). */
void mu__quant_q5_0(const float *x, int64_t cols, void *row)
{
	uint8_t *b = row, q[32];

	for (int64_t i = 0; i < cols / 32; i++, x += 32, b += 22) {
		float d = signed_max(x, 32) / -16, id = d != 0 ? 1.0f / d : 0.0f;

		put16(b, mu__quant_h(d));
		for (int j = 0; j < 32; j++) {
			int v = to_i8(x[j] * id + 16.5f);

			q[j] = (uint8_t)(v < 31 ? v : 31);
		}
		pack5(q, b + 2, b + 6);
	}
}

/* Q5_1, 24 bytes: f16 d, f16 m, u32 qh, 16 bytes of nibbles. */
void mu__quant_q5_1(const float *x, int64_t cols, void *row)
{
	uint8_t *b = row, q[32];

	for (int64_t i = 0; i < cols / 32; i++, x += 32, b += 24) {
		float min, max, d, id;

		min_max(x, 32, &min, &max);
		d = (max - min) / 31;
		id = d != 0 ? 1.0f / d : 0.0f;
		put16(b, mu__quant_h(d));
		put16(b + 2, mu__quant_h(min));
		for (int j = 0; j < 32; j++)
			q[j] = (uint8_t)to_i8((x[j] - min) * id + 0.5f);
		pack5(q, b + 4, b + 8);
	}
}

/* Q8_0, 34 bytes: f16 d = amax/127, 32 int8 rounded half away from 0. */
void mu__quant_q8_0(const float *x, int64_t cols, void *row)
{
	uint8_t *b = row;

	for (int64_t i = 0; i < cols / 32; i++, x += 32, b += 34) {
		float amax = 0, d, id;

		for (int j = 0; j < 32; j++)
			amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
		d = amax / 127;
		id = d != 0 ? 1.0f / d : 0.0f;
		put16(b, mu__quant_h(d));
		for (int j = 0; j < 32; j++)
			b[2 + j] = (uint8_t)to_i8(roundf(x[j] * id));
	}
}

int mu__quant_iq4_index(float x)
{
	const int8_t *v = mu__quant_iq4_values;
	int lo = 0, hi = 15;

	if (x <= v[0])
		return 0;
	if (x >= v[15])
		return 15;
	while (hi - lo > 1) {
		int mid = (lo + hi) / 2;

		if (x < v[mid])
			hi = mid;
		else
			lo = mid;
	}
	return x - v[hi - 1] < v[hi] - x ? hi - 1 : hi;
}

/*
 * The scale of one block of 32 for IQ4 (weights x^2): start from the
 * scale that maps the largest magnitude to -127, then try the 15 scales
 * that map it to -134 .. -120 and keep the one of least weighted error
 * (ggml's search with ntry 7). 0 for a block of zeros (below 1e-15).
 */
static float iq4_scale(const float *x)
{
	const int8_t *v = mu__quant_iq4_values;
	float amax = 0, max = 0, d, id, sumqx = 0, sumq2 = 0, best;

	for (int j = 0; j < 32; j++)
		if (fabsf(x[j]) > amax) {
			amax = fabsf(x[j]);
			max = x[j];
		}
	if (amax < 1e-15f)
		return 0;
	d = -max / v[0];
	id = 1 / d;
	for (int j = 0; j < 32; j++) {
		float q = v[mu__quant_iq4_index(id * x[j])], w = x[j] * x[j];

		sumqx += w * q * x[j];
		sumq2 += w * q * q;
	}
	d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
	best = d * sumqx;
	for (int t = -7; t <= 7; t++) {
		id = (t + v[0]) / max;
		sumqx = sumq2 = 0;
		for (int j = 0; j < 32; j++) {
			float q = v[mu__quant_iq4_index(id * x[j])], w = x[j] * x[j];

			sumqx += w * q * x[j];
			sumq2 += w * q * q;
		}
		if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
			d = sumqx / sumq2;
			best = d * sumqx;
		}
	}
	return d;
}

/*
 * sb 32: IQ4_NL's block, f16 d then 16 bytes of nibbles (element j low,
 * j+16 high). sb 256: IQ4_XS's, f16 d, u16 scales_h (2 high bits of each
 * sub-block's 6-bit scale), 4 bytes scales_l (the low nibbles), 128 bytes
 * of nibbles; the sub-block scales are d * (ls - 32) with d = -max/32.
 */
void mu__quant_iq4_block(const float *x, int sb, uint8_t *blk)
{
	float scales[8], max_scale = 0, amax_scale = 0;
	uint8_t L[256], *q = blk + (sb == 32 ? 2 : 8);
	int nb = sb / 32;

	for (int ib = 0; ib < nb; ib++) {
		scales[ib] = iq4_scale(x + 32 * ib);
		if (fabsf(scales[ib]) > amax_scale) {
			amax_scale = fabsf(scales[ib]);
			max_scale = scales[ib];
		}
	}
	if (nb == 1) {
		float id = scales[0] != 0 ? 1 / scales[0] : 0;

		put16(blk, mu__quant_h(scales[0]));
		for (int j = 0; j < 32; j++)
			L[j] = (uint8_t)mu__quant_iq4_index(id * x[j]);
	} else {
		float d = -max_scale / 32, id = d != 0 ? 1 / d : 0.f;
		uint16_t sh = 0;

		put16(blk, mu__quant_h(d));
		memset(blk + 4, 0, 4);
		for (int ib = 0; ib < nb; ib++) {
			int l = mu__quant_nearest(id * scales[ib]);
			float dl, idl;

			l = l < -32 ? -32 : l > 31 ? 31 : l;
			dl = d * l;
			idl = dl != 0 ? 1 / dl : 0.f;
			for (int j = 0; j < 32; j++)
				L[32 * ib + j] = (uint8_t)mu__quant_iq4_index(idl * x[32 * ib + j]);
			l += 32;
			blk[4 + ib / 2] |= (uint8_t)((l & 0xf) << 4 * (ib % 2));
			sh |= (uint16_t)((l >> 4) << 2 * ib);
		}
		put16(blk + 2, sh);
	}
	for (int i = 0; i < sb / 32; i++)
		for (int j = 0; j < 16; j++)
			q[16 * i + j] = (uint8_t)(L[32 * i + j] | L[32 * i + 16 + j] << 4);
}

void mu__quant_iq4_nl(const float *x, int64_t cols, void *row)
{
	for (int64_t i = 0; i < cols / 32; i++)
		mu__quant_iq4_block(x + 32 * i, 32, (uint8_t *)row + 18 * i);
}

void mu__quant_iq4_xs(const float *x, int64_t cols, void *row)
{
	for (int64_t i = 0; i < cols / 256; i++)
		mu__quant_iq4_block(x + 256 * i, 256, (uint8_t *)row + 136 * i);
}

static const mu__quant_t quants[] = {
	{MU__GGML_F32, "F32", 1, 4, mu__quant_f32},
	{MU__GGML_F16, "F16", 1, 2, mu__quant_f16},
	{MU__GGML_Q4_0, "Q4_0", 32, 18, mu__quant_q4_0},
	{MU__GGML_Q4_1, "Q4_1", 32, 20, mu__quant_q4_1},
	{MU__GGML_Q5_0, "Q5_0", 32, 22, mu__quant_q5_0},
	{MU__GGML_Q5_1, "Q5_1", 32, 24, mu__quant_q5_1},
	{MU__GGML_Q8_0, "Q8_0", 32, 34, mu__quant_q8_0},
	{MU__GGML_Q2_K, "Q2_K", 256, 84, mu__quant_q2_k},
	{MU__GGML_Q3_K, "Q3_K", 256, 110, mu__quant_q3_k},
	{MU__GGML_Q4_K, "Q4_K", 256, 144, mu__quant_q4_k},
	{MU__GGML_Q5_K, "Q5_K", 256, 176, mu__quant_q5_k},
	{MU__GGML_Q6_K, "Q6_K", 256, 210, mu__quant_q6_k},
	{MU__GGML_IQ4_NL, "IQ4_NL", 32, 18, mu__quant_iq4_nl},
	{MU__GGML_IQ4_XS, "IQ4_XS", 256, 136, mu__quant_iq4_xs},
	{MU__GGML_BF16, "BF16", 1, 2, mu__quant_bf16},
};

const mu__quant_t *mu__quant(uint32_t t)
{
	for (size_t i = 0; i < sizeof(quants) / sizeof(quants[0]); i++)
		if (quants[i].ggml == t)
			return &quants[i];
	return NULL;
}
