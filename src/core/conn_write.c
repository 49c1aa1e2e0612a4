/* SPDX-License-Identifier: MIT */
/*
 * The writing half of core/conn.c: the queue of a connection's writes,
 * written through its stream as the socket takes them, each charged to
 * the budget at its real cost, and small replies gathered into one write
 * per batch of requests (docs/internals/budgets.md).
 */
#include <errno.h>
#include <string.h>

#include "core/alloc_int.h"
#include "core/conn_priv_int.h"
#include "core/log_int.h"
#include "core/stream_int.h"

/* ---- writing ---- */

/* A write is over (status 0: all of it written): release it and see
 * whether the peer may be read again, as libuv's write callback would. */
static void write_done(mu__conn_t *c, wreq_t *w, int status)
{
	mu__budget_t *b = c->budget;

	c->out_bytes -= w->cost;
	b->total -= w->cost;
	if (c->last_w == w)
		c->last_w = NULL;
	if (w->done != NULL)
		w->done(w->arg);
	mu__free(w);
	if (!c->closing && status < 0 && status != UV_ECANCELED)
		mu__conn_close(c, status == MU_EEOF ? 0 : status);
	if (!c->closing && c->paused && !c->cut) {
		/* the peer reads: its grace starts over, and it may be back */
		mu__conn_regrace(c);
		mu__conn_try_resume(c, 1);
	}
	mu__conn_wake_waiting(b);
}

void mu__conn_report_writes(mu__conn_t *c, int cancel)
{
	mu__list_t *it;

	while ((cancel || !c->closing) && (it = mu__list_head(&c->doneq)) != NULL) {
		wreq_t *w = mu__container_of(it, wreq_t, node);

		mu__list_remove(it);
		write_done(c, w, w->status);
	}
	while (cancel && (it = mu__list_head(&c->wq)) != NULL) {
		mu__list_remove(it);
		write_done(c, mu__container_of(it, wreq_t, node), UV_ECANCELED);
	}
}

/* w is over: its completion is reported on the next loop turn. */
static void retire(mu__conn_t *c, wreq_t *w, int status)
{
	mu__list_remove(&w->node);
	w->status = status;
	mu__list_insert_tail(&c->doneq, &w->node);
	mu__conn_kick(c);
}

/* n bytes of w went out. */
static void advance(wreq_t *w, size_t n)
{
	while (w->cur < w->n && n >= w->iov[w->cur].iov_len) {
		n -= w->iov[w->cur].iov_len;
		w->cur++;
	}
	if (w->cur < w->n && n > 0) {
		w->iov[w->cur].iov_base = (char *)w->iov[w->cur].iov_base + n;
		w->iov[w->cur].iov_len -= n;
	}
}

/* Write the queue, oldest first, as far as the socket takes it. */
void mu__conn_do_write(mu__conn_t *c)
{
	mu__list_t *it;

	while (!c->closing && (it = mu__list_head(&c->wq)) != NULL) {
		wreq_t *w = mu__container_of(it, wreq_t, node);
		size_t n = 0;
		int rc = w->cur < w->n ? mu__stream_sendv(c->st, w->iov + w->cur,
		                                          (int)(w->n - w->cur), &n) : 0;

		if (rc == -EAGAIN) {
			c->wr_want = c->st->want;
			break;
		}
		c->wr_want = 0;
		if (rc != 0) {
			/* the first reports the error and closes; the rest are dropped */
			retire(c, w, rc);
			while ((it = mu__list_head(&c->wq)) != NULL)
				retire(c, mu__container_of(it, wreq_t, node), UV_ECANCELED);
			break;
		}
		advance(w, n);
		if (w->cur == w->n)
			retire(c, w, 0);
	}
	if (!c->closing && mu__list_empty(&c->wq) && c->shut_pending)
		mu__conn_do_shutdown(c);
	mu__conn_update_poll(c);
}

/* The real cost of a write of hn copied bytes in nbufs buffers. */
static size_t write_cost(size_t hn, unsigned nbufs)
{
	return sizeof(wreq_t) + nbufs * sizeof(struct iovec) + hn + ALLOC_OVERHEAD;
}

/* A write request with room for n buffers and hn copied bytes. */
static wreq_t *wreq_new(unsigned n, size_t hn, char **head)
{
	wreq_t *w = mu__malloc(sizeof(*w) + n * sizeof(struct iovec) + hn);

	if (w == NULL)
		return NULL;
	memset(w, 0, sizeof(*w));
	w->iov = (struct iovec *)(w + 1);
	*head = (char *)(w->iov + n);
	return w;
}

/*
 * Queue w (its cost set; tail_cost to charge unless shared with the
 * previous write). A write that others caused (not an answer to the peer's
 * own request) for a peer that is not being read, and that would take it
 * past twice its budget, or the server past its total by more than one
 * peer's budget, cuts the peer off instead: reading less cannot stop
 * those writes.
 */
static int submit(mu__conn_t *c, wreq_t *w)
{
	mu__budget_t *b = c->budget;
	wreq_t *last = c->last_w;
	int shared = w->tail != NULL && last != NULL && last->tail == w->tail && last->tail_cost > 0;
	size_t add = w->cost + (shared ? 0 : w->tail_cost);
	int first = mu__list_empty(&c->wq);
	char why[256];

	if (c->cut) {
		mu__free(w);
		return -ENOBUFS;
	}
	if (!c->serving && c->paused &&
	    (mu__conn_mine(c) + add > 2 * b->lim.conn_bytes ||
	     b->total + add > b->lim.total_bytes + b->lim.conn_bytes)) {
		snprintf(why, sizeof(why), "it reads too slowly: %.1f MiB is queued for it (budget "
		         "%.1f MiB), %.1f MiB for all peers (budget %.1f MiB)", mu__mib(mu__conn_mine(c) + add),
		         mu__mib(b->lim.conn_bytes), mu__mib(b->total + add), mu__mib(b->lim.total_bytes));
		mu__conn_cut(c, why);
		mu__free(w);
		return -ENOBUFS;
	}
	mu__list_insert_tail(&c->wq, &w->node);
	if (shared) {
		/* writes complete in order: the last one sharing the tail carries it */
		last->cost -= last->tail_cost;
		w->tail_cost = last->tail_cost;
		last->tail_cost = 0;
	}
	w->cost += w->tail_cost;
	c->out_bytes += add;
	mu__conn_charge(b, add);
	mu__conn_note_peak(c);
	c->last_w = w;
	/* as uv_write: straight to the socket when nothing is ahead of it */
	if (first && !c->shut_pending)
		mu__conn_do_write(c);
	else
		mu__conn_update_poll(c);
	mu__conn_check_charge(c);
	return 0;
}

static void free_cb(void *p)
{
	mu__free(p);
}

/* Count c->gather's allocation after it changed. */
static void count_gather(mu__conn_t *c)
{
	size_t now = mu__buf_footprint(&c->gather);

	now = now > 0 ? now + ALLOC_OVERHEAD : 0;
	c->out_bytes -= c->gather_cost;
	c->budget->total -= c->gather_cost;
	c->gather_cost = now;
	c->out_bytes += now;
	mu__conn_charge(c->budget, now);
	mu__conn_note_peak(c);
}

/* Write what was gathered, as one write. A failure closes c: the peer
 * would miss replies. */
int mu__conn_flush(mu__conn_t *c)
{
	size_t len;
	char *data;
	int rc;

	if (c->gather.len == 0 || c->closing)
		return 0;
	data = mu__buf_take(&c->gather, &len);
	count_gather(c); /* the write below is charged for it instead */
	rc = mu__conn_send(c, NULL, 0, data, len, free_cb, data);
	if (rc != 0) {
		mu__free(data);
		mu__conn_close(c, rc);
	}
	return rc;
}

/* A small reply to the peer's own request: gather it. */
static int gather(mu__conn_t *c, const void *p, size_t n)
{
	int rc;

	if (c->gather.len + n > GATHER_MAX && (rc = mu__conn_flush(c)) != 0)
		return rc;
	if (mu__buf_append(&c->gather, p, n) != 0)
		return MU_ENOMEM;
	count_gather(c);
	mu__conn_check_charge(c);
	return 0;
}

int mu__conn_send(mu__conn_t *c, const void *head, size_t hn,
                  const void *tail, size_t tn, mu__conn_done_cb done,
                  void *arg)
{
	wreq_t *w;
	char *h;
	int rc;

	if (c->closing)
		return UV_ECANCELED;
	if (c->cut)
		return -ENOBUFS;
	if (c->serving && tn == 0 && hn <= GATHER_ONE && !c->draining)
		return gather(c, head, hn);
	if ((rc = mu__conn_flush(c)) != 0) /* what was gathered goes first */
		return rc;
	w = wreq_new(2, hn, &h);
	if (w == NULL)
		return MU_ENOMEM;
	w->done = done;
	w->arg = arg;
	w->hn = hn;
	w->cost = write_cost(hn, 2);
	w->tail = tn > 0 ? tail : NULL;
	w->tail_cost = tn > 0 ? tn + ALLOC_OVERHEAD : 0;
	if (hn > 0) {
		memcpy(h, head, hn);
		w->iov[w->n++] = (struct iovec){h, hn};
	}
	if (tn > 0)
		w->iov[w->n++] = (struct iovec){(void *)tail, tn};
	return submit(c, w);
}

int mu__conn_sendv(mu__conn_t *c, const uv_buf_t *bufs, unsigned n,
                   size_t extra, mu__conn_done_cb done, void *arg)
{
	wreq_t *w;
	char *h;
	unsigned i;
	int rc;

	if (c->closing)
		return UV_ECANCELED;
	if ((rc = mu__conn_flush(c)) != 0)
		return rc;
	w = wreq_new(n, 0, &h);
	if (w == NULL)
		return MU_ENOMEM;
	w->done = done;
	w->arg = arg;
	w->cost = write_cost(0, n) + extra;
	for (i = 0; i < n; i++) {
		if (bufs[i].len == 0)
			continue;
		w->iov[w->n++] = (struct iovec){bufs[i].base, bufs[i].len};
		w->cost += bufs[i].len;
	}
	return submit(c, w);
}

