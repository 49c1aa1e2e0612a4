/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the decoder's kernels (src/kern/kern.c, kern/types.c,
 * kern/portable.c, kern/avx2.c):
 *   - the weight-type traits table: each entry coherent (block, bytes,
 *     activation format, conversions), names and GGUF ids unique and
 *     found again, every instruction set's table complete;
 *   - f16/bf16 conversions against definitions computed here in double,
 *     over every f16 and every rounding tie, and against F16C itself where
 *     the CPU has it;
 *   - Q8_0/Q4_0 quantizers against the format (llm-formats.md) and
 *     llama.cpp's reference rules, round trips included;
 *   - mu__matmul against a double-precision reference for every type of
 *     the table on odd shapes, n = 1..17, 1..4 threads (the types without
 *     a quantizer on random blocks, some with a NaN, inf or subnormal
 *     scale);
 *   - the determinism contract: bit-identical results across n, thread
 *     counts and instruction sets (portable against AVX2, and AVX2 with
 *     AVX512-VNNI, where the CPU has them; where it has none, portable
 *     against itself, and the test says so);
 * The pool has its own tests (test_pool.c); these use pools of 1..4 threads.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <unistd.h>

#include "mu_test.h"

#include "kern/isa_int.h"

/* ---- helpers ---- */

static uint64_t rng = 88172645463325252ull;

static uint32_t rnd32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

/* uniform in [-1, 1) */
static float rndf(void)
{
	return (float)((double)rnd32() / 2147483648.0 - 1.0);
}

static float bits_f(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static uint32_t f_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

/* A row of type t from f32, by the table's quantizer. */
static void to_type(mu__wtype_t t, const float *x, int64_t cols, void *out)
{
	assert_non_null(mu__wtypes[t].from_f32);
	mu__wtypes[t].from_f32(x, cols, out);
}

/* A block's f16 at byte off as f32. */
static float blk_f16(const unsigned char *blk, int off)
{
	uint16_t h;

	memcpy(&h, blk + off, 2);
	return mu__f16_to_f32(h);
}

/* The instruction sets this build and CPU run, portable first; their count. */
static const char *const all_isas[] = {"portable", "avx2", "avx2-vnni"};

static int isas_here(const char *out[3])
{
	int n = 0;

	for (int i = 0; i < 3; i++)
		if (mu__kern_isa_by_name(all_isas[i]) != NULL)
			out[n++] = all_isas[i];
	return n;
}

/* ---- f16 and bf16 ---- */

/* The f16 definition: (-1)^s * 2^(e-15) * 1.m, or 2^-14 * 0.m. */
static double f16_def(uint16_t h)
{
	int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
	double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);

	return s ? -v : v;
}

/* The f16 nearest to f, ties to the even one, by search over the values. */
static uint16_t f16_nearest(float f)
{
	double a = fabs((double)f);
	uint16_t s = f_bits(f) >> 31 ? 0x8000 : 0, lo = 0, hi = 0x7bff;

	if (a >= 65520.0)
		return s | 0x7c00;
	while (lo < hi) { /* largest h with f16_def(h) <= a */
		uint16_t mid = (uint16_t)((lo + hi + 1) / 2);

		if (f16_def(mid) <= a)
			lo = mid;
		else
			hi = (uint16_t)(mid - 1);
	}
	if (lo < 0x7bff) {
		double d0 = a - f16_def(lo), d1 = f16_def((uint16_t)(lo + 1)) - a;

		if (d1 < d0 || (d1 == d0 && (lo & 1)))
			lo++;
	} else if (a - 65504.0 >= 16.0) {
		return s | 0x7c00;
	}
	return s | lo;
}

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

static int has_f16c(void)
{
	unsigned a, b, c, d;

	return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f)
{
	return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h)
{
	return _cvtsh_ss(h);
}
#else
static int has_f16c(void)
{
	return 0;
}
#define hw_f32_to_f16 mu__f32_to_f16
#define hw_f16_to_f32 mu__f16_to_f32
#endif

static void test_f16(void **state)
{
	int hw = has_f16c();

	(void)state;
	for (uint32_t h = 0; h < 65536; h++) {
		float f = mu__f16_to_f32((uint16_t)h);
		double d = f16_def((uint16_t)h);

		if (isnan(d)) {
			assert_true(isnan(f));
			/* quiet, payload kept, as vcvtph2ps */
			assert_int_equal(f_bits(f), (h & 0x8000u) << 16 | 0x7fc00000u | (h & 0x3ffu) << 13);
		} else {
			if (!((double)f == d && !signbit(f) == !signbit(d)))
				fail_msg("f16 %04x: %.9g, want %.9g", h, f, d);
			assert_int_equal(mu__f32_to_f16(f), h); /* exact round trip */
		}
		if (hw)
			assert_int_equal(f_bits(hw_f16_to_f32((uint16_t)h)), f_bits(f));
		/* every tie between two neighbours, and one f32 ulp either side */
		if ((h & 0x7fff) < 0x7c00) {
			float next = mu__f16_to_f32((uint16_t)(h + 1)), mid;

			if ((h & 0x7fff) == 0x7bff)
				next = h & 0x8000 ? -65536.0f : 65536.0f;
			mid = (float)(((double)f + (double)next) / 2); /* exact in f32 */
			for (int dlt = -1; dlt <= 1; dlt++) {
				float v = bits_f(f_bits(mid) + (uint32_t)dlt);

				assert_int_equal(mu__f32_to_f16(v), f16_nearest(v));
				if (hw)
					assert_int_equal(mu__f32_to_f16(v), hw_f32_to_f16(v));
			}
		}
	}
	/* specials: overflow, f32 subnormals, NaNs keeping their payload's top */
	assert_int_equal(mu__f32_to_f16(65519.996f), 0x7bff);
	assert_int_equal(mu__f32_to_f16(65520.0f), 0x7c00);
	assert_int_equal(mu__f32_to_f16(-1e30f), 0xfc00);
	assert_int_equal(mu__f32_to_f16(INFINITY), 0x7c00);
	assert_int_equal(mu__f32_to_f16(bits_f(1)), 0x0000);
	assert_int_equal(mu__f32_to_f16(-0.0f), 0x8000);
	assert_int_equal(mu__f32_to_f16(0x1p-25f), 0x0000);              /* tie to 0 */
	assert_int_equal(mu__f32_to_f16(bits_f(0x33000001)), 0x0001);  /* just past */
	assert_int_equal(mu__f32_to_f16(0x1.8p-24f), 0x0002);          /* tie to even */
	assert_int_equal(mu__f32_to_f16(bits_f(0x7f800001)), 0x7e00);
	assert_int_equal(mu__f32_to_f16(bits_f(0xffa00000)), 0xff00);
	/* random f32 against the search and the hardware */
	for (int i = 0; i < 200000; i++) {
		float v = bits_f(rnd32() << 1 ^ rnd32());

		if (!isnan(v))
			assert_int_equal(mu__f32_to_f16(v), f16_nearest(v));
		if (hw)
			assert_int_equal(mu__f32_to_f16(v), hw_f32_to_f16(v));
	}
	print_message("f16 conversions %s\n", hw ? "also checked against F16C" : "(no F16C here)");
}

static void test_bf16(void **state)
{
	(void)state;
	for (uint32_t h = 0; h < 65536; h++) {
		float f = mu__bf16_to_f32((uint16_t)h);

		assert_int_equal(f_bits(f), h << 16);
		if (!isnan(f))
			assert_int_equal(mu__f32_to_bf16(f), h);
	}
	/* ties to even, at 1.0, in the subnormals and at the top */
	assert_int_equal(mu__f32_to_bf16(bits_f(0x3f808000)), 0x3f80);
	assert_int_equal(mu__f32_to_bf16(bits_f(0x3f818000)), 0x3f82);
	assert_int_equal(mu__f32_to_bf16(bits_f(0x3f808001)), 0x3f81);
	assert_int_equal(mu__f32_to_bf16(bits_f(0x00008000)), 0x0000);
	assert_int_equal(mu__f32_to_bf16(bits_f(0x00018000)), 0x0002);
	assert_int_equal(mu__f32_to_bf16(bits_f(0x807fffff)), 0x8080);
	assert_int_equal(mu__f32_to_bf16(bits_f(0x7f7fffff)), 0x7f80); /* to inf */
	assert_int_equal(mu__f32_to_bf16(bits_f(0x7f7f7fff)), 0x7f7f);
	assert_int_equal(mu__f32_to_bf16(-INFINITY), 0xff80);
	/* a NaN stays a NaN (even one whose payload is all below bit 16) */
	assert_int_equal(mu__f32_to_bf16(bits_f(0x7f800001)), 0x7fc0);
	assert_int_equal(mu__f32_to_bf16(bits_f(0xffc00000)), 0xffc0);
	/* random values against nearest-even computed in double */
	for (int i = 0; i < 200000; i++) {
		float v = bits_f(rnd32() << 1 ^ rnd32());
		uint16_t b = mu__f32_to_bf16(v);
		double lo, hi;

		if (isnan(v) || isinf(v))
			continue;
		lo = mu__bf16_to_f32((uint16_t)(f_bits(v) >> 16));
		hi = mu__bf16_to_f32((uint16_t)((f_bits(v) >> 16) + 1)); /* next away from 0 */
		if (((f_bits(v) >> 16) & 0x7fff) == 0x7f7f) /* past the top: 2^128 */
			hi = copysign(0x1p128, v);
		{
			double dl = fabs(v - lo), dh = fabs(hi - v);
			uint16_t want = (uint16_t)(f_bits(v) >> 16);

			if (dh < dl || (dh == dl && (want & 1)))
				want++;
			assert_int_equal(b, want);
		}
	}
}

/* ---- Q8_0 and Q4_0 against the format ---- */

static void test_q8_0(void **state)
{
	float x[4 * 32], back[4 * 32];
	unsigned char q[4 * 34];
	mu__wmat_t w = {MU__WT_Q8_0, q, 1, 4 * 32};

	(void)state;
	for (int it = 0; it < 2000; it++) {
		float scale = ldexpf(1.0f, (int)(rnd32() % 20) - 5); /* d normal in f16 */

		for (int k = 0; k < 128; k++)
			x[k] = rndf() * scale;
		if (it % 7 == 0)
			x[5] = 0; /* zeros inside a block */
		to_type(MU__WT_Q8_0, x, 128, q);
		mu__wmat_row(&w, 0, back);
		for (int b = 0; b < 4; b++) {
			float amax = 0, d, dd, id;
			uint16_t dh;

			for (int k = 0; k < 32; k++)
				amax = fmaxf(amax, fabsf(x[32 * b + k]));
			d = amax / 127;
			id = d ? 1 / d : 0;
			memcpy(&dh, q + 34 * b, 2);
			assert_int_equal(dh, mu__f32_to_f16(d));
			dd = mu__f16_to_f32(dh);
			for (int k = 0; k < 32; k++) {
				int8_t v = (int8_t)q[34 * b + 2 + k];

				assert_int_equal(v, (int)roundf(x[32 * b + k] * id));
				assert_true(v != -128);
				/* the format: x = d * q */
				assert_true(f_bits(back[32 * b + k]) == f_bits(dd * (float)v));
				assert_true(fabsf(back[32 * b + k] - x[32 * b + k]) <=
				            0.5f * d + amax * 1e-3f);
			}
		}
	}
	/* d = 1 exactly: ties round away from zero, as roundf */
	for (int k = 0; k < 32; k++)
		x[k] = k == 0 ? 127.0f : (float)(k % 5) - 2.5f;
	to_type(MU__WT_Q8_0, x, 32, q);
	assert_int_equal((int8_t)q[2], 127);
	assert_int_equal((int8_t)q[3], -2); /* -1.5 */
	assert_int_equal((int8_t)q[4], -1); /* -0.5 */
	assert_int_equal((int8_t)q[5], 1);  /* 0.5 */
	assert_int_equal((int8_t)q[6], 2);  /* 1.5 */
	assert_int_equal((int8_t)q[7], -3); /* -2.5 */
	/* all zero, and a block with a NaN or an infinity */
	memset(x, 0, sizeof(x));
	x[40] = NAN;
	x[100] = -INFINITY;
	to_type(MU__WT_Q8_0, x, 128, q);
	assert_int_equal(q[0] | q[1], 0);
	for (int b = 1; b < 4; b += 2) {
		uint16_t dh;

		memcpy(&dh, q + 34 * b, 2);
		assert_true(isnan(mu__f16_to_f32(dh)));
		for (int k = 0; k < 32; k++)
			assert_int_equal(q[34 * b + 2 + k], 0);
	}
}

static void test_q4_0(void **state)
{
	float x[64], back[64];
	unsigned char q[2 * 18];
	mu__wmat_t w = {MU__WT_Q4_0, q, 1, 64};

	(void)state;
	for (int it = 0; it < 2000; it++) {
		float scale = ldexpf(1.0f, (int)(rnd32() % 20) - 5); /* d normal in f16 */

		for (int k = 0; k < 64; k++)
			x[k] = rndf() * scale;
		to_type(MU__WT_Q4_0, x, 64, q);
		mu__wmat_row(&w, 0, back);
		for (int b = 0; b < 2; b++) {
			float amax = 0, max = 0, d, id, dd;
			uint16_t dh;

			for (int k = 0; k < 32; k++)
				if (fabsf(x[32 * b + k]) > amax) {
					amax = fabsf(x[32 * b + k]);
					max = x[32 * b + k];
				}
			d = max / -8;
			id = d ? 1 / d : 0;
			memcpy(&dh, q + 18 * b, 2);
			assert_int_equal(dh, mu__f32_to_f16(d));
			dd = mu__f16_to_f32(dh);
			for (int k = 0; k < 32; k++) {
				/* low nibbles are elements 0..15, high ones 16..31 */
				int nib = k < 16 ? q[18 * b + 2 + k] & 15 : q[18 * b + 2 + k - 16] >> 4;
				int want = (int)(x[32 * b + k] * id + 8.5f);
				float err = fabsf(back[32 * b + k] - x[32 * b + k]);

				assert_int_equal(nib, want > 15 ? 15 : want);
				assert_true(f_bits(back[32 * b + k]) == f_bits(dd * (float)(nib - 8)));
				/* the largest magnitude is -8 exactly; +8 clamps to 7 */
				if (x[32 * b + k] == max)
					assert_int_equal(nib, 0);
				assert_true(err <= (want > 15 ? 1.0f : 0.5f) * fabsf(d) + amax * 1e-3f);
			}
		}
	}
}

/* Every instruction set's Q8_0 activation quantizer gives the portable
 * one's bytes, edge cases too, and those are mu__q8_act_block's: ggml's
 * run-time rule on x86, q = x * (127 / max) with halves to even. */
static void test_act_q8_0_isas(void **state)
{
	const char *names[3];
	int nisa = isas_here(names);
	enum { C = 32 * 12 };
	float x[C], back[C];
	unsigned char rp[C + C / 8], ra[C + C / 8]; /* C quants, C/32 f32 scales */

	(void)state;
	assert_int_equal(mu__actfmt_row_bytes(MU__ACTFMT_Q8_0, C), sizeof(rp));
	if (nisa == 1)
		print_message("no AVX2 kernels here (CPU or build): the portable quantizer alone is checked\n");
	for (int it = 0; it < 3000; it++) {
		const mu__kern_isa_t *avx = mu__kern_isa_by_name(names[it % nisa]);

		float scale = ldexpf(1.0f, (int)(rnd32() % 250) - 125);

		for (int k = 0; k < C; k++)
			x[k] = rndf() * scale;
		/* block 1: exact halves with d = 1; block 2: one huge and zeros;
		 * block 3: only f32 subnormals (1/d overflows); 4: NaN; 5: inf;
		 * 6: so large that d overflows f16 */
		for (int k = 0; k < 32; k++) {
			x[32 + k] = k == 0 ? -127.0f : (float)((int)(rnd32() % 253) - 126) + 0.5f;
			x[64 + k] = k == 3 ? 1e30f : 0.0f;
			x[96 + k] = bits_f(rnd32() % 4) * (k & 1 ? -1.0f : 1.0f);
			x[192 + k] = 1e37f * rndf();
		}
		x[128 + it % 32] = NAN;
		x[160 + it % 32] = it & 1 ? INFINITY : -INFINITY;
		mu__kern_portable.act[MU__ACTFMT_Q8_0](x, C, rp);
		avx->act[MU__ACTFMT_Q8_0](x, C, ra);
		assert_memory_equal(rp, ra, sizeof(rp));
		for (int k = 1; k < 32; k++) { /* block 1: d = 1, so q = x rounded, halves to even */
			int below = (int)floorf(x[32 + k]); /* x = below + 1/2 */

			assert_int_equal((int8_t)rp[32 + k], below % 2 == 0 ? below : below + 1);
		}
		mu__actfmts[MU__ACTFMT_Q8_0].to_f32(rp, C, back);
		for (int b = 0; b < C / 32; b++) {
			uint16_t dh;
			int8_t q8[32];
			float d;

			mu__q8_act_block(x + 32 * b, q8, &dh);
			memcpy(&d, rp + C + 4 * b, 4);
			assert_memory_equal(q8, rp + 32 * b, 32);
			assert_true(f_bits(d) == f_bits(mu__f16_to_f32(dh)));
			for (int k = 0; k < 32; k++) /* what the products see: d * q */
				assert_true(f_bits(back[32 * b + k]) == f_bits(d * (float)q8[k]));
		}
	}
}

/* ---- the 32-element types after Q4_0 ---- */

/* A block of each, a few bytes worked out by hand (ggml-common.h's
 * layouts), read by the table's to_f32: known floats. */
static void test_block_values(void **state)
{
	/* d = 0.5 (0x3800), m = -2 (0xc000); byte 0 = 0x1f: element 0 is
	 * nibble 15, element 16 nibble 1; byte 15 = 0x80: element 15 is 0,
	 * element 31 is 8; the rest 0 */
	unsigned char q4_1[20] = {0x00, 0x38, 0x00, 0xc0, 0x1f, [19] = 0x80};
	/* d = 2 (0x4000); qh bits 0 and 31 set: element 0 = 16 | nibble 3 = 19
	 * -> 3 * 2, element 31 = 16 | nibble 0 -> 0, element 16 = nibble 0 ->
	 * -32, element 1 = nibble 0xf -> -2 */
	unsigned char q5_0[22] = {0x00, 0x40, 0x01, 0x00, 0x00, 0x80, 0x03, 0x0f};
	/* d = 0.25 (0x3400), m = 1 (0x3c00); qh bit 17: element 17 = 16 | 2;
	 * byte 1 = 0x2f: element 1 = 15 */
	unsigned char q5_1[24] = {0x00, 0x34, 0x00, 0x3c, 0x00, 0x00, 0x02, 0x00, 0x00, 0x2f};
	/* d = -1 (0xbc00); byte 0 = 0xf0: element 0 = T[0] = -127, element 16 =
	 * T[15] = 113; byte 1 = 0x78: element 1 = T[8] = 1, element 17 = T[7]
	 * = -10 */
	unsigned char iq4[18] = {0x00, 0xbc, 0xf0, 0x78};
	float o[32];

	(void)state;
	mu__wtypes[MU__WT_Q4_1].to_f32(q4_1, 32, o);
	assert_true(o[0] == 5.5f && o[16] == -1.5f && o[15] == -2.0f && o[31] == 2.0f && o[7] == -2.0f);
	mu__wtypes[MU__WT_Q5_0].to_f32(q5_0, 32, o);
	assert_true(o[0] == 6.0f && o[31] == 0.0f && o[16] == -32.0f && o[1] == -2.0f && o[2] == -32.0f);
	assert_true(o[17] == -32.0f);
	mu__wtypes[MU__WT_Q5_1].to_f32(q5_1, 32, o);
	assert_true(o[17] == 5.5f && o[1] == 4.75f && o[0] == 1.0f && o[31] == 1.0f);
	mu__wtypes[MU__WT_IQ4_NL].to_f32(iq4, 32, o);
	assert_true(o[0] == 127.0f && o[16] == -113.0f && o[1] == -1.0f && o[17] == 10.0f);
	assert_true(o[2] == 127.0f); /* nibble 0 */
	assert_int_equal(f_bits(o[2 + 16]), f_bits(127.0f));
}

/* Q4_1, Q5_0 and Q5_1's quantizers against llama.cpp's reference rules
 * (the interop test compares their bytes with ggml's own). */
static void test_quant_32(void **state)
{
	float x[64], back[64];
	unsigned char q[2 * 24];

	(void)state;
	for (int it = 0; it < 3000; it++) {
		mu__wtype_t t = it % 3 == 0 ? MU__WT_Q4_1 : it % 3 == 1 ? MU__WT_Q5_0 : MU__WT_Q5_1;
		int top = t == MU__WT_Q4_1 ? 15 : 31, bb = (int)mu__wtypes[t].block_bytes;
		float scale = ldexpf(1.0f, (int)(rnd32() % 20) - 8), off = it & 4 ? 2 * scale : 0;

		for (int k = 0; k < 64; k++)
			x[k] = rndf() * scale + off;
		to_type(t, x, 64, q);
		mu__wtypes[t].to_f32(q, 64, back);
		for (int b = 0; b < 2; b++) {
			const float *xb = x + 32 * b;
			float min = FLT_MAX, max = -FLT_MAX, amax = 0, smax = 0, d, id;

			for (int k = 0; k < 32; k++) {
				min = fminf(min, xb[k]);
				max = fmaxf(max, xb[k]);
				if (fabsf(xb[k]) > amax) {
					amax = fabsf(xb[k]);
					smax = xb[k];
				}
			}
			d = t == MU__WT_Q5_0 ? smax / -16.0f : (max - min) / (float)top;
			id = d != 0 ? 1 / d : 0;
			assert_true(blk_f16(q + bb * b, 0) == mu__f16_to_f32(mu__f32_to_f16(d)));
			if (t != MU__WT_Q5_0)
				assert_true(blk_f16(q + bb * b, 2) == mu__f16_to_f32(mu__f32_to_f16(min)));
			for (int k = 0; k < 32; k++) {
				float v = t == MU__WT_Q5_0 ? xb[k] * id + 16.5f : (xb[k] - min) * id + 0.5f;
				int want = (int)v > top ? top : (int)v;
				float dd = blk_f16(q + bb * b, 0), got;

				got = t == MU__WT_Q5_0 ? (float)(want - 16) * dd
				                       : (float)want * dd + blk_f16(q + bb * b, 2);
				assert_true(f_bits(back[32 * b + k]) == f_bits(got));
			}
		}
	}
	/* NaN and infinite inputs: the quantizers are kern/quant_32.c's, which
	 * give ggml's bytes for them too (tests/unit/kern/test_quant.c) */
}

/* Q8_1 activations: Q8_0's bytes, then s = f16(d * sum q) with d before
 * its rounding, the same from every instruction set. */
static void test_act_q8_1(void **state)
{
	const char *names[3];
	int nisa = isas_here(names);
	enum { C = 32 * 6 };
	unsigned char r1[C + C / 4], r8[C + C / 8], ra[C + C / 4];
	float x[C];

	(void)state;
	assert_int_equal(mu__actfmt_row_bytes(MU__ACTFMT_Q8_1, C), sizeof(r1));
	for (int it = 0; it < 2000; it++) {
		const mu__kern_isa_t *k = mu__kern_isa_by_name(names[it % nisa]);

		for (int i = 0; i < C; i++)
			x[i] = rndf() * ldexpf(1.0f, (int)(rnd32() % 40) - 20);
		x[32 + it % 32] = it & 1 ? NAN : -INFINITY; /* block 1 */
		mu__kern_portable.act[MU__ACTFMT_Q8_1](x, C, r1);
		mu__kern_portable.act[MU__ACTFMT_Q8_0](x, C, r8);
		k->act[MU__ACTFMT_Q8_1](x, C, ra);
		assert_memory_equal(r1, ra, sizeof(r1));
		assert_memory_equal(r1, r8, sizeof(r8));
		for (int b = 0; b < C / 32; b++) {
			float amax = 0, sx;
			int sum = 0;

			for (int i = 0; i < 32; i++) {
				amax = fmaxf(amax, fabsf(x[32 * b + i]));
				sum += (int8_t)r1[32 * b + i];
			}
			memcpy(&sx, r1 + C + 4 * (C / 32) + 4 * b, 4);
			if (b == 1)
				assert_true(isnan(sx));
			else
				assert_true(f_bits(sx) ==
				            f_bits(mu__f16_to_f32(mu__f32_to_f16((float)sum * (amax / 127.0f)))));
		}
	}
}

/* ---- mu__matmul ---- */

enum { NMAX = 17, TMAX = 4 };

typedef struct {
	mu__wmat_t w;
	unsigned char *buf; /* data is buf + 1: weights need no alignment */
	float *deq;         /* rows x cols, as the kernels read them */
} wm_t;

/* Where the f16 scales of a block lie for the types muster reads but
 * does not quantize (d, then dmin or -1); IQ4_NL's d is at 0 as the
 * 32-element types'. Any other bytes make a valid block. */
static const struct {
	mu__wtype_t t;
	int d, dmin;
} scale_at[] = {{MU__WT_IQ4_NL, 0, -1}, {MU__WT_Q2_K, 80, 82}, {MU__WT_Q3_K, 108, -1},
                {MU__WT_Q4_K, 0, 2},     {MU__WT_Q5_K, 0, 2},   {MU__WT_Q6_K, 208, -1},
                {MU__WT_IQ4_XS, 0, -1}};

/* Block b of a row of type t gets its scale s (0: d, 1: dmin) = h: false
 * when the type has no such scale. */
static int set_scale(mu__wtype_t t, unsigned char *row, int64_t b, int s, uint16_t h)
{
	for (size_t i = 0; i < sizeof(scale_at) / sizeof(scale_at[0]); i++) {
		int at = s ? scale_at[i].dmin : scale_at[i].d;

		if (scale_at[i].t == t && at >= 0) {
			memcpy(row + b * mu__wtypes[t].block_bytes + at, &h, 2);
			return 1;
		}
	}
	return 0;
}

/* A row of random blocks of a type without a quantizer, its f16 scales
 * in +-2^-4. */
static void rnd_row(mu__wtype_t t, int64_t cols, unsigned char *row)
{
	int found = 0;

	for (size_t b = 0; b < mu__wtype_row_bytes(t, cols); b++)
		row[b] = (unsigned char)rnd32();
	for (int64_t b = 0; b < cols / mu__wtypes[t].block; b++)
		for (int sc = 0; sc < 2; sc++)
			found |= set_scale(t, row, b, sc, mu__f32_to_f16(rndf() / 16));
	if (!found)
		fail_msg("%s has no quantizer and no scale offsets here", mu__wtypes[t].name);
}

/* Whether type t keeps a min m as f16 at byte 2 of its blocks (x = d*q +
 * m, Q8_1 activations): Q4_1 and Q5_1, as ggml lays them out. */
static int has_min(mu__wtype_t t)
{
	return mu__wtypes[t].act == MU__ACTFMT_Q8_1;
}

static void wm_make(wm_t *m, mu__wtype_t t, int64_t rows, int64_t cols)
{
	size_t rb = mu__wtype_row_bytes(t, cols);
	float *src = malloc(sizeof(float) * (size_t)cols);
	unsigned char *d;

	assert_true(rb > 0 && src != NULL);
	m->buf = malloc(rb * (size_t)rows + 1);
	m->deq = malloc(sizeof(float) * (size_t)(rows * cols));
	assert_non_null(m->buf);
	assert_non_null(m->deq);
	d = m->buf + 1;
	for (int64_t r = 0; r < rows; r++) {
		unsigned char *row = d + (size_t)r * rb;

		for (int64_t k = 0; k < cols; k++)
			src[k] = rndf();
		if (mu__wtypes[t].from_f32 != NULL)
			to_type(t, src, cols, row);
		else
			rnd_row(t, cols, row);
		if (t == MU__WT_Q8_0 && r % 3 == 0) /* a file may hold -128, which we never write */
			row[2 + (size_t)r % 32] = 0x80;
		if (mu__wtypes[t].block == 32 && r % 4 == 3) {
			/* a block whose scale (or min) is NaN, inf or -inf, as a
			 * file may hold: its products are not finite */
			static const uint16_t bad[3] = {0x7e00, 0x7c00, 0xfc00};
			int off = has_min(t) && r % 8 == 7 ? 2 : 0;

			memcpy(row + (size_t)(r / 4 % (cols / 32)) * mu__wtypes[t].block_bytes + off,
			       &bad[r / 4 % 3], 2);
		}
		/* the superblock types: a scale (or min) NaN, inf or subnormal */
		if (mu__wtypes[t].block == 256 && r % 7 == 3)
			set_scale(t, row, r % (cols / 256), (int)(r / 7) % 2,
			          (uint16_t[]){0x7c00, 0xfe01, 0x0003, 0xfc00}[(r / 7) % 4]);
	}
	m->w = (mu__wmat_t){t, d, rows, cols};
	for (int64_t r = 0; r < rows; r++)
		mu__wmat_row(&m->w, r, m->deq + r * cols);
	free(src);
}

static void wm_free(wm_t *m)
{
	free(m->buf);
	free(m->deq);
}

/* y[i][r] in double from the weights as read and x as the kernel sees it
 * (in the type's activation format, made by the portable quantizer and
 * read back by the format's to_f32); checks y within the error of eight
 * float lanes of cols/8 terms each. */
static void check_ref(const wm_t *m, const float *x, int64_t n, const float *bias, const float *y)
{
	int64_t rows = m->w.rows, cols = m->w.cols;
	mu__actfmt_t act = mu__wtypes[m->w.type].act;
	float *xe = malloc(sizeof(float) * (size_t)cols);
	unsigned char *xa = malloc(mu__actfmt_row_bytes(act, cols));

	assert_true(xe != NULL && xa != NULL);
	for (int64_t i = 0; i < n; i++) {
		if (act != MU__ACTFMT_F32) {
			mu__kern_portable.act[act](x + i * cols, cols, xa);
			mu__actfmts[act].to_f32(xa, cols, xe);
		} else {
			memcpy(xe, x + i * cols, sizeof(float) * (size_t)cols);
		}
		for (int64_t r = 0; r < rows; r++) {
			double s = bias ? bias[r] : 0, a = bias ? fabs(bias[r]) : 0;

			for (int64_t k = 0; k < cols; k++) {
				s += (double)m->deq[r * cols + k] * xe[k];
				a += fabs((double)m->deq[r * cols + k] * xe[k]);
			}
			/* Q8_1: the products take m * sx, sx = d * sum of x's quants
			 * rounded to f16, where the weights as read take m * that sum */
			for (int64_t b = 0; has_min(m->w.type) && b < cols / 32; b++) {
				const unsigned char *blk = (const unsigned char *)m->w.data +
				                           mu__wtype_row_bytes(m->w.type, cols) * (size_t)r +
				                           (size_t)b * mu__wtypes[m->w.type].block_bytes;
				double mw = blk_f16(blk, 2), dq = 0;
				float d, sx;

				memcpy(&d, xa + cols + 4 * b, 4);
				memcpy(&sx, xa + cols + 4 * (cols / 32 + b), 4);
				for (int k = 0; k < 32; k++)
					dq += (double)d * ((const int8_t *)xa)[32 * b + k];
				s += mw * (sx - dq);
				for (int k = 0; k < 32; k++)
					a += fabs(mw * xe[32 * b + k]);
				a += fabs(mw * sx);
			}
			if (!isfinite(s)) { /* a NaN or an infinity in W or x */
				if (isfinite(y[i * rows + r]))
					fail_msg("%s row %lld of x, out %lld: %.9g, want a NaN or an infinity",
					         mu__wtype_name(m->w.type), (long long)i, (long long)r, y[i * rows + r]);
				continue;
			}
			if (!(fabs(y[i * rows + r] - s) <= 1.2e-7 * (cols / 8.0 + 4) * a + 1e-30))
				fail_msg("%s %lldx%lld row %lld of x, out %lld: %.9g, want %.9g",
				         mu__wtype_name(m->w.type), (long long)rows, (long long)cols,
				         (long long)i, (long long)r, y[i * rows + r], s);
		}
	}
	free(xe);
	free(xa);
}

/* Shapes {rows, cols}: for the types of one-element blocks, and {rows,
 * blocks} for the others (cols = blocks * the type's block). */
static const int64_t float_shapes[][2] = {{1, 1}, {3, 7}, {5, 8}, {17, 9}, {33, 100},
                                          {37, 129}, {9, 4100}, {20, 16}};
static const int64_t block_shapes[][2] = {{1, 1}, {5, 2}, {17, 3}, {37, 5}, {6, 400}, {20, 1}};

/*
 * For each type and shape: the n = 1 result of every row of x through the
 * portable kernels, checked against the reference; then, on every
 * instruction set this CPU has, every n in 1..17 on pools of 1..4 threads
 * (and none), each compared bit for bit with those rows.
 */
/*
 * Under ThreadSanitizer every load is instrumented and the whole sweep
 * takes minutes per type: there the pool's threads are what is checked,
 * so every shape and thread count still runs, with five n.
 */
#if defined(__SANITIZE_THREAD__)
static const int64_t sweep_n[] = {1, 2, 3, 8, NMAX};
#else
static const int64_t sweep_n[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, NMAX};
#endif

static void run_type(mu__wtype_t t, mu__pool_t *pools[TMAX])
{
	int64_t block = mu__wtypes[t].block;
	int nshapes = block > 1 ? 6 : 8;
	const char *isas[3];
	int nisa = isas_here(isas);

	for (int s = 0; s < nshapes; s++) {
		int64_t rows = block > 1 ? block_shapes[s][0] : float_shapes[s][0];
		int64_t cols = block > 1 ? block_shapes[s][1] * block : float_shapes[s][1];
		float *x = malloc(sizeof(float) * (size_t)(NMAX * cols));
		float *bias = s % 2 ? malloc(sizeof(float) * (size_t)rows) : NULL;
		float *one = malloc(sizeof(float) * (size_t)(NMAX * rows));
		float *y = malloc(sizeof(float) * (size_t)(NMAX * rows));
		wm_t m;

		wm_make(&m, t, rows, cols);
		for (int64_t k = 0; k < NMAX * cols; k++)
			x[k] = rndf() * 4;
		x[5 * cols + cols / 2] = NAN; /* rows of x with a NaN, an inf */
		x[11 * cols + cols - 1] = -INFINITY;
		for (int64_t r = 0; bias && r < rows; r++)
			bias[r] = rndf();
		assert_int_equal(mu__kern_force_isa("portable"), 0);
		for (int64_t i = 0; i < NMAX; i++)
			assert_int_equal(mu__matmul(NULL, &m.w, x + i * cols, 1, one + i * rows, bias), 0);
		check_ref(&m, x, NMAX, bias, one);
		for (int is = 0; is < nisa; is++) {
			assert_int_equal(mu__kern_force_isa(isas[is]), 0);
			for (size_t ni = 0; ni < sizeof(sweep_n) / sizeof(sweep_n[0]); ni++) {
				int64_t n = sweep_n[ni];

				for (int th = 0; th <= TMAX; th++) {
					mu__pool_t *p = th == 0 ? NULL : pools[th - 1];
					int64_t off = (n * 7 + th) % (NMAX - n + 1); /* any rows of x */

					memset(y, 0xff, sizeof(float) * (size_t)(n * rows));
					assert_int_equal(mu__matmul(p, &m.w, x + off * cols, n, y, bias), 0);
					if (memcmp(y, one + off * rows, sizeof(float) * (size_t)(n * rows)) != 0)
						fail_msg("%s %lldx%lld: n=%lld on %d threads (%s) differs from n=1 (portable)",
						         mu__wtype_name(t), (long long)rows, (long long)cols,
						         (long long)n, th, isas[is]);
				}
			}
		}
		wm_free(&m);
		free(x);
		free(bias);
		free(one);
		free(y);
	}
	assert_int_equal(mu__kern_force_isa(NULL), 0);
}

static int pools_setup(void **state)
{
	mu__pool_t **pools = calloc(TMAX, sizeof(*pools));

	for (int i = 0; i < TMAX; i++)
		if (pools == NULL || mu__pool_new(i + 1, &pools[i]) != 0)
			return -1;
	*state = pools;
	return 0;
}

static int pools_teardown(void **state)
{
	mu__pool_t **pools = *state;

	for (int i = 0; i < TMAX; i++)
		mu__pool_free(pools[i]);
	free(pools);
	return 0;
}

/* Every type of the table, as run_type says. */
static void test_matmul_types(void **state)
{
	const char *names[3];
	int nisa = isas_here(names);

	for (int t = 0; t < MU__WT_COUNT; t++)
		run_type((mu__wtype_t)t, *state);
	if (nisa == 1)
		print_message("instruction sets compared: portable only (no AVX2 here: portable "
		              "against itself across n and threads)\n");
	else
		print_message("instruction sets compared bit for bit: portable, %s%s%s\n", names[1],
		              nisa > 2 ? ", " : "", nisa > 2 ? names[2] : "");
}

static void test_matmul_edges(void **state)
{
	float x[64], y[8] = {0};
	unsigned char q[2 * 34] = {0};
	mu__wmat_t w = {MU__WT_Q8_0, q, 2, 32};
	mu__pool_t **pools = *state;

	(void)state;
	for (int k = 0; k < 64; k++)
		x[k] = (float)k;
	/* n = 0 and rows = 0 touch nothing */
	assert_int_equal(mu__matmul(pools[1], &w, x, 0, y, NULL), 0);
	w.rows = 0;
	assert_int_equal(mu__matmul(pools[1], &w, x, 2, y, NULL), 0);
	for (int k = 0; k < 8; k++)
		assert_true(y[k] == 0);
	/* the one failure: no memory for x's quants */
	w.rows = 2;
	mu_test_fail_after(0);
	assert_int_equal(mu__matmul(pools[1], &w, x, 2, y, NULL), MU_ENOMEM);
	w.type = MU__WT_F32; /* no allocation for F32 */
	w.data = x;
	assert_int_equal(mu__matmul(pools[1], &w, x, 1, y, NULL), 0);
	mu_test_alloc_reset();
}

static void test_types(void **state)
{
	(void)state;
	assert_int_equal(mu__wtype_row_bytes(MU__WT_F32, 3), 12);
	assert_int_equal(mu__wtype_row_bytes(MU__WT_F16, 3), 6);
	assert_int_equal(mu__wtype_row_bytes(MU__WT_BF16, 1), 2);
	assert_int_equal(mu__wtype_row_bytes(MU__WT_Q8_0, 64), 68);
	assert_int_equal(mu__wtype_row_bytes(MU__WT_Q4_0, 64), 36);
	assert_int_equal(mu__wtype_row_bytes(MU__WT_Q8_0, 48), 0);
	assert_int_equal(mu__wtype_row_bytes(MU__WT_Q4_0, 16), 0);
	assert_int_equal(mu__wtype_row_bytes(MU__WT_F32, 0), 0);
	assert_int_equal(mu__wtype_row_bytes(MU__WT_F32, -32), 0);
	assert_int_equal(mu__wtype_row_bytes(MU__WT_COUNT, 32), 0);
	assert_int_equal(mu__wtype_row_bytes((mu__wtype_t)-1, 32), 0);
	assert_string_equal(mu__wtype_name(MU__WT_BF16), "BF16");
	assert_string_equal(mu__wtype_name(MU__WT_Q4_0), "Q4_0");
	assert_string_equal(mu__wtype_name(MU__WT_COUNT), "?");
	/* the GGUF ids of the format (llm-formats.md), and the activations */
	assert_int_equal(mu__wtypes[MU__WT_F32].ggml, 0);
	assert_int_equal(mu__wtypes[MU__WT_F16].ggml, 1);
	assert_int_equal(mu__wtypes[MU__WT_Q4_0].ggml, 2);
	assert_int_equal(mu__wtypes[MU__WT_Q8_0].ggml, 8);
	assert_int_equal(mu__wtypes[MU__WT_BF16].ggml, 30);
	assert_int_equal(mu__wtypes[MU__WT_BF16].act, MU__ACTFMT_F32);
	assert_int_equal(mu__wtypes[MU__WT_Q4_0].act, MU__ACTFMT_Q8_0);
	assert_int_equal(mu__actfmt_row_bytes(MU__ACTFMT_Q8_0, 64), 64 + 2 * 4);
	assert_int_equal(mu__actfmt_row_bytes(MU__ACTFMT_Q8_0, 48), 0);
	assert_int_equal(mu__actfmt_row_bytes(MU__ACTFMT_F32, 3), 12);
	assert_int_equal(mu__actfmt_row_bytes(MU__ACTFMT_COUNT, 32), 0);
	/* issue 23's 32-element types: ggml's ids, block bytes, activations */
	assert_int_equal(mu__wtype_row_bytes(MU__WT_Q4_1, 64), 40);
	assert_int_equal(mu__wtype_row_bytes(MU__WT_Q5_0, 64), 44);
	assert_int_equal(mu__wtype_row_bytes(MU__WT_Q5_1, 64), 48);
	assert_int_equal(mu__wtype_row_bytes(MU__WT_IQ4_NL, 64), 36);
	assert_int_equal(mu__wtypes[MU__WT_Q4_1].ggml, 3);
	assert_int_equal(mu__wtypes[MU__WT_Q5_0].ggml, 6);
	assert_int_equal(mu__wtypes[MU__WT_Q5_1].ggml, 7);
	assert_int_equal(mu__wtypes[MU__WT_IQ4_NL].ggml, 20);
	assert_int_equal(mu__wtypes[MU__WT_Q4_1].act, MU__ACTFMT_Q8_1);
	assert_int_equal(mu__wtypes[MU__WT_Q5_1].act, MU__ACTFMT_Q8_1);
	assert_int_equal(mu__wtypes[MU__WT_Q5_0].act, MU__ACTFMT_Q8_0);
	assert_int_equal(mu__wtypes[MU__WT_IQ4_NL].act, MU__ACTFMT_Q8_0);
	assert_int_equal(mu__actfmt_row_bytes(MU__ACTFMT_Q8_1, 64), 64 + 2 * 4 + 2 * 4);
	/* the values never change (digests mix them in): the agreed order */
	assert_int_equal(MU__WT_Q4_1, 5);
	assert_int_equal(MU__WT_Q5_0, 6);
	assert_int_equal(MU__WT_Q5_1, 7);
	assert_int_equal(MU__WT_IQ4_NL, 8);
	assert_int_equal(MU__WT_Q2_K, 9);
	assert_int_equal(MU__WT_Q3_K, 10);
	assert_int_equal(MU__WT_Q4_K, 11);
	assert_int_equal(MU__WT_Q5_K, 12);
	assert_int_equal(MU__WT_Q6_K, 13);
	assert_int_equal(MU__WT_IQ4_XS, 14);
	assert_int_equal(MU__ACTFMT_Q8_1, 2);
	assert_int_equal(MU__ACTFMT_Q8_K, 3);
	assert_int_equal(mu__wtype_row_bytes(MU__WT_Q4_K, 512), 288);
	assert_int_equal(mu__wtype_row_bytes(MU__WT_Q6_K, 128), 0);
	assert_int_equal(mu__actfmt_row_bytes(MU__ACTFMT_Q8_K, 512), 2 * 292);
	assert_int_equal(mu__wtypes[MU__WT_Q6_K].ggml, 14);
	assert_int_equal(mu__wtypes[MU__WT_IQ4_XS].act, MU__ACTFMT_Q8_K);
}

/*
 * Each entry of the table is coherent: a row is whole blocks of
 * block_bytes; its activation format's blocks tile its own; from_f32
 * writes exactly a row's bytes and to_f32 exactly cols floats (guards
 * around both stay as they were); a row read and written again is the
 * same row (the quantizers reproduce what they made); and the values come
 * back roughly (a bound loose enough for any format of that many bits).
 */
static void test_table_entries(void **state)
{
	(void)state;
	for (int t = 0; t < MU__WT_COUNT; t++) {
		const mu__wtype_info_t *ti = &mu__wtypes[t];
		int64_t blk = ti->block, cols = 7 * blk;
		size_t rb = mu__wtype_row_bytes((mu__wtype_t)t, cols);
		unsigned char *row = malloc(rb + 64), *again = malloc(rb + 64);
		float *x = malloc(sizeof(float) * (size_t)(cols + 16));
		float *back = malloc(sizeof(float) * (size_t)(cols + 16));
		double bits = 8.0 * ti->block_bytes / (double)blk, amax = 0, err = 0;

		assert_ptr_equal(mu__wtype_info(t), ti);
		assert_non_null(ti->name);
		assert_true(ti->name[0] != '\0' && strlen(ti->name) < 16);
		assert_true(blk >= 1 && ti->block_bytes >= 1);
		/* at least one bit and at most a float and a bit per element */
		assert_true(bits >= 1.0 && bits <= 33.0);
		assert_true((unsigned)ti->act < MU__ACTFMT_COUNT);
		assert_int_equal(blk % mu__actfmts[ti->act].block, 0);
		assert_non_null(ti->to_f32);
		assert_non_null(ti->from_f32);
		for (int64_t k = 1; k <= 9; k++) {
			assert_int_equal(mu__wtype_row_bytes((mu__wtype_t)t, k * blk), (size_t)k * ti->block_bytes);
			assert_int_not_equal(mu__actfmt_row_bytes(ti->act, k * blk), 0);
			if (blk > 1)
				assert_int_equal(mu__wtype_row_bytes((mu__wtype_t)t, k * blk + 1), 0);
		}
		assert_true(row != NULL && again != NULL && x != NULL && back != NULL);
		for (int64_t k = 0; k < cols; k++) {
			x[k] = rndf() * 3;
			amax = fmax(amax, fabs(x[k]));
		}
		memset(row, 0xa5, rb + 64);
		memset(again, 0x5a, rb + 64);
		memset(back, 0xa5, sizeof(float) * (size_t)(cols + 16));
		if (ti->from_f32 == NULL) { /* to_f32 alone, on random blocks */
			rnd_row((mu__wtype_t)t, cols, row);
			ti->to_f32(row, cols, back);
			for (int64_t k = cols; k < cols + 16; k++)
				assert_int_equal(f_bits(back[k]), 0xa5a5a5a5u);
			for (int64_t k = 0; k < cols; k++)
				assert_true(isfinite(back[k]));
			goto next;
		}
		ti->from_f32(x, cols, row);
		for (size_t b = rb; b < rb + 64; b++)
			assert_int_equal(row[b], 0xa5);
		ti->to_f32(row, cols, back);
		for (int64_t k = cols; k < cols + 16; k++)
			assert_int_equal(f_bits(back[k]), 0xa5a5a5a5u);
		/* a row read back quantizes to the same bytes, but for the
		 * superblock types, whose quantizers search for scales (ggml's),
		 * and may find others for the rounded values */
		ti->from_f32(back, cols, again);
		if (blk != 256)
			assert_memory_equal(row, again, rb);
		for (int64_t k = 0; k < cols; k++)
			err = fmax(err, fabs((double)back[k] - x[k]));
		/* a loose bound for any sane format of that many bits per element
		 * (the formats' own tests above are exact): garbage fails it */
		assert_true(err <= amax * pow(2.0, 2.0 - bits / 2.0));
	next:
		free(row);
		free(again);
		free(x);
		free(back);
	}
	for (int a = 0; a < MU__ACTFMT_COUNT; a++) {
		assert_non_null(mu__actfmts[a].name);
		assert_true(mu__actfmts[a].block >= 1 && mu__actfmts[a].block_bytes >= 1);
		assert_non_null(mu__actfmts[a].to_f32);
		assert_int_equal(mu__actfmt_row_bytes((mu__actfmt_t)a, 3 * mu__actfmts[a].block),
		                 3 * (size_t)mu__actfmts[a].block_bytes);
	}
}

/* Names and GGUF ids are unique, and the lookups find each entry again;
 * ggml's names of the types muster does not compute are found by id only. */
static void test_table_lookups(void **state)
{
	mu__wtype_t t = MU__WT_COUNT;
	int named = 0;

	(void)state;
	for (int i = 0; i < MU__WT_COUNT; i++) {
		for (int k = 0; k < i; k++) {
			assert_string_not_equal(mu__wtypes[i].name, mu__wtypes[k].name);
			assert_int_not_equal(mu__wtypes[i].ggml, mu__wtypes[k].ggml);
		}
		assert_int_equal(mu__wtype_by_name(mu__wtypes[i].name, &t), 0);
		assert_int_equal(t, i);
		assert_int_equal(mu__wtype_by_ggml(mu__wtypes[i].ggml, &t), 0);
		assert_int_equal(t, i);
		assert_string_equal(mu__ggml_type_name(mu__wtypes[i].ggml), mu__wtypes[i].name);
		assert_string_equal(mu__wtype_name((mu__wtype_t)i), mu__wtypes[i].name);
	}
	/* every name ggml gives an id is one id's, and a computed type's is the
	 * table's; the others are not computed, so no lookup by name finds them */
	for (uint32_t id = 0; id < 256; id++) {
		const char *n = mu__ggml_type_name(id);

		if (n == NULL)
			continue;
		named++;
		for (uint32_t k = 0; k < id; k++)
			assert_true(mu__ggml_type_name(k) == NULL || strcmp(mu__ggml_type_name(k), n) != 0);
		t = MU__WT_COUNT;
		if (mu__wtype_by_ggml(id, &t) == 0) {
			assert_string_equal(n, mu__wtypes[t].name);
		} else {
			assert_int_equal(mu__wtype_by_name(n, &t), MU_EARG);
			assert_int_equal(t, MU__WT_COUNT); /* untouched */
		}
	}
	assert_true(named > MU__WT_COUNT);
	assert_string_equal(mu__ggml_type_name(14), "Q6_K");
	assert_string_equal(mu__ggml_type_name(12), "Q4_K");
	assert_null(mu__ggml_type_name(4)); /* retired by ggml */
	assert_null(mu__ggml_type_name(UINT32_MAX));
	assert_int_equal(mu__wtype_by_ggml(14, &t), 0);
	assert_int_equal(t, MU__WT_Q6_K);
	assert_int_equal(mu__wtype_by_ggml(16, &t), MU_EARG); /* IQ2_XXS */
	assert_int_equal(mu__wtype_by_name("q8_0", &t), MU_EARG); /* case matters */
	assert_int_equal(mu__wtype_by_name("", &t), MU_EARG);
	assert_int_equal(mu__wtype_by_name(NULL, &t), MU_EARG);
}

/* The list a person reads is the table's, in its order, truncated safely. */
static void test_table_list(void **state)
{
	char buf[256], want[256], small[8];
	size_t at = 0;

	(void)state;
	for (int i = 0; i < MU__WT_COUNT; i++)
		at += (size_t)snprintf(want + at, sizeof(want) - at, "%s%s",
		                       i == 0 ? "" : i == MU__WT_COUNT - 1 ? " and " : ", ",
		                       mu__wtypes[i].name);
	assert_ptr_equal(mu__wtype_list(0, buf, sizeof(buf)), buf);
	assert_string_equal(buf, want);
	assert_non_null(strstr(buf, "Q8_0"));
	/* one-element blocks only: the unquantized types */
	mu__wtype_list(1, buf, sizeof(buf));
	assert_non_null(strstr(buf, "F32"));
	assert_null(strstr(buf, "Q8_0"));
	assert_string_equal(mu__wtype_list(12345, buf, sizeof(buf)), "");
	mu__wtype_list(0, small, sizeof(small));
	assert_int_equal(strlen(small), sizeof(small) - 1);
	assert_memory_equal(small, want, sizeof(small) - 1);
	mu__wtype_list(0, small, 1);
	assert_string_equal(small, "");
}

/* Every instruction set this build has (whether or not this CPU runs it)
 * has a kernel for every type and a quantizer for every activation format
 * that is not x as it is. */
static void test_isa_tables(void **state)
{
	int n = 0;

	(void)state;
	assert_ptr_equal(mu__kern_isa_built(0), &mu__kern_portable);
	assert_null(mu__kern_isa_built(-1));
	for (const mu__kern_isa_t *k; (k = mu__kern_isa_built(n)) != NULL; n++) {
		assert_non_null(k->name);
		for (int t = 0; t < MU__WT_COUNT; t++)
			if (k->mm[t] == NULL)
				fail_msg("the %s kernels have none for %s", k->name, mu__wtypes[t].name);
		assert_null(k->act[MU__ACTFMT_F32]);
		for (int a = MU__ACTFMT_F32 + 1; a < MU__ACTFMT_COUNT; a++)
			if (k->act[a] == NULL)
				fail_msg("the %s kernels have no quantizer for %s activations", k->name,
				         mu__actfmts[a].name);
		if (mu__kern_isa_by_name(k->name) != NULL)
			assert_ptr_equal(mu__kern_isa_by_name(k->name), k);
	}
	assert_true(n >= 1 && n <= 3);
	print_message("kernel tables in this build: %d, each complete\n", n);
}

static void test_isa_choice(void **state)
{
	const char *names[3], *best;
	int nisa = isas_here(names);

	(void)state;
	best = names[nisa - 1];
	assert_true((mu__kern_avx2() != NULL) == (nisa > 1));
	assert_null(mu__kern_isa_by_name("sse9"));
	assert_int_equal(setenv("MUSTER_KERNELS", "portable", 1), 0);
	assert_int_equal(mu__kern_force_isa(NULL), 0);
	assert_string_equal(mu__kern_isa(), "portable");
	assert_int_equal(unsetenv("MUSTER_KERNELS"), 0);
	assert_int_equal(mu__kern_force_isa(NULL), 0);
	assert_string_equal(mu__kern_isa(), best);
	assert_int_equal(mu__kern_force_isa("sse9"), MU_EARG);
	for (int i = 0; i < 3; i++) {
		int here = mu__kern_isa_by_name(all_isas[i]) != NULL;

		/* forced in-process, and by name from the environment */
		assert_int_equal(mu__kern_force_isa(all_isas[i]), here ? 0 : MU_EARG);
		if (here)
			assert_string_equal(mu__kern_isa(), all_isas[i]);
		assert_int_equal(setenv("MUSTER_KERNELS", all_isas[i], 1), 0);
		assert_int_equal(mu__kern_force_isa(NULL), 0);
		assert_string_equal(mu__kern_isa(), here ? all_isas[i] : best);
	}
	assert_int_equal(unsetenv("MUSTER_KERNELS"), 0);
	assert_int_equal(mu__kern_force_isa(NULL), 0);
	print_message("kernels on this CPU: %s (of %d here)\n", best, nisa);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_f16),
		cmocka_unit_test(test_bf16),
		cmocka_unit_test(test_q8_0),
		cmocka_unit_test(test_q4_0),
		cmocka_unit_test(test_act_q8_0_isas),
		cmocka_unit_test(test_block_values),
		cmocka_unit_test(test_quant_32),
		cmocka_unit_test(test_act_q8_1),
		cmocka_unit_test(test_types),
		cmocka_unit_test(test_table_entries),
		cmocka_unit_test(test_table_lookups),
		cmocka_unit_test(test_table_list),
		cmocka_unit_test(test_isa_tables),
		cmocka_unit_test(test_isa_choice),
		cmocka_unit_test(test_matmul_edges),
		cmocka_unit_test(test_matmul_types),
	};
	return cmocka_run_group_tests(tests, pools_setup, pools_teardown);
}
