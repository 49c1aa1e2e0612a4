/* SPDX-License-Identifier: MIT */
/*
 * The Prometheus endpoint (include/muster/serve.h): a registry's text at
 * /metrics, on a loop of its own or on an API server's. It answers one
 * HTTP/1.x request per connection and closes, on core/conn.c's
 * connections (their budget, timer and orderly close) rather than the
 * API server's HTTP layer: what a scraper needs is that small, and it
 * must be answered whoever else is connected.
 *
 * So idle holders cannot lock scrapes out: a connection has 10 s to send
 * its request head (8 KiB at most), and at the limit of 16 connections a
 * newcomer displaces the oldest one still waiting for its request (none
 * has been answered: answered ones are closed), with a log line.
 *
 * A loop of its own is run by mu_metrics_server_run on the caller's
 * thread; mu_metrics_server_stop wakes it (uv_async_t) from any thread.
 * On an API server's loop, scrapes are answered by the thread that runs
 * mu_serve_run, and mu_metrics_server_free, on that thread once it has
 * returned, closes what is left.
 */
#include <stdio.h>
#include <string.h>

#include "muster/serve.h"
#include "core/accept_int.h"
#include "core/alloc_int.h"
#include "core/conn_int.h"
#include "core/error_int.h"
#include "core/list_int.h"
#include "core/log_int.h"
#include "core/opts_int.h"
#include "core/time_int.h"
#include "serve/serve_int.h"

#define LOG "metrics"
#define MAX_CONNS 16
#define MAX_HEAD 8192       /* a request head, at most */
#define HEAD_MS 10000       /* to send it */
#define LINGER_MS 200

typedef struct {
	mu__conn_t conn;    /* first: the conn glue's callbacks find us */
	mu_metrics_server_t *ms;
	mu__list_t node;
	double since;       /* when it connected (mu__clock_ms) */
	int answered;
} mconn_t;

struct mu_metrics_server_s {
	uv_loop_t own;      /* the loop, unless on an API server's */
	uv_loop_t *loop;
	uv_async_t wake;    /* mu_metrics_server_stop: leave the loop */
	int wake_init;
	mu__listener_t listener;
	int listening;      /* the listener's handles are open */
	mu__budget_t budget;
	mu__list_t conns;   /* oldest first */
	int nconns;
	unsigned long displaced;
	int port;
	mu_metrics_t *m;
	char scratch[MAX_HEAD];
};

static void metrics_defaults(mu_metrics_server_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->struct_size = sizeof(*o);
	o->host = "127.0.0.1";
}

void mu_metrics_server_opts_init_size(mu_metrics_server_opts_t *o, size_t size)
{
	mu_metrics_server_opts_t d;

	metrics_defaults(&d);
	mu__opts_fill(o, size, &d, sizeof(d));
}

static void free_body(void *p)
{
	mu_free(p);
}

/* One reply with a Content-Length, then the connection closes. A body
 * that is `owned` (mu_metrics_render's) moves to the write. */
static void reply(mconn_t *mc, int status, const char *type, const char *body, size_t len,
                  int head_only, int owned)
{
	static const char *const why[] = {"OK", "Bad Request", "Not Found", "Method Not Allowed",
	                                  "Request Header Fields Too Large", "Internal Server Error"};
	char h[256];
	int k = status == 200 ? 0 : status == 400 ? 1 : status == 404 ? 2 : status == 405 ? 3
	        : status == 431 ? 4 : 5;
	int n = snprintf(h, sizeof(h), "HTTP/1.1 %d %s\r\nServer: muster\r\nContent-Type: %s\r\n"
	                 "Content-Length: %zu\r\nConnection: close\r\n\r\n", status, why[k], type, len);
	int send_body = !head_only && len > 0;

	mc->answered = 1;
	if (mu__conn_send(&mc->conn, h, (size_t)n, send_body ? body : NULL, send_body ? len : 0,
	                  send_body && owned ? free_body : NULL, (void *)body) == 0) {
		if (owned && !send_body)
			mu_free((void *)body);
		mu__conn_finish(&mc->conn, 0, LINGER_MS);
		return;
	}
	if (owned)
		mu_free((void *)body);
	mu__conn_close(&mc->conn, 0);
}

static int is(const char *p, size_t n, const char *s)
{
	return n == strlen(s) && memcmp(p, s, n) == 0;
}

/* The request line of a whole head: METHOD SP TARGET SP HTTP/1.x */
static void answer(mconn_t *mc, const char *head, size_t len)
{
	static const char text[] = "text/plain", home[] = "muster: metrics at /metrics\n";
	const char *sp1 = memchr(head, ' ', len), *sp2, *q;
	size_t ml, pl;
	char *body = NULL;
	size_t blen = 0;
	int head_only;

	sp2 = sp1 != NULL ? memchr(sp1 + 1, ' ', len - (size_t)(sp1 + 1 - head)) : NULL;
	if (sp1 == NULL || sp2 == NULL || len - (size_t)(sp2 + 1 - head) < 8 ||
	    memcmp(sp2 + 1, "HTTP/1.", 7) != 0) {
		reply(mc, 400, text, "bad request\n", 12, 0, 0);
		return;
	}
	ml = (size_t)(sp1 - head);
	q = memchr(sp1 + 1, '?', (size_t)(sp2 - sp1 - 1));
	pl = (size_t)((q != NULL ? q : sp2) - sp1 - 1);
	head_only = is(head, ml, "HEAD");
	if (!is(head, ml, "GET") && !head_only)
		reply(mc, 405, text, "GET /metrics\n", 13, 0, 0);
	else if (is(sp1 + 1, pl, "/"))
		reply(mc, 200, text, home, sizeof(home) - 1, head_only, 0);
	else if (!is(sp1 + 1, pl, "/metrics"))
		reply(mc, 404, text, "not found: GET /metrics\n", 24, head_only, 0);
	else if (mu_metrics_render(mc->ms->m, &body, &blen) != 0)
		reply(mc, 500, text, "out of memory\n", 14, 0, 0);
	else
		reply(mc, 200, "text/plain; version=0.0.4; charset=utf-8", body, blen, head_only, 1);
}

static void mc_data(mu__conn_t *c)
{
	mconn_t *mc = (mconn_t *)c;
	const char *end;

	if (mc->answered) {
		mu__buf_consume(&c->in, c->in.len); /* after the reply: dropped */
		return;
	}
	end = c->in.len >= 4 ? memmem(c->in.data, c->in.len, "\r\n\r\n", 4) : NULL;
	if (end == NULL && c->in.len >= MAX_HEAD) {
		reply(mc, 431, "text/plain", "request head too large\n", 23, 0, 0);
		mu__buf_consume(&c->in, c->in.len);
		return;
	}
	if (end == NULL)
		return; /* the rest of the head is to come */
	answer(mc, c->in.data, (size_t)(end - c->in.data));
	mu__buf_consume(&c->in, c->in.len);
}

static void mc_timeout(mu__conn_t *c)
{
	mconn_t *mc = (mconn_t *)c;

	mu__log(MU_LOG_DEBUG, LOG, "%s: no whole request in %d s: closing", c->peer, HEAD_MS / 1000);
	mc->answered = 1;
	mu__conn_close(c, 0);
}

static void mc_close(mu__conn_t *c, int err)
{
	mconn_t *mc = (mconn_t *)c;

	(void)err;
	mu__list_remove(&mc->node);
	mc->ms->nconns--;
}

static void mc_free(mu__conn_t *c)
{
	mu__free(c);
}

static const mu__conn_ops_t mc_ops = {mc_data, mc_close, mc_free, mc_timeout, NULL, NULL, NULL};

/* At the limit: the oldest connection still waiting for its request goes. */
static void displace(mu_metrics_server_t *ms, mconn_t *newcomer)
{
	mu__list_t *it;

	mu__list_foreach(it, &ms->conns) {
		mconn_t *mc = mu__container_of(it, mconn_t, node);

		if (mc == newcomer || mc->answered || mc->conn.closing)
			continue;
		if (ms->displaced++ % 100 == 0)
			mu__log(MU_LOG_WARN, LOG, "%s: closed to make room for a scrape: it sent no "
			        "request in %.1f s and %d connections are open, the most this endpoint "
			        "keeps (%lu so far)", mc->conn.peer, (mu__clock_ms() - mc->since) / 1000.0,
			        MAX_CONNS, ms->displaced);
		mc->answered = 1;
		mu__conn_close(&mc->conn, 0);
		return;
	}
}

static void on_connection(mu__listener_t *l, mu_stream_t *st)
{
	mu_metrics_server_t *ms = l->data;
	mconn_t *mc = mu__calloc(1, sizeof(*mc));

	if (mc == NULL) {
		mu__stream_close(st);
		return;
	}
	mc->ms = ms;
	mc->since = mu__clock_ms();
	mu__list_insert_tail(&ms->conns, &mc->node);
	ms->nconns++;
	if (mu__conn_accept(&mc->conn, ms->loop, st, &mc_ops, 2 * MAX_HEAD, ms->scratch,
	                    sizeof(ms->scratch), &ms->budget) != 0)
		return; /* closed through its ops */
	if (ms->nconns > MAX_CONNS)
		displace(ms, mc);
	mu__conn_timer(&mc->conn, HEAD_MS);
}

static void on_wake(uv_async_t *a)
{
	uv_stop(a->loop);
}

int mu_metrics_server_start(mu_metrics_t *m, const mu_metrics_server_opts_t *uo,
                            mu_metrics_server_t **out, char *err, size_t errlen)
{
	mu_metrics_server_opts_t o;
	mu__listen_opts_t lo;
	mu_metrics_server_t *ms;
	int rc;

	*out = NULL;
	metrics_defaults(&o);
	if (m == NULL || mu__opts_read(&o, sizeof(o), uo) != 0)
		return mu__why(err, errlen, MU_EARG, "no registry, or options not set by "
		               "mu_metrics_server_opts_init");
	if ((ms = mu__calloc(1, sizeof(*ms))) == NULL)
		return mu__why(err, errlen, MU_ENOMEM, "out of memory");
	ms->m = m;
	mu__list_init(&ms->conns);
	mu__budget_init(&ms->budget, NULL, LOG);
	if (o.serve != NULL) {
		ms->loop = mu__serve_loop(o.serve);
	} else {
		ms->loop = &ms->own;
		if ((rc = uv_loop_init(&ms->own)) != 0) {
			mu__free(ms);
			return mu__why(err, errlen, rc, "%s", uv_strerror(rc));
		}
		if ((rc = uv_async_init(&ms->own, &ms->wake, on_wake)) != 0) {
			mu__why(err, errlen, rc, "%s", uv_strerror(rc));
			mu_metrics_server_free(ms);
			return rc;
		}
		ms->wake_init = 1;
	}
	lo = (mu__listen_opts_t){o.host, o.port, o.port + 1, 1, 128};
	rc = mu__listener_start(&ms->listener, ms->loop, &lo, NULL, LOG, on_connection, &ms->port);
	if (rc != 0) {
		mu__why(err, errlen, rc, "cannot listen on %s port %d: %s", o.host ? o.host : "0.0.0.0",
		        o.port, rc == MU_EBIND ? "address in use" : mu_strerror(rc));
		mu_metrics_server_free(ms);
		return rc;
	}
	ms->listening = 1;
	ms->listener.data = ms;
	*out = ms;
	return 0;
}

int mu_metrics_server_port(const mu_metrics_server_t *ms)
{
	return ms->port;
}

int mu_metrics_server_run(mu_metrics_server_t *ms)
{
	if (ms->loop != &ms->own)
		return MU_EARG;
	uv_run(ms->loop, UV_RUN_DEFAULT);
	return 0;
}

void mu_metrics_server_stop(mu_metrics_server_t *ms)
{
	if (ms->wake_init)
		uv_async_send(&ms->wake);
}

static void listener_closed(mu__listener_t *l)
{
	((mu_metrics_server_t *)l->data)->listening = 0;
}

static void closed_nothing(uv_handle_t *h)
{
	(void)h;
}

void mu_metrics_server_free(mu_metrics_server_t *ms)
{
	mu__list_t *it, *tmp;

	if (ms == NULL)
		return;
	if (ms->listening)
		mu__listener_close(&ms->listener, listener_closed);
	mu__list_foreach_safe(it, tmp, &ms->conns)
		mu__conn_close(&mu__container_of(it, mconn_t, node)->conn, 0);
	while (ms->nconns > 0 || ms->listening)
		uv_run(ms->loop, UV_RUN_ONCE);
	if (ms->wake_init)
		uv_close((uv_handle_t *)&ms->wake, closed_nothing);
	if (ms->loop == &ms->own) {
		uv_run(&ms->own, UV_RUN_DEFAULT);
		if (uv_loop_close(&ms->own) != 0)
			mu__log(MU_LOG_WARN, LOG, "the loop still had handles open at exit");
	} else {
		uv_run(ms->loop, UV_RUN_NOWAIT); /* the API server's loop closes the rest */
	}
	mu__free(ms);
}
