/* SPDX-License-Identifier: MIT */
/* Unit tests for src/core/sock.c: deadlines are kept, EOF is reported. */
#include <arpa/inet.h>
#include <errno.h>
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
	int lfd, port, cfd, sfd;
	char buf[8];

	(void)state;
	lfd = listener(&port);
	assert_int_equal(mu__sock_connect("127.0.0.1", port, mu__deadline(2000), &cfd), 0);
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
	int lfd, port, cfd, sfd;
	int64_t t0;
	char b;

	(void)state;
	lfd = listener(&port);
	assert_int_equal(mu__sock_connect("127.0.0.1", port, mu__deadline(2000), &cfd), 0);
	sfd = accept(lfd, NULL, NULL);
	t0 = mu__now_ms();
	assert_int_equal(mu__sock_recv_all(cfd, &b, 1, mu__deadline(200)), -ETIMEDOUT);
	assert_true(mu__now_ms() - t0 >= 190);
	assert_int_equal(mu__sock_wait_readable(cfd, mu__deadline(50)), -ETIMEDOUT);
	close(sfd);
	mu__sock_close(cfd);
	close(lfd);
}

static void test_connect_errors(void **state)
{
	int lfd, port, fd;

	(void)state;
	lfd = listener(&port);
	close(lfd); /* nothing listens there now */
	assert_int_equal(mu__sock_connect("127.0.0.1", port, mu__deadline(2000), &fd), -ECONNREFUSED);
	assert_int_equal(fd, -1);
	assert_int_equal(mu__sock_connect("no.such.host.invalid", 1, mu__deadline(2000), &fd), MU_ERESOLVE);
	assert_int_equal(mu__sock_connect("127.0.0.1", 70000, mu__deadline(2000), &fd), MU_EARG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip_and_eof),
		cmocka_unit_test(test_recv_deadline),
		cmocka_unit_test(test_connect_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
