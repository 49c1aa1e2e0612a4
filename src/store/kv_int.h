/* SPDX-License-Identifier: MIT */
/*
 * The TCPStore's state and the meaning of every operation (spec §5-§6),
 * pure: replies and wake-ups leave through a send callback, so tests run
 * it without sockets and the server only moves bytes.
 *
 * State: the key/value map, FIFO queues (a separate namespace), and per key
 * the connections waiting for it (WAIT) and watching it (v1 WATCH_KEY).
 * Each registration is on two lists, its key's and its connection's, so a
 * closing connection drops everything it registered in time proportional
 * to what it held. What a connection's registrations take is kept in its
 * `held` (the server counts it against the peer's budget), and watches are
 * limited in number per connection and in all. A watch event is built once
 * and shared by every write that carries it.
 */
#ifndef MU_STORE_KV_INT_H
#define MU_STORE_KV_INT_H

#include <stddef.h>
#include <stdint.h>

#include "core/list_int.h"
#include "core/strmap_int.h"
#include "store/proto_int.h"

/* A stored value: refcounted so a reply can be written without a copy
 * while the key is overwritten or deleted behind it. */
typedef struct {
	size_t refs;
	size_t len;
	char data[];
} mu__store_val_t;

mu__store_val_t *mu__store_val_new(const void *p, size_t n);
mu__store_val_t *mu__store_val_ref(mu__store_val_t *v);
void mu__store_val_unref(mu__store_val_t *v);

/* What the store knows of one connection. Embedded in it; init first. */
typedef struct {
	mu__list_t waits;    /* registrations of the pending WAIT */
	size_t awaiting;     /* its keys not yet written */
	mu__list_t watches;  /* v1 WATCH_KEY registrations */
	size_t nwatches;     /* ... how many */
	size_t held;         /* bytes its waits and watches take (for its budget) */
	mu__store_dialect_t dialect;
	int validated;       /* v2: VALIDATE seen */
} mu__store_peer_t;

/*
 * Queue `n` bytes and then, when tail is not NULL, tail's bytes (the
 * callee takes a reference), as one unit on peer's output. Non-zero when
 * it cannot; for the requesting peer the request then fails, for another
 * peer (a wake-up) the server must close that peer later, not from inside
 * the callback.
 */
typedef int (*mu__store_send_cb)(void *ud, mu__store_peer_t *peer,
                                 const void *bytes, size_t n,
                                 mu__store_val_t *tail);

typedef struct {
	mu__strmap_t data;   /* key -> mu__store_val_t * */
	mu__strmap_t regs;   /* key -> waiters and watchers of that key */
	mu__strmap_t queues; /* key -> FIFO of mu__store_val_t * */
	size_t nwatches;     /* v1 watches of every connection */
	mu__store_send_cb send;
	void *ud;
} mu__store_t;

void mu__store_init(mu__store_t *s, mu__store_send_cb send, void *ud);
void mu__store_free(mu__store_t *s); /* peers must have been released */

void mu__store_peer_init(mu__store_peer_t *p, mu__store_dialect_t d);
/* Drop the peer's waits and watches (it is closing). */
void mu__store_peer_release(mu__store_t *s, mu__store_peer_t *p);

/*
 * Carry out one request for peer. 0, or an error after which the server
 * closes that peer: MU_EPROTO (ADD on a value that is not a number, GET of
 * a missing key on a v1 connection, a bad VALIDATE or none, an operation
 * the dialect lacks), MU_ETOOBIG (a result over the value limit, a watch
 * past the limits of lim), MU_ENOMEM, or the send callback's error.
 */
int mu__store_exec(mu__store_t *s, mu__store_peer_t *peer,
                   const mu__store_req_t *r, const mu__store_limits_t *lim);

#endif
