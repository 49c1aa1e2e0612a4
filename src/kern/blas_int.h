/* SPDX-License-Identifier: MIT */
/*
 * Single-precision GEMM through OpenBLAS, split over the library's own
 * thread pool (kern/pool.c); the graph ops' products (matmul, gemm, conv)
 * go through it.
 *
 * OpenBLAS's thread count is one setting per process, and it is the
 * program's: nothing here reads or changes it. Debian 12's OpenBLAS
 * (0.3.21) has no per-call or per-thread count (openblas_set_num_threads_local
 * came in 0.3.27), and its results depend on the count: its threaded
 * driver cuts m and n at points that are not multiples of the kernels'
 * register tiles and blocks k its own way, so on 2 threads most elements
 * of a product of a few hundred rows come out different in the last bits
 * from 1 thread's. So the bits of the library's forwards are those of
 * OpenBLAS on one thread, which the program chooses (the muster command
 * does, at start); a program that leaves OpenBLAS more threads gets
 * OpenBLAS's threads inside each piece below, and its rounding.
 *
 * mu__sgemm cuts C along its rows or its columns into pieces that start
 * at multiples of MU__GEMM_ALIGN and runs one cblas_sgemm per piece. Each
 * piece has the whole k, and every OpenBLAS sgemm kernel's tile (m and n
 * unrolls, all powers of two up to 32) divides MU__GEMM_ALIGN, so each
 * element of C is computed by the same kernel code over the same k blocks
 * as in one call over all of C: the pieces' bits equal the unsplit call's,
 * whatever the pool's thread count (tests/unit/kern/test_blas.c checks it
 * on random shapes; pieces cut at other points differ on most).
 */
#ifndef MU_KERN_BLAS_INT_H
#define MU_KERN_BLAS_INT_H

#include <stdint.h>

#include "kern/kern_int.h"

#define MU__GEMM_ALIGN 64

/*
 * C = alpha * op(A) op(B) + beta * C, row-major, as cblas_sgemm (op is a
 * transpose when ta, tb): C is m x n with row stride ldc, op(A) m x k,
 * op(B) k x n. On pool's threads and the caller's (pool NULL: here, in
 * one call); small products run in one call. C overlaps neither A nor B.
 */
void mu__sgemm(mu__pool_t *pool, int ta, int tb, int64_t m, int64_t n, int64_t k,
               float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
               float beta, float *c, int64_t ldc);

#endif
