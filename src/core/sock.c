/* SPDX-License-Identifier: MIT */
/*
 * Deadline-bounded blocking socket helpers over poll().
 *
 * Every send and recv here is MSG_DONTWAIT, whatever mode the descriptor
 * is in, and every wait is a poll() for the time left before the deadline:
 * a blocking fd (a session's, which the handler owns) must not turn a
 * send to a peer that stopped reading into a wait without end.
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

int mu__sock_connect(const char *host, int port, int64_t deadline, int *fd)
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

int mu__sock_send_all(int fd, const void *buf, size_t n, int64_t deadline)
{
	const char *p = buf;
	int rc;

	while (n > 0) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (w > 0) {
			p += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			rc = wait_fd(fd, POLLOUT, deadline);
			if (rc != 0)
				return rc;
			continue;
		}
		if (w < 0 && (errno == EPIPE || errno == ECONNRESET))
			return MU_EEOF;
		return w < 0 ? -errno : MU_EEOF;
	}
	return 0;
}

int mu__sock_recv_all(int fd, void *buf, size_t n, int64_t deadline)
{
	char *p = buf;
	int rc;

	while (n > 0) {
		ssize_t r = recv(fd, p, n, MSG_DONTWAIT);

		if (r > 0) {
			p += r;
			n -= (size_t)r;
			continue;
		}
		if (r == 0)
			return MU_EEOF;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			rc = wait_fd(fd, POLLIN, deadline);
			if (rc != 0)
				return rc;
			continue;
		}
		if (errno == ECONNRESET)
			return MU_EEOF;
		return -errno;
	}
	return 0;
}

int mu__sock_sendv(int fd, struct iovec *iov, int n, int64_t deadline,
                   int idle_ms)
{
	struct msghdr mh;
	int rc;

	while (n > 0 && iov->iov_len == 0) {
		iov++;
		n--;
	}
	while (n > 0) {
		ssize_t w;

		memset(&mh, 0, sizeof(mh));
		mh.msg_iov = iov;
		mh.msg_iovlen = (size_t)(n > IOV_MAX ? IOV_MAX : n);
		w = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int64_t until = deadline;

			if (idle_ms >= 0 && mu__deadline(idle_ms) < until)
				until = mu__deadline(idle_ms);
			rc = wait_fd(fd, POLLOUT, until);
			if (rc != 0)
				return rc;
			continue;
		}
		if (w < 0)
			return errno == EPIPE || errno == ECONNRESET ? MU_EEOF : -errno;
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
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

int mu__sock_wait_readable(int fd, int64_t deadline)
{
	return wait_fd(fd, POLLIN, deadline);
}

int mu__sock_idle_ok(int fd)
{
	struct pollfd pfd = {fd, POLLIN | POLLRDHUP, 0};
	int n;

	do
		n = poll(&pfd, 1, 0);
	while (n < 0 && errno == EINTR);
	return n == 0;
}

void mu__sock_close(int fd)
{
	if (fd >= 0)
		close(fd);
}
