/* SPDX-License-Identifier: MIT */
/*
 * muster's compute kernels, for a program that brings its own weights:
 * the weight types, a weight matrix as stored, a thread pool, the matrix
 * product, and a row's conversion to and from f32. The decoder runs on
 * the same kernels (the library's own callers use their internal form).
 *
 * Weights stay in the type they have on disk (GGUF's F32, F16, BF16,
 * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K to Q6_K and IQ4_XS:
 * mu_wtype_count and mu_wtype_name list what this library computes). A type is known by its name, ggml's spelling; the int code
 * these calls take comes from mu_wtype_from_name (or counts up from 0 to
 * mu_wtype_count() - 1) and holds within one process: store names, not
 * codes, since a later version may number the types differently.
 *
 * Determinism is the contract. Every output element of mu_matmul is the
 * same sequence of floating-point operations whatever the number of rows
 * of x, the pool's thread count and the instruction set the CPU runs
 * (mu_kern_isa), so the same inputs give the same bits everywhere: one
 * token or a batch, one thread or many, x86 with AVX2 or a plain C build.
 * Quantized types first quantize each row of x (Q8_0 in blocks of 32, as
 * llama.cpp does) and take integer dot products per block.
 *
 * Nothing here allocates except mu_pool_new and mu_matmul, and nothing
 * here touches the network, files or the log.
 */
#ifndef MUSTER_KERN_H
#define MUSTER_KERN_H

#include <stddef.h>
#include <stdint.h>

#include "muster/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- weight types ---- */

/* How many weight types this library computes; their codes are 0 .. n-1. */
MU_EXTERN int mu_wtype_count(void);
/* The code of the type called name ("Q8_0"; case matters), or MU_EARG. */
MU_EXTERN int mu_wtype_from_name(const char *name);
/* A code's name ("BF16"), static; NULL for a number that is not a code. */
MU_EXTERN const char *mu_wtype_name(int type);
/* Elements per block: a row's length must be a multiple of it (1 for the
 * float types, 32 for Q8_0, Q4_0 and the others of ggml's 32-element
 * blocks); 0 for a number that is not a code. */
MU_EXTERN int mu_wtype_block(int type);
/* Bytes of a row of cols elements; 0 when type is not a code, cols <= 0,
 * or cols is not a multiple of the type's block. */
MU_EXTERN size_t mu_wtype_row_bytes(int type, int64_t cols);

/*
 * A weight matrix as stored: rows rows of cols elements of type `type`,
 * row r at data + r * mu_wtype_row_bytes(type, cols), little-endian as in
 * GGUF files. For a linear layer rows is the output width and cols the
 * input width (PyTorch's [out, in]; GGUF's ne0 is cols). The bytes are the
 * caller's (an mmapped file, say), need no alignment, and are only read.
 * A plain data struct: its layout does not change.
 */
typedef struct {
	int type;          /* a weight type's code */
	const void *data;
	int64_t rows, cols;
} mu_wmat_t;

/* ---- the thread pool ---- */

typedef struct mu_pool_s mu_pool_t;

/*
 * A pool of threads >= 1 workers in all, the calling thread counted as one
 * (so 1 starts no thread; at most 1024). MU_EARG for a count out of range,
 * MU_ENOMEM or a thread error; *out is NULL then. mu_pool_free joins the
 * workers (NULL is fine); call it when no job runs.
 */
MU_EXTERN int mu_pool_new(int threads, mu_pool_t **out);
MU_EXTERN void mu_pool_free(mu_pool_t *p);
MU_EXTERN int mu_pool_threads(const mu_pool_t *p);

/*
 * Split [0, n) into contiguous ranges and call fn(arg, lo, hi) once for
 * each, on the pool's threads and the caller's; returns when all are done.
 * Which thread runs which range varies from call to call: give each index
 * its own output. One caller at a time per pool (a pool is not for two
 * threads at once). p may be NULL: fn(arg, 0, n) runs on the caller. n <= 0
 * (or fn NULL) does nothing.
 */
typedef void (*mu_pool_fn)(void *arg, int64_t lo, int64_t hi);
MU_EXTERN void mu_pool_run(mu_pool_t *p, mu_pool_fn fn, void *arg, int64_t n);

/* ---- the product ---- */

/*
 * y[i * w->rows + r] = bias[r] + sum_k W[r][k] * x[i * w->cols + k] for i
 * in [0, n) and r in [0, w->rows): n rows of x (an activation each) through
 * the linear layer w. bias (w->rows floats) may be NULL; x and y must not
 * overlap. Runs on pool's threads (NULL: the caller's alone); one product
 * at a time per pool. Deterministic as the file comment says.
 *
 * 0 (n or w->rows 0 does nothing); MU_EARG for a NULL pointer, n < 0, a
 * negative rows, or a type and cols that mu_wtype_row_bytes refuses;
 * MU_ENOMEM when the quantized copy of x (about n * cols bytes) cannot be
 * allocated. y is unchanged on failure.
 */
MU_EXTERN int mu_matmul(mu_pool_t *pool, const mu_wmat_t *w, const float *x,
                        int64_t n, float *y, const float *bias);

/* The instruction set the products use: "avx2", "avx2-vnni" or "portable"
 * (chosen once per process: MUSTER_KERNELS=NAME, then the CPU's best). */
MU_EXTERN const char *mu_kern_isa(void);

/* ---- rows ---- */

/*
 * One row of cols elements of type `type` (mu_wtype_row_bytes(type, cols)
 * bytes at row) to cols floats at out, exactly as the products read it:
 * the float types convert exactly, the quantized ones give scale * quant.
 * MU_EARG when mu_wtype_row_bytes refuses the type and cols.
 */
MU_EXTERN int mu_wtype_to_f32(int type, const void *row, int64_t cols,
                              float *out);
/*
 * cols floats to one row of type `type` at out (mu_wtype_row_bytes bytes):
 * F16 and BF16 round to nearest even; every quantized type writes the
 * bytes llama.cpp's reference quantizer (no importance matrix) writes,
 * except that Q8_0 and Q4_0 give a block holding a NaN or an infinity a
 * NaN scale. The same bits on every machine. MU_EARG when
 * mu_wtype_row_bytes refuses the type and cols; -ENOTSUP for a type
 * muster reads but has no quantizer for (none today).
 */
MU_EXTERN int mu_wtype_from_f32(int type, const float *x, int64_t cols,
                                void *out);

#ifdef __cplusplus
}
#endif
#endif
