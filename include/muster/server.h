/* SPDX-License-Identifier: MIT */
/*
 * The device side of the tracker protocol, and sessions.
 *
 * A server (mu_server_start) listens for sessions, registers its key with a
 * tracker the way TVM's RPC servers do, and keeps that registration alive
 * forever: a tracker that goes away is retried with capped backoff and the
 * server registers again as soon as it is back. A client that completes the
 * TVM handshake with the current matchkey gets a session, run by the
 * caller's handler on a thread of its own; sessions run one at a time, as a
 * device serves one job at a time.
 *
 * A client gets a session with mu_session_request (ask a tracker for a
 * device of a key, then handshake, retrying like TVM's
 * TrackerSession.request) or mu_session_connect (handshake with a known
 * server). Either way the result is a stream (muster/stream.h) past the
 * handshake; no file descriptor is handed out.
 *
 * With a mu_secure_t (opts.sec, and the sec argument of the client calls)
 * the session's connection is TLS and/or opens with the shared-secret
 * handshake before TVM's; a server so configured refuses every client
 * that is not, and the reverse. That protects muster's own sessions, at
 * the price of TVM's clients, which speak neither.
 */
#ifndef MUSTER_SERVER_H
#define MUSTER_SERVER_H

#include <stddef.h>

#include "muster/common.h"
#include "muster/metrics.h"
#include "muster/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mu_server_s mu_server_t;
typedef struct mu_session_s mu_session_t;

/*
 * Runs one session, on a thread the server made for it. Return when the
 * session is over; the server then closes the stream and offers itself
 * again. When the server stops, or the client's -timeout passes, the
 * stream is shut down under the handler, so its reads and writes fail and
 * it should return. So it is too when a wait in mu_session_recv or
 * mu_session_send on the client outlasts the server's session_timeout; a
 * handler doing its own I/O on mu_session_stream should wait no longer
 * than mu_session_wait_limit_ms.
 */
typedef void (*mu_session_cb)(mu_session_t *s, void *ud);

typedef struct {
	size_t struct_size;       /* set by mu_server_opts_init */
	const char *host;         /* address to listen on; default "0.0.0.0" */
	int port;                 /* default 9090; 0 = any */
	int port_end;             /* exclusive; default 9199 */
	const char *tracker_host; /* NULL: standalone, the matchkey is the key */
	int tracker_port;
	const char *key;          /* device key, e.g. "rasp"; may be "" only standalone */
	const char *custom_addr;  /* address the tracker hands to clients */
	int silent;               /* log only warnings and errors */
	double handshake_timeout; /* seconds to complete a handshake; default 10 */
	/*
	 * Seconds a session may keep the server waiting on its client: sending
	 * nothing while the server waits for its next bytes, or taking nothing
	 * while the server sends. Past it the session ends, so a silent or
	 * non-reading client cannot hold the device (sessions run one at a
	 * time). Time the handler spends computing does not count, and the
	 * client's own -timeout still bounds the whole session, as in TVM.
	 * Default 300; 0: no limit.
	 */
	double session_timeout;
	double poll_period;       /* seconds between GET_PENDING_MATCHKEYS; 2 */
	double retry_max;         /* backoff cap when the tracker is gone; 8 s */
	int defer_register;       /* bind and serve, but register only once
	                           * mu_server_register is called */
	mu_session_cb on_session; /* required */
	void *ud;
	/* Count into this registry (muster_server_*, docs/metrics.md); NULL
	 * (the default): count nothing. It must outlive the server. */
	mu_metrics_t *metrics;
	/* TLS and/or the shared secret for every session (NULL: plain TCP);
	 * must outlive the server. */
	const mu_secure_t *sec;
	/* What clients still in their handshakes may make the server hold
	 * (docs/internals/budgets.md); a session's stream holds back at most
	 * MU_STREAM_MAX_BACK besides. Default: mu_budget_init's. */
	mu_budget_t budget;
	/*
	 * Standalone: seconds a client whose handshake is good waits in line
	 * while another's session runs. Past it the client is answered
	 * RPC_CODE_MISMATCH (TVM's "no server for you", so its clients retry
	 * or fail) followed by muster's reason, int32 N + N bytes "busy: ...",
	 * which mu_session_connect reports as -EBUSY. Default 10; 0: wait as
	 * long as the session runs.
	 */
	double queue_timeout;
} mu_server_opts_t;

MU_EXTERN void mu_server_opts_init_size(mu_server_opts_t *o, size_t size);
#define mu_server_opts_init(o) mu_server_opts_init_size((o), sizeof(*(o)))

/*
 * Bind (TVM's port search), start serving and registering. Returns once
 * the port is bound; registration proceeds in the background and never
 * gives up. With o->defer_register, registration waits for
 * mu_server_register, so that whatever a client granted this device needs
 * (its published metadata, say) can be made ready first: the tracker
 * hands the device out only once it is registered. MU_EARG (no key or
 * handler), MU_EBIND, MU_ERESOLVE, -errno.
 */
MU_EXTERN int mu_server_start(const mu_server_opts_t *o, mu_server_t **out);
MU_EXTERN int mu_server_port(const mu_server_t *s);

/*
 * Start registering with the tracker: the step o->defer_register held
 * back. 0 (also standalone, already registering, or stopped), or -errno
 * when the registrar thread cannot start. Any thread.
 */
MU_EXTERN int mu_server_register(mu_server_t *s);

/*
 * The host (an IP, or custom_addr as given) clients can reach this server
 * at, for publishing: custom_addr when set; else the host it is bound
 * to, unless that is a wildcard (0.0.0.0, ::): then the local address
 * this machine reaches the tracker from (the route's source address, so
 * the tracker and the clients it serves see the same), or the loopback
 * address when standalone or no route is found. Fixed once started.
 */
MU_EXTERN const char *mu_server_host(const mu_server_t *s);

/*
 * Copy the matchkey a client must present now into buf ("" while a session
 * runs). Thread-safe. For tests and diagnostics.
 */
MU_EXTERN void mu_server_matchkey(mu_server_t *s, char *buf, size_t len);

/* Number of sessions served so far. Thread-safe. */
MU_EXTERN unsigned long mu_server_sessions(mu_server_t *s);

/* Stop everything (a running session's socket is shut down) and wait. */
MU_EXTERN void mu_server_stop(mu_server_t *s);
/* Wait until the server has stopped (through mu_server_stop elsewhere). */
MU_EXTERN void mu_server_wait(mu_server_t *s);
/* Stop if running, wait, free. NULL is a no-op. */
MU_EXTERN void mu_server_free(mu_server_t *s);

/* ---- sessions ---- */

/*
 * The session's stream, for mu_stream_* and mu_frame_send/recv (bytes
 * that came behind the handshake, or were put back, are read first).
 * Owned by the session. mu_session_recv/send are the same with the
 * server's session_timeout applied.
 */
MU_EXTERN mu_stream_t *mu_session_stream(mu_session_t *s);
/* End the sending side: the peer reads EOF, reading goes on. */
MU_EXTERN int mu_session_shutdown(mu_session_t *s);
/* The other side: "ip:port". */
MU_EXTERN const char *mu_session_peer(const mu_session_t *s);
/* Server side: the client's -timeout in seconds (0: none). */
MU_EXTERN double mu_session_timeout(const mu_session_t *s);
/* Client side: the key string the server answered with ("server:KEY"). */
MU_EXTERN const char *mu_session_server_key(const mu_session_t *s);
/*
 * Server side: the longest, in ms, that any wait on the client may last
 * (the server's session_timeout); -1 for none, and on the client side.
 */
MU_EXTERN int mu_session_wait_limit_ms(const mu_session_t *s);

/*
 * Read up to len bytes (*n gets the count; 0 means the peer closed) or
 * write all len bytes, with a timeout in ms (< 0: none). Bytes the peer
 * sent right behind its handshake are delivered first. 0 or a negative
 * error; -ETIMEDOUT leaves the session usable, unless the wait outlasted
 * the server's session_timeout (a read with no byte, or a write with no
 * progress, for that long): then the session is over, its socket shut
 * down, and the server logs why.
 */
MU_EXTERN int mu_session_recv(mu_session_t *s, void *buf, size_t len,
                              size_t *n, int timeout_ms);
MU_EXTERN int mu_session_send(mu_session_t *s, const void *buf, size_t len,
                              int timeout_ms);

/*
 * Put n bytes back in front of what the session reads next: a handler
 * that peeked at the first bytes to tell protocols apart. 0 or MU_ENOMEM.
 */
MU_EXTERN int mu_session_unread(mu_session_t *s, const void *buf, size_t n);

/*
 * Handshake with a server at host:port using matchkey (TVM's rpc.connect).
 * session_timeout > 0 asks the server to end the session after that many
 * seconds. sec: TLS and/or the shared secret (NULL: plain TCP; the server
 * must be configured alike). MU_EMISMATCH when the server refuses the
 * matchkey, -EBUSY when a standalone muster server's session slot stayed
 * taken for its queue_timeout, MU_EAUTH / MU_ETLS when it refuses us (or
 * we it).
 */
MU_EXTERN int mu_session_connect(const char *host, int port,
                                 const char *matchkey, double session_timeout,
                                 const mu_secure_t *sec, int timeout_ms,
                                 mu_session_t **out);

/*
 * TVM's TrackerSession.request with a timeout: ask the tracker for a device
 * of `key` at `priority`, connect to the granted address and handshake;
 * on a mismatch or an unreachable device, request again, up to max_retry
 * tries in all. timeout_ms bounds the whole call (< 0: wait for a device
 * forever, as TVM does). The last cause is returned when every try failed.
 * MU_EFAIL at once when the tracker refuses the request (past one of its
 * limits); MU_EAUTH / MU_ETLS at once when a device refuses sec (the
 * tracker itself speaks TVM's protocol, in the clear).
 */
MU_EXTERN int mu_session_request(const char *tracker_host, int tracker_port,
                                 const char *key, double priority,
                                 double session_timeout, int max_retry,
                                 const mu_secure_t *sec, int timeout_ms,
                                 mu_session_t **out);

/* Client side: close the stream and free. NULL is a no-op. */
MU_EXTERN void mu_session_close(mu_session_t *s);

#ifdef __cplusplus
}
#endif
#endif
