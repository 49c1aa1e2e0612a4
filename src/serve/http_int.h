/* SPDX-License-Identifier: MIT */
/*
 * The HTTP transport of the API server and the metrics endpoint: h2o 2.2 (Debian's libh2o-dev, its
 * libuv flavour) parses HTTP/1.x on our libuv loop; this file owns the
 * listening socket, the connections and their budgets, and the few raw
 * socket operations h2o 2.2 has no call for (telling that a client went
 * away while its request computes, and aborting a connection whose client
 * stopped reading). Everything here runs on the loop's thread.
 *
 * Budgets: at most max_conns connections, and max_per_addr from one client
 * address; a newcomer past either displaces the longest-idle connection
 * (no request in progress) of the server or of its address, and is closed
 * at once, with a warning, only when every one is busy; HTTP/1 only (no h2c), so a connection holds one
 * request at a time; a request's head is at most h2o's H2O_MAX_REQLEN and
 * its body at most body_limit bytes, which h2o buffers whole before the
 * handler runs. The handler applies its own, smaller, limit and answers
 * past it with a proper error: body_limit is set above it so a client that
 * sends too much learns why instead of being cut off. A connection idle or
 * slow to send its request for io_timeout_ms is closed by h2o.
 */
#ifndef MU_SERVE_HTTP_INT_H
#define MU_SERVE_HTTP_INT_H

#include <stddef.h>

#include <h2o.h>
#include <uv.h>

typedef struct mu__http_s mu__http_t;

typedef struct {
	const char *host;       /* NULL: all IPv4 addresses */
	int port;               /* 0: the kernel picks */
	int max_conns;
	int max_per_addr;       /* connections from one client address */
	size_t body_limit;      /* h2o's limit on a request body */
	int io_timeout_ms;      /* reading a request */
	/* Every request, on the loop thread. It must answer it, now or later
	 * (h2o disposes of the request when its connection closes). */
	void (*on_req)(void *ud, h2o_req_t *req);
	void *ud;
} mu__http_opts_t;

/* Listen on loop. 0 with *out and *port, or -errno / MU_EBIND /
 * MU_ERESOLVE with why. */
int mu__http_start(uv_loop_t *loop, const mu__http_opts_t *o, mu__http_t **out, int *port,
                   char *why, size_t wl);
/*
 * Stop accepting and end every connection: idle ones close now, busy ones
 * after their reply (or at once when force). done(ud) runs on the loop
 * when the last connection has closed (maybe before this returns).
 */
void mu__http_stop(mu__http_t *h, int force, void (*done)(void *), void *ud);
/* After done: release h2o's context. The loop must run once more after
 * this to finish closing handles. */
void mu__http_free(mu__http_t *h);
int mu__http_conns(const mu__http_t *h);

/*
 * Is the client of req gone (its connection reset, or closed)? A look at
 * the socket that reads nothing, so bytes it sent past the request (a
 * pipelined request, or junk) do not hide its close. A FIN alone may be a
 * legal half-close (SHUT_WR) of a client that waits for its reply: when
 * nothing of the reply was written yet (replying 0) and the request is
 * HTTP/1.1, an interim "100 Continue" is written once (*probed, the
 * caller's, 0 at first), and a client that closed answers it with a
 * reset, which a later call reports. Otherwise writing the reply tells.
 */
int mu__http_peer_gone(h2o_req_t *req, int replying, int *probed);
/* Shut req's connection down: its pending write fails, so h2o closes it
 * and disposes of the request. For clients that stopped reading. */
void mu__http_abort(h2o_req_t *req);
/* A whole reply with a Content-Length. */
void mu__http_send(h2o_req_t *req, int status, const char *type, const char *body, size_t len);
/* Run dispose(slot) when h2o disposes of req; *slot is the caller's. */
void **mu__http_on_dispose(h2o_req_t *req, void (*dispose)(void *slot));

#endif
