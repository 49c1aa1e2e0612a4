/* SPDX-License-Identifier: MIT */
/*
 * Listening with TVM's port search (and, for the IPv6 wildcard, a fall
 * back to IPv4 on hosts without IPv6), and address formatting.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "muster/common.h"
#include "core/net_int.h"

static int resolve_passive(const char *host, struct sockaddr_storage *ss,
                           socklen_t *sslen)
{
	struct addrinfo hints, *res = NULL;
	int rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	if (host != NULL && host[0] == '\0')
		host = NULL;
	if (host == NULL) {
		hints.ai_family = AF_INET; /* TVM's default host is 0.0.0.0 */
		host = "0.0.0.0";
	}
	rc = getaddrinfo(host, "0", &hints, &res);
	if (rc != 0 || res == NULL)
		return MU_ERESOLVE;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*sslen = (socklen_t)res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

static void set_port(struct sockaddr_storage *ss, int port)
{
	if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
	else
		((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
}

static int open_listener(struct sockaddr_storage *ss, socklen_t sslen,
                         const mu__listen_opts_t *o, int *fdout)
{
	int fd, one = 1, zero = 0, err;

	fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (o->reuse_addr)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* "::" should take IPv4 peers too, whatever the system default. */
	if (ss->ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	if (bind(fd, (struct sockaddr *)ss, sslen) != 0 ||
	    listen(fd, o->backlog > 0 ? o->backlog : SOMAXCONN) != 0) {
		err = errno; /* read before close() can clobber it */
		close(fd);
		return -err;
	}
	*fdout = fd;
	return 0;
}

/*
 * The IPv6 wildcard failed in a way that says IPv6 itself is missing (no
 * IPv6 in the kernel, or disabled): switch ss to the IPv4 wildcard, as
 * torch's servers do (spec §1: "::" first, then 0.0.0.0). 1 when switched.
 */
static int v4_fallback(int err, struct sockaddr_storage *ss, socklen_t *sslen)
{
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
	struct sockaddr_in s4;

	if (err != -EAFNOSUPPORT && err != -EPROTONOSUPPORT &&
	    err != -EADDRNOTAVAIL && err != -EPFNOSUPPORT)
		return 0;
	if (ss->ss_family != AF_INET6 ||
	    !IN6_IS_ADDR_UNSPECIFIED(&s6->sin6_addr))
		return 0;
	memset(&s4, 0, sizeof(s4));
	s4.sin_family = AF_INET;
	s4.sin_port = s6->sin6_port;
	s4.sin_addr.s_addr = htonl(INADDR_ANY);
	memset(ss, 0, sizeof(*ss));
	memcpy(ss, &s4, sizeof(s4));
	*sslen = sizeof(s4);
	return 1;
}

int mu__listen_fd(const mu__listen_opts_t *o, int *fdout, int *bound_port)
{
	struct sockaddr_storage ss;
	socklen_t sslen;
	int port, end, fd = -1, rc;

	if (o->port < 0 || o->port > 65535)
		return MU_EARG;
	rc = resolve_passive(o->host, &ss, &sslen);
	if (rc != 0)
		return rc;
	/* [port, port_end) as TVM searches it, so an empty range binds
	 * nothing; port 0 (the kernel picks) is a single try */
	end = o->port == 0 ? 1 : o->port_end;
	if (end > 65536)
		end = 65536;
	rc = MU_EBIND;
	for (port = o->port; port < end; port++) {
		set_port(&ss, port);
		rc = open_listener(&ss, sslen, o, &fd);
		if (rc != 0 && v4_fallback(rc, &ss, &sslen))
			rc = open_listener(&ss, sslen, o, &fd); /* and later ports too */
		if (rc != -EADDRINUSE)
			break;
		rc = MU_EBIND;
	}
	if (rc != 0)
		return rc;
	/* Port 0 asked the kernel to choose: read back what it chose. */
	sslen = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &sslen) == 0)
		mu__addr_text((struct sockaddr *)&ss, NULL, 0, &port);
	*bound_port = port;
	*fdout = fd;
	return 0;
}

int mu__listen(uv_tcp_t *tcp, const mu__listen_opts_t *o, int *bound_port)
{
	int fd, rc = mu__listen_fd(o, &fd, bound_port);

	if (rc != 0)
		return rc;
	rc = uv_tcp_open(tcp, fd);
	if (rc != 0)
		close(fd);
	return rc;
}

void mu__addr_text(const struct sockaddr *sa, char *ip, size_t iplen,
                   int *port)
{
	char tmp[INET6_ADDRSTRLEN] = "?";
	int p = 0;

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;

		inet_ntop(AF_INET, &s4->sin_addr, tmp, sizeof(tmp));
		p = ntohs(s4->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

		if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
			inet_ntop(AF_INET, &s6->sin6_addr.s6_addr[12], tmp,
			          sizeof(tmp));
		else
			inet_ntop(AF_INET6, &s6->sin6_addr, tmp, sizeof(tmp));
		p = ntohs(s6->sin6_port);
	}
	if (ip != NULL && iplen > 0)
		snprintf(ip, iplen, "%s", tmp);
	if (port != NULL)
		*port = p;
}

int mu__tcp_peer(const uv_tcp_t *tcp, char *ip, size_t iplen, int *port)
{
	struct sockaddr_storage ss;
	int len = sizeof(ss);
	int rc = uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &len);

	if (rc != 0)
		return rc;
	mu__addr_text((struct sockaddr *)&ss, ip, iplen, port);
	return 0;
}

void mu__hostport_text(const char *ip, int port, char *out, size_t outlen)
{
	if (strchr(ip, ':') != NULL)
		snprintf(out, outlen, "[%s]:%d", ip, port);
	else
		snprintf(out, outlen, "%s:%d", ip, port);
}

int mu__split_hostport(const char *s, char *host, size_t hostlen, int *port)
{
	const char *colon = strrchr(s, ':');
	size_t hlen;
	char *end;
	long p;

	if (colon == NULL || colon == s)
		return MU_EARG;
	hlen = (size_t)(colon - s);
	if (s[0] == '[' && hlen >= 2 && s[hlen - 1] == ']') {
		s++;
		hlen -= 2;
	}
	if (hlen == 0 || hlen >= hostlen)
		return MU_EARG;
	errno = 0;
	p = strtol(colon + 1, &end, 10);
	if (errno != 0 || end == colon + 1 || *end != '\0' || p < 0 || p > 65535)
		return MU_EARG;
	memcpy(host, s, hlen);
	host[hlen] = '\0';
	*port = (int)p;
	return 0;
}

int mu__is_wildcard(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;

	if (host == NULL || host[0] == '\0')
		return 1;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return a4.s_addr == htonl(INADDR_ANY);
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_UNSPECIFIED(&a6);
	return 0;
}

int mu__route_source(const char *host, int port, char *ip, size_t iplen)
{
	struct addrinfo hints, *res = NULL, *ai;
	struct sockaddr_storage ss;
	socklen_t sslen;
	char svc[16];
	int rc = MU_ERESOLVE;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_DGRAM;
	snprintf(svc, sizeof(svc), "%d", port);
	if (getaddrinfo(host, svc, &hints, &res) != 0)
		return MU_ERESOLVE;
	/* connect() on a datagram socket only picks the route (and with it
	 * the source address); nothing is sent */
	for (ai = res; ai != NULL && rc != 0; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, SOCK_DGRAM, 0);

		if (fd < 0)
			continue;
		sslen = sizeof(ss);
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
		    getsockname(fd, (struct sockaddr *)&ss, &sslen) == 0) {
			mu__addr_text((struct sockaddr *)&ss, ip, iplen, NULL);
			rc = 0;
		} else {
			rc = -errno;
		}
		close(fd);
	}
	freeaddrinfo(res);
	return rc;
}

void mu__raise_nofile_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}
