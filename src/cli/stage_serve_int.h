/* SPDX-License-Identifier: MIT */
/*
 * `muster stage`'s server options and serving loop, shared by its graph
 * and LLM forms (stage_serve.c).
 */
#ifndef MU_CLI_STAGE_SERVE_INT_H
#define MU_CLI_STAGE_SERVE_INT_H

#include "muster/pipeline.h"
#include "cli/cli_int.h"
#include "cli/svc_int.h"

#define CLI_STAGE_NOPTS (18 + CLI_SVC_NOPTS) /* two of them aliases */

typedef struct {
	mu_stage_server_opts_t o;
	cli_budget_t cb;
	cli_secure_t cs;
	mu_secure_t *sec;        /* from cs; freed by cli_stage_serve */
	cli_svc_t sv;
	int io_timeout, silent_timeout, idle_timeout, body_timeout, max_conns, requests;
	const char *max_frame;
	char name[64];
	char io_help[96];
} cli_stage_args_t;

/* Defaults (io_timeout in seconds: the form's own). */
void cli_stage_args_init(cli_stage_args_t *a, int io_timeout);
/* The CLI_STAGE_NOPTS server options into out; returns how many. */
int cli_stage_args_opts(cli_stage_args_t *a, cli_opt_t *out);
/* Check and apply them after cli_parse, and start the service side (the
 * log sink: call before cli_block_signals): 0, or the exit status after
 * printing why. */
int cli_stage_args_apply(cli_stage_args_t *a, const char *cmd);
/*
 * Serve s (taken) until SIGINT/SIGTERM or --requests forwards: start the
 * server, announce(s) the stage on stderr, print "muster stage I/N:
 * serving on HOST:PORT" on stdout, wait, free. The exit status.
 */
int cli_stage_serve(mu_stage_t *s, cli_stage_args_t *a, int index, int of,
                    void (*announce)(mu_stage_t *s, int index, int of));

#endif
