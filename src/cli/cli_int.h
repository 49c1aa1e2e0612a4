/* SPDX-License-Identifier: MIT */
/*
 * Shared pieces of the `muster` command: option parsing and the entry point
 * of each subcommand. Subcommands print to stdout what the user asked for
 * (tables, JSON) and to stderr everything else (logs, errors).
 */
#ifndef MU_CLI_INT_H
#define MU_CLI_INT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "muster/common.h"
#include "muster/stream.h"

typedef enum { OPT_FLAG, OPT_STR, OPT_INT, OPT_DOUBLE, OPT_ALIAS } cli_opt_kind_t;

typedef struct {
	const char *name;    /* long name without "--" */
	cli_opt_kind_t kind;
	void *dst;           /* int *, const char **, int *, double * */
	const char *metavar; /* shown in --help; NULL for flags; an alias: the option it names */
	const char *help;
} cli_opt_t;

/*
 * The options' one vocabulary (every command spells a thing the same way;
 * docs/deploy.md and the man pages say so):
 *   --quiet                   less on stderr (servers: warnings and errors only)
 *   --timeout SECONDS         a client command's whole wait, then it gives up
 *   --io-timeout SECONDS      a peer that stalls mid-message: a server closes it,
 *                             a client gives up on it
 *   --device-timeout SECONDS  the wait for devices from a tracker
 *   --max-connections N       connections a server serves at once
 *   --max-frame SIZE          the largest message a server takes (sizes: 4096, 64K, 1G)
 *   --stages H:P,...          stage servers' addresses; a count of stages is --of N
 *   --model PATH              a graph model directory or an LLM checkpoint, where
 *                             a command takes either
 * An old spelling stays an alias, CLI_ALIAS("silent", "quiet"), in the
 * same table: it works as the option it names, --help lists it on its
 * last line and the man page under ALIASES, never among the options.
 */
#define CLI_ALIAS(old, canonical) {old, OPT_ALIAS, NULL, canonical, NULL}

typedef struct {
	const char *usage; /* "muster tracker [options]" */
	const char *about; /* paragraph printed under the usage line */
	const cli_opt_t *opts;
	int nopts;
	int min_pos, max_pos; /* positional argument count allowed */
} cli_cmd_t;

/*
 * Parse argv[1..] ("--name value", "--name=value", flags) into the option
 * destinations; positional arguments are moved to the front of argv and
 * counted in *npos. Returns 0, 1 when --help (or --help-man, the same
 * table as a manual page) was printed (exit 0), or 2
 * after printing a usage error (exit 2).
 */
int cli_parse(const cli_cmd_t *cmd, int argc, char **argv, int *npos);

/* How much of a usage line names the command: its leading lower-case
 * words ("muster model gen" of "muster model gen --out DIR ..."). */
size_t cli_cmd_name_len(const char *usage);

/* --help-man: cmd's manual page in roff on stdout (cli/man.c). */
void cli_print_man(const cli_cmd_t *cmd);

/* One page `muster help-man DIR` writes: DIR/PAGE.1 from the output of
 * fn({cmd, [sub,] "--help-man"}); whatis is its NAME line. */
typedef struct {
	const char *page, *cmd, *sub;
	int (*fn)(int, char **);
	const char *whatis;
} cli_page_t;

/* `muster help-man DIR`: muster.1 (overview() as its description, and
 * every page under SEE ALSO), then each of pages. 0, 1 or 2 (usage). */
int cli_help_man(int argc, char **argv, const cli_page_t *pages, size_t n,
                 void (*overview)(FILE *f));

/*
 * Block SIGINT/SIGTERM (and ignore SIGPIPE) in this thread and every thread
 * it starts later: call it before starting a service thread, so that only
 * the thread of cli_on_signal ever receives them.
 */
void cli_block_signals(void);
/*
 * Call fn(ud) from the signal thread on every SIGHUP (servers reopen their
 * log file). Only before the first cli_block_signals; without it SIGHUP
 * keeps its default action.
 */
void cli_on_hup(void (*fn)(void *), void *ud);
/* Call fn(ud) once, from a dedicated thread, on the first SIGINT/SIGTERM. */
void cli_on_signal(void (*fn)(void *), void *ud);
/* Call fn(ud) once on a later SIGINT/SIGTERM (one that cuts a drain
 * short), from the same thread. */
void cli_on_signal_again(void (*fn)(void *), void *ud);
/* The signal that ran the callback (0 before one came), for an exit
 * status of 128 + its number, as shells report a death by signal. */
int cli_signal_caught(void);
/* Forget those callbacks; when this returns neither is running. */
void cli_signal_disarm(void);

/* "1.5 MiB" */
void cli_bytes(double b, char *buf, size_t len);
/* "512M", "2G", "1.5GiB", "4096" -> bytes; -1 when not a size. */
int cli_parse_size(const char *s, uint64_t *out);
/* --kv-type's metavar from the table of KV cache types: "f32|f16|q8_0". */
const char *cli_kv_choices(void);

/*
 * A server's budget options (docs/internals/budgets.md). Put
 * CLI_BUDGET_OPTS(cb) in the option table, then cli_budget_apply. The
 * defaults in the help text are MU_BUDGET_*_DEFAULT's (muster/common.h).
 */
typedef struct {
	const char *conn;  /* --conn-budget SIZE, or NULL */
	const char *total; /* --total-budget SIZE, or NULL */
	double grace;      /* --budget-grace SECONDS */
} cli_budget_t;

#define CLI_BUDGET_OPTS(cb)                                                                    	{"conn-budget", OPT_STR, &(cb).conn, "SIZE",                                           	 "what one peer may make this server hold (its queued replies at their real cost, its " 	 "partial request, its watches); past it the peer is not read (default 16M)"},         	{"total-budget", OPT_STR, &(cb).total, "SIZE",                                         	 "what all peers together may make it hold (default 512M)"},                           	{"budget-grace", OPT_DOUBLE, &(cb).grace, "SECONDS",                                   	 "close a peer that stays over its budget this long reading nothing (default 30)"}

void cli_budget_init(cli_budget_t *cb);
/* b from cb, defaults where unset: 0, or 2 after saying why on stderr. */
int cli_budget_apply(const char *cmd, const cli_budget_t *cb, mu_budget_t *b);

/*
 * --secret-file, --tls-cert, --tls-key, --tls-ca: how muster's own
 * connections are protected (muster/stream.h). CLI_SECURE_OPTS(cs) in the
 * option table, then cli_secure_apply. --secret-file defaults to
 * $MUSTER_SECRET_FILE.
 */
typedef struct {
	mu_secure_opts_t o;
} cli_secure_t;

#define CLI_SECURE_OPTS(cs)                                                                    \
	{"secret-file", OPT_STR, &(cs).o.secret_file, "PATH",                                  \
	 "a shared secret (16+ bytes): peers prove they hold it before anything else; "        \
	 "default $MUSTER_SECRET_FILE"},                                                       \
	{"tls-cert", OPT_STR, &(cs).o.tls_cert, "PEM", "this side's TLS certificate (with --tls-key)"}, \
	{"tls-key", OPT_STR, &(cs).o.tls_key, "PEM", "its private key"},                        \
	{"tls-ca", OPT_STR, &(cs).o.tls_ca, "PEM",                                             \
	 "CA that signs the peers' certificates: a client checks the server's (and its "       \
	 "name), a server asks every client for one (mutual TLS)"}

/*
 * After a client's failure rc against host:port, where the peer answered
 * (or took the connection) but not in the protocol wanted (a
 * mu__proto_t: core/sniff_int.h): "; it is a TCPStore (muster store,
 * torch's), not a TVM RPC tracker" into out, found by asking the peer on fresh
 * connections (a second or so); "" when it is what was wanted, when
 * nothing answers, or when rc is of another kind (refused, unresolved).
 */
void cli_peer_hint(const char *host, int port, int rc, int want, char *out, size_t n);

/* --allow's list, checked before starting: 0, or 2 after saying why. */
int cli_allow_check(const char *cmd, const char *allow);

void cli_secure_init(cli_secure_t *cs);
/* Would a server under cs (after cli_secure_apply) take any peer? 1 with
 * neither a shared secret nor TLS that asks clients for a certificate
 * (--tls-ca): TLS alone encrypts, but admits anyone. */
int cli_secure_open(const cli_secure_t *cs);
/* *sec from cs (NULL when nothing is asked for): 0, or 2 after saying why. */
int cli_secure_apply(const char *cmd, cli_secure_t *cs, mu_secure_t **sec);

/* Print the report o (cJSON_Print's layout), then free it. */
struct cJSON;
void cli_print_json(struct cJSON *o);

/* `muster run`'s table of a cluster run (also the demo's). */
struct mu_cluster_s;
void cli_print_cluster(struct mu_cluster_s *c, int json, double wall_ms, int forwards,
                       double first_ms);

int cmd_tracker(int argc, char **argv);
int cmd_query(int argc, char **argv);
int cmd_top(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_server(int argc, char **argv);
int cmd_request(int argc, char **argv);
int cmd_store(int argc, char **argv);
int cmd_store_cli(int argc, char **argv);
int cmd_md(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_stage(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_model(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_stage_llm(int argc, char **argv);
/* Is path a decoder LLM checkpoint (GGUF, llama2.c, HF directory) rather
 * than a graph model directory? */
int cli_is_llm(const char *path);
/* `muster plan` for such a checkpoint. The exit status. */
int cli_plan_llm(const char *path, int stages, const char *budgets, int ctx, int seqs,
                 const char *kv_type, int json);
int cmd_tokenize(int argc, char **argv);
int bench_tracker(int argc, char **argv);
int bench_store(int argc, char **argv);
int bench_md(int argc, char **argv);
int bench_pipeline(int argc, char **argv);
int bench_kern(int argc, char **argv);

#endif
