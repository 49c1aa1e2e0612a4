/* SPDX-License-Identifier: MIT */
/*
 * `muster stage`'s server: one libuv loop serves every connection
 * (stage_conn.c reads, runs and answers each one's messages); here, its
 * listener, the admission of connections, its metrics and its life.
 *
 * Silent and idle clients cannot lock a stage server: a connection that
 * sends nothing for silent_timeout_ms after connecting, or nothing more
 * for idle_timeout_ms between messages, is closed, and at the connection
 * limit the oldest one that never completed a message, else the one idle
 * longest, makes room for the newcomer. Only when every connection is in
 * the middle of a message is a newcomer refused, with an ERROR saying so.
 */

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc_int.h"
#include "core/log_int.h"
#include "core/net_int.h"
#include "core/opts_int.h"
#include "core/time_int.h"
#include "pipeline/stage_server_int.h"

#define LOG "stage"

void mu__stage_server_counted(mu_stage_server_t *srv)
{
	int done;

	uv_mutex_lock(&srv->lock);
	srv->forwards++;
	done = srv->o.requests > 0 && srv->forwards >= srv->o.requests;
	uv_mutex_unlock(&srv->lock);
	if (done) {
		mu__log(MU_LOG_INFO, LOG, "%s: served %lu forwards, as asked; stopping", srv->name,
		        srv->forwards);
		mu__service_shutdown(&srv->svc);
	}
}


/* Between messages with nothing under way: it may be displaced. */
static int sc_idle(const mu__sconn_t *sc)
{
	return !sc->uncounted && !sc->conn.closing && !sc->conn.draining && !sc->computing &&
	       sc->state == SC_HEADER && sc->conn.in.len == 0 && mu__list_empty(&sc->conn.wq);
}

/*
 * Over the limit with newcomer: close the oldest connection that never
 * completed a message (it has done no work and may never do any), else
 * the one idle longest between messages (a peer that holds a slot and
 * asks nothing), or, when every one is in the middle of a message,
 * refuse the newcomer.
 */
void mu__stage_server_over_limit(mu_stage_server_t *srv, mu__sconn_t *newcomer)
{
	mu__list_t *it;
	mu__sconn_t *idlest = NULL;
	char why[256];
	double now = mu__clock_ms();

	mu__list_foreach(it, &srv->conns) {
		mu__sconn_t *sc = mu__container_of(it, mu__sconn_t, node);

		if (sc == newcomer || !sc_idle(sc))
			continue;
		if (sc->nmsgs == 0) {
			snprintf(why, sizeof(why), "closed to make room for a new connection: this one "
			         "sent no whole message in %.1f s and the server is at its limit of %d "
			         "connections", (now - sc->since) / 1000.0, srv->o.max_conns);
			mu__sconn_fail(sc, MU_ETOOBIG, "%s", why);
			return;
		}
		if (idlest == NULL || sc->last_msg < idlest->last_msg)
			idlest = sc;
	}
	if (idlest != NULL) {
		snprintf(why, sizeof(why), "closed to make room for a new connection: this one was "
		         "idle for %.1f s, the longest of the %d connections this server serves at "
		         "most (--max-connections)", (now - idlest->last_msg) / 1000.0, srv->o.max_conns);
		mu__sconn_fail(idlest, MU_ETOOBIG, "%s", why);
		return;
	}
	snprintf(why, sizeof(why), "too many connections: %d are open and each is in the middle "
	         "of a message, the limit of this server (--max-connections)", srv->nconns - 1);
	mu__sconn_fail(newcomer, MU_ETOOBIG, "%s", why);
}

static void on_connection(mu__listener_t *l, mu_stream_t *st)
{
	mu__sconn_accept(l->data, st);
}

static void service_stop_cb(mu__service_t *svc)
{
	mu_stage_server_t *srv = mu__container_of(svc, mu_stage_server_t, svc);
	mu__list_t *it, *tmp;

	if (srv->listener_init)
		mu__listener_close(&srv->listener, NULL);
	mu__list_foreach_safe(it, tmp, &srv->conns)
		mu__conn_close(&mu__container_of(it, mu__sconn_t, node)->conn, 0);
}

static void stage_server_defaults(mu_stage_server_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->struct_size = sizeof(*o);
	o->host = "127.0.0.1";
	o->max_conns = 64;
	o->io_timeout_ms = 30000;
	o->idle_timeout_ms = 300000;
	o->body_timeout_ms = 120000;
	o->silent_timeout_ms = 30000;
	o->max_frame_bytes = (uint64_t)1 << 30;
	o->name = "stage";
	mu_budget_init(&o->budget);
}

void mu_stage_server_opts_init_size(mu_stage_server_opts_t *o, size_t size)
{
	mu_stage_server_opts_t d;

	stage_server_defaults(&d);
	mu__opts_fill(o, size, &d, sizeof(d));
}

static int stage_listen(mu_stage_server_t *srv)
{
	mu__listen_opts_t lo = {srv->host, srv->o.port, srv->o.port + 1, 1, 128};
	int rc = mu__listener_start(&srv->listener, &srv->svc.loop, &lo, srv->o.sec, LOG,
	                            on_connection, &srv->port);

	if (rc != 0)
		return rc;
	srv->listener_init = 1;
	srv->listener.data = srv;
	return 0;
}

static void metrics_init(mu_stage_server_t *srv, mu_metrics_t *m)
{
	srv->m_open = mu__metric_family(m, MU_METRIC_GAUGE, "muster_stage_connections_open",
	                                "Connections open now.", NULL, NULL, 0);
	srv->m_conns = mu__metric_family(m, MU_METRIC_COUNTER, "muster_stage_connections_total",
	                                 "Connections accepted.", NULL, NULL, 0);
	srv->m_cut = mu__metric_family(m, MU_METRIC_COUNTER,
	                               "muster_stage_connections_refused_total",
	                               "Connections the stage closed on a client, by reason: "
	                               "protocol, limit, timeout, budget.", "reason", NULL, 0);
	srv->m_msgs = mu__metric_family(m, MU_METRIC_COUNTER, "muster_stage_messages_total",
	                                "Whole messages received, by type.", "type", NULL, 0);
	srv->m_fwd = mu__metric_family(m, MU_METRIC_COUNTER, "muster_stage_forwards_total",
	                               "Forwards answered with a RESULT (FORWARD, SEQ_FORWARD, "
	                               "SEQ_BATCH).", NULL, NULL, 0);
	srv->m_tok = mu__metric_family(m, MU_METRIC_COUNTER, "muster_stage_tokens_total",
	                               "Positions (tokens) a decoder LLM stage ran.", NULL, NULL, 0);
	srv->m_in = mu__metric_family(m, MU_METRIC_COUNTER, "muster_stage_received_bytes_total",
	                              "Bytes of whole messages received.", NULL, NULL, 0);
	srv->m_out = mu__metric_family(m, MU_METRIC_COUNTER, "muster_stage_sent_bytes_total",
	                               "Bytes of replies queued to send.", NULL, NULL, 0);
	srv->m_compute = mu__metric_family(m, MU_METRIC_HISTOGRAM, "muster_stage_compute_seconds",
	                                   "Compute time of each forward on this stage.", NULL,
	                                   mu__metric_seconds, mu__metric_nseconds);
	srv->m_kv = mu__metric_family(m, MU_METRIC_GAUGE, "muster_stage_kv_bytes",
	                              "KV cache bytes reserved by open sequences.", NULL, NULL, 0);
	srv->m_seqs = mu__metric_family(m, MU_METRIC_GAUGE, "muster_stage_sequences_open",
	                                "Sequences open on this stage.", NULL, NULL, 0);
	mu__metric_touch(srv->m_open, NULL);
	mu__metric_touch(srv->m_conns, NULL);
	mu__metric_touch(srv->m_fwd, NULL);
	mu__metric_touch(srv->m_in, NULL);
	mu__metric_touch(srv->m_out, NULL);
	if (srv->stage != NULL && srv->stage->kind->usage != NULL) { /* a kind with sequences */
		mu__metric_touch(srv->m_tok, NULL);
		mu__metric_touch(srv->m_kv, NULL);
		mu__metric_touch(srv->m_seqs, NULL);
	}
}

int mu_stage_server_start(mu_stage_t *s, const mu_stage_server_opts_t *uo,
                          mu_stage_server_t **out)
{
	mu_stage_server_opts_t oo, *o = &oo;
	mu_stage_server_t *srv;
	int rc;

	*out = NULL;
	stage_server_defaults(o);
	if (s == NULL || mu__opts_read(o, sizeof(*o), uo) != 0 || o->max_conns < 1 || o->io_timeout_ms < 1 ||
	    mu_budget_check(&o->budget) != 0)
		return MU_EARG;
	srv = mu__calloc(1, sizeof(*srv));
	if (srv == NULL)
		return MU_ENOMEM;
	srv->stage = s;
	srv->o = *o;
	snprintf(srv->host, sizeof(srv->host), "%s", o->host != NULL ? o->host : "127.0.0.1");
	snprintf(srv->name, sizeof(srv->name), "%s", o->name != NULL ? o->name : "stage");
	srv->o.host = srv->host;
	srv->o.name = srv->name;
	srv->ctx.stage = s;
	srv->ctx.name = srv->name;
	mu__list_init(&srv->conns);
	mu__budget_init(&srv->budget, &o->budget, "stage");
	metrics_init(srv, o->metrics);
	uv_mutex_init(&srv->lock);
	uv_mutex_init(&srv->join_lock);
	rc = mu__service_init(&srv->svc, service_stop_cb);
	if (rc == 0) {
		rc = stage_listen(srv);
		if (rc == 0)
			rc = mu__service_start(&srv->svc);
		if (rc != 0) {
			mu__service_join(&srv->svc);
			mu__service_free(&srv->svc);
		}
	}
	if (rc != 0) {
		uv_mutex_destroy(&srv->lock);
		uv_mutex_destroy(&srv->join_lock);
		mu__free(srv);
		return rc;
	}
	*out = srv;
	return 0;
}

int mu_stage_server_port(const mu_stage_server_t *srv)
{
	return srv->port;
}

unsigned long mu_stage_server_forwards(mu_stage_server_t *srv)
{
	unsigned long n;

	uv_mutex_lock(&srv->lock);
	n = srv->forwards;
	uv_mutex_unlock(&srv->lock);
	return n;
}

void mu_stage_server_wait(mu_stage_server_t *srv)
{
	uv_mutex_lock(&srv->join_lock);
	if (!srv->joined) {
		mu__service_join(&srv->svc);
		srv->joined = 1;
	}
	uv_mutex_unlock(&srv->join_lock);
}

void mu_stage_server_stop(mu_stage_server_t *srv)
{
	mu__service_stop(&srv->svc);
}

void mu_stage_server_free(mu_stage_server_t *srv)
{
	if (srv == NULL)
		return;
	mu_stage_server_stop(srv);
	mu_stage_server_wait(srv);
	mu__service_free(&srv->svc);
	uv_mutex_destroy(&srv->lock);
	uv_mutex_destroy(&srv->join_lock);
	mu__free(srv);
}
