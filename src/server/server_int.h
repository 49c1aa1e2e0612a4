/* SPDX-License-Identifier: MIT */
/*
 * The device server's shared state. Three kinds of thread touch it:
 *
 *   loop thread       accepts, runs handshakes, starts and reaps sessions
 *   registrar thread  keeps the tracker registration alive (register.c)
 *   session thread    runs the caller's handler for one session
 *
 * Fields under `lock` are marked; everything else belongs to the loop
 * thread, or is fixed after start.
 */
#ifndef MU_SERVER_SERVER_INT_H
#define MU_SERVER_SERVER_INT_H

#include <uv.h>

#include "muster/server.h"
#include "core/accept_int.h"
#include "core/conn_int.h"
#include "core/list_int.h"
#include "core/service_int.h"
#include "tracker/proto_int.h"

#define MU_MATCHKEY_MAX 1024

struct mu_server_s {
	mu__service_t svc;
	mu__listener_t listener;
	int listener_init;
	int loop_stopping;       /* loop thread: the stop has begun */
	mu__budget_t budget;     /* the handshakes' (loop thread) */
	char scratch[4096];      /* the loop's read buffer (conn.c) */
	uv_async_t session_done; /* session thread -> loop */
	uv_timer_t session_timer; /* the client's -timeout */
	mu__list_t handshakes;   /* hs_conn_t, reading a client's hello */
	mu__list_t waiting;      /* hs_conn_t, standalone: hello ok, slot busy */
	mu_server_opts_t opts;   /* strings point into the copies below */
	char host[256], key[256], tracker_host[256], custom_addr[256];
	int port;
	int standalone;
	char reach_host[256];    /* what mu_server_host answers; fixed at start */

	/* the session running now (loop thread) */
	mu_session_t *active;
	uv_thread_t active_thread;

	uv_mutex_t lock;
	uv_cond_t cond;          /* registrar waits here */
	char matchkey[MU_MATCHKEY_MAX]; /* lock: what a client must show; "" = none */
	int busy;                /* lock: a session runs */
	int session_ended;       /* lock: registrar must offer a fresh matchkey */
	int stopping;            /* lock: everyone winds down */
	unsigned long sessions;  /* lock: sessions served */

	uv_thread_t registrar;
	int registrar_started;
	uv_mutex_t join_lock;
	int joined;              /* join_lock */
	/* docs/metrics.md; NULL without a registry */
	struct mu__metric_s *m_sessions, *m_active, *m_duration;
	double session_start;    /* loop thread: when the active one began */
};

/* Registrar thread body (register.c). */
void mu__server_registrar(void *arg);

/* Log through the server's silent flag. */
#define SLOG(s, lvl, ...)                                                      \
	do {                                                                   \
		if ((lvl) <= MU_LOG_WARN || !(s)->opts.silent)                 \
			mu__log((lvl), "server", __VA_ARGS__);                 \
	} while (0)

#endif
