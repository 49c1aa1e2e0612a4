/* SPDX-License-Identifier: MIT */
/*
 * Named f32 tensors and rlx-distributed's tensor frames, byte for byte:
 *
 *   frame  := u32 count, tensor * count
 *   tensor := u32 name_len, name (UTF-8), u32 rank, rank * u64 dim,
 *             u64 numel, numel * f32                (all little-endian)
 *
 * Every size a peer declares is checked against limits before anything is
 * allocated: name length, rank, dims whose product must equal numel
 * without overflowing, and a byte budget for the whole frame.
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

typedef struct {
	char *name;                        /* NUL-terminated */
	uint32_t rank;
	uint64_t dims[MU_TENSOR_MAX_RANK];
	uint64_t numel;                    /* product of dims (1 for rank 0) */
	float *data;                       /* numel floats, 64-byte aligned */
	void *mem;                         /* what to free (NULL: borrowed) */
} mu_tensor_t;

/*
 * A tensor with its own zeroed storage. dims may be NULL when rank is 0.
 * MU_ETOOBIG when the element count overflows or rank > 8.
 */
MU_EXTERN int mu_tensor_new(const char *name, uint32_t rank,
                            const uint64_t *dims, mu_tensor_t **out);
/* A tensor over someone else's data (not freed with the tensor). */
MU_EXTERN int mu_tensor_wrap(const char *name, uint32_t rank,
                             const uint64_t *dims, float *data,
                             mu_tensor_t **out);
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
