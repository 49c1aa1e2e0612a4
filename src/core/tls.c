/* SPDX-License-Identifier: MIT */
/*
 * The TLS stream table; see tls_int.h. OpenSSL does the protocol on the
 * stream's non-blocking socket (SSL_set_fd); this file maps its results to
 * the stream contract (-EAGAIN with s->want, MU_EEOF, MU_ETLS) and says
 * why a handshake failed.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "core/auth_int.h"
#include "core/log_int.h"
#include "core/tls_int.h"

/* Small pieces of a gathered write go out together, in one record. */
#define COALESCE 16384

typedef struct {
	SSL *ssl;
	int server;
	int peeked;   /* server: the first byte was looked at */
	int failed;   /* a failure was logged already */
} tls_t;

static void say_failure(mu_stream_t *s, const char *what)
{
	int err = errno; /* the socket's, if it failed */
	tls_t *t = s->tls;
	unsigned long e = ERR_peek_last_error();
	long v = SSL_get_verify_result(t->ssl);
	char reason[256];

	if (t->failed)
		return;
	t->failed = 1;
	if (v != X509_V_OK)
		snprintf(reason, sizeof(reason), "certificate: %s", X509_verify_cert_error_string(v));
	else if (e != 0)
		ERR_error_string_n(e, reason, sizeof(reason));
	else if (err != 0)
		snprintf(reason, sizeof(reason), "the connection failed: %s", strerror(err));
	else
		snprintf(reason, sizeof(reason), "the connection ended");
	mu__log(MU_LOG_WARN, "tls", "%s %s %s failed: %s%s", what, t->server ? "from" : "with",
	        s->peer, reason,
	        ERR_GET_REASON(e) == SSL_R_WRONG_VERSION_NUMBER && !t->server
	                ? " (is the server run with --tls-cert and --tls-key?)" : "");
}

/* Map an SSL_* result. */
static int result(mu_stream_t *s, int r, const char *what)
{
	tls_t *t = s->tls;
	int e = SSL_get_error(t->ssl, r);

	switch (e) {
	case SSL_ERROR_WANT_READ:
		s->want = MU__WANT_READ;
		return -EAGAIN;
	case SSL_ERROR_WANT_WRITE:
		s->want = MU__WANT_WRITE;
		return -EAGAIN;
	case SSL_ERROR_ZERO_RETURN:
		return MU_EEOF;
	case SSL_ERROR_SYSCALL:
		/* errno is the socket's (the callers zero it before each SSL
		 * call): in a handshake any failure is the handshake's */
		if (!SSL_is_init_finished(t->ssl)) {
			say_failure(s, what);
			return MU_ETLS;
		}
		if (errno == EPIPE || errno == ECONNRESET || errno == 0)
			return MU_EEOF;
		return -errno;
	default:
		say_failure(s, what);
		return MU_ETLS;
	}
}

/*
 * A server's first look: a TLS client starts with a handshake record
 * (0x16). Anything else is a client without TLS: tell it so in the clear
 * (an auth-protocol ERROR, which muster's clients recognise) rather than
 * leave it waiting for an answer TLS will never give.
 */
static int peek_plain(mu_stream_t *s)
{
	tls_t *t = s->tls;
	unsigned char b, out[8 + MU_AUTH_MAX_TEXT];
	ssize_t r = recv(s->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	size_t n;

	if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
		s->want = MU__WANT_READ;
		return -EAGAIN;
	}
	t->peeked = 1;
	if (r <= 0 || b == 0x16)
		return 0; /* OpenSSL reports the rest */
	n = mu__auth_encode_error(out, "this server speaks TLS: run the client with --tls-ca "
	                          "(and --tls-cert/--tls-key when the server asks for them)");
	if (send(s->fd, out, n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		(void)0; /* the client may be gone already; it learns nothing more */
	t->failed = 1;
	mu__log(MU_LOG_WARN, "tls", "handshake from %s failed: the client does not speak TLS",
	        s->peer);
	return MU_ETLS;
}

int mu__tls_handshake(mu_stream_t *s)
{
	tls_t *t = s->tls;
	int r;

	if (SSL_is_init_finished(t->ssl))
		return 0;
	if (t->failed)
		return MU_ETLS;
	if (t->server && !t->peeked && (r = peek_plain(s)) != 0)
		return r;
	ERR_clear_error();
	errno = 0;
	r = SSL_do_handshake(t->ssl);
	if (r == 1) {
		mu__log(MU_LOG_DEBUG, "tls", "%s: %s, %s", s->peer, SSL_get_version(t->ssl),
		        SSL_get_cipher_name(t->ssl));
		return 0;
	}
	r = result(s, r, "handshake");
	return r == MU_EEOF ? MU_ETLS : r;
}

static int tls_recv(mu_stream_t *s, void *buf, size_t len, size_t *n)
{
	tls_t *t = s->tls;
	size_t got = 0;
	int r;

	*n = 0;
	if ((r = mu__tls_handshake(s)) != 0)
		return r;
	ERR_clear_error();
	errno = 0;
	r = SSL_read_ex(t->ssl, buf, len, &got);
	if (r == 1) {
		*n = got;
		return 0;
	}
	return result(s, r, "read");
}

/* Write one buffer: 0 with *n > 0, or a mapped error. */
static int write_one(mu_stream_t *s, const void *p, size_t len, size_t *n)
{
	tls_t *t = s->tls;
	int r;

	ERR_clear_error();
	errno = 0;
	r = SSL_write_ex(t->ssl, p, len, n);
	return r == 1 ? 0 : result(s, r, "write");
}

/*
 * The pieces of iov in order, small neighbours gathered into one record.
 * After -EAGAIN the caller retries from the same place with the same
 * bytes, as OpenSSL requires (the buffer may move: ACCEPT_MOVING_WRITE).
 */
static int tls_sendv(mu_stream_t *s, const struct iovec *iov, int cnt, size_t *n)
{
	unsigned char stage[COALESCE];
	size_t done = 0, w;
	int i = 0, rc = 0;

	*n = 0;
	if ((rc = mu__tls_handshake(s)) != 0)
		return rc;
	while (i < cnt) {
		size_t k = 0;
		int j = i;

		while (j < cnt && iov[j].iov_len < COALESCE / 4 && k + iov[j].iov_len <= COALESCE) {
			if (iov[j].iov_len > 0) /* an empty piece may have no base */
				memcpy(stage + k, iov[j].iov_base, iov[j].iov_len);
			k += iov[j++].iov_len;
		}
		if (j - i >= 2) {
			rc = write_one(s, stage, k, &w);
		} else {
			j = i + 1;
			rc = iov[i].iov_len > 0 ? write_one(s, iov[i].iov_base, iov[i].iov_len, &w) : 0;
			if (iov[i].iov_len == 0)
				w = 0;
		}
		if (rc != 0)
			break;
		done += w;
		if (w < (j - i >= 2 ? k : iov[i].iov_len))
			break; /* partial: the caller comes back for the rest */
		i = j;
	}
	*n = done;
	return done > 0 ? 0 : rc;
}

static int tls_shutdown(mu_stream_t *s)
{
	tls_t *t = s->tls;
	int r;

	if (SSL_is_init_finished(t->ssl) && !(SSL_get_shutdown(t->ssl) & SSL_SENT_SHUTDOWN)) {
		ERR_clear_error();
		errno = 0;
		r = SSL_shutdown(t->ssl);
		if (r < 0 && (r = result(s, r, "shutdown")) == -EAGAIN)
			return r;
	}
	return shutdown(s->fd, SHUT_WR) == 0 || errno == ENOTCONN ? 0 : -errno;
}

static size_t tls_pending(const mu_stream_t *s)
{
	const tls_t *t = s->tls;

	return (size_t)SSL_pending(t->ssl);
}

static void tls_free(mu_stream_t *s)
{
	tls_t *t = s->tls;

	if (t == NULL)
		return;
	SSL_free(t->ssl);
	OPENSSL_free(t);
	s->tls = NULL;
}

/*
 * OpenSSL's socket BIO writes with write(2), which raises SIGPIPE when
 * the peer is gone; the stream contract (and a host program such as the
 * Python interpreter) wants EPIPE instead. So the BIO under every SSL is
 * the socket BIO with its read and write done by recv/send(MSG_NOSIGNAL);
 * its ctrl, create and destroy are the socket BIO's own.
 */
static BIO_METHOD *nosig_method;

static int nosig_write(BIO *b, const char *buf, int len)
{
	ssize_t r = send((int)BIO_get_fd(b, NULL), buf, (size_t)len, MSG_NOSIGNAL);

	BIO_clear_retry_flags(b);
	if (r < 0 && BIO_sock_should_retry((int)r))
		BIO_set_retry_write(b);
	return (int)r;
}

static int nosig_read(BIO *b, char *buf, int len)
{
	ssize_t r = recv((int)BIO_get_fd(b, NULL), buf, (size_t)len, 0);

	BIO_clear_retry_flags(b);
	if (r < 0 && BIO_sock_should_retry((int)r))
		BIO_set_retry_read(b);
	return (int)r;
}

static void make_nosig_method(void)
{
	const BIO_METHOD *sock = BIO_s_socket();
	BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK |
	                             BIO_TYPE_DESCRIPTOR, "muster socket");

	if (m == NULL || BIO_meth_set_write(m, nosig_write) != 1 ||
	    BIO_meth_set_read(m, nosig_read) != 1 ||
	    BIO_meth_set_ctrl(m, BIO_meth_get_ctrl(sock)) != 1 ||
	    BIO_meth_set_create(m, BIO_meth_get_create(sock)) != 1 ||
	    BIO_meth_set_destroy(m, BIO_meth_get_destroy(sock)) != 1) {
		BIO_meth_free(m);
		return; /* mu__tls_wrap fails: no TLS rather than SIGPIPE */
	}
	nosig_method = m;
}

/* A BIO over fd that never raises SIGPIPE, or NULL. */
static BIO *nosig_bio(int fd)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	BIO *b;

	pthread_once(&once, make_nosig_method);
	if (nosig_method == NULL || (b = BIO_new(nosig_method)) == NULL)
		return NULL;
	BIO_set_fd(b, fd, BIO_NOCLOSE);
	return b;
}

static const mu__stream_ops_t tls_ops = {
	1, "tls", tls_recv, tls_sendv, tls_shutdown, tls_pending, tls_free,
};

/* The client checks the server's certificate against what it dialled. */
static int expect_name(SSL *ssl, const char *host)
{
	unsigned char a[16];
	int ip = inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;

	if (ip)
		return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) == 1 ? 0 : MU_ETLS;
	if (SSL_set_tlsext_host_name(ssl, host) != 1 || SSL_set1_host(ssl, host) != 1)
		return MU_ETLS;
	return 0;
}

int mu__tls_wrap(mu_stream_t *s, void *ctx, int server, const char *host)
{
	tls_t *t = OPENSSL_zalloc(sizeof(*t));
	BIO *bio;

	if (t == NULL)
		return MU_ENOMEM;
	t->server = server;
	t->ssl = SSL_new(ctx);
	bio = t->ssl != NULL ? nosig_bio(s->fd) : NULL;
	if (bio != NULL)
		SSL_set_bio(t->ssl, bio, bio); /* the SSL owns it now */
	if (bio == NULL || (!server && host != NULL && expect_name(t->ssl, host) != 0)) {
		SSL_free(t->ssl);
		OPENSSL_free(t);
		return MU_ETLS;
	}
	SSL_set_mode(t->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	if (server)
		SSL_set_accept_state(t->ssl);
	else
		SSL_set_connect_state(t->ssl);
	s->tls = t;
	s->ops = &tls_ops;
	mu__stream_set_kind(s);
	return 0;
}
