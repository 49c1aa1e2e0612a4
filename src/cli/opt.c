/* SPDX-License-Identifier: MIT */
/*
 * Table-driven long-option parser and signal glue for the subcommands.
 * Accepts both "--port 9190" (TVM's Python tools) and "--port=9190" (TVM's
 * C++ tvm_rpc), so commands copied from either work unchanged.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "muster/llm.h"
#include "cli/cli_int.h"
#include "cli/progress_int.h"
#include "core/cidr_int.h"
#include "core/log_int.h"
#include "core/sniff_int.h"

static void print_help(const cli_cmd_t *cmd)
{
	int i, aliases = 0;

	printf("usage: %s\n\n%s\n", cmd->usage, cmd->about);
	if (cmd->nopts > 0)
		printf("\noptions:\n");
	for (i = 0; i < cmd->nopts; i++) {
		const cli_opt_t *o = &cmd->opts[i];
		char left[64];

		if (o->kind == OPT_ALIAS) {
			aliases++;
			continue;
		}
		snprintf(left, sizeof(left), "--%s%s%s", o->name,
		         o->metavar ? " " : "", o->metavar ? o->metavar : "");
		printf("  %-24s %s\n", left, o->help);
	}
	printf("  %-24s %s\n", "--help", "show this help and exit");
	if (aliases == 0)
		return;
	/* not indented as an option is: scripts that read the options skip it */
	printf("\nold spellings, still accepted:");
	for (i = 0; i < cmd->nopts; i++)
		if (cmd->opts[i].kind == OPT_ALIAS)
			printf(" --%s for --%s%s", cmd->opts[i].name, cmd->opts[i].metavar,
			       --aliases > 0 ? "," : "");
	printf("\n");
}

static int usage_error(const cli_cmd_t *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

size_t cli_cmd_name_len(const char *u)
{
	size_t n = 0, end = 0;

	for (;;) {
		size_t w = strspn(u + n, "abcdefghijklmnopqrstuvwxyz-");

		if (w == 0 || u[n] == '-' || (u[n + w] != ' ' && u[n + w] != '\0'))
			return end;
		end = n + w;
		if (u[end] == '\0')
			return end;
		n = end + 1;
	}
}

/* "muster stage: --port wants an integer", named by the usage line's
 * command words (the whole usage line would run over several). */
static int usage_error(const cli_cmd_t *cmd, const char *fmt, ...)
{
	int n = (int)cli_cmd_name_len(cmd->usage);
	va_list ap;

	fprintf(stderr, "%.*s: ", n, cmd->usage);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n(see %.*s --help)\n", n, cmd->usage);
	return 2;
}

/* o's value v; typed is the name as given (an alias, maybe), for errors. */
static int set_value(const cli_cmd_t *cmd, const cli_opt_t *o, const char *typed,
                     const char *v)
{
	char *end;

	errno = 0;
	switch (o->kind) {
	case OPT_STR:
		*(const char **)o->dst = v;
		return 0;
	case OPT_INT: {
		long n = strtol(v, &end, 10);

		if (errno != 0 || end == v || *end != '\0' || n < -2147483647L ||
		    n > 2147483647L)
			return usage_error(cmd, "--%s wants an integer", typed);
		*(int *)o->dst = (int)n;
		return 0;
	}
	case OPT_DOUBLE: {
		double d = strtod(v, &end);

		if (errno != 0 || end == v || *end != '\0')
			return usage_error(cmd, "--%s wants a number", typed);
		*(double *)o->dst = d;
		return 0;
	}
	default:
		return 0;
	}
}

static const cli_opt_t *find(const cli_cmd_t *cmd, const char *name, size_t n)
{
	int i;

	for (i = 0; i < cmd->nopts; i++)
		if (strlen(cmd->opts[i].name) == n &&
		    strncmp(cmd->opts[i].name, name, n) == 0) {
			const cli_opt_t *o = &cmd->opts[i];

			/* an old spelling: the option it names (an alias of an
			 * alias, or of nothing, is a table's mistake) */
			return o->kind == OPT_ALIAS ? find(cmd, o->metavar, strlen(o->metavar)) : o;
		}
	return NULL;
}

int cli_parse(const cli_cmd_t *cmd, int argc, char **argv, int *npos)
{
	int i, pos = 0, rc;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *eq;
		const cli_opt_t *o;
		char typed[64];
		size_t n;

		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			print_help(cmd);
			return 1;
		}
		if (strcmp(a, "--help-man") == 0) {
			cli_print_man(cmd);
			return 1;
		}
		if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
			argv[pos++] = argv[i];
			continue;
		}
		eq = strchr(a + 2, '=');
		n = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
		o = find(cmd, a + 2, n);
		if (o == NULL || o->kind == OPT_ALIAS)
			return usage_error(cmd, "unknown option %s", a);
		if (o->kind == OPT_FLAG) {
			if (eq != NULL)
				return usage_error(cmd, "%s takes no value", a);
			*(int *)o->dst = 1;
			continue;
		}
		if (eq == NULL && i + 1 >= argc)
			return usage_error(cmd, "%s needs a value", a);
		snprintf(typed, sizeof(typed), "%.*s", (int)n, a + 2);
		rc = set_value(cmd, o, typed, eq ? eq + 1 : argv[++i]);
		if (rc != 0)
			return rc;
	}
	if (pos < cmd->min_pos || pos > cmd->max_pos)
		return usage_error(cmd, "%s", pos < cmd->min_pos
		                                    ? "missing arguments"
		                                    : "too many arguments");
	*npos = pos;
	return 0;
}

/*
 * The signal thread calls sig_fn under sig_lock; cli_signal_disarm() takes
 * the same lock to clear it, so once disarm returns the callback is neither
 * running nor able to start, and its argument may be freed.
 */
static pthread_mutex_t sig_lock = PTHREAD_MUTEX_INITIALIZER;
static void (*sig_fn)(void *);
static void *sig_ud;
static sigset_t sig_set;
static pthread_t sig_tid;
static volatile sig_atomic_t sig_armed;
static volatile sig_atomic_t sig_caught;
static void (*hup_fn)(void *);
static void *hup_ud;
static void (*again_fn)(void *);
static void *again_ud;

/*
 * Threads that libraries start before main (OpenBLAS starts its pool from
 * a constructor) do not block our signals, so the kernel may deliver
 * SIGINT/SIGTERM to one of them. There the handler passes the signal on
 * to the sigwait thread; with no such thread yet, it does what the signal
 * would have done.
 */
static void forward_signal(int sig)
{
	if (sig_armed) {
		pthread_kill(sig_tid, sig);
		return;
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

static void *sig_thread(void *arg)
{
	int sig;

	(void)arg;
	for (;;) {
		if (sigwait(&sig_set, &sig) != 0)
			return NULL;
		if (sig == SIGHUP) {
			/* hup_fn is set before the thread starts and never changes. */
			hup_fn(hup_ud);
			continue;
		}
		pthread_mutex_lock(&sig_lock);
		if (sig_caught == 0) {
			sig_caught = sig;
			if (sig_fn != NULL)
				sig_fn(sig_ud);
			sig_fn = NULL;
		} else if (again_fn != NULL) {
			again_fn(again_ud);
			again_fn = NULL;
		}
		pthread_mutex_unlock(&sig_lock);
	}
}

/*
 * The sigwait thread starts with the first cli_block_signals, so from then
 * on a SIGINT/SIGTERM is never lost and never kills the process outright:
 * one that comes before cli_on_signal names what to do (a server still
 * starting) is kept, and cli_on_signal runs its callback at once.
 */
void cli_block_signals(void)
{
	struct sigaction sa;
	pthread_t th;

	sigemptyset(&sig_set);
	sigaddset(&sig_set, SIGINT);
	sigaddset(&sig_set, SIGTERM);
	if (hup_fn != NULL)
		sigaddset(&sig_set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sig_set, NULL);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = forward_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (hup_fn != NULL)
		sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (!sig_armed && pthread_create(&th, NULL, sig_thread, NULL) == 0) {
		sig_tid = th;
		sig_armed = 1;
		pthread_detach(th);
	}
}

void cli_on_hup(void (*fn)(void *), void *ud)
{
	if (sig_armed)
		return; /* too late: the signal thread waits without SIGHUP */
	hup_fn = fn;
	hup_ud = ud;
}

void cli_on_signal(void (*fn)(void *), void *ud)
{
	int early;

	cli_block_signals();
	pthread_mutex_lock(&sig_lock);
	early = sig_caught != 0;
	sig_fn = early ? NULL : fn;
	sig_ud = ud;
	pthread_mutex_unlock(&sig_lock);
	if (early)
		fn(ud);
}

void cli_on_signal_again(void (*fn)(void *), void *ud)
{
	pthread_mutex_lock(&sig_lock);
	again_fn = fn;
	again_ud = ud;
	pthread_mutex_unlock(&sig_lock);
}

int cli_signal_caught(void)
{
	return sig_caught;
}

void cli_signal_disarm(void)
{
	pthread_mutex_lock(&sig_lock);
	sig_fn = NULL;
	again_fn = NULL;
	pthread_mutex_unlock(&sig_lock);
}

/* ---- sizes ---- */

void cli_bytes(double b, char *buf, size_t len)
{
	static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int u = 0;

	while (b >= 1024 && u < 4) {
		b /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%.0f B", b);
	else
		snprintf(buf, len, "%.1f %s", b, unit[u]);
}

int cli_parse_size(const char *s, uint64_t *out)
{
	char *end;
	double v;
	double mult = 1;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || errno != 0 || v < 0)
		return -1;
	switch (*end) {
	case 'k': case 'K': mult = 1024.0; end++; break;
	case 'm': case 'M': mult = 1024.0 * 1024; end++; break;
	case 'g': case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
	case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
	default: break;
	}
	if (mult > 1 && *end == 'i')
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end != '\0' || v * mult > 1.8e19)
		return -1;
	*out = (uint64_t)(v * mult);
	return 0;
}

void cli_budget_init(cli_budget_t *cb)
{
	cb->conn = NULL;
	cb->total = NULL;
	cb->grace = MU_BUDGET_GRACE_DEFAULT;
}

int cli_budget_apply(const char *cmd, const cli_budget_t *cb, mu_budget_t *b)
{
	uint64_t v;

	mu_budget_init(b);
	if (cb->conn != NULL) {
		if (cli_parse_size(cb->conn, &v) != 0 || v == 0 || v > SIZE_MAX / 4) {
			fprintf(stderr, "%s: --conn-budget %s is not a size (e.g. 16M)\n", cmd, cb->conn);
			return 2;
		}
		b->conn_bytes = (size_t)v;
	}
	if (cb->total != NULL) {
		if (cli_parse_size(cb->total, &v) != 0 || v == 0 || v > SIZE_MAX / 4) {
			fprintf(stderr, "%s: --total-budget %s is not a size (e.g. 512M)\n", cmd, cb->total);
			return 2;
		}
		b->total_bytes = (size_t)v;
	}
	b->grace = cb->grace;
	if (mu_budget_check(b) != 0) {
		fprintf(stderr, "%s: the budgets must be > 0 with --total-budget at least "
		        "--conn-budget, and --budget-grace > 0\n", cmd);
		return 2;
	}
	return 0;
}

void cli_secure_init(cli_secure_t *cs)
{
	mu_secure_opts_init(&cs->o);
}

int cli_secure_apply(const char *cmd, cli_secure_t *cs, mu_secure_t **sec)
{
	char err[512];
	const char *env = getenv("MUSTER_SECRET_FILE");

	if (cs->o.secret_file == NULL && env != NULL && env[0] != '\0')
		cs->o.secret_file = env;
	if (mu_secure_new(&cs->o, sec, err, sizeof(err)) != 0) {
		fprintf(stderr, "%s: %s\n", cmd, err);
		return 2;
	}
	/* a client command logs nothing by default, but why a peer refused
	 * it (a certificate, a secret) is logged: show that much */
	if (*sec != NULL && !mu__log_enabled(MU_LOG_WARN))
		mu_log_set_sink(cli_log_stderr_sink, NULL, MU_LOG_WARN);
	return 0;
}

int cli_secure_open(const cli_secure_t *cs)
{
	return cs->o.secret_file == NULL && cs->o.tls_ca == NULL;
}

int cli_allow_check(const char *cmd, const char *allow)
{
	mu__allow_t a;
	char err[256];

	if (mu__allow_parse(allow, &a, err, sizeof(err)) != 0) {
		fprintf(stderr, "%s: %s\n", cmd, err);
		return 2;
	}
	return 0;
}

void cli_peer_hint(const char *host, int port, int rc, int want, char *out, size_t n)
{
	char what[256];
	mu__proto_t got;

	out[0] = '\0';
	/* the peer answered, or took the connection, but not as it should */
	if (rc != MU_EEOF && rc != MU_EBADMAGIC && rc != MU_EPROTO && rc != -ECONNRESET &&
	    rc != -ETIMEDOUT && rc != MU_ETOOBIG)
		return;
	got = mu__sniff(host, port, 1000, what, sizeof(what));
	if (got != (mu__proto_t)want && what[0] != '\0')
		snprintf(out, n, "; it is %s, not %s", what, mu__proto_name((mu__proto_t)want));
}

const char *cli_kv_choices(void)
{
	static char buf[64]; /* the same text each time: built once, on the main thread */
	size_t at = 0;

	if (buf[0] != '\0')
		return buf;
	for (int t = 0; mu_llm_kv_type_name(t) != NULL && at < sizeof(buf); t++) {
		int n = snprintf(buf + at, sizeof(buf) - at, "%s%s", t > 0 ? "|" : "",
		                 mu_llm_kv_type_name(t));

		at += n > 0 ? (size_t)n : 0;
	}
	return buf;
}
