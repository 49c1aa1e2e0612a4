/* SPDX-License-Identifier: MIT */
/*
 * TCPStore backend: NIXL's key layout in a c10d store (muster's or
 * torch's), through muster's store client:
 *
 *   /nixl/agents/<label>/<agent>/NULL_AGENT
 *
 * (the client puts the leading "/" there, as torch's does; NIXL's layout
 * starts the same way, so the keys are shared with torch clients). The
 * store has no watches: invalidation deletes what this agent published
 * and peers are not told, as in NIXL. A fetch of a key not there yet is
 * re-probed (CHECK, then GET) from the worker's poll until store_timeout,
 * without holding up other work.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "muster/md.h"
#include "muster/store.h"
#include "core/alloc_int.h"
#include "core/log_int.h"
#include "core/net_int.h"
#include "core/strmap_int.h"
#include "core/time_int.h"
#include "md/md_int.h"

#define REPROBE_MS 50

typedef struct {
	mu__list_t node;
	mu__md_op_t *op;
	int64_t deadline;
} pending_t;

typedef struct {
	mu_md_agent_t *a;
	mu_store_client_t *c;   /* NULL until the first exchange needs it */
	char host[256];
	int port;
	mu__strmap_t published; /* keys we set since the last invalidate */
	mu__list_t pending;
	int efd;                /* wakeup */
} ts_t;

static void key_of(const char *agent, const char *label, char *out, size_t n)
{
	snprintf(out, n, "nixl/agents/%s/%s/NULL_AGENT", label, agent);
}

static int ms_of(double s)
{
	return s * 1000 >= INT_MAX ? INT_MAX : (int)(s * 1000);
}

/* The connection, made on first use (the store may start after us). */
static int client(ts_t *t, char *why, size_t wl)
{
	mu_store_client_opts_t o;
	int rc;

	if (t->c != NULL)
		return 0;
	mu_store_client_opts_init(&o);
	o.host = t->host;
	o.port = t->port;
	/* the first connect waits up to store_timeout for a store that is
	 * still coming up (NIXL's bring-up budget); each operation after it,
	 * reconnects included, is bounded by op_timeout */
	o.timeout_ms = ms_of(t->a->o.op_timeout);
	o.connect_timeout_ms = ms_of(t->a->o.store_timeout);
	o.max_value_bytes = MU_MD_MAX_BLOB;
	rc = mu_store_client_connect(&o, &t->c);
	if (rc != 0)
		snprintf(why, wl, "cannot reach the TCPStore at %.100s:%d: %.100s", t->host,
		         t->port, mu_strerror(rc));
	return rc;
}

static int ts_send(void *st, mu__md_op_t *op, char *why, size_t wl)
{
	ts_t *t = st;
	char key[600];
	int rc = client(t, why, wl);

	if (rc != 0)
		return rc;
	key_of(t->a->name, op->label, key, sizeof(key));
	rc = mu_store_set(t->c, key, op->blob, op->len);
	if (rc == 0)
		rc = mu__strmap_put(&t->published, key, strlen(key), t, NULL);
	else
		snprintf(why, wl, "set %.100s: %.100s", key, mu_strerror(rc));
	return rc;
}

/* One probe: 0 loaded, 1 not there yet, or an error. */
static int probe(ts_t *t, mu__md_op_t *op, char *why, size_t wl)
{
	char key[600], who[MU_MD_NAME_MAX + 1];
	const char *keys[1] = {key};
	mu_store_value_t v;
	int rc, ready = 0;

	if ((rc = client(t, why, wl)) != 0)
		return rc;
	key_of(op->name, op->label, key, sizeof(key));
	/* CHECK first, as NIXL does: a GET of a missing key would close a
	 * v1 connection (torch 1.13) */
	rc = mu_store_check(t->c, keys, 1, &ready);
	if (rc == 0 && !ready)
		return 1;
	if (rc == 0)
		rc = mu_store_get(t->c, key, &v);
	if (rc != 0) {
		snprintf(why, wl, "%.100s: %.100s", key, mu_strerror(rc));
		return rc;
	}
	if (v.len == 0) { /* an empty value counts as absent */
		mu_free(v.data);
		return 1;
	}
	rc = mu__md_load(t->a, op->label, v.data, v.len, who, sizeof(who));
	mu_free(v.data);
	if (rc == 0 && strcmp(who, op->name) != 0) {
		snprintf(why, wl, "%.100s holds metadata of %.100s, not of %.100s", key, who, op->name);
		rc = MU_EPROTO;
	} else if (rc != 0) {
		snprintf(why, wl, "%.100s: %.100s", key,
		         rc == MU_EPROTO ? "not a metadata blob"
		         : rc == -EEXIST ? "different metadata of that agent is loaded; invalidate it first"
		                         : mu_strerror(rc));
	}
	return rc;
}

static int ts_fetch(void *st, mu__md_op_t *op, char *why, size_t wl)
{
	ts_t *t = st;
	pending_t *p;
	int rc = probe(t, op, why, wl);

	if (rc != 1)
		return rc;
	p = mu__calloc(1, sizeof(*p));
	if (p == NULL)
		return MU_ENOMEM;
	p->op = op;
	p->deadline = mu__deadline((int64_t)(t->a->o.store_timeout * 1000));
	mu__list_insert_tail(&t->pending, &p->node);
	return 1;
}

static int ts_invalidate(void *st, mu__md_op_t *op, char *why, size_t wl)
{
	ts_t *t = st;
	mu__strmap_entry_t *e = NULL;
	size_t slot = 0;
	int rc = 0, deleted;

	(void)op;
	if (t->published.count == 0)
		return 0;
	if ((rc = client(t, why, wl)) != 0)
		return rc;
	while (rc == 0 && (e = mu__strmap_next(&t->published, &slot, e)) != NULL)
		rc = mu_store_delete(t->c, e->key, &deleted);
	if (rc != 0) {
		snprintf(why, wl, "delete: %.100s", mu_strerror(rc));
		return rc;
	}
	mu__strmap_free(&t->published, NULL);
	mu__strmap_init(&t->published);
	return 0;
}

static void finish(ts_t *t, pending_t *p, int rc, const char *why)
{
	mu__list_remove(&p->node);
	mu__md_complete(t->a, p->op, rc, NULL, why);
	mu__free(p);
}

static int ts_poll(void *st, int ms)
{
	ts_t *t = st;
	struct pollfd pfd = {t->efd, POLLIN, 0};
	mu__list_t *it, *tmp;
	uint64_t v;
	char why[256];

	if (!mu__list_empty(&t->pending) && ms > REPROBE_MS)
		ms = REPROBE_MS;
	if (ms > 0 && poll(&pfd, 1, ms) > 0)
		(void)!read(t->efd, &v, sizeof(v));
	mu__list_foreach_safe(it, tmp, &t->pending) {
		pending_t *p = mu__container_of(it, pending_t, node);
		int rc;

		why[0] = '\0';
		rc = probe(t, p->op, why, sizeof(why));
		if (rc == 1 && mu__now_ms() < p->deadline)
			continue;
		if (rc == 1) {
			snprintf(why, sizeof(why), "%.100s published nothing under \"%.60s\" within %g s",
			         p->op->name, p->op->label, t->a->o.store_timeout);
			rc = -ETIMEDOUT;
		}
		finish(t, p, rc, why);
	}
	return 0;
}

static void ts_wakeup(void *st)
{
	uint64_t one = 1;

	(void)!write(((ts_t *)st)->efd, &one, sizeof(one));
}

static void ts_close(void *st)
{
	ts_t *t = st;
	mu__list_t *it, *tmp;

	if (t == NULL)
		return;
	mu__list_foreach_safe(it, tmp, &t->pending)
		finish(t, mu__container_of(it, pending_t, node), MU_ESTOPPED,
		       "the agent stopped while the fetch waited");
	mu_store_client_close(t->c);
	mu__strmap_free(&t->published, NULL);
	if (t->efd >= 0)
		close(t->efd);
	mu__free(t);
}

static int ts_open(mu_md_agent_t *a, void **st)
{
	ts_t *t = mu__calloc(1, sizeof(*t));

	if (t == NULL)
		return MU_ENOMEM;
	t->a = a;
	mu__strmap_init(&t->published);
	mu__list_init(&t->pending);
	t->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (t->efd < 0) {
		int rc = -errno;

		ts_close(t);
		return rc;
	}
	if (mu__split_hostport(a->o.tcpstore_endpoint, t->host, sizeof(t->host), &t->port) != 0 ||
	    t->port == 0) {
		mu__md_setup_error(a, "agent %.64s: TCPStore endpoint \"%.100s\" is not host:port",
		                   a->name, a->o.tcpstore_endpoint);
		ts_close(t);
		return MU_EARG;
	}
	*st = t;
	return 0;
}

const mu__md_backend_t mu__md_backend_tcpstore = {
	MU_MD_BACKEND_VERSION, "TCPStore", ts_open, ts_close,
	ts_send, ts_fetch, ts_invalidate, ts_poll, ts_wakeup,
};
