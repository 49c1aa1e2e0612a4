/* SPDX-License-Identifier: MIT */
/*
 * Internals of the TCPStore client: what its connection (client.c) gives
 * its requests (requests.c), and for the fuzz driver and unit tests a
 * client on a connection the caller already holds, so the real client
 * code can be run against replies scripted in advance.
 */
#ifndef MU_STORE_CLIENT_INT_H
#define MU_STORE_CLIENT_INT_H

#include <stdint.h>

#include "muster/store.h"
#include "core/buf_int.h"
#include "core/sock_int.h"
#include "store/proto_int.h"

struct mu_store_client_s {
	mu_store_client_opts_t o;
	char host[256];
	mu_stream_t *st;        /* NULL: reconnect on the next call */
	int reused;             /* fd is from an earlier call and nothing of
	                         * this call has been sent on it yet */
	mu__store_dialect_t d;
	int fd_given;           /* fd came from mu__store_client_from_fd:
	                         * never redialed, never judged idle */
};

/* A connection for a new call: the kept one if it is still good (a
 * readable socket between calls was closed or holds bytes nobody asked
 * for), else a new one. 0 or why none could be had. */
int mu__store_conn_ready(mu_store_client_t *c);
/* Send b (freed) unless rc already failed; a request that found the
 * kept connection gone is sent once more on a new one. */
int mu__store_conn_send(mu_store_client_t *c, mu__buf_t *b, int rc);
/* rc, the connection dropped first when rc is a failure. */
int mu__store_conn_broken(mu_store_client_t *c, int rc);
/* A new connection (and v2's handshake) within the client's timeout. */
int mu__store_conn_redial(mu_store_client_t *c);

/*
 * A client on fd, a connected stream socket (a socketpair end will do),
 * whose ownership passes to the client in every case: it is made
 * non-blocking, closed by mu_store_client_close, or closed here on
 * failure. o->dialect must be V1 or V2 (AUTO would need a redial to fall
 * back: MU_EARG); v2 does its VALIDATE + PING on fd first. o->host and
 * o->port are not used: once fd has failed, every later call returns
 * -ENOTCONN instead of redialing. Nor is fd judged idle between calls
 * (its peer may have queued every reply ahead, as a test script does), so
 * replies are read where they stand, in order.
 */
int mu__store_client_from_fd(const mu_store_client_opts_t *o, int fd,
                             mu_store_client_t **out);

/* The nonce a v2 client's PING carries (the server echoes it). */
uint32_t mu__store_client_nonce(void);

#endif
