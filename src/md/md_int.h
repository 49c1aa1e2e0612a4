/* SPDX-License-Identifier: MIT */
/*
 * The md agent's internals, shared by agent.c (API, local blobs, events),
 * cache.c (the remote cache), worker.c (the queue and its thread) and the
 * backends.
 *
 * Locking: a->lock guards the caches, the queue, completions and events.
 * Backends run their send/fetch/invalidate/poll on the worker thread only
 * and take the lock only through the mu__md_* helpers below; the P2P
 * listener runs on its own loop thread and also goes through them.
 */
#ifndef MU_MD_INT_H
#define MU_MD_INT_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "muster/md.h"
#include "core/list_int.h"
#include "core/strmap_int.h"

#define MU_MD_BACKEND_VERSION 1
#define MU_MD_NAME_MAX 255
#define MU_MD_LABEL_MAX 255
#define MU_MD_MAX_BLOB (64u << 20)

/* One queued exchange. The blob (send) is a snapshot taken at the call,
 * as NIXL serializes on the caller's thread. */
typedef struct {
	mu__list_t node;
	uint64_t id;
	mu_md_event_kind_t kind;  /* SENT, FETCHED or INVALIDATED */
	int p2p;
	char ip[64];
	int port;
	char name[MU_MD_NAME_MAX + 1];
	char label[MU_MD_LABEL_MAX + 1];
	void *blob;
	size_t len;
	int64_t deadline;         /* for waits that outlive the call */
} mu__md_op_t;

/*
 * A backend: a versioned method table, one file each (backend_*.c).
 * mu_md_agent_new refuses a table whose version is not
 * MU_MD_BACKEND_VERSION (bump it when the table's shape or a method's
 * contract changes), or that lacks open, close, send, fetch or
 * invalidate; poll and wakeup come together or not at all.
 * send/fetch/invalidate return 0 (done), 1 (pending: the backend calls
 * mu__md_complete later, from its poll) or an error with `why` filled.
 */
typedef struct {
	int version;
	const char *name;
	int (*open)(mu_md_agent_t *a, void **st);
	void (*close)(void *st); /* fails what is still pending */
	int (*send)(void *st, mu__md_op_t *op, char *why, size_t wl);
	int (*fetch)(void *st, mu__md_op_t *op, char *why, size_t wl);
	int (*invalidate)(void *st, mu__md_op_t *op, char *why, size_t wl);
	/* Wait up to ms for the backend's own activity and do what is due;
	 * NULL when it has none. wakeup interrupts it from another thread. */
	int (*poll)(void *st, int ms);
	void (*wakeup)(void *st);
} mu__md_backend_t;

extern const mu__md_backend_t mu__md_backend_p2p;
#ifdef MU_HAVE_CURL
extern const mu__md_backend_t mu__md_backend_etcd;
#endif
extern const mu__md_backend_t mu__md_backend_tcpstore;

typedef struct {
	size_t len;
	char data[];
} mu__md_blob_t;

/* Default byte limit of the remote cache (mu_md_opts_t.remote_cache_max):
 * two of the largest blobs. */
#define MU_MD_REMOTE_CACHE_DEFAULT ((size_t)128 << 20)

/*
 * One remote agent's metadata in the cache (cache.c). It is on exactly one
 * of the agent's eviction lists: `pushed` while it came only from peers'
 * unsolicited LOADs, `used` once this agent fetched, loaded or read it
 * (moved to the tail at each such use).
 */
typedef struct {
	mu__list_t node;
	mu__strmap_t labels;            /* label -> mu__md_blob_t */
	size_t bytes;                   /* its cost, counted in remote_bytes */
	char name[MU_MD_NAME_MAX + 1];
} mu__md_remote_t;

struct mu_md_agent_s {
	char name[MU_MD_NAME_MAX + 1];
	mu_md_opts_t o;                 /* strings point at the copies below */
	char *setup_err;                /* the caller's err, while being created */
	size_t setup_errlen;
	int setup_said;                 /* creation failed and said why */
	char listen_host[64];
	char etcd_endpoints[1024];
	char etcd_namespace[256];
	char tcpstore_endpoint[256];

	/* docs/metrics.md, by backend; NULL without a registry */
	struct mu__metric_s *m_sent, *m_fetched, *m_invalidated, *m_failed;

	uv_mutex_t lock;
	mu__strmap_t local;             /* label -> mu__md_blob_t */
	mu__strmap_t remote;            /* name -> mu__md_remote_t */
	mu__list_t pushed, used;        /* eviction order of remote (cache.c) */
	size_t remote_bytes;            /* what remote costs: <= remote_max */
	size_t remote_max;

	mu__list_t queue;               /* mu__md_op_t, FIFO */
	uv_cond_t work_cond;
	uv_thread_t worker;
	int worker_started;
	int stopping;
	uint64_t next_op;

	mu__strmap_t done;              /* op id -> status, last 4096 */
	mu__list_t done_order;
	size_t ndone;
	uv_cond_t done_cond;

	mu_md_event_t *events;          /* ring of queued events */
	size_t ev_head, ev_count, ev_cap;
	int efd;                        /* eventfd: readable while events queue */

	const mu__md_backend_t *p2p, *store;
	void *p2p_st, *store_st;
	int listen_port;
};

/*
 * Creation failed (from mu_md_agent_new and the backends' open): log why
 * and copy it to the caller's err. Keeps the first reason given.
 */
void mu__md_setup_error(mu_md_agent_t *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* config.c: settle o into a (a->o with its timeouts resolved, the
 * endpoint copies, a->store), checking each backend's table; says why on
 * failure (mu__md_setup_error). */
int mu__md_configure(mu_md_agent_t *a, const mu_md_opts_t *o);
/* Fill o with this build's defaults (mu_md_opts_init's, at full size). */
void mu__md_opts_defaults(mu_md_opts_t *o);
/* 0, or -ENOTSUP (said why) for a table of another version or one that
 * lacks a required method. */
int mu__md_backend_check(mu_md_agent_t *a, const mu__md_backend_t *b);

/* cache.c: set up and free the remote cache (a->o settled first). */
void mu__md_cache_init(mu_md_agent_t *a);
void mu__md_cache_free(mu_md_agent_t *a);
/*
 * Load blob as name's metadata under label (the agent's rules): a blob
 * this agent asked for (a fetch's answer) or loads itself. Past the cache's
 * byte limit, other agents' metadata is evicted first (each reported as
 * REMOTE_DROPPED); MU_ETOOBIG when this agent's own would not fit alone.
 */
int mu__md_load(mu_md_agent_t *a, const char *label, const void *blob,
                size_t n, char *name, size_t name_len);
/* The same for a blob a peer pushed unasked (P2P LOAD): it is evicted
 * before anything this agent has used. */
int mu__md_load_pushed(mu_md_agent_t *a, const char *label, const void *blob,
                       size_t n, char *name, size_t name_len);
/* agent.c: a blob holding a copy of n bytes (NULL: out of memory), and the
 * label NULL or "" stands for. */
mu__md_blob_t *mu__md_blob_new(const void *p, size_t n);
const char *mu__md_label_or_default(const char *label);
/* Drop name's metadata and report REMOTE_DROPPED (why: who said so). */
void mu__md_drop(mu_md_agent_t *a, const char *name, const char *why);
/* A copy of a local blob (mu__free), or NULL. */
mu__md_blob_t *mu__md_local_copy(mu_md_agent_t *a, const char *label);
/* Copies of every local blob with its label, for re-publishing. */
int mu__md_local_labels(mu_md_agent_t *a, char ***labels, size_t *n);

/*
 * Finish op (frees it): record the status and queue the event together,
 * then wake waiters, then call on_event. Whoever mu_md_wait wakes finds
 * the event queued; on_event sees the result already visible to both.
 */
void mu__md_complete(mu_md_agent_t *a, mu__md_op_t *op, int status,
                     const char *name, const char *detail);
/* Queue an unsolicited event. */
void mu__md_event(mu_md_agent_t *a, mu_md_event_kind_t kind, int status,
                  const char *name, const char *detail);

/* blob.c: a muster blob, with a label record for partial ones (label
 * NULL: the full blob); and the label a blob carries (MU_EPROTO: none). */
int mu__md_blob_make(const char *name, const char *label, const void *payload,
                     size_t n, void **blob, size_t *len);
int mu__md_blob_label(const void *blob, size_t len, char *label, size_t label_len);

/* worker.c */
int mu__md_worker_start(mu_md_agent_t *a);
void mu__md_worker_stop(mu_md_agent_t *a);
void mu__md_submit(mu_md_agent_t *a, mu__md_op_t *op);

#endif
