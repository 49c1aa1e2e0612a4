/* SPDX-License-Identifier: MIT */
/*
 * Accepting connections for the libuv servers; see accept_int.h.
 *
 * The listening socket is watched with a uv_poll_t and accepted with
 * accept4(2) rather than through a uv_tcp_t: a connection is a stream
 * (stream_int.h) driven by core/conn.c, so it must come out as a plain
 * descriptor, never bound to a libuv stream handle.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/accept_int.h"
#include "core/log_int.h"
#include "core/secure_int.h"

/* Connections taken per readiness event: others' I/O gets its turn. */
#define ACCEPT_BATCH 64
/* Out of descriptors: how long to stop accepting. */
#define EMFILE_PAUSE_MS 100

static void poll_cb(uv_poll_t *p, int status, int events);

static void retry_cb(uv_timer_t *t)
{
	mu__listener_t *l = t->data;

	uv_poll_start(&l->poll, UV_READABLE, poll_cb);
}

/* Closed at accept: the peer is not on the allow-list. */
static void refuse(mu__listener_t *l, int fd, const struct sockaddr *sa)
{
	char ip[MU_ADDRSTRLEN] = "?", peer[MU_ADDRSTRLEN + 8];
	int port = 0;

	close(fd);
	l->refused++;
	mu__metric_add(l->m_refused, "allow", 1);
	mu__addr_text(sa, ip, sizeof(ip), &port);
	mu__hostport_text(ip, port, peer, sizeof(peer));
	mu__log(MU_LOG_INFO, l->module, "refused %s: not in --allow (%lu refused so far)", peer,
	        l->refused);
}

static void take(mu__listener_t *l, int fd, const struct sockaddr *sa)
{
	mu_stream_t *s = NULL;
	int one = 1;

	if (l->allow != NULL && !mu__allow_match(l->allow, sa)) {
		refuse(l, fd, sa);
		return;
	}

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (mu__secure_stream(l->sec, fd, 1, NULL, &s) != 0) {
		mu__log(MU_LOG_WARN, l->module, "cannot set up an accepted connection");
		return; /* fd closed by mu__secure_stream */
	}
	l->cb(l, s);
}

static void poll_cb(uv_poll_t *p, int status, int events)
{
	mu__listener_t *l = p->data;
	int i, fd;

	(void)events;
	if (status < 0)
		return;
	for (i = 0; i < ACCEPT_BATCH && l->fd >= 0; i++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);

		memset(&ss, 0, sizeof(ss));
		fd = accept4(l->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			take(l, fd, (struct sockaddr *)&ss);
			continue;
		}
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
			/* the queue stays readable: do not spin on it */
			mu__log(MU_LOG_WARN, l->module, "cannot accept: %s; pausing %d ms",
			        strerror(errno), EMFILE_PAUSE_MS);
			uv_poll_stop(&l->poll);
			uv_timer_start(&l->retry, retry_cb, EMFILE_PAUSE_MS, 0);
		}
		break; /* EAGAIN, or an error the next event reports again */
	}
}

int mu__listener_start(mu__listener_t *l, uv_loop_t *loop,
                       const mu__listen_opts_t *o, const mu_secure_t *sec,
                       const char *module, mu__accept_cb cb, int *bound_port)
{
	int rc;

	memset(l, 0, sizeof(*l));
	l->fd = -1;
	l->cb = cb;
	l->sec = sec;
	l->module = module;
	rc = mu__listen_fd(o, &l->fd, bound_port);
	if (rc != 0)
		return rc;
	fcntl(l->fd, F_SETFL, fcntl(l->fd, F_GETFL) | O_NONBLOCK);
	rc = uv_poll_init(loop, &l->poll, l->fd);
	if (rc != 0) {
		close(l->fd);
		l->fd = -1;
		return rc;
	}
	uv_timer_init(loop, &l->retry);
	l->poll.data = l;
	l->retry.data = l;
	l->open_handles = 2;
	return uv_poll_start(&l->poll, UV_READABLE, poll_cb);
}

static void closed_cb(uv_handle_t *h)
{
	mu__listener_t *l = h->data;

	if (--l->open_handles == 0 && l->on_closed != NULL)
		l->on_closed(l);
}

void mu__listener_close(mu__listener_t *l, void (*on_closed)(mu__listener_t *l))
{
	if (l->fd < 0)
		return;
	l->on_closed = on_closed;
	/* uv_close stops the poll at once: the socket may go now */
	uv_close((uv_handle_t *)&l->poll, closed_cb);
	uv_close((uv_handle_t *)&l->retry, closed_cb);
	close(l->fd);
	l->fd = -1;
}
