/* SPDX-License-Identifier: MIT */
/* Unit tests for src/core/net.c: TVM's port search and address text. */
#include <arpa/inet.h>
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mu_test.h"

#include "core/net_int.h"

/*
 * A host without IPv6, simulated: these definitions take the place of
 * libc's for the whole test binary (the executable's symbols come first).
 * no_ipv6 = EAFNOSUPPORT makes socket(AF_INET6) fail (no IPv6 in the
 * kernel); EADDRNOTAVAIL makes bind() of an IPv6 address fail (IPv6
 * disabled by sysctl). 0 passes everything through.
 */
static int no_ipv6;

int socket(int domain, int type, int protocol)
{
	if (no_ipv6 == EAFNOSUPPORT && domain == AF_INET6) {
		errno = EAFNOSUPPORT;
		return -1;
	}
	return (int)syscall(SYS_socket, domain, type, protocol);
}

int bind(int fd, const struct sockaddr *sa, socklen_t len)
{
	if (no_ipv6 == EADDRNOTAVAIL && sa->sa_family == AF_INET6) {
		errno = EADDRNOTAVAIL;
		return -1;
	}
	return (int)syscall(SYS_bind, fd, sa, len);
}

static void test_split_hostport(void **state)
{
	char host[64];
	int port;

	(void)state;
	assert_int_equal(mu__split_hostport("127.0.0.1:9190", host, sizeof(host), &port), 0);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(port, 9190);
	/* split at the LAST colon, as TVM does; brackets dropped */
	assert_int_equal(mu__split_hostport("[::1]:9190", host, sizeof(host), &port), 0);
	assert_string_equal(host, "::1");
	assert_int_equal(mu__split_hostport("fe80::1:80", host, sizeof(host), &port), 0);
	assert_string_equal(host, "fe80::1");
	assert_int_equal(port, 80);
	assert_int_equal(mu__split_hostport("tracker.local:1", host, sizeof(host), &port), 0);
	assert_string_equal(host, "tracker.local");
	assert_int_equal(mu__split_hostport("nocolon", host, sizeof(host), &port), MU_EARG);
	assert_int_equal(mu__split_hostport(":9190", host, sizeof(host), &port), MU_EARG);
	assert_int_equal(mu__split_hostport("h:", host, sizeof(host), &port), MU_EARG);
	assert_int_equal(mu__split_hostport("h:70000", host, sizeof(host), &port), MU_EARG);
	assert_int_equal(mu__split_hostport("h:12x", host, sizeof(host), &port), MU_EARG);
	assert_int_equal(mu__split_hostport("averyveryverylonghostname:1", host, 8, &port), MU_EARG);
}

static void test_addr_text_unmaps_v4(void **state)
{
	struct sockaddr_in6 s6;
	char ip[MU_ADDRSTRLEN], hp[MU_ADDRSTRLEN];
	int port;

	(void)state;
	memset(&s6, 0, sizeof(s6));
	s6.sin6_family = AF_INET6;
	s6.sin6_port = htons(9090);
	inet_pton(AF_INET6, "::ffff:10.0.0.7", &s6.sin6_addr);
	mu__addr_text((struct sockaddr *)&s6, ip, sizeof(ip), &port);
	assert_string_equal(ip, "10.0.0.7");
	assert_int_equal(port, 9090);
	inet_pton(AF_INET6, "::1", &s6.sin6_addr);
	mu__addr_text((struct sockaddr *)&s6, ip, sizeof(ip), &port);
	assert_string_equal(ip, "::1");
	mu__hostport_text(ip, port, hp, sizeof(hp));
	assert_string_equal(hp, "[::1]:9090");
	mu__hostport_text("1.2.3.4", 5, hp, sizeof(hp));
	assert_string_equal(hp, "1.2.3.4:5");
}

static int listen_at(uv_loop_t *loop, uv_tcp_t *tcp, int port, int end,
                     int *bound)
{
	mu__listen_opts_t o = {"127.0.0.1", port, end, 1, 16};

	uv_tcp_init(loop, tcp);
	return mu__listen(tcp, &o, bound);
}

static void test_port_search_skips_busy_ports(void **state)
{
	uv_loop_t loop;
	uv_tcp_t a, b, c, d;
	int pa, pb, pc;

	(void)state;
	uv_loop_init(&loop);
	assert_int_equal(listen_at(&loop, &a, 0, 0, &pa), 0);
	assert_true(pa > 0);
	/* [pa, pa+3): pa is busy, so the next free one is chosen */
	if (listen_at(&loop, &b, pa, pa + 3, &pb) == 0) {
		assert_true(pb > pa && pb < pa + 3);
		uv_close((uv_handle_t *)&b, NULL);
	} else {
		uv_close((uv_handle_t *)&b, NULL); /* both neighbours taken */
	}
	/* a one-port range whose port is busy: MU_EBIND, nothing bound */
	assert_int_equal(listen_at(&loop, &c, pa, pa + 1, &pc), MU_EBIND);
	uv_close((uv_handle_t *)&c, NULL);
	/* port_end <= port is an empty range, as in TVM */
	assert_int_equal(listen_at(&loop, &d, pa + 1, pa + 1, &pc), MU_EBIND);
	uv_close((uv_handle_t *)&d, NULL);
	uv_close((uv_handle_t *)&a, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_listen_bad_host(void **state)
{
	uv_loop_t loop;
	uv_tcp_t a;
	mu__listen_opts_t o = {"no.such.host.invalid", 0, 0, 1, 16};
	int p;

	(void)state;
	uv_loop_init(&loop);
	uv_tcp_init(&loop, &a);
	assert_int_equal(mu__listen(&a, &o, &p), MU_ERESOLVE);
	/* an address this machine does not have: the errno, not a search */
	o.host = "192.0.2.1";
	assert_int_equal(mu__listen(&a, &o, &p), -EADDRNOTAVAIL);
	uv_close((uv_handle_t *)&a, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&loop), 0);
}

static int bound_family(uv_tcp_t *tcp)
{
	struct sockaddr_storage ss;
	int len = sizeof(ss);

	assert_int_equal(uv_tcp_getsockname(tcp, (struct sockaddr *)&ss, &len), 0);
	return ss.ss_family;
}

/* "::" listens dual stack; without IPv6 it falls back to 0.0.0.0 (spec §1). */
static void test_listen_v6_wildcard_falls_back_to_v4(void **state)
{
	static const int how[] = {0, EAFNOSUPPORT, EADDRNOTAVAIL};
	uv_loop_t loop;
	uv_tcp_t a, b;
	mu__listen_opts_t o = {"::", 0, 0, 1, 16};
	int i, p, fd;
	struct sockaddr_in s4;

	(void)state;
	for (i = 0; i < 3; i++) {
		no_ipv6 = how[i];
		uv_loop_init(&loop);
		uv_tcp_init(&loop, &a);
		o.host = "::";
		assert_int_equal(mu__listen(&a, &o, &p), 0);
		assert_int_equal(bound_family(&a), how[i] == 0 ? AF_INET6 : AF_INET);
		/* either way an IPv4 client gets through */
		fd = (int)syscall(SYS_socket, AF_INET, SOCK_STREAM, 0);
		memset(&s4, 0, sizeof(s4));
		s4.sin_family = AF_INET;
		s4.sin_port = htons((uint16_t)p);
		s4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		assert_int_equal(connect(fd, (struct sockaddr *)&s4, sizeof(s4)), 0);
		close(fd);
		/* only the wildcard falls back: a named IPv6 address fails */
		uv_tcp_init(&loop, &b);
		o.host = "::1";
		assert_int_equal(mu__listen(&b, &o, &p), how[i] == 0 ? 0 : -how[i]);
		no_ipv6 = 0;
		uv_close((uv_handle_t *)&a, NULL);
		uv_close((uv_handle_t *)&b, NULL);
		uv_run(&loop, UV_RUN_DEFAULT);
		assert_int_equal(uv_loop_close(&loop), 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_split_hostport),
		cmocka_unit_test(test_addr_text_unmaps_v4),
		cmocka_unit_test(test_port_search_skips_busy_ports),
		cmocka_unit_test(test_listen_bad_host),
		cmocka_unit_test(test_listen_v6_wildcard_falls_back_to_v4),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
