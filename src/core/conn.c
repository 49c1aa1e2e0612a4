/* SPDX-License-Identifier: MIT */
/*
 * Accepted-connection glue for the libuv servers, and the budget rule every
 * one of them follows; see conn_int.h and docs/internals/budgets.md.
 */
#include <errno.h>
#include <string.h>
#include <sys/ioctl.h>
#ifdef __linux__
#include <linux/sockios.h>
#endif

#include "core/alloc_int.h"
#include "core/conn_int.h"
#include "core/log_int.h"

/*
 * What the allocator adds to each block we count: glibc's malloc keeps an
 * 8-byte header and rounds to 16, and the block's tail is often lost to
 * rounding as well. Counting 32 per block overstates small blocks a little
 * and never understates them, which is the side a budget must err on.
 */
#define ALLOC_OVERHEAD 32
/* libuv copies a list of more buffers than this into a block of its own. */
#define UV_INLINE_BUFS 4
/*
 * Small replies to a peer's own requests are gathered into one buffer of
 * at most this many bytes and written once per batch of requests (when the
 * owner's on_data returns): a pipelining peer costs one write, and one
 * system call, per read instead of one per request.
 */
#define GATHER_MAX 65536
#define GATHER_ONE 1024 /* the largest reply gathered */
/* One connection's share of a loop turn (mu__conn_yield), in ns. */
#define TURN_NS 10000000

typedef struct {
	uv_write_t req;
	mu__conn_done_cb done;
	void *arg;
	size_t cost;       /* charged to the connection for this write */
	size_t tail_cost;  /* ... of which for its tail (moved to a later
	                    * write that shares the tail) */
	const void *tail;
	size_t hn;
	char head[]; /* the copied head */
} wreq_t;

static void update_reading(mu__conn_t *c);
static void timer_cb(uv_timer_t *t);
static void grace_cb(uv_timer_t *t);
static int flush(mu__conn_t *c);

static double mib(size_t n)
{
	return (double)n / (1024.0 * 1024.0);
}

/* ---- the budget ---- */

void mu_budget_init(mu_budget_t *b)
{
	b->conn_bytes = MU_BUDGET_CONN_DEFAULT;
	b->total_bytes = MU_BUDGET_TOTAL_DEFAULT;
	b->grace = MU_BUDGET_GRACE_DEFAULT;
}

int mu_budget_check(const mu_budget_t *b)
{
	return b != NULL && b->conn_bytes > 0 && b->total_bytes >= b->conn_bytes &&
	       b->grace > 0 && b->grace <= 1e6 ? 0 : MU_EARG;
}

void mu__budget_init(mu__budget_t *b, const mu_budget_t *lim, const char *module)
{
	memset(b, 0, sizeof(*b));
	if (lim != NULL)
		b->lim = *lim;
	else
		mu_budget_init(&b->lim);
	mu__list_init(&b->waiting);
	b->module = module;
}

static void charge(mu__budget_t *b, size_t n)
{
	b->total += n;
	if (b->total > b->peak)
		b->peak = b->total;
}

static void note_peak(mu__conn_t *c)
{
	size_t now = mu__conn_held(c);

	if (now > c->peak)
		c->peak = now;
}

static size_t mine(const mu__conn_t *c)
{
	return c->out_bytes + c->own_bytes;
}

size_t mu__conn_held(const mu__conn_t *c)
{
	return c->out_bytes + c->own_bytes + c->in_bytes;
}

static uint64_t grace_ms(const mu__conn_t *c)
{
	double ms = c->budget->lim.grace * 1000.0;

	return ms < 1 ? 1 : (uint64_t)ms;
}

/* Stop reading c: past its own budget, or (for_total) the server's. */
static void pause_for(mu__conn_t *c, int for_total)
{
	if (!c->paused) {
		c->paused = 1;
		update_reading(c);
		uv_timer_start(&c->grace, grace_cb, grace_ms(c), 0);
		mu__log(MU_LOG_DEBUG, c->budget->module, "%s: holds %.1f MiB, over %s: not reading",
		        c->peer, mib(mine(c)), for_total ? "the server's total budget" : "its budget");
	}
	if (for_total && mu__list_empty(&c->wait_node))
		mu__list_insert_tail(&c->budget->waiting, &c->wait_node);
}

/* After a charge on c: is it past its budget, or the server past its total? */
static void check_charge(mu__conn_t *c)
{
	if (c->closing || c->cut)
		return;
	if (mine(c) > c->budget->lim.conn_bytes)
		pause_for(c, 0);
	else if (c->budget->total > c->budget->lim.total_bytes)
		pause_for(c, 1);
}

static void unpause(mu__conn_t *c)
{
	c->paused = 0;
	mu__list_remove(&c->wait_node);
	uv_timer_stop(&c->grace);
}

/* Input bookkeeping after the owner has consumed what it could. */
static void count_in(mu__conn_t *c)
{
	size_t now;

	/* a large request leaves a large buffer: give it back once it is done */
	if (!c->closing && c->in.len == 0 && mu__buf_footprint(&c->in) > c->scratch_len + 1)
		mu__buf_free(&c->in);
	now = mu__buf_footprint(&c->in);
	now = (now > 0 ? now + ALLOC_OVERHEAD : 0) + c->in_owner;
	c->budget->total -= c->in_bytes;
	c->in_bytes = now;
	charge(c->budget, now);
	note_peak(c);
}

static void call_on_data(mu__conn_t *c)
{
	int was = c->serving;

	c->serving = 1;
	c->turn_start = uv_hrtime();
	c->ops->on_data(c);
	flush(c);
	c->serving = was;
	count_in(c);
}

/*
 * Resume c when it is back to half its budget, and the server within its
 * total (or c holds nothing at all); with `call`, hand it what arrived
 * before the pause.
 */
static void try_resume(mu__conn_t *c, int call)
{
	mu__budget_t *b = c->budget;

	if (!c->paused || c->closing || c->cut || c->draining ||
	    mine(c) > b->lim.conn_bytes / 2 ||
	    (b->total > b->lim.total_bytes && mine(c) > 0))
		return;
	unpause(c);
	update_reading(c);
	mu__log(MU_LOG_DEBUG, b->module, "%s: within its budget again: reading", c->peer);
	if (call && !c->held)
		call_on_data(c);
	else if (!call && !c->held && c->in.len > 0)
		/* requests that waited: served on the next loop turn (the owner
		 * may be inside a callback of its own now) */
		uv_timer_start(&c->grace, grace_cb, 0, 0);
}

/* The server is back within its total: resume who waited for that. */
static void wake_waiting(mu__budget_t *b)
{
	mu__list_t local, *it;

	if (b->total > b->lim.total_bytes || mu__list_empty(&b->waiting))
		return;
	mu__list_init(&local);
	while ((it = mu__list_head(&b->waiting)) != NULL) {
		mu__list_remove(it);
		mu__list_insert_tail(&local, it);
	}
	/* one at a time: resuming one may pause (re-list) it, or close others */
	while ((it = mu__list_head(&local)) != NULL) {
		mu__conn_t *c = mu__container_of(it, mu__conn_t, wait_node);

		mu__list_remove(it);
		if (b->total > b->lim.total_bytes)
			mu__list_insert_tail(&b->waiting, it);
		else
			try_resume(c, 1);
	}
}

/* Close c on the next loop turn, for its budget (why is logged now). */
static void cut(mu__conn_t *c, const char *why)
{
	if (c->cut || c->closing)
		return;
	c->cut = 1;
	c->budget->cut++;
	mu__log(MU_LOG_WARN, c->budget->module, "%s: closing: %s", c->peer, why);
	update_reading(c);
	uv_timer_start(&c->grace, grace_cb, 0, 0);
}

static void grace_cb(uv_timer_t *t)
{
	mu__conn_t *c = t->data;
	mu__budget_t *b = c->budget;
	char why[256];

	if (c->closing)
		return;
	if (!c->cut && !c->paused) {
		/* the kick of try_resume: what arrived before the pause */
		if (!c->held && !c->draining && c->in.len > 0)
			call_on_data(c);
		return;
	}
	if (!c->cut && c->paused) {
		snprintf(why, sizeof(why),
		         "it holds %.1f MiB (budget %.1f MiB; all peers %.1f of %.1f MiB) and "
		         "read nothing for %g s", mib(mine(c)), mib(b->lim.conn_bytes),
		         mib(b->total), mib(b->lim.total_bytes), b->lim.grace);
		cut(c, why);
	}
	if (c->cut)
		mu__conn_close(c, -ENOBUFS);
}

/* ---- closing ---- */

static void handle_closed(uv_handle_t *h)
{
	mu__conn_t *c = h->data;
	mu__budget_t *b = c->budget;

	if (--c->open_handles > 0)
		return;
	/* every write has completed or been dropped by now */
	b->total -= c->in_bytes + c->own_bytes + c->out_bytes;
	c->in_bytes = c->own_bytes = c->out_bytes = c->gather_cost = 0;
	mu__list_remove(&c->wait_node);
	mu__buf_free(&c->in);
	mu__buf_free(&c->gather);
	/*
	 * What a peer that held megabytes made us allocate is free now, but
	 * the allocator keeps it: give it back, so memory comes back after a
	 * flood. Each trim is paid for by a peer holding a quarter of its
	 * budget first, and trims are 100 ms apart at least.
	 */
	if (c->peak >= b->lim.conn_bytes / 4 && c->peak >= (1u << 20) &&
	    uv_now(c->tcp.loop) - b->trimmed >= 100) {
		b->trimmed = uv_now(c->tcp.loop);
		mu__mem_trim();
	}
	c->ops->on_free(c);
	wake_waiting(b);
}

void mu__conn_close(mu__conn_t *c, int err)
{
	if (c->closing)
		return;
	/* replies gathered before the request that ends the connection get
	 * their chance, as those already queued do: libuv writes what the
	 * socket takes at once, and close drops the rest */
	if (!c->cut && flush(c) != 0)
		return; /* closed by the failure */
	c->closing = 1;
	mu__list_remove(&c->wait_node);
	c->ops->on_close(c, err);
	uv_close((uv_handle_t *)&c->tcp, handle_closed);
	uv_close((uv_handle_t *)&c->timer, handle_closed);
	uv_close((uv_handle_t *)&c->grace, handle_closed);
}

/* ---- reading ---- */

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	mu__conn_t *c = h->data;
	size_t n = 0;
	void *p = NULL;

	(void)hint;
	if (c->ops->on_alloc != NULL && c->in.len == 0 && !c->draining)
		p = c->ops->on_alloc(c, &n);
	c->direct = p != NULL;
	if (p != NULL)
		*buf = uv_buf_init(p, (unsigned)(n > (1u << 30) ? 1u << 30 : n));
	else
		*buf = uv_buf_init(c->scratch, (unsigned)c->scratch_len);
}

/* The peer shut its sending side; libuv has stopped reading. */
static void got_eof(mu__conn_t *c)
{
	c->eof = 1;
	c->reading = 0;
	if (c->draining) {
		if (c->shut_done)
			mu__conn_close(c, c->finish_err);
		return; /* shutdown_cb closes once the writes are out */
	}
	if (c->ops->on_eof != NULL && c->ops->on_eof(c))
		return;
	mu__conn_finish(c, 0, grace_ms(c));
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	mu__conn_t *c = s->data;
	int rc;

	if (nread == 0 || c->closing)
		return;
	if (nread == UV_EOF) {
		got_eof(c);
		return;
	}
	if (nread < 0) {
		mu__conn_close(c, c->draining ? c->finish_err
		                              : nread == UV_ECONNRESET ? 0 : (int)nread);
		return;
	}
	if (c->draining)
		return; /* the peer's last words, dropped */
	if (c->direct) {
		int was = c->serving;

		c->serving = 1;
		c->ops->on_direct(c, (size_t)nread);
		flush(c);
		c->serving = was;
		return;
	}
	rc = mu__buf_append(&c->in, buf->base, (size_t)nread);
	if (rc != 0) {
		mu__conn_close(c, rc);
		return;
	}
	call_on_data(c);
}

/* Read exactly when neither the owner nor the budget holds us back. */
static void update_reading(mu__conn_t *c)
{
	int want = !c->paused && !c->held && !c->eof && !c->cut;

	if (c->closing)
		return;
	if (!want && c->reading) {
		uv_read_stop((uv_stream_t *)&c->tcp);
		c->reading = 0;
	} else if (want && !c->reading) {
		c->reading = uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb) == 0;
	}
}

int mu__conn_yield(mu__conn_t *c)
{
	if (uv_hrtime() - c->turn_start < TURN_NS)
		return 0;
	if (!c->paused && !c->cut && !c->closing)
		uv_timer_start(&c->grace, grace_cb, 0, 0); /* on_data again, next turn */
	return 1;
}

void mu__conn_hold(mu__conn_t *c, int hold)
{
	c->held = hold;
	update_reading(c);
}

/* ---- writing ---- */

static void write_cb(uv_write_t *req, int status)
{
	wreq_t *w = mu__container_of(req, wreq_t, req);
	mu__conn_t *c = req->handle->data;
	mu__budget_t *b = c->budget;

	c->out_bytes -= w->cost;
	b->total -= w->cost;
	if (c->last_w == w)
		c->last_w = NULL;
	if (w->done != NULL)
		w->done(w->arg);
	mu__free(w);
	if (!c->closing && status < 0 && status != UV_ECANCELED)
		mu__conn_close(c, status == UV_EPIPE || status == UV_ECONNRESET ? 0 : status);
	if (!c->closing && c->paused && !c->cut) {
		/* the peer reads: its grace starts over, and it may be back */
		uv_timer_start(&c->grace, grace_cb, grace_ms(c), 0);
		try_resume(c, 1);
	}
	wake_waiting(b);
}

/* The real cost of a write of hn copied bytes in nbufs buffers. */
static size_t write_cost(size_t hn, unsigned nbufs)
{
	size_t cost = sizeof(wreq_t) + hn + ALLOC_OVERHEAD;

	if (nbufs > UV_INLINE_BUFS)
		cost += nbufs * sizeof(uv_buf_t) + ALLOC_OVERHEAD;
	return cost;
}

/*
 * Queue w (its cost set; tail_cost to charge unless shared with the
 * previous write). A write that others caused (not an answer to the peer's
 * own request) for a peer that is not being read, and that would take it
 * past twice its budget, or the server past its total by more than one
 * peer's budget, cuts the peer off instead: reading less cannot stop
 * those writes.
 */
static int submit(mu__conn_t *c, wreq_t *w, const uv_buf_t *bufs, unsigned n)
{
	mu__budget_t *b = c->budget;
	wreq_t *last = c->last_w;
	int shared = w->tail != NULL && last != NULL && last->tail == w->tail && last->tail_cost > 0;
	size_t add = w->cost + (shared ? 0 : w->tail_cost);
	char why[256];
	int rc;

	if (c->cut) {
		mu__free(w);
		return -ENOBUFS;
	}
	if (!c->serving && c->paused &&
	    (mine(c) + add > 2 * b->lim.conn_bytes ||
	     b->total + add > b->lim.total_bytes + b->lim.conn_bytes)) {
		snprintf(why, sizeof(why), "it reads too slowly: %.1f MiB is queued for it (budget "
		         "%.1f MiB), %.1f MiB for all peers (budget %.1f MiB)", mib(mine(c) + add),
		         mib(b->lim.conn_bytes), mib(b->total + add), mib(b->lim.total_bytes));
		cut(c, why);
		mu__free(w);
		return -ENOBUFS;
	}
	rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, bufs, n, write_cb);
	if (rc != 0) {
		mu__free(w);
		return rc;
	}
	if (shared) {
		/* writes complete in order: the last one sharing the tail carries it */
		last->cost -= last->tail_cost;
		w->tail_cost = last->tail_cost;
		last->tail_cost = 0;
	}
	w->cost += w->tail_cost;
	c->out_bytes += add;
	charge(b, add);
	note_peak(c);
	c->last_w = w;
	check_charge(c);
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
	charge(c->budget, now);
	note_peak(c);
}

/* Write what was gathered, as one write. A failure closes c: the peer
 * would miss replies. */
static int flush(mu__conn_t *c)
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

	if (c->gather.len + n > GATHER_MAX && (rc = flush(c)) != 0)
		return rc;
	if (mu__buf_append(&c->gather, p, n) != 0)
		return MU_ENOMEM;
	count_gather(c);
	check_charge(c);
	return 0;
}

int mu__conn_send(mu__conn_t *c, const void *head, size_t hn,
                  const void *tail, size_t tn, mu__conn_done_cb done,
                  void *arg)
{
	uv_buf_t bufs[2];
	wreq_t *w;
	int n = 0, rc;

	if (c->closing)
		return UV_ECANCELED;
	if (c->cut)
		return -ENOBUFS;
	if (c->serving && tn == 0 && hn <= GATHER_ONE && !c->draining)
		return gather(c, head, hn);
	if ((rc = flush(c)) != 0) /* what was gathered goes first */
		return rc;
	w = mu__malloc(sizeof(*w) + hn);
	if (w == NULL)
		return MU_ENOMEM;
	w->done = done;
	w->arg = arg;
	w->hn = hn;
	w->cost = write_cost(hn, 2);
	w->tail = tn > 0 ? tail : NULL;
	w->tail_cost = tn > 0 ? tn + ALLOC_OVERHEAD : 0;
	if (hn > 0) {
		memcpy(w->head, head, hn);
		bufs[n++] = uv_buf_init(w->head, (unsigned)hn);
	}
	if (tn > 0)
		bufs[n++] = uv_buf_init((char *)tail, (unsigned)tn);
	return submit(c, w, bufs, (unsigned)n);
}

int mu__conn_sendv(mu__conn_t *c, const uv_buf_t *bufs, unsigned n,
                   size_t extra, mu__conn_done_cb done, void *arg)
{
	wreq_t *w;
	unsigned i;
	int rc;

	if (c->closing)
		return UV_ECANCELED;
	if ((rc = flush(c)) != 0)
		return rc;
	w = mu__malloc(sizeof(*w));
	if (w == NULL)
		return MU_ENOMEM;
	w->done = done;
	w->arg = arg;
	w->hn = 0;
	w->tail = NULL;
	w->tail_cost = 0;
	w->cost = write_cost(0, n) + extra;
	for (i = 0; i < n; i++)
		w->cost += bufs[i].len;
	return submit(c, w, bufs, n);
}

void mu__conn_own(mu__conn_t *c, size_t bytes)
{
	size_t was = c->own_bytes;

	c->budget->total -= was;
	c->own_bytes = bytes;
	charge(c->budget, bytes);
	note_peak(c);
	if (bytes > was)
		check_charge(c);
	else if (bytes < was)
		try_resume(c, 0); /* the owner is running: it sees paused clear */
}

void mu__conn_input(mu__conn_t *c, size_t bytes)
{
	c->budget->total -= c->in_bytes;
	c->in_bytes = c->in_bytes - c->in_owner + bytes;
	c->in_owner = bytes;
	charge(c->budget, c->in_bytes);
	note_peak(c);
}

/* ---- finishing ---- */

static void shutdown_cb(uv_shutdown_t *req, int status)
{
	mu__conn_t *c = req->handle->data;

	c->shut_done = 1;
	if (c->closing)
		return;
	/* nothing more can come from a peer that shut its side */
	if (c->eof || status < 0) {
		mu__conn_close(c, c->finish_err);
		return;
	}
	/* keep reading (and dropping) until the peer closes or the timer */
	c->held = 0;
	if (c->paused)
		unpause(c);
	update_reading(c);
}

void mu__conn_finish(mu__conn_t *c, int err, uint64_t linger_ms)
{
	if (c->closing || c->draining)
		return;
	if (flush(c) != 0)
		return; /* closed */
	c->draining = 1;
	c->finish_err = err;
	uv_timer_stop(&c->timer);
	if ((c->eof && c->out_bytes == 0) ||
	    uv_shutdown(&c->shut, (uv_stream_t *)&c->tcp, shutdown_cb) != 0) {
		mu__conn_close(c, err);
		return;
	}
	uv_timer_start(&c->timer, timer_cb, linger_ms, 0);
}

int mu__conn_delivered(mu__conn_t *c)
{
	uv_os_fd_t fd;
	int unacked = 1;

	if (c->closing || !c->draining || !c->shut_done)
		return 0;
#ifdef SIOCOUTQ
	/* bytes sent but not yet acknowledged, the FIN included */
	if (uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0 || ioctl(fd, SIOCOUTQ, &unacked) != 0)
		unacked = 1;
#else
	(void)fd; /* unknowable here: wait for the peer's close or the deadline */
#endif
	return unacked == 0;
}

static void timer_cb(uv_timer_t *t)
{
	mu__conn_t *c = t->data;

	if (c->closing)
		return;
	if (c->draining)
		mu__conn_close(c, c->finish_err);
	else
		c->ops->on_timeout(c);
}

void mu__conn_timer(mu__conn_t *c, uint64_t ms)
{
	if (ms == 0)
		uv_timer_stop(&c->timer);
	else
		uv_timer_start(&c->timer, timer_cb, ms, 0);
}

/* ---- accepting ---- */

int mu__conn_accept(mu__conn_t *c, uv_stream_t *listener,
                    const mu__conn_ops_t *ops, size_t max_in, char *scratch,
                    size_t scratch_len, mu__budget_t *budget)
{
	int port = 0, rc;

	c->ops = ops;
	c->budget = budget;
	c->scratch = scratch;
	c->scratch_len = scratch_len;
	c->tcp.data = c;
	c->timer.data = c;
	c->grace.data = c;
	c->open_handles = 3;
	mu__list_init(&c->wait_node);
	mu__buf_init(&c->in, max_in);
	mu__buf_init(&c->gather, GATHER_MAX);
	uv_tcp_init(listener->loop, &c->tcp);
	uv_timer_init(listener->loop, &c->timer);
	uv_timer_init(listener->loop, &c->grace);
	rc = uv_accept(listener, (uv_stream_t *)&c->tcp);
	if (rc == 0)
		rc = mu__tcp_peer(&c->tcp, c->ip, sizeof(c->ip), &port);
	if (rc != 0) {
		mu__conn_close(c, rc);
		return rc;
	}
	mu__hostport_text(c->ip, port, c->peer, sizeof(c->peer));
	uv_tcp_nodelay(&c->tcp, 1);
	update_reading(c);
	return 0;
}
