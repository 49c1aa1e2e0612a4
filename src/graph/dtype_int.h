/* SPDX-License-Identifier: MIT */
/*
 * Elements of any dtype, for the typed ops (cast, where, comparisons,
 * arithmetic on integers): read as a double or as 64-bit integer bits,
 * written back with the dtype's own rounding or wrapping. F32 code does
 * not come through here (it has its own loops); these serve the small
 * tensors of indices, masks and shapes that graphs carry beside it.
 *
 * Conversions follow numpy's astype, which ONNX's Cast is specified by,
 * wherever that is defined: integers wrap to the low bits of the target,
 * floats round to nearest even (F16 and BF16 too, overflowing to inf),
 * a float becomes an integer by truncation toward zero. Where numpy's
 * result is undefined (NaN or a float out of int64's range) the value is
 * saturated (NaN gives 0) instead of being undefined in C.
 */
#ifndef MU_GRAPH_DTYPE_INT_H
#define MU_GRAPH_DTYPE_INT_H

#include <stdint.h>

#include "muster/tensor.h"

int mu__dt_is_float(mu_dtype_t dt);    /* F32 F16 BF16 F64 */
int mu__dt_is_unsigned(mu_dtype_t dt); /* U8 U16 U32 U64 (not BOOL) */
int mu__dt_is_int(mu_dtype_t dt);      /* signed or unsigned, not BOOL */

/* (F16 and BF16 to and from F32: kern/kern_int.h's mu__f16_to_f32 ...) */

/* Element i of p (dtype dt) as a double: exact for every float dtype and
 * for integers up to 2^53. */
double mu__get_f(mu_dtype_t dt, const void *p, uint64_t i);
/* Element i as integer bits: integers and BOOL exactly (unsigned ones
 * zero-extended into the uint64_t's bits), floats truncated and saturated
 * to int64 (NaN is 0). */
int64_t mu__get_i(mu_dtype_t dt, const void *p, uint64_t i);
/* Write element i: a double rounded into a float dtype, truncated into an
 * integer one (saturated to int64, then wrapped), != 0 into BOOL. */
void mu__put_f(mu_dtype_t dt, void *p, uint64_t i, double v);
/* Write element i from integer bits: the low bits into an integer dtype,
 * the value (signed, or unsigned when `uns`) into a float one, != 0 into
 * BOOL. */
void mu__put_i(mu_dtype_t dt, void *p, uint64_t i, int64_t v, int uns);

/* Convert n elements between any two dtypes (Cast): the rules above, and
 * exact wherever the target holds the value. */
void mu__convert(mu_dtype_t from, const void *src, mu_dtype_t to, void *dst, uint64_t n);

#endif
