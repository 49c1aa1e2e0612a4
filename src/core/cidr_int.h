/* SPDX-License-Identifier: MIT */
/*
 * Address allow-lists ("--allow 10.0.0.0/8,::1,192.168.1.7"): parsed once
 * when a server starts, matched against every accepted peer (accept.c).
 * An IPv4 peer reached through an IPv6 socket (::ffff:a.b.c.d) matches
 * the IPv4 entries.
 */
#ifndef MU_CORE_CIDR_INT_H
#define MU_CORE_CIDR_INT_H

#include <stddef.h>
#include <sys/socket.h>

#define MU_CIDR_MAX 64 /* entries in one list */

typedef struct {
	int family;              /* AF_INET or AF_INET6 */
	unsigned char addr[16];  /* network order, host bits cleared */
	int bits;                /* prefix length */
} mu__cidr_t;

typedef struct {
	mu__cidr_t e[MU_CIDR_MAX];
	size_t n;                /* 0: the list allows everyone */
} mu__allow_t;

/*
 * Parse text (comma-separated ADDR or ADDR/BITS; NULL or "" allows
 * everyone) into *a. 0, or MU_EARG with err saying which entry is wrong.
 */
int mu__allow_parse(const char *text, mu__allow_t *a, char *err, size_t errlen);

/* 1 when sa (an accepted peer's address) is allowed by a, else 0. */
int mu__allow_match(const mu__allow_t *a, const struct sockaddr *sa);

#endif
