/* SPDX-License-Identifier: MIT */
/*
 * `muster tracker`: run a TVM-compatible RPC tracker in the foreground, the
 * drop-in for `python -m tvm.exec.rpc_tracker`.
 */
#include <stdint.h>
#include <stdio.h>

#include "muster/tracker.h"
#include "cli/cli_int.h"
#include "cli/svc_int.h"
#include "core/log_int.h"
#include "core/net_int.h"

static void wait_tracker(void *ud)
{
	mu_tracker_wait(ud);
}

/* The drain of the first SIGINT/SIGTERM, bounded by --drain-timeout. */
static double drain_timeout = 10;

static void drain_tracker(void *ud)
{
	cli_svc_stopping();
	mu_tracker_drain(ud, drain_timeout);
}

/* A second signal: close everything now. */
static void stop_tracker(void *ud)
{
	mu__log(MU_LOG_WARN, "tracker", "second signal: stopping without waiting for the drain");
	mu_tracker_stop(ud);
}

/* Start the tracker o describes and serve until a signal: the exit status. */
static int run_tracker(mu_tracker_opts_t *o, cli_svc_t *sv)
{
	mu_tracker_t *t;
	int rc;

	mu__raise_nofile_limit();
	/* Signals are blocked from here on, so the tracker thread inherits
	 * that and only the signal thread sees SIGINT/SIGTERM. */
	cli_block_signals();
	o->metrics = sv->reg;
	if ((rc = cli_svc_listen(sv, "muster tracker", NULL)) != 0) {
		cli_svc_stop(sv);
		return rc;
	}
	rc = mu_tracker_start(o, &t);
	if (rc != 0)
		cli_svc_stop(sv);
	if (rc == MU_EBIND) {
		fprintf(stderr, "muster tracker: cannot bind to any port in [%d, %d): all in use\n",
		        o->port, o->port_end);
		return 1;
	}
	if (rc != 0) {
		fprintf(stderr, "muster tracker: cannot listen on %s port %d: %s\n",
		        o->host, o->port, mu_strerror(rc));
		return 1;
	}
	if (o->allow == NULL)
		cli_warn_open("tracker", o->host, mu_tracker_port(t), "TVM's tracker protocol has no "
		              "authentication, so anyone who can reach it registers devices under any "
		              "key and is handed the devices registered here", "limit who connects with "
		              "--allow CIDR,... or a firewall, or bind --host 127.0.0.1 and tunnel");
	cli_on_signal(drain_tracker, t);
	cli_on_signal_again(stop_tracker, t);
	cli_svc_ready(sv, "tracking devices");
	/* until a signal, or a STOP with the key */
	cli_svc_wait(sv, wait_tracker, t);
	cli_signal_disarm();
	mu_tracker_free(t);
	cli_svc_stop(sv);
	return 0;
}

int cmd_tracker(int argc, char **argv)
{
	mu_tracker_opts_t o;
	int no_reuse = 0, npos, rc, max_keys, max_per_conn, max_keys_per_conn;
	const char *max_frame = NULL;
	uint64_t frame = 0;
	cli_budget_t cb;
	cli_svc_t sv;
	cli_opt_t opts[] = {
		{"host", OPT_STR, &o.host, "HOST", "address to bind (default 0.0.0.0; :: for IPv4 and IPv6)"},
		{"port", OPT_INT, &o.port, "PORT", "first port to try (default 9190; 0 = any free port)"},
		{"port-end", OPT_INT, &o.port_end, "PORT", "end of the port search, exclusive (default 9199)"},
		{"quiet", OPT_FLAG, &o.silent, NULL, "log only warnings and errors (TVM's --silent works too)"},
		{"allow", OPT_STR, &o.allow, "CIDR,...", "accept connections only from these addresses and prefixes (e.g. 10.0.0.0/8,::1); others are closed at once, logged and counted (default: everyone). TVM's and torch's protocols have no authentication: see docs/security.md"},
		{"no-reuse-addr", OPT_FLAG, &no_reuse, NULL, "do not set SO_REUSEADDR before binding"},
		{"io-timeout", OPT_DOUBLE, &o.timeout, "SECONDS", "disconnect a peer that takes longer to finish its handshake, or a frame it started (default 60; 0 = never)"},
		{"max-frame", OPT_STR, &max_frame, "SIZE", "largest message accepted (default 1M, as TVM)"},
		{"max-keys", OPT_INT, &max_keys, "N", "device keys (queues) in all; empty ones make room for new ones (default 10000)"},
		{"max-per-conn", OPT_INT, &max_per_conn, "N", "free devices one connection may offer, and requests it may have waiting (default 1024 each)"},
		{"max-keys-per-conn", OPT_INT, &max_keys_per_conn, "N", "device keys one connection may offer or request at once (default 64)"},
		CLI_BUDGET_OPTS(cb),
		{"drain-timeout", OPT_DOUBLE, &drain_timeout, "SECONDS", "on SIGTERM or Ctrl-C, stop accepting and give the replies already queued this long to reach their peers, then close (default 10; a second signal stops at once)"},
		CLI_SVC_OPTS(sv),
		CLI_ALIAS("silent", "quiet"),      /* TVM's rpc_tracker's spelling */
		CLI_ALIAS("timeout", "io-timeout"),
	};
	cli_cmd_t cmd = {
		"muster tracker [--host H] [--port P] [--port-end E] [--quiet] [--no-reuse-addr] [--io-timeout S]",
		"Run a device tracker that speaks Apache TVM's RPC tracker protocol, in place of\n"
		"`python -m tvm.exec.rpc_tracker`. TVM's RPC servers register with it, TVM's\n"
		"clients (AutoTVM, MetaSchedule, TrackerSession.request) request devices from it,\n"
		"and `muster query` or `python -m tvm.exec.query_rpc_tracker` show its state.\n"
		"It binds the first free port in [port, port-end) and logs to stderr.\n"
		"A PUT or REQUEST past a --max-* limit is answered with TVM's FAIL code (-1),\n"
		"changes nothing, and is logged; the connection stays open.\n"
		"Ctrl-C or SIGTERM stops it after a drain: see --drain-timeout.",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 0, 0};

	mu_tracker_opts_init(&o);
	cli_budget_init(&cb);
	cli_svc_init(&sv);
	max_keys = (int)o.max_keys;
	max_per_conn = (int)o.max_per_conn;
	max_keys_per_conn = (int)o.max_keys_per_conn;
	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if (max_frame != NULL && (cli_parse_size(max_frame, &frame) != 0 || frame == 0 ||
	                          frame > UINT32_MAX / 2)) {
		fprintf(stderr, "muster tracker: --max-frame %s is not a size from 1 to 2G "
		        "(e.g. 1M)\n", max_frame);
		return 2;
	}
	if (o.timeout < 0 || drain_timeout < 0 || max_keys <= 0 ||
	    max_per_conn <= 0 || max_keys_per_conn <= 0) {
		fprintf(stderr, "muster tracker: --max-keys, --max-per-conn and --max-keys-per-conn "
		        "must be > 0 and --io-timeout, --drain-timeout >= 0\n");
		return 2;
	}
	rc = cli_budget_apply("muster tracker", &cb, &o.budget);
	if (rc != 0 || (rc = cli_allow_check("muster tracker", o.allow)) != 0)
		return rc;
	if (max_frame != NULL)
		o.max_frame = (unsigned)frame;
	o.max_keys = (unsigned)max_keys;
	o.max_per_conn = (unsigned)max_per_conn;
	o.max_keys_per_conn = (unsigned)max_keys_per_conn;
	o.reuse_addr = !no_reuse;
	if ((rc = cli_svc_start(&sv, "muster tracker", MU_LOG_INFO)) != 0)
		return rc;
	return run_tracker(&o, &sv);
}

