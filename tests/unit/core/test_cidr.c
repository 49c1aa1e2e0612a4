/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/core/cidr.c: --allow lists. Prefixes match their
 * network and nothing past it, host bits given in a prefix are ignored,
 * an IPv4 peer seen through an IPv6 socket matches IPv4 entries, an
 * empty list allows everyone, and bad entries are refused by name.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <netinet/in.h>
#include <string.h>

#include "mu_test.h"

#include "core/cidr_int.h"

static int allowed(const mu__allow_t *a, const char *ip)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;

	memset(&ss, 0, sizeof(ss));
	if (inet_pton(AF_INET, ip, &v4->sin_addr) == 1)
		v4->sin_family = AF_INET;
	else if (inet_pton(AF_INET6, ip, &v6->sin6_addr) == 1)
		v6->sin6_family = AF_INET6;
	else
		fail_msg("bad test address %s", ip);
	return mu__allow_match(a, (struct sockaddr *)&ss);
}

static void test_prefixes(void **state)
{
	mu__allow_t a;

	(void)state;
	assert_int_equal(mu__allow_parse("10.1.2.3/8, 192.168.7.7,fd00::/8", &a, NULL, 0), 0);
	assert_int_equal(a.n, 3);
	assert_true(allowed(&a, "10.0.0.1"));
	assert_true(allowed(&a, "10.255.255.255"));
	assert_false(allowed(&a, "11.0.0.1"));
	assert_true(allowed(&a, "192.168.7.7"));
	assert_false(allowed(&a, "192.168.7.8"));
	assert_true(allowed(&a, "fd12::1"));
	assert_false(allowed(&a, "fe80::1"));
	assert_true(allowed(&a, "::ffff:10.9.9.9"));   /* IPv4 through an IPv6 socket */
	assert_false(allowed(&a, "::ffff:127.0.0.1"));
	assert_false(allowed(&a, "127.0.0.1"));
}

static void test_odd_prefix_lengths(void **state)
{
	mu__allow_t a;

	(void)state;
	assert_int_equal(mu__allow_parse("172.16.0.0/12,2001:db8::/33", &a, NULL, 0), 0);
	assert_true(allowed(&a, "172.31.255.1"));
	assert_false(allowed(&a, "172.32.0.1"));
	assert_true(allowed(&a, "2001:db8:7fff::1"));
	assert_false(allowed(&a, "2001:db8:8000::1"));
	assert_int_equal(mu__allow_parse("0.0.0.0/0", &a, NULL, 0), 0);
	assert_true(allowed(&a, "8.8.8.8"));
	assert_false(allowed(&a, "::1"));
}

static void test_empty_allows_all(void **state)
{
	mu__allow_t a;

	(void)state;
	assert_int_equal(mu__allow_parse(NULL, &a, NULL, 0), 0);
	assert_true(allowed(&a, "203.0.113.9"));
	assert_int_equal(mu__allow_parse("", &a, NULL, 0), 0);
	assert_true(allowed(&a, "::1"));
}

static void test_bad_entries(void **state)
{
	mu__allow_t a;
	char err[128];
	char many[64 * 10 + 16] = "";

	(void)state;
	assert_int_equal(mu__allow_parse("10.0.0.0/33", &a, err, sizeof(err)), MU_EARG);
	assert_non_null(strstr(err, "10.0.0.0/33"));
	assert_int_equal(mu__allow_parse("localhost", &a, err, sizeof(err)), MU_EARG);
	assert_non_null(strstr(err, "localhost"));
	assert_int_equal(mu__allow_parse("10.0.0.1/", &a, err, sizeof(err)), MU_EARG);
	assert_int_equal(mu__allow_parse("10.0.0.1,,", &a, err, sizeof(err)), MU_EARG);
	assert_int_equal(mu__allow_parse("::1/129", &a, err, sizeof(err)), MU_EARG);
	assert_int_equal(a.n, 0); /* a failed parse leaves an empty list */
	for (int i = 0, k = 0; i <= MU_CIDR_MAX; i++)
		k += snprintf(many + k, sizeof(many) - (size_t)k, "%s10.0.0.1", i ? "," : "");
	assert_int_equal(mu__allow_parse(many, &a, err, sizeof(err)), MU_EARG);
	assert_non_null(strstr(err, "more than"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_prefixes),
		cmocka_unit_test(test_odd_prefix_lengths),
		cmocka_unit_test(test_empty_allows_all),
		cmocka_unit_test(test_bad_entries),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
