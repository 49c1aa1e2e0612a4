/* SPDX-License-Identifier: MIT */
/*
 * mu__conn_t: one accepted connection of a libuv server, a stream
 * (stream_int.h: TCP or TLS, maybe past the shared-secret handshake)
 * driven from the loop, with what every
 * muster server needs around it: a bounded input buffer, whole-message
 * writes that may reference bytes without copying them, the budget rule of
 * docs/internals/budgets.md (what the server holds for the peer is counted
 * at its real cost; a peer past its budget stops being read, one that stays
 * past it reading nothing is closed, and a server's peers together stay
 * within its total), a timer, and a close that runs the owner's callbacks
 * in a fixed order. Loop thread only.
 *
 * Embed it as the first member of the server's connection struct and
 * recover the container with mu__container_of.
 */
#ifndef MU_CORE_CONN_INT_H
#define MU_CORE_CONN_INT_H

#include <uv.h>

#include "muster/common.h"
#include "core/buf_int.h"
#include "core/list_int.h"
#include "core/net_int.h"
#include "core/stream_int.h"

typedef struct mu__conn_s mu__conn_t;

/*
 * One server's budget: its limits and what all its connections hold now.
 * Embed it in the server, init it before the first accept; every
 * connection of the server points to it. Loop thread only.
 */
typedef struct {
	mu_budget_t lim;
	size_t total;        /* held by every connection now */
	size_t peak;         /* the most `total` has been */
	unsigned long cut;   /* connections closed for their budget */
	uint64_t trimmed;    /* loop time of the last mu__mem_trim */
	mu__list_t waiting;  /* conns paused because `total` was over */
	const char *module;  /* log lines go out under it: "store" ... */
} mu__budget_t;

/* lim is copied (NULL: the defaults); module must outlive the budget. */
void mu__budget_init(mu__budget_t *b, const mu_budget_t *lim, const char *module);

typedef struct {
	/* New bytes are in c->in: consume what forms whole messages. Stop
	 * at c->paused (the budget); on_data is called again on resuming. */
	void (*on_data)(mu__conn_t *c);
	/*
	 * The connection is closing: err is 0 for an orderly close by the
	 * peer or by us, else why (-ENOBUFS: closed for its budget, already
	 * logged). Called once; unlink the container here. Writes still
	 * queued are dropped.
	 */
	void (*on_close)(mu__conn_t *c, int err);
	/* Every handle has closed: free the container. */
	void (*on_free)(mu__conn_t *c);
	/* The timer of mu__conn_timer fired. */
	void (*on_timeout)(mu__conn_t *c);
	/*
	 * Optional, for bodies read straight into their destination: asked
	 * before each read while c->in is empty; return where the next bytes
	 * go and how many fit (*n), or NULL for the usual path through c->in.
	 * on_direct(c, n) then reports n bytes written there.
	 */
	void *(*on_alloc)(mu__conn_t *c, size_t *n);
	void (*on_direct)(mu__conn_t *c, size_t n);
	/*
	 * Optional: the peer shut its sending side (it may still read).
	 * Return 1 when the owner took care of it (replied and called
	 * mu__conn_finish or mu__conn_close); 0 or NULL: the replies queued
	 * so far go out, then the connection closes with err 0.
	 */
	int (*on_eof)(mu__conn_t *c);
} mu__conn_ops_t;

/*
 * Connection flags, one line each:
 *   paused    not read: over its budget (or the total; then on `waiting`)
 *   held      not read: the owner's wish (mu__conn_hold)
 *   draining  mu__conn_finish: shutting down, input dropped until close
 *   eof       the peer shut its side: never read again; close once the
 *             queued writes are out
 *   cut       being closed for its budget: sends are refused
 */
struct mu__conn_s {
	uv_poll_t poll;     /* on the stream's socket */
	uv_timer_t timer;
	uv_timer_t grace;   /* runs while paused for the budget */
	uv_timer_t kick;    /* next turn: completed writes, decoded input */
	uv_loop_t *loop;
	mu_stream_t *st;    /* owned; NULL once detached */
	mu__list_t wq;      /* writes not yet all written, oldest first */
	mu__list_t doneq;   /* written; their completion not yet reported */
	int poll_events;    /* what poll watches now (UV_READABLE...) */
	int rd_want;        /* the stream's last recv waits for this */
	int wr_want;        /* ... its last sendv */
	const mu__conn_ops_t *ops;
	mu__budget_t *budget;
	mu__list_t wait_node; /* in budget->waiting, or alone */
	mu__buf_t in;
	char *scratch;      /* the loop's read buffer, shared by its conns */
	size_t scratch_len;
	size_t out_bytes;   /* queued writes at their real cost, and gather */
	mu__buf_t gather;   /* small replies not yet written (conn.c) */
	size_t gather_cost; /* ... its allocation, in out_bytes */
	size_t own_bytes;   /* state the owner keeps for the peer */
	size_t in_bytes;    /* c->in's allocation and the owner's partial input */
	size_t in_owner;    /* ... of which the owner's (mu__conn_input) */
	size_t peak;        /* the most it has held */
	void *last_w;       /* the newest write, while it is queued */
	int open_handles;
	int closing;
	int paused;
	int held;
	int reading;        /* uv_read_start is in effect */
	int draining;
	int shut_pending;   /* ... shut down once the writes are out */
	int shut_done;      /* ... and the shutdown completed */
	int finish_err;     /* ... the error to close with */
	int eof;
	int cut;
	int serving;        /* inside on_data: sends answer this peer */
	uint64_t turn_start; /* when on_data was called (uv_hrtime) */
	int direct;         /* the read in progress goes to on_alloc's buffer */
	char peer[MU_ADDRSTRLEN]; /* "ip:port" */
	char ip[MU_ADDRSTRLEN];
};

/* Called when a write completes or is dropped; releases what it referenced. */
typedef void (*mu__conn_done_cb)(void *arg);

/*
 * Drive stream st (taken; from a mu__listener_t) on loop as c (zeroed by
 * the caller), and start reading. max_in bounds c->in; budget is the
 * server's. On failure c is closed through its ops (on_close, then
 * on_free) and the error is returned.
 */
int mu__conn_accept(mu__conn_t *c, uv_loop_t *loop, mu_stream_t *st,
                    const mu__conn_ops_t *ops, size_t max_in, char *scratch,
                    size_t scratch_len, mu__budget_t *budget);

/*
 * Take the stream out of c and close c (on_close with err 0, then
 * on_free): the stream goes on elsewhere (a device session's thread).
 * Only with no write queued (after its completion was reported). The
 * bytes in c->in are c's: copy them out first. 0, or -EBUSY.
 */
int mu__conn_detach(mu__conn_t *c, mu_stream_t **st);

/*
 * Queue head (copied) then tail (referenced until done(arg) runs) as one
 * write. 0, or an error without calling done (the caller still owns tail):
 * UV_ECANCELED when closing, -ENOBUFS when c is being cut off for its
 * budget (this send, not caused by the peer's own request, would take it
 * past twice its budget; c is closed on the next loop turn). The write is
 * charged its real cost; consecutive writes that reference the same tail
 * are charged the tail once. Small replies (no tail) sent from on_data are
 * gathered and written together when on_data returns.
 */
int mu__conn_send(mu__conn_t *c, const void *head, size_t hn,
                  const void *tail, size_t tn, mu__conn_done_cb done,
                  void *arg);

/*
 * Queue bufs[0..n) as one write, every buffer referenced (not copied) until
 * done(arg) runs. extra: bytes the caller keeps for this write besides the
 * buffers (its bookkeeping), charged with it. 0, or an error as
 * mu__conn_send's without calling done.
 */
int mu__conn_sendv(mu__conn_t *c, const uv_buf_t *bufs, unsigned n,
                   size_t extra, mu__conn_done_cb done, void *arg);

/*
 * The owner now keeps `bytes` of state for the peer (watches, sessions):
 * replaces the previous figure. Growing past the budget pauses c like
 * queued replies do.
 */
void mu__conn_own(mu__conn_t *c, size_t bytes);

/*
 * The owner now holds `bytes` of a partial request outside c->in (a body
 * read straight into its destination): replaces the previous figure.
 * Counted in the total; it never pauses c (the request's own limit bounds
 * it, and pausing would stop it from ever completing).
 */
void mu__conn_input(mu__conn_t *c, size_t bytes);

/*
 * Before holding a partial request of `bytes` outside c->in (what a
 * peer's header declares, charged before anything is allocated): 0 and
 * it is charged as mu__conn_input does, or MU_ETOOBIG when it is more
 * than one connection's budget or does not fit the server's total with
 * what every peer holds; then why says which ("300.0 MiB, more than
 * ..."), nothing is charged, and the owner refuses the request.
 *
 * `message` is the largest message the owner takes (its --max-frame, 0
 * for none): a message up to it is let in past --conn-budget, which bounds
 * what a peer makes the server hold in replies and partial requests, and
 * past --total-budget when no other peer holds anything, so that the
 * budgets' defaults never refuse a message the server says it takes. It
 * counts in the total all the same: while it is held, what the others
 * declare must fit the total beside it.
 */
int mu__conn_input_admit(mu__conn_t *c, size_t bytes, size_t message, char *why, size_t wl);

/* Everything the server holds for the peer now, as counted. */
size_t mu__conn_held(const mu__conn_t *c);

/*
 * Close after the queued writes: they go out, the sending side is shut,
 * and the connection closes with err. Until then what the peer still sends
 * is read and dropped for up to linger_ms (closing on unread bytes would
 * send a reset that can destroy the reply before the peer reads it). Once
 * the peer has shut its side too, nothing more can come: the connection
 * closes as soon as the writes are out.
 */
void mu__conn_finish(mu__conn_t *c, int err, uint64_t linger_ms);

/*
 * After mu__conn_finish: 1 once every reply is out of our hands, the
 * sending side is shut, and the peer's kernel has acknowledged every byte
 * and the FIN (Linux's SIOCOUTQ is 0). Closing then loses nothing: even
 * if a late request of the peer's is answered with a reset, its kernel
 * hands the application the bytes it already holds first. 0 before, and
 * where the count cannot be had (then wait for the peer's close or a
 * deadline). For a server's drain (core/service_int.h).
 */
int mu__conn_delivered(mu__conn_t *c);

/* Close (idempotent); err goes to on_close. */
void mu__conn_close(mu__conn_t *c, int err);

/*
 * In on_data, between two messages: 1 when this call has had its share of
 * the loop (10 ms): return then, and on_data is called again on the next
 * loop turn, so one peer's batch of costly requests does not hold up
 * everyone else (their handshakes and timers). 0: go on.
 */
int mu__conn_yield(mu__conn_t *c);

/* Stop or resume reading at the owner's wish (independent of the budget). */
void mu__conn_hold(mu__conn_t *c, int hold);

/* Fire on_timeout after ms (0 stops the timer). */
void mu__conn_timer(mu__conn_t *c, uint64_t ms);

#endif
