/* SPDX-License-Identifier: MIT */
/*
 * The one transport: every muster connection is a mu_stream_t, whatever
 * moves its bytes. A stream is a connected, non-blocking socket plus a
 * method table (mu__stream_ops_t: recv, sendv, shutdown, pending, free),
 * in the way of Redis's ConnectionType and curl's connection filters:
 * plain TCP (stream.c) and TLS (tls.c) are the two tables; the shared-
 * secret handshake (auth.c) is a phase every stream may go through before
 * its first byte of payload. Above it, core/conn.c drives streams from a
 * libuv loop (servers) and core/sock.c drives them with poll() and
 * deadlines (blocking clients and device sessions). Nothing else touches
 * the descriptor, so TLS, authentication and budgets are added here once.
 *
 * Every call here is non-blocking. A call that cannot go on returns
 * -EAGAIN and leaves in s->want what it waits for (MU__WANT_READ or
 * MU__WANT_WRITE: TLS may need to write while reading, and the reverse);
 * the caller polls the descriptor for that and calls again.
 */
#ifndef MU_CORE_STREAM_INT_H
#define MU_CORE_STREAM_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "muster/stream.h"
#include "core/buf_int.h"
#include "core/net_int.h"

#define MU__WANT_READ 1
#define MU__WANT_WRITE 2

typedef struct mu__auth_s mu__auth_t;

typedef struct {
	int version; /* 1 */
	const char *name;
	/* Read up to len bytes: 0 with *n > 0; MU_EEOF at the peer's orderly
	 * end; -EAGAIN; or an error. */
	int (*recv)(mu_stream_t *s, void *buf, size_t len, size_t *n);
	/* Write from iov[0..cnt): 0 with *n > 0 bytes taken (maybe fewer
	 * than all); -EAGAIN when none could be; MU_EEOF when the peer is
	 * gone; or an error. Never raises SIGPIPE. */
	int (*sendv)(mu_stream_t *s, const struct iovec *iov, int cnt, size_t *n);
	/* End the sending side after what was sent: 0, -EAGAIN, or an error. */
	int (*shutdown)(mu_stream_t *s);
	/* Bytes already received and decoded, readable without the socket. */
	size_t (*pending)(const mu_stream_t *s);
	/* Free the layer's state; the socket is closed by the caller. */
	void (*free)(mu_stream_t *s);
} mu__stream_ops_t;

/*
 * Invariants: fd is open and non-blocking until mu__stream_close; ops
 * never changes after the stream is made; auth is non-NULL exactly while
 * the shared-secret handshake runs (then recv and sendv run it first and
 * pass no payload until it is done).
 */
struct mu_stream_s {
	const mu__stream_ops_t *ops;
	int fd;
	int want;                 /* what the last -EAGAIN waits for */
	void *tls;                /* tls.c: its SSL */
	mu__auth_t *auth;         /* auth.c: the handshake while it runs */
	int authed;               /* the handshake completed */
	mu__buf_t back;           /* bytes put back (mu__stream_unread): read
	                           * before anything from the socket */
	char kind[16];            /* "tcp", "tls", "tcp+auth", "tls+auth" */
	char peer[MU_ADDRSTRLEN]; /* "ip:port" */
	char ip[MU_ADDRSTRLEN];
};

extern const mu__stream_ops_t mu__stream_tcp_ops;

/* The most bytes a stream holds back (mu__stream_unread). */
#define MU_STREAM_MAX_BACK (256u << 10)

/*
 * A plain TCP stream over fd (taken: closed on failure too). The socket
 * is made non-blocking; peer and ip are read from it. 0 or MU_ENOMEM.
 */
int mu__stream_tcp_new(int fd, mu_stream_t **out);

/* Non-blocking I/O through the stream's table and its handshake phase. */
int mu__stream_recv(mu_stream_t *s, void *buf, size_t len, size_t *n);
int mu__stream_sendv(mu_stream_t *s, const struct iovec *iov, int cnt, size_t *n);
int mu__stream_shutdown(mu_stream_t *s);

/*
 * Drive the handshakes (TLS, shared secret) without payload: 0 when done,
 * -EAGAIN (see s->want), or their error. Servers need not call it (the
 * first recv does it); clients call it through mu__sock_handshake so that
 * a refusal shows at connect time with its cause.
 */
int mu__stream_handshake(mu_stream_t *s);

/*
 * Put n bytes back in front of what the stream reads next (bytes a
 * handshake read past its end, or a handler's peek). At most max_back
 * bytes are ever held back. 0, MU_ETOOBIG or MU_ENOMEM.
 */
int mu__stream_unread(mu_stream_t *s, const void *buf, size_t n);

/* Readable without waiting on the socket: bytes put back or decoded. */
size_t mu__stream_pending(const mu_stream_t *s);

/* poll(2) events that the stream's last -EAGAIN waits for. */
short mu__stream_poll_events(const mu_stream_t *s);

/*
 * Make every further read and write fail (shutdown(SHUT_RDWR) on the
 * socket). The one call that may come from another thread than the
 * stream's user: a server ends a session under its handler with it.
 */
void mu__stream_abort(mu_stream_t *s);

/* The socket, for poll sets inside the library only. */
int mu__stream_fd(const mu_stream_t *s);

/* Free the layers and close the socket. NULL is a no-op. */
void mu__stream_close(mu_stream_t *s);

/* Recompute s->kind from its table and handshake. */
void mu__stream_set_kind(mu_stream_t *s);

#endif
