/* SPDX-License-Identifier: MIT */
/*
 * A session: a stream past the TVM handshake, on either side.
 */
#ifndef MU_SERVER_SESSION_INT_H
#define MU_SERVER_SESSION_INT_H

#include "muster/server.h"
#include "core/buf_int.h"
#include "core/net_int.h"
#include "core/stream_int.h"

struct mu_session_s {
	mu_stream_t *st;              /* the session owns it */
	char peer[MU_ADDRSTRLEN];     /* "ip:port" of the other side */
	double timeout;               /* server side: client's -timeout */
	int wait_limit_ms;            /* server side: the server's
	                               * session_timeout, the longest any
	                               * wait on the client lasts; -1: none */
	int limit_passed;             /* the client kept us waiting past it:
	                               * the socket is shut down */
	char *server_key;             /* client side: "server:KEY" */
};

/*
 * A session around st (taken, also on failure), with `early` bytes that
 * came behind the handshake (read first). NULL when out of memory.
 */
mu_session_t *mu__session_new(mu_stream_t *st, double timeout,
                              const void *early, size_t nearly);
/* Close the stream and free. */
void mu__session_free(mu_session_t *s);

#endif
