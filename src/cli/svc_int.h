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
#include "cli/cli_int.h"

typedef struct {
	const char *log_format; /* --log-format: "text" (default) or "json" */
	const char *log_file;   /* --log-file PATH, or NULL for stderr */
} cli_svc_t;

#define CLI_SVC_NOPTS 2
#define CLI_SVC_OPTS(sv)                                                                      \
	{"log-format", OPT_STR, &(sv).log_format, "text|json",                                 \
	 "log lines as text (\"TIME LEVEL component: message\") or one JSON object per line "  \
	 "(time, level, component, msg) for log shippers (default text)"},                     \
	{"log-file", OPT_STR, &(sv).log_file, "PATH",                                          \
	 "append log lines (and everything else this process writes to stderr) to PATH; "      \
	 "SIGHUP reopens it, for logrotate (default: stderr)"}

void cli_svc_init(cli_svc_t *sv);
/*
 * Install the log sink at level (MU_LOG_WARN for --silent), open the log
 * file and make SIGHUP reopen it. cmd names the command in messages
 * ("muster tracker"). 0, or the exit status after saying why on stderr.
 */
int cli_svc_start(cli_svc_t *sv, const char *cmd, mu_log_level_t level);
/* Release what cli_svc_start holds (the process is about to exit). */
void cli_svc_stop(cli_svc_t *sv);

#endif
