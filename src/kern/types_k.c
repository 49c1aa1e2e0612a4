/* SPDX-License-Identifier: MIT */
/*
 * The K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and IQ4_XS, ggml's types of
 * 256-element superblocks, as rows to f32, and the Q8_K activation format
 * their products take x in (MU__ACTFMT_Q8_K): its quantizer and its row
 * read back. The table entries are in kern/types.c; the products in
 * kern/portable_k.c and kern/avx2_k.c.
 *
 * Each to_f32 equals ggml's dequantize_row_<type> bit for bit, for every
 * input including NaN, infinite and subnormal scales: it performs the same
 * float operations in the same order (a sub-block scale d * sc rounded to
 * f32, then that times the quant, then minus the rounded min; never a
 * fused multiply-add, and this file is built with -ffp-contract=off).
 *
 * Byte layouts (ggml-common.h), offsets in a block:
 *   Q2_K  84 B: scales[16] (low nibble scale, high min) @0, qs[64] @16,
 *               f16 d @80, f16 dmin @82;
 *   Q3_K 110 B: hmask[32] @0, qs[64] @32, scales (12 B, 16 x 6 bits) @96,
 *               f16 d @108;
 *   Q4_K 144 B: f16 d @0, f16 dmin @2, scales (12 B, 8 scales and 8 mins
 *               of 6 bits) @4, qs[128] @16;
 *   Q5_K 176 B: as Q4_K, then qh[32] @16 and qs[128] @48;
 *   Q6_K 210 B: ql[128] @0, qh[64] @128, int8 scales[16] @192, f16 d @208;
 *   IQ4_XS 136 B: f16 d @0, u16 scales_h @2, scales_l[4] @4, qs[128] @8.
 */
#include <float.h>

#include "kern/isa_int.h"

/* ---- sub-block scales, as the products and to_f32 read them ---- */

/* Q4_K/Q5_K: scale and min j (0..7) of the 12 scale bytes. */
void mu__k4_scale_min(const unsigned char *s, int j, int *sc, int *mn)
{
	if (j < 4) {
		*sc = s[j] & 63;
		*mn = s[j + 4] & 63;
	} else {
		*sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
		*mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
	}
}

/* Q3_K: the 16 six-bit scales of the 12 scale bytes, minus 32. */
void mu__k3_scales(const unsigned char *s, int sc[16])
{
	for (int j = 0; j < 4; j++) {
		sc[j] = ((s[j] & 15) | ((s[8 + j] & 3) << 4)) - 32;
		sc[4 + j] = ((s[4 + j] & 15) | (((s[8 + j] >> 2) & 3) << 4)) - 32;
		sc[8 + j] = ((s[j] >> 4) | (((s[8 + j] >> 4) & 3) << 4)) - 32;
		sc[12 + j] = ((s[4 + j] >> 4) | (((s[8 + j] >> 6) & 3) << 4)) - 32;
	}
}

/* IQ4_XS: scale ib (0..7), ls - 32. */
int mu__iq4xs_scale(const unsigned char *b, int ib)
{
	int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((mu__ld16(b + 2) >> (2 * ib)) & 3) << 4);

	return ls - 32;
}

/* ---- rows to f32 ---- */

void mu__q2_k_to_f32(const void *row, int64_t cols, float *out)
{
	const unsigned char *b = row;

	for (int64_t k = 0; k < cols; k += 256, b += 84) {
		float d = mu__h2f(mu__ld16(b + 80)), dmin = mu__h2f(mu__ld16(b + 82));

		for (int e = 0; e < 256; e++) {
			int sc = b[e / 16], q = (b[16 + (e / 128) * 32 + e % 32] >> (2 * ((e / 32) % 4))) & 3;
			float dl = d * (float)(sc & 15), ml = dmin * (float)(sc >> 4);

			out[k + e] = dl * (float)q - ml;
		}
	}
}

void mu__q3_k_to_f32(const void *row, int64_t cols, float *out)
{
	const unsigned char *b = row;

	for (int64_t k = 0; k < cols; k += 256, b += 110) {
		float d = mu__h2f(mu__ld16(b + 108));
		int sc[16];

		mu__k3_scales(b + 96, sc);
		for (int e = 0; e < 256; e++) {
			int l = e % 32, sh = (e / 32) % 4, hb = (e / 128) * 4 + sh;
			int q = ((b[32 + (e / 128) * 32 + l] >> (2 * sh)) & 3) - ((b[l] >> hb) & 1 ? 0 : 4);
			float dl = d * (float)sc[e / 16];

			out[k + e] = dl * (float)q;
		}
	}
}

/* Q4_K and Q5_K (qh NULL for Q4_K): element 64j + l (l < 32) is the low
 * nibble of qs[32j + l], 64j + 32 + l its high nibble; sub-block e / 32. */
static void k45_to_f32(const unsigned char *b, int q5, float *out)
{
	float d = mu__h2f(mu__ld16(b)), dmin = mu__h2f(mu__ld16(b + 2));
	const unsigned char *qs = b + (q5 ? 48 : 16);

	for (int sb = 0; sb < 8; sb++) {
		int sc, mn;
		float d1, m1;

		mu__k4_scale_min(b + 4, sb, &sc, &mn);
		d1 = d * (float)sc;
		m1 = dmin * (float)mn;
		for (int l = 0; l < 32; l++) {
			int q = (qs[32 * (sb / 2) + l] >> (4 * (sb % 2))) & 15;

			if (q5)
				q += (b[16 + l] >> sb) & 1 ? 16 : 0;
			out[32 * sb + l] = d1 * (float)q - m1;
		}
	}
}

void mu__q4_k_to_f32(const void *row, int64_t cols, float *out)
{
	const unsigned char *b = row;

	for (int64_t k = 0; k < cols; k += 256, b += 144)
		k45_to_f32(b, 0, out + k);
}

void mu__q5_k_to_f32(const void *row, int64_t cols, float *out)
{
	const unsigned char *b = row;

	for (int64_t k = 0; k < cols; k += 256, b += 176)
		k45_to_f32(b, 1, out + k);
}

/* Q6_K's quant e (signed, -32..31): in each half of 128, element 32t + l
 * takes ql[l + 32 (t % 2)]'s nibble t / 2 and qh[l]'s bits 2t, 2t+1. */
int mu__q6_k_quant(const unsigned char *b, int e)
{
	int h = e / 128, t = (e % 128) / 32, l = e % 32;
	int lo = (b[64 * h + l + 32 * (t % 2)] >> (4 * (t / 2))) & 15;
	int hi = (b[128 + 32 * h + l] >> (2 * t)) & 3;

	return (lo | hi << 4) - 32;
}

void mu__q6_k_to_f32(const void *row, int64_t cols, float *out)
{
	const unsigned char *b = row;

	for (int64_t k = 0; k < cols; k += 256, b += 210) {
		float d = mu__h2f(mu__ld16(b + 208));

		for (int e = 0; e < 256; e++) /* (d * sc) * q, left to right */
			out[k + e] = d * (float)(int8_t)b[192 + e / 16] * (float)mu__q6_k_quant(b, e);
	}
}

void mu__iq4_xs_to_f32(const void *row, int64_t cols, float *out)
{
	const unsigned char *b = row;

	for (int64_t k = 0; k < cols; k += 256, b += 136) {
		float d = mu__h2f(mu__ld16(b));

		for (int ib = 0; ib < 8; ib++) {
			float dl = d * (float)mu__iq4xs_scale(b, ib);

			for (int j = 0; j < 16; j++) {
				out[k + 32 * ib + j] = dl * (float)mu__iq4nl_values[b[8 + 16 * ib + j] & 15];
				out[k + 32 * ib + 16 + j] = dl * (float)mu__iq4nl_values[b[8 + 16 * ib + j] >> 4];
			}
		}
	}
}

/* ---- Q8_K activations ---- */

/*
 * ggml's quantize_row_q8_K_ref on one block: max = the element of largest
 * magnitude (the first of them), iscale = -127 / max, q = iscale * x
 * rounded half to even, d = 1 / iscale (f32, not rounded to f16). Where
 * ggml is undefined we define, as mu__q8_block does: a NaN or an infinity
 * in the block makes d NaN and every q 0; a product iscale * x that is NaN
 * (0 * inf, when -127 / max overflows) is 0, and q is clamped to [-127,
 * 127] before rounding (only the overflowing case reaches the clamp).
 */
void mu__q8k_block(const float *x, unsigned char *blk)
{
	float amax = 0, max = 0, iscale, d;
	int8_t *q = (int8_t *)(blk + 4);
	int bad = 0;

	for (int j = 0; j < 256; j++) {
		float a = fabsf(x[j]);

		bad |= !(a <= FLT_MAX);
		if (a > amax) {
			amax = a;
			max = x[j];
		}
	}
	memset(blk, 0, MU__Q8K_BYTES);
	if (bad || amax == 0) {
		d = bad ? mu__bits_f32(0x7fc00000u) : 0.0f;
		memcpy(blk, &d, 4);
		return;
	}
	iscale = -127.0f / max;
	for (int j = 0; j < 256; j++) {
		float v = iscale * x[j];

		v = v != v ? 0.0f : v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
		/* round half to even: exact for |v| < 2^22, as ggml's nearest_int */
		q[j] = (int8_t)(int)((v + 12582912.0f) - 12582912.0f);
	}
	for (int g = 0; g < 16; g++) {
		int16_t s = 0;

		for (int m = 0; m < 16; m++)
			s = (int16_t)(s + q[16 * g + m]);
		memcpy(blk + 260 + 2 * g, &s, 2);
	}
	d = 1.0f / iscale;
	memcpy(blk, &d, 4);
}

/* x to Q8_K activations: each block of 256 as mu__q8k_block makes it. */
void mu__act_q8_k(const float *x, int64_t cols, void *out)
{
	unsigned char *o = out;

	for (int64_t b = 0; b < cols / 256; b++)
		mu__q8k_block(x + 256 * b, o + (size_t)b * MU__Q8K_BYTES);
}

/* The Q8_K row read back: d * q, as ggml's dequantize_row_q8_K. */
void mu__act_q8_k_to_f32(const void *row, int64_t cols, float *out)
{
	const unsigned char *b = row;

	for (int64_t k = 0; k < cols; k += 256, b += MU__Q8K_BYTES) {
		float d = mu__ldf(b);

		for (int j = 0; j < 256; j++)
			out[k + j] = d * (float)(int8_t)b[4 + j];
	}
}
