/* SPDX-License-Identifier: MIT */
/*
 * The rendezvous store: a server and a client for PyTorch's c10d TCPStore
 * protocol, both dialects (torch 1.13's "v1" and torch 2.x's "v2", told
 * apart per connection), so torch jobs can rendezvous through a store that
 * is not a Python rank-0 process, and C programs can use torch's stores.
 *
 * Server: mu_store_server_start() binds and serves on its own thread.
 * Client: one mu_store_client_t is one connection, used by one thread at a
 * time. Keys are C strings; like torch's client, the library sends them
 * with a "/" in front unless the raw_keys option is set (torch's worker
 * counter "init/" is a raw key). Values are bytes (NUL allowed).
 */
#ifndef MUSTER_STORE_H
#define MUSTER_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "muster/common.h"
#include "muster/metrics.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- server ---- */

typedef struct mu_store_server_s mu_store_server_t;

typedef struct {
	size_t struct_size;       /* set by mu_store_server_opts_init */
	const char *host;       /* default "::" (IPv6 and IPv4 both) */
	int port;               /* default 29500; 0 = any */
	size_t max_key_bytes;   /* default 64 KiB */
	size_t max_value_bytes; /* default 64 MiB (torch 2.x libuv: 8 MiB) */
	size_t max_keys;        /* keys per CHECK/WAIT/MULTI_*; default 131072 */
	/*
	 * Seconds a connection may take to finish a request it has started;
	 * past that it is closed. Idle time between requests is never limited
	 * (torch 1.13 keeps a silent second connection per client). Default
	 * 60; 0 disables.
	 */
	double request_timeout;
	int silent;             /* log only warnings and errors */
	mu_budget_t budget;     /* what each client may make the server hold */
	size_t max_watches;     /* v1 WATCH_KEY registrations per connection;
	                         * default 1024 (more closes the connection) */
	size_t max_watches_total; /* ... of all connections; default 65536 */
	/* Count into this registry (muster_store_* series, docs/metrics.md);
	 * NULL (the default): count nothing. It must outlive the server. */
	mu_metrics_t *metrics;
	/* Who may connect: comma-separated addresses and CIDR prefixes
	 * ("10.0.0.0/8,::1"); others are closed at accept, logged and
	 * counted (muster_store_connections_refused_total{reason="allow"}).
	 * NULL (the default): everyone. A bad list fails the start (MU_EARG). */
	const char *allow;
} mu_store_server_opts_t;

MU_EXTERN void mu_store_server_opts_init_size(mu_store_server_opts_t *o, size_t size);
#define mu_store_server_opts_init(o) mu_store_server_opts_init_size((o), sizeof(*(o)))

/* Bind, listen and serve on a new thread. MU_EBIND, MU_ERESOLVE, -errno. */
MU_EXTERN int mu_store_server_start(const mu_store_server_opts_t *o, mu_store_server_t **out);
MU_EXTERN int mu_store_server_port(const mu_store_server_t *s);
/* Ask the server to stop (closing every connection); returns at once. */
MU_EXTERN void mu_store_server_stop(mu_store_server_t *s);
/*
 * Ask the server to stop gracefully; returns at once. It stops accepting
 * and reading; every reply already queued (a GET's value, a woken WAIT's
 * answer) reaches its client whole, each connection closing once the
 * client has acknowledged all of it; then it stops. Requests it had not
 * read are not served (the client sees the connection close, never a
 * half reply). After timeout seconds it closes what is left, dropping what
 * was not yet sent, and logs so. mu_store_server_stop during a drain cuts
 * it short. Safe from any thread, and if it already stopped.
 */
MU_EXTERN void mu_store_server_drain(mu_store_server_t *s, double timeout);
/* Wait until it has stopped. */
MU_EXTERN void mu_store_server_wait(mu_store_server_t *s);
/* Stop, wait, free. NULL is a no-op. */
MU_EXTERN void mu_store_server_free(mu_store_server_t *s);

/* ---- client ---- */

typedef struct mu_store_client_s mu_store_client_t;

typedef enum {
	MU_STORE_AUTO = 0, /* try v2's handshake, fall back to v1 */
	MU_STORE_DIALECT_V1 = 1,
	MU_STORE_DIALECT_V2 = 2
} mu_store_dialect_t;

typedef struct {
	size_t struct_size;       /* set by mu_store_client_opts_init */
	const char *host;
	int port;
	mu_store_dialect_t dialect;
	/*
	 * Milliseconds for connecting (refused connections are retried until
	 * then, so clients may start before the server), for each reply, and
	 * the default for get/wait. Default 300000 (torch's 300 s).
	 */
	int timeout_ms;
	int raw_keys;           /* send keys as given, without torch's "/" */
	size_t max_value_bytes; /* largest reply value accepted; 64 MiB */
	/*
	 * Milliseconds for mu_store_client_connect's own connect (a store
	 * still starting is waited for that long); 0: timeout_ms. Later
	 * reconnects, inside calls, take timeout_ms.
	 */
	int connect_timeout_ms;
} mu_store_client_opts_t;

MU_EXTERN void mu_store_client_opts_init_size(mu_store_client_opts_t *o, size_t size);
#define mu_store_client_opts_init(o) mu_store_client_opts_init_size((o), sizeof(*(o)))

/*
 * Connect (and for v2, VALIDATE + PING). 0, -ETIMEDOUT, MU_ERESOLVE,
 * MU_EPROTO (not a TCPStore), or -errno. After a failed call the next call
 * reconnects on its own.
 */
MU_EXTERN int mu_store_client_connect(const mu_store_client_opts_t *o,
                                      mu_store_client_t **out);
MU_EXTERN void mu_store_client_close(mu_store_client_t *c);
/* The dialect in use (never AUTO). */
MU_EXTERN mu_store_dialect_t mu_store_client_dialect(const mu_store_client_t *c);

/* A value handed to the caller: free data with mu_free. */
typedef struct {
	void *data;
	size_t len;
} mu_store_value_t;

MU_EXTERN int mu_store_set(mu_store_client_t *c, const char *key,
                           const void *value, size_t len);
/*
 * Wait for the key (up to the client's timeout, as torch does), then read
 * it. -ETIMEDOUT when it never appears.
 */
MU_EXTERN int mu_store_get(mu_store_client_t *c, const char *key,
                           mu_store_value_t *out);
/* Add delta to the decimal number stored at key (missing = 0). */
MU_EXTERN int mu_store_add(mu_store_client_t *c, const char *key,
                           int64_t delta, int64_t *result);
/*
 * Set key to desired if its value equals expected (a missing key matches
 * an empty expected). *out gets the value after the call, as torch's
 * server reports it.
 */
MU_EXTERN int mu_store_compare_set(mu_store_client_t *c, const char *key,
                                   const void *expected, size_t elen,
                                   const void *desired, size_t dlen,
                                   mu_store_value_t *out);
/* *ready = 1 when every key exists. */
MU_EXTERN int mu_store_check(mu_store_client_t *c, const char *const *keys,
                             size_t n, int *ready);
/*
 * Wait until every key exists, at most timeout_ms (< 0: the client's
 * timeout). -ETIMEDOUT on expiry; the connection stays usable (v2 cancels
 * the wait; v1, which cannot, reconnects).
 */
MU_EXTERN int mu_store_wait(mu_store_client_t *c, const char *const *keys,
                            size_t n, int timeout_ms);
/* *deleted = 1 when the key existed. */
MU_EXTERN int mu_store_delete(mu_store_client_t *c, const char *key,
                              int *deleted);
/* Number of keys in the store, torch's "init/" included. */
MU_EXTERN int mu_store_num_keys(mu_store_client_t *c, int64_t *n);
/* Append to a value (v2 servers only: -ENOTSUP on v1). */
MU_EXTERN int mu_store_append(mu_store_client_t *c, const char *key,
                              const void *value, size_t len);
/*
 * Wait for all keys, then read them into out[0..n) (v2: one request; v1:
 * one GET each).
 */
MU_EXTERN int mu_store_multi_get(mu_store_client_t *c, const char *const *keys,
                                 size_t n, mu_store_value_t *out);
/* Set n keys (v2: one request; v1: one SET each). */
MU_EXTERN int mu_store_multi_set(mu_store_client_t *c, const char *const *keys,
                                 const mu_store_value_t *values, size_t n);
/*
 * Every key in the store (LIST): as torch's client, only keys it wrote
 * ("/"-prefixed), without the "/"; with raw_keys, all of them as stored.
 * *keys is an array of *n values (each NUL-terminated; free each data,
 * then the array, with mu_free); NULL when there are none. -ENOTSUP from
 * a v1 server (torch 1.13: nothing is sent) and from a v2 server that
 * closes the connection on LIST without answering, as torch's do before
 * LIST existed (2.6 and earlier; the protocol cannot tell that from a
 * server going away at that moment). MU_ETOOBIG when the reply is over
 * max_value_bytes in all.
 */
MU_EXTERN int mu_store_list(mu_store_client_t *c, mu_store_value_t **keys,
                            size_t *n);

/*
 * The request codec, for a program that drives many connections from an
 * event loop of its own (a load generator: `muster bench store`), where a
 * blocking mu_store_client_t per connection will not do. It encodes the
 * requests of one key that torch's clients send, in either dialect; the
 * program reads the replies itself: their shapes follow from the request
 * (docs/protocols/tcpstore.md has the table), e.g. GET's is a u64 length
 * and the value, ADD's an i64, WAIT's a u8 0 once the key exists.
 */
typedef enum {
	MU_STORE_OP_VALIDATE = 0, /* v2: the magic, first on a connection */
	MU_STORE_OP_PING,         /* v2: nonce; the reply echoes it */
	MU_STORE_OP_SET,          /* key, value */
	MU_STORE_OP_COMPARE_SET,  /* key, value (the expected one), desired */
	MU_STORE_OP_GET,          /* key */
	MU_STORE_OP_ADD,          /* key, delta */
	MU_STORE_OP_CHECK,        /* key (a key list of one) */
	MU_STORE_OP_WAIT,         /* key (a key list of one) */
	MU_STORE_OP_NUM_KEYS,     /* nothing */
	MU_STORE_OP_DELETE,       /* key */
	MU_STORE_OP_APPEND        /* v2: key, value */
} mu_store_op_t;

typedef struct {
	size_t struct_size;         /* set by mu_store_request_init */
	mu_store_dialect_t dialect; /* V1 or V2 (AUTO, the init's, is refused) */
	mu_store_op_t op;
	const void *key;            /* sent as it is: no "/" goes in front */
	size_t key_len;
	const void *value;          /* SET, APPEND; COMPARE_SET's expected */
	size_t value_len;
	const void *desired;        /* COMPARE_SET */
	size_t desired_len;
	int64_t delta;              /* ADD */
	uint32_t nonce;             /* PING */
} mu_store_request_t;

MU_EXTERN void mu_store_request_init_size(mu_store_request_t *r, size_t size);
#define mu_store_request_init(r) mu_store_request_init_size((r), sizeof(*(r)))

/*
 * Encode r's request into buf (cap bytes); *len gets its size. Pure: no
 * I/O, no allocation, any thread. 0; MU_ETOOBIG when cap is short
 * (nothing written, *len the size needed) or a length is past what any
 * buffer holds; -ENOTSUP when the dialect has
 * no such request (VALIDATE, PING and APPEND in v1); MU_EARG for a request
 * not set up by mu_store_request_init, dialect AUTO, an op that is not
 * one, or a NULL pointer with a length.
 */
MU_EXTERN int mu_store_request_encode(const mu_store_request_t *r, void *buf,
                                      size_t cap, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
