/* SPDX-License-Identifier: MIT */
/*
 * The incremental rlx frame reader, pure: bytes are fed as they arrive
 * (any split), every declared size is checked the moment it is complete,
 * and a tensor's storage is allocated only after its name, dims and numel
 * passed. While a tensor's data is due, the reader can hand out the place
 * in the tensor where the next bytes belong, so a socket reads straight
 * into it.
 */
#ifndef MU_TENSOR_FRAME_INT_H
#define MU_TENSOR_FRAME_INT_H

#include <stddef.h>
#include <stdint.h>

#include "muster/stream.h"
#include "muster/tensor.h"

typedef enum {
	FR_COUNT, FR_NAME_LEN, FR_NAME, FR_RANK, FR_DIMS, FR_NUMEL, FR_DATA, FR_DONE
} mu__fr_state_t;

typedef struct {
	mu_frame_limits_t lim;
	mu__fr_state_t state;
	uint32_t count, idx;
	unsigned char field[8 * MU_TENSOR_MAX_RANK]; /* a fixed-size field */
	size_t have, need;
	char *name;
	uint32_t name_len, rank;
	mu_dtype_t dtype;       /* from the rankword's second byte */
	uint64_t dims[MU_TENSOR_MAX_RANK];
	mu_tensor_t *cur;       /* receiving its data */
	uint64_t data_have;
	uint64_t cap;           /* bytes of cur's storage allocated so far */
	uint64_t bytes;         /* data bytes declared so far (the budget) */
	mu_tensor_list_t got;
	/*
	 * Optional: asked before a tensor's storage is allocated, with the
	 * data bytes the frame declares so far; nonzero refuses the frame
	 * (the reader returns it). A server charges what a peer's frame
	 * declares against its budget here, before holding any of it.
	 */
	int (*admit)(void *ud, uint64_t declared);
	void *admit_ud;
} mu__frame_reader_t;

void mu__frame_reader_init(mu__frame_reader_t *r, const mu_frame_limits_t *lim);
void mu__frame_reader_free(mu__frame_reader_t *r);

/*
 * Consume up to n bytes (*used tells how many). 1: the frame is complete
 * (bytes after it are left unused); 0: more needed; MU_EPROTO (bad name,
 * numel that is not the product of dims), MU_ETOOBIG (a limit), MU_ENOMEM.
 */
int mu__frame_reader_feed(mu__frame_reader_t *r, const void *p, size_t n,
                          size_t *used);

/*
 * While tensor data is due: where the next bytes go, and how many fit. A
 * tensor's storage grows as its bytes arrive (doubling, from 64 KiB up to
 * its declared size), so a header that declares much and sends little
 * holds little. NULL with *n 0 when no data is due, or (r->state still
 * FR_DATA) when growing failed: MU_ENOMEM.
 */
void *mu__frame_reader_space(mu__frame_reader_t *r, size_t *n);
/* n bytes were written at the space: 1 complete, 0 more needed. */
int mu__frame_reader_wrote(mu__frame_reader_t *r, size_t n);

/* Move the tensors of a complete frame to the end of out: all, or none
 * and MU_ENOMEM (they stay the reader's, freed with it). */
int mu__frame_reader_take(mu__frame_reader_t *r, mu_tensor_list_t *out);

/*
 * Per tensor, the header bytes that precede its data (name_len .. numel),
 * for a gathering write; the frame's count comes first. hdr must hold
 * mu__frame_header_size(t) bytes.
 */
size_t mu__frame_header_size(const mu_tensor_t *t);
void mu__frame_header(const mu_tensor_t *t, unsigned char *hdr);
/* The rank field: the rank, and the dtype's code in the second byte (0,
 * so the rank alone, for F32). */
uint32_t mu__frame_rankword(const mu_tensor_t *t);
/* Does l hold a tensor that is not F32 (a frame rlx cannot read)? */
int mu__frame_typed(const mu_tensor_list_t *l);

/*
 * Send head (head_len bytes, may be 0) and then l as one frame in one
 * gathering write, tensor data straight from the tensors. Waits end at
 * the deadline or after idle_ms without progress (mu__sock_sendv).
 */
int mu__frame_sendv(mu_stream_t *fd, const void *head, size_t head_len,
                    const mu_tensor_list_t *l, int64_t deadline, int idle_ms);

#endif
