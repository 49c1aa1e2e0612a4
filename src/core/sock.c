/* SPDX-License-Identifier: MIT */
/*
 * Deadline-bounded blocking I/O on streams, over poll().
 *
 * Every read and write here goes through the stream's non-blocking table,
 * and every wait is a poll() for the time left before the deadline, on
 * what the stream said it waits for (TLS may need to write to read).
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "muster/common.h"
#include "core/sock_int.h"
#include "core/secure_int.h"
#include "core/time_int.h"

static int wait_fd(int fd, short events, int64_t deadline)
{
	struct pollfd pfd;
	int rc;

	for (;;) {
		pfd.fd = fd;
		pfd.events = events;
		pfd.revents = 0;
		rc = poll(&pfd, 1, mu__remaining_ms(deadline));
		if (rc > 0)
			return 0; /* ready, or an error the next call reports */
		if (rc == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

static int connect_one(const struct addrinfo *ai, int64_t deadline, int *out)
{
	int fd, rc, err = 0, one = 1;
	socklen_t len = sizeof(err);

	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
		if (errno != EINPROGRESS) {
			rc = -errno;
			close(fd);
			return rc;
		}
		rc = wait_fd(fd, POLLOUT, deadline);
		if (rc == 0 &&
		    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
			rc = -errno;
		if (rc == 0 && err != 0)
			rc = -err;
		if (rc != 0) {
			close(fd);
			return rc;
		}
	}
	*out = fd;
	return 0;
}

int mu__sock_connect_fd(const char *host, int port, int64_t deadline, int *fd)
{
	struct addrinfo hints, *res = NULL, *ai;
	char service[8];
	int rc;

	*fd = -1;
	if (port < 0 || port > 65535)
		return MU_EARG;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	snprintf(service, sizeof(service), "%d", port);
	/* resolving a name waits on the system resolver's own timeouts,
	 * which no deadline of ours can shorten (see sock_int.h) */
	if (getaddrinfo(host, service, &hints, &res) != 0 || res == NULL)
		return MU_ERESOLVE;
	rc = -ECONNREFUSED;
	/* "localhost" may give ::1 before 127.0.0.1 (TVM #2505): try all. */
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		rc = connect_one(ai, deadline, fd);
		if (rc == 0 || rc == -ETIMEDOUT)
			break;
	}
	freeaddrinfo(res);
	return rc;
}

/* Wait for what the stream's last -EAGAIN needs. */
static int wait_stream(mu_stream_t *s, int64_t deadline)
{
	return wait_fd(s->fd, mu__stream_poll_events(s), deadline);
}

int mu__sock_handshake(mu_stream_t *s, int64_t deadline)
{
	int rc;

	while ((rc = mu__stream_handshake(s)) == -EAGAIN)
		if ((rc = wait_stream(s, deadline)) != 0)
			return rc;
	return rc;
}

int mu__sock_connect(const char *host, int port, const mu_secure_t *sec,
                     int64_t deadline, mu_stream_t **out)
{
	int fd, rc;

	*out = NULL;
	rc = mu__sock_connect_fd(host, port, deadline, &fd);
	if (rc == 0)
		rc = mu__secure_stream(sec, fd, 0, host, out);
	if (rc == 0 && (rc = mu__sock_handshake(*out, deadline)) != 0) {
		mu__stream_close(*out);
		*out = NULL;
	}
	return rc;
}

int mu__sock_send_all(mu_stream_t *s, const void *buf, size_t n, int64_t deadline)
{
	struct iovec iov = {(void *)buf, n};

	return mu__sock_sendv(s, &iov, 1, deadline, -1);
}

int mu__sock_recv_some(mu_stream_t *s, void *buf, size_t len, size_t *n,
                       int64_t deadline)
{
	int rc;

	for (;;) {
		rc = mu__stream_recv(s, buf, len, n);
		if (rc != -EAGAIN)
			return rc;
		if ((rc = wait_stream(s, deadline)) != 0)
			return rc;
	}
}

int mu__sock_recv_all(mu_stream_t *s, void *buf, size_t n, int64_t deadline)
{
	char *p = buf;
	size_t got;
	int rc;

	while (n > 0) {
		rc = mu__sock_recv_some(s, p, n, &got, deadline);
		if (rc != 0)
			return rc;
		p += got;
		n -= got;
	}
	return 0;
}

int mu__sock_sendv(mu_stream_t *s, struct iovec *iov, int n, int64_t deadline,
                   int idle_ms)
{
	size_t w;
	int rc;

	while (n > 0 && iov->iov_len == 0) {
		iov++;
		n--;
	}
	while (n > 0) {
		rc = mu__stream_sendv(s, iov, n, &w);
		if (rc == -EAGAIN) {
			int64_t until = deadline;

			if (idle_ms >= 0 && mu__deadline(idle_ms) < until)
				until = mu__deadline(idle_ms);
			rc = wait_stream(s, until);
			if (rc != 0)
				return rc;
			continue;
		}
		if (rc != 0)
			return rc;
		while (n > 0 && w >= iov->iov_len) {
			w -= iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= w;
		}
	}
	return 0;
}

int mu__sock_listen(const char *host, int port, int backlog, int *out,
                    int *bound_port)
{
	struct addrinfo hints, *res = NULL, *ai;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char service[8];
	int fd = -1, rc = MU_ERESOLVE, one = 1;

	*out = -1;
	if (port < 0 || port > 65535)
		return MU_EARG;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	snprintf(service, sizeof(service), "%d", port);
	if (getaddrinfo(host != NULL ? host : "0.0.0.0", service, &hints, &res) != 0)
		return MU_ERESOLVE;
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			rc = -errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, backlog) == 0)
			break;
		rc = errno == EADDRINUSE ? MU_EBIND : -errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return rc;
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	*bound_port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
	                                       : ntohs(((struct sockaddr_in *)&ss)->sin_port);
	*out = fd;
	return 0;
}

int mu__sock_wait_readable(mu_stream_t *s, int64_t deadline)
{
	if (mu__stream_pending(s) > 0)
		return 0;
	return wait_fd(s->fd, POLLIN, deadline);
}

int mu__sock_idle_ok(mu_stream_t *s)
{
	struct pollfd pfd = {s->fd, POLLIN | POLLRDHUP, 0};
	int n;

	if (mu__stream_pending(s) > 0)
		return 0;
	do
		n = poll(&pfd, 1, 0);
	while (n < 0 && errno == EINTR);
	return n == 0;
}

int mu__sock_poll(mu_stream_t *const *s, int n, char *ready, int timeout_ms)
{
	struct pollfd pf[64];
	int i, got = 0, rc;

	if (n < 0 || n > 64)
		return MU_EARG;
	for (i = 0; i < n; i++) {
		ready[i] = mu__stream_pending(s[i]) > 0;
		got += ready[i];
		pf[i] = (struct pollfd){s[i]->fd, POLLIN, 0};
	}
	do
		rc = poll(pf, (nfds_t)n, got > 0 ? 0 : timeout_ms);
	while (rc < 0 && errno == EINTR);
	if (rc < 0)
		return -errno;
	for (got = 0, i = 0; i < n; i++) {
		ready[i] |= pf[i].revents != 0;
		got += ready[i];
	}
	return got;
}

void mu__sock_close(mu_stream_t *s)
{
	mu__stream_close(s);
}

/* ---- the public face of a stream ---- */

int mu_stream_send(mu_stream_t *s, const void *buf, size_t len, int timeout_ms)
{
	return mu__sock_send_all(s, buf, len, mu__deadline(timeout_ms));
}

int mu_stream_recv(mu_stream_t *s, void *buf, size_t len, size_t *n,
                   int timeout_ms)
{
	int rc;

	*n = 0;
	if (len == 0)
		return 0;
	rc = mu__sock_recv_some(s, buf, len, n, mu__deadline(timeout_ms));
	return rc == MU_EEOF ? 0 : rc;
}

int mu_stream_shutdown(mu_stream_t *s)
{
	int rc;

	while ((rc = mu__stream_shutdown(s)) == -EAGAIN)
		if ((rc = wait_fd(s->fd, mu__stream_poll_events(s), mu__deadline(1000))) != 0)
			return rc;
	return rc;
}
