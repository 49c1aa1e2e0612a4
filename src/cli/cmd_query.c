/* SPDX-License-Identifier: MIT */
/*
 * `muster query`: print a tracker's state exactly as
 * `python -m tvm.exec.query_rpc_tracker` does, or as JSON.
 */
#include <stdio.h>
#include <stdlib.h>

#include "muster/tracker.h"
#include "cli/cli_int.h"
#include "core/sniff_int.h"

int cmd_query(int argc, char **argv)
{
	const char *host = NULL;
	int port = 0, json = 0, npos, rc;
	double timeout = 10;
	mu_tracker_client_t *c;
	char *summary = NULL, *text = NULL, *end, hint[512] = "";
	const char *env;
	cli_opt_t opts[] = {
		{"host", OPT_STR, &host, "HOST", "tracker host (default $TVM_TRACKER_HOST, else 127.0.0.1)"},
		{"port", OPT_INT, &port, "PORT", "tracker port (default $TVM_TRACKER_PORT, else 9190)"},
		{"json", OPT_FLAG, &json, NULL, "print the summary JSON instead of the tables"},
		{"timeout", OPT_DOUBLE, &timeout, "SECONDS", "give up after this long (default 10)"},
	};
	cli_cmd_t cmd = {
		"muster query [--host H] [--port P] [--json]",
		"Show the servers registered with a TVM-protocol tracker and its queues: how\n"
		"many devices of each key exist, how many are free, how many requests wait.\n"
		"The text is byte for byte what `python -m tvm.exec.query_rpc_tracker` prints.",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 0, 0};

	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if (host == NULL || host[0] == '\0')
		host = getenv("TVM_TRACKER_HOST");
	if (host == NULL || host[0] == '\0')
		host = "127.0.0.1";
	if (port == 0 && (env = getenv("TVM_TRACKER_PORT")) != NULL) {
		long p = strtol(env, &end, 10);

		if (end == env || *end != '\0' || p <= 0 || p > 65535) {
			fprintf(stderr, "muster query: TVM_TRACKER_PORT=%s is not a port\n", env);
			return 2;
		}
		port = (int)p;
	}
	if (port == 0)
		port = 9190;
	if (port < 0 || port > 65535) {
		fprintf(stderr, "muster query: --port %d is not a port\n", port);
		return 2;
	}

	rc = mu_tracker_client_connect(host, port, (int)(timeout * 1000), &c);
	if (rc != 0) {
		cli_peer_hint(host, port, rc, MU__PROTO_TRACKER, hint, sizeof(hint));
		fprintf(stderr, "muster query: cannot reach a tracker at %s:%d: %s%s\n",
		        host, port, mu_strerror(rc), hint);
		return 1;
	}
	rc = mu_tracker_client_summary(c, (int)(timeout * 1000), &summary);
	mu_tracker_client_close(c);
	if (rc == 0 && !json)
		rc = mu_tracker_summary_text(summary, &text);
	if (rc != 0) {
		cli_peer_hint(host, port, rc, MU__PROTO_TRACKER, hint, sizeof(hint));
		fprintf(stderr, "muster query: bad summary from %s:%d: %s%s\n", host,
		        port, mu_strerror(rc), hint);
		mu_free(summary);
		return 1;
	}
	if (json)
		printf("%s\n", summary);
	else
		printf("Tracker address %s:%d\n\n%s\n", host, port, text);
	mu_free(summary);
	mu_free(text);
	return 0;
}
