/* SPDX-License-Identifier: MIT */
/*
 * What both forms of `muster stage` (a graph model's stage, cmd_pipe.c, and
 * a decoder LLM's layers, cmd_stage_llm.c) share: the server's options
 * (address, timeouts, limits, budgets) and serving a loaded stage until a
 * signal or --requests ends it.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli_int.h"
#include "cli/stage_serve_int.h"
#include "core/log_int.h"

void cli_stage_args_init(cli_stage_args_t *a, int io_timeout)
{
	memset(a, 0, sizeof(*a));
	mu_stage_server_opts_init(&a->o);
	cli_budget_init(&a->cb);
	cli_secure_init(&a->cs);
	cli_svc_init(&a->sv);
	a->io_timeout = io_timeout;
	a->silent_timeout = 30;
	a->idle_timeout = 300;
	a->body_timeout = 120;
	a->max_conns = 64;
	a->max_frame = "1G";
}

int cli_stage_args_opts(cli_stage_args_t *a, cli_opt_t *out)
{
	char *help = a->io_help;
	cli_opt_t v[] = {
		{"host", OPT_STR, &a->o.host, "HOST", "address to listen on (default 127.0.0.1; 0.0.0.0 for all)"},
		{"port", OPT_INT, &a->o.port, "PORT", "port (default 0: any free port, printed when ready)"},
		{"requests", OPT_INT, &a->requests, "N", "exit after serving N forwards (default 0: serve until stopped)"},
		{"io-timeout", OPT_INT, &a->io_timeout, "SECONDS", help},
		{"silent-timeout", OPT_INT, &a->silent_timeout, "SECONDS", "close a connection that sends nothing this long after connecting (default 30; 0: never)"},
		{"idle-timeout", OPT_INT, &a->idle_timeout, "SECONDS", "close a connection idle this long between messages; at --max-connections the longest idle makes room for a newcomer (default 300; 0: never)"},
		{"body-timeout", OPT_INT, &a->body_timeout, "SECONDS", "close a peer whose message has not arrived whole this long after its first byte, however it trickles (default 120; 0: never)"},
		{"max-connections", OPT_INT, &a->max_conns, "N", "serve at most N connections; past that a newcomer displaces the oldest that never sent a whole message, or is refused (default 64)"},
		{"max-frame", OPT_STR, &a->max_frame, "SIZE", "largest tensor data accepted in one message (default 1G)"},
		CLI_BUDGET_OPTS(a->cb),
		CLI_SECURE_OPTS(a->cs),
		CLI_SVC_OPTS(a->sv),
		CLI_ALIAS("max-conns", "max-connections"),
		CLI_ALIAS("max-frame-bytes", "max-frame"),
	};

	snprintf(a->io_help, sizeof(a->io_help), "close a peer that stalls mid-message this long "
	         "(default %d)", a->io_timeout);
	_Static_assert(sizeof(v) / sizeof(v[0]) == CLI_STAGE_NOPTS, "CLI_STAGE_NOPTS is stale");
	memcpy(out, v, sizeof(v));
	return CLI_STAGE_NOPTS;
}

int cli_stage_args_apply(cli_stage_args_t *a, const char *cmd)
{
	uint64_t mf;
	int rc = cli_budget_apply(cmd, &a->cb, &a->o.budget);

	if (rc != 0 || (rc = cli_secure_apply(cmd, &a->cs, &a->sec)) != 0)
		return rc;
	a->o.sec = a->sec;
	if (a->requests < 0 || a->io_timeout < 1 || a->silent_timeout < 0 || a->idle_timeout < 0 ||
	    a->body_timeout < 0 || a->idle_timeout > 2000000 || a->body_timeout > 2000000 || a->max_conns < 1 ||
	    cli_parse_size(a->max_frame, &mf) != 0) {
		fprintf(stderr, "%s: --requests >= 0, --io-timeout >= 1, --silent-timeout, --idle-timeout and "
		        "--body-timeout >= 0, "
		        "--max-connections >= 1 and --max-frame a size like 1G (see --help)\n", cmd);
		return 2;
	}
	a->o.requests = (unsigned long)a->requests;
	a->o.io_timeout_ms = a->io_timeout * 1000;
	a->o.silent_timeout_ms = a->silent_timeout * 1000;
	a->o.idle_timeout_ms = a->idle_timeout * 1000;
	a->o.body_timeout_ms = a->body_timeout * 1000;
	a->o.max_conns = a->max_conns;
	a->o.max_frame_bytes = mf;
	return cli_svc_start(&a->sv, cmd, MU_LOG_INFO);
}

static void wait_stage(void *srv)
{
	mu_stage_server_wait(srv);
}

static void stop_stage(void *srv)
{
	cli_svc_stopping();
	mu_stage_server_stop(srv);
}

int cli_stage_serve(mu_stage_t *s, cli_stage_args_t *a, int index, int of,
                    void (*announce)(mu_stage_t *s, int index, int of))
{
	mu_stage_server_t *srv;
	int rc;

	snprintf(a->name, sizeof(a->name), "stage %d/%d", index, of);
	a->o.name = a->name;
	a->o.metrics = a->sv.reg;
	rc = cli_svc_listen(&a->sv, "muster stage", NULL);
	if (rc != 0) {
		cli_svc_stop(&a->sv);
		mu_stage_free(s);
		mu_secure_free(a->sec);
		return rc;
	}
	rc = mu_stage_server_start(s, &a->o, &srv);
	if (rc != 0) {
		cli_svc_stop(&a->sv);
		fprintf(stderr, "muster stage: cannot listen on %s port %d: %s\n", a->o.host, a->o.port,
		        rc == MU_EBIND ? "address in use" : mu_strerror(rc));
		mu_stage_free(s);
		mu_secure_free(a->sec);
		return 1;
	}
	announce(s, index, of);
	if (cli_secure_open(&a->cs))
		cli_warn_open("stage", a->o.host, mu_stage_server_port(srv), "it has neither "
		              "--secret-file nor --tls-ca, so anyone who can reach it runs forwards "
		              "on it, reads what they compute and holds its connections and sequences", "give it --secret-file (and TLS) and the "
		              "same to its coordinators, or bind --host 127.0.0.1");
	printf("muster stage %d/%d: serving on %s:%d\n", index, of, a->o.host,
	       mu_stage_server_port(srv));
	fflush(stdout);
	cli_on_signal(stop_stage, srv);
	cli_svc_ready(&a->sv, "serving the stage");
	cli_svc_wait(&a->sv, wait_stage, srv);
	cli_signal_disarm();
	mu__log(MU_LOG_INFO, "stage", "muster stage %d/%d: served %lu forwards", index, of,
	        mu_stage_server_forwards(srv));
	mu_stage_server_free(srv);
	mu_stage_free(s);
	mu_secure_free(a->sec);
	cli_svc_stop(&a->sv);
	return 0;
}
