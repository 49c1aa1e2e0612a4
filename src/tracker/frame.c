/* SPDX-License-Identifier: MIT */
/*
 * The public framing calls (include/muster/tracker.h): a frame put
 * together, and proto.c's frame boundary check under a public name. What
 * a frame's JSON says is proto.c's to parse and the caller's to write.
 */
#include <stdint.h>
#include <string.h>

#include "muster/tracker.h"
#include "core/endian_int.h"
#include "tracker/proto_int.h"

int mu_tracker_frame_encode(const void *body, size_t len, void *buf, size_t cap, size_t *n)
{
	unsigned char *p = buf;

	if (body == NULL || len == 0)
		return MU_EARG;
	if (len > INT32_MAX)
		return MU_ETOOBIG;
	*n = 4 + len;
	if (buf == NULL || cap < 4 || cap - 4 < len)
		return MU_ETOOBIG;
	mu_le32_put(p, (uint32_t)len);
	memcpy(p + 4, body, len);
	return 0;
}

int mu_tracker_frame_peek(const void *data, size_t len, size_t max, size_t *body_len)
{
	return mu__tracker_frame_peek(data, len, max, body_len);
}
