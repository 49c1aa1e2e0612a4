/* SPDX-License-Identifier: MIT */
/*
 * `--metrics HOST:PORT`: the registry's Prometheus text at /metrics, over
 * the same HTTP layer as `muster serve` (serve/http.c, h2o on libuv), on
 * a loop thread of its own, so a scrape never waits for a server's loop
 * and a busy server never delays a scrape. GET (and HEAD) /metrics gets
 * the text; / a line pointing there; anything else 404.
 *
 * At most 16 scrapers at once, 64 KiB of request body (none is needed),
 * 10 s to send a request: a scraper is no peer to budget further.
 */
#include <stdio.h>
#include <string.h>

#include "cli/svc_int.h"
#include "core/alloc_int.h"
#include "core/list_int.h"
#include "core/log_int.h"
#include "serve/http_int.h"

struct cli_metrics_srv_s {
	uv_loop_t loop;
	uv_async_t wake;    /* cli_metrics_stop's call to stop */
	uv_thread_t thread;
	mu__http_t *http;
	mu_metrics_t *m;
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

static void on_wake(uv_async_t *a)
{
	uv_stop(a->loop);
}

static void http_done(void *ud)
{
	(void)ud;
}

static void closed_nothing(uv_handle_t *h)
{
	(void)h;
}

/* Serve until woken, then end every scraper's connection, release h2o and
 * close the loop: all on this thread, which owns the loop. */
static void thread_main(void *arg)
{
	cli_metrics_srv_t *ms = arg;

	uv_run(&ms->loop, UV_RUN_DEFAULT);
	mu__http_stop(ms->http, 1, http_done, ms);
	while (mu__http_conns(ms->http) > 0)
		uv_run(&ms->loop, UV_RUN_ONCE);
	mu__http_free(ms->http);
	uv_close((uv_handle_t *)&ms->wake, closed_nothing);
	uv_run(&ms->loop, UV_RUN_DEFAULT);
	if (uv_loop_close(&ms->loop) != 0)
		mu__log(MU_LOG_WARN, "metrics", "the loop still had handles open at exit");
}

int cli_metrics_start(mu_metrics_t *m, const char *host, int port, cli_metrics_srv_t **out,
                      int *bound, char *why, size_t wl)
{
	cli_metrics_srv_t *ms = mu__calloc(1, sizeof(*ms));
	mu__http_opts_t ho = {host, port, 16, 64 << 10, 10000, on_req, NULL};
	int rc;

	*out = NULL;
	if (ms == NULL)
		return MU_ENOMEM;
	ms->m = m;
	ho.ud = ms;
	if ((rc = uv_loop_init(&ms->loop)) != 0) {
		mu__free(ms);
		return rc;
	}
	uv_async_init(&ms->loop, &ms->wake, on_wake);
	rc = mu__http_start(&ms->loop, &ho, &ms->http, bound, why, wl);
	if (rc == 0 && (rc = uv_thread_create(&ms->thread, thread_main, ms)) != 0)
		snprintf(why, wl, "cannot start its thread: %s", mu_strerror(rc));
	if (rc != 0) {
		if (ms->http != NULL) {
			/* what thread_main would have done, here */
			uv_stop(&ms->loop);
			thread_main(ms);
		} else {
			uv_close((uv_handle_t *)&ms->wake, closed_nothing);
			uv_run(&ms->loop, UV_RUN_DEFAULT);
			uv_loop_close(&ms->loop);
		}
		mu__free(ms);
		return rc;
	}
	*out = ms;
	return 0;
}

void cli_metrics_stop(cli_metrics_srv_t *ms)
{
	if (ms == NULL)
		return;
	uv_async_send(&ms->wake);
	uv_thread_join(&ms->thread);
	mu__free(ms);
}
