/* SPDX-License-Identifier: MIT */
/*
 * The device tracker: a TVM-compatible RPC tracker service (the C form of
 * TVM's Python `Tracker` class) and a blocking client for it.
 *
 * Service: mu_tracker_start() binds (TVM's port search), starts the tracker
 * on its own thread and returns once it accepts connections; the caller
 * learns the port and the random stop key, and stops it with
 * mu_tracker_stop() or, like TVM's terminate(), with a STOP message carrying
 * the key. All protocol work happens on the tracker's thread.
 *
 * Client: one mu_tracker_client_t is one tracker connection, used by one
 * thread at a time. Every call takes a timeout in milliseconds (< 0 waits
 * forever, which only a caller's explicit choice should ask for).
 */
#ifndef MUSTER_TRACKER_H
#define MUSTER_TRACKER_H

#include "muster/common.h"
#include "muster/metrics.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mu_tracker_s mu_tracker_t;

typedef struct {
	size_t struct_size;       /* set by mu_tracker_opts_init */
	const char *host;   /* address to bind; default "0.0.0.0" */
	int port;           /* first port to try; default 9190; 0 = any */
	int port_end;       /* end of the search, exclusive; default 9199 */
	int silent;         /* log only warnings and errors */
	int reuse_addr;     /* SO_REUSEADDR before bind; default 1 */
	/*
	 * Seconds a peer may take to finish the magic handshake, and to finish
	 * any frame it has started sending; past that it is disconnected (a
	 * peer that connects and never sends, or trickles bytes). Idle time
	 * between frames is never limited: servers stay silent for hours.
	 * Default 60; 0 disables.
	 */
	double timeout;
	unsigned max_frame; /* largest frame accepted; default 1 MiB (TVM's) */
	/*
	 * What peers can fill in the tracker's tables. A PUT or REQUEST past
	 * one of these is refused with TVM's FAIL code (PUT: -1; REQUEST:
	 * [-1, "why"]), changes nothing, and is logged; the connection stays.
	 */
	unsigned max_keys;  /* device-key queues in all; default 10000 (empty
	                     * ones are dropped to make room) */
	unsigned max_per_conn; /* free resources, and queued requests, one
	                        * connection may hold; default 1024 */
	unsigned max_keys_per_conn; /* distinct device keys one connection
	                             * holds resources or requests on; 64 */
	mu_budget_t budget;    /* what each peer may make the tracker hold */
	/* Count into this registry (muster_tracker_* series,
	 * docs/metrics.md); NULL (the default): count nothing. It must
	 * outlive the tracker. */
	mu_metrics_t *metrics;
	/* Who may connect: comma-separated addresses and CIDR prefixes
	 * ("10.0.0.0/8,::1"); others are closed at accept, logged and
	 * counted (muster_tracker_connections_refused_total{reason="allow"}).
	 * NULL (the default): everyone. A bad list fails the start (MU_EARG). */
	const char *allow;
} mu_tracker_opts_t;

/* Fill o with the defaults above. */
MU_EXTERN void mu_tracker_opts_init_size(mu_tracker_opts_t *o, size_t size);
#define mu_tracker_opts_init(o) mu_tracker_opts_init_size((o), sizeof(*(o)))

/*
 * Bind, listen and start serving on a new thread. On success *out is the
 * running tracker (free it with mu_tracker_free). Fails with MU_EBIND when
 * every port in [port, port_end) is in use, MU_ERESOLVE, MU_EARG, or -errno
 * (e.g. -EACCES) from the first port that failed otherwise; *out is NULL.
 */
MU_EXTERN int mu_tracker_start(const mu_tracker_opts_t *o, mu_tracker_t **out);

/* The bound port. */
MU_EXTERN int mu_tracker_port(const mu_tracker_t *t);

/* The stop key ("tracker:0.<digits>"), valid until mu_tracker_free. */
MU_EXTERN const char *mu_tracker_stop_key(const mu_tracker_t *t);

/*
 * Ask the tracker to stop (closing every connection) and wait until it has.
 * Safe from any thread but the tracker's own, and if it already stopped.
 */
MU_EXTERN void mu_tracker_stop(mu_tracker_t *t);

/*
 * Ask the tracker to stop gracefully and return at once: it stops
 * accepting and reading, lets every reply already queued (a grant
 * included) reach its peer, closes each connection once the peer has
 * acknowledged all of it, then stops. After timeout seconds it closes
 * what is left, dropping what was not yet sent, and logs so.
 * mu_tracker_stop during a drain cuts it short. Safe from any thread, and
 * if it already stopped; mu_tracker_wait returns when it has.
 */
MU_EXTERN void mu_tracker_drain(mu_tracker_t *t, double timeout);

/* Wait until the tracker stops (by mu_tracker_stop, a drain or a STOP
 * message). */
MU_EXTERN void mu_tracker_wait(mu_tracker_t *t);

/* Stop if running, wait, and free. NULL is a no-op. */
MU_EXTERN void mu_tracker_free(mu_tracker_t *t);

/* ---- client ---- */

typedef struct mu_tracker_client_s mu_tracker_client_t;

/* What a REQUEST is granted: where the server is and the key to show it. */
typedef struct {
	char addr[256];
	int port;
	char matchkey[4096];
} mu_tracker_grant_t;

/*
 * Connect and exchange the tracker magic. 0, or -ECONNREFUSED, -ETIMEDOUT,
 * MU_ERESOLVE, MU_EBADMAGIC (not a tracker), MU_EEOF; *out is NULL then.
 */
MU_EXTERN int mu_tracker_client_connect(const char *host, int port,
                                        int timeout_ms,
                                        mu_tracker_client_t **out);
/* Close the connection and free. NULL is a no-op. */
MU_EXTERN void mu_tracker_client_close(mu_tracker_client_t *c);

/*
 * Calls below return 0, or: -ETIMEDOUT, MU_EEOF (tracker went away),
 * MU_EPROTO / MU_EJSON (reply of the wrong shape), MU_ETOOBIG. After any
 * failure the connection is closed and every later call fails with
 * -ENOTCONN: a tracker reply that arrives late must never be taken for the
 * answer to a later question.
 */
MU_EXTERN int mu_tracker_client_ping(mu_tracker_client_t *c, int timeout_ms);

/*
 * SUMMARY: *json gets the summary object's text (the reply's element 1,
 * {"queue_info": ..., "server_info": ...}); free it with mu_free.
 */
MU_EXTERN int mu_tracker_client_summary(mu_tracker_client_t *c,
                                        int timeout_ms, char **json);

/*
 * REQUEST a device of `key` and wait for the grant. The tracker answers only
 * when a device is free, so this can wait long: on -ETIMEDOUT the connection
 * is closed, which makes a muster tracker drop the queued request. MU_EFAIL:
 * the tracker refused the request (a muster tracker does past one of its
 * limits, answering [-1, why]); the connection stays usable.
 */
MU_EXTERN int mu_tracker_client_request(mu_tracker_client_t *c,
                                        const char *key, double priority,
                                        int timeout_ms,
                                        mu_tracker_grant_t *grant);

/*
 * UPDATE_INFO {"key": info_key, "addr": [custom_addr or null, port]}, as a
 * server sends it once after connecting. info_key is "server:KEY".
 */
MU_EXTERN int mu_tracker_client_update_info(mu_tracker_client_t *c,
                                            const char *info_key,
                                            const char *custom_addr, int port,
                                            int timeout_ms);

/*
 * PUT [3, key, [port, matchkey], custom_addr or null]. MU_EFAIL: the tracker
 * answered -1, refusing the offer (a muster tracker does past one of its
 * limits); nothing was registered and the connection stays usable.
 */
MU_EXTERN int mu_tracker_client_put(mu_tracker_client_t *c, const char *key,
                                    int port, const char *matchkey,
                                    const char *custom_addr, int timeout_ms);

/*
 * GET_PENDING_MATCHKEYS: *keys gets a NULL-terminated array of *n strings,
 * freed with mu_tracker_strv_free.
 */
MU_EXTERN int mu_tracker_client_pending(mu_tracker_client_t *c,
                                        int timeout_ms, char ***keys,
                                        size_t *n);
MU_EXTERN void mu_tracker_strv_free(char **v);

/* STOP with the key: 0 when the tracker accepted it, MU_EFAIL for -1. */
MU_EXTERN int mu_tracker_client_stop(mu_tracker_client_t *c,
                                     const char *stop_key, int timeout_ms);

/*
 * The text `python -m tvm.exec.query_rpc_tracker` prints for a summary
 * (TrackerSession.text_summary, byte for byte), from the JSON text that
 * mu_tracker_client_summary returns. *text is freed with mu_free.
 * 0, MU_EJSON, MU_EPROTO, MU_ENOMEM.
 */
MU_EXTERN int mu_tracker_summary_text(const char *summary_json, char **text);

/*
 * The framing, for a program that drives many tracker connections from
 * an event loop of its own (a load generator: `muster bench tracker`),
 * where a blocking mu_tracker_client_t per connection will not do. Each
 * side of a connection first sends MU_TRACKER_MAGIC as a little-endian
 * u32 (the other echoes it); then every message is a frame: a
 * little-endian i32 length, then that many bytes of JSON text, whose
 * meaning is TVM's (docs/protocols/tvm-tracker.md). Both calls are pure:
 * no I/O, no allocation, any thread.
 */
#define MU_TRACKER_MAGIC 0x2F271

/*
 * Put a frame of body (len bytes) into buf (cap bytes); *n gets 4 + len.
 * MU_EARG for a len of 0 (no frame is empty) or body NULL; MU_ETOOBIG
 * when len is over 2^31 - 1 or cap is short (nothing written, *n the size
 * needed).
 */
MU_EXTERN int mu_tracker_frame_encode(const void *body, size_t len, void *buf,
                                      size_t cap, size_t *n);
/*
 * Look at the start of a byte stream: 1 when a whole frame is there (its
 * body is the *body_len bytes from offset 4), 0 when more bytes are
 * needed, MU_EPROTO (a length of 0 or less) or MU_ETOOBIG (over max) as
 * soon as the 4 length bytes are in: the connection is then not worth
 * reading on.
 */
MU_EXTERN int mu_tracker_frame_peek(const void *data, size_t len, size_t max,
                                    size_t *body_len);

#ifdef __cplusplus
}
#endif
#endif
