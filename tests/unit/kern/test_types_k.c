/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/kern/types_k.c: the Q8_K activation quantizer against
 * ggml's reference rules (largest magnitude with its sign, -127 / max,
 * halves to even, d kept as f32, the sums of 16) and our rule for NaN and
 * infinity; the Q8_K row read back; and the K-quants' and IQ4_XS's
 * to_f32 on blocks written by hand from ggml-common.h's layouts, where each
 * element's value is known. (Bit-for-bit equality with ggml's own
 * dequantize_row_* on random blocks is tests/interop/test_kern_ggml_kq.py;
 * the products are test_kern.c's, through the table.)
 */
#include <float.h>
#include <math.h>

#include "mu_test.h"

#include "kern/isa_int.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static float ldf(const unsigned char *p)
{
	float f;

	memcpy(&f, p, 4);
	return f;
}

static int16_t bsum(const unsigned char *blk, int g)
{
	int16_t s;

	memcpy(&s, blk + 260 + 2 * g, 2);
	return s;
}

static void check_sums(const unsigned char *blk)
{
	for (int g = 0; g < 16; g++) {
		int s = 0;

		for (int m = 0; m < 16; m++)
			s += (int8_t)blk[4 + 16 * g + m];
		assert_int_equal(bsum(blk, g), s);
	}
}

static void test_q8k_block(void **state)
{
	float x[256];
	unsigned char blk[MU__Q8K_BYTES];

	(void)state;
	/* ties: the max is -127, so iscale = 1 and q = x rounded half to even */
	for (int k = 0; k < 256; k++)
		x[k] = k == 0 ? -127.0f : (float)(k % 200 - 100) + 0.5f;
	mu__q8k_block(x, blk);
	assert_true(ldf(blk) == 1.0f);
	for (int k = 1; k < 256; k++) {
		int v = k % 200 - 100, want = v % 2 == 0 ? v : v + 1; /* v + 0.5 to even */

		assert_int_equal((int8_t)blk[4 + k], want);
	}
	assert_int_equal((int8_t)blk[4], -127);
	check_sums(blk);
	/* the first element of largest magnitude gives the sign: d = max / -127 */
	for (int k = 0; k < 256; k++)
		x[k] = (float)((int)(rnd32() % 2001) - 1000) / 300.0f;
	x[17] = 5.0f;
	x[90] = -5.0f;
	mu__q8k_block(x, blk);
	assert_true(ldf(blk) == 1.0f / (-127.0f / 5.0f));
	assert_int_equal((int8_t)blk[4 + 17], -127);
	assert_int_equal((int8_t)blk[4 + 90], 127);
	for (int k = 0; k < 256; k++) {
		float v = (-127.0f / 5.0f) * x[k];

		assert_int_equal((int8_t)blk[4 + k], (int)rintf(v));
	}
	check_sums(blk);
	/* all zeros: d = 0, q = 0 */
	memset(x, 0, sizeof(x));
	memset(blk, 0x55, sizeof(blk));
	mu__q8k_block(x, blk);
	assert_true(ldf(blk) == 0.0f);
	for (int k = 4; k < MU__Q8K_BYTES; k++)
		assert_int_equal(blk[k], 0);
	/* a NaN or an infinity: d NaN, q and sums 0 */
	for (int it = 0; it < 3; it++) {
		for (int k = 0; k < 256; k++)
			x[k] = (float)k;
		x[it * 100] = it == 0 ? NAN : it == 1 ? INFINITY : -INFINITY;
		memset(blk, 0x55, sizeof(blk));
		mu__q8k_block(x, blk);
		assert_true(isnan(ldf(blk)));
		for (int k = 4; k < MU__Q8K_BYTES; k++)
			assert_int_equal(blk[k], 0);
	}
	/* only subnormals: -127 / max overflows; the quants stay in range */
	for (int k = 0; k < 256; k++) {
		uint32_t u = rnd32() % 3;

		memcpy(&x[k], &u, 4);
	}
	x[5] = -x[5];
	mu__q8k_block(x, blk);
	assert_true(isfinite(ldf(blk)));
	for (int k = 0; k < 256; k++)
		assert_true((int8_t)blk[4 + k] >= -127 && (int8_t)blk[4 + k] <= 127);
	check_sums(blk);
}

/* A row: each block as mu__q8k_block makes it, read back as d * q. */
static void test_act_row(void **state)
{
	enum { C = 256 * 3 };
	float x[C], back[C];
	unsigned char row[3 * MU__Q8K_BYTES], blk[MU__Q8K_BYTES];

	(void)state;
	assert_int_equal(mu__actfmt_row_bytes(MU__ACTFMT_Q8_K, C), sizeof(row));
	assert_int_equal(mu__actfmt_row_bytes(MU__ACTFMT_Q8_K, 128), 0);
	for (int k = 0; k < C; k++)
		x[k] = (float)((int)(rnd32() % 20001) - 10000) / 1000.0f;
	x[300] = NAN;
	mu__kern_portable.act[MU__ACTFMT_Q8_K](x, C, row);
	mu__actfmts[MU__ACTFMT_Q8_K].to_f32(row, C, back);
	for (int b = 0; b < 3; b++) {
		mu__q8k_block(x + 256 * b, blk);
		assert_memory_equal(blk, row + b * MU__Q8K_BYTES, MU__Q8K_BYTES);
		for (int k = 0; k < 256; k++) {
			float want = ldf(blk) * (float)(int8_t)blk[4 + k];

			assert_memory_equal(&back[256 * b + k], &want, 4);
		}
	}
}

static void put16(unsigned char *p, uint16_t h)
{
	memcpy(p, &h, 2);
}

/* Q4_K and Q5_K: d = 2, dmin = 0.5 (f16), scale j = j + 1, min j = 63 - j
 * (j >= 4 take their high bits from the first bytes), q = e % 16 (+ 16 for
 * Q5_K where e / 32 is odd). */
static void test_q4_q5_k(void **state)
{
	unsigned char b[176];
	float y[256];

	(void)state;
	for (int q5 = 0; q5 < 2; q5++) {
		unsigned char *qs = b + (q5 ? 48 : 16);

		memset(b, 0, sizeof(b));
		put16(b, 0x4000);     /* 2.0 */
		put16(b + 2, 0x3800); /* 0.5 */
		for (int j = 0; j < 8; j++) {
			int sc = j + 1, mn = 63 - j;

			if (j < 4) {
				b[4 + j] = (unsigned char)sc;
				b[8 + j] = (unsigned char)mn;
			} else {
				b[12 + j - 4] = (unsigned char)((sc & 15) | (mn & 15) << 4);
				b[4 + j - 4] |= (unsigned char)((sc >> 4) << 6);
				b[8 + j - 4] |= (unsigned char)((mn >> 4) << 6);
			}
		}
		for (int e = 0; e < 256; e++) {
			int sb = e / 32, l = e % 32;

			qs[32 * (sb / 2) + l] |= (unsigned char)((e % 16) << (4 * (sb % 2)));
			if (q5 && sb % 2)
				b[16 + l] |= (unsigned char)(1 << sb);
		}
		(q5 ? mu__q5_k_to_f32 : mu__q4_k_to_f32)(b, 256, y);
		for (int e = 0; e < 256; e++) {
			int sb = e / 32, q = e % 16 + (q5 && sb % 2 ? 16 : 0);

			assert_true(y[e] == 2.0f * (float)(sb + 1) * (float)q - 0.5f * (float)(63 - sb));
		}
	}
}

/* Q6_K: d = 0.25, scale g = g - 8, q = (e * 7) % 64 - 32. */
static void test_q6_k(void **state)
{
	unsigned char b[210] = {0};
	float y[256];

	(void)state;
	put16(b + 208, 0x3400); /* 0.25 */
	for (int g = 0; g < 16; g++)
		b[192 + g] = (unsigned char)(int8_t)(g - 8);
	for (int e = 0; e < 256; e++) {
		int h = e / 128, t = (e % 128) / 32, l = e % 32, u = (e * 7) % 64;

		b[64 * h + l + 32 * (t % 2)] |= (unsigned char)((u & 15) << (4 * (t / 2)));
		b[128 + 32 * h + l] |= (unsigned char)((u >> 4) << (2 * t));
	}
	mu__q6_k_to_f32(b, 256, y);
	for (int e = 0; e < 256; e++)
		assert_true(y[e] == 0.25f * (float)(e / 16 - 8) * (float)((e * 7) % 64 - 32));
}

/* Q2_K, Q3_K, IQ4_XS on hand-made blocks. */
static void test_q2_q3_iq4(void **state)
{
	unsigned char b[136];
	float y[256];

	(void)state;
	/* Q2_K: scale g = g % 16, min g = 15 - g; q = e % 4; d = 1, dmin = 2 */
	memset(b, 0, 84);
	for (int g = 0; g < 16; g++)
		b[g] = (unsigned char)(g | (15 - g) << 4);
	for (int e = 0; e < 256; e++)
		b[16 + (e / 128) * 32 + e % 32] |= (unsigned char)((e % 4) << (2 * ((e % 128) / 32)));
	put16(b + 80, 0x3c00);
	put16(b + 82, 0x4000);
	mu__q2_k_to_f32(b, 256, y);
	for (int e = 0; e < 256; e++)
		assert_true(y[e] == (float)(e / 16) * (float)(e % 4) - 2.0f * (float)(15 - e / 16));
	/* Q3_K: every scale 40 (8 after - 32), q = e % 8 - 4 (high bit = bit 2) */
	memset(b, 0, 110);
	for (int j = 0; j < 4; j++) {
		b[96 + j] = b[100 + j] = 0x88;          /* low nibbles 8 */
		b[104 + j] = 0xaa;                      /* high bits 2 (32) */
	}
	for (int e = 0; e < 256; e++) {
		int l = e % 32, j = (e % 128) / 32, u = e % 8;

		b[32 + (e / 128) * 32 + l] |= (unsigned char)((u & 3) << (2 * j));
		if (u & 4)
			b[l] |= (unsigned char)(1 << ((e / 128) * 4 + j));
	}
	put16(b + 108, 0x3c00);
	mu__q3_k_to_f32(b, 256, y);
	for (int e = 0; e < 256; e++)
		assert_true(y[e] == 8.0f * (float)((e % 8 & 3) - (e % 8 & 4 ? 0 : 4)));
	/* IQ4_XS: ls of block ib = 30 + ib, nibble = e % 16 */
	memset(b, 0, 136);
	put16(b, 0x3c00);
	for (int ib = 0; ib < 8; ib++) {
		int ls = 30 + ib;

		b[4 + ib / 2] |= (unsigned char)((ls & 15) << (4 * (ib % 2)));
		put16(b + 2, (uint16_t)(((b[2] | b[3] << 8)) | ((ls >> 4) << (2 * ib))));
		for (int j = 0; j < 16; j++)
			b[8 + 16 * ib + j] = (unsigned char)(j | ((15 - j) << 4));
	}
	mu__iq4_xs_to_f32(b, 256, y);
	for (int e = 0; e < 256; e++) {
		int ib = e / 32, j = e % 16, nib = e % 32 < 16 ? j : 15 - j;

		assert_true(y[e] == (float)(ib - 2) * (float)mu__iq4nl_values[nib]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_q8k_block), cmocka_unit_test(test_act_row),
		cmocka_unit_test(test_q4_q5_k),   cmocka_unit_test(test_q6_k),
		cmocka_unit_test(test_q2_q3_iq4),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
