/* SPDX-License-Identifier: MIT */
/*
 * etcd v3 JSON gateway codec, pure: request bodies, and parsers for the
 * responses, errors and watch stream messages of ../shared/spec/etcd-v3.md
 * §2-§4 (base64 bytes, 64-bit integers as strings, every field optional).
 */
#ifndef MU_ETCD_PROTO_INT_H
#define MU_ETCD_PROTO_INT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "muster/etcd.h"
#include "core/buf_int.h"

/* The end of the range that holds every key starting with prefix (etcd's
 * rule: increment the last byte that is not 0xff). *out is mu__free'd. */
int mu__etcd_prefix_end(const void *prefix, size_t n, char **out, size_t *outlen);

/* Request bodies. key_end NULL: a single key. lease 0: none. */
int mu__etcd_body_put(mu__buf_t *b, const void *k, size_t kn, const void *v,
                      size_t vn, int64_t lease);
int mu__etcd_body_range(mu__buf_t *b, const void *k, size_t kn,
                        const void *end, size_t en);
int mu__etcd_body_delete(mu__buf_t *b, const void *k, size_t kn,
                         const void *end, size_t en);
/* txn: compare VERSION == 0 (mod_rev < 0) or MOD == mod_rev, then put. */
int mu__etcd_body_txn_put(mu__buf_t *b, const void *k, size_t kn,
                          int64_t mod_rev, const void *v, size_t vn,
                          int64_t lease);
int mu__etcd_body_lease(mu__buf_t *b, const char *field, int64_t v);
int mu__etcd_body_watch(mu__buf_t *b, const void *k, size_t kn,
                        const void *end, size_t en, int64_t start_rev,
                        int noput);

/*
 * Classify a response: 0 for a 2xx with a JSON object body (*root is the
 * caller's), else the error mapped as mu_etcd_* document it, with etcd's
 * text copied into msg. A body that is not etcd (no JSON error object)
 * is MU_EPROTO; any 5xx that is not etcd's own timeout, -ECONNREFUSED.
 */
int mu__etcd_response(int http_status, const char *body, size_t len,
                      cJSON **root, char *msg, size_t msglen);

/* An int64 field carried as a JSON string or number; absent = 0. */
int mu__etcd_int64(const cJSON *obj, const char *name, int64_t *out);

/* header.revision of a response (0 when absent). */
int64_t mu__etcd_revision(const cJSON *root);

/* Decode one {"key","value",...} object into kv (its strings malloc'ed). */
int mu__etcd_kv(const cJSON *o, mu_etcd_kv_t *kv);
void mu__etcd_kv_free(mu_etcd_kv_t *kv);

int mu__etcd_parse_range(const cJSON *root, mu_etcd_range_t *out);

/* One message of a watch stream. */
typedef struct {
	int64_t revision;
	int created;
	int canceled;
	int64_t compact_revision;
	char reason[160];
	mu_etcd_kv_t *kvs; /* nevents entries */
	int *types;
	size_t nevents;
} mu__etcd_watch_msg_t;

/* Parse one newline-delimited watch message. MU_EPROTO / MU_EJSON. */
int mu__etcd_parse_watch(const char *line, size_t len, mu__etcd_watch_msg_t *m);
void mu__etcd_watch_msg_free(mu__etcd_watch_msg_t *m);

#endif
