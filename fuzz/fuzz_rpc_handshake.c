/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer driver: the TVM session handshake as both sides decode it. The
 * first byte picks the side: the server reading a client's hello (then the
 * key string and its options), or a client reading the server's answer.
 */
#include <stdint.h>
#include <string.h>

#include "server/handshake_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *key, *mk;
	size_t keylen, mklen, used;
	double timeout;
	int ok;

	if (size < 1)
		return 0;
	if (data[0] & 1) {
		mu__rpc_reply_peek(data + 1, size - 1, &ok, &used);
		return 0;
	}
	if (mu__rpc_hello_peek(data + 1, size - 1, MU_RPC_MAX_KEY, &key, &keylen) == 1)
		mu__rpc_parse_client_key(key, keylen, &mk, &mklen, &timeout);
	return 0;
}
