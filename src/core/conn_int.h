/* SPDX-License-Identifier: MIT */
/*
 * mu__conn_t: one accepted TCP connection of a libuv server, with what every
 * muster server needs around it: a bounded input buffer, whole-message
 * writes that may reference bytes without copying them, output backpressure
 * (a peer that does not read stops being read, so it cannot make us queue
 * without bound), a timer, and a close that runs the owner's callbacks in a
 * fixed order. Loop thread only.
 *
 * Embed it as the first member of the server's connection struct and
 * recover the container with mu__container_of.
 */
#ifndef MU_CORE_CONN_INT_H
#define MU_CORE_CONN_INT_H

#include <uv.h>

#include "core/buf_int.h"
#include "core/net_int.h"

typedef struct mu__conn_s mu__conn_t;

typedef struct {
	/* New bytes are in c->in: consume what forms whole messages. */
	void (*on_data)(mu__conn_t *c);
	/*
	 * The connection is closing: err is 0 for an orderly close by the
	 * peer or by us, else why. Called once; unlink the container here.
	 * Writes still queued are dropped.
	 */
	void (*on_close)(mu__conn_t *c, int err);
	/* Both handles have closed: free the container. */
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
	 * mu__conn_finish or mu__conn_close); 0 or NULL: the connection
	 * closes with err 0, an orderly goodbye.
	 */
	int (*on_eof)(mu__conn_t *c);
} mu__conn_ops_t;

struct mu__conn_s {
	uv_tcp_t tcp;
	uv_timer_t timer;
	const mu__conn_ops_t *ops;
	mu__buf_t in;
	char *scratch;      /* the loop's read buffer, shared by its conns */
	size_t scratch_len;
	size_t wq_high;     /* unsent bytes that stop reading ... */
	size_t wq_low;      /* ... until they fall below this */
	int open_handles;
	int closing;
	int paused;         /* reading stopped for backpressure */
	int held;           /* reading stopped by the owner (mu__conn_hold) */
	int reading;        /* uv_read_start is in effect */
	int draining;       /* mu__conn_finish: discarding input until close */
	int finish_err;     /* ... and the error to close with */
	int direct;         /* the read in progress goes to on_alloc's buffer */
	uv_shutdown_t shut;
	char peer[MU_ADDRSTRLEN]; /* "ip:port" */
	char ip[MU_ADDRSTRLEN];
};

/* Called when a write completes or is dropped; releases what it referenced. */
typedef void (*mu__conn_done_cb)(void *arg);

/*
 * Accept a pending connection from listener into c (zeroed by the caller),
 * start reading. max_in bounds c->in. On failure c is closed through its
 * ops (on_close, then on_free) and the error is returned.
 */
int mu__conn_accept(mu__conn_t *c, uv_stream_t *listener,
                    const mu__conn_ops_t *ops, size_t max_in, char *scratch,
                    size_t scratch_len);

/*
 * Queue head (copied) then tail (referenced until done(arg) runs) as one
 * write. 0, or an error without calling done (the caller still owns tail).
 */
int mu__conn_send(mu__conn_t *c, const void *head, size_t hn,
                  const void *tail, size_t tn, mu__conn_done_cb done,
                  void *arg);

/*
 * Queue bufs[0..n) as one write, every buffer referenced (not copied) until
 * done(arg) runs. 0, or an error without calling done.
 */
int mu__conn_sendv(mu__conn_t *c, const uv_buf_t *bufs, unsigned n,
                   mu__conn_done_cb done, void *arg);

/*
 * Close after an error reply: the queued writes go out, the sending side
 * is shut, what the peer still sends is read and dropped for up to
 * linger_ms (closing on unread bytes would send a reset that can destroy
 * the reply before the peer reads it), then the connection closes with
 * err.
 */
void mu__conn_finish(mu__conn_t *c, int err, uint64_t linger_ms);

/* Close (idempotent); err goes to on_close. */
void mu__conn_close(mu__conn_t *c, int err);

/* Stop or resume reading at the owner's wish (independent of backpressure). */
void mu__conn_hold(mu__conn_t *c, int hold);

/* Fire on_timeout after ms (0 stops the timer). */
void mu__conn_timer(mu__conn_t *c, uint64_t ms);

/* Unsent bytes queued on c. */
size_t mu__conn_queued(const mu__conn_t *c);

#endif
