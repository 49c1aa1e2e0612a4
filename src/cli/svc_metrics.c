/* SPDX-License-Identifier: MIT */
/*
 * `--metrics HOST:PORT`: the registry's Prometheus text at /metrics, over
 * the same HTTP layer as `muster serve` (serve/http.c, h2o on libuv). GET
 * (and HEAD) /metrics gets the text; / a line pointing there; anything
 * else 404. At most 16 scrapers at once, 64 KiB of request body (none is
 * needed), 10 s to send a request: a scraper is no peer to budget further.
 *
 * h2o runs on the main thread, never on one that ends: h2o 2.2 keeps freed
 * memory-pool chunks in a thread-local free list it has no call to empty,
 * so a thread that ran h2o and exits leaks them. The servers themselves
 * run on threads of their own, so while the main thread would only wait
 * for one, it runs the metrics loop instead (cli_metrics_run) and a small
 * waiter thread does the waiting. `muster serve`, whose main thread
 * already runs an h2o loop, puts the endpoint on that loop.
 */
#include <stdio.h>
#include <string.h>

#include "cli/svc_int.h"
#include "core/alloc_int.h"
#include "core/log_int.h"
#include "serve/http_int.h"

struct cli_metrics_srv_s {
	uv_loop_t own;      /* the loop, unless the caller lent one */
	uv_loop_t *loop;
	uv_async_t wake;    /* the waiter thread: the server has stopped */
	int wake_init;
	mu__http_t *http;
	mu_metrics_t *m;
	void (*wait_fn)(void *);
	void *wait_ud;
};

static int is(h2o_iovec_t v, const char *s)
{
	return v.len == strlen(s) && memcmp(v.base, s, v.len) == 0;
}

static void on_req(void *ud, h2o_req_t *req)
{
	cli_metrics_srv_t *ms = ud;
	char *text = NULL;
	size_t len = 0;
	static const char home[] = "muster: metrics at /metrics\n";

	if (!is(req->method, "GET") && !is(req->method, "HEAD")) {
		mu__http_send(req, 405, "text/plain", "GET /metrics\n", 13);
		return;
	}
	if (is(req->path_normalized, "/")) {
		mu__http_send(req, 200, "text/plain", home, sizeof(home) - 1);
		return;
	}
	if (!is(req->path_normalized, "/metrics")) {
		mu__http_send(req, 404, "text/plain", "not found: GET /metrics\n", 24);
		return;
	}
	if (mu_metrics_render(ms->m, &text, &len) != 0) {
		mu__http_send(req, 500, "text/plain", "out of memory\n", 14);
		return;
	}
	/* h2o_send_inline copies the body into the request's pool. */
	mu__http_send(req, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
	mu_free(text);
}

static void http_done(void *ud)
{
	(void)ud;
}

static void closed_nothing(uv_handle_t *h)
{
	(void)h;
}

int cli_metrics_start(mu_metrics_t *m, uv_loop_t *loop, const char *host, int port,
                      cli_metrics_srv_t **out, int *bound, char *why, size_t wl)
{
	cli_metrics_srv_t *ms = mu__calloc(1, sizeof(*ms));
	mu__http_opts_t ho = {host, port, 16, 64 << 10, 10000, on_req, NULL};
	int rc;

	*out = NULL;
	if (ms == NULL)
		return MU_ENOMEM;
	ms->m = m;
	ho.ud = ms;
	ms->loop = loop;
	if (loop == NULL) {
		ms->loop = &ms->own;
		if ((rc = uv_loop_init(&ms->own)) != 0) {
			mu__free(ms);
			return rc;
		}
	}
	if ((rc = mu__http_start(ms->loop, &ho, &ms->http, bound, why, wl)) != 0) {
		ms->http = NULL;
		cli_metrics_stop(ms);
		return rc;
	}
	*out = ms;
	return 0;
}

static void on_wake(uv_async_t *a)
{
	uv_stop(a->loop);
}

static void waiter_main(void *arg)
{
	cli_metrics_srv_t *ms = arg;

	ms->wait_fn(ms->wait_ud);
	uv_async_send(&ms->wake);
}

void cli_metrics_run(cli_metrics_srv_t *ms, void (*wait_fn)(void *), void *ud)
{
	uv_thread_t th;

	ms->wait_fn = wait_fn;
	ms->wait_ud = ud;
	if (uv_async_init(ms->loop, &ms->wake, on_wake) != 0) {
		wait_fn(ud); /* no way to be woken: just wait, unscraped */
		return;
	}
	ms->wake_init = 1;
	if (uv_thread_create(&th, waiter_main, ms) != 0) {
		mu__log(MU_LOG_WARN, "metrics", "cannot start a thread: metrics are not served");
		wait_fn(ud);
		return;
	}
	uv_run(ms->loop, UV_RUN_DEFAULT);
	uv_thread_join(&th);
}

void cli_metrics_stop(cli_metrics_srv_t *ms)
{
	if (ms == NULL)
		return;
	if (ms->http != NULL) {
		mu__http_stop(ms->http, 1, http_done, ms);
		while (mu__http_conns(ms->http) > 0)
			uv_run(ms->loop, UV_RUN_ONCE);
		mu__http_free(ms->http);
	}
	if (ms->wake_init)
		uv_close((uv_handle_t *)&ms->wake, closed_nothing);
	if (ms->loop == &ms->own) {
		uv_run(&ms->own, UV_RUN_DEFAULT);
		if (uv_loop_close(&ms->own) != 0)
			mu__log(MU_LOG_WARN, "metrics", "the loop still had handles open at exit");
	} else {
		uv_run(ms->loop, UV_RUN_NOWAIT); /* the lender's loop closes the rest */
	}
	mu__free(ms);
}
