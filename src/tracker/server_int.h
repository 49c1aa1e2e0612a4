/* SPDX-License-Identifier: MIT */
/*
 * What the tracker's two libuv files share: the service (server.c: the
 * listener, the loop's lifecycle, SIGTERM's drain, the public API) and
 * one peer's connection (peer.c: handshake, frames, the handlers,
 * replies, the scheduler's grants). Everything here runs on the loop
 * thread, except the public calls server.c hands to the service.
 *
 * Connection states (mu__tracker_conn_t.state):
 *   HANDSHAKE  waiting for the 4 magic bytes; the timeout timer runs.
 *   FRAMES     magic echoed; reading frames. The timer runs only while a
 *              frame is partly received, so idle servers are never cut.
 *   DRAINING   a STOP reply is queued, or the tracker drains: the socket
 *              closes once what is queued is sent (mu__conn_finish).
 *   closed     mu__conn_close called; freed by core/conn.c's on_free.
 */
#ifndef MU_TRACKER_SERVER_INT_H
#define MU_TRACKER_SERVER_INT_H

#include <cjson/cJSON.h>
#include <uv.h>

#include "muster/tracker.h"
#include "core/accept_int.h"
#include "core/conn_int.h"
#include "core/list_int.h"
#include "core/log_int.h"
#include "core/metrics_int.h"
#include "core/net_int.h"
#include "core/service_int.h"
#include "tracker/sched_int.h"

/* libuv reads land in the tracker's scratch of this size */
#define MU__TRACKER_READ_CHUNK 65536

typedef enum {
	MU__TRACKER_HANDSHAKE,
	MU__TRACKER_FRAMES,
	MU__TRACKER_DRAINING
} mu__tracker_conn_state_t;

typedef struct {
	mu__conn_t conn;  /* first: core/conn.c's callbacks get this */
	mu__list_t node;  /* in mu_tracker_t.conns until closed */
	mu_tracker_t *t;
	mu__tracker_conn_state_t state;
	int logged;       /* why it closes is logged already */
	unsigned refused; /* PUTs and REQUESTs refused for a limit */
	cJSON *info; /* merged UPDATE_INFO dict; NULL before the first */
	mu__sched_owner_t owner;
} mu__tracker_conn_t;

struct mu_tracker_s {
	mu__service_t svc;
	mu__listener_t listener;
	mu__allow_t allow;       /* opts.allow, parsed */
	mu__list_t conns;
	mu__sched_t sched;
	mu__budget_t budget;
	mu_tracker_opts_t opts;
	char host[256];
	int port;
	int listener_init; /* listener handle exists (and must be closed) */
	uv_mutex_t join_lock;
	int joined; /* under join_lock */
	char stop_key[64];
	/* docs/metrics.md; each NULL without a registry */
	mu__metric_t *m_open, *m_conns, *m_cut, *m_grants, *m_wait, *m_waiting, *m_free,
		*m_refused;
	char scratch[MU__TRACKER_READ_CHUNK]; /* libuv reads land here, then go to conn.in */
};

/* A log line of t's: warnings and errors always, the rest unless silent. */
#define MU__TLOG(t, lvl, ...)                                                  \
	do {                                                                   \
		if ((lvl) <= MU_LOG_WARN || !(t)->opts.silent)                 \
			mu__log((lvl), "tracker", __VA_ARGS__);                \
	} while (0)

/* peer.c */

/* The listener's callback: a new peer, in HANDSHAKE. */
void mu__tracker_on_connection(mu__listener_t *l, mu_stream_t *st);
/* Close c, the reason (if any) logged already. */
void mu__tracker_conn_close(mu__tracker_conn_t *c);
/* The scheduler's delivery (mu__sched_init's): a grant to a requester. */
int mu__tracker_deliver(void *ud, mu__sched_owner_t *o, const mu__sched_res_t *res);

/* server.c */

/* A STOP with the right key: let its reply go out, then stop everything. */
void mu__tracker_stop_by_peer(mu__tracker_conn_t *c);

#endif
