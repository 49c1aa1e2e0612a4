/* SPDX-License-Identifier: MIT */
/*
 * HTTP over h2o on our libuv loop (http_int.h).
 *
 * A connection is our uv_tcp_t handed to h2o (h2o_uv_socket_create), so
 * h2o owns its I/O and closes it; our conn_t is freed from the close
 * callback h2o calls when it does. The raw descriptor is used in two
 * places, both because h2o 2.2 offers no call for them: a MSG_PEEK read to
 * see whether a client closed while its request computes (h2o stops
 * reading once a request is whole), and shutdown(2) to make h2o notice an
 * error and close a connection (a client that stopped reading, or
 * stopping the server).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/error_int.h"
#include "core/list_int.h"
#include "core/log_int.h"
#include "core/net_int.h"
#include "core/time_int.h"
#include "serve/http_int.h"

#define LOG "serve"

/*
 * A connection. State, one line each:
 *   idle     no request in progress (just accepted, or between kept-alive
 *            requests): may be displaced by a newcomer when the server or
 *            its address is full, the longest idle first
 *   busy     a request is in progress (from its head to its disposal)
 *   leaving  displaced: shut down, counted by nobody, until h2o closes it
 */
typedef struct {
	uv_tcp_t tcp;         /* first: h2o gets &tcp and hands it back to close_cb */
	mu__list_t node;
	mu__http_t *h;
	h2o_socket_t *sock;   /* h2o's, to find the connection of a request */
	void **slot;          /* the busy request's dispose slot, or NULL */
	int busy, leaving;
	double idle_since;    /* mu__clock_ms() when it last became idle */
	struct sockaddr_storage addr;
	socklen_t alen;
} conn_t;

typedef struct {
	h2o_handler_t super;
	mu__http_t *h;
} handler_t;

struct mu__http_s {
	mu__http_opts_t o;
	uv_loop_t *loop;
	uv_tcp_t listener;
	h2o_globalconf_t conf;
	h2o_context_t ctx;
	h2o_accept_ctx_t accept;
	mu__list_t conns;
	int nconns, refused, displaced, stopping;
	int listener_open, freeing;   /* the handle is closing while freeing */
	void (*done)(void *);
	void *done_ud;
};

static void listener_closed(uv_handle_t *handle)
{
	mu__http_t *h = mu__container_of((uv_tcp_t *)handle, mu__http_t, listener);

	h->listener_open = 0;
	if (h->freeing)
		mu__free(h);
}

/* The request's connection is idle again. */
static void req_disposed(void *slot)
{
	conn_t *c = *(conn_t **)slot;

	if (c == NULL)
		return;
	c->busy = 0;
	c->slot = NULL;
	c->idle_since = mu__clock_ms();
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
	handler_t *hd = (handler_t *)self;
	h2o_socket_t *sock = req->conn->callbacks->get_socket != NULL
	                         ? req->conn->callbacks->get_socket(req->conn) : NULL;
	mu__list_t *it;

	mu__list_foreach(it, &hd->h->conns) {
		conn_t *c = mu__container_of(it, conn_t, node);

		if (c->sock == sock && sock != NULL && c->slot == NULL) {
			c->busy = 1;
			c->slot = h2o_mem_alloc_shared(&req->pool, sizeof(*c->slot), req_disposed);
			*c->slot = c;
			break;
		}
	}
	hd->h->o.on_req(hd->h->o.ud, req);
	return 0;
}

static void maybe_done(mu__http_t *h)
{
	void (*done)(void *) = h->done;

	if (h->stopping && h->nconns == 0 && done != NULL) {
		h->done = NULL;
		done(h->done_ud);
	}
}

/* h2o has closed the socket (it freed its own part first). */
static void conn_closed(uv_handle_t *handle)
{
	conn_t *c = mu__container_of((uv_tcp_t *)handle, conn_t, tcp);
	mu__http_t *h = c->h;

	if (c->slot != NULL)
		*c->slot = NULL;
	mu__list_remove(&c->node);
	h->nconns--;
	mu__free(c);
	maybe_done(h);
}

static void refused_closed(uv_handle_t *handle)
{
	mu__free(mu__container_of((uv_tcp_t *)handle, conn_t, tcp));
}

static int same_addr(const conn_t *a, const conn_t *b)
{
	const struct sockaddr *x = (const struct sockaddr *)&a->addr;
	const struct sockaddr *y = (const struct sockaddr *)&b->addr;

	if (x->sa_family != y->sa_family)
		return 0;
	if (x->sa_family == AF_INET)
		return memcmp(&((const struct sockaddr_in *)x)->sin_addr,
		              &((const struct sockaddr_in *)y)->sin_addr, sizeof(struct in_addr)) == 0;
	if (x->sa_family == AF_INET6)
		return memcmp(&((const struct sockaddr_in6 *)x)->sin6_addr,
		              &((const struct sockaddr_in6 *)y)->sin6_addr,
		              sizeof(struct in6_addr)) == 0;
	return 1;
}

/*
 * Room for c, a connection just accepted: when the server holds
 * max_conns, or c's address max_per_addr, the longest-idle connection (of
 * that address, when it is the address that is full) is displaced, so
 * idle sockets can never lock a client out. 0, or -1 when every
 * candidate is busy (c is refused).
 */
static int make_room(mu__http_t *h, conn_t *c, const char **why)
{
	conn_t *oldest_all = NULL, *oldest_addr = NULL, *victim;
	int all = 0, mine = 0;
	mu__list_t *it;
	uv_os_fd_t fd;

	mu__list_foreach(it, &h->conns) {
		conn_t *o = mu__container_of(it, conn_t, node);
		int same;

		if (o->leaving)
			continue;
		same = same_addr(o, c);
		all++;
		mine += same;
		if (o->busy)
			continue;
		if (oldest_all == NULL || o->idle_since < oldest_all->idle_since)
			oldest_all = o;
		if (same && (oldest_addr == NULL || o->idle_since < oldest_addr->idle_since))
			oldest_addr = o;
	}
	if (mine >= h->o.max_per_addr) {
		victim = oldest_addr;
		*why = "--max-connections-per-address";
	} else if (all >= h->o.max_conns) {
		victim = oldest_all;
		*why = "--max-connections";
	} else {
		return 0;
	}
	if (victim == NULL)
		return -1;
	/* h2o, reading for the next request, sees EOF and closes it. */
	victim->leaving = 1;
	if (uv_fileno((uv_handle_t *)&victim->tcp, &fd) == 0)
		shutdown(fd, SHUT_RDWR);
	if (h->displaced++ % 100 == 0)
		mu__log(MU_LOG_INFO, LOG, "closed a connection idle for %.0f ms to make room for a "
		        "new one (%s is reached; %d displaced so far)",
		        mu__clock_ms() - victim->idle_since, *why, h->displaced);
	return 0;
}

static void on_connection(uv_stream_t *server, int status)
{
	mu__http_t *h = mu__container_of((uv_tcp_t *)server, mu__http_t, listener);
	const char *why = "--max-connections";
	int alen;
	conn_t *c;

	if (status != 0 || (c = mu__calloc(1, sizeof(*c))) == NULL)
		return;
	c->h = h;
	c->idle_since = mu__clock_ms();
	if (uv_tcp_init(h->loop, &c->tcp) != 0) {
		mu__free(c);
		return;
	}
	alen = (int)sizeof(c->addr);
	if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0 ||
	    uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&c->addr, &alen) != 0 ||
	    make_room(h, c, &why) != 0) {
		/* Accept and close: the client sees the connection end rather
		 * than wait in the backlog. */
		if (h->refused++ % 100 == 0)
			mu__log(MU_LOG_WARN, LOG, "refused a connection: %d open, every one busy, the "
			        "most %s allows (%d refused so far)", h->nconns, why, h->refused);
		uv_close((uv_handle_t *)&c->tcp, refused_closed);
		return;
	}
	c->alen = (socklen_t)alen;
	mu__list_insert_tail(&h->conns, &c->node);
	h->nconns++;
	uv_tcp_nodelay(&c->tcp, 1);
	c->sock = h2o_uv_socket_create((uv_stream_t *)&c->tcp, conn_closed);
	h2o_accept(&h->accept, c->sock);
}

static void setup_h2o(mu__http_t *h)
{
	h2o_hostconf_t *host;
	h2o_pathconf_t *path;
	handler_t *hd;

	h2o_config_init(&h->conf);
	h->conf.server_name = h2o_iovec_init(H2O_STRLIT("muster"));
	h->conf.max_request_entity_size = h->o.body_limit;
	h->conf.http1.req_timeout = (uint64_t)h->o.io_timeout_ms;
	/* HTTP/1 only: one request per connection at a time keeps the
	 * per-connection budget one request. */
	h->conf.http1.upgrade_to_http2 = 0;
	host = h2o_config_register_host(&h->conf, h2o_iovec_init(H2O_STRLIT("default")), 65535);
	path = h2o_config_register_path(host, "/", 0);
	hd = (handler_t *)h2o_create_handler(path, sizeof(*hd));
	hd->super.on_req = on_req;
	hd->h = h;
	h2o_context_init(&h->ctx, h->loop, &h->conf);
	h->accept.ctx = &h->ctx;
	h->accept.hosts = h->conf.hosts;
}

int mu__http_start(uv_loop_t *loop, const mu__http_opts_t *o, mu__http_t **out, int *port,
                   char *why, size_t wl)
{
	mu__listen_opts_t lo = {o->host, o->port, o->port + 1, 1, 128};
	mu__http_t *h;
	int rc;

	*out = NULL;
	if ((h = mu__calloc(1, sizeof(*h))) == NULL)
		return MU_ENOMEM;
	h->o = *o;
	h->loop = loop;
	mu__list_init(&h->conns);
	if ((rc = uv_tcp_init(loop, &h->listener)) != 0) {
		mu__free(h);
		return mu__why(why, wl, rc, "%s", uv_strerror(rc));
	}
	if ((rc = mu__listen(&h->listener, &lo, port)) != 0 ||
	    (rc = uv_listen((uv_stream_t *)&h->listener, 128, on_connection)) != 0) {
		mu__why(why, wl, rc, "cannot listen on %s port %d: %s", o->host ? o->host : "0.0.0.0",
		        o->port, rc == MU_EBIND ? "address in use" : mu_strerror(rc));
		h->freeing = 1;
		uv_close((uv_handle_t *)&h->listener, listener_closed);
		return rc;
	}
	h->listener_open = 1;
	setup_h2o(h);
	*out = h;
	return 0;
}

/* The descriptor of req's connection, or -1. */
static int req_fd(h2o_req_t *req)
{
	h2o_socket_t *s = req->conn->callbacks->get_socket != NULL
	                      ? req->conn->callbacks->get_socket(req->conn) : NULL;

	return s != NULL ? h2o_socket_get_fd(s) : -1;
}

int mu__http_peer_gone(h2o_req_t *req, int replying, int *probed)
{
	static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
	struct pollfd p = {.fd = req_fd(req), .events = POLLIN | POLLRDHUP};

	if (p.fd < 0)
		return 1;
	if (poll(&p, 1, 0) <= 0)
		return 0;
	/* A reset (or both directions shut): nobody will read the reply. */
	if (p.revents & (POLLERR | POLLHUP | POLLNVAL))
		return 1;
	if (!(p.revents & POLLRDHUP) || replying || *probed || req->version < 0x101)
		return 0;
	/*
	 * The client sent FIN: it closed, or only shut its sending side
	 * (a legal half-close that still waits for the reply). Only a write
	 * tells them apart: a closed socket answers it with a reset, which
	 * the next look sees. Nothing of the reply has been written, and an
	 * HTTP/1.1 client must take an interim 100 before the reply.
	 */
	*probed = 1;
	if (send(p.fd, cont, sizeof(cont) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
	    errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		return 1;
	return 0;
}

void mu__http_abort(h2o_req_t *req)
{
	int fd = req_fd(req);

	req->http1_is_persistent = 0;
	if (fd >= 0)
		shutdown(fd, SHUT_RDWR);
}

void mu__http_send(h2o_req_t *req, int status, const char *type, const char *body, size_t len)
{
	static const char *reasons[][2] = {
		{"200", "OK"}, {"400", "Bad Request"}, {"404", "Not Found"},
		{"405", "Method Not Allowed"}, {"413", "Payload Too Large"},
		{"500", "Internal Server Error"}, {"501", "Not Implemented"},
		{"503", "Service Unavailable"}};
	char code[8];

	snprintf(code, sizeof(code), "%d", status);
	req->res.status = status;
	req->res.reason = "Error";
	for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++)
		if (strcmp(reasons[i][0], code) == 0)
			req->res.reason = reasons[i][1];
	req->res.content_length = len;
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, type,
	               strlen(type));
	h2o_send_inline(req, body, len);
}

void **mu__http_on_dispose(h2o_req_t *req, void (*dispose)(void *slot))
{
	void **slot = h2o_mem_alloc_shared(&req->pool, sizeof(*slot), dispose);

	*slot = NULL;
	return slot;
}

int mu__http_conns(const mu__http_t *h)
{
	return h->nconns;
}

void mu__http_stop(mu__http_t *h, int force, void (*done)(void *), void *ud)
{
	mu__list_t *it;

	if (!h->stopping) {
		h->stopping = 1;
		uv_close((uv_handle_t *)&h->listener, listener_closed);
		/* Keep-alive ends with the reply in progress. (Not through
		 * h2o_context_request_shutdown: its HTTP/2 part arms a timer
		 * that h2o_context_dispose then finds pending.) */
		h->ctx.shutdown_requested = 1;
	}
	h->done = done;
	h->done_ud = ud;
	/* A connection waiting for its next request sees EOF and closes; one
	 * with a reply in progress finishes it (or, forced, fails it). */
	mu__list_foreach(it, &h->conns) {
		conn_t *c = mu__container_of(it, conn_t, node);
		uv_os_fd_t fd;

		if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
			shutdown(fd, force ? SHUT_RDWR : SHUT_RD);
	}
	maybe_done(h);
}

void mu__http_free(mu__http_t *h)
{
	if (h == NULL)
		return;
	h2o_context_dispose(&h->ctx);
	h2o_config_dispose(&h->conf);
	if (!h->stopping)
		uv_close((uv_handle_t *)&h->listener, listener_closed);
	/* The listener's close completes on the loop's next run. */
	if (h->listener_open)
		h->freeing = 1;
	else
		mu__free(h);
}
