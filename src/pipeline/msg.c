/* SPDX-License-Identifier: MIT */
/*
 * Pipeline messages over a channel: headers checked before bodies, frame
 * bodies read straight into the tensors, every wait bounded.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "core/alloc_int.h"
#include "core/auth_int.h"
#include "core/endian_int.h"
#include "core/sock_int.h"
#include "core/time_int.h"
#include "pipeline/msg_int.h"
#include "tensor/frame_int.h"

void mu__chan_init(mu__chan_t *c, mu_stream_t *st, mu_session_t *sess, int io_ms,
                   uint64_t max_frame)
{
	c->st = sess != NULL ? mu_session_stream(sess) : st;
	c->sess = sess;
	/* a device's session: no wait on the client outlasts the server's
	 * session timeout, sends included (reads go through the session) */
	if (sess != NULL && mu_session_wait_limit_ms(sess) >= 0 &&
	    (io_ms < 0 || io_ms > mu_session_wait_limit_ms(sess)))
		io_ms = mu_session_wait_limit_ms(sess);
	c->io_ms = io_ms;
	c->max_frame = max_frame;
	c->got = 0;
	c->version = MU_MSG_VERSION;
}

const char *mu__msg_type_name(int type)
{
	static const char *const names[] = {
		"?", "INFO", "FORWARD", "RESULT", "ERROR", "CLOSE",
		"ASSIGN", "WEIGHTS", "LOAD", "READY", "SEQ_OPEN", "SEQ_FORWARD", "SEQ_CLOSE",
		"SEQ_BATCH", "TENSOR",
	};

	return type > 0 && type <= MU_MSG_TYPE_MAX ? names[type] : "?";
}

void mu__msg_encode(const mu__msg_t *m, unsigned char *h)
{
	memcpy(h, MU_MSG_MAGIC, 4);
	mu_le16_put(h + 4, MU_MSG_VERSION);
	mu_le16_put(h + 6, m->type);
	mu_le32_put(h + 8, (uint32_t)m->status);
	mu_le32_put(h + 12, m->arg);
	mu_le64_put(h + 16, m->id);
	mu_le64_put(h + 24, m->aux);
	mu_le64_put(h + 32, m->len);
}

void mu__msg_encode_frame(const mu__msg_t *m, const mu_tensor_list_t *l, unsigned char *h)
{
	mu__msg_encode(m, h);
	if (mu__frame_typed(l))
		mu_le16_put(h + 4, MU_MSG_VERSION_TYPED);
}

int mu__msg_is_frame(int type)
{
	return type == MU_MSG_FORWARD || type == MU_MSG_RESULT || type == MU_MSG_WEIGHTS ||
	       type == MU_MSG_SEQ_FORWARD || type == MU_MSG_SEQ_BATCH;
}

int mu__msg_decode(const unsigned char *h, uint64_t max_frame, mu__msg_t *m)
{
	uint64_t limit;

	uint16_t version;

	if (memcmp(h, MU_MSG_MAGIC, 4) != 0)
		return MU_EBADMAGIC;
	version = mu_le16_get(h + 4);
	m->type = mu_le16_get(h + 6);
	if (version != MU_MSG_VERSION &&
	    (version != MU_MSG_VERSION_TYPED || !mu__msg_is_frame(m->type)))
		return MU_EPROTO;
	m->status = (int32_t)mu_le32_get(h + 8);
	m->arg = mu_le32_get(h + 12);
	m->id = mu_le64_get(h + 16);
	m->aux = mu_le64_get(h + 24);
	m->len = mu_le64_get(h + 32);
	if (m->type == 0 || m->type > MU_MSG_TYPE_MAX)
		return MU_EPROTO;
	/* a frame's names and shapes come on top of its data */
	limit = mu__msg_is_frame(m->type) ? max_frame + MU_MSG_MAX_TEXT : MU_MSG_MAX_TEXT;
	return m->len > limit ? MU_ETOOBIG : 0;
}

int mu__msg_version(const unsigned char *h)
{
	return mu_le16_get(h + 4);
}

int mu__msg_frame_check(int version, const mu_tensor_list_t *l)
{
	return version < MU_MSG_VERSION_TYPED && mu__frame_typed(l) ? MU_EPROTO : 0;
}

/* ---- reading ---- */

/* Up to len bytes; *n > 0 on success. wait_ms bounds the wait. */
static int chan_read(mu__chan_t *c, void *buf, size_t len, size_t *n, int wait_ms)
{
	int rc;

	if (c->sess != NULL) {
		rc = mu_session_recv(c->sess, buf, len, n, wait_ms);
		if (rc == 0 && *n == 0)
			rc = MU_EEOF;
		return rc;
	}
	/* one deadline: the time left, not a fresh wait_ms after each wake-up */
	return mu__sock_recv_some(c->st, buf, len, n, mu__deadline(wait_ms));
}

/* len bytes; c->got counts those that came (from `base` on) */
static int read_exact(mu__chan_t *c, void *buf, size_t len, int first_wait_ms, uint64_t base)
{
	char *p = buf;
	size_t n;
	int rc, wait = first_wait_ms;

	c->got = base;
	while (len > 0) {
		rc = chan_read(c, p, len, &n, wait);
		if (rc != 0)
			return rc;
		p += n;
		len -= n;
		c->got += n;
		wait = c->io_ms;
	}
	return 0;
}

int mu__msg_recv(mu__chan_t *c, mu__msg_t *m, int wait_ms)
{
	unsigned char h[MU_MSG_HEADER];
	size_t n;
	int rc, why;

	c->got = 0;
	rc = chan_read(c, h, 1, &n, wait_ms);
	if (rc == 0)
		rc = read_exact(c, h + 1, sizeof(h) - 1, c->io_ms, 1);
	else if (rc == MU_EEOF)
		return MU_EEOF;
	if (rc == MU_EEOF)
		return MU_EPROTO; /* closed inside a header: a truncated message */
	if (rc != 0)
		return rc;
	rc = mu__msg_decode(h, c->max_frame, m);
	c->version = rc == 0 ? mu__msg_version(h) : MU_MSG_VERSION;
	if (rc == MU_EBADMAGIC && c->st != NULL && (why = mu__auth_sniff(c->st, h, sizeof(h))) != 0)
		rc = why; /* a stage that wants a secret or TLS we lack */
	return rc;
}

/* A body's buffer grows from this, doubling as its bytes come: a header
 * that declares 64 MiB and sends little holds little. */
#define BODY_GROW ((size_t)64 << 10)

int mu__msg_recv_body(mu__chan_t *c, const mu__msg_t *m, char **body)
{
	size_t n = (size_t)m->len, have = 0, step;
	char *b = NULL, *nb;
	int rc;

	*body = NULL;
	c->got = 0;
	do {
		step = have < BODY_GROW ? BODY_GROW : have;
		if (step > n - have)
			step = n - have;
		if ((nb = mu__realloc(b, have + step + 1)) == NULL) {
			mu__free(b);
			return MU_ENOMEM;
		}
		b = nb;
		rc = read_exact(c, b + have, step, c->io_ms, have);
		if (rc != 0) {
			mu__free(b);
			return rc;
		}
		have += step;
	} while (have < n);
	b[n] = '\0';
	*body = b;
	return 0;
}

int mu__msg_skip(mu__chan_t *c, const mu__msg_t *m)
{
	char scratch[4096];
	uint64_t left = m->len;
	int rc = 0;

	while (rc == 0 && left > 0) {
		size_t k = left < sizeof(scratch) ? (size_t)left : sizeof(scratch);

		rc = read_exact(c, scratch, k, c->io_ms, m->len - left);
		left -= k;
	}
	return rc;
}

int mu__msg_recv_frame(mu__chan_t *c, const mu__msg_t *m, mu_tensor_list_t *out)
{
	mu_frame_limits_t lim;
	mu__frame_reader_t r;
	unsigned char small[4096];
	uint64_t left = m->len;
	int rc = 0;

	mu_frame_limits_init(&lim);
	lim.max_bytes = c->max_frame;
	mu__frame_reader_init(&r, &lim);
	while (rc == 0) {
		size_t room, got, used = 0;
		void *dst = mu__frame_reader_space(&r, &room);

		if (left == 0) {
			rc = MU_EPROTO; /* the frame runs past the body */
			break;
		}
		/* headers through a scratch buffer, exactly as many bytes as the
		 * field needs; tensor data straight into the tensor */
		if (dst == NULL && r.state == FR_DATA) {
			rc = MU_ENOMEM; /* its storage could not grow */
			break;
		}
		if (dst == NULL) {
			dst = small;
			room = r.need - r.have;
			if (room > sizeof(small))
				room = sizeof(small);
		}
		if (room > left)
			room = (size_t)left;
		c->got = m->len - left;
		rc = chan_read(c, dst, room, &got, c->io_ms);
		if (rc != 0)
			break;
		left -= got;
		if (dst != small) {
			rc = mu__frame_reader_wrote(&r, got);
		} else {
			rc = mu__frame_reader_feed(&r, small, got, &used);
			if (rc >= 0 && used != got)
				rc = MU_EPROTO;
		}
	}
	if (rc == 1 && left != 0)
		rc = MU_EPROTO; /* bytes after the frame inside the body */
	if (rc == 1 && (rc = mu__msg_frame_check(c->version, &r.got)) == 0)
		rc = mu__frame_reader_take(&r, out);
	mu__frame_reader_free(&r);
	return rc;
}

/* ---- writing ---- */

int mu__msg_send(mu__chan_t *c, mu__msg_t *m, const void *body, size_t len)
{
	unsigned char h[MU_MSG_HEADER];
	struct iovec iov[2];

	m->len = len;
	mu__msg_encode(m, h);
	iov[0].iov_base = h;
	iov[0].iov_len = sizeof(h);
	iov[1].iov_base = (void *)body;
	iov[1].iov_len = len;
	return mu__sock_sendv(c->st, iov, 2, MU_NO_DEADLINE, c->io_ms);
}

int mu__msg_send_frame(mu__chan_t *c, mu__msg_t *m, const mu_tensor_list_t *l)
{
	unsigned char h[MU_MSG_HEADER];

	m->len = mu_frame_size(l);
	mu__msg_encode_frame(m, l, h);
	return mu__frame_sendv(c->st, h, sizeof(h), l, MU_NO_DEADLINE, c->io_ms);
}

int mu__msg_send_error(mu__chan_t *c, uint64_t id, int code, const char *text)
{
	mu__msg_t m = {MU_MSG_ERROR, code, id, 0, 0, 0};

	return mu__msg_send(c, &m, text, strlen(text));
}

void mu__chan_linger(mu__chan_t *c)
{
	char scratch[4096];
	int64_t deadline = mu__deadline(200);
	size_t total = 0, r;

	/* closing with unread bytes makes the kernel send a reset, which can
	 * destroy the error we just sent before the peer reads it */
	mu_stream_shutdown(c->st);
	while (total < (1u << 20) &&
	       mu__sock_recv_some(c->st, scratch, sizeof(scratch), &r, deadline) == 0)
		total += r;
}
