/* SPDX-License-Identifier: MIT */
/*
 * What every long-running subcommand (tracker, store, server, stage, serve)
 * shares as a service: where its log lines go and in which format
 * (--log-format, --log-file, reopened on SIGHUP for logrotate), and its
 * Prometheus endpoint (--metrics). Put CLI_SVC_OPTS(sv) in the option
 * table, then cli_svc_start before cli_block_signals and before starting
 * any thread, and cli_svc_stop when the server has stopped.
 */
#ifndef MU_CLI_SVC_INT_H
#define MU_CLI_SVC_INT_H

#include "muster/common.h"
#include "muster/metrics.h"
#include "muster/serve.h"
#include "cli/cli_int.h"

typedef struct {
	const char *log_format; /* --log-format: "text" (default) or "json" */
	const char *log_file;   /* --log-file PATH, or NULL for stderr */
	const char *metrics;    /* --metrics HOST:PORT, or NULL */
	/* With --metrics, from cli_svc_start: the registry to hand the
	 * server (opts.metrics); NULL without. */
	mu_metrics_t *reg;
	mu_metrics_server_t *http;
	char mhost[256];
	int mport;
	int lent;               /* the endpoint is on an API server's loop */
} cli_svc_t;

#define CLI_SVC_NOPTS 3
#define CLI_SVC_OPTS(sv)                                                                      \
	{"log-format", OPT_STR, &(sv).log_format, "text|json",                                 \
	 "log lines as text (\"TIME LEVEL component: message\") or one JSON object per line "  \
	 "(time, level, component, msg) for log shippers (default text)"},                     \
	{"log-file", OPT_STR, &(sv).log_file, "PATH",                                          \
	 "append log lines (and everything else this process writes to stderr) to PATH; "      \
	 "SIGHUP reopens it, for logrotate (default: stderr)"},                               \
	{"metrics", OPT_STR, &(sv).metrics, "HOST:PORT",                                       \
	 "serve Prometheus metrics at http://HOST:PORT/metrics (port 0: any free port, "       \
	 "logged; default: none)"}

void cli_svc_init(cli_svc_t *sv);
/*
 * Install the log sink at level (MU_LOG_WARN for --silent), open the log
 * file and make SIGHUP reopen it; with --metrics, make sv->reg. Starts no
 * thread. cmd names the command in messages ("muster tracker"). 0, or the
 * exit status after saying why on stderr.
 */
int cli_svc_start(cli_svc_t *sv, const char *cmd, mu_log_level_t level);
/*
 * With --metrics: bind the endpoint (on the loop of on, an API server
 * that mu_serve_run runs, or with on NULL on its own, which cli_svc_wait
 * runs) and log "serving metrics on http://HOST:PORT/metrics". Blocks
 * SIGINT/SIGTERM first. 0, or the exit status after saying why.
 */
int cli_svc_listen(cli_svc_t *sv, const char *cmd, mu_serve_t *on);
/*
 * Call wait_fn(ud) (it returns when the server has stopped), serving the
 * metrics meanwhile when cli_svc_listen bound them without a loop.
 */
void cli_svc_wait(cli_svc_t *sv, void (*wait_fn)(void *), void *ud);
/* The server is up: tell systemd (READY=1, with a status line) when the
 * command runs under a Type=notify unit; a no-op otherwise. */
void cli_svc_ready(cli_svc_t *sv, const char *status);
/* The server is stopping (STOPPING=1): systemd waits for the drain. */
void cli_svc_stopping(void);
/* Stop serving metrics and free the registry: after the server that
 * counts into it has stopped. Safe after a failed or no listen. */
void cli_svc_stop(cli_svc_t *sv);

/*
 * The rule every server's address follows (docs/deploy.md): a server
 * listens where the program it stands in for listens (tracker and server
 * on 0.0.0.0 as TVM's, store on :: as torch's TCPStore), muster's own
 * (stage, serve, metrics) on loopback unless told otherwise; and a
 * listener beyond loopback that answers anyone says so once at start, as
 * llama.cpp's rpc-server does. cli_is_loopback: is host (a literal, or
 * "localhost"; NULL or "" is the wildcard) a loopback address?
 * cli_warn_open: unless it is, a WARNING from component that host:port
 * takes anyone, what such a peer can do (risk) and what to do (fix).
 */
int cli_is_loopback(const char *host);
void cli_warn_open(const char *component, const char *host, int port, const char *risk,
                   const char *fix);

/* svc_metrics.c: run the endpoint's own loop on this thread while
 * wait_fn(ud) waits on another (see there). */
void cli_metrics_run(mu_metrics_server_t *ms, void (*wait_fn)(void *), void *ud);

#endif
