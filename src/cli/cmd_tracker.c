/* SPDX-License-Identifier: MIT */
/*
 * `muster tracker`: run a TVM-compatible RPC tracker in the foreground, the
 * drop-in for `python -m tvm.exec.rpc_tracker`.
 */
#include <stdio.h>

#include "muster/tracker.h"
#include "cli/cli_int.h"
#include "core/net_int.h"

static void stop_tracker(void *ud)
{
	mu_tracker_stop(ud);
}

int cmd_tracker(int argc, char **argv)
{
	mu_tracker_opts_t o;
	mu_tracker_t *t;
	int no_reuse = 0, npos, rc, max_frame;
	cli_budget_t cb;
	cli_opt_t opts[] = {
		{"host", OPT_STR, &o.host, "HOST", "address to bind (default 0.0.0.0; :: for IPv4 and IPv6)"},
		{"port", OPT_INT, &o.port, "PORT", "first port to try (default 9190; 0 = any free port)"},
		{"port-end", OPT_INT, &o.port_end, "PORT", "end of the port search, exclusive (default 9199)"},
		{"silent", OPT_FLAG, &o.silent, NULL, "log only warnings and errors"},
		{"no-reuse-addr", OPT_FLAG, &no_reuse, NULL, "do not set SO_REUSEADDR before binding"},
		{"timeout", OPT_DOUBLE, &o.timeout, "SECONDS", "disconnect a peer that takes longer to finish its handshake, or a frame it started (default 60; 0 = never)"},
		{"max-frame", OPT_INT, &max_frame, "BYTES", "largest message accepted (default 1048576, as TVM)"},
		CLI_BUDGET_OPTS(cb),
	};
	cli_cmd_t cmd = {
		"muster tracker [--host H] [--port P] [--port-end E] [--silent] [--no-reuse-addr] [--timeout S]",
		"Run a device tracker that speaks Apache TVM's RPC tracker protocol, in place of\n"
		"`python -m tvm.exec.rpc_tracker`. TVM's RPC servers register with it, TVM's\n"
		"clients (AutoTVM, MetaSchedule, TrackerSession.request) request devices from it,\n"
		"and `muster query` or `python -m tvm.exec.query_rpc_tracker` show its state.\n"
		"It binds the first free port in [port, port-end) and logs to stderr.\n"
		"Stop it with Ctrl-C or SIGTERM.",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 0, 0};

	mu_tracker_opts_init(&o);
	max_frame = (int)o.max_frame;
	cli_budget_init(&cb);
	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if (max_frame <= 0 || o.timeout < 0) {
		fprintf(stderr, "muster tracker: --max-frame must be > 0 and --timeout >= 0\n");
		return 2;
	}
	rc = cli_budget_apply("muster tracker", &cb, &o.budget);
	if (rc != 0)
		return rc;
	o.max_frame = (unsigned)max_frame;
	o.reuse_addr = !no_reuse;
	mu_log_set_sink(mu_log_stderr_sink, NULL, MU_LOG_INFO);
	mu__raise_nofile_limit();
	/* Signals are blocked from here on, so the tracker thread inherits
	 * that and only the signal thread sees SIGINT/SIGTERM. */
	cli_block_signals();
	rc = mu_tracker_start(&o, &t);
	if (rc == MU_EBIND) {
		fprintf(stderr, "muster tracker: cannot bind to any port in [%d, %d): all in use\n",
		        o.port, o.port_end);
		return 1;
	}
	if (rc != 0) {
		fprintf(stderr, "muster tracker: cannot listen on %s port %d: %s\n",
		        o.host, o.port, mu_strerror(rc));
		return 1;
	}
	cli_on_signal(stop_tracker, t);
	mu_tracker_wait(t); /* until a signal, or a STOP with the key */
	cli_signal_disarm();
	mu_tracker_free(t);
	return 0;
}
