/* SPDX-License-Identifier: MIT */
/*
 * The md agent: creation, routing of each exchange to P2P or the one
 * store, the local metadata, and the completion events. Configuration is
 * settled in config.c, the remote cache (NIXL's load rules, its byte
 * limit) is in cache.c, the queue and its thread are in worker.c, the
 * transports in backend_*.c.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "muster/md.h"
#include "core/alloc_int.h"
#include "core/log_int.h"
#include "core/metrics_int.h"
#include "core/opts_int.h"
#include "md/md_int.h"

#define EVENTS_MAX 4096

/* Log why creation failed and, unless said already, tell the caller. */
static void say(char *err, size_t el, int *said, const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));

static void say(char *err, size_t el, int *said, const char *fmt, va_list ap)
{
	char text[512];

	vsnprintf(text, sizeof(text), fmt, ap);
	mu__log(MU_LOG_ERROR, "md", "%s", text);
	if (!*said && err != NULL && el > 0)
		snprintf(err, el, "%s", text);
	*said = 1;
}

void mu__md_setup_error(mu_md_agent_t *a, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	say(a->setup_err, a->setup_errlen, &a->setup_said, fmt, ap);
	va_end(ap);
}

/* The same, before there is an agent; returns rc. */
static int early_error(char *err, size_t el, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int early_error(char *err, size_t el, int rc, const char *fmt, ...)
{
	va_list ap;
	int said = 0;

	va_start(ap, fmt);
	say(err, el, &said, fmt, ap);
	va_end(ap);
	return rc;
}

static void agent_destroy(mu_md_agent_t *a)
{
	mu__strmap_free(&a->local, mu__free);
	mu__md_cache_free(a);
	mu__strmap_free(&a->done, mu__free); /* the done_t records */
	mu__free(a->events);
	if (a->efd >= 0)
		close(a->efd);
	uv_cond_destroy(&a->done_cond);
	uv_cond_destroy(&a->work_cond);
	uv_mutex_destroy(&a->lock);
	mu__free(a);
}

static void metrics_init(mu_md_agent_t *a, mu_metrics_t *m)
{
	a->m_sent = mu__metric_family(m, MU_METRIC_COUNTER, "muster_md_publishes_total",
	                              "Metadata published (sent), by backend.", "backend", NULL, 0);
	a->m_fetched = mu__metric_family(m, MU_METRIC_COUNTER, "muster_md_fetches_total",
	                                 "Remote metadata fetched, by backend.", "backend", NULL, 0);
	a->m_invalidated = mu__metric_family(m, MU_METRIC_COUNTER, "muster_md_invalidations_total",
	                                     "Metadata invalidated, by backend.", "backend", NULL,
	                                     0);
	a->m_failed = mu__metric_family(m, MU_METRIC_COUNTER, "muster_md_failures_total",
	                                "Publishes, fetches and invalidations that failed, by "
	                                "backend.", "backend", NULL, 0);
}

int mu_md_agent_new(const mu_md_opts_t *uo, mu_md_agent_t **out, char *err, size_t el)
{
	mu_md_opts_t oo, *o = &oo;
	mu_md_agent_t *a;
	int rc;

	*out = NULL;
	if (err == NULL)
		el = 0;
	if (el > 0)
		err[0] = '\0';
	mu__md_opts_defaults(o);
	if (mu__opts_read(o, sizeof(*o), uo) != 0)
		return early_error(err, el, MU_EARG, "agent options not made by mu_md_opts_init, or "
		                   "asking for what this library (%s) does not have", mu_version());
	if (o->name == NULL || o->name[0] == '\0' || strlen(o->name) > MU_MD_NAME_MAX)
		return early_error(err, el, MU_EARG, "an agent needs a name of 1 to %d bytes",
		                   MU_MD_NAME_MAX);
	a = mu__calloc(1, sizeof(*a));
	if (a == NULL)
		return early_error(err, el, MU_ENOMEM, "agent %.64s: %s", o->name,
		                   mu_strerror(MU_ENOMEM));
	memcpy(a->name, o->name, strlen(o->name) + 1);
	a->setup_err = err;
	a->setup_errlen = el;
	a->o = *o;
	a->o.name = a->name;
	metrics_init(a, o->metrics);
	a->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	uv_mutex_init(&a->lock);
	uv_cond_init(&a->work_cond);
	uv_cond_init(&a->done_cond);
	mu__strmap_init(&a->local);
	mu__md_cache_init(a);
	mu__strmap_init(&a->done);
	mu__list_init(&a->queue);
	mu__list_init(&a->done_order);
	a->ev_cap = 64;
	a->events = mu__calloc(a->ev_cap, sizeof(*a->events));
	a->p2p = &mu__md_backend_p2p;
	rc = a->efd < 0 ? -errno : a->events == NULL ? MU_ENOMEM : mu__md_configure(a, o);
	if (rc == 0)
		rc = a->p2p->open(a, &a->p2p_st);
	if (rc == 0 && a->store != NULL && (rc = a->store->open(a, &a->store_st)) != 0) {
		a->p2p->close(a->p2p_st);
		a->p2p_st = NULL;
	}
	if (rc == 0 && (rc = mu__md_worker_start(a)) != 0) {
		if (a->store != NULL)
			a->store->close(a->store_st);
		a->p2p->close(a->p2p_st);
	}
	if (rc != 0) {
		/* every failure says why; this is for those that had no words */
		if (!a->setup_said)
			mu__md_setup_error(a, "agent %.64s: %s", o->name, mu_strerror(rc));
		agent_destroy(a);
		return rc;
	}
	a->setup_err = NULL; /* the caller's, for this call only */
	a->setup_errlen = 0;
	*out = a;
	return 0;
}

void mu_md_agent_free(mu_md_agent_t *a)
{
	if (a == NULL)
		return;
	mu__md_worker_stop(a); /* drains the queue, then closes the backends */
	agent_destroy(a);
}

const char *mu_md_agent_name(const mu_md_agent_t *a)
{
	return a->name;
}

int mu_md_listen_port(const mu_md_agent_t *a)
{
	return a->listen_port;
}

const char *mu_md_backend_name(const mu_md_agent_t *a)
{
	return a->store != NULL ? a->store->name : a->p2p->name;
}

const char *mu_md_store_endpoint(const mu_md_agent_t *a)
{
	return a->o.etcd_endpoints != NULL ? a->o.etcd_endpoints : a->o.tcpstore_endpoint;
}

const char *mu_md_etcd_namespace(const mu_md_agent_t *a)
{
	return a->o.etcd_namespace;
}

/* ---- caches ---- */

mu__md_blob_t *mu__md_blob_new(const void *p, size_t n)
{
	mu__md_blob_t *b = mu__malloc(sizeof(*b) + n);

	if (b != NULL) {
		b->len = n;
		if (n > 0)
			memcpy(b->data, p, n);
	}
	return b;
}

const char *mu__md_label_or_default(const char *label)
{
	return label != NULL && label[0] != '\0' ? label : MU_MD_DEFAULT_LABEL;
}

int mu_md_set_local_blob(mu_md_agent_t *a, const char *label, const void *blob,
                         size_t n)
{
	char who[MU_MD_NAME_MAX + 1];
	mu__md_blob_t *b;
	void *old = NULL;
	int rc;

	label = mu__md_label_or_default(label);
	if (strlen(label) > MU_MD_LABEL_MAX || n > MU_MD_MAX_BLOB)
		return MU_ETOOBIG;
	if (mu_md_blob_name(blob, n, who, sizeof(who)) != 0 || strcmp(who, a->name) != 0)
		return MU_EARG; /* not a blob, or someone else's */
	b = mu__md_blob_new(blob, n);
	if (b == NULL)
		return MU_ENOMEM;
	uv_mutex_lock(&a->lock);
	rc = mu__strmap_put(&a->local, label, strlen(label), b, &old);
	uv_mutex_unlock(&a->lock);
	mu__free(rc == 0 ? old : b);
	/* Over P2P, setting it is publishing it (peers fetch from our
	 * listener); a store backend publishes when its send completes. */
	if (rc == 0 && a->store == NULL)
		mu__metric_add(a->m_sent, mu_md_backend_name(a), 1);
	return rc;
}

int mu_md_set_local(mu_md_agent_t *a, const char *label, const void *payload,
                    size_t n)
{
	const char *l = mu__md_label_or_default(label);
	void *blob;
	size_t len;
	int rc = mu__md_blob_make(a->name, strcmp(l, MU_MD_DEFAULT_LABEL) ? l : NULL,
	                          payload, n, &blob, &len);

	if (rc == 0)
		rc = mu_md_set_local_blob(a, label, blob, len);
	mu__free(blob);
	return rc;
}

mu__md_blob_t *mu__md_local_copy(mu_md_agent_t *a, const char *label)
{
	mu__md_blob_t *b, *c = NULL;

	label = mu__md_label_or_default(label);
	uv_mutex_lock(&a->lock);
	b = mu__strmap_get(&a->local, label, strlen(label));
	if (b != NULL)
		c = mu__md_blob_new(b->data, b->len);
	uv_mutex_unlock(&a->lock);
	return c;
}

int mu__md_local_labels(mu_md_agent_t *a, char ***labels, size_t *n)
{
	int rc;

	uv_mutex_lock(&a->lock);
	rc = mu__strmap_keys(&a->local, labels, n);
	uv_mutex_unlock(&a->lock);
	return rc;
}

int mu_md_get_local(mu_md_agent_t *a, const char *label, void **blob, size_t *n)
{
	mu__md_blob_t *b = mu__md_local_copy(a, label);

	*blob = NULL;
	*n = 0;
	if (b == NULL)
		return -ENOENT;
	*n = b->len;
	memmove(b, b->data, b->len); /* hand out the bytes, not the header */
	*blob = b;
	return 0;
}

/* ---- events ---- */

/* Under a->lock. A full ring drops its oldest event: the newest matter. */
static void push_event(mu_md_agent_t *a, const mu_md_event_t *ev)
{
	uint64_t one = 1;

	if (a->ev_count == a->ev_cap && a->ev_cap < EVENTS_MAX) {
		mu_md_event_t *n = mu__calloc(a->ev_cap * 2, sizeof(*n));

		if (n != NULL) {
			for (size_t i = 0; i < a->ev_count; i++)
				n[i] = a->events[(a->ev_head + i) % a->ev_cap];
			mu__free(a->events);
			a->events = n;
			a->ev_head = 0;
			a->ev_cap *= 2;
		}
	}
	if (a->ev_count == a->ev_cap) {
		a->ev_head = (a->ev_head + 1) % a->ev_cap;
		a->ev_count--;
	}
	a->events[(a->ev_head + a->ev_count) % a->ev_cap] = *ev;
	a->ev_count++;
	(void)!write(a->efd, &one, sizeof(one));
}

static void emit(mu_md_agent_t *a, const mu_md_event_t *ev)
{
	uv_mutex_lock(&a->lock);
	push_event(a, ev);
	uv_mutex_unlock(&a->lock);
	if (a->o.on_event != NULL)
		a->o.on_event(a->o.ud, ev);
}

static void fill(mu_md_event_t *ev, uint64_t op, mu_md_event_kind_t kind,
                 int status, const char *name, const char *detail)
{
	memset(ev, 0, sizeof(*ev));
	ev->op = op;
	ev->kind = kind;
	ev->status = status;
	snprintf(ev->name, sizeof(ev->name), "%s", name ? name : "");
	snprintf(ev->detail, sizeof(ev->detail), "%s",
	         detail && detail[0] ? detail : status ? mu_strerror(status) : "");
}

void mu__md_event(mu_md_agent_t *a, mu_md_event_kind_t kind, int status,
                  const char *name, const char *detail)
{
	mu_md_event_t ev;

	fill(&ev, 0, kind, status, name, detail);
	emit(a, &ev);
}

int mu_md_event_fd(mu_md_agent_t *a)
{
	return a->efd;
}

int mu_md_next_event(mu_md_agent_t *a, mu_md_event_t *ev)
{
	uint64_t v;
	int rc = -EAGAIN;

	uv_mutex_lock(&a->lock);
	if (a->ev_count > 0) {
		*ev = a->events[a->ev_head];
		a->ev_head = (a->ev_head + 1) % a->ev_cap;
		a->ev_count--;
		rc = 0;
	}
	if (a->ev_count == 0) /* drain the eventfd: not readable any more */
		(void)!read(a->efd, &v, sizeof(v));
	uv_mutex_unlock(&a->lock);
	return rc;
}

/* ---- completions ---- */

typedef struct {
	mu__list_t node;
	uint64_t id;
	int status;
} done_t;

void mu__md_complete(mu_md_agent_t *a, mu__md_op_t *op, int status,
                     const char *name, const char *detail)
{
	mu_md_event_t ev;
	done_t *d = mu__malloc(sizeof(*d));

	mu__metric_add(status != 0 ? a->m_failed : op->kind == MU_MD_SENT ? a->m_sent
	               : op->kind == MU_MD_FETCHED ? a->m_fetched : a->m_invalidated,
	               mu_md_backend_name(a), 1);
	if (status != 0)
		mu__log(MU_LOG_WARN, "md", "agent %s: %s failed: %s", a->name,
		        op->kind == MU_MD_SENT ? "send" : op->kind == MU_MD_FETCHED ? "fetch" : "invalidate",
		        detail && detail[0] ? detail : mu_strerror(status));
	fill(&ev, op->id, op->kind, status, name ? name : op->name, detail);
	uv_mutex_lock(&a->lock);
	if (d != NULL) {
		d->id = op->id;
		d->status = status;
		if (mu__strmap_put(&a->done, &d->id, sizeof(d->id), d, NULL) == 0) {
			mu__list_insert_tail(&a->done_order, &d->node);
			a->ndone++;
		} else {
			mu__free(d);
		}
	}
	while (a->ndone > 4096) { /* keep the newest results */
		done_t *old = mu__container_of(mu__list_head(&a->done_order), done_t, node);

		mu__list_remove(&old->node);
		mu__strmap_remove(&a->done, &old->id, sizeof(old->id));
		mu__free(old);
		a->ndone--;
	}
	/* queue the event before waking waiters, under the same lock: when
	 * mu_md_wait returns, the event is already there to be taken (the
	 * CLI prints its detail right after the wait) */
	push_event(a, &ev);
	uv_cond_broadcast(&a->done_cond);
	uv_mutex_unlock(&a->lock);
	if (a->o.on_event != NULL)
		a->o.on_event(a->o.ud, &ev);
	mu__free(op->blob);
	mu__free(op);
}

int mu_md_wait(mu_md_agent_t *a, uint64_t op, int timeout_ms, int *status)
{
	int64_t deadline = timeout_ms < 0 ? -1 : (int64_t)uv_hrtime() / 1000000 + timeout_ms;
	done_t *d;
	int rc = -ETIMEDOUT;

	uv_mutex_lock(&a->lock);
	for (;;) {
		d = mu__strmap_get(&a->done, &op, sizeof(op));
		if (d != NULL) {
			*status = d->status;
			rc = 0;
			break;
		}
		if (op == 0 || op > a->next_op) {
			rc = -ENOENT;
			break;
		}
		if (deadline < 0) {
			uv_cond_wait(&a->done_cond, &a->lock);
		} else {
			int64_t left = deadline - (int64_t)uv_hrtime() / 1000000;

			if (left <= 0 || uv_cond_timedwait(&a->done_cond, &a->lock,
			                                   (uint64_t)left * 1000000) != 0) {
				d = mu__strmap_get(&a->done, &op, sizeof(op));
				if (d != NULL) {
					*status = d->status;
					rc = 0;
				}
				break;
			}
		}
	}
	uv_mutex_unlock(&a->lock);
	return rc;
}

/* ---- exchange calls: validate, snapshot, queue ---- */

static mu__md_op_t *op_new(mu_md_agent_t *a, mu_md_event_kind_t kind,
                           const mu_md_peer_t *peer, const char *label,
                           int *rc)
{
	mu__md_op_t *op;

	*rc = 0;
	if (peer == NULL && a->store == NULL) {
		*rc = MU_EARG; /* no address and no store: nowhere to go */
		return NULL;
	}
	if ((peer != NULL && (peer->ip == NULL || peer->port <= 0 || peer->port > 65535 ||
	                      strlen(peer->ip) >= sizeof(op->ip))) ||
	    (label != NULL && strlen(label) > MU_MD_LABEL_MAX)) {
		*rc = MU_EARG;
		return NULL;
	}
	op = mu__calloc(1, sizeof(*op));
	if (op == NULL) {
		*rc = MU_ENOMEM;
		return NULL;
	}
	op->kind = kind;
	op->p2p = peer != NULL;
	if (peer != NULL) {
		memcpy(op->ip, peer->ip, strlen(peer->ip) + 1);
		op->port = peer->port;
	}
	snprintf(op->label, sizeof(op->label), "%s", mu__md_label_or_default(label));
	return op;
}

static int enqueue(mu_md_agent_t *a, mu__md_op_t *op, uint64_t *id)
{
	uv_mutex_lock(&a->lock);
	op->id = ++a->next_op;
	uv_mutex_unlock(&a->lock);
	if (id != NULL)
		*id = op->id;
	mu__md_submit(a, op);
	return 0;
}

int mu_md_send_local(mu_md_agent_t *a, const mu_md_peer_t *peer,
                     const char *label, uint64_t *id)
{
	mu__md_blob_t *b;
	mu__md_op_t *op;
	int rc;

	op = op_new(a, MU_MD_SENT, peer, label, &rc);
	if (op == NULL)
		return rc;
	b = mu__md_local_copy(a, op->label);
	if (b == NULL) {
		mu__free(op);
		return -ENOENT; /* nothing published under that label */
	}
	op->len = b->len;
	memmove(b, b->data, b->len);
	op->blob = b;
	return enqueue(a, op, id);
}

int mu_md_fetch_remote(mu_md_agent_t *a, const char *name,
                       const mu_md_peer_t *peer, const char *label, uint64_t *id)
{
	mu__md_op_t *op;
	int rc;

	if (name == NULL || strlen(name) > MU_MD_NAME_MAX || (peer == NULL && name[0] == '\0'))
		return MU_EARG;
	if (strcmp(name, a->name) == 0)
		return MU_EARG;
	op = op_new(a, MU_MD_FETCHED, peer, label, &rc);
	if (op == NULL)
		return rc;
	memcpy(op->name, name, strlen(name) + 1);
	return enqueue(a, op, id);
}

int mu_md_invalidate_local(mu_md_agent_t *a, const mu_md_peer_t *peer,
                           uint64_t *id)
{
	int rc;
	mu__md_op_t *op = op_new(a, MU_MD_INVALIDATED, peer, NULL, &rc);

	if (op == NULL)
		return rc;
	return enqueue(a, op, id);
}
