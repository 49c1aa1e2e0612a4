/* SPDX-License-Identifier: MIT */
/*
 * The md agent's configuration: defaults, the store and its endpoints from
 * the API or the environment (MUSTER_*, then NIXL's variables, spec
 * nixl-metadata.md section 9), the TCPStore timeouts, and the choice of
 * the store backend. Everything here runs once, in mu_md_agent_new; the
 * agent's other parts read the settled copy in a->o.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc_int.h"
#include "core/opts_int.h"
#include "muster/md.h"
#include "md/md_int.h"

void mu__md_opts_defaults(mu_md_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->struct_size = sizeof(*o);
	o->listen_host = "0.0.0.0";
	o->listen_port = 8888;
	o->etcd_watch_timeout = 5;
	o->lease_ttl = 10;
	o->store_timeout = 0; /* resolved by timeout_of */
	o->op_timeout = 0;
	mu_budget_init(&o->listen_budget);
}

void mu_md_opts_init_size(mu_md_opts_t *o, size_t size)
{
	mu_md_opts_t d;

	mu__md_opts_defaults(&d);
	mu__opts_fill(o, size, &d, sizeof(d));
}

/*
 * Where the store comes from, as a whole: the API's options when they name
 * one, else the MUSTER_* variables when either store variable is set, else
 * NIXL's. A source's endpoints are never mixed with another's, so an
 * inherited NIXL_ETCD_ENDPOINTS does not clash with a store given by the
 * API or by MUSTER_TCPSTORE_ENDPOINT. The namespace is not a store choice:
 * API, then MUSTER_ETCD_NAMESPACE, then NIXL_ETCD_NAMESPACE, each alone.
 * A variable that is set counts even when empty.
 */
typedef struct {
	const char *etcd, *ns, *ts;
	const char *etcd_from, *ns_from, *ts_from;
} source_t;

static void pick_source(const mu_md_opts_t *o, source_t *src)
{
	static const char *const vars[2][2] = {
		{"MUSTER_ETCD_ENDPOINTS", "MUSTER_TCPSTORE_ENDPOINT"},
		{"NIXL_ETCD_ENDPOINTS", "NIXL_TCPSTORE_ENDPOINT"},
	};

	memset(src, 0, sizeof(*src));
	src->etcd = o->etcd_endpoints;
	src->ts = o->tcpstore_endpoint;
	src->ns = o->etcd_namespace;
	src->etcd_from = "etcd_endpoints";
	src->ts_from = "tcpstore_endpoint";
	src->ns_from = "etcd_namespace";
	if (o->no_env)
		return;
	if (src->ns == NULL) {
		src->ns_from = getenv("MUSTER_ETCD_NAMESPACE") ? "MUSTER_ETCD_NAMESPACE"
		               : "NIXL_ETCD_NAMESPACE";
		src->ns = getenv(src->ns_from);
	}
	if (src->etcd != NULL || src->ts != NULL)
		return;
	for (int i = 0; i < 2 && src->etcd == NULL && src->ts == NULL; i++) {
		src->etcd = getenv(vars[i][0]);
		src->ts = getenv(vars[i][1]);
		src->etcd_from = vars[i][0];
		src->ts_from = vars[i][1];
	}
}

/*
 * A timeout in seconds: the caller's when > 0; else, for a TCPStore agent
 * and unless no_env, the first of the two variables that is set (in
 * milliseconds, as NIXL reads NIXL_TCPSTORE_TIMEOUT_MS and
 * NIXL_TCPSTORE_OP_TIMEOUT_MS); else def.
 */
static int timeout_of(mu_md_agent_t *a, const mu_md_opts_t *o, const char *what,
                      double given, const char *mine, const char *nixl, double def,
                      double *out)
{
	const char *var = mine, *v;
	char *end;
	long ms;

	if (!(given >= 0)) { /* negative or NaN */
		mu__md_setup_error(a, "agent %.64s: %s must be >= 0 (0: the default)",
		                   o->name, what);
		return MU_EARG;
	}
	*out = given > 0 ? given : def;
	if (given > 0 || o->no_env || a->store != &mu__md_backend_tcpstore)
		return 0;
	v = getenv(mine);
	if (v == NULL)
		v = getenv(var = nixl);
	if (v == NULL)
		return 0;
	errno = 0;
	ms = strtol(v, &end, 10);
	if (end == v || *end != '\0' || errno != 0 || ms <= 0 || ms > INT_MAX) {
		mu__md_setup_error(a, "agent %.64s: %s=\"%.32s\" is not a positive number "
		                   "of milliseconds", o->name, var, v);
		return MU_EARG;
	}
	*out = (double)ms / 1000;
	return 0;
}

/* A backend's method table must be of our version and complete. */
int mu__md_backend_check(mu_md_agent_t *a, const mu__md_backend_t *b)
{
	if (b->version != MU_MD_BACKEND_VERSION || b->open == NULL || b->close == NULL ||
	    b->send == NULL || b->fetch == NULL || b->invalidate == NULL ||
	    (b->poll == NULL) != (b->wakeup == NULL)) {
		mu__md_setup_error(a, "agent %.64s: the %s backend's method table is version "
		                   "%d or incomplete; this agent needs a complete version %d",
		                   a->name, b->name ? b->name : "(unnamed)", b->version,
		                   MU_MD_BACKEND_VERSION);
		return -ENOTSUP;
	}
	return 0;
}

/* Settle the configuration and pick the store backend. */
int mu__md_configure(mu_md_agent_t *a, const mu_md_opts_t *o)
{
	source_t src;
	const char *etcd, *ns, *ts, *etcd_from, *ns_from, *ts_from;

	pick_source(o, &src);
	etcd = src.etcd;
	ns = src.ns;
	ts = src.ts;
	etcd_from = src.etcd_from;
	ns_from = src.ns_from;
	ts_from = src.ts_from;
	if (etcd != NULL && ts != NULL) {
		mu__md_setup_error(a, "agent %.64s: etcd (%s=\"%.64s\") and a TCPStore "
		                   "(%s=\"%.64s\") are both configured; they are mutually "
		                   "exclusive", o->name, etcd_from, etcd, ts_from, ts);
		return MU_EARG;
	}
	if ((etcd != NULL && etcd[0] == '\0') || (ts != NULL && ts[0] == '\0')) {
		mu__md_setup_error(a, "agent %.64s: the store endpoint %s is set but empty",
		                   o->name, etcd != NULL ? etcd_from : ts_from);
		return MU_EARG;
	}
	if (mu__copy_str(a->etcd_endpoints, sizeof(a->etcd_endpoints), etcd) ||
	    mu__copy_str(a->etcd_namespace, sizeof(a->etcd_namespace), ns ? ns : "/nixl/agents/") ||
	    mu__copy_str(a->tcpstore_endpoint, sizeof(a->tcpstore_endpoint), ts) ||
	    mu__copy_str(a->listen_host, sizeof(a->listen_host), o->listen_host ? o->listen_host : "0.0.0.0")) {
		mu__md_setup_error(a, "agent %.64s: %s is too long", o->name,
		                   etcd && strlen(etcd) >= sizeof(a->etcd_endpoints) ? etcd_from
		                   : ns && strlen(ns) >= sizeof(a->etcd_namespace) ? ns_from
		                   : ts && strlen(ts) >= sizeof(a->tcpstore_endpoint) ? ts_from
		                                                                : "listen_host");
		return MU_EARG;
	}
	a->o.etcd_endpoints = etcd ? a->etcd_endpoints : NULL;
	a->o.etcd_namespace = a->etcd_namespace;
	a->o.tcpstore_endpoint = ts ? a->tcpstore_endpoint : NULL;
	a->o.listen_host = a->listen_host;
	if (etcd != NULL) {
#ifdef MU_HAVE_CURL
		a->store = &mu__md_backend_etcd;
#else
		mu__md_setup_error(a, "agent %.64s: %s is set, but this libmuster was "
		                   "built without etcd (libcurl)", o->name, etcd_from);
		return MU_EARG;
#endif
	} else if (ts != NULL) {
		a->store = &mu__md_backend_tcpstore;
	}
	if (timeout_of(a, o, "store_timeout", o->store_timeout, "MUSTER_TCPSTORE_TIMEOUT_MS",
	               "NIXL_TCPSTORE_TIMEOUT_MS", 30, &a->o.store_timeout) != 0 ||
	    timeout_of(a, o, "op_timeout", o->op_timeout, "MUSTER_TCPSTORE_OP_TIMEOUT_MS",
	               "NIXL_TCPSTORE_OP_TIMEOUT_MS", 5, &a->o.op_timeout) != 0)
		return MU_EARG;
	if (mu__md_backend_check(a, a->p2p) != 0 ||
	    (a->store != NULL && mu__md_backend_check(a, a->store) != 0))
		return -ENOTSUP;
	return 0;
}
