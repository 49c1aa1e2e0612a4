/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/core/auth.c: the shared-secret handshake. Its codec
 * round-trips and refuses what is not its own; two streams with the same
 * secret complete it and pass payload sent behind it; a wrong secret, or
 * a client without the handshake, is refused on the server with
 * MU_EAUTH and told so with an ERROR; the proofs depend on role and both
 * nonces, and never contain the secret.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mu_test.h"

#include "core/auth_int.h"
#include "core/stream_int.h"

static const char good[] = "a shared secret of some length";
static const char bad[] = "another secret of some length!";

static void test_codec(void **state)
{
	unsigned char out[8 + MU_AUTH_MAX_TEXT + MU_AUTH_HELLO_LEN], nonce[MU_AUTH_NONCE];
	mu__auth_msg_t m;
	size_t used = 0, n;

	(void)state;
	for (int i = 0; i < MU_AUTH_NONCE; i++)
		nonce[i] = (unsigned char)i;
	n = mu__auth_encode_hello(out, MU_AUTH_CLIENT, nonce);
	assert_int_equal(mu__auth_decode(out, n - 1, &m, &used), 0);
	assert_int_equal(mu__auth_decode(out, n, &m, &used), 1);
	assert_int_equal(used, n);
	assert_int_equal(m.type, MU_AUTH_HELLO);
	assert_int_equal(m.role, MU_AUTH_CLIENT);
	assert_memory_equal(m.data, nonce, MU_AUTH_NONCE);
	n = mu__auth_encode_error(out, "no");
	assert_int_equal(mu__auth_decode(out, n, &m, &used), 1);
	assert_string_equal(m.text, "no");
	assert_int_equal(mu__auth_decode("RLXP\1\0\0\0", 8, &m, &used), MU_EBADMAGIC);
	assert_int_equal(mu__auth_decode("MU", 2, &m, &used), 0);
	assert_int_equal(mu__auth_decode("MUAU\x09\0\0\0", 8, &m, &used), MU_EPROTO);
	out[6] = 0xff; /* an ERROR longer than allowed */
	out[7] = 0xff;
	assert_int_equal(mu__auth_decode(out, n, &m, &used), MU_EPROTO);
}

static void test_proofs(void **state)
{
	unsigned char a[MU_AUTH_NONCE], b[MU_AUTH_NONCE], p1[MU_AUTH_MAC], p2[MU_AUTH_MAC];

	(void)state;
	memset(a, 1, sizeof(a));
	memset(b, 2, sizeof(b));
	assert_int_equal(mu__auth_proof(good, sizeof(good) - 1, MU_AUTH_CLIENT, a, b, p1), 0);
	assert_int_equal(mu__auth_proof(good, sizeof(good) - 1, MU_AUTH_SERVER, a, b, p2), 0);
	assert_memory_not_equal(p1, p2, MU_AUTH_MAC); /* not reflectable */
	assert_int_equal(mu__auth_proof(good, sizeof(good) - 1, MU_AUTH_CLIENT, b, a, p2), 0);
	assert_memory_not_equal(p1, p2, MU_AUTH_MAC); /* bound to both nonces, in order */
	assert_int_equal(mu__auth_proof(bad, sizeof(bad) - 1, MU_AUTH_CLIENT, a, b, p2), 0);
	assert_memory_not_equal(p1, p2, MU_AUTH_MAC);
	assert_null(memmem(p1, sizeof(p1), good, 8));
}

/* Run both sides until neither makes progress; each side's verdict. */
static void run(mu_stream_t *c, mu_stream_t *s, int *rc_c, int *rc_s)
{
	char buf[64];
	size_t n;

	*rc_c = *rc_s = -EAGAIN;
	for (int i = 0; i < 100 && (*rc_c == -EAGAIN || *rc_s == -EAGAIN); i++) {
		if (*rc_c == -EAGAIN)
			*rc_c = c->auth != NULL ? mu__auth_step(c) : 0;
		if (*rc_s == -EAGAIN) {
			*rc_s = mu__stream_recv(s, buf, sizeof(buf), &n);
			if (*rc_s == 0)
				assert_memory_equal(buf, "payload", 7);
		}
	}
}

static void pair(mu_stream_t **c, mu_stream_t **s)
{
	int sv[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	assert_int_equal(mu__stream_tcp_new(sv[0], c), 0);
	assert_int_equal(mu__stream_tcp_new(sv[1], s), 0);
}

static void test_handshake_ok(void **state)
{
	mu_stream_t *c, *s;
	struct iovec iov = {"payload", 7};
	size_t n;
	int rc_c, rc_s;

	(void)state;
	pair(&c, &s);
	assert_int_equal(mu__auth_start(c, good, sizeof(good) - 1, 0), 0);
	assert_int_equal(mu__auth_start(s, good, sizeof(good) - 1, 1), 0);
	assert_string_equal(c->kind, "tcp+auth");
	/* the payload waits behind the handshake, however early it is sent:
	 * the server reads nothing before the client proved itself */
	rc_c = rc_s = -EAGAIN;
	for (int i = 0; i < 100 && (rc_c != 0 || rc_s != 0); i++) {
		char buf[64];
		size_t got = 0;

		if (rc_c != 0)
			rc_c = mu__stream_sendv(c, &iov, 1, &n);
		if (rc_s != 0) {
			rc_s = mu__stream_recv(s, buf, sizeof(buf), &got);
			if (rc_s == 0)
				assert_memory_equal(buf, "payload", 7);
		}
		assert_true(rc_c == 0 || rc_c == -EAGAIN);
		assert_true(rc_s == 0 || rc_s == -EAGAIN);
	}
	assert_int_equal(rc_c, 0);
	assert_int_equal(rc_s, 0);
	assert_int_equal(n, 7);
	assert_true(c->authed && s->authed);
	mu__stream_close(c);
	mu__stream_close(s);
}

static void refused(const char *client_secret)
{
	mu_stream_t *c, *s;
	char buf[600];
	size_t n = 0, got = 0;
	int rc_c, rc_s = -EAGAIN;

	pair(&c, &s);
	if (client_secret != NULL)
		assert_int_equal(mu__auth_start(c, client_secret, strlen(client_secret), 0), 0);
	else
		assert_int_equal(mu__stream_sendv(c, &(struct iovec){"RLXP....", 8}, 1, &n), 0);
	assert_int_equal(mu__auth_start(s, good, sizeof(good) - 1, 1), 0);
	if (client_secret != NULL) {
		run(c, s, &rc_c, &rc_s);
		assert_int_equal(rc_c, MU_EAUTH);
	} else {
		for (int i = 0; i < 10 && rc_s == -EAGAIN; i++)
			rc_s = mu__stream_recv(s, buf, sizeof(buf), &n);
		/* what the plain client reads: a HELLO, then the ERROR */
		for (int i = 0; i < 10; i++) {
			ssize_t r = read(c->fd, buf + got, sizeof(buf) - got);

			if (r > 0)
				got += (size_t)r;
		}
		assert_true(got > MU_AUTH_HELLO_LEN + 8);
		assert_int_equal(mu__auth_sniff(c, buf, got), MU_EAUTH);
		assert_non_null(memmem(buf, got, "--secret-file", 13));
	}
	assert_int_equal(rc_s, MU_EAUTH);
	mu__stream_close(c);
	mu__stream_close(s);
}

static void test_wrong_secret(void **state)
{
	(void)state;
	refused(bad);
}

static void test_no_handshake(void **state)
{
	(void)state;
	refused(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_codec),
		cmocka_unit_test(test_proofs),
		cmocka_unit_test(test_handshake_ok),
		cmocka_unit_test(test_wrong_secret),
		cmocka_unit_test(test_no_handshake),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
