/* SPDX-License-Identifier: MIT */
/*
 * What `muster stage`'s server (stage_server.c: listening, admission,
 * metrics, its life) and its connections (stage_conn.c: reading a
 * message, running it, writing the reply) share. Both run on the
 * server's loop only.
 */
#ifndef MU_PIPELINE_STAGE_SERVER_INT_H
#define MU_PIPELINE_STAGE_SERVER_INT_H

#include <stdint.h>

#include <uv.h>

#include "core/accept_int.h"
#include "core/buf_int.h"
#include "core/conn_int.h"
#include "core/list_int.h"
#include "core/metrics_int.h"
#include "core/service_int.h"
#include "pipeline/serve_int.h"
#include "tensor/frame_int.h"

/* A connection's state, between and inside messages:
 *   SC_HEADER  waiting for (the rest of) a 40-byte header
 *   SC_TEXT    reading a JSON or text body into text
 *   SC_FRAME   reading a frame body straight into its tensors
 *   SC_BUSY    a whole message is being answered; nothing is read */
typedef enum { SC_HEADER, SC_TEXT, SC_FRAME, SC_BUSY } mu__sc_state_t;

typedef struct mu__sconn_s {
	mu__conn_t conn;          /* first: the conn glue's callbacks find us */
	mu_stage_server_t *srv;
	mu__list_t node;
	mu__sc_state_t state;
	mu__msg_t m;
	int version;              /* of m's header */
	uint64_t left;            /* body bytes still due */
	mu__buf_t text;
	mu__frame_reader_t fr;
	int fr_live;
	mu_tensor_list_t in;
	mu__reply_t reply;
	uv_work_t work;
	int computing;            /* a forward is on the thread pool */
	int freed;                /* ... and the handles closed meanwhile */
	unsigned long nmsgs;      /* whole messages received */
	uint64_t serial;          /* names the connection as an owner of sequences */
	double since;             /* when it connected (mu__clock_ms) */
	int uncounted;            /* closing after an ERROR: not in nconns */
	int in_data;              /* inside sc_data: it goes on with the next message */
	double deadline;          /* the message under way must be in by then (ms); 0 */
	int timer_is_deadline;    /* the armed timer is that deadline, not a stall */
	double last_msg;          /* when it last went idle between messages (ms) */
	char why[192];            /* why the budget refused the frame under way */
} mu__sconn_t;

struct mu_stage_server_s {
	mu__service_t svc;
	mu_stage_t *stage;
	mu_stage_server_opts_t o;
	char host[256], name[64];
	mu__listener_t listener;
	int listener_init;
	int port;
	mu__list_t conns;         /* oldest first */
	int nconns;               /* conns not refused or evicted */
	mu__budget_t budget;
	char scratch[65536];
	mu__serve_ctx_t ctx;
	uv_mutex_t lock;          /* forwards */
	unsigned long forwards;
	uint64_t serials;         /* connections accepted so far */
	uv_mutex_t join_lock;
	int joined;
	/* docs/metrics.md; each NULL without a registry */
	mu__metric_t *m_open, *m_conns, *m_cut, *m_msgs, *m_fwd, *m_tok, *m_in, *m_out,
		*m_compute, *m_kv, *m_seqs;
};

/* ---- stage_conn.c ---- */

/* A new connection on st: counted, in srv->conns, its timer armed (its
 * close callback undoes all that, even when accepting fails). */
void mu__sconn_accept(mu_stage_server_t *srv, mu_stream_t *st);
/* Tell the peer why (when its stream can still carry a reply) and close. */
void mu__sconn_fail(mu__sconn_t *sc, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- stage_server.c ---- */

/* A forward's RESULT went out: count it (the server stops after
 * o.requests of them). */
void mu__stage_server_counted(mu_stage_server_t *srv);
/* Past max_conns with newcomer: make room, or refuse it. */
void mu__stage_server_over_limit(mu_stage_server_t *srv, mu__sconn_t *newcomer);

#endif
