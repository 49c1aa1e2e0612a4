/* SPDX-License-Identifier: MIT */
/*
 * What the two halves of core/conn.c share: conn.c (the budget rule,
 * reading, polling, closing) and conn_write.c (the write queue and
 * gathering). Nothing outside those two files includes this.
 */
#ifndef MU_CORE_CONN_PRIV_INT_H
#define MU_CORE_CONN_PRIV_INT_H

#include <sys/uio.h>

#include "core/conn_int.h"

/*
 * What the allocator adds to each block we count: glibc's malloc keeps an
 * 8-byte header and rounds to 16, and the block's tail is often lost to
 * rounding as well. Counting 32 per block overstates small blocks a little
 * and never understates them, which is the side a budget must err on.
 */
#define ALLOC_OVERHEAD 32
/*
 * Small replies to a peer's own requests are gathered into one buffer of
 * at most this many bytes and written once per batch of requests (when the
 * owner's on_data returns): a pipelining peer costs one write, and one
 * system call, per read instead of one per request.
 */
#define GATHER_MAX 65536
#define GATHER_ONE 1024 /* the largest reply gathered */

/*
 * One queued write: iov[cur..n) is what is left of it (iov[cur] advanced
 * past what was written). The iov array and the copied head live in the
 * same block.
 */
typedef struct {
	mu__list_t node;   /* in c->wq, then c->doneq */
	int status;        /* its outcome, for doneq */
	unsigned n, cur;
	struct iovec *iov;
	mu__conn_done_cb done;
	void *arg;
	size_t cost;       /* charged to the connection for this write */
	size_t tail_cost;  /* ... of which for its tail (moved to a later
	                    * write that shares the tail) */
	const void *tail;
	size_t hn;
	char head[]; /* the copied head */
} wreq_t;

/* conn.c: the budget rule */
double mu__mib(size_t n);
void mu__conn_charge(mu__budget_t *b, size_t n);
void mu__conn_note_peak(mu__conn_t *c);
size_t mu__conn_mine(const mu__conn_t *c);
uint64_t mu__conn_grace_ms(const mu__conn_t *c);
void mu__conn_check_charge(mu__conn_t *c);
void mu__conn_try_resume(mu__conn_t *c, int call);
void mu__conn_wake_waiting(mu__budget_t *b);
void mu__conn_cut(mu__conn_t *c, const char *why);
/* The peer read something: its grace starts over. */
void mu__conn_regrace(mu__conn_t *c);

/* conn.c: the loop */
void mu__conn_update_poll(mu__conn_t *c);
/* Run the connection's deferred work on the next loop turn. */
void mu__conn_kick(mu__conn_t *c);
void mu__conn_do_shutdown(mu__conn_t *c);

/* conn_write.c */
void mu__conn_do_write(mu__conn_t *c);
/* Write what was gathered, as one write; a failure closes c. */
int mu__conn_flush(mu__conn_t *c);
/* Report the writes that are done (cancel: and drop the queued ones). */
void mu__conn_report_writes(mu__conn_t *c, int cancel);

#endif
