/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer driver: the shared-secret handshake (core/auth.c) as a
 * server meets it. The bytes are decoded whole by mu__auth_decode, whose
 * verdict must be stable (a message decodes and re-encodes to the same
 * bytes; a prefix of it is "more needed"), then sent by a "client" over
 * a socketpair to a server stream running the handshake, which must end
 * in a verdict (done, MU_EAUTH, or the stream's error) without reading or
 * writing out of bounds and without passing payload before it is done.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/auth_int.h"
#include "core/stream_int.h"

static const char secret[] = "fuzzing secret, 32 bytes long!!";

static void check_codec(const uint8_t *data, size_t size)
{
	mu__auth_msg_t m;
	unsigned char out[8 + MU_AUTH_MAX_TEXT + MU_AUTH_HELLO_LEN];
	size_t used = 0, n = 0;
	int rc = mu__auth_decode(data, size, &m, &used);

	if (rc != 1)
		return;
	if (used > size || used < 8)
		abort();
	if (m.type == MU_AUTH_HELLO)
		n = mu__auth_encode_hello(out, m.role, m.data);
	else if (m.type == MU_AUTH_PROOF)
		n = mu__auth_encode_proof(out, m.data);
	else if (m.type == MU_AUTH_ERROR && strlen(m.text) == used - 8)
		n = mu__auth_encode_error(out, m.text);
	else if (m.type != MU_AUTH_ERROR)
		abort();
	if (n != 0 && (n != used || memcmp(out, data, n) != 0))
		abort();
	/* one byte short is never a whole message */
	if (mu__auth_decode(data, used - 1, &m, &n) == 1)
		abort();
}

static void run_server(const uint8_t *data, size_t size)
{
	int sv[2];
	mu_stream_t *s = NULL;
	char buf[512];
	size_t got;
	int rc = -EAGAIN;

	if (size > 16384 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0)
		return;
	if (mu__stream_tcp_new(sv[0], &s) != 0 ||
	    mu__auth_start(s, secret, sizeof(secret) - 1, 1) != 0) {
		mu__stream_close(s);
		close(sv[1]);
		return;
	}
	if (size > 0 && write(sv[1], data, size) < 0)
		(void)0; /* a full buffer: the server sees what fitted */
	shutdown(sv[1], SHUT_WR);
	for (int i = 0; i < 64 && rc == -EAGAIN; i++) {
		rc = mu__stream_recv(s, buf, sizeof(buf), &got);
		/* the server's own messages: drained so it never blocks */
		while (read(sv[1], buf, sizeof(buf)) > 0)
			;
		if (rc == 0 && s->auth != NULL)
			abort(); /* payload before the handshake was done */
	}
	mu__stream_close(s);
	close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_codec(data, size);
	run_server(data, size);
	return 0;
}
