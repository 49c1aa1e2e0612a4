/* SPDX-License-Identifier: MIT */
/*
 * `muster server`: the device side. Registers with a tracker under a key,
 * stays registered forever, and serves sessions. Until the stage runner
 * exists, the built-in session is an echo: every byte the client sends
 * comes back, which is what tests and `muster request` use to see that a
 * session really reached this device.
 */
#include <stdio.h>
#include <string.h>

#include "muster/server.h"
#include "cli/cli_int.h"
#include "core/log_int.h"
#include "core/net_int.h"

static void echo_session(mu_session_t *s, void *ud)
{
	char buf[65536];
	size_t n, total = 0;

	(void)ud;
	/* -1: no timeout of our own; the client's -timeout or a server stop
	 * shuts the socket down under us */
	while (mu_session_recv(s, buf, sizeof(buf), &n, -1) == 0 && n > 0) {
		if (mu_session_send(s, buf, n, 30000) != 0)
			break;
		total += n;
	}
	if (total > 0)
		mu__log(MU_LOG_INFO, "server", "Echoed %zu bytes to %s", total,
		        mu_session_peer(s));
}

static void stop_server(void *ud)
{
	mu_server_stop(ud);
}

int cmd_server(int argc, char **argv)
{
	mu_server_opts_t o;
	mu_server_t *s;
	const char *tracker = NULL;
	char thost[256];
	int npos, rc;
	cli_opt_t opts[] = {
		{"host", OPT_STR, &o.host, "HOST", "address to listen on (default 0.0.0.0)"},
		{"port", OPT_INT, &o.port, "PORT", "first port to try (default 9090; 0 = any)"},
		{"port-end", OPT_INT, &o.port_end, "PORT", "end of the port search, exclusive (default 9199)"},
		{"tracker", OPT_STR, &tracker, "HOST:PORT", "tracker to register with (split at the last colon; [v6]:port works)"},
		{"key", OPT_STR, &o.key, "KEY", "device key clients request, e.g. rasp (required with --tracker)"},
		{"custom-addr", OPT_STR, &o.custom_addr, "ADDR", "address the tracker gives clients instead of the one it sees"},
		{"silent", OPT_FLAG, &o.silent, NULL, "log only warnings and errors"},
		{"handshake-timeout", OPT_DOUBLE, &o.handshake_timeout, "SECONDS", "close a client that has not finished its handshake (default 10)"},
	};
	cli_cmd_t cmd = {
		"muster server [--tracker HOST:PORT --key KEY] [--host H] [--port P] [--port-end E]",
		"Run on each device. With --tracker it registers KEY there the way TVM's\n"
		"rpc_server does, and keeps it registered whatever happens to the tracker\n"
		"(restarts, outages: it retries forever and registers again). Clients get this\n"
		"device through the tracker (`muster request KEY`, TVM's TrackerSession) and\n"
		"open a session with TVM's handshake. Without --tracker it runs standalone and\n"
		"clients connect directly with the bare key. Sessions here echo what they get.\n"
		"Stop it with Ctrl-C or SIGTERM.",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 0, 0};

	mu_server_opts_init(&o);
	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if (tracker != NULL) {
		if (mu__split_hostport(tracker, thost, sizeof(thost), &o.tracker_port) != 0) {
			fprintf(stderr, "muster server: --tracker %s is not HOST:PORT\n", tracker);
			return 2;
		}
		o.tracker_host = thost;
		if (o.key == NULL || o.key[0] == '\0') {
			fprintf(stderr, "muster server: --tracker needs --key (the device key clients ask for)\n");
			return 2;
		}
	}
	if (o.key == NULL || o.key[0] == '\0')
		o.key = "muster"; /* standalone: the matchkey clients must send */
	o.on_session = echo_session;
	mu_log_set_sink(mu_log_stderr_sink, NULL, MU_LOG_INFO);
	cli_block_signals();
	rc = mu_server_start(&o, &s);
	if (rc != 0) {
		if (rc == MU_EBIND)
			fprintf(stderr, "muster server: cannot bind to any port in [%d, %d)\n",
			        o.port, o.port_end);
		else
			fprintf(stderr, "muster server: cannot start: %s\n", mu_strerror(rc));
		return 1;
	}
	cli_on_signal(stop_server, s);
	mu_server_wait(s); /* returns once a signal has stopped it */
	cli_signal_disarm();
	mu_server_free(s);
	return 0;
}
