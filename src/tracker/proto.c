/* SPDX-License-Identifier: MIT */
/*
 * TVM tracker codec: frame boundaries, request validation, reply encoding.
 * Pure functions over bytes; the server and the client do the I/O.
 */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "muster/common.h"
#include "core/endian_int.h"
#include "core/json_int.h"
#include "tracker/proto_int.h"

int mu__tracker_frame_peek(const void *data, size_t len, size_t max,
                           size_t *body_len)
{
	int32_t n;

	if (len < 4)
		return 0;
	n = mu_le32_get_signed(data);
	if (n <= 0)
		return MU_EPROTO;
	if ((uint32_t)n > max)
		return MU_ETOOBIG;
	*body_len = (size_t)n;
	return len - 4 >= (size_t)n ? 1 : 0;
}

/* Write the length prefix in front of a body appended after `start`. */
static int finish_frame(mu__buf_t *out, size_t start, int rc)
{
	size_t n;

	if (rc != 0) {
		out->len = start; /* leave no half frame behind */
		return rc;
	}
	n = out->len - start - 4;
	if (n > INT32_MAX) {
		out->len = start;
		return MU_ETOOBIG;
	}
	mu_le32_put(out->data + start, (uint32_t)n);
	return 0;
}

int mu__tracker_frame_json(mu__buf_t *out, const cJSON *v)
{
	size_t start = out->len;
	int rc = mu__buf_append(out, "\0\0\0\0", 4);

	if (rc != 0)
		return rc;
	return finish_frame(out, start, mu__json_dump(out, v));
}

int mu__tracker_frame_int(mu__buf_t *out, int v)
{
	size_t start = out->len;
	int rc = mu__buf_append(out, "\0\0\0\0", 4);

	if (rc != 0)
		return rc;
	return finish_frame(out, start, mu__buf_printf(out, "%d", v));
}

static int fail(char *why, size_t whylen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;

	if (why != NULL && whylen > 0) {
		va_start(ap, fmt);
		vsnprintf(why, whylen, fmt, ap);
		va_end(ap);
	}
	return MU_EPROTO;
}

static const char *short_string(const cJSON *v)
{
	if (!cJSON_IsString(v) || v->valuestring == NULL ||
	    strlen(v->valuestring) > MU_TRACKER_MAX_STR)
		return NULL;
	return v->valuestring;
}

/* A port as servers send it: an integer, or a string (C++, Java servers). */
static int port_ok(const cJSON *v)
{
	if (mu__json_is_int(v, 0, 65535))
		return 1;
	return short_string(v) != NULL;
}

static int parse_put(const cJSON *root, mu__tracker_msg_t *m, char *why,
                     size_t wl)
{
	const cJSON *res = cJSON_GetArrayItem(root, 2);
	const cJSON *addr = cJSON_GetArrayItem(root, 3);

	m->key = short_string(cJSON_GetArrayItem(root, 1));
	if (m->key == NULL)
		return fail(why, wl, "PUT: element 1 (key) must be a string");
	if (!cJSON_IsArray(res) || cJSON_GetArraySize(res) != 2)
		return fail(why, wl, "PUT: element 2 must be [port, matchkey]");
	m->port = cJSON_GetArrayItem(res, 0);
	m->matchkey = short_string(cJSON_GetArrayItem(res, 1));
	if (!port_ok(m->port))
		return fail(why, wl, "PUT: port must be an integer 0-65535 or a string");
	if (m->matchkey == NULL)
		return fail(why, wl, "PUT: matchkey must be a string");
	if (addr != NULL && !cJSON_IsNull(addr)) {
		m->custom_addr = short_string(addr);
		if (m->custom_addr == NULL)
			return fail(why, wl, "PUT: element 3 (custom address) must be a string or null");
	}
	return 0;
}

static int parse_request(const cJSON *root, mu__tracker_msg_t *m, char *why,
                         size_t wl)
{
	const cJSON *prio = cJSON_GetArrayItem(root, 3);

	m->key = short_string(cJSON_GetArrayItem(root, 1));
	if (m->key == NULL)
		return fail(why, wl, "REQUEST: element 1 (key) must be a string");
	/* any JSON number, as TVM compares Python numbers */
	if (mu__json_double(prio, -HUGE_VAL, HUGE_VAL, &m->priority) != 0)
		return fail(why, wl, "REQUEST: element 3 (priority) must be a number");
	return 0;
}

static int parse_update_info(cJSON *root, mu__tracker_msg_t *m, char *why,
                             size_t wl)
{
	cJSON *info = cJSON_GetArrayItem(root, 1);
	const cJSON *key, *addr, *host;

	if (!cJSON_IsObject(info))
		return fail(why, wl, "UPDATE_INFO: element 1 must be an object");
	key = cJSON_GetObjectItemCaseSensitive(info, "key");
	if (key != NULL && short_string(key) == NULL)
		return fail(why, wl, "UPDATE_INFO: \"key\" must be a string");
	addr = cJSON_GetObjectItemCaseSensitive(info, "addr");
	if (!cJSON_IsArray(addr) || cJSON_GetArraySize(addr) != 2)
		return fail(why, wl, "UPDATE_INFO: \"addr\" must be [host or null, port]");
	host = cJSON_GetArrayItem(addr, 0);
	if (!cJSON_IsNull(host) && short_string(host) == NULL)
		return fail(why, wl, "UPDATE_INFO: addr[0] must be a string or null");
	if (!port_ok(cJSON_GetArrayItem(addr, 1)))
		return fail(why, wl, "UPDATE_INFO: addr[1] must be an integer port or a string");
	m->info = info;
	return 0;
}

static int parse_body(cJSON *root, mu__tracker_msg_t *m, char *why, size_t wl)
{
	const cJSON *code = cJSON_GetArrayItem(root, 0);
	int n = cJSON_GetArraySize(root);

	if (!cJSON_IsArray(root) || n < 1)
		return fail(why, wl, "message must be a non-empty JSON array");
	if (mu__json_int(code, INT_MIN, INT_MAX, &m->code) != 0)
		return fail(why, wl, "element 0 (code) must be an integer");
	switch (m->code) {
	case MU_TC_PING:
	case MU_TC_SUMMARY:
	case MU_TC_GET_PENDING_MATCHKEYS:
		return 0;
	case MU_TC_STOP:
		if (n < 2)
			return fail(why, wl, "STOP: missing the stop key");
		m->stop_key = cJSON_GetArrayItem(root, 1);
		return 0;
	case MU_TC_PUT:
		return n < 3 ? fail(why, wl, "PUT: needs [3, key, [port, matchkey], addr]")
		             : parse_put(root, m, why, wl);
	case MU_TC_REQUEST:
		return n < 4 ? fail(why, wl, "REQUEST: needs [4, key, user, priority]")
		             : parse_request(root, m, why, wl);
	case MU_TC_UPDATE_INFO:
		return n < 2 ? fail(why, wl, "UPDATE_INFO: needs [5, {info}]")
		             : parse_update_info(root, m, why, wl);
	default:
		return fail(why, wl, "unknown tracker code %d", m->code);
	}
}

int mu__tracker_msg_parse(const char *body, size_t len, mu__tracker_msg_t *m,
                          char *why, size_t whylen)
{
	int rc;

	memset(m, 0, sizeof(*m));
	if (why != NULL && whylen > 0)
		why[0] = '\0';
	rc = mu__json_parse(body, len, &m->root);
	if (rc == MU_EJSON) {
		fail(why, whylen, "invalid JSON");
		return rc;
	}
	if (rc != 0)
		return rc;
	rc = parse_body(m->root, m, why, whylen);
	if (rc != 0)
		mu__tracker_msg_free(m);
	return rc;
}

void mu__tracker_msg_free(mu__tracker_msg_t *m)
{
	cJSON_Delete(m->root);
	memset(m, 0, sizeof(*m));
}

static int copy_str(const cJSON *v, char *out, size_t outlen)
{
	size_t n;

	if (!cJSON_IsString(v) || v->valuestring == NULL)
		return MU_EPROTO;
	n = strlen(v->valuestring);
	if (n >= outlen)
		return MU_ETOOBIG;
	memcpy(out, v->valuestring, n + 1);
	return 0;
}

int mu__tracker_grant_parse(const char *body, size_t len, char *addr,
                            size_t addrlen, int *port, char *matchkey,
                            size_t mklen)
{
	const cJSON *res, *p;
	cJSON *root;
	char *end;
	long v = -1;
	int rc = mu__json_parse(body, len, &root);

	if (rc != 0)
		return rc;
	rc = MU_EPROTO;
	res = cJSON_GetArrayItem(root, 1);
	/* [-1, why]: a muster tracker refusing the request for a limit */
	if (cJSON_IsArray(root) && mu__json_is_int(cJSON_GetArrayItem(root, 0), -1, -1)) {
		rc = MU_EFAIL;
		goto out;
	}
	if (!cJSON_IsArray(root) || cJSON_GetArraySize(root) != 2 ||
	    !mu__json_is_int(cJSON_GetArrayItem(root, 0), 0, 0) ||
	    !cJSON_IsArray(res) || cJSON_GetArraySize(res) != 3)
		goto out;
	p = cJSON_GetArrayItem(res, 1);
	if (mu__json_int(p, 0, 65535, port) == 0) {
		v = *port;
	} else if (cJSON_IsString(p)) {
		v = strtol(p->valuestring, &end, 10);
		if (end == p->valuestring || *end != '\0' || v < 0 || v > 65535)
			goto out;
	} else {
		goto out;
	}
	*port = (int)v;
	rc = copy_str(cJSON_GetArrayItem(res, 0), addr, addrlen);
	if (rc == 0)
		rc = copy_str(cJSON_GetArrayItem(res, 2), matchkey, mklen);
out:
	cJSON_Delete(root);
	return rc;
}
