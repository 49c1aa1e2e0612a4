/* SPDX-License-Identifier: MIT */
/*
 * The weight-type traits table (mu__wtypes) and the activation formats
 * (mu__actfmts): for each type its name, GGUF id, block, bytes per block,
 * activation format and its row conversions to and from f32; and what
 * reads the table (row sizes, names, GGUF ids, the list of types for a
 * person). The f16/bf16 conversions and the quantizers, which the table
 * points to, are here too. The products are not: each instruction set's
 * table of kernels (kern/isa_int.h) has one per type, in kern/portable.c
 * and kern/avx2.c.
 *
 * Built with -ffp-contract=off like the kernels: the quantizers' roundings
 * are part of the format (the same bytes on every machine).
 */
#include <assert.h>
#include <float.h>
#include <stdio.h>
#include <string.h>

#include "muster/common.h"
#include "kern/isa_int.h"
#include "kern/quant_int.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the kernels read little-endian weights in place"
#endif

/* ---- f16 and bf16 ---- */

float mu__f16_to_f32(uint16_t h)
{
	return mu__h2f(h);
}

/* Round to nearest even; overflow to inf; a NaN stays a NaN, quiet, with
 * the top of its payload (what F16C's vcvtps2ph does). */
uint16_t mu__f32_to_f16(float f)
{
	uint32_t u = mu__f32_bits(f), a = u & 0x7fffffffu;
	uint16_t s = (uint16_t)((u >> 16) & 0x8000u);

	if (a > 0x7f800000u)
		return (uint16_t)(s | 0x7e00u | ((a >> 13) & 0x3ffu));
	if (a >= 0x477ff000u) /* 65520 and up: past half an ulp above 65504 */
		return (uint16_t)(s | 0x7c00u);
	if (a >= 0x38800000u) { /* 2^-14 and up: a normal f16 */
		uint32_t r = a - (112u << 23);

		return (uint16_t)(s | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
	}
	if (a < 0x33000000u) /* at most 2^-25, half the smallest subnormal */
		return s;
	{ /* a subnormal f16: round m * 2^(e-150) to a multiple of 2^-24 */
		uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, sh = 126 - e;
		uint32_t q = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);

		if (rem > half || (rem == half && (q & 1u)))
			q++;
		return (uint16_t)(s | q);
	}
}

float mu__bf16_to_f32(uint16_t h)
{
	return mu__bf2f(h);
}

/* Round to nearest even (subnormals kept); a NaN stays a quiet NaN. */
uint16_t mu__f32_to_bf16(float f)
{
	uint32_t u = mu__f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40u);
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* ---- quantizers ---- */

/* A block of 32 to Q8_0 (mu__q8_block and mu__q8_act_block): d =
 * max|x| / 127 as f16, q = x * id clamped to [-127, 127] and rounded by
 * round (roundf: halves away; nearbyintf in the default mode: halves to
 * even), id = 1 / d (act 0) or 127 / max|x| (act 1); a NaN or an
 * infinity gives d = NaN and q = 0. */
static void q8_block(const float *x, int8_t *q, uint16_t *dh, int act)
{
	float amax = 0, d, id;
	int bad = 0;

	for (int j = 0; j < MU__QBLOCK; j++) {
		float a = fabsf(x[j]);

		bad |= !(a <= FLT_MAX);
		amax = a > amax ? a : amax;
	}
	if (bad) {
		*dh = 0x7e00;
		memset(q, 0, MU__QBLOCK);
		return;
	}
	d = amax / 127.0f;
	id = act ? (amax != 0 ? 127.0f / amax : 0.0f) : d != 0 ? 1.0f / d : 0.0f;
	*dh = mu__f32_to_f16(d);
	for (int j = 0; j < MU__QBLOCK; j++) {
		float v = x[j] * id;

		v = v != v ? 0.0f : v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
		q[j] = (int8_t)(act ? nearbyintf(v) : roundf(v));
	}
}

void mu__q8_block(const float *x, int8_t *q, uint16_t *dh)
{
	q8_block(x, q, dh, 0);
}

void mu__q8_act_block(const float *x, int8_t *q, uint16_t *dh)
{
	q8_block(x, q, dh, 1);
}

/* Q8_0 rows: each block as mu__q8_block makes it, scale first. */
static void q8_0_from_f32(const float *x, int64_t n, void *out)
{
	unsigned char *o = out;

	assert(n % MU__QBLOCK == 0);
	for (int64_t b = 0; b < n / MU__QBLOCK; b++, o += 34) {
		uint16_t dh;

		mu__q8_block(x + b * MU__QBLOCK, (int8_t *)(o + 2), &dh);
		memcpy(o, &dh, 2);
	}
}

/*
 * llama.cpp's reference Q4_0: the element of largest magnitude, with its
 * sign, maps to -8; d = max / -8, q = min(15, trunc(x / d + 8.5)) computed
 * with x * (1/d). As in mu__q8_block, a block holding a NaN or an infinity
 * gets d = NaN and every q = 8 (zero), and q is clamped to [0, 15].
 */
static void q4_0_from_f32(const float *x, int64_t n, void *out)
{
	unsigned char *o = out;

	assert(n % MU__QBLOCK == 0);
	for (int64_t b = 0; b < n / MU__QBLOCK; b++, x += MU__QBLOCK, o += 18) {
		float amax = 0, max = 0, d, id;
		uint16_t dh;
		int bad = 0;

		for (int j = 0; j < MU__QBLOCK; j++) {
			bad |= !(fabsf(x[j]) <= FLT_MAX);
			if (amax < fabsf(x[j])) {
				amax = fabsf(x[j]);
				max = x[j];
			}
		}
		d = max / -8.0f;
		id = d != 0 ? 1.0f / d : 0.0f;
		dh = bad ? 0x7e00 : mu__f32_to_f16(d);
		memcpy(o, &dh, 2);
		for (int j = 0; j < MU__QBLOCK / 2; j++) {
			float v0 = x[j] * id + 8.5f, v1 = x[j + 16] * id + 8.5f;
			int q0, q1;

			/* !(v >= 0) also catches the NaN of 0 * inf */
			q0 = bad ? 8 : !(v0 >= 0.0f) ? 0 : v0 >= 15.0f ? 15 : (int)v0;
			q1 = bad ? 8 : !(v1 >= 0.0f) ? 0 : v1 >= 15.0f ? 15 : (int)v1;
			o[2 + j] = (unsigned char)(q0 | q1 << 4);
		}
	}
}

/*
 * Q8_1's sums (kern/isa_int.h): the quants are at out, the scales after
 * them; the sums go after the scales. amax is found as mu__q8_act_block
 * finds it, so d here is the one whose f16 rounding is the block's scale.
 */
void mu__q8_1_sums(const float *x, int64_t cols, void *out)
{
	const int8_t *q = out;
	unsigned char *s = (unsigned char *)out + cols + 4 * (cols / MU__QBLOCK);

	assert(cols % MU__QBLOCK == 0);
	for (int64_t b = 0; b < cols / MU__QBLOCK; b++, x += MU__QBLOCK, q += MU__QBLOCK) {
		float amax = 0, f;
		int32_t sum = 0;
		int bad = 0;

		for (int j = 0; j < MU__QBLOCK; j++) {
			float a = fabsf(x[j]);

			bad |= !(a <= FLT_MAX);
			amax = a > amax ? a : amax;
			sum += q[j];
		}
		f = mu__h2f(bad ? 0x7e00 : mu__f32_to_f16((float)sum * (amax / 127.0f)));
		memcpy(s + 4 * b, &f, 4);
	}
}

/* ---- rows to f32 (exact: what the products read) ---- */

static void f32_to_f32(const void *row, int64_t cols, float *out)
{
	memcpy(out, row, (size_t)cols * sizeof(float));
}

static void f16_to_f32(const void *row, int64_t cols, float *out)
{
	const unsigned char *p = row;

	for (int64_t k = 0; k < cols; k++)
		out[k] = mu__h2f(mu__ld16(p + 2 * k));
}

static void bf16_to_f32(const void *row, int64_t cols, float *out)
{
	const unsigned char *p = row;

	for (int64_t k = 0; k < cols; k++)
		out[k] = mu__bf2f(mu__ld16(p + 2 * k));
}

static void q8_0_to_f32(const void *row, int64_t cols, float *out)
{
	const unsigned char *p = row;

	for (int64_t k = 0; k < cols; k += MU__QBLOCK, p += 34) {
		float d = mu__h2f(mu__ld16(p));

		for (int j = 0; j < MU__QBLOCK; j++)
			out[k + j] = d * (float)(int8_t)p[2 + j];
	}
}

static void q4_0_to_f32(const void *row, int64_t cols, float *out)
{
	const unsigned char *p = row;

	for (int64_t k = 0; k < cols; k += MU__QBLOCK, p += 18) {
		float d = mu__h2f(mu__ld16(p));

		for (int j = 0; j < MU__QBLOCK / 2; j++) {
			out[k + j] = d * (float)((p[2 + j] & 15) - 8);
			out[k + j + 16] = d * (float)((p[2 + j] >> 4) - 8);
		}
	}
}

/*
 * The 32-element types after Q4_0, in llama.cpp's dequantize_row_*
 * order of operations (the interop tests compare bits): Q4_1 and Q5_1
 * (float)q * d + m, two roundings; Q5_0 (float)(q - 16) * d; IQ4_NL
 * d * (float)value. q5 is the fifth bit of element j from qh.
 */
const int8_t mu__iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

static int q5(const unsigned char *qs, uint32_t qh, int j)
{
	int nib = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;

	return nib | (int)(qh >> j & 1) << 4;
}

static void q4_1_to_f32(const void *row, int64_t cols, float *out)
{
	const unsigned char *p = row;

	for (int64_t k = 0; k < cols; k += MU__QBLOCK, p += 20) {
		float d = mu__h2f(mu__ld16(p)), m = mu__h2f(mu__ld16(p + 2));

		for (int j = 0; j < MU__QBLOCK / 2; j++) {
			out[k + j] = (float)(p[4 + j] & 15) * d + m;
			out[k + j + 16] = (float)(p[4 + j] >> 4) * d + m;
		}
	}
}

static void q5_0_to_f32(const void *row, int64_t cols, float *out)
{
	const unsigned char *p = row;

	for (int64_t k = 0; k < cols; k += MU__QBLOCK, p += 22) {
		float d = mu__h2f(mu__ld16(p));
		uint32_t qh;

		memcpy(&qh, p + 2, 4);
		for (int j = 0; j < MU__QBLOCK; j++)
			out[k + j] = (float)(q5(p + 6, qh, j) - 16) * d;
	}
}

static void q5_1_to_f32(const void *row, int64_t cols, float *out)
{
	const unsigned char *p = row;

	for (int64_t k = 0; k < cols; k += MU__QBLOCK, p += 24) {
		float d = mu__h2f(mu__ld16(p)), m = mu__h2f(mu__ld16(p + 2));
		uint32_t qh;

		memcpy(&qh, p + 4, 4);
		for (int j = 0; j < MU__QBLOCK; j++)
			out[k + j] = (float)q5(p + 8, qh, j) * d + m;
	}
}

static void iq4_nl_to_f32(const void *row, int64_t cols, float *out)
{
	const unsigned char *p = row;

	for (int64_t k = 0; k < cols; k += MU__QBLOCK, p += 18) {
		float d = mu__h2f(mu__ld16(p));

		for (int j = 0; j < MU__QBLOCK / 2; j++) {
			out[k + j] = d * (float)mu__iq4nl_values[p[2 + j] & 15];
			out[k + j + 16] = d * (float)mu__iq4nl_values[p[2 + j] >> 4];
		}
	}
}

/* The Q8_0 activation row form: cols quants, then cols/32 f32 scales. */
static void act_q8_0_to_f32(const void *row, int64_t cols, float *out)
{
	const int8_t *q = row;
	const unsigned char *d = (const unsigned char *)row + cols;

	for (int64_t k = 0; k < cols; k++)
		out[k] = mu__ldf(d + 4 * (k / MU__QBLOCK)) * (float)q[k];
}

/* ---- f32 to rows ---- */

static void f32_from_f32(const float *x, int64_t cols, void *row)
{
	memcpy(row, x, (size_t)cols * sizeof(float));
}

static void f16_from_f32(const float *x, int64_t cols, void *row)
{
	unsigned char *p = row;

	for (int64_t k = 0; k < cols; k++) {
		uint16_t h = mu__f32_to_f16(x[k]);

		memcpy(p + 2 * k, &h, 2);
	}
}

static void bf16_from_f32(const float *x, int64_t cols, void *row)
{
	unsigned char *p = row;

	for (int64_t k = 0; k < cols; k++) {
		uint16_t h = mu__f32_to_bf16(x[k]);

		memcpy(p + 2 * k, &h, 2);
	}
}

/* ---- the tables ---- */

/* The single source of what muster computes with. ggml's type numbers are
 * GGUF's tensor type ids (ggml.h's enum ggml_type). */
const mu__wtype_info_t mu__wtypes[MU__WT_COUNT] = {
	/* name, ggml id, block, bytes per block, activations, to f32, from f32 */
	[MU__WT_F32] = {"F32", 0, 1, 4, MU__ACTFMT_F32, f32_to_f32, f32_from_f32},
	[MU__WT_F16] = {"F16", 1, 1, 2, MU__ACTFMT_F32, f16_to_f32, f16_from_f32},
	[MU__WT_BF16] = {"BF16", 30, 1, 2, MU__ACTFMT_F32, bf16_to_f32, bf16_from_f32},
	[MU__WT_Q8_0] = {"Q8_0", 8, 32, 34, MU__ACTFMT_Q8_0, q8_0_to_f32, q8_0_from_f32},
	[MU__WT_Q4_0] = {"Q4_0", 2, 32, 18, MU__ACTFMT_Q8_0, q4_0_to_f32, q4_0_from_f32},
	[MU__WT_Q4_1] = {"Q4_1", 3, 32, 20, MU__ACTFMT_Q8_1, q4_1_to_f32, mu__quant_q4_1},
	[MU__WT_Q5_0] = {"Q5_0", 6, 32, 22, MU__ACTFMT_Q8_0, q5_0_to_f32, mu__quant_q5_0},
	[MU__WT_Q5_1] = {"Q5_1", 7, 32, 24, MU__ACTFMT_Q8_1, q5_1_to_f32, mu__quant_q5_1},
	[MU__WT_IQ4_NL] = {"IQ4_NL", 20, 32, 18, MU__ACTFMT_Q8_0, iq4_nl_to_f32, mu__quant_iq4_nl},
	[MU__WT_Q2_K] = {"Q2_K", 10, 256, 84, MU__ACTFMT_Q8_K, mu__q2_k_to_f32, mu__quant_q2_k},
	[MU__WT_Q3_K] = {"Q3_K", 11, 256, 110, MU__ACTFMT_Q8_K, mu__q3_k_to_f32, mu__quant_q3_k},
	[MU__WT_Q4_K] = {"Q4_K", 12, 256, 144, MU__ACTFMT_Q8_K, mu__q4_k_to_f32, mu__quant_q4_k},
	[MU__WT_Q5_K] = {"Q5_K", 13, 256, 176, MU__ACTFMT_Q8_K, mu__q5_k_to_f32, mu__quant_q5_k},
	[MU__WT_Q6_K] = {"Q6_K", 14, 256, 210, MU__ACTFMT_Q8_K, mu__q6_k_to_f32, mu__quant_q6_k},
	[MU__WT_IQ4_XS] = {"IQ4_XS", 23, 256, 136, MU__ACTFMT_Q8_K, mu__iq4_xs_to_f32, mu__quant_iq4_xs},
};

/* The activation formats: a Q8_0 block of x is 32 quants and an f32
 * scale (the kernels read the scale as f32, already rounded to f16); a
 * Q8_1 block has its sum s too. A Q8_1 row reads back as Q8_0's (d * q:
 * s is not a value of x). */
const mu__actfmt_info_t mu__actfmts[MU__ACTFMT_COUNT] = {
	[MU__ACTFMT_F32] = {"F32", 1, 4, f32_to_f32},
	[MU__ACTFMT_Q8_0] = {"Q8_0", MU__QBLOCK, MU__QBLOCK + 4, act_q8_0_to_f32},
	[MU__ACTFMT_Q8_1] = {"Q8_1", MU__QBLOCK, MU__QBLOCK + 8, act_q8_0_to_f32},
	[MU__ACTFMT_Q8_K] = {"Q8_K", 256, MU__Q8K_BYTES, mu__act_q8_k_to_f32},
};

/*
 * ggml's names of the types muster does NOT compute, by GGUF id: for
 * messages only ("has ggml type Q6_K"). Nothing computes from this list; a
 * type that gains an entry in mu__wtypes leaves it. Ids ggml retired
 * (4, 5, 31-33, 36-38) have no name.
 */
static const struct {
	uint32_t ggml;
	const char *name;
} ggml_other[] = {
	{9, "Q8_1"}, {15, "Q8_K"}, {16, "IQ2_XXS"}, {17, "IQ2_XS"}, {18, "IQ3_XXS"},
	{19, "IQ1_S"}, {21, "IQ3_S"}, {22, "IQ2_S"}, {24, "I8"}, {25, "I16"}, {26, "I32"},
	{27, "I64"},
	{28, "F64"}, {29, "IQ1_M"}, {34, "TQ1_0"}, {35, "TQ2_0"}, {39, "MXFP4"},
	{40, "NVFP4"},
};

/* ---- what reads the tables ---- */

/* cols / block * bytes, or 0 (the bound leaves callers room to multiply
 * by a row count without overflowing 64 bits for any real shape). */
static size_t row_bytes(int32_t block, uint32_t bytes, int64_t cols)
{
	if (cols <= 0 || cols > (int64_t)(SIZE_MAX / 8) || cols % block != 0)
		return 0;
	return (size_t)(cols / block) * bytes;
}

size_t mu__wtype_row_bytes(mu__wtype_t t, int64_t cols)
{
	const mu__wtype_info_t *ti = mu__wtype_info((int)t);

	return ti ? row_bytes(ti->block, ti->block_bytes, cols) : 0;
}

size_t mu__actfmt_row_bytes(mu__actfmt_t a, int64_t cols)
{
	if ((unsigned)a >= MU__ACTFMT_COUNT)
		return 0;
	return row_bytes(mu__actfmts[a].block, mu__actfmts[a].block_bytes, cols);
}

const char *mu__wtype_name(mu__wtype_t t)
{
	const mu__wtype_info_t *ti = mu__wtype_info((int)t);

	return ti ? ti->name : "?";
}

int mu__wtype_by_name(const char *name, mu__wtype_t *t)
{
	for (int i = 0; name != NULL && i < MU__WT_COUNT; i++)
		if (strcmp(mu__wtypes[i].name, name) == 0) {
			*t = (mu__wtype_t)i;
			return 0;
		}
	return MU_EARG;
}

int mu__wtype_by_ggml(uint32_t ggml, mu__wtype_t *t)
{
	for (int i = 0; i < MU__WT_COUNT; i++)
		if (mu__wtypes[i].ggml == ggml) {
			*t = (mu__wtype_t)i;
			return 0;
		}
	return MU_EARG;
}

const char *mu__ggml_type_name(uint32_t ggml)
{
	mu__wtype_t t;

	if (mu__wtype_by_ggml(ggml, &t) == 0)
		return mu__wtypes[t].name;
	for (size_t i = 0; i < sizeof(ggml_other) / sizeof(ggml_other[0]); i++)
		if (ggml_other[i].ggml == ggml)
			return ggml_other[i].name;
	return NULL;
}

const char *mu__wtype_list(int32_t block, char *buf, size_t len)
{
	size_t at = 0;
	int n = 0, seen = 0;

	assert(len > 0);
	buf[0] = '\0';
	for (int i = 0; i < MU__WT_COUNT; i++)
		n += block == 0 || mu__wtypes[i].block == block;
	for (int i = 0; i < MU__WT_COUNT && at < len; i++) {
		int w;

		if (block != 0 && mu__wtypes[i].block != block)
			continue;
		seen++;
		w = snprintf(buf + at, len - at, "%s%s", seen == 1 ? "" : seen == n ? " and " : ", ",
		             mu__wtypes[i].name);
		at = w < 0 ? len : at + (size_t)w;
	}
	return buf;
}
