/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer driver: what a TCPStore server (torch's, ours, or anything
 * listening) sends back to our client, through the real client code
 * (src/store/client.c) on one end of a socketpair. The other end, the
 * "server", has the reply bytes queued before the client starts and its
 * write side shut, so every read ends at the data or at EOF and nothing
 * waits for the timeout.
 *
 * Input: byte 0 picks the setup (bit 0: v1/v2; bit 1: v2's PING echo is
 * supplied by the driver, so the rest reaches the requests; bit 2:
 * raw_keys; bits 3-5: max_value_bytes, "unlimited" included), byte 1 the
 * number of operations (1..16), then one byte per operation (low nibble: which, mod 12; bits
 * 4-5: how many keys for CHECK/WAIT/MULTI_*, bit 6: WAIT with timeout 0),
 * then the server's bytes. A canceled wait (v2's CANCEL_WAIT reply) is not
 * reached: the queued bytes or the EOF always make the wait readable.
 *
 * The library's allocator refuses anything over 1 MiB, so a lying length
 * under a huge max_value_bytes takes the out-of-memory paths instead of
 * being reported by libFuzzer as a huge malloc.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "muster/store.h"
#include "core/endian_int.h"
#include "store/client_int.h"

enum { OPS = 12, MAX_KEYS = 3 };

#define ALLOC_CAP ((size_t)1 << 20)

static const char *const keys[MAX_KEYS] = {"a", "bb", "c"};

static void *capped_malloc(size_t n)
{
	return n > ALLOC_CAP ? NULL : malloc(n);
}

static void *capped_realloc(void *p, size_t n)
{
	return n > ALLOC_CAP ? NULL : realloc(p, n);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	mu_set_allocator(capped_malloc, capped_realloc, free);
	return 0;
}

static void free_values(mu_store_value_t *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		mu_free(v[i].data);
}

/* Run the operation code picks; its result, for tracing seeds by hand. */
static int run_op(mu_store_client_t *c, uint8_t code)
{
	size_t nk = (size_t)(code >> 4 & 3);
	mu_store_value_t v, vals[MAX_KEYS] = {{"x", 1}, {"", 0}, {"zz", 2}};
	mu_store_value_t out[MAX_KEYS], *list = NULL;
	int64_t n64;
	size_t n = 0;
	int flag, rc;

	switch (code % 16 % OPS) {
	case 0:
		rc = mu_store_set(c, keys[0], "v", 1);
		break;
	case 1:
		if ((rc = mu_store_get(c, keys[0], &v)) == 0)
			mu_free(v.data);
		break;
	case 2:
		rc = mu_store_add(c, keys[1], -3, &n64);
		break;
	case 3:
		if ((rc = mu_store_compare_set(c, keys[0], "", 0, "d", 1, &v)) == 0)
			mu_free(v.data);
		break;
	case 4:
		rc = mu_store_check(c, keys, nk, &flag);
		break;
	case 5:
		rc = mu_store_wait(c, keys, nk, code & 0x40 ? 0 : -1);
		break;
	case 6:
		rc = mu_store_delete(c, keys[2], &flag);
		break;
	case 7:
		rc = mu_store_num_keys(c, &n64);
		break;
	case 8:
		rc = mu_store_append(c, keys[1], "tail", 4);
		break;
	case 9:
		if ((rc = mu_store_multi_get(c, keys, nk, out)) == 0)
			free_values(out, nk);
		break;
	case 10:
		rc = mu_store_multi_set(c, keys, vals, nk);
		break;
	default:
		if ((rc = mu_store_list(c, &list, &n)) == 0) {
			free_values(list, n);
			mu_free(list);
		}
		break;
	}
	return rc;
}

/* Queue as much of b as the socket takes without blocking. */
static void queue(int fd, const void *b, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		b = (const char *)b + w;
		n -= (size_t)w;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t limits[8] = {64u << 20, 0, 16, 256,
	                                 SIZE_MAX, SIZE_MAX - 8, 8, 4096};
	mu_store_client_opts_t o;
	mu_store_client_t *c;
	unsigned char echo[4];
	size_t nops;
	int sv[2];

	if (size < 2)
		return 0;
	nops = (size_t)(data[1] & 15) + 1;
	if (size < 2 + nops)
		return 0;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		return 0;
	mu_store_client_opts_init(&o);
	o.dialect = data[0] & 1 ? MU_STORE_DIALECT_V2 : MU_STORE_DIALECT_V1;
	o.raw_keys = data[0] >> 2 & 1;
	o.max_value_bytes = limits[data[0] >> 3 & 7];
	/* a safety net only: EOF ends every read */
	o.timeout_ms = 100;
	if (o.dialect == MU_STORE_DIALECT_V2 && (data[0] & 2)) {
		mu_le32_put(echo, mu__store_client_nonce());
		queue(sv[1], echo, sizeof(echo));
	}
	queue(sv[1], data + 2 + nops, size - 2 - nops);
	shutdown(sv[1], SHUT_WR);
	if (mu__store_client_from_fd(&o, sv[0], &c) == 0) {
		for (size_t i = 0; i < nops; i++)
			(void)run_op(c, data[2 + i]);
		mu_store_client_close(c);
	}
	close(sv[1]);
	return 0;
}
