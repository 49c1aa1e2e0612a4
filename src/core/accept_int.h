/* SPDX-License-Identifier: MIT */
/*
 * A listening socket on a libuv loop that hands out streams: every server
 * built on core/conn.c accepts through it, so what must happen to every
 * new connection happens here once: the address allow-list (refused
 * connections are closed at once and counted), and wrapping the socket
 * in a stream under the server's mu_secure_t (TLS, shared secret). Loop
 * thread only.
 */
#ifndef MU_CORE_ACCEPT_INT_H
#define MU_CORE_ACCEPT_INT_H

#include <uv.h>

#include "muster/stream.h"
#include "core/cidr_int.h"
#include "core/metrics_int.h"
#include "core/net_int.h"
#include "core/stream_int.h"

typedef struct mu__listener_s mu__listener_t;

/* A new connection, its stream (owned by the callee from now on). */
typedef void (*mu__accept_cb)(mu__listener_t *l, mu_stream_t *s);

struct mu__listener_s {
	uv_poll_t poll;
	uv_timer_t retry;         /* out of descriptors: accept again later */
	int fd;
	int open_handles;
	mu__accept_cb cb;
	void *data;               /* the owner's */
	const mu_secure_t *sec;   /* streams are made under it (NULL: TCP) */
	const char *module;       /* log lines go out under it */
	unsigned long refused;    /* connections closed for the allow-list */
	/* Set by the owner right after mu__listener_start, on the loop's
	 * thread: who may connect (NULL: everyone), and the counter of
	 * refusals by reason ("allow"; NULL: none). */
	const mu__allow_t *allow;
	mu__metric_t *m_refused;
	void (*on_closed)(mu__listener_t *l);
};

/*
 * Listen as o says (mu__listen_fd: TVM's port search) on loop, and call
 * cb with a stream for every connection. *bound_port gets the port. On
 * failure nothing is left open. 0, MU_EBIND, MU_ERESOLVE, -errno.
 */
int mu__listener_start(mu__listener_t *l, uv_loop_t *loop,
                       const mu__listen_opts_t *o, const mu_secure_t *sec,
                       const char *module, mu__accept_cb cb, int *bound_port);

/* Stop listening and close the socket; on_closed (may be NULL) runs
 * once the handles are closed. Idempotent. */
void mu__listener_close(mu__listener_t *l, void (*on_closed)(mu__listener_t *l));

#endif
