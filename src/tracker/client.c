/* SPDX-License-Identifier: MIT */
/*
 * Blocking tracker client: one connection, request/reply with deadlines.
 * Requests are written exactly as TVM's Python peers write them (the same
 * JSON text), so a tracker sees no difference between us and them.
 *
 * A connection that failed in any way is closed at once: the tracker may
 * still answer the abandoned request later, and that answer must never be
 * read as the reply to the next one.
 */
#include <errno.h>
#include <string.h>

#include "muster/tracker.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/endian_int.h"
#include "core/json_int.h"
#include "core/sock_int.h"
#include "core/time_int.h"
#include "tracker/proto_int.h"

/* Replies can be far larger than requests: a SUMMARY of many servers. */
#define MAX_REPLY_BYTES (64u << 20)

struct mu_tracker_client_s {
	mu_stream_t *st; /* NULL once the connection failed */
};

int mu_tracker_client_connect(const char *host, int port, int timeout_ms,
                              mu_tracker_client_t **out)
{
	int64_t deadline = mu__deadline(timeout_ms);
	mu_tracker_client_t *c;
	unsigned char magic[4];
	mu_stream_t *fd;
	int rc;

	*out = NULL;
	if (host == NULL)
		return MU_EARG;
	rc = mu__sock_connect(host, port, NULL, deadline, &fd);
	if (rc != 0)
		return rc;
	mu_le32_put(magic, MU_TRACKER_MAGIC);
	rc = mu__sock_send_all(fd, magic, 4, deadline);
	if (rc == 0)
		rc = mu__sock_recv_all(fd, magic, 4, deadline);
	if (rc == 0 && mu_le32_get(magic) != MU_TRACKER_MAGIC)
		rc = MU_EBADMAGIC;
	if (rc == 0 && (c = mu__malloc(sizeof(*c))) == NULL)
		rc = MU_ENOMEM;
	if (rc != 0) {
		mu__sock_close(fd);
		return rc;
	}
	c->st = fd;
	*out = c;
	return 0;
}

void mu_tracker_client_close(mu_tracker_client_t *c)
{
	if (c == NULL)
		return;
	mu__sock_close(c->st);
	mu__free(c);
}

static int broken(mu_tracker_client_t *c, int rc)
{
	if (rc != 0 && c->st != NULL) {
		mu__sock_close(c->st);
		c->st = NULL;
	}
	return rc;
}

static int send_json(mu_tracker_client_t *c, const cJSON *msg,
                     int64_t deadline)
{
	mu__buf_t out;
	int rc;

	mu__buf_init(&out, 4 + MU_TRACKER_MAX_FRAME);
	rc = mu__tracker_frame_json(&out, msg);
	if (rc == 0)
		rc = mu__sock_send_all(c->st, out.data, out.len, deadline);
	mu__buf_free(&out);
	return rc;
}

static int recv_frame(mu_tracker_client_t *c, mu__buf_t *body,
                      int64_t deadline)
{
	unsigned char hdr[4];
	size_t n;
	int rc = mu__sock_recv_all(c->st, hdr, 4, deadline);

	if (rc != 0)
		return rc;
	rc = mu__tracker_frame_peek(hdr, 4, MAX_REPLY_BYTES, &n);
	if (rc < 0)
		return rc;
	rc = mu__buf_reserve(body, n);
	if (rc != 0)
		return rc;
	rc = mu__sock_recv_all(c->st, body->data, n, deadline);
	if (rc != 0)
		return rc;
	body->len = n;
	body->data[n] = '\0';
	return 0;
}

/*
 * Send msg (consumed) and read one reply frame into body. Every failure
 * closes the connection.
 */
static int call(mu_tracker_client_t *c, cJSON *msg, int timeout_ms,
                mu__buf_t *body)
{
	int64_t deadline = mu__deadline(timeout_ms);
	int rc;

	if (c->st == NULL) {
		cJSON_Delete(msg);
		return -ENOTCONN;
	}
	rc = msg != NULL ? send_json(c, msg, deadline) : MU_ENOMEM;
	cJSON_Delete(msg);
	if (rc == 0)
		rc = recv_frame(c, body, deadline);
	return broken(c, rc);
}

/* A reply that must be the bare integer 0 (or -1 -> MU_EFAIL). */
static int call_status(mu_tracker_client_t *c, cJSON *msg, int timeout_ms)
{
	mu__buf_t body;
	cJSON *v = NULL;
	int rc, code = 0;

	mu__buf_init(&body, MAX_REPLY_BYTES);
	rc = call(c, msg, timeout_ms, &body);
	if (rc == 0)
		rc = mu__json_parse(body.data, body.len, &v);
	if (rc == 0 && mu__json_int(v, MU_TC_FAIL, MU_TC_SUCCESS, &code) != 0)
		rc = MU_EPROTO;
	if (rc == 0 && code == MU_TC_FAIL)
		rc = MU_EFAIL;
	cJSON_Delete(v);
	mu__buf_free(&body);
	/* MU_EFAIL is an answer, not a broken connection. */
	return rc == MU_EFAIL ? rc : broken(c, rc);
}

/* [code] or [code, <items...>]; items are consumed even on failure. */
static cJSON *make_msg(int code, int nitems, cJSON *a, cJSON *b, cJSON *d)
{
	cJSON *items[3] = {a, b, d};
	cJSON *msg = cJSON_CreateArray();
	int i, ok = msg != NULL &&
	            cJSON_AddItemToArray(msg, cJSON_CreateNumber(code));

	for (i = 0; i < nitems; i++) {
		if (ok && items[i] != NULL && cJSON_AddItemToArray(msg, items[i]))
			continue;
		ok = 0;
		cJSON_Delete(items[i]);
	}
	if (!ok) {
		cJSON_Delete(msg);
		return NULL;
	}
	return msg;
}

static cJSON *string_or_null(const char *s)
{
	return s != NULL ? cJSON_CreateString(s) : cJSON_CreateNull();
}

int mu_tracker_client_ping(mu_tracker_client_t *c, int timeout_ms)
{
	return call_status(c, make_msg(MU_TC_PING, 0, NULL, NULL, NULL),
	                   timeout_ms);
}

int mu_tracker_client_summary(mu_tracker_client_t *c, int timeout_ms,
                              char **json)
{
	mu__buf_t body, text;
	cJSON *v = NULL;
	const cJSON *st;
	int rc;

	*json = NULL;
	mu__buf_init(&body, MAX_REPLY_BYTES);
	mu__buf_init(&text, MAX_REPLY_BYTES);
	rc = call(c, make_msg(MU_TC_SUMMARY, 0, NULL, NULL, NULL), timeout_ms,
	          &body);
	if (rc == 0)
		rc = mu__json_parse(body.data, body.len, &v);
	st = cJSON_GetArrayItem(v, 1);
	if (rc == 0 && (!cJSON_IsArray(v) ||
	                !mu__json_is_int(cJSON_GetArrayItem(v, 0), 0, 0) ||
	                !cJSON_IsObject(st)))
		rc = MU_EPROTO;
	if (rc == 0)
		rc = mu__json_dump(&text, st);
	if (rc == 0)
		*json = mu__buf_take(&text, NULL);
	cJSON_Delete(v);
	mu__buf_free(&body);
	mu__buf_free(&text);
	return broken(c, rc);
}

int mu_tracker_client_request(mu_tracker_client_t *c, const char *key,
                              double priority, int timeout_ms,
                              mu_tracker_grant_t *g)
{
	mu__buf_t body;
	int rc;

	memset(g, 0, sizeof(*g));
	mu__buf_init(&body, MAX_REPLY_BYTES);
	rc = call(c,
	          make_msg(MU_TC_REQUEST, 3, cJSON_CreateString(key),
	                   cJSON_CreateString(""), cJSON_CreateNumber(priority)),
	          timeout_ms, &body);
	if (rc == 0)
		rc = mu__tracker_grant_parse(body.data, body.len, g->addr,
		                             sizeof(g->addr), &g->port,
		                             g->matchkey, sizeof(g->matchkey));
	mu__buf_free(&body);
	/* MU_EFAIL is an answer (the request was refused), not a broken
	 * connection */
	return rc == MU_EFAIL ? rc : broken(c, rc);
}

int mu_tracker_client_update_info(mu_tracker_client_t *c, const char *info_key,
                                  const char *custom_addr, int port,
                                  int timeout_ms)
{
	cJSON *info = cJSON_CreateObject(), *addr = NULL;

	/* Field order as TVM's servers send it: key, then addr. */
	if (info == NULL || cJSON_AddStringToObject(info, "key", info_key) == NULL ||
	    (addr = cJSON_AddArrayToObject(info, "addr")) == NULL ||
	    !cJSON_AddItemToArray(addr, string_or_null(custom_addr)) ||
	    !cJSON_AddItemToArray(addr, cJSON_CreateNumber(port))) {
		cJSON_Delete(info);
		return MU_ENOMEM;
	}
	return call_status(c, make_msg(MU_TC_UPDATE_INFO, 1, info, NULL, NULL),
	                   timeout_ms);
}

int mu_tracker_client_put(mu_tracker_client_t *c, const char *key, int port,
                          const char *matchkey, const char *custom_addr,
                          int timeout_ms)
{
	cJSON *res = cJSON_CreateArray();

	if (res == NULL ||
	    !cJSON_AddItemToArray(res, cJSON_CreateNumber(port)) ||
	    !cJSON_AddItemToArray(res, cJSON_CreateString(matchkey))) {
		cJSON_Delete(res);
		return MU_ENOMEM;
	}
	return call_status(c,
	                   make_msg(MU_TC_PUT, 3, cJSON_CreateString(key), res,
	                            string_or_null(custom_addr)),
	                   timeout_ms);
}

void mu_tracker_strv_free(char **v)
{
	mu__strv_free(v);
}

static int strv_from_json(const cJSON *arr, char ***keys, size_t *n)
{
	size_t count = (size_t)cJSON_GetArraySize(arr), i = 0;
	const cJSON *it;
	char **v = mu__calloc(count + 1, sizeof(*v));

	if (v == NULL)
		return MU_ENOMEM;
	cJSON_ArrayForEach(it, arr) {
		if (!cJSON_IsString(it) ||
		    (v[i++] = mu__strdup(it->valuestring)) == NULL) {
			mu_tracker_strv_free(v);
			return cJSON_IsString(it) ? MU_ENOMEM : MU_EPROTO;
		}
	}
	*keys = v;
	*n = count;
	return 0;
}

int mu_tracker_client_pending(mu_tracker_client_t *c, int timeout_ms,
                              char ***keys, size_t *n)
{
	mu__buf_t body;
	cJSON *v = NULL;
	int rc;

	*keys = NULL;
	*n = 0;
	mu__buf_init(&body, MAX_REPLY_BYTES);
	rc = call(c, make_msg(MU_TC_GET_PENDING_MATCHKEYS, 0, NULL, NULL, NULL),
	          timeout_ms, &body);
	if (rc == 0)
		rc = mu__json_parse(body.data, body.len, &v);
	if (rc == 0)
		rc = cJSON_IsArray(v) ? strv_from_json(v, keys, n) : MU_EPROTO;
	cJSON_Delete(v);
	mu__buf_free(&body);
	return broken(c, rc);
}

int mu_tracker_client_stop(mu_tracker_client_t *c, const char *stop_key,
                           int timeout_ms)
{
	return call_status(c,
	                   make_msg(MU_TC_STOP, 1, cJSON_CreateString(stop_key),
	                            NULL, NULL),
	                   timeout_ms);
}
