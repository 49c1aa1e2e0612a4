/* SPDX-License-Identifier: MIT */
/*
 * TCPStore client, either dialect, behaving on the wire as torch's own
 * client does (spec §11): "/"-prefixed keys, get = WAIT then GET, no reply
 * read for SET/APPEND/MULTI_SET/VALIDATE, v2's VALIDATE + PING at connect
 * and CANCEL_WAIT on a wait timeout, v1's reconnect after one.
 *
 * Unlike torch's, every reply is read under a deadline, so a server that
 * never answers cannot hang the caller; and a connection that failed is
 * replaced on the next call. So is one found dead before it is used (the
 * server closed it: it stopped, or restarted on the same port): SET and
 * the other requests without a reply would otherwise be written into it,
 * reported done, and lost.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "muster/store.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/endian_int.h"
#include "core/opts_int.h"
#include "core/sock_int.h"
#include "core/time_int.h"
#include "store/client_int.h"
#include "store/proto_int.h"

/* How long AUTO waits for a PING echo before deciding the server is v1. */
#define AUTO_PROBE_MS 3000

struct mu_store_client_s {
	mu_store_client_opts_t o;
	char host[256];
	mu_stream_t *st;        /* NULL: reconnect on the next call */
	int reused;             /* fd is from an earlier call and nothing of
	                         * this call has been sent on it yet */
	mu__store_dialect_t d;
	int fd_given;           /* fd came from mu__store_client_from_fd:
	                         * never redialed, never judged idle */
};

static void store_client_defaults(mu_store_client_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->struct_size = sizeof(*o);
	o->host = "127.0.0.1";
	o->port = 29500;
	o->dialect = MU_STORE_AUTO;
	o->timeout_ms = 300000;
	o->max_value_bytes = 64u << 20;
}

void mu_store_client_opts_init_size(mu_store_client_opts_t *o, size_t size)
{
	mu_store_client_opts_t d;

	store_client_defaults(&d);
	mu__opts_fill(o, size, &d, sizeof(d));
}

mu_store_dialect_t mu_store_client_dialect(const mu_store_client_t *c)
{
	return c->d == MU_STORE_V2 ? MU_STORE_DIALECT_V2 : MU_STORE_DIALECT_V1;
}

uint32_t mu__store_client_nonce(void)
{
	/* the third byte is 0xFF so that a v1 server, which reads VALIDATE +
	 * PING as SET with a key length, sees ~2^64 and closes */
	return ((uint32_t)getpid() & 0xFFFF) | 0xFF0000u;
}

/* VALIDATE + PING in one segment, as torch 2.x sends them; read the echo. */
static int v2_handshake(mu_stream_t *fd, int64_t deadline)
{
	unsigned char out[10], echo[4];
	uint32_t nonce = mu__store_client_nonce();
	int rc;

	out[0] = (unsigned char)mu__store_opcode(MU_STORE_V2, MU_SOP_VALIDATE);
	mu_le32_put(out + 1, MU_STORE_V2_MAGIC);
	out[5] = (unsigned char)mu__store_opcode(MU_STORE_V2, MU_SOP_PING);
	mu_le32_put(out + 6, nonce);
	rc = mu__sock_send_all(fd, out, sizeof(out), deadline);
	if (rc == 0)
		rc = mu__sock_recv_all(fd, echo, 4, deadline);
	if (rc == 0 && mu_le32_get(echo) != nonce)
		rc = MU_EPROTO;
	return rc;
}

static int retryable(int rc)
{
	return rc == -ECONNREFUSED || rc == -ECONNRESET || rc == MU_EEOF;
}

/* Connect, retrying refused connections until the deadline (1.13 waits 1 s
 * between tries; we back off from 50 ms to 1 s). */
static int dial(mu_store_client_t *c, int64_t deadline)
{
	int delay_ms = 50, rc;

	if (c->fd_given)
		return -ENOTCONN; /* nowhere to dial */
	for (;;) {
		rc = mu__sock_connect(c->host, c->o.port, NULL, deadline, &c->st);
		if (rc == 0 || !retryable(rc) || mu__remaining_ms(deadline) == 0)
			return rc;
		usleep((useconds_t)(delay_ms < mu__remaining_ms(deadline) ? delay_ms : mu__remaining_ms(deadline)) * 1000);
		delay_ms = delay_ms * 2 > 1000 ? 1000 : delay_ms * 2;
	}
}

static int reconnect_within(mu_store_client_t *c, int timeout_ms)
{
	int64_t deadline = mu__deadline(timeout_ms);
	int rc;

	mu__sock_close(c->st);
	c->st = NULL;
	for (;;) {
		rc = dial(c, deadline);
		if (rc != 0)
			return rc;
		if (c->d == MU_STORE_V1)
			return 0;
		rc = v2_handshake(c->st, c->o.dialect == MU_STORE_AUTO
		                                 ? mu__deadline(AUTO_PROBE_MS) : deadline);
		if (rc == 0)
			return 0;
		mu__sock_close(c->st);
		c->st = NULL;
		if (c->o.dialect == MU_STORE_AUTO && (retryable(rc) || rc == -ETIMEDOUT)) {
			c->d = MU_STORE_V1; /* a 1.13 server drops the VALIDATE */
			c->o.dialect = MU_STORE_DIALECT_V1;
			continue;
		}
		/* torch retries a reset during validation too */
		if (!retryable(rc) || mu__remaining_ms(deadline) == 0)
			return rc;
	}
}

int mu_store_client_connect(const mu_store_client_opts_t *uo,
                            mu_store_client_t **out)
{
	mu_store_client_opts_t oo, *o = &oo;
	mu_store_client_t *c;
	int rc;

	*out = NULL;
	store_client_defaults(o);
	if (mu__opts_read(o, sizeof(*o), uo) != 0 || o->host == NULL || strlen(o->host) >= sizeof(c->host))
		return MU_EARG;
	c = mu__calloc(1, sizeof(*c));
	if (c == NULL)
		return MU_ENOMEM;
	c->o = *o;
	memcpy(c->host, o->host, strlen(o->host) + 1);
	c->o.host = c->host;
	c->st = NULL;
	c->d = o->dialect == MU_STORE_DIALECT_V1 ? MU_STORE_V1 : MU_STORE_V2;
	rc = reconnect_within(c, o->connect_timeout_ms > 0 ? o->connect_timeout_ms
	                                                   : o->timeout_ms);
	if (rc != 0) {
		mu__free(c);
		return rc;
	}
	*out = c;
	return 0;
}

int mu__store_client_from_fd(const mu_store_client_opts_t *o, int fd,
                             mu_store_client_t **out)
{
	mu_store_client_t *c;
	mu_stream_t *st;
	int rc;

	*out = NULL;
	if (o == NULL || fd < 0 ||
	    (o->dialect != MU_STORE_DIALECT_V1 && o->dialect != MU_STORE_DIALECT_V2)) {
		if (fd >= 0)
			close(fd);
		return MU_EARG;
	}
	rc = mu__stream_tcp_new(fd, &st); /* makes it non-blocking */
	if (rc != 0)
		return rc;
	c = mu__calloc(1, sizeof(*c));
	if (c == NULL) {
		mu__sock_close(st);
		return MU_ENOMEM;
	}
	c->o = *o;
	c->o.host = c->host; /* "": never used */
	c->st = st;
	c->fd_given = 1;
	c->d = o->dialect == MU_STORE_DIALECT_V1 ? MU_STORE_V1 : MU_STORE_V2;
	rc = c->d == MU_STORE_V2 ? v2_handshake(st, mu__deadline(o->timeout_ms)) : 0;
	if (rc != 0) {
		mu_store_client_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

void mu_store_client_close(mu_store_client_t *c)
{
	if (c == NULL)
		return;
	mu__sock_close(c->st);
	mu__free(c);
}

/* ---- requests ---- */

/*
 * (A connection kept from an earlier call is checked with
 * mu__sock_idle_ok before use: between calls the server owes us nothing —
 * every reply is read whole, a timed-out wait is canceled or its
 * connection dropped — so a readable socket was closed, reset, or holds
 * bytes nobody asked for. A request written there would still be accepted
 * by our kernel: this is when to notice.)
 */

/* The send failed because the connection is gone (not our deadline). */
static int gone(int rc)
{
	return rc == MU_EEOF || rc == -EPIPE || rc == -ECONNRESET || rc == -ENOTCONN;
}

/*
 * After any failure the connection is dropped (a late reply must never be
 * read as the answer to a later request); the next call redials. A wait
 * that timed out cleanly does not come through here.
 */
static int broken(mu_store_client_t *c, int rc)
{
	if (rc != 0 && c->st != NULL) {
		mu__sock_close(c->st);
		c->st = NULL;
	}
	return rc;
}

static int reconnect(mu_store_client_t *c)
{
	return reconnect_within(c, c->o.timeout_ms);
}

/* A connection for a new call: the kept one if it is still good. */
static int ready(mu_store_client_t *c)
{
	if (c->st != NULL && !c->fd_given && !mu__sock_idle_ok(c->st)) {
		mu__sock_close(c->st);
		c->st = NULL;
	}
	c->reused = c->st != NULL;
	return c->st != NULL ? 0 : reconnect(c);
}

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

/*
 * Send a request. If the connection kept from an earlier call turns out
 * gone while the call's first request is sent (the server went after
 * ready() looked), the request is sent once more on a new connection: a
 * send that failed never handed the request's tail to our kernel, so no
 * server can have acted on it, and saying it again cannot do it twice.
 * What is not caught: a server that goes after the last byte left, with
 * a request that has no reply (SET, APPEND, MULTI_SET), as with torch.
 */
static int send_buf(mu_store_client_t *c, mu__buf_t *b, int rc)
{
	int again = c->reused;

	c->reused = 0;
	if (rc == 0)
		rc = mu__sock_send_all(c->st, b->data, b->len, mu__deadline(c->o.timeout_ms));
	if (rc != 0 && again && gone(rc)) {
		rc = reconnect(c);
		if (rc == 0)
			rc = mu__sock_send_all(c->st, b->data, b->len,
			                       mu__deadline(c->o.timeout_ms));
	}
	mu__buf_free(b);
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
	int rc = ready(c);

	if (rc != 0)
		return rc;
	rc = begin(c, &b, MU_SOP_SET);
	if (rc == 0)
		rc = put_key(c, &b, key);
	if (rc == 0)
		rc = mu__store_put_str(&b, value, len);
	return broken(c, send_buf(c, &b, rc)); /* no reply */
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
		rc = reconnect(c);
		return rc != 0 ? broken(c, rc) : -ETIMEDOUT;
	}
	rc = send_buf(c, &b, begin(c, &b, MU_SOP_CANCEL_WAIT));
	if (rc == 0)
		rc = recv_u8(c, &v, deadline);
	if (rc == 0 && v == MU_STORE_STOP_WAITING) /* it raced the cancel */
		rc = recv_u8(c, &v, deadline);
	if (rc == 0 && v != MU_STORE_WAIT_CANCELED)
		rc = MU_EPROTO;
	return rc != 0 ? broken(c, rc) : -ETIMEDOUT;
}

int mu_store_wait(mu_store_client_t *c, const char *const *keys, size_t n,
                  int timeout_ms)
{
	int64_t deadline = mu__deadline(timeout_ms < 0 ? c->o.timeout_ms : timeout_ms);
	mu__buf_t b;
	uint8_t v;
	int rc = ready(c);

	if (rc != 0)
		return rc;
	rc = begin(c, &b, MU_SOP_WAIT);
	if (rc == 0)
		rc = put_keys(c, &b, keys, n);
	rc = send_buf(c, &b, rc);
	if (rc == 0)
		rc = mu__sock_wait_readable(c->st, deadline);
	if (rc == -ETIMEDOUT)
		return cancel_wait(c);
	if (rc == 0)
		rc = recv_u8(c, &v, mu__deadline(c->o.timeout_ms));
	if (rc == 0 && v != MU_STORE_STOP_WAITING)
		rc = MU_EPROTO;
	return broken(c, rc);
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
	rc = send_buf(c, &b, rc);
	if (rc == 0)
		rc = recv_bytes(c, out);
	return broken(c, rc);
}

int mu_store_add(mu_store_client_t *c, const char *key, int64_t delta,
                 int64_t *result)
{
	mu__buf_t b;
	int rc = ready(c);

	if (rc != 0)
		return rc;
	rc = begin(c, &b, MU_SOP_ADD);
	if (rc == 0)
		rc = put_key(c, &b, key);
	if (rc == 0)
		rc = mu__store_put_u64(&b, (uint64_t)delta);
	rc = send_buf(c, &b, rc);
	if (rc == 0)
		rc = recv_i64(c, result);
	return broken(c, rc);
}

int mu_store_compare_set(mu_store_client_t *c, const char *key,
                         const void *expected, size_t elen, const void *desired,
                         size_t dlen, mu_store_value_t *out)
{
	mu__buf_t b;
	int rc = ready(c);

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
	rc = send_buf(c, &b, rc);
	if (rc == 0)
		rc = recv_bytes(c, out);
	return broken(c, rc);
}

int mu_store_check(mu_store_client_t *c, const char *const *keys, size_t n,
                   int *is_ready)
{
	mu__buf_t b;
	uint8_t v = 0;
	int rc = ready(c);

	if (rc != 0)
		return rc;
	rc = begin(c, &b, MU_SOP_CHECK);
	if (rc == 0)
		rc = put_keys(c, &b, keys, n);
	rc = send_buf(c, &b, rc);
	if (rc == 0)
		rc = recv_u8(c, &v, mu__deadline(c->o.timeout_ms));
	if (rc == 0 && v != MU_STORE_READY && v != MU_STORE_NOT_READY)
		rc = MU_EPROTO;
	*is_ready = v == MU_STORE_READY;
	return broken(c, rc);
}

int mu_store_delete(mu_store_client_t *c, const char *key, int *deleted)
{
	mu__buf_t b;
	int64_t v = 0;
	int rc = ready(c);

	if (rc != 0)
		return rc;
	rc = begin(c, &b, MU_SOP_DELETE_KEY);
	if (rc == 0)
		rc = put_key(c, &b, key);
	rc = send_buf(c, &b, rc);
	if (rc == 0)
		rc = recv_i64(c, &v);
	*deleted = v == 1;
	return broken(c, rc);
}

int mu_store_num_keys(mu_store_client_t *c, int64_t *n)
{
	mu__buf_t b;
	int rc = ready(c);

	if (rc != 0)
		return rc;
	rc = send_buf(c, &b, begin(c, &b, MU_SOP_GETNUMKEYS));
	if (rc == 0)
		rc = recv_i64(c, n);
	return broken(c, rc);
}

int mu_store_append(mu_store_client_t *c, const char *key, const void *value,
                    size_t len)
{
	mu__buf_t b;
	int rc = ready(c);

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
	return broken(c, send_buf(c, &b, rc)); /* no reply */
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
		rc = send_buf(c, &b, rc);
		for (i = 0; rc == 0 && i < n; i++)
			rc = recv_bytes(c, &out[i]);
	}
	if (rc != 0)
		for (i = 0; i < n; i++) {
			mu__free(out[i].data);
			out[i].data = NULL;
		}
	return broken(c, rc);
}

int mu_store_multi_set(mu_store_client_t *c, const char *const *keys,
                       const mu_store_value_t *values, size_t n)
{
	mu__buf_t b;
	size_t i;
	int rc = ready(c);

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
	return broken(c, send_buf(c, &b, rc)); /* no reply */
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
	if ((rc = ready(c)) != 0)
		return rc;
	rc = begin(c, &b, MU_SOP_LIST);
	if (rc == -ENOTSUP) { /* v1 has no LIST: nothing was sent */
		mu__buf_free(&b);
		return rc;
	}
	rc = send_buf(c, &b, rc);
	if (rc == 0)
		rc = recv_i64(c, &count);
	/* torch's servers close the connection on an opcode they do not
	 * know, which is how a v2 server without LIST (torch <= 2.6) answers */
	if (rc == MU_EEOF)
		rc = -ENOTSUP;
	if (rc == 0)
		rc = recv_list(c, count, keys, n);
	return broken(c, rc);
}
