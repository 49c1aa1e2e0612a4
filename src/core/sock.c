/* SPDX-License-Identifier: MIT */
/*
 * Deadline-bounded blocking socket helpers over poll().
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
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
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

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
		ssize_t r = recv(fd, p, n, 0);

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

int mu__sock_wait_readable(int fd, int64_t deadline)
{
	return wait_fd(fd, POLLIN, deadline);
}

void mu__sock_close(int fd)
{
	if (fd >= 0)
		close(fd);
}
