/* SPDX-License-Identifier: MIT */
/*
 * Blocking I/O on streams with deadlines, for the client APIs (tracker,
 * store, session handshakes, the pipeline's coordinators) and the device
 * server's sessions. Every call takes an absolute deadline from
 * time_int.h; nothing here waits past it. Reads and writes go through the
 * stream's table (stream_int.h) without blocking, and waits happen in
 * poll() for the time left, so a deadline is exact even mid-transfer and
 * against a peer that stopped reading, whatever the stream runs on (TLS
 * included).
 */
#ifndef MU_CORE_SOCK_INT_H
#define MU_CORE_SOCK_INT_H

#include <stddef.h>
#include <stdint.h>

#include "core/stream_int.h"

/*
 * Connect to host:port (name or literal; every resolved address is tried
 * in turn). *fd gets a connected, non-blocking, close-on-exec socket with
 * TCP_NODELAY. 0, MU_ERESOLVE, -ETIMEDOUT, or the last address's -errno.
 * Resolving a name is the one wait bounded by the system resolver's own
 * timeouts (resolv.conf) rather than the deadline; an IP literal never
 * waits there. A deadline already past still makes one attempt, so a
 * caller retrying refused connects learns the last real cause.
 */
int mu__sock_connect_fd(const char *host, int port, int64_t deadline, int *fd);

/*
 * Connect and secure: a stream to host:port under sec (NULL: plain TCP),
 * with its TLS and shared-secret handshakes done before the deadline (the
 * server's certificate checked against host). 0, or the connect error,
 * MU_ETLS, MU_EAUTH (both logged with their cause), -ETIMEDOUT.
 */
int mu__sock_connect(const char *host, int port, const mu_secure_t *sec,
                     int64_t deadline, mu_stream_t **out);

/* Finish the stream's handshakes, waiting until the deadline. */
int mu__sock_handshake(mu_stream_t *s, int64_t deadline);

/* Send all n bytes. 0, -ETIMEDOUT, MU_EEOF (peer gone) or an error. */
int mu__sock_send_all(mu_stream_t *s, const void *buf, size_t n, int64_t deadline);

/*
 * Receive exactly n bytes. 0, -ETIMEDOUT, MU_EEOF (orderly close before n
 * bytes) or an error. On failure some bytes may have been consumed.
 */
int mu__sock_recv_all(mu_stream_t *s, void *buf, size_t n, int64_t deadline);

/* Receive what is there, 1..len bytes (*n), waiting until the deadline. */
int mu__sock_recv_some(mu_stream_t *s, void *buf, size_t len, size_t *n,
                       int64_t deadline);

/*
 * Wait until s is readable (data, EOF, or decoded bytes held). 0,
 * -ETIMEDOUT or -errno. Used to block on a reply whose arrival time is
 * unknown (a tracker REQUEST).
 */
int mu__sock_wait_readable(mu_stream_t *s, int64_t deadline);

/*
 * Send every byte of iov[0..n) (which is consumed as it goes). Waits end
 * at the deadline, and also when the peer takes nothing for idle_ms (< 0:
 * no such limit), so a huge transfer may take long as long as it moves.
 * 0, -ETIMEDOUT, MU_EEOF.
 */
int mu__sock_sendv(mu_stream_t *s, struct iovec *iov, int n, int64_t deadline,
                   int idle_ms);

/*
 * A listening socket on host:port (port 0: any; host NULL: "0.0.0.0"),
 * non-blocking and close-on-exec, with SO_REUSEADDR. *bound_port gets the
 * port. 0, MU_ERESOLVE, MU_EBIND (address in use) or -errno.
 */
int mu__sock_listen(const char *host, int port, int backlog, int *fd,
                    int *bound_port);

/*
 * May a connection idle between exchanges be written on? 1 when nothing is
 * readable: where the peer owes nothing between requests, a readable socket
 * means it closed, reset, or sent bytes nobody asked for.
 */
int mu__sock_idle_ok(mu_stream_t *s);

/*
 * Wait until any of s[0..n) is readable (data, EOF, or bytes held in the
 * stream), at most timeout_ms (< 0: no limit). ready[i] gets 1 for each
 * that is. The number ready (0: the time passed), or -errno.
 */
int mu__sock_poll(mu_stream_t *const *s, int n, char *ready, int timeout_ms);

/* Close the stream (NULL: no-op). */
void mu__sock_close(mu_stream_t *s);

#endif
