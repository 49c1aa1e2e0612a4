/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer driver: an rlx tensor frame from a peer, read the two ways a
 * server reads it: fed through mu__frame_reader_feed in chunks of sizes
 * chosen by the first byte (taking tensor data through the zero-copy
 * space/wrote path on odd chunks), and whole through mu_frame_decode.
 * Both must agree; a frame that decodes must encode back to its bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "muster/tensor.h"
#include "tensor/frame_int.h"

/* Feed data in chunks; the reader's verdict (1, 0 or an error) and how
 * many bytes the frame took. */
static int chunked(const uint8_t *data, size_t size, uint8_t seed,
                   const mu_frame_limits_t *lim, size_t *took)
{
	mu__frame_reader_t r;
	uint32_t rng = seed * 2654435761u + 1;
	size_t off = 0;
	int rc = 0, odd = 0;

	mu__frame_reader_init(&r, lim);
	while (rc == 0 && off < size) {
		size_t n, used = 0, room;
		void *dst;

		rng = rng * 1103515245u + 12345u;
		n = 1 + (rng >> 16) % (seed % 64 + 1);
		if (n > size - off)
			n = size - off;
		dst = mu__frame_reader_space(&r, &room);
		if (dst != NULL && (odd++ & 1)) {
			if (n > room)
				n = room;
			memcpy(dst, data + off, n);
			rc = mu__frame_reader_wrote(&r, n);
			used = n;
		} else {
			rc = mu__frame_reader_feed(&r, data + off, n, &used);
		}
		off += used;
	}
	*took = off;
	if (rc == 1) {
		mu_tensor_list_t l;

		mu_tensor_list_init(&l);
		mu__frame_reader_take(&r, &l);
		mu_tensor_list_free(&l);
	}
	mu__frame_reader_free(&r);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	mu_frame_limits_t lim = {256, 64, 1 << 20};
	mu_tensor_list_t l;
	size_t took, len;
	void *buf;
	int rc, whole;

	if (size < 1)
		return 0;
	rc = chunked(data + 1, size - 1, data[0], &lim, &took);
	mu_tensor_list_init(&l);
	whole = mu_frame_decode(data + 1, size - 1, &lim, &l);
	/* the same verdict, however the bytes were cut */
	if (rc == 1 && took == size - 1) {
		if (whole != 0)
			abort();
	} else if (rc == 1) {
		if (whole != MU_EPROTO) /* bytes after the frame */
			abort();
	} else if (rc == 0) {
		if (whole != MU_EEOF)
			abort();
	} else if (whole != rc) {
		abort();
	}
	if (whole == 0) {
		if (mu_frame_size(&l) != size - 1)
			abort();
		if (mu_frame_encode(&l, &buf, &len) != 0 || len != size - 1 ||
		    memcmp(buf, data + 1, len) != 0)
			abort();
		mu_free(buf);
	}
	mu_tensor_list_free(&l);
	return 0;
}
