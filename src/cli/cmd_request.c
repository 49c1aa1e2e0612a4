/* SPDX-License-Identifier: MIT */
/*
 * `muster request KEY`: get a device from a tracker and open a session on
 * it, as TVM's TrackerSession.request does but with a timeout; then relay
 * stdin to the session and the session to stdout (with `muster server`'s
 * echo session, what you type comes back from the device).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "muster/server.h"
#include "cli/cli_int.h"
#include "core/net_int.h"
#include "core/sniff_int.h"
#include "core/stream_int.h"

/* Copy stdin to the session and the session to stdout; 0 when the device
 * ends the session, 1 after saying what broke. */
static int relay(mu_session_t *s)
{
	mu_stream_t *st = mu_session_stream(s);
	struct pollfd pfd[2] = {{0, POLLIN, 0}, {mu__stream_fd(st), POLLIN, 0}};
	char buf[65536];
	size_t n;
	int in_open = 1, held, rc;

	for (;;) {
		/* bytes the stream holds (TLS) do not show on the socket */
		held = mu__stream_pending(st) > 0;
		if (poll(pfd, 2, held ? 0 : -1) < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "muster request: poll: %s\n", strerror(errno));
			return 1;
		}
		if (in_open && pfd[0].revents != 0) {
			ssize_t r = read(0, buf, sizeof(buf));

			if (r <= 0) { /* stdin done: tell the device, keep reading */
				in_open = 0;
				pfd[0].fd = -1;
				mu_session_shutdown(s);
			} else if ((rc = mu_session_send(s, buf, (size_t)r, 30000)) != 0) {
				fprintf(stderr, "muster request: cannot send to %s: %s\n",
				        mu_session_peer(s), mu_strerror(rc));
				return 1;
			}
		}
		if (held || pfd[1].revents != 0) {
			rc = mu_session_recv(s, buf, sizeof(buf), &n, 0);
			if (rc == -ETIMEDOUT)
				continue; /* TLS records that carried no data */
			if (rc != 0 || n == 0)
				return 0;
			if (fwrite(buf, 1, n, stdout) != n || fflush(stdout) != 0) {
				fprintf(stderr, "muster request: cannot write to stdout: %s\n",
				        strerror(errno));
				return 1;
			}
		}
	}
}

int cmd_request(int argc, char **argv)
{
	const char *tracker = NULL, *env;
	char host[256];
	double priority = 1, timeout = 60, session_timeout = 0;
	int retries = 5, port, npos, rc, no_relay = 0;
	mu_session_t *s;
	cli_secure_t cs;
	mu_secure_t *sec = NULL;
	cli_opt_t opts[] = {
		{"tracker", OPT_STR, &tracker, "HOST:PORT", "tracker (default $TVM_TRACKER_HOST:$TVM_TRACKER_PORT, else 127.0.0.1:9190)"},
		{"priority", OPT_DOUBLE, &priority, "N", "larger is served first (default 1, as TVM)"},
		{"timeout", OPT_DOUBLE, &timeout, "SECONDS", "give up after this long (default 60; TVM waits forever)"},
		{"session-timeout", OPT_DOUBLE, &session_timeout, "SECONDS", "ask the device to end the session after this long"},
		{"retries", OPT_INT, &retries, "N", "requests to try when a device refuses or is unreachable (default 5)"},
		{"no-relay", OPT_FLAG, &no_relay, NULL, "open the session, report it, and close it"},
		CLI_SECURE_OPTS(cs),
	};
	cli_cmd_t cmd = {
		"muster request KEY [--tracker HOST:PORT] [--priority N] [--timeout S]",
		"Ask a tracker for a device of KEY, connect to it and do TVM's session\n"
		"handshake; on a refused matchkey or an unreachable device, ask again. Then\n"
		"copy stdin to the session and the session to stdout until both end.",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 1, 1};

	cli_secure_init(&cs);
	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	env = getenv("TVM_TRACKER_HOST");
	snprintf(host, sizeof(host), "%s", env != NULL && env[0] != '\0' ? env : "127.0.0.1");
	port = 9190;
	if (tracker == NULL && (env = getenv("TVM_TRACKER_PORT")) != NULL && env[0] != '\0') {
		char *end;
		long p = strtol(env, &end, 10);

		if (*end != '\0' || p <= 0 || p > 65535) {
			fprintf(stderr, "muster request: TVM_TRACKER_PORT=%s is not a port\n", env);
			return 2;
		}
		port = (int)p;
	}
	if (tracker != NULL && mu__split_hostport(tracker, host, sizeof(host), &port) != 0) {
		fprintf(stderr, "muster request: --tracker %s is not HOST:PORT\n", tracker);
		return 2;
	}
	if ((rc = cli_secure_apply("muster request", &cs, &sec)) != 0)
		return rc;
	rc = mu_session_request(host, port, argv[0], priority, session_timeout, retries, sec,
	                        timeout < 0 ? -1 : (int)(timeout * 1000), &s);
	if (rc != 0) {
		char hint[512];

		cli_peer_hint(host, port, rc, MU__PROTO_TRACKER, hint, sizeof(hint));
		fprintf(stderr, "muster request: no session for key %s via tracker %s:%d: %s%s\n",
		        argv[0], host, port, mu_strerror(rc), hint);
		mu_secure_free(sec);
		return 1;
	}
	fprintf(stderr, "muster request: session open with %s (%s)\n",
	        mu_session_peer(s), mu_session_server_key(s));
	rc = no_relay ? 0 : relay(s);
	mu_session_close(s);
	mu_secure_free(sec);
	return rc;
}
