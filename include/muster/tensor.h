/* SPDX-License-Identifier: MIT */
/*
 * Named typed tensors and rlx-distributed's tensor frames, byte for byte:
 *
 *   frame  := u32 count, tensor * count
 *   tensor := u32 name_len, name (UTF-8), u32 rankword, rank * u64 dim,
 *             u64 numel, numel * element            (all little-endian)
 *
 * rankword is the rank (0..8) in its low byte and the dtype's code (the
 * mu_dtype_t value) in its second byte. F32's code is 0, so an F32 tensor
 * is rlx's layout exactly (its rankword is its rank); only tensors of
 * other dtypes, which rlx cannot carry, have a non-zero second byte.
 *
 * Every size a peer declares is checked against limits before anything is
 * allocated: name length, rank, dtype, dims whose product must equal
 * numel without overflowing, and a byte budget for the whole frame.
 */
#ifndef MUSTER_TENSOR_H
#define MUSTER_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "muster/common.h"
#include "muster/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MU_TENSOR_MAX_RANK 8

/*
 * Element types. The values are the wire codes of the frame's rankword
 * (and never change): F32 is 0. Integers are two's complement, floats
 * IEEE-754, BOOL one byte that is 0 or 1; all little-endian on the wire
 * and in files, host order in memory.
 */
typedef enum {
	MU_DTYPE_F32 = 0,
	MU_DTYPE_F16 = 1,
	MU_DTYPE_BF16 = 2,
	MU_DTYPE_F64 = 3,
	MU_DTYPE_I8 = 4,
	MU_DTYPE_I16 = 5,
	MU_DTYPE_I32 = 6,
	MU_DTYPE_I64 = 7,
	MU_DTYPE_U8 = 8,
	MU_DTYPE_U16 = 9,
	MU_DTYPE_U32 = 10,
	MU_DTYPE_U64 = 11,
	MU_DTYPE_BOOL = 12,
	MU_DTYPE_COUNT = 13
} mu_dtype_t;

/* Bytes per element (0 for a value that is not a dtype). */
MU_EXTERN size_t mu_dtype_size(int dtype);
/* "F32", "I64", "BOOL" ... as safetensors spells them ("?" if unknown). */
MU_EXTERN const char *mu_dtype_name(int dtype);
/* The dtype that name spells, or -1. */
MU_EXTERN int mu_dtype_from_name(const char *name);

typedef struct {
	char *name;                        /* NUL-terminated */
	uint32_t rank;
	uint64_t dims[MU_TENSOR_MAX_RANK];
	uint64_t numel;                    /* product of dims (1 for rank 0) */
	union {
		float *data;               /* F32 elements */
		void *raw;                 /* any dtype's elements */
	};                                 /* 64-byte aligned when owned */
	void *mem;                         /* what to free (NULL: borrowed) */
	mu_dtype_t dtype;                  /* MU_DTYPE_F32 unless made typed */
} mu_tensor_t;

/*
 * A tensor with its own zeroed storage. dims may be NULL when rank is 0.
 * MU_ETOOBIG when the element count overflows or rank > 8; MU_EARG for a
 * dtype that is not one. mu_tensor_new makes an F32 tensor.
 */
MU_EXTERN int mu_tensor_new(const char *name, uint32_t rank,
                            const uint64_t *dims, mu_tensor_t **out);
MU_EXTERN int mu_tensor_new_typed(const char *name, mu_dtype_t dtype,
                                  uint32_t rank, const uint64_t *dims,
                                  mu_tensor_t **out);
/* A tensor over someone else's data (not freed with the tensor). */
MU_EXTERN int mu_tensor_wrap(const char *name, uint32_t rank,
                             const uint64_t *dims, float *data,
                             mu_tensor_t **out);
MU_EXTERN int mu_tensor_wrap_typed(const char *name, mu_dtype_t dtype,
                                   uint32_t rank, const uint64_t *dims,
                                   void *data, mu_tensor_t **out);
/* numel * the dtype's size. */
MU_EXTERN uint64_t mu_tensor_nbytes(const mu_tensor_t *t);
MU_EXTERN void mu_tensor_free(mu_tensor_t *t);

/* An ordered list of tensors, as a frame carries them. */
typedef struct {
	mu_tensor_t **t;
	size_t n, cap;
} mu_tensor_list_t;

MU_EXTERN void mu_tensor_list_init(mu_tensor_list_t *l);
/* Free every tensor in the list and the list's array. */
MU_EXTERN void mu_tensor_list_free(mu_tensor_list_t *l);
/* Append t (taken). */
MU_EXTERN int mu_tensor_list_push(mu_tensor_list_t *l, mu_tensor_t *t);
/* The tensor called name, or NULL. */
MU_EXTERN mu_tensor_t *mu_tensor_list_find(const mu_tensor_list_t *l,
                                           const char *name);

typedef struct {
	uint32_t max_name;    /* default 4096 */
	uint32_t max_count;   /* tensors per frame; default 65536 */
	uint64_t max_bytes;   /* data bytes per frame; default 1 GiB */
} mu_frame_limits_t;

MU_EXTERN void mu_frame_limits_init(mu_frame_limits_t *l);

/* The frame's size in bytes. */
MU_EXTERN uint64_t mu_frame_size(const mu_tensor_list_t *l);
/* Encode into a new buffer (mu_free). */
MU_EXTERN int mu_frame_encode(const mu_tensor_list_t *l, void **buf,
                              size_t *len);
/*
 * Decode a whole frame held in memory. On success every tensor of the
 * frame is appended to out. MU_EPROTO / MU_ETOOBIG with out unchanged,
 * MU_EEOF when the bytes end mid-frame, MU_EPROTO for bytes after it.
 */
MU_EXTERN int mu_frame_decode(const void *buf, size_t len,
                              const mu_frame_limits_t *lim,
                              mu_tensor_list_t *out);

/*
 * Send or receive one frame on a stream (muster/stream.h: a session's,
 * say), blocking until done or timeout_ms (< 0: none). The data of each
 * tensor goes from and to the tensor's memory directly. A stream is used
 * by one thread at a time.
 */
MU_EXTERN int mu_frame_send(mu_stream_t *s, const mu_tensor_list_t *l,
                            int timeout_ms);
MU_EXTERN int mu_frame_recv(mu_stream_t *s, const mu_frame_limits_t *lim,
                            mu_tensor_list_t *out, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
