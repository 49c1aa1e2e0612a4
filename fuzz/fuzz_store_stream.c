/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer driver: a TCPStore peer's byte stream as the server handles it
 * (dialect detection from the first bytes, then requests of that dialect
 * decoded by mu__store_req_decode and executed on a store shared with a
 * second, waiting peer), so both dialects' decoders and every operation's
 * semantics run on hostile input. The first byte picks how the stream is
 * cut into reads.
 */
#include <stdint.h>
#include <string.h>

#include "core/buf_int.h"
#include "store/kv_int.h"
#include "store/proto_int.h"

static int sink(void *ud, mu__store_peer_t *p, const void *b, size_t n,
                mu__store_val_t *tail)
{
	(void)ud;
	(void)p;
	(void)b;
	(void)n;
	(void)tail;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	mu__store_limits_t lim = {256, 4096, 64, 4096 + 1024, 16, 64};
	mu__store_peer_t peer, waiter;
	mu__store_req_t req;
	mu__store_t st;
	mu__buf_t in;
	size_t chunk, off, used, need = 1;
	int dialect = 0, dead = 0;
	const char *keys[] = {"/a"};
	mu__span_t span = {keys[0], 2};
	mu__store_req_t wait_req;

	if (size < 1)
		return 0;
	chunk = (size_t)(data[0] % 32) + 1;
	data++;
	size--;
	mu__store_init(&st, sink, NULL);
	mu__store_peer_init(&waiter, MU_STORE_V1);
	memset(&wait_req, 0, sizeof(wait_req));
	wait_req.op = MU_SOP_WAIT;
	wait_req.keys = &span;
	wait_req.nkeys = 1;
	mu__store_exec(&st, &waiter, &wait_req, &lim); /* someone waits for "/a" */
	mu__buf_init(&in, lim.max_request + 64);
	for (off = 0; off < size && !dead; off += chunk) {
		size_t n = size - off < chunk ? size - off : chunk;

		if (mu__buf_append(&in, data + off, n) != 0)
			break;
		if (dialect == 0) {
			dialect = mu__store_detect(in.data, in.len);
			if (dialect == 0)
				continue;
			mu__store_peer_init(&peer, dialect == 2 ? MU_STORE_V2 : MU_STORE_V1);
		}
		while (!dead && in.len >= need) {
			int rc = mu__store_req_decode(peer.dialect, in.data, in.len, &lim,
			                              &req, &used, &need);

			if (rc <= 0) {
				dead = rc < 0;
				break;
			}
			dead = mu__store_exec(&st, &peer, &req, &lim) != 0;
			mu__store_req_free(&req);
			mu__buf_consume(&in, used);
			need = 1;
		}
	}
	if (dialect != 0)
		mu__store_peer_release(&st, &peer);
	mu__store_peer_release(&st, &waiter);
	mu__store_free(&st);
	mu__buf_free(&in);
	return 0;
}
