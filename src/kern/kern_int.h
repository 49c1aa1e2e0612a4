/* SPDX-License-Identifier: MIT */
/*
 * Compute kernels for the decoder family: the weight-type traits table,
 * matrix products over weights kept in the type they have on disk (one of
 * the table's), and the thread pool that runs them.
 * The decoder (dec.c), the loaders and the stage sessions call these;
 * nothing here knows about layers, files or the network. Programs outside
 * the library use include/muster/kern.h, a checked front to the same code.
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

#include "muster/kern.h"

/* ---- the weight-type traits table ---- */

/*
 * Storage types of weight matrices: indices into mu__wtypes, which says
 * everything else about them. The values are ours, not GGUF's, and never
 * change: a checkpoint's digest (llm/wire.c) mixes them in, and peers
 * compare digests. So a new type goes last, before MU__WT_COUNT, with its
 * entry and its kernels (docs/internals/kernels.md, "how to add a weight
 * type").
 */
typedef enum {
	MU__WT_F32,
	MU__WT_F16,
	MU__WT_BF16,
	MU__WT_Q8_0, /* blocks of 32: f16 scale d, 32 x int8 q; x = d*q */
	MU__WT_Q4_0, /* blocks of 32: f16 d, 16 bytes; x = d*(nibble-8),
	                low nibbles are elements 0..15 */
	MU__WT_Q4_1, /* blocks of 32: f16 d, f16 m, 16 bytes as Q4_0's;
	                x = d*nibble + m */
	MU__WT_Q5_0, /* blocks of 32: f16 d, 4 bytes qh, 16 bytes qs; q =
	                nibble as Q4_0's | bit k of qh << 4; x = d*(q-16) */
	MU__WT_Q5_1, /* blocks of 32: f16 d, f16 m, then Q5_0's qh and qs;
	                x = d*q + m */
	MU__WT_IQ4_NL, /* blocks of 32: f16 d, 16 bytes as Q4_0's; x =
	                  d*T[nibble], T ggml's 16 int8 values -127..113 */
	/* ggml's superblocks of 256 (kern/types_k.c has their layouts) */
	MU__WT_Q2_K,   /* 84 B: 16 x 16, 2-bit q, 4-bit scales and mins */
	MU__WT_Q3_K,   /* 110 B: 16 x 16, 3-bit signed q, 6-bit scales */
	MU__WT_Q4_K,   /* 144 B: 8 x 32, 4-bit q, 6-bit scales and mins */
	MU__WT_Q5_K,   /* 176 B: 8 x 32, 5-bit q, 6-bit scales and mins */
	MU__WT_Q6_K,   /* 210 B: 16 x 16, 6-bit signed q, int8 scales */
	MU__WT_IQ4_XS, /* 136 B: 8 x 32, IQ4_NL's code book, 6-bit scales */
	MU__WT_COUNT /* not a type: how many there are */
} mu__wtype_t;

/*
 * Activation formats: the form a weight type's dot product takes the rows
 * of x in, made from f32 by mu__matmul before the product (ggml's
 * vec_dot_type). Indices into mu__actfmts. Never renumbered either.
 */
typedef enum {
	MU__ACTFMT_F32,  /* x as it is: no conversion */
	MU__ACTFMT_Q8_0, /* per row: cols int8 quants, then cols/32 f32
	                    scales (f16 values), as mu__q8_block makes them */
	MU__ACTFMT_Q8_1, /* Q8_0's row form, then cols/32 f32 sums s (f16
	                    values): s = f16(d * sum q), d before its rounding
	                    (mu__q8_1_sums); for Q4_1 and Q5_1 */
	MU__ACTFMT_Q8_K, /* per block of 256: f32 d, 256 int8 q, 16 int16
	                    sums of 16 q (292 B), as mu__q8k_block makes it */
	MU__ACTFMT_COUNT
} mu__actfmt_t;

/* The block of Q8_0 (and of Q4_0, and of the Q8_0 activations). */
#define MU__QBLOCK 32

/* A row of cols elements (a multiple of the block) to f32, and back. */
typedef void (*mu__to_f32_fn)(const void *row, int64_t cols, float *out);
typedef void (*mu__from_f32_fn)(const float *x, int64_t cols, void *row);

/*
 * One weight type. Invariants (tests/unit/kern/test_kern.c checks them):
 * names and ggml ids are unique; block >= 1; a row of cols elements is
 * cols / block * block_bytes bytes; block is a multiple of the activation
 * format's block; every instruction set's table (kern/isa_int.h) has a
 * kernel for the type and a quantizer for its activation format (unless
 * that is F32, x as it is).
 */
typedef struct {
	const char *name;         /* ggml's spelling: "Q8_0" */
	uint32_t ggml;            /* ggml's type number, GGUF's tensor type id */
	int32_t block;            /* elements per block (1 for the float types) */
	uint32_t block_bytes;     /* bytes per block */
	mu__actfmt_t act;         /* the form of x its dot product takes */
	mu__to_f32_fn to_f32;     /* exact: what the products read */
	mu__from_f32_fn from_f32; /* the quantizer, NULL when there is none */
} mu__wtype_info_t;

extern const mu__wtype_info_t mu__wtypes[MU__WT_COUNT];

/* The entry of type t, or NULL for a number that is not a type. */
static inline const mu__wtype_info_t *mu__wtype_info(int t)
{
	return (unsigned)t < MU__WT_COUNT ? &mu__wtypes[t] : (const mu__wtype_info_t *)0;
}

/* One activation format; a row of cols elements is cols / block *
 * block_bytes bytes in the layout mu__actfmt_t's comment gives. */
typedef struct {
	const char *name;
	int32_t block;
	uint32_t block_bytes;
	mu__to_f32_fn to_f32; /* what the products see of x (tests' reference) */
} mu__actfmt_info_t;

extern const mu__actfmt_info_t mu__actfmts[MU__ACTFMT_COUNT];

/* Bytes of one row, or 0 when cols is not valid for the type (not a
 * multiple of its block) or cols <= 0, or t is not a type. */
size_t mu__wtype_row_bytes(mu__wtype_t t, int64_t cols);
/* The same for a row of x in activation format a. */
size_t mu__actfmt_row_bytes(mu__actfmt_t a, int64_t cols);
/* The table's name ("Q8_0"), or "?" for a number that is not a type. */
const char *mu__wtype_name(mu__wtype_t t);
/* The type called name / whose GGUF id is ggml: 0 and *t, or MU_EARG
 * (*t untouched) when muster computes no such type. */
int mu__wtype_by_name(const char *name, mu__wtype_t *t);
int mu__wtype_by_ggml(uint32_t ggml, mu__wtype_t *t);
/* ggml's name of type id ggml, whether muster computes it or not ("Q6_K"
 * for 14), or NULL for an id ggml does not name. For messages. */
const char *mu__ggml_type_name(uint32_t ggml);
/* The table's types with a block of `block` elements (every type when
 * block is 0), for a person: "F32, F16, BF16, Q8_0, ... and IQ4_XS". Written to
 * buf (len bytes, truncated, always terminated); returns buf. */
const char *mu__wtype_list(int32_t block, char *buf, size_t len);

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

/* ---- thread pool ---- */

/* The public handle (muster/kern.h) is this pool. */
typedef struct mu_pool_s mu__pool_t;

#define MU__POOL_MAX_THREADS 1024

/*
 * threads in [1, MU__POOL_MAX_THREADS] workers in all, the calling thread
 * counted as one (so 1 starts no thread). MU_EARG for a count out of
 * range, MU_ENOMEM or a thread error; *out NULL then.
 */
int mu__pool_new(int threads, mu__pool_t **out);
void mu__pool_free(mu__pool_t *p); /* NULL is fine; joins the workers */
int mu__pool_threads(const mu__pool_t *p);

/*
 * Split [0, n) into contiguous ranges and call fn(arg, lo, hi) for each,
 * on the pool's threads and the caller's; returns when all are done. One
 * caller at a time per pool. A pool may be NULL: fn(arg, 0, n) runs here.
 */
typedef mu_pool_fn mu__pool_fn;
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
 * overlap. Deterministic as the file comment says. The rows of x are
 * first put in the weight type's activation format (Q8_0 for Q8_0, Q4_0,
 * Q5_0 and IQ4_NL, Q8_1 for Q4_1 and Q5_1, as llama.cpp does), in a buffer the call allocates; the only
 * failure is MU_ENOMEM (and MU_EARG for a type or cols the table refuses,
 * which callers have checked; an assert says so).
 */
int mu__matmul(mu__pool_t *pool, const mu__wmat_t *w, const float *x,
               int64_t n, float *y, const float *bias);

/* Row r of w as f32 into out[w->cols] (an embedding lookup), by the
 * type's to_f32. */
void mu__wmat_row(const mu__wmat_t *w, int64_t r, float *out);

/* ---- attention's reads of a KV cache ---- */

/*
 * One head's keys or values at n cache positions: position j's hd elements
 * at kv + j * stride, in type t (F32, F16 or Q8_0, for which
 * mu__attn_has(t); Q8_0 takes an hd that is a multiple of its block, and
 * kv a block's start). Each element is read back exactly as f32: F32 as
 * stored, F16 as mu__f16_to_f32, Q8_0 as d * (float)q, the one product
 * (rounded to f32) of the block's f16 scale as f32 and its int8.
 *
 * mu__attn_dot: s[j] = q . key_j for j in [0, n), as the F32 product's
 * output element (kern/isa_int.h): eight float lanes acc[0..7], all +0;
 * for each group g of eight e (e = 8g + l; past hd both factors are 0),
 * acc[l] = fma(q[e], key_j[e], acc[l]); then s[j] = ((acc0 + acc4) +
 * (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7)).
 *
 * mu__attn_mix: o[e] = fma(p[j], value_j[e], o[e]) for j = 0, 1, ..., n-1
 * in that order, for each e in [0, hd): o is added to as it is.
 *
 * Every instruction set performs exactly these operations (the unit tests
 * compare the AVX2 reads with the portable ones bit for bit), so a
 * position's attention does not depend on the path, the thread or the
 * call that computes it. Either may run on any thread at once (they write
 * only s or o).
 */
int mu__attn_has(mu__wtype_t t);
void mu__attn_dot(mu__wtype_t t, const float *q, const void *kv, size_t stride, int64_t n,
                  int32_t hd, float *s);
void mu__attn_mix(mu__wtype_t t, const float *p, const void *kv, size_t stride, int64_t n,
                  int32_t hd, float *o);

/* ---- conversions (writers, loaders and tests) ---- */

float mu__f16_to_f32(uint16_t h);
uint16_t mu__f32_to_f16(float f);   /* round to nearest even */
float mu__bf16_to_f32(uint16_t h);
uint16_t mu__f32_to_bf16(float f);  /* round to nearest even */

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
