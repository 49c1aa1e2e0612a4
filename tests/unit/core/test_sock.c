/* SPDX-License-Identifier: MIT */
/* Unit tests for src/core/sock.c: deadlines are kept, EOF is reported. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mu_test.h"

#include "core/sock_int.h"
#include "core/time_int.h"

/* A listening socket on 127.0.0.1 and its port. */
static int listener(int *port)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 8), 0);
	getsockname(fd, (struct sockaddr *)&sa, &len);
	*port = ntohs(sa.sin_port);
	return fd;
}

static void test_roundtrip_and_eof(void **state)
{
	int lfd, port, sfd;
	mu_stream_t *cfd;
	char buf[8];

	(void)state;
	lfd = listener(&port);
	assert_int_equal(mu__sock_connect("127.0.0.1", port, NULL, mu__deadline(2000), &cfd), 0);
	sfd = accept(lfd, NULL, NULL);
	assert_int_equal(mu__sock_send_all(cfd, "hello", 5, mu__deadline(2000)), 0);
	assert_int_equal(read(sfd, buf, 5), 5);
	assert_int_equal(write(sfd, "abc", 3), 3);
	close(sfd);
	/* 3 bytes then an orderly close: asking for 5 is EOF, not a hang */
	assert_int_equal(mu__sock_recv_all(cfd, buf, 5, mu__deadline(2000)), MU_EEOF);
	mu__sock_close(cfd);
	close(lfd);
}

static void test_recv_deadline(void **state)
{
	int lfd, port, sfd;
	mu_stream_t *cfd;
	int64_t t0;
	char b;

	(void)state;
	lfd = listener(&port);
	assert_int_equal(mu__sock_connect("127.0.0.1", port, NULL, mu__deadline(2000), &cfd), 0);
	sfd = accept(lfd, NULL, NULL);
	t0 = mu__now_ms();
	assert_int_equal(mu__sock_recv_all(cfd, &b, 1, mu__deadline(200)), -ETIMEDOUT);
	assert_true(mu__now_ms() - t0 >= 190);
	assert_int_equal(mu__sock_wait_readable(cfd, mu__deadline(50)), -ETIMEDOUT);
	close(sfd);
	mu__sock_close(cfd);
	close(lfd);
}

static void set_blocking(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	assert_int_equal(fcntl(fd, F_SETFL, fl & ~O_NONBLOCK), 0);
}

/*
 * A peer that stops reading: sending more than the socket buffers hold
 * ends at the deadline, even on a blocking descriptor (a session's: the
 * device server hands its handler one). Before, send() blocked in the
 * kernel and the deadline was never looked at; the alarm turns that hang
 * into a failure.
 */
static void test_send_deadline(void **state)
{
	size_t big = 32u << 20;
	char *buf = calloc(1, big);
	int lfd, port, sfd;
	mu_stream_t *cfd;
	int64_t t0, took;

	(void)state;
	assert_non_null(buf);
	lfd = listener(&port);
	assert_int_equal(mu__sock_connect("127.0.0.1", port, NULL, mu__deadline(2000), &cfd), 0);
	sfd = accept(lfd, NULL, NULL);
	set_blocking(mu__stream_fd(cfd));
	alarm(20);
	t0 = mu__now_ms();
	assert_int_equal(mu__sock_send_all(cfd, buf, big, mu__deadline(300)), -ETIMEDOUT);
	took = mu__now_ms() - t0;
	assert_true(took >= 290);
	assert_true(took < 10000); /* loose: the machine is shared */
	/* a deadline already past still fails at once, not after a block */
	t0 = mu__now_ms();
	assert_int_equal(mu__sock_send_all(cfd, buf, big, mu__deadline(0)), -ETIMEDOUT);
	assert_true(mu__now_ms() - t0 < 5000);
	alarm(0);
	free(buf);
	close(sfd);
	mu__sock_close(cfd);
	close(lfd);
}

/* The same for a receive on a blocking descriptor: the peer says nothing. */
static void test_recv_deadline_blocking_fd(void **state)
{
	int lfd, port, sfd;
	mu_stream_t *cfd;
	int64_t t0;
	char b[4];

	(void)state;
	lfd = listener(&port);
	assert_int_equal(mu__sock_connect("127.0.0.1", port, NULL, mu__deadline(2000), &cfd), 0);
	sfd = accept(lfd, NULL, NULL);
	set_blocking(mu__stream_fd(cfd));
	assert_int_equal(write(sfd, "ab", 2), 2); /* part of what is asked for */
	alarm(20);
	t0 = mu__now_ms();
	assert_int_equal(mu__sock_recv_all(cfd, b, 4, mu__deadline(200)), -ETIMEDOUT);
	assert_true(mu__now_ms() - t0 >= 190);
	alarm(0);
	close(sfd);
	mu__sock_close(cfd);
	close(lfd);
}

static void test_connect_errors(void **state)
{
	int lfd, port;
	mu_stream_t *fd;

	(void)state;
	lfd = listener(&port);
	close(lfd); /* nothing listens there now */
	assert_int_equal(mu__sock_connect("127.0.0.1", port, NULL, mu__deadline(2000), &fd), -ECONNREFUSED);
	assert_null(fd);
	assert_int_equal(mu__sock_connect("no.such.host.invalid", 1, NULL, mu__deadline(2000), &fd), MU_ERESOLVE);
	assert_int_equal(mu__sock_connect("127.0.0.1", 70000, NULL, mu__deadline(2000), &fd), MU_EARG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip_and_eof),
		cmocka_unit_test(test_recv_deadline),
		cmocka_unit_test(test_send_deadline),
		cmocka_unit_test(test_recv_deadline_blocking_fd),
		cmocka_unit_test(test_connect_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
