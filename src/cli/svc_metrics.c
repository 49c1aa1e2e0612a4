/* SPDX-License-Identifier: MIT */
/*
 * `--metrics HOST:PORT`: the registry's Prometheus text at /metrics, from
 * the library's endpoint (mu_metrics_server_*, muster/serve.h), which
 * cli_svc_listen starts.
 *
 * The endpoint's loop runs on the main thread, never on one that ends
 * (h2o keeps per-thread memory that a thread which ran it and ends
 * leaks: see muster/serve.h). The servers themselves run on threads of
 * their own, so while the main thread would only wait for one, it runs
 * the metrics loop instead and a small waiter thread does the waiting,
 * then stops the loop. `muster serve`, whose main thread already runs an
 * h2o loop, puts the endpoint on that loop and needs none of this.
 */
#include <pthread.h>

#include "cli/svc_int.h"
#include "core/log_int.h"

typedef struct {
	mu_metrics_server_t *ms;
	void (*wait_fn)(void *);
	void *ud;
} waiter_t;

static void *waiter_main(void *arg)
{
	waiter_t *w = arg;

	w->wait_fn(w->ud);
	mu_metrics_server_stop(w->ms);
	return NULL;
}

void cli_metrics_run(mu_metrics_server_t *ms, void (*wait_fn)(void *), void *ud)
{
	waiter_t w = {ms, wait_fn, ud};
	pthread_t th;

	if (pthread_create(&th, NULL, waiter_main, &w) != 0) {
		mu__log(MU_LOG_WARN, "metrics", "cannot start a thread: metrics are not served");
		wait_fn(ud);
		return;
	}
	mu_metrics_server_run(ms);
	pthread_join(th, NULL);
}
