/* SPDX-License-Identifier: MIT */
/*
 * TCPStore client, either dialect, behaving on the wire as torch's own
 * client does (spec §11): this file is its connection -- v2's VALIDATE +
 * PING at connect, AUTO's fall back to v1, the redial after a failure --
 * and what every request does with it; the requests themselves are in
 * requests.c.
 *
 * Unlike torch's, every reply is read under a deadline, so a server that
 * never answers cannot hang the caller; and a connection that failed is
 * replaced on the next call. So is one found dead before it is used (the
 * server closed it: it stopped, or restarted on the same port): SET and
 * the other requests without a reply would otherwise be written into it,
 * reported done, and lost.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "muster/store.h"
#include "core/alloc_int.h"
#include "core/endian_int.h"
#include "core/opts_int.h"
#include "core/time_int.h"
#include "store/client_int.h"
#include "store/proto_int.h"

/* How long AUTO waits for a PING echo before deciding the server is v1. */
#define AUTO_PROBE_MS 3000

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

/* ---- the connection each request uses ---- */

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
int mu__store_conn_broken(mu_store_client_t *c, int rc)
{
	if (rc != 0 && c->st != NULL) {
		mu__sock_close(c->st);
		c->st = NULL;
	}
	return rc;
}

int mu__store_conn_redial(mu_store_client_t *c)
{
	return reconnect_within(c, c->o.timeout_ms);
}

/* A connection for a new call: the kept one if it is still good. */
int mu__store_conn_ready(mu_store_client_t *c)
{
	if (c->st != NULL && !c->fd_given && !mu__sock_idle_ok(c->st)) {
		mu__sock_close(c->st);
		c->st = NULL;
	}
	c->reused = c->st != NULL;
	return c->st != NULL ? 0 : mu__store_conn_redial(c);
}

/*
 * Send a request. If the connection kept from an earlier call turns out
 * gone while the call's first request is sent (the server went after
 * mu__store_conn_ready looked), the request is sent once more on a new connection: a
 * send that failed never handed the request's tail to our kernel, so no
 * server can have acted on it, and saying it again cannot do it twice.
 * What is not caught: a server that goes after the last byte left, with
 * a request that has no reply (SET, APPEND, MULTI_SET), as with torch.
 */
int mu__store_conn_send(mu_store_client_t *c, mu__buf_t *b, int rc)
{
	int again = c->reused;

	c->reused = 0;
	if (rc == 0)
		rc = mu__sock_send_all(c->st, b->data, b->len, mu__deadline(c->o.timeout_ms));
	if (rc != 0 && again && gone(rc)) {
		rc = mu__store_conn_redial(c);
		if (rc == 0)
			rc = mu__sock_send_all(c->st, b->data, b->len,
			                       mu__deadline(c->o.timeout_ms));
	}
	mu__buf_free(b);
	return rc;
}
