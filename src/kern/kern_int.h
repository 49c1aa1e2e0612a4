/* SPDX-License-Identifier: MIT */
/*
 * Compute kernels for the decoder family: matrix products over weights kept
 * in the type they have on disk (F32, F16, BF16, Q8_0, Q4_0), and the thread
 * pool that runs them. The decoder (dec.c) and the stage sessions call
 * these; nothing here knows about layers, files or the network.
 *
 * Determinism is the contract, not a side effect. Every output element is
 * computed by the same sequence of floating-point operations whatever the
 * number of rows of x (one token or a 512-token prefill, one sequence or
 * eight batched), whatever the pool's thread count, and whichever
 * instruction set was chosen at run time (AVX2+FMA+F16C, or the portable C
 * path, which emulates the same lanes with fmaf in the same order). So:
 *   - a split run equals a single-process run bit for bit;
 *   - a prefill equals the same tokens decoded one at a time;
 *   - a token's logits do not depend on what it was batched with, so a
 *     stage rebuilt by replaying positions reproduces its KV cache exactly;
 *   - an x86 box and an ARM board agree.
 * MUSTER_KERNELS=portable in the environment forces the portable path
 * (MUSTER_KERNELS=avx2 the AVX2 one on a CPU that also has AVX512-VNNI).
 */
#ifndef MU_KERN_KERN_INT_H
#define MU_KERN_KERN_INT_H

#include <stddef.h>
#include <stdint.h>

/* Storage types of weight matrices (values are ours, not GGUF's). */
typedef enum {
	MU__WT_F32 = 0,
	MU__WT_F16 = 1,
	MU__WT_BF16 = 2,
	MU__WT_Q8_0 = 3, /* blocks of 32: f16 scale d, 32 x int8 q; x = d*q */
	MU__WT_Q4_0 = 4  /* blocks of 32: f16 d, 16 bytes; x = d*(nibble-8),
	                    low nibbles are elements 0..15 */
} mu__wtype_t;

#define MU__QBLOCK 32

/*
 * A weight matrix as stored: `rows` rows of `cols` elements each, row r at
 * data + r * mu__wtype_row_bytes(type, cols). For a linear layer rows is
 * the output width and cols the input width (PyTorch's [out, in]; GGUF's
 * ne0 is cols). The bytes are not owned (usually an mmapped file).
 */
typedef struct {
	mu__wtype_t type;
	const void *data;
	int64_t rows, cols;
} mu__wmat_t;

/* Bytes of one row, or 0 when cols is not valid for the type (a quantized
 * type needs a multiple of MU__QBLOCK) or cols <= 0. */
size_t mu__wtype_row_bytes(mu__wtype_t t, int64_t cols);
/* "F32", "F16", "BF16", "Q8_0", "Q4_0". */
const char *mu__wtype_name(mu__wtype_t t);

/* ---- thread pool ---- */

typedef struct mu__pool_s mu__pool_t;

/*
 * threads >= 1 workers in all, the calling thread counted as one (so 1
 * starts no thread). MU_ENOMEM or a thread error; *out NULL then.
 */
int mu__pool_new(int threads, mu__pool_t **out);
void mu__pool_free(mu__pool_t *p); /* NULL is fine; joins the workers */
int mu__pool_threads(const mu__pool_t *p);

/*
 * Split [0, n) into contiguous ranges and call fn(arg, lo, hi) for each,
 * on the pool's threads and the caller's; returns when all are done. One
 * caller at a time per pool. A pool may be NULL: fn(arg, 0, n) runs here.
 */
typedef void (*mu__pool_fn)(void *arg, int64_t lo, int64_t hi);
void mu__pool_run(mu__pool_t *p, mu__pool_fn fn, void *arg, int64_t n);

/*
 * The same, fn also told which of the pool's threads runs the range:
 * thread in [0, mu__pool_threads(p)), the caller being 0. No two ranges
 * run at once on one thread, so per-thread scratch indexed by it needs no
 * lock.
 */
typedef void (*mu__pool_ifn)(void *arg, int64_t lo, int64_t hi, int thread);
void mu__pool_run_indexed(mu__pool_t *p, mu__pool_ifn fn, void *arg, int64_t n);

/* ---- products ---- */

/*
 * y[i * w->rows + r] = bias[r] + sum_k W[r][k] * x[i * w->cols + k], for
 * i in [0, n) and r in [0, w->rows). bias may be NULL. x and y do not
 * overlap. Deterministic as the file comment says. For Q8_0 and Q4_0 the
 * rows of x are first quantized to Q8_0 blocks (as llama.cpp does), in a
 * buffer the call allocates; the only failure is MU_ENOMEM.
 */
int mu__matmul(mu__pool_t *pool, const mu__wmat_t *w, const float *x,
               int64_t n, float *y, const float *bias);

/* Row r of w as f32 into out[w->cols] (an embedding lookup). */
void mu__wmat_row(const mu__wmat_t *w, int64_t r, float *out);

/* ---- conversions (writers, loaders and tests) ---- */

float mu__f16_to_f32(uint16_t h);
uint16_t mu__f32_to_f16(float f);   /* round to nearest even */
float mu__bf16_to_f32(uint16_t h);
uint16_t mu__f32_to_bf16(float f);  /* round to nearest even */
/* Quantize n floats (a multiple of MU__QBLOCK) the way llama.cpp does. */
void mu__quantize_q8_0(const float *x, int64_t n, void *out);
void mu__quantize_q4_0(const float *x, int64_t n, void *out);

/* The instruction set in use: "avx2", "portable", or "avx2-vnni" (the
 * AVX2 kernels with AVX512-VNNI's integer dot product, same results). */
const char *mu__kern_isa(void);

/*
 * For tests (an addition to the interface above): use "portable", "avx2"
 * or "avx2-vnni" from now on, or NULL to choose again as at start
 * (MUSTER_KERNELS, then the CPU's best). MU_EARG for a name this build or
 * CPU cannot run. Call it while no product runs.
 */
int mu__kern_force_isa(const char *isa);

#endif
