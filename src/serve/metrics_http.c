/* SPDX-License-Identifier: MIT */
/*
 * The Prometheus endpoint (include/muster/serve.h): a registry's text at
 * /metrics over the same HTTP layer as the API server (http.c, h2o on
 * libuv), on a loop of its own or on an API server's.
 *
 * A loop of its own is run by mu_metrics_server_run on the caller's
 * thread; mu_metrics_server_stop wakes it (uv_async_t) from any thread.
 * On an API server's loop, scrapes are answered by the thread that runs
 * mu_serve_run, and mu_metrics_server_free, on that thread once it has
 * returned, closes what is left.
 */
#include <string.h>

#include "muster/serve.h"
#include "core/alloc_int.h"
#include "core/error_int.h"
#include "core/log_int.h"
#include "core/opts_int.h"
#include "serve/http_int.h"
#include "serve/serve_int.h"

#define LOG "metrics"

struct mu_metrics_server_s {
	uv_loop_t own;      /* the loop, unless on an API server's */
	uv_loop_t *loop;
	uv_async_t wake;    /* mu_metrics_server_stop: leave the loop */
	int wake_init;
	mu__http_t *http;
	int port;
	mu_metrics_t *m;
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

static int is(h2o_iovec_t v, const char *s)
{
	return v.len == strlen(s) && memcmp(v.base, s, v.len) == 0;
}

static void on_req(void *ud, h2o_req_t *req)
{
	mu_metrics_server_t *ms = ud;
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

int mu_metrics_server_start(mu_metrics_t *m, const mu_metrics_server_opts_t *uo,
                            mu_metrics_server_t **out, char *err, size_t errlen)
{
	mu_metrics_server_opts_t o;
	/* idle holders are displaced (http.c); a scraper comes from one address */
	mu__http_opts_t ho = {NULL, 0, 16, 16, 64 << 10, 10000, on_req, NULL};
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
	ho.host = o.host;
	ho.port = o.port;
	ho.ud = ms;
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
	if ((rc = mu__http_start(ms->loop, &ho, &ms->http, &ms->port, err, errlen)) != 0) {
		ms->http = NULL;
		mu_metrics_server_free(ms);
		return rc;
	}
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

static void http_done(void *ud)
{
	(void)ud;
}

static void closed_nothing(uv_handle_t *h)
{
	(void)h;
}

void mu_metrics_server_free(mu_metrics_server_t *ms)
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
			mu__log(MU_LOG_WARN, LOG, "the loop still had handles open at exit");
	} else {
		uv_run(ms->loop, UV_RUN_NOWAIT); /* the API server's loop closes the rest */
	}
	mu__free(ms);
}
