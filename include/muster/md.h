/* SPDX-License-Identifier: MIT */
/*
 * Metadata exchange between agents, the way NVIDIA's NIXL does it: each
 * agent publishes what others need to reach it as a named blob (full, or
 * partial under a label) and fetches others' by name, through P2P sockets
 * (NIXL's framing), an etcd cluster (NIXL's key layout) or a TCPStore
 * (NIXL's key layout in a c10d store). See docs/protocols/md.md.
 *
 * Routing, per call: a peer address selects P2P; otherwise the one store
 * configured (etcd or TCPStore, never both). Exchange calls (send, fetch,
 * invalidate) validate and queue, then complete on the agent's worker
 * thread; unlike NIXL, every completion is reported, with its cause on
 * failure, through the event callback, the pollable event queue, and
 * mu_md_wait. check/load/get/invalidate_remote are local and immediate.
 *
 * Blobs: opaque bytes that start with NIXL's "nixlSerDes|" prefix and an
 * "Agent" record naming their agent (how a receiver learns whose they
 * are). mu_md_set_local wraps a payload so; NIXL's own blobs load as they
 * are. All calls are thread-safe.
 */
#ifndef MUSTER_MD_H
#define MUSTER_MD_H

#include <stddef.h>
#include <stdint.h>

#include "muster/common.h"
#include "muster/metrics.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mu_md_agent_s mu_md_agent_t;

/* The label of a full blob (NIXL's default_metadata_label). */
#define MU_MD_DEFAULT_LABEL "metadata"

typedef enum {
	MU_MD_SENT = 1,          /* mu_md_send_local finished */
	MU_MD_FETCHED = 2,       /* mu_md_fetch_remote finished (name: whose) */
	MU_MD_INVALIDATED = 3,   /* mu_md_invalidate_local finished */
	MU_MD_REMOTE_LOADED = 4, /* a peer pushed its metadata to us (P2P) */
	MU_MD_REMOTE_DROPPED = 5 /* a peer's metadata was invalidated */
} mu_md_event_kind_t;

typedef struct {
	uint64_t op;             /* id from the call; 0 for unsolicited events */
	mu_md_event_kind_t kind;
	int status;              /* 0, or why it failed (mu_strerror) */
	char name[256];          /* the remote agent, where there is one */
	char detail[256];        /* what happened, in words, on failure */
} mu_md_event_t;

/* Called on the agent's worker or listener thread; must not block long. */
typedef void (*mu_md_event_cb)(void *ud, const mu_md_event_t *ev);

typedef struct {
	size_t struct_size;       /* set by mu_md_opts_init */
	const char *name;          /* the agent's name: required, unique */
	int listen;                /* accept P2P peers */
	const char *listen_host;   /* default "0.0.0.0" */
	int listen_port;           /* default 8888 (NIXL's); 0 = any */
	/*
	 * The store, from one source taken whole: these options when either
	 * endpoint is set; else (unless no_env) MUSTER_ETCD_ENDPOINTS and
	 * MUSTER_TCPSTORE_ENDPOINT when either is set; else NIXL's
	 * NIXL_ETCD_ENDPOINTS and NIXL_TCPSTORE_ENDPOINT. So a store given
	 * here, or by a MUSTER_ variable, is not mixed with an inherited
	 * NIXL_ one. etcd and a TCPStore from the same source is an error.
	 * The namespace: etcd_namespace, else MUSTER_ETCD_NAMESPACE, else
	 * NIXL_ETCD_NAMESPACE. A variable that is set counts even when empty.
	 */
	const char *etcd_endpoints;
	const char *etcd_namespace;    /* default "/nixl/agents/" */
	const char *tcpstore_endpoint; /* "host:port" */
	int no_env;
	double etcd_watch_timeout; /* fetch of a key not there yet; 5 s */
	double lease_ttl;          /* etcd lease on all our keys; 10 s; 0 = none */
	/*
	 * TCPStore: the first connect (a store still starting is waited for)
	 * and a fetch's wait for a key. 0: MUSTER_TCPSTORE_TIMEOUT_MS, else
	 * NIXL_TCPSTORE_TIMEOUT_MS (milliseconds) when a TCPStore is the
	 * store and no_env is 0, else 30 s.
	 */
	double store_timeout;
	/*
	 * Each network operation (and its reconnect). 0: for a TCPStore,
	 * MUSTER_TCPSTORE_OP_TIMEOUT_MS, else NIXL_TCPSTORE_OP_TIMEOUT_MS,
	 * else 5 s; for the others, 5 s. Negative values are refused.
	 */
	double op_timeout;
	/* What each peer of the P2P listener may make it hold (SEND replies
	 * queued for a peer that does not read them, its partial frame). */
	mu_budget_t listen_budget;
	mu_md_event_cb on_event;
	void *ud;
	/*
	 * Bytes the remote cache (other agents' metadata) may hold, counting
	 * each blob with its bookkeeping; 0: 128 MiB. Past it, whole agents
	 * are evicted, each reported as a REMOTE_DROPPED event: first those
	 * whose metadata only ever came from peers' unsolicited P2P pushes,
	 * oldest first; then those this agent fetched, loaded or read (a
	 * check or get counts), least recently used first. A blob that alone
	 * would pass the limit is refused with MU_ETOOBIG.
	 */
	size_t remote_cache_max;
	/* Count into this registry (muster_md_*, docs/metrics.md); NULL (the
	 * default): count nothing. It must outlive the agent. */
	mu_metrics_t *metrics;
} mu_md_opts_t;

MU_EXTERN void mu_md_opts_init_size(mu_md_opts_t *o, size_t size);
#define mu_md_opts_init(o) mu_md_opts_init_size((o), sizeof(*(o)))

/*
 * Create an agent (and its listener, when asked). MU_EARG for a missing
 * name, a malformed store endpoint, or both stores configured; MU_EBIND
 * for a listen port in use. The reason, naming the options or variables
 * at fault ("etcd (...) and a TCPStore (...) are both configured ..."),
 * goes to err (errlen bytes, may be NULL; "" on success; 512 holds any)
 * and the log. No store I/O happens here: a store that is down shows in
 * the first exchange's event.
 */
MU_EXTERN int mu_md_agent_new(const mu_md_opts_t *o, mu_md_agent_t **out,
                              char *err, size_t errlen);
/* Finish queued work (bounded by op_timeout each), stop, free. */
MU_EXTERN void mu_md_agent_free(mu_md_agent_t *a);

MU_EXTERN const char *mu_md_agent_name(const mu_md_agent_t *a);
/* The bound P2P port, or 0 without a listener. */
MU_EXTERN int mu_md_listen_port(const mu_md_agent_t *a);
/* "ETCD", "TCPStore", or "P2P" when no store is configured. */
MU_EXTERN const char *mu_md_backend_name(const mu_md_agent_t *a);
/*
 * The store the configuration settled on (see mu_md_opts_t): the etcd
 * endpoints or the TCPStore's host:port as given, NULL without a store;
 * and the etcd namespace. Owned by the agent.
 */
MU_EXTERN const char *mu_md_store_endpoint(const mu_md_agent_t *a);
MU_EXTERN const char *mu_md_etcd_namespace(const mu_md_agent_t *a);

/* ---- local metadata ---- */

/*
 * Set the local blob under label (NULL: the full blob), wrapping payload
 * as this agent's. mu_md_set_local_blob takes a finished blob (a NIXL
 * one, say), which must name this agent.
 */
MU_EXTERN int mu_md_set_local(mu_md_agent_t *a, const char *label,
                              const void *payload, size_t n);
MU_EXTERN int mu_md_set_local_blob(mu_md_agent_t *a, const char *label,
                                   const void *blob, size_t n);
/* A copy of a local blob (free with mu_free). -ENOENT when unset. */
MU_EXTERN int mu_md_get_local(mu_md_agent_t *a, const char *label,
                              void **blob, size_t *n);

/* ---- exchange (asynchronous) ---- */

/* A P2P peer; pass NULL to go through the configured store. */
typedef struct {
	const char *ip;
	int port;
} mu_md_peer_t;

/*
 * Publish the local blob under label (NULL: the full one) to the peer or
 * the store. *op (may be NULL) identifies the completion. Fails at once
 * with MU_EARG (no peer and no store; P2P needs a listener-less agent
 * only for sending), -ENOENT (no local blob under that label).
 */
MU_EXTERN int mu_md_send_local(mu_md_agent_t *a, const mu_md_peer_t *peer,
                               const char *label, uint64_t *op);
/*
 * Fetch `name`'s blob under label (NULL: the full one) and load it. With a
 * store, a blob not published yet is waited for (etcd: watch_timeout;
 * TCPStore: store_timeout). Over P2P, whoever answers at the address is
 * loaded, as in NIXL; the completion names them.
 */
MU_EXTERN int mu_md_fetch_remote(mu_md_agent_t *a, const char *name,
                                 const mu_md_peer_t *peer, const char *label,
                                 uint64_t *op);
/*
 * Withdraw everything this agent published: to one peer (P2P INVL), or
 * from the store (etcd: peers that fetched it drop it too; TCPStore: they
 * are not told, as in NIXL).
 */
MU_EXTERN int mu_md_invalidate_local(mu_md_agent_t *a, const mu_md_peer_t *peer,
                                     uint64_t *op);

/*
 * Wait for op to complete, at most timeout_ms (< 0: forever); *status gets
 * its result. -ETIMEDOUT when it has not; -ENOENT for an unknown op (or
 * one whose result was dropped: the last 4096 are kept). When it returns
 * 0, op's event (with its detail) is already in the event queue.
 */
MU_EXTERN int mu_md_wait(mu_md_agent_t *a, uint64_t op, int timeout_ms,
                         int *status);
/* A descriptor that is readable while events are queued. */
MU_EXTERN int mu_md_event_fd(mu_md_agent_t *a);
/* Take the oldest queued event. -EAGAIN when there is none. */
MU_EXTERN int mu_md_next_event(mu_md_agent_t *a, mu_md_event_t *ev);

/* ---- remote metadata (local, immediate) ---- */

/*
 * Load a blob into the cache of its agent (whose name is put in name).
 * Loading the same bytes again is a no-op; different bytes under a label
 * already loaded are refused with -EEXIST until the agent is invalidated
 * (NIXL's rule for changed connection info). MU_EPROTO: not a blob;
 * MU_EARG: our own; MU_ETOOBIG: larger than remote_cache_max on its own.
 * Other agents may be evicted to make room (see remote_cache_max).
 */
MU_EXTERN int mu_md_load_remote(mu_md_agent_t *a, const char *label,
                                const void *blob, size_t n, char *name,
                                size_t name_len);
/* 0 when metadata of `name` is loaded, else -ENOENT. */
MU_EXTERN int mu_md_check_remote(mu_md_agent_t *a, const char *name);
/* A copy of name's blob under label (NULL: the full one). */
MU_EXTERN int mu_md_get_remote(mu_md_agent_t *a, const char *name,
                               const char *label, void **blob, size_t *n);
/* Forget name's metadata. -ENOENT when none was loaded. */
MU_EXTERN int mu_md_invalidate_remote(mu_md_agent_t *a, const char *name);
/* What the remote cache holds now, in the bytes remote_cache_max counts. */
MU_EXTERN size_t mu_md_remote_bytes(mu_md_agent_t *a);
/*
 * Names of the agents loaded, as a NULL-terminated array (free with
 * mu_md_strv_free).
 */
MU_EXTERN int mu_md_list_remote(mu_md_agent_t *a, char ***names, size_t *n);
MU_EXTERN void mu_md_strv_free(char **v);

/* ---- blobs ---- */

/* "nixlSerDes|" "Agent" <u64 len> name "|" "MusterData" <u64 len> payload "|" */
MU_EXTERN int mu_md_blob_make(const char *name, const void *payload, size_t n,
                              void **blob, size_t *len);
/* The agent a blob names. MU_EPROTO when it is not a named nixlSerDes blob. */
MU_EXTERN int mu_md_blob_name(const void *blob, size_t len, char *name,
                              size_t name_len);
/* The payload of a blob made by mu_md_blob_make (pointing into blob). */
MU_EXTERN int mu_md_blob_payload(const void *blob, size_t len,
                                 const void **payload, size_t *n);

#ifdef __cplusplus
}
#endif
#endif
