/* SPDX-License-Identifier: MIT */
/*
 * Streams: the plain TCP method table, and the calls every user of a
 * stream goes through (stream_int.h), which run the stream's handshakes
 * before its payload.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/alloc_int.h"
#include "core/auth_int.h"
#include "core/stream_int.h"
#include "core/tls_int.h"

/* ---- plain TCP ---- */

static int tcp_recv(mu_stream_t *s, void *buf, size_t len, size_t *n)
{
	ssize_t r;

	*n = 0;
	do
		r = recv(s->fd, buf, len, MSG_DONTWAIT);
	while (r < 0 && errno == EINTR);
	if (r > 0) {
		*n = (size_t)r;
		return 0;
	}
	if (r == 0)
		return MU_EEOF;
	if (errno == EAGAIN || errno == EWOULDBLOCK) {
		s->want = MU__WANT_READ;
		return -EAGAIN;
	}
	return errno == ECONNRESET ? MU_EEOF : -errno;
}

static int tcp_sendv(mu_stream_t *s, const struct iovec *iov, int cnt, size_t *n)
{
	struct msghdr mh;
	ssize_t w;

	*n = 0;
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = (struct iovec *)iov;
	mh.msg_iovlen = (size_t)(cnt > IOV_MAX ? IOV_MAX : cnt);
	do
		w = sendmsg(s->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (w < 0 && errno == EINTR);
	if (w >= 0) {
		*n = (size_t)w;
		return 0;
	}
	if (errno == EAGAIN || errno == EWOULDBLOCK) {
		s->want = MU__WANT_WRITE;
		return -EAGAIN;
	}
	return errno == EPIPE || errno == ECONNRESET ? MU_EEOF : -errno;
}

static int tcp_shutdown(mu_stream_t *s)
{
	return shutdown(s->fd, SHUT_WR) == 0 || errno == ENOTCONN ? 0 : -errno;
}

static size_t tcp_pending(const mu_stream_t *s)
{
	(void)s;
	return 0;
}

static void tcp_free(mu_stream_t *s)
{
	(void)s;
}

const mu__stream_ops_t mu__stream_tcp_ops = {
	1, "tcp", tcp_recv, tcp_sendv, tcp_shutdown, tcp_pending, tcp_free,
};

static void read_peer(mu_stream_t *s)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int port = 0;

	if (getpeername(s->fd, (struct sockaddr *)&ss, &sl) == 0) {
		mu__addr_text((struct sockaddr *)&ss, s->ip, sizeof(s->ip), &port);
		mu__hostport_text(s->ip, port, s->peer, sizeof(s->peer));
	} else {
		snprintf(s->ip, sizeof(s->ip), "?");
		snprintf(s->peer, sizeof(s->peer), "?");
	}
}

int mu__stream_tcp_new(int fd, mu_stream_t **out)
{
	mu_stream_t *s;
	int fl;

	*out = NULL;
	s = mu__calloc(1, sizeof(*s));
	if (s == NULL) {
		close(fd);
		return MU_ENOMEM;
	}
	fl = fcntl(fd, F_GETFL);
	if (fl >= 0 && !(fl & O_NONBLOCK))
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	s->ops = &mu__stream_tcp_ops;
	s->fd = fd;
	mu__buf_init(&s->back, MU_STREAM_MAX_BACK);
	read_peer(s);
	mu__stream_set_kind(s);
	*out = s;
	return 0;
}

/* ---- every stream ---- */

void mu__stream_set_kind(mu_stream_t *s)
{
	snprintf(s->kind, sizeof(s->kind), "%s%s", s->ops->name,
	         s->auth != NULL || s->authed ? "+auth" : "");
}

int mu__stream_handshake(mu_stream_t *s)
{
	int rc = 0;

	if (s->tls != NULL && (rc = mu__tls_handshake(s)) != 0)
		return rc;
	if (s->auth != NULL)
		rc = mu__auth_step(s);
	return rc;
}

int mu__stream_unread(mu_stream_t *s, const void *buf, size_t n)
{
	mu__buf_t b;
	int rc;

	if (n == 0)
		return 0;
	mu__buf_init(&b, MU_STREAM_MAX_BACK);
	rc = mu__buf_append(&b, buf, n);
	if (rc == 0 && s->back.len > 0)
		rc = mu__buf_append(&b, s->back.data, s->back.len);
	if (rc != 0) {
		mu__buf_free(&b);
		return rc;
	}
	mu__buf_free(&s->back);
	s->back = b;
	return 0;
}

int mu__stream_recv(mu_stream_t *s, void *buf, size_t len, size_t *n)
{
	int rc;

	*n = 0;
	if (s->auth != NULL && (rc = mu__auth_step(s)) != 0)
		return rc;
	if (s->back.len > 0) {
		*n = len < s->back.len ? len : s->back.len;
		memcpy(buf, s->back.data, *n);
		mu__buf_consume(&s->back, *n);
		if (s->back.len == 0)
			mu__buf_free(&s->back);
		return 0;
	}
	return s->ops->recv(s, buf, len, n);
}

int mu__stream_sendv(mu_stream_t *s, const struct iovec *iov, int cnt, size_t *n)
{
	int rc;

	*n = 0;
	if (s->auth != NULL && (rc = mu__auth_step(s)) != 0)
		return rc;
	return s->ops->sendv(s, iov, cnt, n);
}

int mu__stream_shutdown(mu_stream_t *s)
{
	return s->ops->shutdown(s);
}

size_t mu__stream_pending(const mu_stream_t *s)
{
	return s->back.len + s->ops->pending(s);
}

short mu__stream_poll_events(const mu_stream_t *s)
{
	return s->want == MU__WANT_WRITE ? POLLOUT : POLLIN;
}

void mu__stream_abort(mu_stream_t *s)
{
	shutdown(s->fd, SHUT_RDWR);
}

int mu__stream_fd(const mu_stream_t *s)
{
	return s->fd;
}

void mu__stream_close(mu_stream_t *s)
{
	if (s == NULL)
		return;
	mu__auth_free(s);
	s->ops->free(s);
	mu__buf_free(&s->back);
	if (s->fd >= 0)
		close(s->fd);
	mu__free(s);
}

const char *mu_stream_peer(const mu_stream_t *s)
{
	return s->peer;
}

const char *mu_stream_kind(const mu_stream_t *s)
{
	return s->kind;
}
