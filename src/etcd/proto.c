/* SPDX-License-Identifier: MIT */
/*
 * etcd v3 JSON gateway codec; see proto_int.h. Request bodies are written
 * by hand (a few fixed shapes, base64 inside), responses are parsed with
 * cJSON treating every field as optional, as the gateway omits defaults.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc_int.h"
#include "core/base64_int.h"
#include "core/json_int.h"
#include "etcd/proto_int.h"

int mu__etcd_prefix_end(const void *prefix, size_t n, char **out, size_t *outlen)
{
	const unsigned char *p = prefix;
	char *e;

	while (n > 0 && p[n - 1] == 0xff)
		n--;
	if (n == 0) { /* all 0xff (or empty): every key from there on */
		*out = mu__strndup("", 1);
		*outlen = 1;
		return *out != NULL ? 0 : MU_ENOMEM;
	}
	e = mu__malloc(n + 1);
	if (e == NULL)
		return MU_ENOMEM;
	memcpy(e, p, n);
	e[n - 1] = (char)(p[n - 1] + 1);
	e[n] = '\0';
	*out = e;
	*outlen = n;
	return 0;
}

/* "name":"<base64>" */
static int field_b64(mu__buf_t *b, const char *name, const void *p, size_t n)
{
	int rc = mu__buf_printf(b, "\"%s\":\"", name);

	if (rc == 0)
		rc = mu__base64_encode(b, p, n);
	return rc != 0 ? rc : mu__buf_appendc(b, '"');
}

static int key_fields(mu__buf_t *b, const void *k, size_t kn, const void *end,
                      size_t en)
{
	int rc = field_b64(b, "key", k, kn);

	if (rc == 0 && end != NULL) {
		rc = mu__buf_appendc(b, ',');
		if (rc == 0)
			rc = field_b64(b, "range_end", end, en);
	}
	return rc;
}

static int put_fields(mu__buf_t *b, const void *k, size_t kn, const void *v,
                      size_t vn, int64_t lease)
{
	int rc = field_b64(b, "key", k, kn);

	if (rc == 0)
		rc = mu__buf_appendc(b, ',');
	if (rc == 0)
		rc = field_b64(b, "value", v, vn);
	if (rc == 0 && lease != 0)
		rc = mu__buf_printf(b, ",\"lease\":\"%lld\"", (long long)lease);
	return rc;
}

int mu__etcd_body_put(mu__buf_t *b, const void *k, size_t kn, const void *v,
                      size_t vn, int64_t lease)
{
	int rc = mu__buf_appendc(b, '{');

	if (rc == 0)
		rc = put_fields(b, k, kn, v, vn, lease);
	return rc != 0 ? rc : mu__buf_appendc(b, '}');
}

int mu__etcd_body_range(mu__buf_t *b, const void *k, size_t kn,
                        const void *end, size_t en)
{
	int rc = mu__buf_appendc(b, '{');

	if (rc == 0)
		rc = key_fields(b, k, kn, end, en);
	return rc != 0 ? rc : mu__buf_appendc(b, '}');
}

int mu__etcd_body_delete(mu__buf_t *b, const void *k, size_t kn,
                         const void *end, size_t en)
{
	return mu__etcd_body_range(b, k, kn, end, en);
}

int mu__etcd_body_txn_put(mu__buf_t *b, const void *k, size_t kn,
                          int64_t mod_rev, const void *v, size_t vn,
                          int64_t lease)
{
	int rc = mu__buf_appends(b, "{\"compare\":[{");

	if (rc == 0)
		rc = field_b64(b, "key", k, kn);
	if (rc == 0 && mod_rev < 0)
		rc = mu__buf_appends(b, ",\"result\":\"EQUAL\",\"target\":\"VERSION\",\"version\":\"0\"}]");
	else if (rc == 0)
		rc = mu__buf_printf(b, ",\"result\":\"EQUAL\",\"target\":\"MOD\",\"mod_revision\":\"%lld\"}]",
		                    (long long)mod_rev);
	if (rc == 0)
		rc = mu__buf_appends(b, ",\"success\":[{\"request_put\":{");
	if (rc == 0)
		rc = put_fields(b, k, kn, v, vn, lease);
	if (rc == 0)
		rc = mu__buf_appends(b, "}}]}");
	return rc;
}

int mu__etcd_body_lease(mu__buf_t *b, const char *field, int64_t v)
{
	return mu__buf_printf(b, "{\"%s\":\"%lld\"}", field, (long long)v);
}

int mu__etcd_body_watch(mu__buf_t *b, const void *k, size_t kn,
                        const void *end, size_t en, int64_t start_rev,
                        int noput)
{
	int rc = mu__buf_appends(b, "{\"create_request\":{");

	if (rc == 0)
		rc = key_fields(b, k, kn, end, en);
	if (rc == 0 && start_rev > 0)
		rc = mu__buf_printf(b, ",\"start_revision\":\"%lld\"", (long long)start_rev);
	if (rc == 0 && noput)
		rc = mu__buf_appends(b, ",\"filters\":[\"NOPUT\"]");
	return rc != 0 ? rc : mu__buf_appends(b, "}}");
}

/* ---- responses ---- */

int mu__etcd_int64(const cJSON *obj, const char *name, int64_t *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
	char *end;

	*out = 0;
	if (v == NULL)
		return 0;
	if (cJSON_IsNumber(v)) /* exact only up to 2^53: etcd sends strings */
		return mu__json_int64(v, -MU_JSON_INT_MAX, MU_JSON_INT_MAX, out);
	if (!cJSON_IsString(v))
		return MU_EPROTO;
	errno = 0;
	*out = strtoll(v->valuestring, &end, 10);
	return errno != 0 || end == v->valuestring || *end != '\0' ? MU_EPROTO : 0;
}

int64_t mu__etcd_revision(const cJSON *root)
{
	int64_t rev = 0;

	mu__etcd_int64(cJSON_GetObjectItemCaseSensitive(root, "header"), "revision", &rev);
	return rev;
}

/* Map etcd's gRPC code (with its text) to our errors. */
static int map_error(int grpc_code, const char *text)
{
	if (strstr(text, "request is too large") != NULL)
		return MU_ETOOBIG;
	switch (grpc_code) {
	case 5:
		return -ENOENT;
	case 14:
		return -ECONNREFUSED; /* unavailable: worth another member */
	case 2:
		if (strstr(text, "deadline exceeded") != NULL)
			return -ETIMEDOUT;
		return MU_EFAIL;
	default:
		return MU_EFAIL;
	}
}

int mu__etcd_response(int http_status, const char *body, size_t len,
                      cJSON **root, char *msg, size_t msglen)
{
	const cJSON *err, *code;
	cJSON *v = NULL;
	int rc, ecode;

	*root = NULL;
	if (msglen > 0)
		msg[0] = '\0';
	rc = mu__json_parse(body, len, &v);
	if (http_status >= 200 && http_status < 300) {
		if (rc != 0 || !cJSON_IsObject(v)) {
			cJSON_Delete(v);
			snprintf(msg, msglen, "HTTP %d with a body that is not a JSON object",
			         http_status);
			return rc == MU_ENOMEM ? rc : MU_EPROTO;
		}
		*root = v;
		return 0;
	}
	/* {"error","message","code"}, or plain text from the HTTP mux */
	err = cJSON_GetObjectItemCaseSensitive(v, "error");
	code = cJSON_GetObjectItemCaseSensitive(v, "code");
	if (cJSON_IsString(err)) {
		snprintf(msg, msglen, "%s", err->valuestring);
		if (mu__json_int(code, INT_MIN, INT_MAX, &ecode) != 0)
			ecode = -1; /* no code, or not an int: no gRPC status to map */
		rc = map_error(ecode, msg);
	} else {
		snprintf(msg, msglen, "HTTP %d: %.*s", http_status,
		         (int)(len > 100 ? 100 : len), body);
		rc = map_error(-1, msg);
		if (rc == MU_EFAIL)
			rc = MU_EPROTO; /* not etcd's error object: not etcd answering */
	}
	/* a member without a leader (503), or one that cannot reach quorum
	 * (500 "context deadline exceeded"): another member may do better */
	if (http_status > 500 || (http_status == 500 && (rc == MU_EFAIL || rc == MU_EPROTO)))
		rc = -ECONNREFUSED;
	cJSON_Delete(v);
	return rc;
}

static int b64_field(const cJSON *o, const char *name, char **out, size_t *n)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	mu__buf_t b;
	int rc;

	*out = NULL;
	*n = 0;
	mu__buf_init(&b, (size_t)1 << 32);
	if (v != NULL && !cJSON_IsString(v))
		return MU_EPROTO;
	rc = mu__buf_reserve(&b, 1); /* an absent field is "", not NULL */
	if (rc == 0 && v != NULL)
		rc = mu__base64_decode(&b, v->valuestring, strlen(v->valuestring));
	if (rc != 0) {
		mu__buf_free(&b);
		return rc;
	}
	*out = mu__buf_take(&b, n);
	return 0;
}

int mu__etcd_kv(const cJSON *o, mu_etcd_kv_t *kv)
{
	int rc;

	memset(kv, 0, sizeof(*kv));
	if (!cJSON_IsObject(o))
		return MU_EPROTO;
	rc = b64_field(o, "key", &kv->key, &kv->klen);
	if (rc == 0)
		rc = b64_field(o, "value", &kv->value, &kv->vlen);
	if (rc == 0)
		rc = mu__etcd_int64(o, "create_revision", &kv->create_revision);
	if (rc == 0)
		rc = mu__etcd_int64(o, "mod_revision", &kv->mod_revision);
	if (rc == 0)
		rc = mu__etcd_int64(o, "version", &kv->version);
	if (rc == 0)
		rc = mu__etcd_int64(o, "lease", &kv->lease);
	if (rc != 0)
		mu__etcd_kv_free(kv);
	return rc;
}

void mu__etcd_kv_free(mu_etcd_kv_t *kv)
{
	mu__free(kv->key);
	mu__free(kv->value);
	kv->key = kv->value = NULL;
}

int mu__etcd_parse_range(const cJSON *root, mu_etcd_range_t *out)
{
	const cJSON *kvs = cJSON_GetObjectItemCaseSensitive(root, "kvs"), *it;
	size_t n = 0;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	out->revision = mu__etcd_revision(root);
	out->more = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "more"));
	if (kvs == NULL)
		return 0;
	if (!cJSON_IsArray(kvs))
		return MU_EPROTO;
	out->kvs = mu__calloc((size_t)cJSON_GetArraySize(kvs) + 1, sizeof(*out->kvs));
	if (out->kvs == NULL)
		return MU_ENOMEM;
	cJSON_ArrayForEach(it, kvs) {
		rc = mu__etcd_kv(it, &out->kvs[n]);
		if (rc != 0)
			break;
		n++;
	}
	out->n = n;
	if (rc != 0)
		mu_etcd_range_free(out);
	return rc;
}

void mu_etcd_range_free(mu_etcd_range_t *r)
{
	size_t i;

	if (r == NULL)
		return;
	for (i = 0; i < r->n; i++)
		mu__etcd_kv_free(&r->kvs[i]);
	mu__free(r->kvs);
	r->kvs = NULL;
	r->n = 0;
}

int mu__etcd_parse_watch(const char *line, size_t len, mu__etcd_watch_msg_t *m)
{
	const cJSON *res, *events, *it, *reason;
	cJSON *root = NULL;
	int rc = mu__json_parse(line, len, &root);

	memset(m, 0, sizeof(*m));
	if (rc != 0)
		return rc;
	res = cJSON_GetObjectItemCaseSensitive(root, "result");
	if (!cJSON_IsObject(res)) {
		/* {"error":{...}} is how a broken stream ends */
		cJSON_Delete(root);
		return MU_EPROTO;
	}
	m->revision = mu__etcd_revision(res);
	m->created = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "created"));
	m->canceled = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "canceled"));
	rc = mu__etcd_int64(res, "compact_revision", &m->compact_revision);
	reason = cJSON_GetObjectItemCaseSensitive(res, "cancel_reason");
	if (cJSON_IsString(reason))
		snprintf(m->reason, sizeof(m->reason), "%s", reason->valuestring);
	events = cJSON_GetObjectItemCaseSensitive(res, "events");
	if (rc == 0 && cJSON_IsArray(events) && cJSON_GetArraySize(events) > 0) {
		size_t n = (size_t)cJSON_GetArraySize(events);

		m->kvs = mu__calloc(n, sizeof(*m->kvs));
		m->types = mu__calloc(n, sizeof(*m->types));
		if (m->kvs == NULL || m->types == NULL)
			rc = MU_ENOMEM;
		cJSON_ArrayForEach(it, events) {
			const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
			int tnum = 0;

			if (rc != 0)
				break;
			rc = mu__etcd_kv(cJSON_GetObjectItemCaseSensitive(it, "kv"),
			                 &m->kvs[m->nevents]);
			if (rc != 0)
				break;
			/* PUT is enum 0, so the gateway leaves "type" out */
			m->types[m->nevents++] =
				(cJSON_IsString(type) && strcmp(type->valuestring, "DELETE") == 0) ||
						(mu__json_int(type, 0, 1, &tnum) == 0 && tnum == 1)
					? MU_ETCD_EVENT_DELETE : MU_ETCD_EVENT_PUT;
		}
	} else if (rc == 0 && events != NULL && !cJSON_IsArray(events)) {
		rc = MU_EPROTO;
	}
	cJSON_Delete(root);
	if (rc != 0)
		mu__etcd_watch_msg_free(m);
	return rc;
}

void mu__etcd_watch_msg_free(mu__etcd_watch_msg_t *m)
{
	size_t i;

	for (i = 0; i < m->nevents; i++)
		mu__etcd_kv_free(&m->kvs[i]);
	mu__free(m->kvs);
	mu__free(m->types);
	m->kvs = NULL;
	m->types = NULL;
	m->nevents = 0;
}
