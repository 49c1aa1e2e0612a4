/* SPDX-License-Identifier: MIT */
/*
 * NIXL P2P metadata frames; see p2p_proto_int.h.
 */
#include <string.h>

#include "muster/common.h"
#include "core/endian_int.h"
#include "md/p2p_proto_int.h"

/*
 * NIXL writes the P2P frame length (and the blob's record lengths) in host
 * byte order. We write them little-endian on any host, which matches NIXL
 * only where the host is little-endian (x86-64, aarch64); on a big-endian
 * host a muster agent and a NIXL agent would misread each other's lengths,
 * so building there is refused (spec nixl-metadata.md section 11).
 */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "md: NIXL's P2P frames and blobs use host byte order; only little-endian hosts interoperate"
#endif

static const char *const cmds[] = {"LOAD", "SEND", "INVL"};

int mu__p2p_frame_peek(const void *data, size_t len, size_t max, size_t *plen)
{
	uint64_t n;

	if (len < 8)
		return 0;
	n = mu_le64_get(data);
	if (n > max)
		return MU_ETOOBIG;
	if (n < MU_P2P_HEADER_LEN + 4)
		return MU_EPROTO;
	*plen = (size_t)n;
	return len - 8 >= n ? 1 : 0;
}

int mu__p2p_parse(const void *payload, size_t n, mu__p2p_cmd_t *cmd,
                  const void **arg, size_t *argn)
{
	const char *p = payload;
	int i;

	if (n < MU_P2P_HEADER_LEN + 4 || memcmp(p, MU_P2P_HEADER, MU_P2P_HEADER_LEN) != 0)
		return MU_EPROTO;
	for (i = 0; i < 3; i++)
		if (memcmp(p + MU_P2P_HEADER_LEN, cmds[i], 4) == 0)
			break;
	if (i == 3)
		return MU_EPROTO;
	*cmd = (mu__p2p_cmd_t)i;
	*arg = p + MU_P2P_HEADER_LEN + 4;
	*argn = n - MU_P2P_HEADER_LEN - 4;
	return 0;
}

int mu__p2p_frame(mu__buf_t *out, mu__p2p_cmd_t cmd, const void *arg, size_t n)
{
	unsigned char len[8];
	int rc;

	mu_le64_put(len, MU_P2P_HEADER_LEN + 4 + n);
	rc = mu__buf_append(out, len, 8);
	if (rc == 0)
		rc = mu__buf_appends(out, MU_P2P_HEADER);
	if (rc == 0)
		rc = mu__buf_append(out, cmds[cmd], 4);
	if (rc == 0 && n > 0)
		rc = mu__buf_append(out, arg, n);
	return rc;
}
