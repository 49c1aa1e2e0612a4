/* SPDX-License-Identifier: MIT */
/*
 * Elements of any dtype read and written one at a time; see dtype_int.h.
 * F16 and BF16 go through kern.c's conversions, but for a double to F16,
 * done here straight from the double (through F32 it would round twice).
 */
#include <math.h>
#include <string.h>

#include "graph/dtype_int.h"
#include "kern/kern_int.h"

int mu__dt_is_float(mu_dtype_t dt)
{
	return dt == MU_DTYPE_F32 || dt == MU_DTYPE_F16 || dt == MU_DTYPE_BF16 || dt == MU_DTYPE_F64;
}

int mu__dt_is_unsigned(mu_dtype_t dt)
{
	return dt == MU_DTYPE_U8 || dt == MU_DTYPE_U16 || dt == MU_DTYPE_U32 || dt == MU_DTYPE_U64;
}

int mu__dt_is_int(mu_dtype_t dt)
{
	return mu__dt_is_unsigned(dt) || dt == MU_DTYPE_I8 || dt == MU_DTYPE_I16 ||
	       dt == MU_DTYPE_I32 || dt == MU_DTYPE_I64;
}

/* ---- half precision ---- */

/* A double to the nearest F16 (ties to even), straight from the double:
 * going through f32 first would round twice. */
static uint16_t double_to_f16(double d)
{
	uint16_t sign = signbit(d) ? 0x8000 : 0;
	double a = fabs(d), q;
	int e;

	if (isnan(d))
		return sign | 0x7E00;
	if (a >= 65520.0) /* at or past the midpoint above the largest half */
		return sign | 0x7C00;
	if (a < ldexp(1.0, -14)) { /* subnormal (or zero): units of 2^-24 */
		q = nearbyint(a * 16777216.0);
		return sign | (uint16_t)q; /* q == 1024 is the smallest normal */
	}
	frexp(a, &e);                      /* a = m * 2^e, m in [0.5, 1) */
	q = nearbyint(ldexp(a, 11 - e));   /* 11 significant bits */
	if (q >= 2048.0) {
		q /= 2;
		e++;
	}
	if (e + 14 >= 31)
		return sign | 0x7C00;
	return sign | (uint16_t)((e + 14) << 10) | ((uint16_t)q & 0x3FF);
}

/* ---- one element ---- */

/* A double truncated toward zero into int64, saturated; NaN is 0. */
static int64_t trunc_i64(double v)
{
	if (isnan(v))
		return 0;
	if (v <= -9223372036854775808.0)
		return INT64_MIN;
	if (v >= 9223372036854775808.0)
		return INT64_MAX;
	return (int64_t)v;
}

double mu__get_f(mu_dtype_t dt, const void *p, uint64_t i)
{
	switch (dt) {
	case MU_DTYPE_F32: return ((const float *)p)[i];
	case MU_DTYPE_F64: return ((const double *)p)[i];
	case MU_DTYPE_F16: return mu__f16_to_f32(((const uint16_t *)p)[i]);
	case MU_DTYPE_BF16: return mu__bf16_to_f32(((const uint16_t *)p)[i]);
	case MU_DTYPE_U64: return (double)((const uint64_t *)p)[i];
	default: return (double)mu__get_i(dt, p, i);
	}
}

int64_t mu__get_i(mu_dtype_t dt, const void *p, uint64_t i)
{
	switch (dt) {
	case MU_DTYPE_I8: return ((const int8_t *)p)[i];
	case MU_DTYPE_I16: return ((const int16_t *)p)[i];
	case MU_DTYPE_I32: return ((const int32_t *)p)[i];
	case MU_DTYPE_I64: return ((const int64_t *)p)[i];
	case MU_DTYPE_U8: return ((const uint8_t *)p)[i];
	case MU_DTYPE_BOOL: return ((const uint8_t *)p)[i] != 0;
	case MU_DTYPE_U16: return ((const uint16_t *)p)[i];
	case MU_DTYPE_U32: return ((const uint32_t *)p)[i];
	case MU_DTYPE_U64: return (int64_t)((const uint64_t *)p)[i]; /* the bits */
	default: return trunc_i64(mu__get_f(dt, p, i));
	}
}

void mu__put_i(mu_dtype_t dt, void *p, uint64_t i, int64_t v, int uns)
{
	uint64_t u = (uint64_t)v; /* wrapping to the low bits is defined on unsigned */

	switch (dt) {
	case MU_DTYPE_I8: case MU_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)u; break;
	case MU_DTYPE_I16: case MU_DTYPE_U16: ((uint16_t *)p)[i] = (uint16_t)u; break;
	case MU_DTYPE_I32: case MU_DTYPE_U32: ((uint32_t *)p)[i] = (uint32_t)u; break;
	case MU_DTYPE_I64: case MU_DTYPE_U64: ((uint64_t *)p)[i] = u; break;
	case MU_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break;
	case MU_DTYPE_F32: ((float *)p)[i] = uns ? (float)u : (float)v; break;
	default: mu__put_f(dt, p, i, uns ? (double)u : (double)v); break;
	}
}

void mu__put_f(mu_dtype_t dt, void *p, uint64_t i, double v)
{
	switch (dt) {
	case MU_DTYPE_F32: ((float *)p)[i] = (float)v; break;
	case MU_DTYPE_F64: ((double *)p)[i] = v; break;
	case MU_DTYPE_F16: ((uint16_t *)p)[i] = double_to_f16(v); break;
	case MU_DTYPE_BF16: ((uint16_t *)p)[i] = mu__f32_to_bf16((float)v); break;
	case MU_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break; /* NaN too, as numpy */
	case MU_DTYPE_U64:
		if (v >= 9223372036854775808.0 && v < 18446744073709551616.0) {
			((uint64_t *)p)[i] = (uint64_t)v;
			break;
		}
		/* fall through */
	default: mu__put_i(dt, p, i, trunc_i64(v), 0); break;
	}
}

void mu__convert(mu_dtype_t from, const void *src, mu_dtype_t to, void *dst, uint64_t n)
{
	if (from == to) {
		memcpy(dst, src, n * mu_dtype_size((int)from));
		return;
	}
	for (uint64_t i = 0; i < n; i++)
		if (mu__dt_is_float(from))
			mu__put_f(to, dst, i, mu__get_f(from, src, i));
		else
			mu__put_i(to, dst, i, mu__get_i(from, src, i), mu__dt_is_unsigned(from));
}
