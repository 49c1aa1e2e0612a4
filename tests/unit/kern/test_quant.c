/* SPDX-License-Identifier: MIT */
/*
 * The reference quantizers (kern/quant_*.c): the table agrees with the
 * weight-type table where both know a type, and the quantizers that
 * table has write the same bytes; a block of
 * zeros gives ggml's bytes for every type (IQ4_XS's negative zero scale
 * and its scales of 32 among them); rows dequantize near themselves.
 * Byte-for-byte agreement with ggml on random rows is
 * tests/interop/test_quantize.py's.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mu_test.h"
#include "kern/quant_int.h"

static void fill(float *x, int n, unsigned seed)
{
	for (int i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		x[i] = ((float)(seed >> 8 & 0xffff) / 32768.0f - 1.0f) * (i % 7 == 0 ? 4.0f : 1.0f);
	}
}

static void test_table_agrees_with_the_weight_types(void **state)
{
	(void)state;
	for (int t = 0; t < MU__WT_COUNT; t++) {
		const mu__quant_t *q = mu__quant(mu__wtypes[t].ggml);

		assert_non_null(q);
		assert_string_equal(q->name, mu__wtypes[t].name);
		assert_int_equal(q->block, mu__wtypes[t].block);
		assert_int_equal(q->block_bytes, mu__wtypes[t].block_bytes);
	}
	assert_null(mu__quant(16)); /* IQ2_XXS: not written */
	assert_non_null(mu__quant(MU__GGML_Q6_K));
}

/* Every quantizer the weight-type table has writes the reference
 * quantizer's bytes. */
static void test_the_kernels_quantizers_match(void **state)
{
	float x[1024];
	unsigned char a[1024 * 4], b[1024 * 4];

	(void)state;
	for (int t = 0; t < MU__WT_COUNT; t++) {
		const mu__quant_t *q = mu__quant(mu__wtypes[t].ggml);
		size_t n = 1024 / (size_t)q->block * q->block_bytes;

		if (mu__wtypes[t].from_f32 == NULL)
			continue;
		for (unsigned s = 1; s < 20; s++) {
			fill(x, 1024, s);
			if (s == 3)
				memset(x + 256, 0, 256 * sizeof(float)); /* zero blocks */
			q->from_f32(x, 1024, a);
			mu__wtypes[t].from_f32(x, 1024, b);
			assert_memory_equal(a, b, n);
		}
	}
}

/* ggml's bytes for 256 zeros, per type. */
static void test_zero_blocks(void **state)
{
	float x[256] = {0};
	unsigned char b[256 * 4], want[256 * 4];
	const uint32_t zero_types[] = {MU__GGML_Q4_1, MU__GGML_Q5_1, MU__GGML_Q8_0, MU__GGML_Q2_K,
	                               MU__GGML_Q3_K, MU__GGML_Q4_K, MU__GGML_Q5_K, MU__GGML_Q6_K,
	                               MU__GGML_F32, MU__GGML_F16, MU__GGML_BF16};

	(void)state;
	for (size_t i = 0; i < sizeof(zero_types) / sizeof(zero_types[0]); i++) {
		const mu__quant_t *q = mu__quant(zero_types[i]);
		size_t n = 256 / (size_t)q->block * q->block_bytes;

		memset(b, 0xa5, sizeof(b));
		q->from_f32(x, 256, b);
		memset(want, 0, n);
		assert_memory_equal(b, want, n);
	}
	/* Q4_0: d = 0 / -8, a negative zero (f16 0x8000), every nibble the
	 * level of 0 (8); IQ4_NL: d +0, nibbles 8 (the level nearest 0) */
	mu__quant_q4_0(x, 32, b);
	assert_true(b[0] == 0 && b[1] == 0x80 && b[2] == 0x88 && b[17] == 0x88);
	mu__quant_iq4_nl(x, 32, b);
	assert_true(b[0] == 0 && b[1] == 0 && b[2] == 0x88 && b[17] == 0x88);
	/* Q5_0: d -0, nibbles 0 with every fifth bit set (16) */
	mu__quant_q5_0(x, 32, b);
	assert_true(b[1] == 0x80 && b[2] == 0xff && b[5] == 0xff && b[6] == 0 && b[21] == 0);
	/* IQ4_XS: d = -0/32 (f16 0x8000), every sub-block scale 32 (high
	 * bits 2: scales_h 0xaaaa), nibbles 8 */
	mu__quant_iq4_xs(x, 256, b);
	assert_true(b[0] == 0x00 && b[1] == 0x80 && b[2] == 0xaa && b[3] == 0xaa);
	assert_true(b[4] == 0 && b[7] == 0 && b[8] == 0x88 && b[135] == 0x88);
}

/* Q8_0 reads back within half a step of its scale, and what rounding
 * the scale to f16 adds (127 steps of 2^-11 of it). */
static void test_rows_read_back_near(void **state)
{
	float x[512], y[512];
	unsigned char b[512 * 2];

	(void)state;
	fill(x, 512, 7);
	mu__quant_q8_0(x, 512, b);
	mu__wtypes[MU__WT_Q8_0].to_f32(b, 512, y);
	for (int i = 0; i < 512; i++) {
		float amax = 0;

		for (int j = i / 32 * 32; j < i / 32 * 32 + 32; j++)
			amax = fmaxf(amax, fabsf(x[j]));
		assert_true(fabsf(x[i] - y[i]) <= amax / 127 * 0.5625f * 1.0001f + 1e-6f);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_agrees_with_the_weight_types),
		cmocka_unit_test(test_the_kernels_quantizers_match),
		cmocka_unit_test(test_zero_blocks),
		cmocka_unit_test(test_rows_read_back_near),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
