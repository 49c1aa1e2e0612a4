/* SPDX-License-Identifier: MIT */
/*
 * Sessions: I/O helpers on either side, and the client's way in
 * (mu_session_connect, TVM's rpc.connect; mu_session_request, TVM's
 * TrackerSession.request with deadlines).
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "muster/server.h"
#include "muster/tracker.h"
#include "core/alloc_int.h"
#include "core/auth_int.h"
#include "core/log_int.h"
#include "core/sock_int.h"
#include "core/time_int.h"
#include "server/handshake_int.h"
#include "server/session_int.h"

/* Bound one connect+handshake to a granted device, whatever the budget. */
#define HANDSHAKE_TRY_MS 10000

mu_session_t *mu__session_new(mu_stream_t *st, double timeout,
                              const void *early, size_t nearly)
{
	mu_session_t *s = mu__calloc(1, sizeof(*s));

	if (s == NULL || mu__stream_unread(st, early, nearly) != 0) {
		mu__free(s);
		mu__stream_close(st);
		return NULL;
	}
	s->st = st;
	snprintf(s->peer, sizeof(s->peer), "%s", st->peer);
	s->timeout = timeout;
	s->wait_limit_ms = -1;
	return s;
}

void mu__session_free(mu_session_t *s)
{
	if (s == NULL)
		return;
	mu__stream_close(s->st);
	mu__free(s->server_key);
	mu__free(s);
}

void mu_session_close(mu_session_t *s)
{
	mu__session_free(s);
}

mu_stream_t *mu_session_stream(mu_session_t *s)
{
	return s->st;
}

const char *mu_session_peer(const mu_session_t *s)
{
	return s->peer;
}

double mu_session_timeout(const mu_session_t *s)
{
	return s->timeout;
}

const char *mu_session_server_key(const mu_session_t *s)
{
	return s->server_key != NULL ? s->server_key : "";
}

int mu_session_unread(mu_session_t *s, const void *buf, size_t n)
{
	return mu__stream_unread(s->st, buf, n);
}

int mu_session_wait_limit_ms(const mu_session_t *s)
{
	return s->wait_limit_ms;
}

int mu_session_shutdown(mu_session_t *s)
{
	return mu_stream_shutdown(s->st);
}

/* The wait a call may make: the caller's, cut to the session's limit. */
static int clamp_wait(const mu_session_t *s, int timeout_ms)
{
	if (s->wait_limit_ms >= 0 && (timeout_ms < 0 || timeout_ms > s->wait_limit_ms))
		return s->wait_limit_ms;
	return timeout_ms;
}

/*
 * A wait ended at the session's limit, not the caller's timeout: the
 * client is silent, or does not read. End the session whatever the
 * handler does with -ETIMEDOUT: the stream is shut down, so its next
 * read or write fails, and the server's slot is free once it returns.
 */
static int limit_passed(mu_session_t *s, const char *what)
{
	if (!s->limit_passed) {
		s->limit_passed = 1;
		mu__log(MU_LOG_WARN, "server", "Session with %s: the client %s for %.1f s "
		        "(session timeout); ending the session", s->peer, what,
		        s->wait_limit_ms / 1000.0);
		mu__stream_abort(s->st);
	}
	return -ETIMEDOUT;
}

int mu_session_recv(mu_session_t *s, void *buf, size_t len, size_t *n,
                    int timeout_ms)
{
	int wait = clamp_wait(s, timeout_ms);
	int rc;

	*n = 0;
	if (len == 0)
		return 0;
	/* one deadline: poll for the time left, never a fresh full timeout */
	rc = mu__sock_recv_some(s->st, buf, len, n, mu__deadline(wait));
	if (rc == -ETIMEDOUT && wait != timeout_ms)
		return limit_passed(s, "sent nothing");
	return rc == MU_EEOF ? 0 : rc;
}

int mu_session_send(mu_session_t *s, const void *buf, size_t len,
                    int timeout_ms)
{
	int64_t deadline = mu__deadline(timeout_ms);
	struct iovec iov = {(void *)buf, len};
	int rc;

	if (s->limit_passed)
		return -ETIMEDOUT;
	/* the session's limit bounds each stall (the client taking nothing),
	 * not the whole transfer: a big send to a slow reader may go on */
	rc = mu__sock_sendv(s->st, &iov, 1, deadline, s->wait_limit_ms);
	if (rc == -ETIMEDOUT && s->wait_limit_ms >= 0 &&
	    (timeout_ms < 0 || mu__now_ms() < deadline))
		return limit_passed(s, "took nothing");
	return rc;
}

/* Read the server's answer; leftover bytes go to the session. */
static int read_reply(mu_stream_t *st, mu__buf_t *in, int64_t deadline, int *success,
                      size_t *used)
{
	char tmp[4096];
	size_t r;
	int rc, why;

	for (;;) {
		rc = mu__rpc_reply_peek(in->data, in->len, success, used);
		if (rc < 0 && (why = mu__auth_sniff(st, in->data, in->len)) != 0)
			return why; /* a server that wants a secret or TLS we lack */
		if (rc != 0)
			return rc < 0 ? rc : 0;
		rc = mu__sock_recv_some(st, tmp, sizeof(tmp), &r, deadline);
		if (rc == 0)
			rc = mu__buf_append(in, tmp, r);
		if (rc != 0)
			return rc;
	}
}

/*
 * After MISMATCH: did a muster server say it is busy (int32 N, "busy:
 * ...")? It closes right after, so this waits at most for its close, and
 * never past the deadline or 1 s.
 */
static int said_busy(mu_stream_t *st, mu__buf_t *in, size_t used, int64_t deadline)
{
	int64_t soon = mu__deadline(1000);
	char tmp[512];
	size_t r;

	if (deadline >= 0 && deadline < soon)
		soon = deadline;
	while (in->len < used + 9 && in->len < MU_RPC_MAX_KEY &&
	       mu__sock_recv_some(st, tmp, sizeof(tmp), &r, soon) == 0 &&
	       mu__buf_append(in, tmp, r) == 0)
		;
	return in->len >= used + 9 && memcmp(in->data + used + 4, "busy:", 5) == 0;
}

int mu_session_connect(const char *host, int port, const char *matchkey,
                       double session_timeout, const mu_secure_t *sec,
                       int timeout_ms, mu_session_t **out)
{
	int64_t deadline = mu__deadline(timeout_ms);
	mu__buf_t hello, in;
	size_t used = 0;
	mu_stream_t *st = NULL;
	int ok = 0, rc;

	*out = NULL;
	mu__buf_init(&hello, MU_RPC_MAX_KEY + 16);
	mu__buf_init(&in, MU_RPC_MAX_KEY + 65536);
	rc = mu__rpc_hello_encode(&hello, matchkey, session_timeout);
	if (rc == 0)
		rc = mu__sock_connect(host, port, sec, deadline, &st);
	if (rc == 0)
		rc = mu__sock_send_all(st, hello.data, hello.len, deadline);
	if (rc == 0)
		rc = read_reply(st, &in, deadline, &ok, &used);
	if (rc == 0 && !ok)
		rc = said_busy(st, &in, used, deadline) ? -EBUSY : MU_EMISMATCH;
	if (rc == 0) {
		/* the peer as dialled (a name stays a name in logs) */
		mu__hostport_text(host, port, st->peer, sizeof(st->peer));
		if ((*out = mu__session_new(st, 0, in.data + used, in.len - used)) == NULL)
			rc = MU_ENOMEM;
		st = NULL; /* taken, also on failure */
	}
	if (rc == 0) {
		/* the answer's key string, "server:KEY" (Java: the client's) */
		(*out)->server_key = mu__strndup(in.data + 8, used - 8);
	}
	mu__sock_close(st);
	mu__buf_free(&hello);
	mu__buf_free(&in);
	return rc;
}

static int remaining(int64_t deadline)
{
	int ms = mu__remaining_ms(deadline);

	return ms; /* -1 (none) or >= 0 */
}

int mu_session_request(const char *tracker_host, int tracker_port,
                       const char *key, double priority,
                       double session_timeout, int max_retry,
                       const mu_secure_t *sec, int timeout_ms,
                       mu_session_t **out)
{
	int64_t deadline = mu__deadline(timeout_ms);
	mu_tracker_client_t *tc = NULL;
	mu_tracker_grant_t g;
	int i, rc = MU_EARG, left;

	*out = NULL;
	for (i = 0; i < (max_retry > 0 ? max_retry : 1); i++) {
		left = remaining(deadline);
		if (left == 0) {
			rc = -ETIMEDOUT;
			break;
		}
		if (tc == NULL) {
			rc = mu_tracker_client_connect(tracker_host, tracker_port,
			                               left, &tc);
			if (rc != 0) {
				/* nothing listens yet: pause before the next try */
				if (rc == -ECONNREFUSED)
					usleep(200000);
				continue;
			}
		}
		rc = mu_tracker_client_request(tc, key, priority, remaining(deadline), &g);
		if (rc == MU_EFAIL) {
			/* refused for one of the tracker's limits: asking again at
			 * once would be refused again */
			mu__log(MU_LOG_WARN, "session", "tracker %s:%d refused the request for %s "
			        "(one of its limits; its log says which)", tracker_host,
			        tracker_port, key);
			break;
		}
		if (rc != 0) {
			mu_tracker_client_close(tc);
			tc = NULL;
			if (rc == -ETIMEDOUT)
				break;
			continue;
		}
		left = remaining(deadline);
		rc = mu_session_connect(g.addr, g.port, g.matchkey, session_timeout, sec,
		                        left < 0 || left > HANDSHAKE_TRY_MS ? HANDSHAKE_TRY_MS : left,
		                        out);
		if (rc == 0 || rc == MU_EAUTH || rc == MU_ETLS)
			break; /* another device of the key would refuse us the same way */
		/* like TVM: the grant is lost, ask again on the same connection */
		mu__log(MU_LOG_INFO, "session", "device %s:%d (%s) refused us: %s; requesting again",
		        g.addr, g.port, g.matchkey, mu_strerror(rc));
	}
	mu_tracker_client_close(tc);
	return rc;
}
