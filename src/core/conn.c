/* SPDX-License-Identifier: MIT */
/*
 * Accepted-connection glue for the libuv servers, and the budget rule every
 * one of them follows; see conn_int.h and docs/internals/budgets.md.
 *
 * The connection's bytes move through its stream (stream_int.h), watched
 * with a uv_poll_t: reads go into the owner's buffer as libuv's uv_read
 * would put them, and writes are queued here and written as the socket
 * takes them, as uv_write does, with their completion reported on a later
 * loop turn (never inside the call that queued them).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/ioctl.h>
#ifdef __linux__
#include <linux/sockios.h>
#endif

#include "core/alloc_int.h"
#include "core/conn_int.h"
#include "core/log_int.h"
#include "core/conn_priv_int.h"
#include "core/stream_int.h"

/* Reads per readiness event, as libuv's uv__read: others get their turn. */
#define READS_PER_EVENT 32
/* One connection's share of a loop turn (mu__conn_yield), in ns. */
#define TURN_NS 10000000


static void update_reading(mu__conn_t *c);
static void kick_cb(uv_timer_t *t);
static void timer_cb(uv_timer_t *t);
static void grace_cb(uv_timer_t *t);

double mu__mib(size_t n)
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

void mu__conn_charge(mu__budget_t *b, size_t n)
{
	b->total += n;
	if (b->total > b->peak)
		b->peak = b->total;
}

void mu__conn_note_peak(mu__conn_t *c)
{
	size_t now = mu__conn_held(c);

	if (now > c->peak)
		c->peak = now;
}

size_t mu__conn_mine(const mu__conn_t *c)
{
	return c->out_bytes + c->own_bytes;
}

size_t mu__conn_held(const mu__conn_t *c)
{
	return c->out_bytes + c->own_bytes + c->in_bytes;
}

uint64_t mu__conn_grace_ms(const mu__conn_t *c)
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
		uv_timer_start(&c->grace, grace_cb, mu__conn_grace_ms(c), 0);
		mu__log(MU_LOG_DEBUG, c->budget->module, "%s: holds %.1f MiB, over %s: not reading",
		        c->peer, mu__mib(mu__conn_mine(c)), for_total ? "the server's total budget" : "its budget");
	}
	if (for_total && mu__list_empty(&c->wait_node))
		mu__list_insert_tail(&c->budget->waiting, &c->wait_node);
}

/* After a charge on c: is it past its budget, or the server past its total? */
void mu__conn_check_charge(mu__conn_t *c)
{
	if (c->closing || c->cut)
		return;
	if (mu__conn_mine(c) > c->budget->lim.conn_bytes)
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
	mu__conn_charge(c->budget, now);
	mu__conn_note_peak(c);
}

static void call_on_data(mu__conn_t *c)
{
	int was = c->serving;

	c->serving = 1;
	c->turn_start = uv_hrtime();
	c->ops->on_data(c);
	mu__conn_flush(c);
	c->serving = was;
	count_in(c);
}

/*
 * Resume c when it is back to half its budget, and the server within its
 * total (or c holds nothing at all); with `call`, hand it what arrived
 * before the pause.
 */
void mu__conn_try_resume(mu__conn_t *c, int call)
{
	mu__budget_t *b = c->budget;

	if (!c->paused || c->closing || c->cut || c->draining ||
	    mu__conn_mine(c) > b->lim.conn_bytes / 2 ||
	    (b->total > b->lim.total_bytes && mu__conn_mine(c) > 0))
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
void mu__conn_wake_waiting(mu__budget_t *b)
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
			mu__conn_try_resume(c, 1);
	}
}

/* Close c on the next loop turn, for its budget (why is logged now). */
void mu__conn_cut(mu__conn_t *c, const char *why)
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
		         "read nothing for %g s", mu__mib(mu__conn_mine(c)), mu__mib(b->lim.conn_bytes),
		         mu__mib(b->total), mu__mib(b->lim.total_bytes), b->lim.grace);
		mu__conn_cut(c, why);
	}
	if (c->cut)
		mu__conn_close(c, -ENOBUFS);
}

void mu__conn_regrace(mu__conn_t *c)
{
	uv_timer_start(&c->grace, grace_cb, mu__conn_grace_ms(c), 0);
}

/* ---- closing ---- */

static void handle_closed(uv_handle_t *h)
{
	mu__conn_t *c = h->data;
	mu__budget_t *b = c->budget;

	if (--c->open_handles > 0)
		return;
	mu__conn_report_writes(c, 1);
	mu__stream_close(c->st); /* NULL when detached */
	c->st = NULL;
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
	    uv_now(c->loop) - b->trimmed >= 100) {
		b->trimmed = uv_now(c->loop);
		mu__mem_trim();
	}
	c->ops->on_free(c);
	mu__conn_wake_waiting(b);
}

void mu__conn_close(mu__conn_t *c, int err)
{
	if (c->closing)
		return;
	/* replies gathered before the request that ends the connection get
	 * their chance, as those already queued do: what the socket takes at
	 * once is written, and close drops the rest */
	if (!c->cut && mu__conn_flush(c) != 0)
		return; /* closed by the failure */
	c->closing = 1;
	mu__list_remove(&c->wait_node);
	c->ops->on_close(c, err);
	uv_close((uv_handle_t *)&c->poll, handle_closed);
	uv_close((uv_handle_t *)&c->timer, handle_closed);
	uv_close((uv_handle_t *)&c->grace, handle_closed);
	uv_close((uv_handle_t *)&c->kick, handle_closed);
}

int mu__conn_detach(mu__conn_t *c, mu_stream_t **st)
{
	*st = NULL;
	if (c->closing || !mu__list_empty(&c->wq) || !mu__list_empty(&c->doneq) ||
	    c->gather.len > 0)
		return -EBUSY;
	*st = c->st;
	c->st = NULL;
	mu__conn_close(c, 0);
	return 0;
}

/* ---- reading ---- */

/* Where the next read goes: the owner's on_alloc buffer, or scratch. */
static void *read_space(mu__conn_t *c, size_t *len)
{
	void *p = NULL;
	size_t n = 0;

	if (c->ops->on_alloc != NULL && c->in.len == 0 && !c->draining)
		p = c->ops->on_alloc(c, &n);
	c->direct = p != NULL;
	if (p == NULL) {
		*len = c->scratch_len;
		return c->scratch;
	}
	*len = n > (1u << 30) ? 1u << 30 : n;
	return p;
}

/* The peer shut its sending side: it is never read again. */
static void got_eof(mu__conn_t *c)
{
	c->eof = 1;
	c->reading = 0;
	mu__conn_update_poll(c);
	if (c->draining) {
		if (c->shut_done)
			mu__conn_close(c, c->finish_err);
		return; /* the shutdown closes once the writes are out */
	}
	if (c->ops->on_eof != NULL && c->ops->on_eof(c))
		return;
	mu__conn_finish(c, 0, mu__conn_grace_ms(c));
}

/* nread bytes arrived in buf (from read_space). */
static void got_data(mu__conn_t *c, const char *buf, size_t nread)
{
	int rc;

	if (c->draining)
		return; /* the peer's last words, dropped */
	if (c->direct) {
		int was = c->serving;

		c->serving = 1;
		c->ops->on_direct(c, nread);
		mu__conn_flush(c);
		c->serving = was;
		return;
	}
	rc = mu__buf_append(&c->in, buf, nread);
	if (rc != 0) {
		mu__conn_close(c, rc);
		return;
	}
	call_on_data(c);
}

/* Read what the stream has, while c wants to read. */
static void do_read(mu__conn_t *c)
{
	int i, rc;

	for (i = 0; i < READS_PER_EVENT && c->reading && !c->closing; i++) {
		size_t len, n = 0, room = c->in.max > c->in.len ? c->in.max - c->in.len : 0;
		char *buf = read_space(c, &len);

		/* the owner yielded with input left (mu__conn_yield): read no
		 * more than c->in holds until its next turn, rather than close
		 * a pipelining peer for a slow loop */
		if (!c->direct && !c->draining && len > room)
			len = room;
		if (len == 0)
			break;

		rc = mu__stream_recv(c->st, buf, len, &n);
		if (rc == -EAGAIN) {
			c->rd_want = c->st->want;
			break;
		}
		c->rd_want = 0;
		if (rc == MU_EEOF) {
			got_eof(c);
			return;
		}
		if (rc != 0) {
			mu__conn_close(c, c->draining ? c->finish_err : rc);
			return;
		}
		got_data(c, buf, n);
		/* a short read emptied the socket, unless the stream holds more */
		if (n < len && mu__stream_pending(c->st) == 0)
			break;
	}
	/* stopped with decoded bytes held (TLS): the socket will not say so */
	if (!c->closing && c->reading && mu__stream_pending(c->st) > 0)
		uv_timer_start(&c->kick, kick_cb, 0, 0);
}

/* Read exactly when neither the owner nor the budget holds us back. */
static void update_reading(mu__conn_t *c)
{
	int want = !c->paused && !c->held && !c->eof && !c->cut;

	if (c->closing || c->st == NULL)
		return;
	if (want != c->reading) {
		c->reading = want;
		mu__conn_update_poll(c);
		if (want && mu__stream_pending(c->st) > 0)
			uv_timer_start(&c->kick, kick_cb, 0, 0);
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

/* ---- polling ---- */

static void poll_cb(uv_poll_t *p, int status, int events)
{
	mu__conn_t *c = p->data;

	(void)events;
	if (c->closing)
		return;
	if (status < 0) {
		/* libuv says UV_EBADF for POLLERR (a reset peer, say): read, so
		 * that the stream reports the socket's own error (and TLS why
		 * its handshake failed), else take it from SO_ERROR */
		int soerr = 0;
		socklen_t sl = sizeof(soerr);

		if (c->reading && !c->draining)
			do_read(c);
		if (c->closing)
			return;
		if (status == UV_EBADF && c->st != NULL &&
		    getsockopt(mu__stream_fd(c->st), SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 &&
		    soerr != 0)
			status = -soerr;
		mu__conn_close(c, c->draining ? c->finish_err : status);
		return;
	}
	/* whichever way the socket moved, both directions may go on now:
	 * TLS can need the other direction than the one it serves */
	if (!mu__list_empty(&c->wq))
		mu__conn_do_write(c);
	else if (c->shut_pending)
		mu__conn_do_shutdown(c);
	if (!c->closing && c->reading)
		do_read(c);
	if (!c->closing)
		mu__conn_update_poll(c);
}

/* Watch for what reading, the queued writes and the stream wait on. */
void mu__conn_update_poll(mu__conn_t *c)
{
	int ev = 0;

	if (c->closing || c->st == NULL)
		return;
	if (c->reading)
		ev |= c->rd_want == MU__WANT_WRITE ? UV_WRITABLE : UV_READABLE;
	if (!mu__list_empty(&c->wq) || c->shut_pending)
		ev |= c->wr_want == MU__WANT_READ ? UV_READABLE : UV_WRITABLE;
	if (ev == c->poll_events)
		return;
	c->poll_events = ev;
	if (ev == 0)
		uv_poll_stop(&c->poll);
	else
		uv_poll_start(&c->poll, ev, poll_cb);
}

static void kick_cb(uv_timer_t *t)
{
	mu__conn_t *c = t->data;

	mu__conn_report_writes(c, 0);
	if (!c->closing && c->shut_pending && mu__list_empty(&c->wq))
		mu__conn_do_shutdown(c);
	if (!c->closing && c->reading && c->st != NULL && mu__stream_pending(c->st) > 0)
		do_read(c);
	if (!c->closing)
		mu__conn_update_poll(c);
}

void mu__conn_own(mu__conn_t *c, size_t bytes)
{
	size_t was = c->own_bytes;

	c->budget->total -= was;
	c->own_bytes = bytes;
	mu__conn_charge(c->budget, bytes);
	mu__conn_note_peak(c);
	if (bytes > was)
		mu__conn_check_charge(c);
	else if (bytes < was)
		mu__conn_try_resume(c, 0); /* the owner is running: it sees paused clear */
}

void mu__conn_input(mu__conn_t *c, size_t bytes)
{
	c->budget->total -= c->in_bytes;
	c->in_bytes = c->in_bytes - c->in_owner + bytes;
	c->in_owner = bytes;
	mu__conn_charge(c->budget, c->in_bytes);
	mu__conn_note_peak(c);
}

int mu__conn_input_admit(mu__conn_t *c, size_t bytes, size_t message, char *why, size_t wl)
{
	mu__budget_t *b = c->budget;
	size_t others = b->total - c->in_owner;
	size_t conn = b->lim.conn_bytes > message ? b->lim.conn_bytes : message;
	/* alone, one message fits whatever --total-budget says */
	size_t total = others == 0 && message > b->lim.total_bytes ? message : b->lim.total_bytes;
	const char *opt = conn == b->lim.conn_bytes ? "--conn-budget" : "--max-frame";

	if (bytes > conn) {
		snprintf(why, wl, "%.1f MiB, more than one peer may make this server hold (%s %.1f MiB)",
		         mu__mib(bytes), opt, mu__mib(conn));
		return MU_ETOOBIG;
	}
	if (others > total - bytes) {
		snprintf(why, wl, "%.1f MiB, more than fits the server's total budget (--total-budget "
		         "%.1f MiB; all peers hold %.1f MiB)", mu__mib(bytes), mu__mib(total),
		         mu__mib(others));
		return MU_ETOOBIG;
	}
	mu__conn_input(c, bytes);
	return 0;
}

void mu__conn_kick(mu__conn_t *c)
{
	uv_timer_start(&c->kick, kick_cb, 0, 0);
}

/* ---- finishing ---- */

/* The sending side is shut (status < 0: it could not be). */
static void shutdown_done(mu__conn_t *c, int status)
{
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

/* The writes are out: shut the sending side (TLS: its close_notify). */
void mu__conn_do_shutdown(mu__conn_t *c)
{
	int rc = mu__stream_shutdown(c->st);

	if (rc == -EAGAIN) {
		c->wr_want = c->st->want;
		return; /* on the socket's next turn */
	}
	c->shut_pending = 0;
	mu__conn_update_poll(c);
	shutdown_done(c, rc);
}

void mu__conn_finish(mu__conn_t *c, int err, uint64_t linger_ms)
{
	if (c->closing || c->draining)
		return;
	if (mu__conn_flush(c) != 0)
		return; /* closed */
	c->draining = 1;
	c->finish_err = err;
	uv_timer_stop(&c->timer);
	if (c->eof && c->out_bytes == 0) {
		mu__conn_close(c, err);
		return;
	}
	/* shut down once the queue is out, on a later turn (never inside the
	 * owner's call) */
	c->shut_pending = 1;
	if (mu__list_empty(&c->wq))
		uv_timer_start(&c->kick, kick_cb, 0, 0);
	mu__conn_update_poll(c);
	uv_timer_start(&c->timer, timer_cb, linger_ms, 0);
}

int mu__conn_delivered(mu__conn_t *c)
{
	int unacked = 1;

	if (c->closing || !c->draining || !c->shut_done || c->st == NULL)
		return 0;
	/* a TLS stream's bytes are all out once its table wrote them: the
	 * socket's queue is what is left */
#ifdef SIOCOUTQ
	/* bytes sent but not yet acknowledged, the FIN included */
	if (ioctl(mu__stream_fd(c->st), SIOCOUTQ, &unacked) != 0)
		unacked = 1;
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

int mu__conn_accept(mu__conn_t *c, uv_loop_t *loop, mu_stream_t *st,
                    const mu__conn_ops_t *ops, size_t max_in, char *scratch,
                    size_t scratch_len, mu__budget_t *budget)
{
	int rc;

	c->ops = ops;
	c->budget = budget;
	c->loop = loop;
	c->st = st;
	c->scratch = scratch;
	c->scratch_len = scratch_len;
	mu__list_init(&c->wait_node);
	mu__list_init(&c->wq);
	mu__list_init(&c->doneq);
	mu__buf_init(&c->in, max_in);
	mu__buf_init(&c->gather, GATHER_MAX);
	snprintf(c->peer, sizeof(c->peer), "%s", st->peer);
	snprintf(c->ip, sizeof(c->ip), "%s", st->ip);
	rc = uv_poll_init(loop, &c->poll, st->fd);
	if (rc != 0) {
		/* no handle is open: close the way handle_closed would */
		c->closing = 1;
		c->ops->on_close(c, rc);
		mu__stream_close(st);
		c->st = NULL;
		c->ops->on_free(c);
		return rc;
	}
	c->poll.data = c;
	c->timer.data = c;
	c->grace.data = c;
	c->kick.data = c;
	c->open_handles = 4;
	uv_timer_init(loop, &c->timer);
	uv_timer_init(loop, &c->grace);
	uv_timer_init(loop, &c->kick);
	update_reading(c);
	return 0;
}
