/* SPDX-License-Identifier: MIT */
/*
 * Accepted-connection glue for the libuv servers; see conn_int.h.
 */
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/conn_int.h"
#include "core/list_int.h"

typedef struct {
	uv_write_t req;
	mu__conn_done_cb done;
	void *arg;
	size_t hn;
	char head[]; /* the copied head */
} wreq_t;



static void update_reading(mu__conn_t *c);
static void timer_cb(uv_timer_t *t);
static void write_cb(uv_write_t *req, int status);

static void handle_closed(uv_handle_t *h)
{
	mu__conn_t *c = h->data;

	if (--c->open_handles > 0)
		return;
	mu__buf_free(&c->in);
	c->ops->on_free(c);
}

void mu__conn_close(mu__conn_t *c, int err)
{
	if (c->closing)
		return;
	c->closing = 1;
	c->ops->on_close(c, err);
	uv_close((uv_handle_t *)&c->tcp, handle_closed);
	uv_close((uv_handle_t *)&c->timer, handle_closed);
}

size_t mu__conn_queued(const mu__conn_t *c)
{
	return uv_stream_get_write_queue_size((const uv_stream_t *)&c->tcp);
}

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

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	mu__conn_t *c = s->data;
	int rc;

	if (nread == 0 || c->closing)
		return;
	if (nread < 0) {
		if (nread == UV_EOF && !c->draining && c->ops->on_eof != NULL && c->ops->on_eof(c))
			return;
		mu__conn_close(c, c->draining ? c->finish_err
		                              : nread == UV_EOF || nread == UV_ECONNRESET ? 0 : (int)nread);
		return;
	}
	if (c->draining)
		return; /* the peer's last words, dropped */
	if (c->direct) {
		c->ops->on_direct(c, (size_t)nread);
		return;
	}
	rc = mu__buf_append(&c->in, buf->base, (size_t)nread);
	if (rc != 0) {
		mu__conn_close(c, rc);
		return;
	}
	c->ops->on_data(c);
}

/* Read exactly when neither the owner nor backpressure holds us back. */
static void update_reading(mu__conn_t *c)
{
	if (c->closing)
		return;
	if ((c->paused || c->held) && c->reading) {
		uv_read_stop((uv_stream_t *)&c->tcp);
		c->reading = 0;
	} else if (!c->paused && !c->held && !c->reading) {
		c->reading = uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb) == 0;
	}
}

static void write_cb(uv_write_t *req, int status)
{
	wreq_t *w = mu__container_of(req, wreq_t, req);
	mu__conn_t *c = req->handle->data;

	if (w->done != NULL)
		w->done(w->arg);
	mu__free(w);
	if (c->closing)
		return;
	if (status < 0 && status != UV_ECANCELED) {
		mu__conn_close(c, status == UV_EPIPE || status == UV_ECONNRESET ? 0 : status);
		return;
	}
	if (c->paused && mu__conn_queued(c) < c->wq_low) {
		c->paused = 0;
		update_reading(c);
		if (!c->held)
			c->ops->on_data(c); /* what arrived before the pause */
	}
}

/* Queue w's write of bufs; past wq_high unsent bytes, stop reading. */
static int submit(mu__conn_t *c, wreq_t *w, const uv_buf_t *bufs, unsigned n)
{
	int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, bufs, n, write_cb);

	if (rc != 0) {
		mu__free(w);
		return rc;
	}
	if (!c->paused && mu__conn_queued(c) > c->wq_high) {
		c->paused = 1;
		update_reading(c);
	}
	return 0;
}

int mu__conn_send(mu__conn_t *c, const void *head, size_t hn,
                  const void *tail, size_t tn, mu__conn_done_cb done,
                  void *arg)
{
	uv_buf_t bufs[2];
	wreq_t *w;
	int n = 0;

	if (c->closing)
		return UV_ECANCELED;
	w = mu__malloc(sizeof(*w) + hn);
	if (w == NULL)
		return MU_ENOMEM;
	w->done = done;
	w->arg = arg;
	w->hn = hn;
	if (hn > 0) {
		memcpy(w->head, head, hn);
		bufs[n++] = uv_buf_init(w->head, (unsigned)hn);
	}
	if (tn > 0)
		bufs[n++] = uv_buf_init((char *)tail, (unsigned)tn);
	return submit(c, w, bufs, (unsigned)n);
}

int mu__conn_sendv(mu__conn_t *c, const uv_buf_t *bufs, unsigned n,
                   mu__conn_done_cb done, void *arg)
{
	wreq_t *w;

	if (c->closing)
		return UV_ECANCELED;
	w = mu__malloc(sizeof(*w));
	if (w == NULL)
		return MU_ENOMEM;
	w->done = done;
	w->arg = arg;
	w->hn = 0;
	return submit(c, w, bufs, n);
}

static void shutdown_cb(uv_shutdown_t *req, int status)
{
	mu__conn_t *c = req->handle->data;

	(void)status;
	if (c->closing)
		return;
	/* keep reading (and dropping) until the peer closes or the timer */
	c->held = 0;
	c->paused = 0;
	update_reading(c);
}

void mu__conn_finish(mu__conn_t *c, int err, uint64_t linger_ms)
{
	if (c->closing || c->draining)
		return;
	c->draining = 1;
	c->finish_err = err;
	uv_timer_stop(&c->timer);
	if (uv_shutdown(&c->shut, (uv_stream_t *)&c->tcp, shutdown_cb) != 0) {
		mu__conn_close(c, err);
		return;
	}
	uv_timer_start(&c->timer, timer_cb, linger_ms, 0);
}

void mu__conn_hold(mu__conn_t *c, int hold)
{
	c->held = hold;
	update_reading(c);
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

int mu__conn_accept(mu__conn_t *c, uv_stream_t *listener,
                    const mu__conn_ops_t *ops, size_t max_in, char *scratch,
                    size_t scratch_len)
{
	int port = 0, rc;

	c->ops = ops;
	c->scratch = scratch;
	c->scratch_len = scratch_len;
	c->tcp.data = c;
	c->timer.data = c;
	c->open_handles = 2;
	if (c->wq_high == 0) {
		c->wq_high = 4u << 20;
		c->wq_low = 1u << 20;
	}
	mu__buf_init(&c->in, max_in);
	uv_tcp_init(listener->loop, &c->tcp);
	uv_timer_init(listener->loop, &c->timer);
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
