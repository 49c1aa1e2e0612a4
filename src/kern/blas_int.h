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
 * mu__sgemm cuts C along its rows into pieces that start at multiples of
 * MU__GEMM_ALIGN and runs one cblas_sgemm per piece. A row-major product
 * is OpenBLAS's column-major C^T = op(B)^T op(A)^T, so C's rows are
 * OpenBLAS's N, the dimension its drivers walk in steps of the kernel's N
 * unroll. Each piece has the whole k, and when that unroll divides
 * MU__GEMM_ALIGN each element of C is computed by the same kernel code
 * over the same k blocks as in one call over all of C: the pieces' bits
 * equal the unsplit call's, whatever the pool's thread count
 * (tests/unit/kern/test_blas.c checks it on random shapes). Measured on
 * 0.3.21 with OPENBLAS_CORETYPE over 300 random shapes: cuts at multiples
 * of 12 keep the bits on the Haswell and Zen kernels, where cuts at 64
 * (which held on the AVX-512 machines this was first written on) change
 * nearly every product; 192 keeps them on Zen, Haswell, Sandybridge and
 * Nehalem.
 *
 * C's columns are not cut: on the Haswell and Zen kernels no cut point
 * gives the whole call's bits (cuts at 8 to 256 columns all change the
 * columns near the cut and near OpenBLAS's own blocks). A product with
 * fewer than 2 MU__GEMM_ALIGN rows and at least as many columns (a
 * convolution's channels by positions) is turned over instead: T =
 * op(B)^T op(A)^T is computed by rows, then C = T^T + beta C. Which way a
 * product goes depends on its shape alone, so its bits are the same on
 * every pool, one thread included (a turned product's bits may differ
 * from one cblas_sgemm's in the last place), and when the n x m buffer for T
 * cannot be had the product runs as one call.
 */
#ifndef MU_KERN_BLAS_INT_H
#define MU_KERN_BLAS_INT_H

#include <stdint.h>

#include "kern/kern_int.h"

/* a multiple of 64 and of the Haswell and Zen kernels' N unroll, 12 */
#define MU__GEMM_ALIGN 192

/*
 * C = alpha * op(A) op(B) + beta * C, row-major, as cblas_sgemm (op is a
 * transpose when ta, tb): C is m x n with row stride ldc, op(A) m x k,
 * op(B) k x n. On pool's threads and the caller's (pool NULL: here, on
 * this thread); small products run in one call. C overlaps neither A nor B.
 */
void mu__sgemm(mu__pool_t *pool, int ta, int tb, int64_t m, int64_t n, int64_t k,
               float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
               float beta, float *c, int64_t ldc);

#endif
