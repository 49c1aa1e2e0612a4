/* SPDX-License-Identifier: MIT */
/*
 * Internals of the TCPStore client (client.c) for the fuzz driver and
 * unit tests: a client on a connection the caller already holds, so the
 * real client code can be run against replies scripted in advance.
 */
#ifndef MU_STORE_CLIENT_INT_H
#define MU_STORE_CLIENT_INT_H

#include <stdint.h>

#include "muster/store.h"

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
