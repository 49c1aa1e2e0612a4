/* SPDX-License-Identifier: MIT */
/*
 * etcd v3 gateway client over libcurl: unary calls on one reused easy
 * handle with endpoint failover, and streaming watches on a curl multi
 * handle that reconnect from the next unseen revision. The codec is in
 * proto.c; this file only moves bytes and decides where to send them.
 */
#include <errno.h>
#include <string.h>

#include <curl/curl.h>
#include <uv.h>

#include "muster/etcd.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/list_int.h"
#include "core/opts_int.h"
#include "core/time_int.h"
#include "etcd/proto_int.h"

#define MAX_RESPONSE (64u << 20)
#define MAX_ENDPOINTS 16

struct mu_etcd_s {
	char *eps[MAX_ENDPOINTS]; /* "http://host:port", no trailing '/' */
	size_t neps;
	size_t cur;               /* endpoint unary calls use now */
	int timeout_ms;
	CURL *easy;
	CURLM *multi;
	struct curl_slist *headers;
	mu__list_t watches;
	int in_poll;              /* cancels are deferred while delivering */
	char err[1024];
};

typedef enum { W_RUNNING, W_WAITING, W_ENDED } wstate_t;

struct mu_etcd_watch_s {
	mu__list_t node;
	mu_etcd_t *e;
	CURL *easy;
	wstate_t state;   /* RUNNING: in the multi; WAITING: reconnect at retry_at */
	int canceled;     /* by the caller; freed at the end of the poll */
	size_t ep;
	int64_t retry_at;
	int delay_ms;
	mu__buf_t body;   /* the create_request sent on (re)connect */
	mu__buf_t in;     /* stream bytes not yet split into messages */
	mu__buf_t pending; /* parsed messages waiting for delivery */
	char *key, *end;
	size_t klen, elen;
	int64_t next_rev; /* first revision not yet delivered */
	int noput;
	mu_etcd_watch_cb cb;
	void *ud;
};

/*
 * libcurl's global init is not thread-safe (before 7.84) and must run
 * once: uv_once runs it on the first mu_etcd_new of any thread, and the
 * others wait for it. Its result is kept for every later call.
 */
static uv_once_t curl_once = UV_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init_once(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int global_init(void)
{
	uv_once(&curl_once, curl_init_once);
	return curl_init_rc == CURLE_OK ? 0 : MU_ENOMEM;
}

static void etcd_defaults(mu_etcd_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->struct_size = sizeof(*o);
	o->endpoints = NULL;
	o->timeout_ms = 5000;
}

void mu_etcd_opts_init_size(mu_etcd_opts_t *o, size_t size)
{
	mu_etcd_opts_t d;

	etcd_defaults(&d);
	mu__opts_fill(o, size, &d, sizeof(d));
}

const char *mu_etcd_last_error(const mu_etcd_t *e)
{
	return e->err;
}

static int add_endpoint(mu_etcd_t *e, const char *p, size_t n)
{
	mu__buf_t b;

	while (n > 0 && (*p == ' ' || *p == '\t')) {
		p++;
		n--;
	}
	while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '/' || p[n - 1] == '\t'))
		n--;
	if (n == 0)
		return 0;
	if (e->neps == MAX_ENDPOINTS)
		return MU_ETOOBIG;
	mu__buf_init(&b, 1024);
	if ((memmem(p, n, "://", 3) == NULL && mu__buf_appends(&b, "http://") != 0) ||
	    mu__buf_append(&b, p, n) != 0) {
		mu__buf_free(&b);
		return MU_EARG;
	}
	e->eps[e->neps++] = mu__buf_take(&b, NULL);
	return 0;
}

int mu_etcd_new(const mu_etcd_opts_t *uo, mu_etcd_t **out)
{
	mu_etcd_opts_t oo, *o = &oo;
	mu_etcd_t *e;
	const char *p, *q;
	int rc;

	*out = NULL;
	etcd_defaults(o);
	if (mu__opts_read(o, sizeof(*o), uo) != 0 || o->endpoints == NULL || o->timeout_ms <= 0)
		return MU_EARG;
	rc = global_init();
	if (rc != 0)
		return rc;
	e = mu__calloc(1, sizeof(*e));
	if (e == NULL)
		return MU_ENOMEM;
	mu__list_init(&e->watches);
	e->timeout_ms = o->timeout_ms;
	for (p = o->endpoints; rc == 0; p = q + 1) {
		q = p + strcspn(p, ",;");
		rc = add_endpoint(e, p, (size_t)(q - p));
		if (*q == '\0')
			break;
	}
	e->easy = curl_easy_init();
	e->multi = curl_multi_init();
	/* no "Expect: 100-continue" round trip; JSON bodies */
	e->headers = curl_slist_append(NULL, "Content-Type: application/json");
	if (e->headers != NULL)
		e->headers = curl_slist_append(e->headers, "Expect:");
	if (rc == 0 && e->neps == 0)
		rc = MU_EARG;
	if (rc == 0 && (e->easy == NULL || e->multi == NULL || e->headers == NULL))
		rc = MU_ENOMEM;
	if (rc != 0) {
		mu_etcd_free(e);
		return rc;
	}
	*out = e;
	return 0;
}

static void watch_destroy(mu_etcd_watch_t *w);

void mu_etcd_free(mu_etcd_t *e)
{
	mu__list_t *it, *tmp;
	size_t i;

	if (e == NULL)
		return;
	mu__list_foreach_safe(it, tmp, &e->watches)
		watch_destroy(mu__container_of(it, mu_etcd_watch_t, node));
	if (e->easy != NULL)
		curl_easy_cleanup(e->easy);
	if (e->multi != NULL)
		curl_multi_cleanup(e->multi);
	curl_slist_free_all(e->headers);
	for (i = 0; i < e->neps; i++)
		mu__free(e->eps[i]);
	mu__free(e);
}

/* ---- unary calls ---- */

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
	mu__buf_t *b = ud;

	/* a short count makes curl fail the transfer: over the limit */
	return mu__buf_append(b, p, size * n) == 0 ? size * n : 0;
}

static int one_try(mu_etcd_t *e, const char *path, const mu__buf_t *body,
                   mu__buf_t *resp, long *status, CURLcode *res)
{
	char url[1024];

	snprintf(url, sizeof(url), "%s%s", e->eps[e->cur], path);
	mu__buf_reset(resp);
	curl_easy_reset(e->easy);
	curl_easy_setopt(e->easy, CURLOPT_URL, url);
	curl_easy_setopt(e->easy, CURLOPT_POST, 1L);
	curl_easy_setopt(e->easy, CURLOPT_POSTFIELDS, body->data);
	curl_easy_setopt(e->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->len);
	curl_easy_setopt(e->easy, CURLOPT_HTTPHEADER, e->headers);
	curl_easy_setopt(e->easy, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(e->easy, CURLOPT_WRITEDATA, resp);
	curl_easy_setopt(e->easy, CURLOPT_TIMEOUT_MS, (long)e->timeout_ms);
	curl_easy_setopt(e->easy, CURLOPT_CONNECTTIMEOUT_MS, (long)e->timeout_ms);
	curl_easy_setopt(e->easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e->easy, CURLOPT_PROTOCOLS_STR, "http,https");
	*res = curl_easy_perform(e->easy);
	if (*res != CURLE_OK) {
		snprintf(e->err, sizeof(e->err), "%.700s: %.300s", url, curl_easy_strerror(*res));
		return *res == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT
		     : *res == CURLE_WRITE_ERROR ? MU_ETOOBIG : -ECONNREFUSED;
	}
	curl_easy_getinfo(e->easy, CURLINFO_RESPONSE_CODE, status);
	return 0;
}

/*
 * Did the member fail (rather than etcd answer)? No connection, no answer
 * in time, a 5xx (no leader, no quorum), or a reply that is not etcd's.
 */
static int member_failed(int rc)
{
	return rc == -ECONNREFUSED || rc == -ETIMEDOUT || rc == MU_EPROTO;
}

/* Classify the reply of the current member; a member failure's text names it. */
static int answer(mu_etcd_t *e, const char *path, long status,
                  const mu__buf_t *resp, cJSON **root)
{
	char text[sizeof(e->err)];
	int rc = mu__etcd_response((int)status, resp->data ? resp->data : "",
	                           resp->len, root, e->err, sizeof(e->err));

	if (rc == 0) {
		e->err[0] = '\0';
	} else if (member_failed(rc)) {
		memcpy(text, e->err, sizeof(text));
		snprintf(e->err, sizeof(e->err), "%.500s%.100s: %.400s", e->eps[e->cur],
		         path, text);
	}
	return rc;
}

/*
 * POST body to path; on success *root is the response object (the
 * caller's). An error etcd itself answers (a 4xx with its error object:
 * unknown lease, request too large) is final. A try the member failed
 * (member_failed) moves the client on to the next member, so that this
 * call's retry and every later call go there rather than back to the
 * failing one. Whether this call is retried there depends on whether the
 * failed try may have taken effect:
 *
 * - nothing was sent (no connection): always;
 * - else only when `repeatable`: put, range, delete, lease keepalive and
 *   revoke (doing them twice leaves the same state; a repeated delete
 *   counts 0 deleted), and lease grant (a grant that did happen, its
 *   answer lost, leaves a lease nobody uses, which expires after its TTL);
 * - a txn is not repeatable: a create-if-absent or compare-and-swap that
 *   applied on the first member, only its answer lost (a timeout, a 5xx
 *   after the proposal), would on a retry find its own write and report
 *   "not created" / "not swapped": a wrong answer the caller would act on
 *   (someone else owns the key). The failure is returned instead, and the
 *   caller reads the key to learn the outcome.
 */
static int call(mu_etcd_t *e, const char *path, const mu__buf_t *body,
                int repeatable, cJSON **root)
{
	mu__buf_t resp;
	size_t tries;
	long status = 0;
	CURLcode res = CURLE_OK;
	int rc = MU_EARG, sent;

	*root = NULL;
	mu__buf_init(&resp, MAX_RESPONSE);
	for (tries = 0; tries < e->neps; tries++) {
		rc = one_try(e, path, body, &resp, &status, &res);
		if (rc == 0)
			rc = answer(e, path, status, &resp, root);
		if (rc == 0 || !member_failed(rc))
			break; /* done, or etcd's own answer, or over our limit */
		sent = res != CURLE_COULDNT_CONNECT && res != CURLE_COULDNT_RESOLVE_HOST;
		e->cur = (e->cur + 1) % e->neps;
		if (sent && !repeatable)
			break;
	}
	mu__buf_free(&resp);
	return rc;
}

/* Build a body with fn, call, and hand the response to the caller. */
#define BODY(b) mu__buf_t b; mu__buf_init(&b, (size_t)-1)

int mu_etcd_put(mu_etcd_t *e, const void *key, size_t klen, const void *value,
                size_t vlen, int64_t lease, int64_t *revision)
{
	cJSON *root = NULL;
	int rc;
	BODY(b);

	rc = mu__etcd_body_put(&b, key, klen, value, vlen, lease);
	if (rc == 0)
		rc = call(e, "/v3/kv/put", &b, 1, &root);
	if (rc == 0 && revision != NULL)
		*revision = mu__etcd_revision(root);
	cJSON_Delete(root);
	mu__buf_free(&b);
	return rc;
}

static int range_body(mu__buf_t *b, const void *key, size_t klen, int prefix,
                      int del)
{
	char *end = NULL;
	size_t elen = 0;
	int rc = prefix ? mu__etcd_prefix_end(key, klen, &end, &elen) : 0;

	if (rc == 0)
		rc = (del ? mu__etcd_body_delete : mu__etcd_body_range)(b, key, klen,
		                                                        end, elen);
	mu__free(end);
	return rc;
}

int mu_etcd_get(mu_etcd_t *e, const void *key, size_t klen, int prefix,
                mu_etcd_range_t *out)
{
	cJSON *root = NULL;
	int rc;
	BODY(b);

	memset(out, 0, sizeof(*out));
	rc = range_body(&b, key, klen, prefix, 0);
	if (rc == 0)
		rc = call(e, "/v3/kv/range", &b, 1, &root);
	if (rc == 0)
		rc = mu__etcd_parse_range(root, out);
	cJSON_Delete(root);
	mu__buf_free(&b);
	return rc;
}

int mu_etcd_delete(mu_etcd_t *e, const void *key, size_t klen, int prefix,
                   int64_t *deleted)
{
	cJSON *root = NULL;
	int64_t n = 0;
	int rc;
	BODY(b);

	rc = range_body(&b, key, klen, prefix, 1);
	if (rc == 0)
		rc = call(e, "/v3/kv/deleterange", &b, 1, &root);
	if (rc == 0)
		rc = mu__etcd_int64(root, "deleted", &n);
	if (deleted != NULL)
		*deleted = n;
	cJSON_Delete(root);
	mu__buf_free(&b);
	return rc;
}

static int txn_put(mu_etcd_t *e, const void *key, size_t klen, int64_t mod_rev,
                   const void *value, size_t vlen, int64_t lease, int *ok)
{
	cJSON *root = NULL;
	int rc;
	BODY(b);

	*ok = 0;
	rc = mu__etcd_body_txn_put(&b, key, klen, mod_rev, value, vlen, lease);
	if (rc == 0)
		rc = call(e, "/v3/kv/txn", &b, 0, &root); /* not repeatable: see call() */
	if (rc == 0) /* "succeeded" is left out when false */
		*ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "succeeded"));
	cJSON_Delete(root);
	mu__buf_free(&b);
	return rc;
}

int mu_etcd_create(mu_etcd_t *e, const void *key, size_t klen, const void *value,
                   size_t vlen, int64_t lease, int *created)
{
	return txn_put(e, key, klen, -1, value, vlen, lease, created);
}

int mu_etcd_cas(mu_etcd_t *e, const void *key, size_t klen, int64_t mod_revision,
                const void *value, size_t vlen, int64_t lease, int *swapped)
{
	if (mod_revision < 0)
		return MU_EARG;
	return txn_put(e, key, klen, mod_revision, value, vlen, lease, swapped);
}

int mu_etcd_lease_grant(mu_etcd_t *e, int64_t ttl, int64_t *id, int64_t *granted)
{
	cJSON *root = NULL;
	int rc;
	BODY(b);

	rc = mu__etcd_body_lease(&b, "TTL", ttl);
	if (rc == 0)
		rc = call(e, "/v3/lease/grant", &b, 1, &root);
	if (rc == 0)
		rc = mu__etcd_int64(root, "ID", id);
	if (rc == 0 && granted != NULL)
		rc = mu__etcd_int64(root, "TTL", granted);
	if (rc == 0 && *id == 0)
		rc = MU_EPROTO;
	cJSON_Delete(root);
	mu__buf_free(&b);
	return rc;
}

int mu_etcd_lease_keepalive(mu_etcd_t *e, int64_t id, int64_t *ttl)
{
	cJSON *root = NULL;
	int rc;
	BODY(b);

	*ttl = 0;
	rc = mu__etcd_body_lease(&b, "ID", id);
	if (rc == 0)
		rc = call(e, "/v3/lease/keepalive", &b, 1, &root);
	/* {"result":{...,"TTL":"5"}}; TTL left out when the lease is gone */
	if (rc == 0)
		rc = mu__etcd_int64(cJSON_GetObjectItemCaseSensitive(root, "result"),
		                    "TTL", ttl);
	cJSON_Delete(root);
	mu__buf_free(&b);
	return rc;
}

int mu_etcd_lease_revoke(mu_etcd_t *e, int64_t id)
{
	cJSON *root = NULL;
	int rc;
	BODY(b);

	rc = mu__etcd_body_lease(&b, "ID", id);
	if (rc == 0)
		rc = call(e, "/v3/lease/revoke", &b, 1, &root);
	cJSON_Delete(root);
	mu__buf_free(&b);
	return rc;
}

/* ---- watches ---- */

/* Split the stream into newline-delimited messages, queued for delivery. */
static size_t watch_write(char *p, size_t size, size_t n, void *ud)
{
	mu_etcd_watch_t *w = ud;

	if (mu__buf_append(&w->in, p, size * n) != 0)
		return 0;
	for (;;) {
		char *nl = memchr(w->in.data, '\n', w->in.len);
		size_t len;

		if (nl == NULL)
			break;
		len = (size_t)(nl - w->in.data) + 1;
		if (mu__buf_append(&w->pending, w->in.data, len) != 0)
			return 0;
		mu__buf_consume(&w->in, len);
	}
	return size * n;
}

static int watch_connect(mu_etcd_watch_t *w)
{
	mu_etcd_t *e = w->e;
	char url[1024];
	int rc;

	mu__buf_reset(&w->body);
	mu__buf_reset(&w->in);
	rc = mu__etcd_body_watch(&w->body, w->key, w->klen, w->end, w->elen,
	                         w->next_rev, w->noput);
	if (rc != 0)
		return rc;
	if (w->easy == NULL && (w->easy = curl_easy_init()) == NULL)
		return MU_ENOMEM;
	snprintf(url, sizeof(url), "%s/v3/watch", e->eps[w->ep]);
	curl_easy_reset(w->easy);
	curl_easy_setopt(w->easy, CURLOPT_URL, url);
	curl_easy_setopt(w->easy, CURLOPT_POST, 1L);
	curl_easy_setopt(w->easy, CURLOPT_POSTFIELDS, w->body.data);
	curl_easy_setopt(w->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)w->body.len);
	curl_easy_setopt(w->easy, CURLOPT_HTTPHEADER, e->headers);
	curl_easy_setopt(w->easy, CURLOPT_WRITEFUNCTION, watch_write);
	curl_easy_setopt(w->easy, CURLOPT_WRITEDATA, w);
	curl_easy_setopt(w->easy, CURLOPT_CONNECTTIMEOUT_MS, (long)e->timeout_ms);
	curl_easy_setopt(w->easy, CURLOPT_NOSIGNAL, 1L);
	/* a member that vanishes without a reset is noticed within seconds */
	curl_easy_setopt(w->easy, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(w->easy, CURLOPT_TCP_KEEPIDLE, 2L);
	curl_easy_setopt(w->easy, CURLOPT_TCP_KEEPINTVL, 1L);
	curl_easy_setopt(w->easy, CURLOPT_PRIVATE, w);
	if (curl_multi_add_handle(e->multi, w->easy) != CURLM_OK)
		return MU_ENOMEM;
	w->state = W_RUNNING;
	return 0;
}

int mu_etcd_watch(mu_etcd_t *e, const void *key, size_t klen, unsigned flags,
                  int64_t start_revision, mu_etcd_watch_cb cb, void *ud,
                  mu_etcd_watch_t **out)
{
	mu_etcd_watch_t *w;
	int rc = MU_ENOMEM;

	*out = NULL;
	if (cb == NULL || start_revision < 0)
		return MU_EARG;
	w = mu__calloc(1, sizeof(*w));
	if (w == NULL)
		return MU_ENOMEM;
	w->e = e;
	w->cb = cb;
	w->ud = ud;
	w->ep = e->cur;
	w->next_rev = start_revision;
	w->noput = (flags & MU_ETCD_NOPUT) != 0;
	w->delay_ms = 100;
	mu__buf_init(&w->body, (size_t)-1);
	mu__buf_init(&w->in, MAX_RESPONSE);
	mu__buf_init(&w->pending, MAX_RESPONSE);
	w->key = mu__memdup(key, klen ? klen : 1);
	w->klen = klen;
	if (w->key != NULL)
		rc = flags & MU_ETCD_PREFIX ? mu__etcd_prefix_end(key, klen, &w->end, &w->elen) : 0;
	mu__list_insert_tail(&e->watches, &w->node);
	if (rc == 0)
		rc = watch_connect(w);
	if (rc != 0) {
		watch_destroy(w);
		return rc;
	}
	*out = w;
	return 0;
}

static void watch_destroy(mu_etcd_watch_t *w)
{
	mu__list_remove(&w->node);
	if (w->easy != NULL) {
		if (w->state == W_RUNNING)
			curl_multi_remove_handle(w->e->multi, w->easy);
		curl_easy_cleanup(w->easy);
	}
	mu__buf_free(&w->body);
	mu__buf_free(&w->in);
	mu__buf_free(&w->pending);
	mu__free(w->key);
	mu__free(w->end);
	mu__free(w);
}

void mu_etcd_watch_cancel(mu_etcd_watch_t *w)
{
	if (w == NULL)
		return;
	if (w->e->in_poll)
		w->canceled = 1; /* freed when the poll ends */
	else
		watch_destroy(w);
}

/* Hand the queued messages of w to its callback. */
static void deliver(mu_etcd_watch_t *w)
{
	size_t off = 0;

	while (off < w->pending.len && !w->canceled && w->state != W_ENDED) {
		char *line = w->pending.data + off;
		size_t len = (size_t)((char *)memchr(line, '\n', w->pending.len - off) - line);
		mu__etcd_watch_msg_t m;
		int64_t rev;
		size_t i;

		off += len + 1;
		if (mu__etcd_parse_watch(line, len, &m) != 0)
			continue; /* the stream's error object: a reconnect follows */
		if (m.created && w->next_rev == 0)
			w->next_rev = m.revision + 1; /* "from now" is now fixed */
		/* Events of one revision (a prefix delete, a txn) share it and
		 * come in one message: skip only revisions wholly delivered
		 * before a reconnect, then move past this message's. */
		rev = w->next_rev;
		for (i = 0; i < m.nevents && !w->canceled; i++) {
			mu_etcd_event_t ev = {m.types[i], &m.kvs[i]};

			if (m.kvs[i].mod_revision > 0 && m.kvs[i].mod_revision < rev)
				continue;
			if (m.kvs[i].mod_revision >= w->next_rev)
				w->next_rev = m.kvs[i].mod_revision + 1;
			w->cb(w->ud, &ev, 0);
		}
		if (m.canceled && !w->canceled) {
			/* etcd keeps the stream open after a cancel: close it
			 * now, as watch_destroy only detaches running ones */
			curl_multi_remove_handle(w->e->multi, w->easy);
			w->state = W_ENDED;
			snprintf(w->e->err, sizeof(w->e->err), "watch canceled: %s%s",
			         m.reason, m.compact_revision ? " (revision compacted)" : "");
			w->cb(w->ud, NULL, m.compact_revision ? MU_ETOOBIG : MU_EFAIL);
		}
		mu__etcd_watch_msg_free(&m);
	}
	mu__buf_reset(&w->pending);
}

/* A stream ended (member gone, or the watch canceled): plan what next. */
static void stream_ended(mu_etcd_watch_t *w)
{
	mu_etcd_t *e = w->e;

	curl_multi_remove_handle(e->multi, w->easy);
	if (w->state == W_ENDED)
		return;
	w->state = W_WAITING;
	w->ep = (w->ep + 1) % e->neps; /* the next member */
	w->retry_at = mu__now_ms() + w->delay_ms;
	w->delay_ms = w->delay_ms * 2 > 2000 ? 2000 : w->delay_ms * 2;
}

int mu_etcd_poll(mu_etcd_t *e, int timeout_ms)
{
	mu__list_t *it, *tmp;
	CURLMsg *msg;
	int running, left, wait_ms = timeout_ms;
	int64_t now = mu__now_ms();

	e->in_poll = 1;
	mu__list_foreach(it, &e->watches) {
		mu_etcd_watch_t *w = mu__container_of(it, mu_etcd_watch_t, node);

		if (w->state == W_WAITING && w->retry_at <= now && watch_connect(w) != 0)
			w->retry_at = now + w->delay_ms;
		if (w->state == W_WAITING && w->retry_at - now < wait_ms)
			wait_ms = (int)(w->retry_at - now);
	}
	curl_multi_perform(e->multi, &running);
	curl_multi_poll(e->multi, NULL, 0, wait_ms < 0 ? 0 : wait_ms, NULL);
	curl_multi_perform(e->multi, &running);
	while ((msg = curl_multi_info_read(e->multi, &left)) != NULL) {
		mu_etcd_watch_t *w = NULL;

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&w);
		if (w != NULL)
			stream_ended(w);
	}
	mu__list_foreach(it, &e->watches) {
		mu_etcd_watch_t *w = mu__container_of(it, mu_etcd_watch_t, node);

		if (w->pending.len > 0)
			deliver(w);
		if (w->state == W_RUNNING && w->next_rev > 0)
			w->delay_ms = 100; /* it worked: reset the backoff */
	}
	e->in_poll = 0;
	mu__list_foreach_safe(it, tmp, &e->watches) {
		mu_etcd_watch_t *w = mu__container_of(it, mu_etcd_watch_t, node);

		if (w->canceled)
			watch_destroy(w);
	}
	return 0;
}

void mu_etcd_wakeup(mu_etcd_t *e)
{
	curl_multi_wakeup(e->multi);
}
