/* SPDX-License-Identifier: MIT */
/*
 * The tracker service: libuv glue between connections (peer.c, on
 * core/conn.c, which also enforces each peer's budget), the codec
 * (proto.c) and the matching (sched.c). One loop thread owns every
 * connection; no peer can block another (non-blocking I/O, per-connection
 * buffers, the budget). This file is the service around them: the
 * listener, stopping (by mu_tracker_stop, by a peer's STOP), SIGTERM's
 * drain, the metrics and the public API.
 */
#include <string.h>

#include "core/alloc_int.h"
#include "core/opts_int.h"
#include "core/rand_int.h"
#include "tracker/proto_int.h"
#include "tracker/server_int.h"

/* A STOP's reply gets this long to reach its sender. */
#define STOP_LINGER_MS 1000

/* ---- stopping ---- */

/* Loop thread, from mu__service_shutdown: close everything we own. */
static void service_stop_cb(mu__service_t *s)
{
	mu_tracker_t *t = mu__container_of(s, mu_tracker_t, svc);
	mu__list_t *it, *tmp;
	size_t n = 0, queued = 0;

	if (t->listener_init)
		mu__listener_close(&t->listener, NULL);
	mu__list_foreach_safe(it, tmp, &t->conns) {
		mu__tracker_conn_t *c = mu__container_of(it, mu__tracker_conn_t, node);

		n++;
		queued += c->conn.out_bytes;
		if (c->state != MU__TRACKER_DRAINING || s->draining)
			mu__tracker_conn_close(c);
	}
	if (s->draining && s->drain_late)
		MU__TLOG(t, MU_LOG_WARN, "drain: deadline reached, closing %zu connection(s) with "
		     "%zu byte(s) of replies not yet written", n, queued);
	else if (s->draining)
		MU__TLOG(t, MU_LOG_INFO, "drain: every reply delivered");
}

/*
 * SIGTERM's drain: accept nothing more, read nothing more, and let what is
 * queued go out. A grant is queued whole when it is made (one write), so
 * a requester either gets it whole or, past the deadline, not at all; a
 * registered server's devices simply go when its connection closes.
 */
static void drain_start(mu__service_t *s)
{
	mu_tracker_t *t = mu__container_of(s, mu_tracker_t, svc);
	mu__list_t *it, *tmp;
	size_t n = 0;

	if (t->listener_init)
		mu__listener_close(&t->listener, NULL);
	mu__list_foreach_safe(it, tmp, &t->conns) {
		mu__tracker_conn_t *c = mu__container_of(it, mu__tracker_conn_t, node);

		n++;
		c->state = MU__TRACKER_DRAINING; /* mu__tracker_deliver() grants nothing more */
		c->logged = 1;
		/* no linger of its own: the service's deadline closes it */
		mu__conn_finish(&c->conn, 0, UINT64_MAX / 2);
	}
	MU__TLOG(t, MU_LOG_INFO, "drain: stopped accepting; flushing replies to %zu connection(s)", n);
}

static size_t drain_tick(mu__service_t *s)
{
	mu_tracker_t *t = mu__container_of(s, mu_tracker_t, svc);
	mu__list_t *it, *tmp;
	size_t left = 0;

	mu__list_foreach_safe(it, tmp, &t->conns) {
		mu__tracker_conn_t *c = mu__container_of(it, mu__tracker_conn_t, node);

		if (mu__conn_delivered(&c->conn))
			mu__tracker_conn_close(c);
		else
			left++;
	}
	return left;
}

static const mu__service_drain_t drain_ops = {drain_start, drain_tick};

void mu__tracker_stop_by_peer(mu__tracker_conn_t *c)
{
	c->state = MU__TRACKER_DRAINING;
	mu__conn_finish(&c->conn, 0, STOP_LINGER_MS);
	mu__service_shutdown(&c->t->svc);
}

/* ---- public API ---- */

static void tracker_defaults(mu_tracker_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->struct_size = sizeof(*o);
	o->host = "0.0.0.0";
	o->port = 9190;
	o->port_end = 9199;
	o->reuse_addr = 1;
	o->timeout = 60;
	o->max_frame = MU_TRACKER_MAX_FRAME;
	o->max_keys = MU_SCHED_MAX_QUEUES;
	o->max_per_conn = MU_SCHED_MAX_PER_OWNER;
	o->max_keys_per_conn = MU_SCHED_MAX_KEYS_PER_OWNER;
	mu_budget_init(&o->budget);
}

void mu_tracker_opts_init_size(mu_tracker_opts_t *o, size_t size)
{
	mu_tracker_opts_t d;

	tracker_defaults(&d);
	mu__opts_fill(o, size, &d, sizeof(d));
}

static int tracker_listen(mu_tracker_t *t)
{
	mu__listen_opts_t lo;
	int rc;

	lo.host = t->host;
	lo.port = t->opts.port;
	lo.port_end = t->opts.port_end;
	lo.reuse_addr = t->opts.reuse_addr;
	lo.backlog = 1024;
	rc = mu__listener_start(&t->listener, &t->svc.loop, &lo, NULL, "tracker",
	                        mu__tracker_on_connection, &t->port);
	if (rc != 0)
		return rc;
	t->listener_init = 1;
	t->listener.data = t;
	t->listener.allow = &t->allow;
	t->listener.m_refused = t->m_cut;
	return 0;
}

/* The scheduler's queues changed: the per-key gauges follow. */
static void observe_queue(void *ud, const char *key, size_t nfree, size_t nwaiting)
{
	mu_tracker_t *t = ud;

	mu__metric_set(t->m_free, key, (double)nfree);
	mu__metric_set(t->m_waiting, key, (double)nwaiting);
}

static void metrics_init(mu_tracker_t *t, mu_metrics_t *m)
{
	t->m_open = mu__metric_family(m, MU_METRIC_GAUGE, "muster_tracker_connections_open",
	                              "Connections open now.", NULL, NULL, 0);
	t->m_conns = mu__metric_family(m, MU_METRIC_COUNTER, "muster_tracker_connections_total",
	                               "Connections accepted.", NULL, NULL, 0);
	t->m_cut = mu__metric_family(m, MU_METRIC_COUNTER,
	                             "muster_tracker_connections_refused_total",
	                             "Connections the tracker closed on a peer, by reason: "
	                             "protocol, limit, timeout, budget.", "reason", NULL, 0);
	t->m_grants = mu__metric_family(m, MU_METRIC_COUNTER, "muster_tracker_grants_total",
	                                "Devices granted to requests, by device key.", "key",
	                                NULL, 0);
	t->m_wait = mu__metric_family(m, MU_METRIC_HISTOGRAM, "muster_tracker_wait_seconds",
	                              "How long granted requests waited, by device key.", "key",
	                              mu__metric_seconds, mu__metric_nseconds);
	t->m_waiting = mu__metric_family(m, MU_METRIC_GAUGE, "muster_tracker_queue_depth",
	                                 "Requests waiting for a device, by device key.", "key",
	                                 NULL, 0);
	t->m_free = mu__metric_family(m, MU_METRIC_GAUGE, "muster_tracker_free_devices",
	                              "Devices registered and free, by device key.", "key",
	                              NULL, 0);
	t->m_refused = mu__metric_family(m, MU_METRIC_COUNTER, "muster_tracker_refused_total",
	                                 "PUTs and REQUESTs refused for a limit, by op.", "op",
	                                 NULL, 0);
	mu__metric_touch(t->m_open, NULL);
	mu__metric_touch(t->m_conns, NULL);
	if (m != NULL)
		t->sched.observe = observe_queue;
}

int mu_tracker_start(const mu_tracker_opts_t *uo, mu_tracker_t **out)
{
	mu_tracker_opts_t oo, *o = &oo;
	mu_tracker_t *t;
	int rc;

	*out = NULL;
	tracker_defaults(o);
	if (mu__opts_read(o, sizeof(*o), uo) != 0 || o->timeout < 0 || o->max_frame == 0 || mu_budget_check(&o->budget) != 0)
		return MU_EARG;
	t = mu__calloc(1, sizeof(*t));
	if (t == NULL)
		return MU_ENOMEM;
	t->opts = *o;
	if (mu__allow_parse(o->allow, &t->allow, NULL, 0) != 0) {
		mu__free(t);
		return MU_EARG;
	}
	snprintf(t->host, sizeof(t->host), "%s", o->host ? o->host : "0.0.0.0");
	t->opts.host = t->host;
	mu__list_init(&t->conns);
	mu__sched_init(&t->sched, mu__tracker_deliver, t);
	mu__budget_init(&t->budget, &t->opts.budget, "tracker");
	metrics_init(t, o->metrics);
	t->sched.max_queues = o->max_keys ? o->max_keys : MU_SCHED_MAX_QUEUES;
	t->sched.max_per_owner = o->max_per_conn ? o->max_per_conn : MU_SCHED_MAX_PER_OWNER;
	t->sched.max_keys_per_owner =
		o->max_keys_per_conn ? o->max_keys_per_conn : MU_SCHED_MAX_KEYS_PER_OWNER;
	rc = mu__service_init(&t->svc, service_stop_cb);
	if (rc != 0) {
		mu__free(t);
		return rc;
	}
	t->svc.drain = &drain_ops;
	uv_mutex_init(&t->join_lock);
	rc = mu__random_key("tracker", t->stop_key, sizeof(t->stop_key));
	if (rc == 0)
		rc = tracker_listen(t);
	if (rc == 0)
		rc = mu__service_start(&t->svc);
	if (rc != 0) {
		mu__service_join(&t->svc); /* closes the listener, if opened */
		mu__service_free(&t->svc);
		mu__sched_free(&t->sched);
		mu__free(t);
		return rc;
	}
	MU__TLOG(t, MU_LOG_INFO, "Bind to %s:%d", t->host, t->port);
	*out = t;
	return 0;
}

int mu_tracker_port(const mu_tracker_t *t)
{
	return t->port;
}

const char *mu_tracker_stop_key(const mu_tracker_t *t)
{
	return t->stop_key;
}

void mu_tracker_wait(mu_tracker_t *t)
{
	/* Several threads may wait; the first joins, the others block on the
	 * lock until it has. */
	uv_mutex_lock(&t->join_lock);
	if (!t->joined) {
		mu__service_join(&t->svc);
		t->joined = 1;
	}
	uv_mutex_unlock(&t->join_lock);
}

void mu_tracker_stop(mu_tracker_t *t)
{
	mu__service_stop(&t->svc); /* a no-op once the loop has stopped */
	mu_tracker_wait(t);
}

void mu_tracker_drain(mu_tracker_t *t, double timeout)
{
	mu__service_drain(&t->svc, timeout <= 0 ? 0 : (uint64_t)(timeout * 1000.0));
}

void mu_tracker_free(mu_tracker_t *t)
{
	if (t == NULL)
		return;
	mu_tracker_stop(t);
	mu__service_free(&t->svc);
	uv_mutex_destroy(&t->join_lock);
	mu__sched_free(&t->sched);
	mu__free(t);
}
