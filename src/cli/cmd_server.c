/* SPDX-License-Identifier: MIT */
/*
 * `muster server`: the device side. Registers with a tracker under a key,
 * stays registered forever, publishes what it offers (memory budget,
 * threads, models held) as md metadata, and serves sessions: a
 * coordinator's session gets a stage of a model to load and serve; any
 * other session is echoed, which is what `muster request` and the tests
 * use to see that a session reached this device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "muster/pipeline.h"
#include "muster/server.h"
#include "cli/cli_int.h"
#include "cli/svc_int.h"
#include "core/log_int.h"
#include "core/net_int.h"

static void wait_server(void *ud)
{
	mu_server_wait(ud);
}

static void stop_server(void *ud)
{
	mu_server_stop(ud);
}

int cmd_server(int argc, char **argv)
{
	mu_server_opts_t o;
	mu_server_t *s;
	const char *tracker = NULL, *mem = NULL, *models = NULL, *cache_dir = NULL;
	char thost[256], err[1024] = "";
	int npos, rc, threads = 1, md_port = 0;
	mu_device_opts_t dopt;
	mu_device_t *dev = NULL;
	cli_budget_t cb;
	cli_secure_t cs;
	mu_secure_t *sec = NULL;
	const char *dirs[64];
	char *list = NULL;
	cli_svc_t sv;
	cli_opt_t opts[] = {
		{"host", OPT_STR, &o.host, "HOST", "address to listen on (default 0.0.0.0)"},
		{"port", OPT_INT, &o.port, "PORT", "first port to try (default 9090; 0 = any)"},
		{"port-end", OPT_INT, &o.port_end, "PORT", "end of the port search, exclusive (default 9199)"},
		{"tracker", OPT_STR, &tracker, "HOST:PORT", "tracker to register with (split at the last colon; [v6]:port works)"},
		{"key", OPT_STR, &o.key, "KEY", "device key clients request, e.g. rasp (required with --tracker; standalone the default is \"\", as TVM's)"},
		{"custom-addr", OPT_STR, &o.custom_addr, "ADDR", "address the tracker gives clients instead of the one it sees"},
		{"silent", OPT_FLAG, &o.silent, NULL, "log only warnings and errors"},
		{"handshake-timeout", OPT_DOUBLE, &o.handshake_timeout, "SECONDS", "close a client that has not finished its handshake (default 10)"},
		{"session-timeout", OPT_DOUBLE, &o.session_timeout, "SECONDS", "end a session whose client sends nothing, or reads nothing, for this long (default 300; 0: never)"},
		{"mem", OPT_STR, &mem, "SIZE", "memory for a stage's weights, e.g. 2G (default: what the machine has available now)"},
		{"model", OPT_STR, &models, "PATH[,PATH...]", "models this device holds a copy of (stages load from them instead of being streamed): graph model directories, or LLM checkpoints (GGUF, HF directory, llama2.c)"},
		{"cache-dir", OPT_STR, &cache_dir, "DIR", "keep streamed LLM weights here under their SHA-256, so a later run sends only what is missing (default: none, streamed each time)"},
		{"threads", OPT_INT, &threads, "N", "threads per forward (default 1: outputs bit-identical to a 1-thread run)"},
		{"md-port", OPT_INT, &md_port, "PORT", "port of the metadata (md) agent that publishes this device (default 0: any)"},
		CLI_BUDGET_OPTS(cb),
		CLI_SECURE_OPTS(cs),
		CLI_SVC_OPTS(sv),
	};
	cli_cmd_t cmd = {
		"muster server [--tracker HOST:PORT --key KEY] [--host H] [--port P] [--port-end E]",
		"Run on each device. With --tracker it registers KEY there the way TVM's\n"
		"rpc_server does, and keeps it registered whatever happens to the tracker\n"
		"(restarts, outages: it retries forever and registers again). Clients get this\n"
		"device through the tracker (`muster request KEY`, TVM's TrackerSession) and\n"
		"open a session with TVM's handshake. Without --tracker it runs standalone and\n"
		"clients connect directly with the bare key (TVM's rpc.connect(host, port)\n"
		"sends the default, the empty key).\n"
		"\n"
		"A coordinator (`muster run --tracker`) that gets this device assigns it one\n"
		"stage of a model, within --mem: loaded from a copy given with --model, or\n"
		"streamed by the coordinator. Other sessions are echoed (for diagnostics).\n"
		"Stop it with Ctrl-C or SIGTERM.",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 0, 0};

	mu_server_opts_init(&o);
	cli_budget_init(&cb);
	cli_secure_init(&cs);
	cli_svc_init(&sv);
	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if ((rc = cli_budget_apply("muster server", &cb, &o.budget)) != 0)
		return rc;
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
	if (o.key == NULL)
		o.key = ""; /* standalone, as TVM: clients send "client:" */
	mu_device_opts_init(&dopt);
	dopt.cache_dir = cache_dir;
	dopt.key = o.key[0] != '\0' ? o.key : "muster";
	dopt.threads = threads;
	dopt.md_port = md_port;
	dopt.md_host = o.host;
	if (mem != NULL && (cli_parse_size(mem, &dopt.mem_budget) != 0 || dopt.mem_budget == 0)) {
		fprintf(stderr, "muster server: --mem %s is not a size (try 512M or 2G)\n", mem);
		return 2;
	}
	if (!(o.session_timeout >= 0 && o.session_timeout <= 2000000) ||
	    !(o.handshake_timeout >= 0)) {
		fprintf(stderr, "muster server: --session-timeout must be 0 to 2000000 seconds "
		        "and --handshake-timeout >= 0\n");
		return 2;
	}
	if (threads < 1 || md_port < 0 || md_port > 65535) {
		fprintf(stderr, "muster server: --threads must be >= 1 and --md-port a port\n");
		return 2;
	}
	if (models != NULL) {
		char *save = NULL;

		list = strdup(models);
		for (char *t = strtok_r(list, ",", &save); t != NULL && dopt.nmodels < 64;
		     t = strtok_r(NULL, ",", &save))
			dirs[dopt.nmodels++] = t;
		dopt.models = dirs;
	}
	if ((rc = cli_svc_start(&sv, "muster server", o.silent ? MU_LOG_WARN : MU_LOG_INFO)) != 0) {
		free(list);
		return rc;
	}
	dopt.metrics = sv.reg;
	o.metrics = sv.reg;
	rc = mu_device_new(&dopt, &dev, err, sizeof(err));
	free(list);
	if (rc != 0) {
		fprintf(stderr, "muster server: %s\n", err[0] != '\0' ? err : mu_strerror(rc));
		cli_svc_stop(&sv);
		return 1;
	}
	if ((rc = cli_secure_apply("muster server", &cs, &sec)) != 0) {
		mu_device_free(dev);
		cli_svc_stop(&sv);
		return rc;
	}
	o.sec = sec;
	cli_block_signals();
	if ((rc = cli_svc_listen(&sv, "muster server", NULL)) != 0) {
		mu_device_free(dev);
		mu_secure_free(sec);
		cli_svc_stop(&sv);
		return rc;
	}
	rc = mu_device_start(dev, &o, &s, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "muster server: %s\n", err[0] != '\0' ? err : mu_strerror(rc));
		mu_device_free(dev);
		mu_secure_free(sec);
		cli_svc_stop(&sv);
		return 1;
	}
	cli_on_signal(stop_server, s);
	cli_svc_ready(&sv, "registered, serving sessions");
	cli_svc_wait(&sv, wait_server, s); /* returns once a signal has stopped it */
	cli_signal_disarm();
	mu_server_free(s);
	mu_device_free(dev);
	mu_secure_free(sec);
	cli_svc_stop(&sv);
	return 0;
}
