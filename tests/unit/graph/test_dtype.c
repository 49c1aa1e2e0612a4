/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/graph/dtype.c: half-precision conversions against
 * bit patterns worked out by hand from IEEE-754 (ties to even, subnormals,
 * overflow to inf, NaN), and the element conversions cast uses against
 * numpy's astype rules (wrapping, truncation, saturation where numpy's
 * result is undefined).
 */
#include <math.h>

#include "mu_test.h"

#include "muster/tensor.h"
#include "graph/dtype_int.h"
#include "kern/kern_int.h"

static void test_f16(void **state)
{
	static const struct {
		float f;
		uint16_t h;
	} exact[] = {
		{0.0f, 0x0000}, {-0.0f, 0x8000}, {1.0f, 0x3c00}, {-2.0f, 0xc000},
		{65504.0f, 0x7bff},                     /* the largest half */
		{6.103515625e-05f, 0x0400},             /* the smallest normal, 2^-14 */
		{5.9604644775390625e-08f, 0x0001},      /* the smallest subnormal, 2^-24 */
		{0.333251953125f, 0x3555},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++) {
		assert_int_equal(mu__f32_to_f16(exact[i].f), exact[i].h);
		assert_true(mu__f16_to_f32(exact[i].h) == exact[i].f);
		assert_int_equal(signbit(mu__f16_to_f32(exact[i].h)) != 0, signbit(exact[i].f) != 0);
	}
	/* ties to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 */
	assert_int_equal(mu__f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
	assert_int_equal(mu__f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
	assert_int_equal(mu__f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01); /* past halfway */
	/* overflow: from the midpoint above 65504 on, inf */
	assert_int_equal(mu__f32_to_f16(65519.0f), 0x7bff);
	assert_int_equal(mu__f32_to_f16(65520.0f), 0x7c00);
	assert_int_equal(mu__f32_to_f16(-1e10f), 0xfc00);
	assert_int_equal(mu__f32_to_f16(INFINITY), 0x7c00);
	/* underflow: below half the smallest subnormal, zero; at it, even (0) */
	assert_int_equal(mu__f32_to_f16(0x1p-25f), 0x0000);
	assert_int_equal(mu__f32_to_f16(0x1p-25f + 0x1p-30f), 0x0001);
	/* a subnormal rounding up into the smallest normal */
	assert_int_equal(mu__f32_to_f16(0x1p-14f - 0x1p-26f), 0x0400);
	assert_true(isnan(mu__f16_to_f32(mu__f32_to_f16(NAN))));
	assert_true(isinf(mu__f16_to_f32(0x7c00)) && mu__f16_to_f32(0xfc00) < 0);
}

static void test_bf16(void **state)
{
	(void)state;
	assert_int_equal(mu__f32_to_bf16(1.0f), 0x3f80);
	/* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even, so 1 */
	assert_int_equal(mu__f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
	assert_int_equal(mu__f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
	assert_int_equal(mu__f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
	assert_true(isnan(mu__bf16_to_f32(mu__f32_to_bf16(NAN))));
	assert_true(mu__bf16_to_f32(0xc040) == -3.0f);
	assert_int_equal(mu__f32_to_bf16(3.4e38f), 0x7f80); /* rounds up to inf */
}

static void test_classes(void **state)
{
	(void)state;
	assert_true(mu__dt_is_float(MU_DTYPE_BF16) && !mu__dt_is_float(MU_DTYPE_I32));
	assert_true(mu__dt_is_int(MU_DTYPE_U64) && !mu__dt_is_int(MU_DTYPE_BOOL));
	assert_true(mu__dt_is_unsigned(MU_DTYPE_U8) && !mu__dt_is_unsigned(MU_DTYPE_I8));
	assert_int_equal(mu_dtype_size(MU_DTYPE_BOOL), 1);
	assert_int_equal(mu_dtype_size(MU_DTYPE_U64), 8);
	assert_int_equal(mu_dtype_size(MU_DTYPE_COUNT), 0);
	assert_int_equal(mu_dtype_size(-1), 0);
	assert_string_equal(mu_dtype_name(MU_DTYPE_BF16), "BF16");
	assert_string_equal(mu_dtype_name(99), "?");
	assert_int_equal(mu_dtype_from_name("I16"), MU_DTYPE_I16);
	assert_int_equal(mu_dtype_from_name("i16"), -1);
	assert_int_equal(mu_dtype_from_name(NULL), -1);
}

/* numpy's astype on the same values gives these (where it is defined) */
static void test_convert(void **state)
{
	const double f[] = {2.9, -2.9, 300.0, -1.0, 0.5, NAN, 1e30, -1e30};
	const int64_t i[] = {-1, 255, 256, 70000, INT64_MIN, 1, 0};
	uint8_t u8[8];
	int8_t i8[8];
	int32_t i32[8];
	int64_t i64[8];
	uint64_t u64[8];
	uint16_t h[8];
	uint8_t b[8];
	float f32[8];

	(void)state;
	mu__convert(MU_DTYPE_F64, f, MU_DTYPE_I32, i32, 8);
	assert_int_equal(i32[0], 2);       /* truncation toward zero */
	assert_int_equal(i32[1], -2);
	assert_int_equal(i32[2], 300);
	assert_int_equal(i32[5], 0);       /* NaN: saturated to 0 here */
	assert_int_equal(i32[6], -1);      /* 1e30 saturates to INT64_MAX, whose low bits are -1 */
	mu__convert(MU_DTYPE_F64, f, MU_DTYPE_I64, i64, 8);
	assert_true(i64[6] == INT64_MAX && i64[7] == INT64_MIN);
	mu__convert(MU_DTYPE_F64, f, MU_DTYPE_U8, u8, 8);
	assert_int_equal(u8[2], 44);       /* 300 wraps: 300 - 256 */
	assert_int_equal(u8[3], 255);      /* -1 wraps */
	mu__convert(MU_DTYPE_I64, i, MU_DTYPE_I8, i8, 7);
	assert_int_equal(i8[0], -1);
	assert_int_equal(i8[1], -1);       /* 255 wraps */
	assert_int_equal(i8[2], 0);
	mu__convert(MU_DTYPE_I64, i, MU_DTYPE_U64, u64, 7);
	assert_true(u64[0] == UINT64_MAX && u64[4] == (uint64_t)1 << 63);
	mu__convert(MU_DTYPE_U64, u64, MU_DTYPE_F32, f32, 1);
	assert_true(f32[0] == 18446744073709551616.0f); /* unsigned, not -1 */
	mu__convert(MU_DTYPE_F64, f, MU_DTYPE_BOOL, b, 8);
	assert_memory_equal(b, "\1\1\1\1\1\1\1\1", 8); /* nonzero, NaN too */
	mu__convert(MU_DTYPE_I64, i, MU_DTYPE_BOOL, b, 7);
	assert_memory_equal(b, "\1\1\1\1\1\1\0", 7);
	mu__convert(MU_DTYPE_BOOL, b, MU_DTYPE_F32, f32, 7);
	assert_true(f32[0] == 1.0f && f32[6] == 0.0f);
	mu__convert(MU_DTYPE_F64, f, MU_DTYPE_F16, h, 5);
	assert_int_equal(h[2], 0x5cb0);    /* 300 */
	assert_int_equal(h[4], 0x3800);    /* 0.5 */
	mu__convert(MU_DTYPE_F16, h, MU_DTYPE_F32, f32, 5);
	assert_true(f32[2] == 300.0f && f32[3] == -1.0f);
	/* F64 to F16 straight, not through F32: 1 + 2^-11 + 2^-40 is just past
	 * halfway and rounds up; through F32 it would first become 1 + 2^-11
	 * and then round down to even */
	{
		double d = 1.0 + 0x1p-11 + 0x1p-40;

		mu__convert(MU_DTYPE_F64, &d, MU_DTYPE_F16, h, 1);
		assert_int_equal(h[0], 0x3c01);
	}
	/* the same dtype: a copy */
	mu__convert(MU_DTYPE_I64, i, MU_DTYPE_I64, i64, 7);
	assert_memory_equal(i64, i, sizeof(i));
}

static void test_get_put(void **state)
{
	uint64_t big = (uint64_t)1 << 63;
	int16_t s[1];
	uint32_t u[1];

	(void)state;
	assert_true(mu__get_f(MU_DTYPE_U64, &big, 0) == 9223372036854775808.0);
	assert_true((uint64_t)mu__get_i(MU_DTYPE_U64, &big, 0) == big); /* the bits */
	mu__put_i(MU_DTYPE_I16, s, 0, 40000, 0);
	assert_int_equal(s[0], 40000 - 65536);
	mu__put_f(MU_DTYPE_U32, u, 0, -3.7);
	assert_int_equal(u[0], (uint32_t)-3);
	mu__put_f(MU_DTYPE_U64, &big, 0, 1.5e19);  /* above INT64_MAX, below 2^64 */
	assert_true(big == 15000000000000000000ull);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_f16),
		cmocka_unit_test(test_bf16),
		cmocka_unit_test(test_classes),
		cmocka_unit_test(test_convert),
		cmocka_unit_test(test_get_put),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
