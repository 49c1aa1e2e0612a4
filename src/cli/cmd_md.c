/* SPDX-License-Identifier: MIT */
/*
 * `muster md publish|fetch|invalidate|list`: debug a metadata exchange
 * against any backend, as an agent of its own.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "muster/md.h"
#include "muster/store.h"
#include "cli/cli_int.h"
#include "core/net_int.h"
#ifdef MU_HAVE_CURL
#include "muster/etcd.h"
#endif

typedef struct {
	const char *name, *label, *value, *file, *peer, *etcd, *ns, *tcpstore, *cache_limit;
	double timeout, lease_ttl;
	uint64_t cache_bytes;
	int listen_port, raw, keep;
	char peer_ip[256];
	mu_md_peer_t p;
	cli_budget_t cb;     /* publish --listen-port: the listener's budget */
	mu_budget_t budget;
} md_args_t;

#define COMMON_OPTS(a)                                                         \
	{"etcd", OPT_STR, &(a).etcd, "ENDPOINTS", "etcd members (else $MUSTER_/NIXL_ETCD_ENDPOINTS)"}, \
	{"namespace", OPT_STR, &(a).ns, "NS", "etcd key namespace (default /nixl/agents/)"}, \
	{"tcpstore", OPT_STR, &(a).tcpstore, "HOST:PORT", "a TCPStore (else $MUSTER_/NIXL_TCPSTORE_ENDPOINT)"}, \
	{"peer", OPT_STR, &(a).peer, "IP:PORT", "talk to one agent's P2P listener instead of a store"}, \
	{"label", OPT_STR, &(a).label, "LABEL", "partial metadata label (default: the full blob, \"metadata\")"}, \
	{"timeout", OPT_DOUBLE, &(a).timeout, "SECONDS", "how long to wait for the result (default 30)"}

static mu_md_agent_t *make_agent(md_args_t *a, const char *name)
{
	mu_md_opts_t o;
	mu_md_agent_t *ag;
	char why[512];
	int rc;

	mu_md_opts_init(&o);
	o.name = name;
	o.etcd_endpoints = a->etcd;
	o.etcd_namespace = a->ns;
	o.tcpstore_endpoint = a->tcpstore;
	o.lease_ttl = a->lease_ttl;
	o.remote_cache_max = (size_t)a->cache_bytes;
	o.etcd_watch_timeout = a->timeout;
	o.store_timeout = a->timeout;
	if (a->listen_port > 0) {
		o.listen = 1;
		o.listen_port = a->listen_port;
		o.listen_budget = a->budget;
	}
	rc = mu_md_agent_new(&o, &ag, why, sizeof(why));
	if (rc != 0) {
		if (why[0] != '\0') /* it names the agent and what is wrong */
			fprintf(stderr, "muster md: cannot create the agent: %s\n", why);
		else
			fprintf(stderr, "muster md: cannot create agent %s: %s\n", name,
			        mu_strerror(rc));
		return NULL;
	}
	return ag;
}

static int parse_peer(md_args_t *a)
{
	if (a->peer == NULL)
		return 0;
	if (mu__split_hostport(a->peer, a->peer_ip, sizeof(a->peer_ip), &a->p.port) != 0 ||
	    a->p.port == 0) {
		fprintf(stderr, "muster md: --peer %s is not IP:PORT\n", a->peer);
		return 2;
	}
	a->p.ip = a->peer_ip;
	return 0;
}

#define STORE_HELP "--etcd or --tcpstore (or MUSTER_/NIXL_ETCD_ENDPOINTS, " \
	"MUSTER_/NIXL_TCPSTORE_ENDPOINT)"

/* publish, fetch and invalidate go to one peer or to a store: 0, or 2
 * after saying that neither was given. */
static int need_target(const md_args_t *a, mu_md_agent_t *ag, const char *use)
{
	if (a->peer != NULL || mu_md_store_endpoint(ag) != NULL)
		return 0;
	fprintf(stderr, "muster md %s: needs --peer IP:PORT or a store: " STORE_HELP "\n", use);
	return 2;
}

/* Wait for op; print the failure with its cause. who (may be NULL) gets
 * the remote agent the completion names (a fetch: whose blob was loaded). */
static int finish(mu_md_agent_t *ag, uint64_t op, double timeout, const char *what,
                  char *who, size_t wl)
{
	mu_md_event_t ev;
	int st = 0, rc = mu_md_wait(ag, op, (int)(timeout * 1000) + 2000, &st);

	if (rc != 0) {
		fprintf(stderr, "muster md: %s: no result: %s\n", what, mu_strerror(rc));
		return 1;
	}
	while (mu_md_next_event(ag, &ev) == 0) {
		if (ev.op != op)
			continue;
		if (ev.status != 0) {
			fprintf(stderr, "muster md: %s failed: %s\n", what,
			        ev.detail[0] != '\0' ? ev.detail : mu_strerror(ev.status));
			return 1;
		}
		if (who != NULL)
			snprintf(who, wl, "%s", ev.name);
	}
	if (st != 0) {
		fprintf(stderr, "muster md: %s failed: %s\n", what, mu_strerror(st));
		return 1;
	}
	return 0;
}

static char *read_file(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long len;

	if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0 || (buf = malloc((size_t)len + 1)) == NULL ||
	    fread(buf, 1, (size_t)len, f) != (size_t)len) {
		free(buf);
		buf = NULL;
	} else {
		*n = (size_t)len;
	}
	if (f != NULL)
		fclose(f);
	return buf;
}

/* The signal thread wakes the main thread through this pipe. */
static int hold_pipe[2] = {-1, -1};

static void stop_waiting(void *ud)
{
	(void)ud;
	(void)!write(hold_pipe[1], "x", 1);
}

static int md_publish(md_args_t *a)
{
	mu_md_agent_t *ag;
	char *data;
	size_t n = 0;
	uint64_t op;
	int rc;

	if (a->name == NULL || (a->value == NULL) == (a->file == NULL)) {
		fprintf(stderr, "muster md publish: needs --name and one of --value or --file\n");
		return 2;
	}
	errno = 0;
	data = a->file ? read_file(a->file, &n) : strdup(a->value);
	if (data == NULL) {
		fprintf(stderr, "muster md publish: cannot read %s: %s\n",
		        a->file ? a->file : "the value", strerror(errno != 0 ? errno : ENOMEM));
		return 1;
	}
	if (a->value != NULL)
		n = strlen(a->value);
	ag = make_agent(a, a->name);
	rc = ag == NULL ? 1 : need_target(a, ag, "publish");
	if (rc == 0)
		rc = mu_md_set_local(ag, a->label, data, n);
	free(data);
	if (rc == 0)
		rc = mu_md_send_local(ag, a->peer ? &a->p : NULL, a->label, &op);
	if (rc < 0)
		fprintf(stderr, "muster md publish: %s\n", mu_strerror(rc));
	if (rc == 0)
		rc = finish(ag, op, a->timeout, "publish", NULL, 0);
	if (rc == 0)
		fprintf(stderr, "muster md: published %s%s%s through %s\n", a->name,
		        a->label ? " label " : "", a->label ? a->label : "",
		        a->peer ? "P2P" : mu_md_backend_name(ag));
	/* keep the lease alive (and any listener answering) until told */
	if (rc == 0 && a->keep && pipe(hold_pipe) == 0) {
		char c;

		fprintf(stderr, "muster md: holding it until Ctrl-C\n");
		cli_on_signal(stop_waiting, NULL);
		(void)!read(hold_pipe[0], &c, 1);
		cli_signal_disarm();
	}
	mu_md_agent_free(ag);
	return rc == 0 ? 0 : rc == 2 ? 2 : 1;
}

/*
 * Over P2P whoever listens at the address answers and is loaded, as in
 * NIXL (its fetch ignores the name). The user asked for `name`, so another
 * agent's metadata is not printed as name's: the answer is named instead.
 */
static int md_fetch(md_args_t *a, const char *name)
{
	mu_md_agent_t *ag = make_agent(a, "muster-md-cli");
	void *blob = NULL;
	const void *p;
	size_t n, pn;
	uint64_t op;
	char who[256] = "";
	int rc;

	if (ag == NULL)
		return 1;
	if ((rc = need_target(a, ag, "fetch")) != 0) {
		mu_md_agent_free(ag);
		return rc;
	}
	rc = mu_md_fetch_remote(ag, name, a->peer ? &a->p : NULL, a->label, &op);
	if (rc != 0)
		fprintf(stderr, "muster md fetch: cannot fetch '%s': %s\n", name,
		        rc == MU_EARG ? "not a name this command can fetch (empty, longer than "
		                        "255 bytes, or its own: muster-md-cli)" : mu_strerror(rc));
	else
		rc = finish(ag, op, a->timeout, "fetch", who, sizeof(who));
	if (rc == 0 && a->peer != NULL && strcmp(who, name) != 0) {
		fprintf(stderr, "muster md fetch: the agent at %s is '%s', not '%s' (over P2P "
		        "whoever listens there answers; `muster md fetch '%s' --peer %s` prints "
		        "its metadata)\n", a->peer, who, name, who, a->peer);
		rc = 1;
	}
	if (rc == 0 && (rc = mu_md_get_remote(ag, name, a->label, &blob, &n)) != 0)
		fprintf(stderr, "muster md fetch: '%s' sent no metadata under label '%s'%s\n", name,
		        a->label ? a->label : MU_MD_DEFAULT_LABEL,
		        a->peer ? " (over P2P a fetch gets the full blob, as NIXL's SEND)" : "");
	if (rc == 0) {
		/* a muster blob prints its payload; anything else (NIXL's) raw */
		if (!a->raw && mu_md_blob_payload(blob, n, &p, &pn) == 0)
			fwrite(p, 1, pn, stdout);
		else
			fwrite(blob, 1, n, stdout);
		if (fflush(stdout) != 0) {
			fprintf(stderr, "muster md fetch: cannot write the metadata: %s\n",
			        strerror(errno));
			rc = 1;
		}
	}
	mu_free(blob);
	mu_md_agent_free(ag);
	return rc == 0 ? 0 : 1;
}

static int md_invalidate(md_args_t *a)
{
	mu_md_agent_t *ag;
	uint64_t op;
	int rc;

	if (a->name == NULL) {
		fprintf(stderr, "muster md invalidate: needs --name (the agent to withdraw)\n");
		return 2;
	}
	ag = make_agent(a, a->name);
	if (ag == NULL)
		return 1;
	if ((rc = need_target(a, ag, "invalidate")) != 0) {
		mu_md_agent_free(ag);
		return rc;
	}
	/* a store invalidate only deletes what this agent published: publish
	 * an empty marker first, so a fresh process can withdraw a name; and
	 * the label's key, which a TCPStore invalidate would otherwise leave
	 * (etcd's deletes the agent's whole prefix anyway) */
	if (a->peer == NULL && mu_md_set_local(ag, NULL, "", 0) == 0 &&
	    mu_md_send_local(ag, NULL, NULL, &op) == 0)
		finish(ag, op, a->timeout, "announce", NULL, 0);
	if (a->peer == NULL && a->label != NULL &&
	    strcmp(mu_md_backend_name(ag), "TCPStore") == 0 &&
	    mu_md_set_local(ag, a->label, "", 0) == 0 &&
	    mu_md_send_local(ag, NULL, a->label, &op) == 0)
		finish(ag, op, a->timeout, "announce", NULL, 0);
	rc = mu_md_invalidate_local(ag, a->peer ? &a->p : NULL, &op);
	if (rc == 0)
		rc = finish(ag, op, a->timeout, "invalidate", NULL, 0);
	else
		fprintf(stderr, "muster md invalidate: %s\n", mu_strerror(rc));
	mu_md_agent_free(ag);
	return rc == 0 ? 0 : 1;
}

#ifdef MU_HAVE_CURL
/* The agents announced in etcd: one marker NS/agent/ each. */
static int list_etcd(md_args_t *a, const char *eps, const char *ns)
{
	mu_etcd_opts_t o;
	mu_etcd_range_t r;
	mu_etcd_t *e = NULL;
	char prefix[512];
	size_t i, plen;
	int rc;

	plen = (size_t)snprintf(prefix, sizeof(prefix), "%s/", ns);
	if (plen >= sizeof(prefix)) {
		fprintf(stderr, "muster md list: the namespace is too long\n");
		return 2;
	}
	mu_etcd_opts_init(&o);
	o.endpoints = eps;
	o.timeout_ms = (int)(a->timeout * 1000);
	rc = mu_etcd_new(&o, &e);
	if (rc == 0)
		rc = mu_etcd_get(e, prefix, plen, 1, &r);
	if (rc != 0) {
		fprintf(stderr, "muster md list: %s\n", e ? mu_etcd_last_error(e) : mu_strerror(rc));
		mu_etcd_free(e);
		return 1;
	}
	for (i = 0; i < r.n; i++) {
		const char *k = r.kvs[i].key + plen;
		size_t kl = r.kvs[i].klen - plen;

		if (kl > 1 && k[kl - 1] == '/' && memchr(k, '/', kl - 1) == NULL)
			printf("%.*s\n", (int)(kl - 1), k);
	}
	mu_etcd_range_free(&r);
	mu_etcd_free(e);
	return 0;
}
#endif

static int cmp_str(const void *x, const void *y)
{
	return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/*
 * The agents with keys in a TCPStore (LIST, a v2 request): NIXL's keys are
 * nixl/agents/<label>/<agent>/NULL_AGENT; each agent once, sorted.
 */
static int list_tcpstore(md_args_t *a, const char *ep)
{
	static const char pre[] = "nixl/agents/", suf[] = "/NULL_AGENT";
	mu_store_client_opts_t o;
	mu_store_client_t *c = NULL;
	mu_store_value_t *keys = NULL;
	const char **names = NULL;
	char host[256];
	size_t i, n = 0, m = 0;
	int port, rc;

	if (mu__split_hostport(ep, host, sizeof(host), &port) != 0) {
		fprintf(stderr, "muster md list: TCPStore endpoint %s is not host:port\n", ep);
		return 2;
	}
	mu_store_client_opts_init(&o);
	o.host = host;
	o.port = port;
	o.timeout_ms = (int)(a->timeout * 1000);
	rc = mu_store_client_connect(&o, &c);
	if (rc == 0)
		rc = mu_store_list(c, &keys, &n);
	if (rc == -ENOTSUP) {
		fprintf(stderr, "muster md list: the TCPStore at %s cannot list its keys: LIST "
		        "is a v2 request that %s (muster store has it; torch's server has "
		        "it only after 2.6)\n", ep,
		        mu_store_client_dialect(c) == MU_STORE_DIALECT_V1
		        ? "this v1 server (torch 1.13) lacks" : "this server refused");
	} else if (rc != 0) {
		fprintf(stderr, "muster md list: TCPStore %s: %s\n", ep, mu_strerror(rc));
	}
	if (rc == 0 && n > 0 && (names = calloc(n, sizeof(*names))) == NULL)
		rc = MU_ENOMEM;
	for (i = 0; rc == 0 && i < n; i++) {
		char *k = keys[i].data, *slash;
		size_t kl = keys[i].len;

		if (kl <= sizeof(pre) - 1 + sizeof(suf) - 1 || memcmp(k, pre, sizeof(pre) - 1) != 0 ||
		    strcmp(k + kl - (sizeof(suf) - 1), suf) != 0)
			continue;
		k[kl - (sizeof(suf) - 1)] = '\0'; /* <label>/<agent> */
		slash = strchr(k + sizeof(pre) - 1, '/');
		if (slash != NULL && slash[1] != '\0')
			names[m++] = slash + 1;
	}
	if (m > 0)
		qsort(names, m, sizeof(*names), cmp_str);
	for (i = 0; i < m; i++)
		if (i == 0 || strcmp(names[i], names[i - 1]) != 0)
			printf("%s\n", names[i]);
	free(names);
	for (i = 0; i < n; i++)
		mu_free(keys[i].data);
	mu_free(keys);
	mu_store_client_close(c);
	return rc == 0 ? 0 : 1;
}

/* The agents announced in the store the options and environment select,
 * by the agent's own rules (mu_md_opts_t). */
static int md_list(md_args_t *a)
{
	mu_md_agent_t *ag = make_agent(a, "muster-md-cli");
	const char *be;
	int rc;

	if (ag == NULL)
		return 1;
	be = mu_md_backend_name(ag);
	if (strcmp(be, "TCPStore") == 0) {
		rc = list_tcpstore(a, mu_md_store_endpoint(ag));
	} else if (strcmp(be, "ETCD") == 0) {
#ifdef MU_HAVE_CURL
		rc = list_etcd(a, mu_md_store_endpoint(ag), mu_md_etcd_namespace(ag));
#else
		rc = 1; /* make_agent has refused already */
#endif
	} else {
		fprintf(stderr, "muster md list: needs a store: " STORE_HELP "\n");
		rc = 2;
	}
	mu_md_agent_free(ag);
	return rc;
}

int cmd_md(int argc, char **argv)
{
	md_args_t a;
	int npos, rc;
	cli_opt_t opts[] = {
		COMMON_OPTS(a),
		{"name", OPT_STR, &a.name, "AGENT", "the agent to act as (publish, invalidate)"},
		{"value", OPT_STR, &a.value, "TEXT", "publish: the metadata payload"},
		{"file", OPT_STR, &a.file, "PATH", "publish: read the payload from a file"},
		{"listen-port", OPT_INT, &a.listen_port, "PORT", "publish: also answer P2P fetches on this port"},
		{"lease-ttl", OPT_DOUBLE, &a.lease_ttl, "SECONDS", "etcd lease of the keys (default 10; 0: keep them forever)"},
		{"hold", OPT_FLAG, &a.keep, NULL, "publish: keep running (lease, listener) until Ctrl-C"},
		{"cache-limit", OPT_STR, &a.cache_limit, "SIZE", "bytes of other agents' metadata the agent keeps, e.g. 64M (default 128M; past it, pushed-only agents go first, then the least recently used)"},
		{"raw", OPT_FLAG, &a.raw, NULL, "fetch: print the whole blob, not its payload"},
		CLI_BUDGET_OPTS(a.cb),
	};
	cli_cmd_t cmd = {
		"muster md publish|fetch NAME|invalidate|list [options]",
		"Debug a NIXL-style metadata exchange from the command line.\n"
		"  publish --name A --value TEXT   publish A's metadata (to the store, or --peer)\n"
		"  fetch A                         fetch A's metadata and print its payload\n"
		"  invalidate --name A             withdraw A's metadata (store: its keys go,\n"
		"                                  and peers that fetched it drop it; --peer: INVL;\n"
		"                                  a TCPStore: the full blob's key, and --label's)\n"
		"  list                            the agents announced in the store (a TCPStore\n"
		"                                  needs LIST: muster store, torch after 2.6)\n"
		"The store comes from --etcd/--tcpstore or the environment (MUSTER_ETCD_ENDPOINTS,\n"
		"NIXL_ETCD_ENDPOINTS, NIXL_TCPSTORE_ENDPOINT, ...); --peer talks P2P instead.",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 1, 2};

	memset(&a, 0, sizeof(a));
	a.timeout = 30;
	a.lease_ttl = 10;
	cli_budget_init(&a.cb);
	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if ((rc = cli_budget_apply("muster md", &a.cb, &a.budget)) != 0)
		return rc;
	if ((rc = parse_peer(&a)) != 0)
		return rc;
	if (a.cache_limit != NULL &&
	    (cli_parse_size(a.cache_limit, &a.cache_bytes) != 0 || a.cache_bytes == 0 ||
	     a.cache_bytes > SIZE_MAX)) {
		fprintf(stderr, "muster md: --cache-limit %s is not a size (try 64M)\n", a.cache_limit);
		return 2;
	}
	/* failures reach the user through make_agent() (mu_md_agent_new's err)
	 * and finish() (the event's detail): the log would repeat them */
	if (a.label != NULL && strlen(a.label) > 255) {
		fprintf(stderr, "muster md: --label is longer than 255 bytes\n");
		return 2;
	}
	if (strcmp(argv[0], "fetch") == 0) {
		if (npos == 2)
			return md_fetch(&a, argv[1]);
		fprintf(stderr, "muster md fetch: needs the agent's NAME, and only that "
		        "(muster md fetch NAME [options])\n");
		return 2;
	}
	if (strcmp(argv[0], "publish") != 0 && strcmp(argv[0], "invalidate") != 0 &&
	    strcmp(argv[0], "list") != 0) {
		fprintf(stderr, "muster md: unknown use '%s' (see muster md --help)\n", argv[0]);
		return 2;
	}
	if (npos != 1) {
		fprintf(stderr, "muster md %s: takes options only, not '%s' (see muster md "
		        "--help)\n", argv[0], argv[1]);
		return 2;
	}
	if (strcmp(argv[0], "publish") == 0)
		return md_publish(&a);
	if (strcmp(argv[0], "invalidate") == 0)
		return md_invalidate(&a);
	return md_list(&a);
}
