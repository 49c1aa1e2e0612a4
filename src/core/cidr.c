/* SPDX-License-Identifier: MIT */
/*
 * Address allow-lists; see cidr_int.h. Addresses are parsed by
 * inet_pton, so only numeric forms are taken: a name in an allow-list
 * would be resolved once and then silently go stale.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "muster/common.h"
#include "core/cidr_int.h"

static void clear_host_bits(mu__cidr_t *c)
{
	int len = c->family == AF_INET ? 4 : 16;

	for (int i = 0; i < len; i++) {
		int keep = c->bits - 8 * i;

		if (keep <= 0)
			c->addr[i] = 0;
		else if (keep < 8)
			c->addr[i] &= (unsigned char)(0xff << (8 - keep));
	}
}

static int parse_one(const char *s, size_t n, mu__cidr_t *c)
{
	char buf[64], *slash, *end;
	long bits;

	if (n == 0 || n >= sizeof(buf))
		return MU_EARG;
	memcpy(buf, s, n);
	buf[n] = '\0';
	slash = strchr(buf, '/');
	if (slash != NULL)
		*slash = '\0';
	memset(c, 0, sizeof(*c));
	if (inet_pton(AF_INET, buf, c->addr) == 1)
		c->family = AF_INET;
	else if (inet_pton(AF_INET6, buf, c->addr) == 1)
		c->family = AF_INET6;
	else
		return MU_EARG;
	c->bits = c->family == AF_INET ? 32 : 128;
	if (slash != NULL) {
		bits = strtol(slash + 1, &end, 10);
		if (slash[1] == '\0' || *end != '\0' || bits < 0 || bits > c->bits)
			return MU_EARG;
		c->bits = (int)bits;
	}
	clear_host_bits(c);
	return 0;
}

int mu__allow_parse(const char *text, mu__allow_t *a, char *err, size_t errlen)
{
	const char *p = text;

	memset(a, 0, sizeof(*a));
	while (p != NULL && *p != '\0') {
		size_t n = strcspn(p, ",");

		while (n > 0 && p[0] == ' ') {
			p++;
			n--;
		}
		if (a->n == MU_CIDR_MAX || parse_one(p, n, &a->e[a->n]) != 0) {
			if (err != NULL && errlen > 0 && a->n == MU_CIDR_MAX)
				snprintf(err, errlen, "--allow: more than %d entries", MU_CIDR_MAX);
			else if (err != NULL && errlen > 0)
				snprintf(err, errlen, "--allow: \"%.*s\" is not an address or "
				         "ADDRESS/BITS", (int)(n > 60 ? 60 : n), p);
			memset(a, 0, sizeof(*a));
			return MU_EARG;
		}
		a->n++;
		p += n;
		if (*p == ',')
			p++;
	}
	return 0;
}

static int in_prefix(const mu__cidr_t *c, const unsigned char *addr)
{
	mu__cidr_t probe = *c;

	memcpy(probe.addr, addr, c->family == AF_INET ? 4 : 16);
	clear_host_bits(&probe);
	return memcmp(probe.addr, c->addr, c->family == AF_INET ? 4 : 16) == 0;
}

int mu__allow_match(const mu__allow_t *a, const struct sockaddr *sa)
{
	unsigned char v4[4], v6[16];
	int have4 = 0, have6 = 0;

	if (a->n == 0)
		return 1;
	if (sa->sa_family == AF_INET) {
		memcpy(v4, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		have4 = 1;
	} else if (sa->sa_family == AF_INET6) {
		const struct in6_addr *x = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		memcpy(v6, x, 16);
		have6 = 1;
		if (IN6_IS_ADDR_V4MAPPED(x)) {
			memcpy(v4, v6 + 12, 4);
			have4 = 1;
		}
	}
	for (size_t i = 0; i < a->n; i++)
		if ((a->e[i].family == AF_INET && have4 && in_prefix(&a->e[i], v4)) ||
		    (a->e[i].family == AF_INET6 && have6 && in_prefix(&a->e[i], v6)))
			return 1;
	return 0;
}
