/* SPDX-License-Identifier: MIT */
/*
 * The TCPStore client's requests, as torch's own client sends them (spec
 * §11): "/"-prefixed keys (unless raw_keys), get = WAIT then GET, no reply
 * read for SET/APPEND/MULTI_SET, CANCEL_WAIT on a v2 wait's timeout and a
 * new connection after a v1 one. Each call takes its connection from
 * client.c (mu__store_conn_ready), reads every reply under the client's
 * deadline, and drops the connection on any failure
 * (mu__store_conn_broken), so a late reply is never read as the answer
 * to a later request.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "muster/store.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/endian_int.h"
#include "core/time_int.h"
#include "store/client_int.h"
#include "store/proto_int.h"

static int begin(mu_store_client_t *c, mu__buf_t *b, mu__store_op_t op)
{
	int code = mu__store_opcode(c->d, op);

	mu__buf_init(b, (size_t)-1);
	if (code < 0)
		return -ENOTSUP;
	return mu__store_put_u8(b, (uint8_t)code);
}

static int put_key(mu_store_client_t *c, mu__buf_t *b, const char *key)
{
	size_t n = strlen(key);
	int rc = mu__store_put_u64(b, n + (c->o.raw_keys ? 0 : 1));

	if (rc == 0 && !c->o.raw_keys)
		rc = mu__buf_appendc(b, '/');
	return rc != 0 ? rc : mu__buf_append(b, key, n);
}

static int put_keys(mu_store_client_t *c, mu__buf_t *b, const char *const *keys,
                    size_t n)
{
	int rc = mu__store_put_u64(b, n);

	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = put_key(c, b, keys[i]);
	return rc;
}

static int recv_u8(mu_store_client_t *c, uint8_t *v, int64_t deadline)
{
	return mu__sock_recv_all(c->st, v, 1, deadline);
}

static int recv_i64(mu_store_client_t *c, int64_t *v)
{
	unsigned char b[8];
	int rc = mu__sock_recv_all(c->st, b, 8, mu__deadline(c->o.timeout_ms));

	if (rc == 0)
		*v = (int64_t)mu_le64_get(b);
	return rc;
}

static int recv_bytes(mu_store_client_t *c, mu_store_value_t *out)
{
	int64_t deadline = mu__deadline(c->o.timeout_ms);
	unsigned char b[8];
	uint64_t n;
	int rc = mu__sock_recv_all(c->st, b, 8, deadline);

	out->data = NULL;
	out->len = 0;
	if (rc != 0)
		return rc;
	n = mu_le64_get(b);
	/* the second test keeps n + 1 from wrapping to a 0-byte buffer when
	 * the limit is SIZE_MAX ("none") */
	if (n > c->o.max_value_bytes || n >= SIZE_MAX)
		return MU_ETOOBIG;
	out->data = mu__malloc((size_t)n + 1);
	if (out->data == NULL)
		return MU_ENOMEM;
	rc = mu__sock_recv_all(c->st, out->data, (size_t)n, deadline);
	if (rc != 0) {
		mu__free(out->data);
		out->data = NULL;
		return rc;
	}
	((char *)out->data)[n] = '\0'; /* a convenience for text values */
	out->len = (size_t)n;
	return 0;
}

int mu_store_set(mu_store_client_t *c, const char *key, const void *value,
                 size_t len)
{
	mu__buf_t b;
	int rc = mu__store_conn_ready(c);

	if (rc != 0)
		return rc;
	rc = begin(c, &b, MU_SOP_SET);
	if (rc == 0)
		rc = put_key(c, &b, key);
	if (rc == 0)
		rc = mu__store_put_str(&b, value, len);
	return mu__store_conn_broken(c, mu__store_conn_send(c, &b, rc)); /* no reply */
}

/* The wait timed out with WAIT sent: leave the connection clean. */
static int cancel_wait(mu_store_client_t *c)
{
	int64_t deadline = mu__deadline(c->o.timeout_ms);
	mu__buf_t b;
	uint8_t v = 0;
	int rc;

	if (c->d == MU_STORE_V1) {
		/* 1.13's protocol cannot cancel: a late STOP_WAITING would be
		 * read as part of the next reply, so start a new connection */
		rc = mu__store_conn_redial(c);
		return rc != 0 ? mu__store_conn_broken(c, rc) : -ETIMEDOUT;
	}
	rc = mu__store_conn_send(c, &b, begin(c, &b, MU_SOP_CANCEL_WAIT));
	if (rc == 0)
		rc = recv_u8(c, &v, deadline);
	if (rc == 0 && v == MU_STORE_STOP_WAITING) /* it raced the cancel */
		rc = recv_u8(c, &v, deadline);
	if (rc == 0 && v != MU_STORE_WAIT_CANCELED)
		rc = MU_EPROTO;
	return rc != 0 ? mu__store_conn_broken(c, rc) : -ETIMEDOUT;
}

int mu_store_wait(mu_store_client_t *c, const char *const *keys, size_t n,
                  int timeout_ms)
{
	int64_t deadline = mu__deadline(timeout_ms < 0 ? c->o.timeout_ms : timeout_ms);
	mu__buf_t b;
	uint8_t v;
	int rc = mu__store_conn_ready(c);

	if (rc != 0)
		return rc;
	rc = begin(c, &b, MU_SOP_WAIT);
	if (rc == 0)
		rc = put_keys(c, &b, keys, n);
	rc = mu__store_conn_send(c, &b, rc);
	if (rc == 0)
		rc = mu__sock_wait_readable(c->st, deadline);
	if (rc == -ETIMEDOUT)
		return cancel_wait(c);
	if (rc == 0)
		rc = recv_u8(c, &v, mu__deadline(c->o.timeout_ms));
	if (rc == 0 && v != MU_STORE_STOP_WAITING)
		rc = MU_EPROTO;
	return mu__store_conn_broken(c, rc);
}

int mu_store_get(mu_store_client_t *c, const char *key, mu_store_value_t *out)
{
	mu__buf_t b;
	int rc;

	out->data = NULL;
	out->len = 0;
	rc = mu_store_wait(c, &key, 1, -1);
	if (rc != 0)
		return rc;
	rc = begin(c, &b, MU_SOP_GET);
	if (rc == 0)
		rc = put_key(c, &b, key);
	rc = mu__store_conn_send(c, &b, rc);
	if (rc == 0)
		rc = recv_bytes(c, out);
	return mu__store_conn_broken(c, rc);
}

int mu_store_add(mu_store_client_t *c, const char *key, int64_t delta,
                 int64_t *result)
{
	mu__buf_t b;
	int rc = mu__store_conn_ready(c);

	if (rc != 0)
		return rc;
	rc = begin(c, &b, MU_SOP_ADD);
	if (rc == 0)
		rc = put_key(c, &b, key);
	if (rc == 0)
		rc = mu__store_put_u64(&b, (uint64_t)delta);
	rc = mu__store_conn_send(c, &b, rc);
	if (rc == 0)
		rc = recv_i64(c, result);
	return mu__store_conn_broken(c, rc);
}

int mu_store_compare_set(mu_store_client_t *c, const char *key,
                         const void *expected, size_t elen, const void *desired,
                         size_t dlen, mu_store_value_t *out)
{
	mu__buf_t b;
	int rc = mu__store_conn_ready(c);

	out->data = NULL;
	out->len = 0;
	if (rc != 0)
		return rc;
	rc = begin(c, &b, MU_SOP_COMPARE_SET);
	if (rc == 0)
		rc = put_key(c, &b, key);
	if (rc == 0)
		rc = mu__store_put_str(&b, expected, elen);
	if (rc == 0)
		rc = mu__store_put_str(&b, desired, dlen);
	rc = mu__store_conn_send(c, &b, rc);
	if (rc == 0)
		rc = recv_bytes(c, out);
	return mu__store_conn_broken(c, rc);
}

int mu_store_check(mu_store_client_t *c, const char *const *keys, size_t n,
                   int *is_ready)
{
	mu__buf_t b;
	uint8_t v = 0;
	int rc = mu__store_conn_ready(c);

	if (rc != 0)
		return rc;
	rc = begin(c, &b, MU_SOP_CHECK);
	if (rc == 0)
		rc = put_keys(c, &b, keys, n);
	rc = mu__store_conn_send(c, &b, rc);
	if (rc == 0)
		rc = recv_u8(c, &v, mu__deadline(c->o.timeout_ms));
	if (rc == 0 && v != MU_STORE_READY && v != MU_STORE_NOT_READY)
		rc = MU_EPROTO;
	*is_ready = v == MU_STORE_READY;
	return mu__store_conn_broken(c, rc);
}

int mu_store_delete(mu_store_client_t *c, const char *key, int *deleted)
{
	mu__buf_t b;
	int64_t v = 0;
	int rc = mu__store_conn_ready(c);

	if (rc != 0)
		return rc;
	rc = begin(c, &b, MU_SOP_DELETE_KEY);
	if (rc == 0)
		rc = put_key(c, &b, key);
	rc = mu__store_conn_send(c, &b, rc);
	if (rc == 0)
		rc = recv_i64(c, &v);
	*deleted = v == 1;
	return mu__store_conn_broken(c, rc);
}

int mu_store_num_keys(mu_store_client_t *c, int64_t *n)
{
	mu__buf_t b;
	int rc = mu__store_conn_ready(c);

	if (rc != 0)
		return rc;
	rc = mu__store_conn_send(c, &b, begin(c, &b, MU_SOP_GETNUMKEYS));
	if (rc == 0)
		rc = recv_i64(c, n);
	return mu__store_conn_broken(c, rc);
}

int mu_store_append(mu_store_client_t *c, const char *key, const void *value,
                    size_t len)
{
	mu__buf_t b;
	int rc = mu__store_conn_ready(c);

	if (rc != 0)
		return rc;
	rc = begin(c, &b, MU_SOP_APPEND);
	if (rc == -ENOTSUP) {
		mu__buf_free(&b);
		return rc;
	}
	if (rc == 0)
		rc = put_key(c, &b, key);
	if (rc == 0)
		rc = mu__store_put_str(&b, value, len);
	return mu__store_conn_broken(c, mu__store_conn_send(c, &b, rc)); /* no reply */
}

int mu_store_multi_get(mu_store_client_t *c, const char *const *keys, size_t n,
                       mu_store_value_t *out)
{
	mu__buf_t b;
	size_t i;
	int rc;

	memset(out, 0, n * sizeof(*out));
	rc = mu_store_wait(c, keys, n, -1);
	if (rc != 0)
		return rc;
	if (c->d == MU_STORE_V1) {
		for (i = 0; rc == 0 && i < n; i++)
			rc = mu_store_get(c, keys[i], &out[i]);
	} else {
		rc = begin(c, &b, MU_SOP_MULTI_GET);
		if (rc == 0)
			rc = put_keys(c, &b, keys, n);
		rc = mu__store_conn_send(c, &b, rc);
		for (i = 0; rc == 0 && i < n; i++)
			rc = recv_bytes(c, &out[i]);
	}
	if (rc != 0)
		for (i = 0; i < n; i++) {
			mu__free(out[i].data);
			out[i].data = NULL;
		}
	return mu__store_conn_broken(c, rc);
}

int mu_store_multi_set(mu_store_client_t *c, const char *const *keys,
                       const mu_store_value_t *values, size_t n)
{
	mu__buf_t b;
	size_t i;
	int rc = mu__store_conn_ready(c);

	if (rc != 0)
		return rc;
	if (c->d == MU_STORE_V1) {
		for (i = 0; rc == 0 && i < n; i++)
			rc = mu_store_set(c, keys[i], values[i].data, values[i].len);
		return rc;
	}
	rc = begin(c, &b, MU_SOP_MULTI_SET);
	if (rc == 0)
		rc = mu__store_put_u64(&b, n);
	for (i = 0; rc == 0 && i < n; i++) {
		rc = put_key(c, &b, keys[i]);
		if (rc == 0)
			rc = mu__store_put_str(&b, values[i].data, values[i].len);
	}
	return mu__store_conn_broken(c, mu__store_conn_send(c, &b, rc)); /* no reply */
}

/* Read LIST's reply: i64 n, then n strings, within the value budget. */
static int recv_list(mu_store_client_t *c, int64_t count, mu_store_value_t **keys,
                     size_t *n)
{
	size_t budget = c->o.max_value_bytes, cap = 0, k = 0;
	mu_store_value_t *v = NULL, key;
	int rc = 0;

	/* every string costs at least its 8-byte length: a count beyond the
	 * budget is a lie, refused before anything is allocated for it */
	if (rc == 0 && (count < 0 || (uint64_t)count > budget / 8))
		rc = MU_ETOOBIG;
	for (int64_t i = 0; rc == 0 && i < count; i++) {
		rc = recv_bytes(c, &key);
		if (rc == 0 && key.len + 8 > budget)
			rc = MU_ETOOBIG;
		if (rc != 0) {
			mu__free(key.data);
			break;
		}
		budget -= key.len + 8;
		/* torch's client keeps only its own "/"-prefixed keys and
		 * strips the "/"; raw_keys hands over all of them as they are */
		if (!c->o.raw_keys && (key.len == 0 || ((char *)key.data)[0] != '/')) {
			mu__free(key.data);
			continue;
		}
		if (!c->o.raw_keys) {
			memmove(key.data, (char *)key.data + 1, key.len); /* and the NUL */
			key.len--;
		}
		if (k == cap) {
			mu_store_value_t *nv = mu__realloc(v, (cap ? cap * 2 : 16) * sizeof(*v));

			if (nv == NULL) {
				mu__free(key.data);
				rc = MU_ENOMEM;
				break;
			}
			v = nv;
			cap = cap ? cap * 2 : 16;
		}
		v[k++] = key;
	}
	if (rc != 0) {
		while (k > 0)
			mu__free(v[--k].data);
		mu__free(v);
		return rc;
	}
	*keys = v;
	*n = k;
	return 0;
}

int mu_store_list(mu_store_client_t *c, mu_store_value_t **keys, size_t *n)
{
	mu__buf_t b;
	int64_t count = 0;
	int rc;

	*keys = NULL;
	*n = 0;
	if ((rc = mu__store_conn_ready(c)) != 0)
		return rc;
	rc = begin(c, &b, MU_SOP_LIST);
	if (rc == -ENOTSUP) { /* v1 has no LIST: nothing was sent */
		mu__buf_free(&b);
		return rc;
	}
	rc = mu__store_conn_send(c, &b, rc);
	if (rc == 0)
		rc = recv_i64(c, &count);
	/* torch's servers close the connection on an opcode they do not
	 * know, which is how a v2 server without LIST (torch <= 2.6) answers */
	if (rc == MU_EEOF)
		rc = -ENOTSUP;
	if (rc == 0)
		rc = recv_list(c, count, keys, n);
	return mu__store_conn_broken(c, rc);
}
