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

#include <cjson/cJSON.h>

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

/* What the command line asks for, parsed and then checked. */
typedef struct {
	mu_server_opts_t o;
	mu_device_opts_t dopt;
	const char *tracker, *mem, *models, *cache_dir;
	char thost[256];
	int threads, md_port;
	cli_budget_t cb;
	cli_secure_t cs;
	cli_svc_t sv;
	const char *dirs[64];
	char *list;                 /* the --model list, split into dirs */
} server_args_t;

/* The options past parsing: 0, or the exit status after saying why. */
static int settle(server_args_t *a)
{
	mu_device_opts_t *d = &a->dopt;
	int rc;

	if ((rc = cli_budget_apply("muster server", &a->cb, &a->o.budget)) != 0)
		return rc;
	if (a->tracker != NULL) {
		if (mu__split_hostport(a->tracker, a->thost, sizeof(a->thost), &a->o.tracker_port) != 0) {
			fprintf(stderr, "muster server: --tracker %s is not HOST:PORT\n", a->tracker);
			return 2;
		}
		a->o.tracker_host = a->thost;
		if (a->o.key == NULL || a->o.key[0] == '\0') {
			fprintf(stderr, "muster server: --tracker needs --key (the device key clients ask for)\n");
			return 2;
		}
	}
	if (a->o.key == NULL)
		a->o.key = ""; /* standalone, as TVM: clients send "client:" */
	mu_device_opts_init(d);
	d->cache_dir = a->cache_dir;
	d->key = a->o.key[0] != '\0' ? a->o.key : "muster";
	d->threads = a->threads;
	d->md_port = a->md_port;
	d->md_host = a->o.host;
	if (a->mem != NULL && (cli_parse_size(a->mem, &d->mem_budget) != 0 || d->mem_budget == 0)) {
		fprintf(stderr, "muster server: --mem %s is not a size (try 512M or 2G)\n", a->mem);
		return 2;
	}
	if (!(a->o.session_timeout >= 0 && a->o.session_timeout <= 2000000) ||
	    !(a->o.handshake_timeout >= 0) ||
	    !(a->o.queue_timeout >= 0 && a->o.queue_timeout <= 2000000)) {
		fprintf(stderr, "muster server: --session-timeout and --queue-timeout must be 0 to "
		        "2000000 seconds and --handshake-timeout >= 0\n");
		return 2;
	}
	if (a->threads < 1 || a->md_port < 0 || a->md_port > 65535) {
		fprintf(stderr, "muster server: --threads must be >= 1 and --md-port a port\n");
		return 2;
	}
	return 0;
}

/* --model A,B,...: the copies this device holds. */
static void split_models(server_args_t *a)
{
	char *save = NULL;

	if (a->models == NULL)
		return;
	a->list = strdup(a->models);
	for (char *t = a->list ? strtok_r(a->list, ",", &save) : NULL;
	     t != NULL && a->dopt.nmodels < 64; t = strtok_r(NULL, ",", &save))
		a->dirs[a->dopt.nmodels++] = t;
	a->dopt.models = a->dirs;
}

/* What a device that listens beyond loopback exposes: its sessions
 * (unless a secret or client-checking TLS guards them) and, always, its
 * metadata listener, whose protocol (NIXL's P2P) has no authentication. */
static void warn_open(const server_args_t *a, mu_device_t *dev, mu_server_t *s)
{
	cJSON *caps = cJSON_Parse(mu_device_describe(dev));
	const cJSON *md = cJSON_GetObjectItemCaseSensitive(caps, "md_address");
	char host[256];
	int port = 0;

	if (cli_secure_open(&a->cs))
		cli_warn_open("server", a->o.host, mu_server_port(s), "it has neither --secret-file "
		              "nor --tls-ca, so anyone who can reach it opens sessions on it: takes "
		              "its memory for a stage, streams it weights, runs forwards",
		              "give it --secret-file (and TLS) and the same to the coordinators, or "
		              "let only their addresses through a firewall");
	if (cJSON_IsString(md) &&
	    mu__split_hostport(md->valuestring, host, sizeof(host), &port) == 0)
		cli_warn_open("server", a->o.host, port, "the metadata (md) listener has no "
		              "authentication (NIXL's protocol has none), so anyone who can reach it "
		              "reads this device's memory, threads and the paths and digests of the "
		              "models it holds, and can push metadata to it", a->md_port == 0
		              ? "pin its port with --md-port and let only the coordinators' addresses "
		                "through a firewall"
		              : "let only the coordinators' addresses through a firewall");
	cJSON_Delete(caps);
}

/* Make the device, register and serve until a signal: the exit status. */
static int serve(server_args_t *a)
{
	char err[1024] = "";
	mu_device_t *dev = NULL;
	mu_secure_t *sec = NULL;
	mu_server_t *s;
	int rc;

	a->dopt.metrics = a->sv.reg;
	a->o.metrics = a->sv.reg;
	if ((rc = mu_device_new(&a->dopt, &dev, err, sizeof(err))) != 0) {
		fprintf(stderr, "muster server: %s\n", err[0] != '\0' ? err : mu_strerror(rc));
		return 1;
	}
	if ((rc = cli_secure_apply("muster server", &a->cs, &sec)) != 0) {
		mu_device_free(dev);
		return rc;
	}
	a->o.sec = sec;
	cli_block_signals();
	if ((rc = cli_svc_listen(&a->sv, "muster server", NULL)) == 0 &&
	    (rc = mu_device_start(dev, &a->o, &s, err, sizeof(err))) != 0) {
		fprintf(stderr, "muster server: %s\n", err[0] != '\0' ? err : mu_strerror(rc));
		rc = 1;
	}
	if (rc == 0) {
		warn_open(a, dev, s);
		cli_on_signal(stop_server, s);
		cli_svc_ready(&a->sv, "registered, serving sessions");
		cli_svc_wait(&a->sv, wait_server, s); /* returns once a signal has stopped it */
		cli_signal_disarm();
		mu_server_free(s);
	}
	mu_device_free(dev);
	mu_secure_free(sec);
	return rc;
}

int cmd_server(int argc, char **argv)
{
	server_args_t a = {.threads = 1};
	mu_server_opts_t *o = &a.o;
	int npos, rc;
	cli_opt_t opts[] = {
		{"host", OPT_STR, &o->host, "HOST", "address to listen on (default 0.0.0.0)"},
		{"port", OPT_INT, &o->port, "PORT", "first port to try (default 9090; 0 = any)"},
		{"port-end", OPT_INT, &o->port_end, "PORT", "end of the port search, exclusive (default 9199)"},
		{"tracker", OPT_STR, &a.tracker, "HOST:PORT", "tracker to register with (split at the last colon; [v6]:port works)"},
		{"key", OPT_STR, &o->key, "KEY", "device key clients request, e.g. rasp (required with --tracker; standalone the default is \"\", as TVM's)"},
		{"custom-addr", OPT_STR, &o->custom_addr, "ADDR", "address the tracker gives clients instead of the one it sees"},
		{"quiet", OPT_FLAG, &o->silent, NULL, "log only warnings and errors (TVM's --silent works too)"},
		{"handshake-timeout", OPT_DOUBLE, &o->handshake_timeout, "SECONDS", "close a client that has not finished its handshake (default 10)"},
		{"queue-timeout", OPT_DOUBLE, &o->queue_timeout, "SECONDS", "standalone: a client that arrives while another's session runs waits this long in line, then is told the device is busy (default 10; 0: as long as the session runs)"},
		{"session-timeout", OPT_DOUBLE, &o->session_timeout, "SECONDS", "end a session whose client sends nothing, or reads nothing, for this long (default 300; 0: never)"},
		{"mem", OPT_STR, &a.mem, "SIZE", "memory for a stage's weights, e.g. 2G (default: what the machine has available now)"},
		{"model", OPT_STR, &a.models, "PATH[,PATH...]", "models this device holds a copy of (stages load from them instead of being streamed): graph model directories, or LLM checkpoints (GGUF, HF directory, llama2.c)"},
		{"cache-dir", OPT_STR, &a.cache_dir, "DIR", "keep streamed LLM weights here under their SHA-256, so a later run sends only what is missing (default: none, streamed each time)"},
		{"threads", OPT_INT, &a.threads, "N", "threads per forward (default 1: outputs bit-identical to a 1-thread run)"},
		{"md-port", OPT_INT, &a.md_port, "PORT", "port of the metadata (md) agent that publishes this device (default 0: any)"},
		CLI_BUDGET_OPTS(a.cb),
		CLI_SECURE_OPTS(a.cs),
		CLI_SVC_OPTS(a.sv),
		CLI_ALIAS("silent", "quiet"), /* TVM's rpc_server's spelling */
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

	mu_server_opts_init(o);
	cli_budget_init(&a.cb);
	cli_secure_init(&a.cs);
	cli_svc_init(&a.sv);
	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if ((rc = settle(&a)) != 0)
		return rc;
	split_models(&a);
	if ((rc = cli_svc_start(&a.sv, "muster server", o->silent ? MU_LOG_WARN : MU_LOG_INFO)) != 0) {
		free(a.list);
		return rc;
	}
	rc = serve(&a);
	free(a.list);
	cli_svc_stop(&a.sv);
	return rc;
}
