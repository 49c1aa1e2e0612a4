/* SPDX-License-Identifier: MIT */
/*
 * Blocking client sockets with deadlines, for the client APIs (tracker,
 * store, session handshakes). Every call takes an absolute deadline from
 * time_int.h; nothing here waits past it. Sends and receives never block
 * in the kernel (MSG_DONTWAIT, so a blocking fd is fine too) and waits
 * happen in poll() for the time left, so a deadline is exact even
 * mid-transfer and against a peer that stopped reading.
 */
#ifndef MU_CORE_SOCK_INT_H
#define MU_CORE_SOCK_INT_H

#include <stddef.h>
#include <stdint.h>

/*
 * Connect to host:port (name or literal; every resolved address is tried
 * in turn). *fd gets a connected, non-blocking, close-on-exec socket with
 * TCP_NODELAY. 0, MU_ERESOLVE, -ETIMEDOUT, or the last address's -errno.
 * Resolving a name is the one wait bounded by the system resolver's own
 * timeouts (resolv.conf) rather than the deadline; an IP literal never
 * waits there. A deadline already past still makes one attempt, so a
 * caller retrying refused connects learns the last real cause.
 */
int mu__sock_connect(const char *host, int port, int64_t deadline, int *fd);

/* Send all n bytes. 0, -ETIMEDOUT, MU_EEOF (peer gone) or -errno. */
int mu__sock_send_all(int fd, const void *buf, size_t n, int64_t deadline);

/*
 * Receive exactly n bytes. 0, -ETIMEDOUT, MU_EEOF (orderly close before n
 * bytes) or -errno. On failure some bytes may have been consumed.
 */
int mu__sock_recv_all(int fd, void *buf, size_t n, int64_t deadline);

/*
 * Wait until fd is readable (data or EOF). 0, -ETIMEDOUT or -errno. Used to
 * block on a reply whose arrival time is unknown (a tracker REQUEST).
 */
int mu__sock_wait_readable(int fd, int64_t deadline);

/*
 * Send every byte of iov[0..n) (which is consumed as it goes) with
 * sendmsg, never raising SIGPIPE. Waits end at the deadline, and also when
 * the peer takes nothing for idle_ms (< 0: no such limit), so a huge
 * transfer may take long as long as it moves. 0, -ETIMEDOUT, MU_EEOF.
 */
struct iovec;
int mu__sock_sendv(int fd, struct iovec *iov, int n, int64_t deadline,
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
int mu__sock_idle_ok(int fd);

void mu__sock_close(int fd);

#endif
