/* SPDX-License-Identifier: MIT */
/*
 * The shared-secret handshake; see auth_int.h and docs/protocols/auth.md.
 * HMAC-SHA256 and the comparison of proofs are OpenSSL's (HMAC,
 * CRYPTO_memcmp: constant time), the nonces the kernel's.
 */
#include <errno.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "core/alloc_int.h"
#include "core/auth_int.h"
#include "core/endian_int.h"
#include "core/log_int.h"
#include "core/rand_int.h"

#define VERSION 1
#define BUF 1024 /* room for a few messages; the rest goes back to the stream */

/* ---- codec ---- */

int mu__auth_decode(const void *buf, size_t n, mu__auth_msg_t *m, size_t *used)
{
	const unsigned char *p = buf;
	size_t need;

	if (memcmp(p, MU_AUTH_MAGIC, n < 4 ? n : 4) != 0)
		return MU_EBADMAGIC;
	if (n < 8)
		return 0;
	memset(m, 0, sizeof(*m));
	m->type = p[4];
	switch (m->type) {
	case MU_AUTH_HELLO:
		if (n < MU_AUTH_HELLO_LEN)
			return 0;
		m->version = p[5];
		m->role = p[6];
		if (m->version != VERSION || (m->role != MU_AUTH_CLIENT && m->role != MU_AUTH_SERVER) ||
		    p[7] != 0)
			return MU_EPROTO;
		memcpy(m->data, p + 8, MU_AUTH_NONCE);
		*used = MU_AUTH_HELLO_LEN;
		return 1;
	case MU_AUTH_PROOF:
		if (n < MU_AUTH_PROOF_LEN)
			return 0;
		if (p[5] != 0 || p[6] != 0 || p[7] != 0)
			return MU_EPROTO;
		memcpy(m->data, p + 8, MU_AUTH_MAC);
		*used = MU_AUTH_PROOF_LEN;
		return 1;
	case MU_AUTH_ERROR:
		need = mu_le16_get(p + 6);
		if (p[5] != 0 || need > MU_AUTH_MAX_TEXT)
			return MU_EPROTO;
		if (n < 8 + need)
			return 0;
		memcpy(m->text, p + 8, need);
		m->text[need] = '\0';
		*used = 8 + need;
		return 1;
	default:
		return MU_EPROTO;
	}
}

static void head(unsigned char *out, int type)
{
	memcpy(out, MU_AUTH_MAGIC, 4);
	out[4] = (unsigned char)type;
	out[5] = out[6] = out[7] = 0;
}

size_t mu__auth_encode_hello(unsigned char *out, int role, const unsigned char *nonce)
{
	head(out, MU_AUTH_HELLO);
	out[5] = VERSION;
	out[6] = (unsigned char)role;
	memcpy(out + 8, nonce, MU_AUTH_NONCE);
	return MU_AUTH_HELLO_LEN;
}

size_t mu__auth_encode_proof(unsigned char *out, const unsigned char *mac)
{
	head(out, MU_AUTH_PROOF);
	memcpy(out + 8, mac, MU_AUTH_MAC);
	return MU_AUTH_PROOF_LEN;
}

size_t mu__auth_encode_error(unsigned char *out, const char *text)
{
	size_t n = strlen(text);

	if (n > MU_AUTH_MAX_TEXT)
		n = MU_AUTH_MAX_TEXT;
	head(out, MU_AUTH_ERROR);
	mu_le16_put(out + 6, (uint16_t)n);
	memcpy(out + 8, text, n);
	return 8 + n;
}

int mu__auth_proof(const void *secret, size_t len, int role,
                   const unsigned char *own, const unsigned char *other,
                   unsigned char *mac)
{
	static const char client[] = "muster auth v1 client";
	static const char server[] = "muster auth v1 server";
	const char *label = role == MU_AUTH_CLIENT ? client : server;
	unsigned char msg[sizeof(client) - 1 + 2 * MU_AUTH_NONCE];
	unsigned int n = 0;

	memcpy(msg, label, sizeof(client) - 1);
	memcpy(msg + sizeof(client) - 1, other, MU_AUTH_NONCE);
	memcpy(msg + sizeof(client) - 1 + MU_AUTH_NONCE, own, MU_AUTH_NONCE);
	if (HMAC(EVP_sha256(), secret, (int)len, msg, sizeof(msg), mac, &n) == NULL ||
	    n != MU_AUTH_MAC)
		return MU_EFAIL;
	return 0;
}

int mu__auth_sniff(const mu_stream_t *s, const void *p, size_t n)
{
	mu__auth_msg_t m;
	size_t used = 0;

	const unsigned char *b = p;
	char text[MU_AUTH_MAX_TEXT + 1];
	size_t k = n - 8 < MU_AUTH_MAX_TEXT ? n - 8 : MU_AUTH_MAX_TEXT;

	if (n < 8 || mu__auth_decode(p, n, &m, &used) == MU_EBADMAGIC)
		return 0;
	if (b[4] == MU_AUTH_ERROR) {
		/* the caller read a header's worth: the text may be cut short */
		memcpy(text, b + 8, k);
		text[k] = '\0';
		mu__log(MU_LOG_WARN, "auth", "%s refused us: %s", s->peer, text);
		return strstr(text, "TLS") != NULL ? MU_ETLS : MU_EAUTH;
	}
	mu__log(MU_LOG_WARN, "auth", "%s requires the shared-secret handshake: run this side "
	        "with --secret-file (or MUSTER_SECRET_FILE)", s->peer);
	return MU_EAUTH;
}

/* ---- the state machine ---- */

typedef enum {
	ST_HELLO,    /* waiting for the peer's HELLO */
	ST_PROOF,    /* waiting for the peer's PROOF */
	ST_DONE,     /* flush what is queued, then done */
	ST_FAILED    /* flush what is queued (an ERROR), then fail */
} state_t;

struct mu__auth_s {
	const void *secret;
	size_t secret_len;
	int role;
	state_t state;
	unsigned char own[MU_AUTH_NONCE], other[MU_AUTH_NONCE];
	unsigned char out[8 + MU_AUTH_MAX_TEXT + MU_AUTH_HELLO_LEN];
	size_t out_len, out_off;
	unsigned char in[BUF];
	size_t in_len;
	int peer_tls;       /* failed because the peer speaks TLS: MU_ETLS */
};

int mu__auth_start(mu_stream_t *s, const void *secret, size_t len, int server)
{
	mu__auth_t *a = mu__calloc(1, sizeof(*a));

	if (a == NULL)
		return MU_ENOMEM;
	a->secret = secret;
	a->secret_len = len;
	a->role = server ? MU_AUTH_SERVER : MU_AUTH_CLIENT;
	if (mu__random_bytes(a->own, sizeof(a->own)) != 0) {
		mu__free(a);
		return MU_EFAIL;
	}
	/* both sides speak first: the hellos cross */
	a->out_len = mu__auth_encode_hello(a->out, a->role, a->own);
	s->auth = a;
	mu__stream_set_kind(s);
	return 0;
}

void mu__auth_free(mu_stream_t *s)
{
	if (s->auth != NULL) {
		OPENSSL_cleanse(s->auth, sizeof(*s->auth));
		mu__free(s->auth);
		s->auth = NULL;
	}
}

/* Fail: a server tells the peer why (an ERROR) before it gives up. */
static void fail(mu_stream_t *s, const char *why, int tell)
{
	mu__auth_t *a = s->auth;

	mu__log(MU_LOG_WARN, "auth", "%s %s: %s", a->role == MU_AUTH_SERVER ? "refused" : "cannot use",
	        s->peer, why);
	a->state = ST_FAILED;
	if (tell && a->role == MU_AUTH_SERVER)
		a->out_len += mu__auth_encode_error(a->out + a->out_len, why);
}

static void queue_proof(mu__auth_t *a)
{
	unsigned char mac[MU_AUTH_MAC];

	if (mu__auth_proof(a->secret, a->secret_len, a->role, a->own, a->other, mac) != 0)
		memset(mac, 0, sizeof(mac)); /* fails at the peer, which says so */
	a->out_len += mu__auth_encode_proof(a->out + a->out_len, mac);
}

/* The peer's proof: does it hold the secret? */
static int proof_ok(mu__auth_t *a, const unsigned char *mac)
{
	unsigned char want[MU_AUTH_MAC];
	int peer = a->role == MU_AUTH_SERVER ? MU_AUTH_CLIENT : MU_AUTH_SERVER;

	return mu__auth_proof(a->secret, a->secret_len, peer, a->other, a->own, want) == 0 &&
	       CRYPTO_memcmp(want, mac, MU_AUTH_MAC) == 0;
}

/* One message from the peer. */
static void handle(mu_stream_t *s, const mu__auth_msg_t *m)
{
	mu__auth_t *a = s->auth;
	char why[MU_AUTH_MAX_TEXT + 64];

	if (m->type == MU_AUTH_ERROR && strstr(m->text, "speaks TLS") != NULL) {
		/* a TLS server's word to a client that came without TLS: the
		 * secret was never tried, so say what is missing instead */
		a->peer_tls = 1;
		fail(s, "it speaks TLS and this side does not: run this side with --tls-ca "
		     "(and --tls-cert/--tls-key when the server asks for them)", 0);
	} else if (m->type == MU_AUTH_ERROR) {
		snprintf(why, sizeof(why), "it refused us: %s", m->text);
		fail(s, why, 0);
	} else if (a->state == ST_HELLO && m->type == MU_AUTH_HELLO && m->role != a->role) {
		memcpy(a->other, m->data, MU_AUTH_NONCE);
		a->state = ST_PROOF;
		if (a->role == MU_AUTH_CLIENT)
			queue_proof(a); /* the client proves itself first */
	} else if (a->state == ST_PROOF && m->type == MU_AUTH_PROOF) {
		if (!proof_ok(a, m->data)) {
			fail(s, a->role == MU_AUTH_SERVER
			             ? "authentication failed: the peer does not hold this shared secret"
			             : "the server does not hold our shared secret", 1);
			return;
		}
		if (a->role == MU_AUTH_SERVER)
			queue_proof(a);
		a->state = ST_DONE;
	} else {
		fail(s, "authentication failed: unexpected handshake message", 1);
	}
}

/* Why a failed handshake failed: TLS spoken on one side only (a refusal
 * no retry can change, like the secret's), else the secret. */
static int failed_rc(const mu__auth_t *a)
{
	return a->peer_tls ? MU_ETLS : MU_EAUTH;
}

/* Write what is queued. 0 when all is out. */
static int flush(mu_stream_t *s)
{
	mu__auth_t *a = s->auth;

	while (a->out_off < a->out_len) {
		struct iovec iov = {a->out + a->out_off, a->out_len - a->out_off};
		size_t n = 0;
		int rc = s->ops->sendv(s, &iov, 1, &n);

		if (rc != 0)
			return rc;
		a->out_off += n;
	}
	a->out_off = a->out_len = 0;
	return 0;
}

/* Read more of the peer's messages and handle what is whole. */
static int take_input(mu_stream_t *s)
{
	mu__auth_t *a = s->auth;
	mu__auth_msg_t m;
	size_t n = 0, used = 0;
	int rc;

	rc = mu__auth_decode(a->in, a->in_len, &m, &used);
	if (rc == 0) {
		if (a->in_len == sizeof(a->in))
			rc = MU_EPROTO; /* cannot happen: every message fits */
		else if ((rc = s->ops->recv(s, a->in + a->in_len, sizeof(a->in) - a->in_len,
		                            &n)) != 0)
			return rc == MU_EEOF ? MU_EAUTH : rc;
		else {
			a->in_len += n;
			return 0;
		}
	}
	if (rc == MU_EBADMAGIC && a->role == MU_AUTH_CLIENT && a->in_len >= 2 &&
	    (a->in[0] == 0x15 || a->in[0] == 0x16) && a->in[1] == 0x03) {
		/* a TLS record (an alert, or a server hello): some other TLS
		 * server, which said so in TLS rather than in our protocol */
		a->peer_tls = 1;
		fail(s, "it answered in TLS and this side does not speak it: run this side with "
		     "--tls-ca", 0);
		return 0;
	}
	if (rc < 0) {
		fail(s, rc == MU_EBADMAGIC
		             ? (a->role == MU_AUTH_SERVER
		                        ? "this server requires the shared-secret handshake "
		                          "(run the client with --secret-file)"
		                        : "the server did not answer the shared-secret handshake "
		                          "(is it run with --secret-file?)")
		             : "authentication failed: malformed handshake message", 1);
		return 0;
	}
	memmove(a->in, a->in + used, a->in_len - used);
	a->in_len -= used;
	handle(s, &m);
	return 0;
}

int mu__auth_step(mu_stream_t *s)
{
	int rc;

	while (s->auth != NULL) {
		mu__auth_t *a = s->auth;

		if ((rc = flush(s)) != 0)
			return rc == MU_EEOF && a->state == ST_FAILED ? failed_rc(a) : rc;
		if (a->state == ST_FAILED)
			return failed_rc(a);
		if (a->state == ST_DONE) {
			/* bytes behind the handshake are the payload's */
			rc = mu__stream_unread(s, a->in, a->in_len);
			mu__auth_free(s);
			s->authed = 1;
			return rc;
		}
		rc = take_input(s);
		if (rc == MU_EAUTH)
			mu__log(MU_LOG_WARN, "auth", "%s closed the connection during the "
			        "shared-secret handshake", s->peer);
		if (rc != 0)
			return rc;
	}
	return 0;
}
