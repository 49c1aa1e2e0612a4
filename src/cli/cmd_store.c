/* SPDX-License-Identifier: MIT */
/*
 * `muster store`: a standalone TCPStore server that torch's clients use
 * unchanged; `muster store-cli`: a client for poking at any TCPStore.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "muster/store.h"
#include "cli/cli_int.h"
#include "cli/svc_int.h"
#include "core/log_int.h"
#include "core/net_int.h"
#include "core/sniff_int.h"

/* The drain of the first SIGINT/SIGTERM, bounded by --drain-timeout. */
static double drain_timeout = 10;

static void drain_store(void *ud)
{
	cli_svc_stopping();
	mu_store_server_drain(ud, drain_timeout);
}

/* A second signal: close everything now. */
static void stop_store(void *ud)
{
	mu__log(MU_LOG_WARN, "store", "second signal: stopping without waiting for the drain");
	mu_store_server_stop(ud);
}

static void wait_store(void *ud)
{
	mu_store_server_wait(ud);
}

int cmd_store(int argc, char **argv)
{
	mu_store_server_opts_t o;
	mu_store_server_t *s;
	int npos, rc, max_key, max_value, max_keys, max_watches, max_watches_total;
	cli_budget_t cb;
	cli_svc_t sv;
	cli_opt_t opts[] = {
		{"host", OPT_STR, &o.host, "HOST", "address to bind (default ::, which takes IPv4 and IPv6)"},
		{"port", OPT_INT, &o.port, "PORT", "port (default 29500, torch's; 0 = any)"},
		{"max-key-bytes", OPT_INT, &max_key, "N", "longest key accepted (default 65536)"},
		{"max-value-bytes", OPT_INT, &max_value, "N", "largest value accepted (default 67108864)"},
		{"max-keys", OPT_INT, &max_keys, "N", "most keys in one CHECK/WAIT/MULTI_* (default 131072)"},
		{"io-timeout", OPT_DOUBLE, &o.request_timeout, "SECONDS", "close a client that starts a request and does not finish it (default 60; 0 = never)"},
		{"max-watches", OPT_INT, &max_watches, "N", "v1 WATCH_KEY registrations one connection may hold; one more closes it (default 1024)"},
		{"max-watches-total", OPT_INT, &max_watches_total, "N", "... all connections together (default 65536)"},
		CLI_BUDGET_OPTS(cb),
		{"quiet", OPT_FLAG, &o.silent, NULL, "log only warnings and errors"},
		{"allow", OPT_STR, &o.allow, "CIDR,...", "accept connections only from these addresses and prefixes (e.g. 10.0.0.0/8,::1); others are closed at once, logged and counted (default: everyone). TVM's and torch's protocols have no authentication: see docs/security.md"},
		{"drain-timeout", OPT_DOUBLE, &drain_timeout, "SECONDS", "on SIGTERM or Ctrl-C, stop accepting and give the replies already queued this long to reach their peers, then close (default 10; a second signal stops at once)"},
		CLI_SVC_OPTS(sv),
		CLI_ALIAS("silent", "quiet"),
		CLI_ALIAS("request-timeout", "io-timeout"),
	};
	cli_cmd_t cmd = {
		"muster store [--host H] [--port P] [--max-value-bytes N] [--max-key-bytes N]",
		"Run a key-value rendezvous store that speaks PyTorch's c10d TCPStore protocol,\n"
		"torch 1.13's and torch 2.x's on the same port, so no rank has to host it.\n"
		"Point torch at it from every rank (none of them is the master):\n"
		"\n"
		"    store = torch.distributed.TCPStore(\"HOST\", 29500, is_master=False)\n"
		"    torch.distributed.init_process_group(\"gloo\", store=store,\n"
		"                                         rank=RANK, world_size=N)\n"
		"\n"
		"Keys stay until the store stops: give each job a fresh store or a fresh key\n"
		"prefix (torch.distributed.PrefixStore). Ctrl-C or SIGTERM stops it after a\n"
		"drain (see --drain-timeout).",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 0, 0};

	mu_store_server_opts_init(&o);
	max_key = (int)o.max_key_bytes;
	max_value = (int)o.max_value_bytes;
	max_keys = (int)o.max_keys;
	max_watches = (int)o.max_watches;
	max_watches_total = (int)o.max_watches_total;
	cli_budget_init(&cb);
	cli_svc_init(&sv);
	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if (max_key <= 0 || max_value <= 0 || max_keys <= 0 || o.request_timeout < 0 ||
	    drain_timeout < 0 || max_watches <= 0 || max_watches_total < max_watches) {
		fprintf(stderr, "muster store: limits must be > 0 (--max-watches-total at least "
		        "--max-watches) and --io-timeout, --drain-timeout >= 0\n");
		return 2;
	}
	rc = cli_budget_apply("muster store", &cb, &o.budget);
	if (rc != 0 || (rc = cli_allow_check("muster store", o.allow)) != 0)
		return rc;
	o.max_watches = (size_t)max_watches;
	o.max_watches_total = (size_t)max_watches_total;
	o.max_key_bytes = (size_t)max_key;
	o.max_value_bytes = (size_t)max_value;
	o.max_keys = (size_t)max_keys;
	if ((rc = cli_svc_start(&sv, "muster store", MU_LOG_INFO)) != 0)
		return rc;
	mu__raise_nofile_limit();
	cli_block_signals();
	o.metrics = sv.reg;
	if ((rc = cli_svc_listen(&sv, "muster store", NULL)) != 0) {
		cli_svc_stop(&sv);
		return rc;
	}
	rc = mu_store_server_start(&o, &s);
	if (rc != 0)
		cli_svc_stop(&sv);
	if (rc != 0) {
		fprintf(stderr, "muster store: cannot listen on %s port %d: %s\n", o.host,
		        o.port, rc == MU_EBIND ? "address in use" : mu_strerror(rc));
		return 1;
	}
	if (o.allow == NULL)
		cli_warn_open("store", o.host, mu_store_server_port(s), "torch's TCPStore protocol "
		              "has no authentication, so anyone who can reach it reads, changes and "
		              "deletes every key (a job's rendezvous, its ranks' addresses)",
		              "limit who connects with --allow CIDR,... or a firewall, or bind "
		              "--host 127.0.0.1 and tunnel");
	cli_on_signal(drain_store, s);
	cli_on_signal_again(stop_store, s);
	cli_svc_ready(&sv, "serving keys");
	cli_svc_wait(&sv, wait_store, s);
	cli_signal_disarm();
	mu_store_server_free(s);
	cli_svc_stop(&sv);
	return 0;
}

/* ---- store-cli ---- */

static int print_value(const mu_store_value_t *v)
{
	fwrite(v->data, 1, v->len, stdout);
	putchar('\n');
	mu_free(v->data);
	return 0;
}

static int run_op(mu_store_client_t *c, int n, char **a)
{
	const char *op = a[0];
	mu_store_value_t v;
	int64_t r;
	int rc, flag;

#define NEED(k)                                                                \
	do {                                                                   \
		if (n != (k) + 1) {                                            \
			fprintf(stderr, "muster store-cli: %s takes %d argument(s)\n", op, (k)); \
			return 2;                                              \
		}                                                              \
	} while (0)
	if (strcmp(op, "set") == 0) {
		NEED(2);
		return mu_store_set(c, a[1], a[2], strlen(a[2]));
	} else if (strcmp(op, "get") == 0) {
		NEED(1);
		rc = mu_store_get(c, a[1], &v);
		return rc != 0 ? rc : print_value(&v);
	} else if (strcmp(op, "add") == 0) {
		char *end;
		long long by;

		NEED(2);
		errno = 0;
		by = strtoll(a[2], &end, 10);
		if (errno != 0 || end == a[2] || *end != '\0') {
			fprintf(stderr, "muster store-cli: add %s %s: %s is not an integer\n", a[1],
			        a[2], a[2]);
			return 2;
		}
		rc = mu_store_add(c, a[1], (int64_t)by, &r);
		if (rc == 0)
			printf("%" PRId64 "\n", r);
		return rc;
	} else if (strcmp(op, "compare-set") == 0) {
		NEED(3);
		rc = mu_store_compare_set(c, a[1], a[2], strlen(a[2]), a[3], strlen(a[3]), &v);
		return rc != 0 ? rc : print_value(&v);
	} else if ((strcmp(op, "wait") == 0 || strcmp(op, "check") == 0) && n < 2) {
		fprintf(stderr, "muster store-cli: %s takes at least 1 key\n", op);
		return 2;
	} else if (strcmp(op, "wait") == 0) {
		return mu_store_wait(c, (const char *const *)a + 1, (size_t)n - 1, -1);
	} else if (strcmp(op, "check") == 0) {
		rc = mu_store_check(c, (const char *const *)a + 1, (size_t)n - 1, &flag);
		if (rc == 0)
			printf("%s\n", flag ? "ready" : "not ready");
		return rc;
	} else if (strcmp(op, "delete") == 0) {
		NEED(1);
		rc = mu_store_delete(c, a[1], &flag);
		if (rc == 0)
			printf("%s\n", flag ? "deleted" : "no such key");
		return rc;
	} else if (strcmp(op, "keys") == 0) {
		NEED(0);
		rc = mu_store_num_keys(c, &r);
		if (rc == 0)
			printf("%" PRId64 "\n", r);
		return rc;
	} else if (strcmp(op, "append") == 0) {
		NEED(2);
		return mu_store_append(c, a[1], a[2], strlen(a[2]));
	}
#undef NEED
	fprintf(stderr, "muster store-cli: unknown operation '%s' (see --help)\n", op);
	return 2;
}

int cmd_store_cli(int argc, char **argv)
{
	mu_store_client_opts_t o;
	mu_store_client_t *c;
	const char *dialect = "auto";
	char host[256], hint[512] = "";
	double timeout = 30;
	int npos, rc;
	cli_opt_t opts[] = {
		{"dialect", OPT_STR, &dialect, "auto|v1|v2", "protocol: torch 1.13's (v1), 2.x's (v2), or find out (default)"},
		{"timeout", OPT_DOUBLE, &timeout, "SECONDS", "connect, wait and reply timeout (default 30)"},
		{"raw-keys", OPT_FLAG, &o.raw_keys, NULL, "send keys as given (torch puts \"/\" in front of each)"},
	};
	cli_cmd_t cmd = {
		"muster store-cli HOST:PORT [--dialect D] OPERATION ARGS...",
		"Talk to a TCPStore (muster's or torch's) the way torch's client does.\n"
		"Operations:\n"
		"  get KEY                 wait for KEY, print its value\n"
		"  set KEY VALUE           store VALUE\n"
		"  add KEY N               add N to the counter at KEY, print the result\n"
		"  compare-set KEY OLD NEW set KEY to NEW if it holds OLD, print the value\n"
		"  wait KEY...             return when every KEY exists (or time out)\n"
		"  check KEY...            print whether every KEY exists\n"
		"  delete KEY              remove KEY\n"
		"  keys                    print how many keys the store holds (init/ too)\n"
		"  append KEY VALUE        append to KEY (v2 servers)",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 2, 64};

	mu_store_client_opts_init(&o);
	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if (mu__split_hostport(argv[0], host, sizeof(host), &o.port) != 0) {
		fprintf(stderr, "muster store-cli: %s is not HOST:PORT\n", argv[0]);
		return 2;
	}
	if (strcmp(dialect, "auto") != 0 && strcmp(dialect, "v1") != 0 &&
	    strcmp(dialect, "v2") != 0) {
		fprintf(stderr, "muster store-cli: --dialect %s is not auto, v1 or v2\n", dialect);
		return 2;
	}
	o.host = host;
	o.timeout_ms = (int)(timeout * 1000);
	o.dialect = strcmp(dialect, "v1") == 0 ? MU_STORE_DIALECT_V1
	          : strcmp(dialect, "v2") == 0 ? MU_STORE_DIALECT_V2 : MU_STORE_AUTO;
	rc = mu_store_client_connect(&o, &c);
	if (rc != 0) {
		cli_peer_hint(host, o.port, rc, MU__PROTO_STORE, hint, sizeof(hint));
		fprintf(stderr, "muster store-cli: cannot reach a store at %s: %s%s\n",
		        argv[0], mu_strerror(rc), hint);
		return 1;
	}
	rc = run_op(c, npos - 1, argv + 1);
	mu_store_client_close(c);
	if (rc == 2)
		return 2;
	if (rc != 0) {
		/* a key not there in time is the store's answer, not a wrong peer */
		if (rc != -ETIMEDOUT)
			cli_peer_hint(host, o.port, rc, MU__PROTO_STORE, hint, sizeof(hint));
		fprintf(stderr, "muster store-cli: %s %s: %s%s\n", argv[1],
		        npos > 2 ? argv[2] : "", rc == -ETIMEDOUT ? "timed out" : mu_strerror(rc),
		        hint);
		return 1;
	}
	return 0;
}
