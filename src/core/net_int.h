/* SPDX-License-Identifier: MIT */
/*
 * Listening sockets for the libuv servers, and address text.
 *
 * mu__listen() creates the socket itself (rather than uv_tcp_bind) because
 * libuv always sets SO_REUSEADDR and reports EADDRINUSE only at listen time;
 * TVM's port search needs both under our control.
 */
#ifndef MU_CORE_NET_INT_H
#define MU_CORE_NET_INT_H

#include <netinet/in.h>
#include <sys/socket.h>
#include <uv.h>

/* "ip" text of any address, plus room for a port: "[v6]:65535". */
#define MU_ADDRSTRLEN (INET6_ADDRSTRLEN + 8)

typedef struct {
	const char *host; /* name or literal; "" or NULL = all IPv4 addresses */
	int port;         /* first port; 0 = let the kernel pick */
	int port_end;     /* exclusive, as TVM: <= port is an empty range */
	int reuse_addr;   /* set SO_REUSEADDR before bind */
	int backlog;      /* listen(2) backlog */
} mu__listen_opts_t;

/*
 * Bind and listen on the first port of [port, port_end) that is not in use,
 * then hand the socket to `tcp` (already uv_tcp_init'ed on its loop). Only
 * EADDRINUSE moves on to the next port; any other error ends the search.
 * A host of "::" (the IPv6 wildcard, dual stack: IPv4 peers arrive as
 * ::ffff:a.b.c.d) falls back to 0.0.0.0 when IPv6 is unavailable
 * (EAFNOSUPPORT, EPROTONOSUPPORT, EPFNOSUPPORT or EADDRNOTAVAIL).
 * *bound_port gets the port. Returns 0, MU_EBIND (every port in use),
 * MU_ERESOLVE, or -errno.
 */
int mu__listen(uv_tcp_t *tcp, const mu__listen_opts_t *o, int *bound_port);

/* The same, handing back the listening socket (blocking, close-on-exec). */
int mu__listen_fd(const mu__listen_opts_t *o, int *fd, int *bound_port);

/*
 * IP text and port of a socket address. IPv4-mapped IPv6 addresses
 * (::ffff:a.b.c.d, what a dual-stack listener sees) come out as plain IPv4,
 * since that is the address other peers can dial.
 */
void mu__addr_text(const struct sockaddr *sa, char *ip, size_t iplen,
                   int *port);

/* The peer's IP and port of a connected libuv TCP handle. 0 or -errno. */
int mu__tcp_peer(const uv_tcp_t *tcp, char *ip, size_t iplen, int *port);

/* "ip:port", or "[ip]:port" for IPv6. */
void mu__hostport_text(const char *ip, int port, char *out, size_t outlen);

/*
 * Split "HOST:PORT" at the last colon; "[v6]:port" loses its brackets.
 * 0 or MU_EARG (no colon, empty host, bad port).
 */
int mu__split_hostport(const char *s, char *host, size_t hostlen, int *port);

/* Raise the soft open-files limit to the hard limit (servers with many peers). */
/* 1 when host is a wildcard (0.0.0.0, ::, or empty): not an address to hand out. */
int mu__is_wildcard(const char *host);

/*
 * The local address (text, into ip) this machine sends from to reach
 * host:port: the source address of the route the kernel picks, learned
 * from a datagram socket's connect() without sending anything. The same
 * address a TCP connection to host:port gets. 0, MU_ERESOLVE, -errno.
 */
int mu__route_source(const char *host, int port, char *ip, size_t iplen);

void mu__raise_nofile_limit(void);

#endif
