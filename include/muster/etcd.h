/* SPDX-License-Identifier: MIT */
/*
 * A client for etcd 3.4's v3 API over its JSON gateway (plain HTTP/1.1,
 * libcurl underneath). Keys and values are bytes. Every call takes the
 * client's timeout; a list of endpoints gives failover: a member that
 * refuses, times out, answers 5xx or answers something that is not etcd
 * is left for the next one, by this call's retry and by every later call.
 * A call is retried there unless the failed try may have taken effect and
 * repeating it could give a wrong answer: create and cas are not retried
 * once sent (their failure may hide a success; read the key to know).
 *
 * One mu_etcd_t is used by one thread at a time (calls and mu_etcd_poll).
 * Built only with MU_HAVE_CURL.
 */
#ifndef MUSTER_ETCD_H
#define MUSTER_ETCD_H

#include <stddef.h>
#include <stdint.h>

#include "muster/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mu_etcd_s mu_etcd_t;

typedef struct {
	size_t struct_size;       /* set by mu_etcd_opts_init */
	/* "http://127.0.0.1:2379,http://10.0.0.2:2379" (',' or ';'; a
	 * missing scheme means http://) */
	const char *endpoints;
	int timeout_ms; /* per call and per endpoint try; default 5000 */
} mu_etcd_opts_t;

MU_EXTERN void mu_etcd_opts_init_size(mu_etcd_opts_t *o, size_t size);
#define mu_etcd_opts_init(o) mu_etcd_opts_init_size((o), sizeof(*(o)))
/* MU_EARG for an empty endpoint list; no I/O happens here. */
MU_EXTERN int mu_etcd_new(const mu_etcd_opts_t *o, mu_etcd_t **out);
MU_EXTERN void mu_etcd_free(mu_etcd_t *e);

/*
 * The text of etcd's last error ("etcdserver: request is too large"), or
 * of the last transport failure; "" when the last call succeeded.
 */
MU_EXTERN const char *mu_etcd_last_error(const mu_etcd_t *e);

typedef struct {
	char *key;        /* NUL-terminated copies; klen/vlen exclude the NUL */
	size_t klen;
	char *value;
	size_t vlen;
	int64_t create_revision;
	int64_t mod_revision;
	int64_t version;
	int64_t lease;
} mu_etcd_kv_t;

typedef struct {
	mu_etcd_kv_t *kvs;
	size_t n;
	int64_t revision; /* store revision when the read was served */
	int more;
} mu_etcd_range_t;

MU_EXTERN void mu_etcd_range_free(mu_etcd_range_t *r);

/*
 * Calls return 0 or: -ECONNREFUSED / -ETIMEDOUT (no endpoint answered),
 * MU_ETOOBIG (over etcd's request limit), -ENOENT (an unknown lease),
 * MU_EFAIL (another etcd error: see mu_etcd_last_error), MU_EPROTO (a
 * response that is not etcd's), MU_ENOMEM. The text of a member's failure
 * names the member ("http://10.0.0.2:2379/v3/kv/range: ...").
 */
MU_EXTERN int mu_etcd_put(mu_etcd_t *e, const void *key, size_t klen,
                          const void *value, size_t vlen, int64_t lease,
                          int64_t *revision);
/* Exactly key (prefix = 0) or every key starting with key (prefix = 1). */
MU_EXTERN int mu_etcd_get(mu_etcd_t *e, const void *key, size_t klen,
                          int prefix, mu_etcd_range_t *out);
MU_EXTERN int mu_etcd_delete(mu_etcd_t *e, const void *key, size_t klen,
                             int prefix, int64_t *deleted);
/* Create key only if it does not exist (a txn on version == 0). Not
 * retried on another member once sent: after -ETIMEDOUT or -ECONNREFUSED
 * the key may have been created by this very call. */
MU_EXTERN int mu_etcd_create(mu_etcd_t *e, const void *key, size_t klen,
                             const void *value, size_t vlen, int64_t lease,
                             int *created);
/* Replace key only if its mod_revision is still mod_revision (retried
 * like create). */
MU_EXTERN int mu_etcd_cas(mu_etcd_t *e, const void *key, size_t klen,
                          int64_t mod_revision, const void *value,
                          size_t vlen, int64_t lease, int *swapped);

MU_EXTERN int mu_etcd_lease_grant(mu_etcd_t *e, int64_t ttl, int64_t *id,
                                  int64_t *granted_ttl);
/* *ttl <= 0: the lease is gone (etcd says so with an HTTP 200). */
MU_EXTERN int mu_etcd_lease_keepalive(mu_etcd_t *e, int64_t id, int64_t *ttl);
MU_EXTERN int mu_etcd_lease_revoke(mu_etcd_t *e, int64_t id);

/* ---- watches ---- */

enum { MU_ETCD_EVENT_PUT = 0, MU_ETCD_EVENT_DELETE = 1 };

typedef struct {
	int type;
	const mu_etcd_kv_t *kv; /* valid during the callback only */
} mu_etcd_event_t;

/*
 * Called from mu_etcd_poll for each event, in revision order. ev is NULL
 * when the watch has ended for good (canceled by etcd, e.g. a compacted
 * start revision); err says why.
 */
typedef void (*mu_etcd_watch_cb)(void *ud, const mu_etcd_event_t *ev, int err);

typedef struct mu_etcd_watch_s mu_etcd_watch_t;

/* mu_etcd_watch flags */
#define MU_ETCD_PREFIX 1u /* every key starting with key */
#define MU_ETCD_NOPUT 2u  /* deletes only (etcd's NOPUT filter) */

/*
 * Watch key (or, with MU_ETCD_PREFIX, every key under it) from
 * start_revision (inclusive; 0 = from now). The stream is kept alive
 * across endpoint failures: it reconnects to the next member from the
 * revision after the last one delivered, so no event is missed or
 * repeated.
 */
MU_EXTERN int mu_etcd_watch(mu_etcd_t *e, const void *key, size_t klen,
                            unsigned flags, int64_t start_revision,
                            mu_etcd_watch_cb cb, void *ud,
                            mu_etcd_watch_t **out);
/* Stop and free a watch (not from inside its own callback). */
MU_EXTERN void mu_etcd_watch_cancel(mu_etcd_watch_t *w);

/* Drive every watch for up to timeout_ms, delivering events. */
MU_EXTERN int mu_etcd_poll(mu_etcd_t *e, int timeout_ms);
/* Make a mu_etcd_poll running now (or the next one) return early. The one
 * call that is safe from any thread. */
MU_EXTERN void mu_etcd_wakeup(mu_etcd_t *e);

#ifdef __cplusplus
}
#endif
#endif
