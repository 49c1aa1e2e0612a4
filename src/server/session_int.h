/* SPDX-License-Identifier: MIT */
/*
 * A session: a connected socket past the TVM handshake, on either side.
 */
#ifndef MU_SERVER_SESSION_INT_H
#define MU_SERVER_SESSION_INT_H

#include "muster/server.h"
#include "core/buf_int.h"
#include "core/net_int.h"

struct mu_session_s {
	int fd;                       /* blocking; the session owns it */
	char peer[MU_ADDRSTRLEN];     /* "ip:port" of the other side */
	double timeout;               /* server side: client's -timeout */
	int wait_limit_ms;            /* server side: the server's
	                               * session_timeout, the longest any
	                               * wait on the client lasts; -1: none */
	int limit_passed;             /* the client kept us waiting past it:
	                               * the socket is shut down */
	char *server_key;             /* client side: "server:KEY" */
	mu__buf_t early;              /* bytes that came with the handshake */
};

/* A session around fd (taken), with `early` bytes already read. */
mu_session_t *mu__session_new(int fd, const char *peer, double timeout,
                              const void *early, size_t nearly);
/* Close the fd (if still open) and free. */
void mu__session_free(mu_session_t *s);

#endif
