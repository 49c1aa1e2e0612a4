/* SPDX-License-Identifier: MIT */
/*
 * mu_secure_t: the shared secret and the TLS contexts muster's own
 * protocols are protected with (muster/stream.h), and the streams made
 * under it. Everything is read and checked in mu_secure_new, so that a
 * wrong path or a bad certificate stops a command at start, not at its
 * first peer.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "core/alloc_int.h"
#include "core/auth_int.h"
#include "core/log_int.h"
#include "core/opts_int.h"
#include "core/secure_int.h"
#include "core/tls_int.h"

#define SECRET_MIN 16
#define SECRET_MAX 4096

struct mu_secure_s {
	unsigned char secret[SECRET_MAX];
	size_t secret_len;   /* 0: no shared-secret handshake */
	SSL_CTX *server;     /* NULL: sessions accepted in the clear */
	SSL_CTX *client;     /* NULL: connections made in the clear */
};

void mu_secure_opts_init_size(mu_secure_opts_t *o, size_t size)
{
	mu_secure_opts_t d;

	memset(&d, 0, sizeof(d));
	d.struct_size = sizeof(d);
	mu__opts_fill(o, size, &d, sizeof(d));
}

static int say(char *err, size_t len, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int say(char *err, size_t len, int rc, const char *fmt, ...)
{
	va_list ap;

	if (err != NULL && len > 0) {
		va_start(ap, fmt);
		vsnprintf(err, len, fmt, ap);
		va_end(ap);
	}
	return rc;
}

/* The secret: the file's bytes, without one trailing newline. */
static int read_secret(mu_secure_t *sec, const char *path, char *err, size_t el)
{
	struct stat st;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc;

	if (fd < 0)
		return say(err, el, -errno, "--secret-file %s: %s", path, strerror(errno));
	n = read(fd, sec->secret, sizeof(sec->secret));
	rc = n < 0 ? -errno : 0;
	if (fstat(fd, &st) == 0 && (st.st_mode & 077) != 0)
		mu__log(MU_LOG_WARN, "auth", "--secret-file %s can be read by other users "
		        "(chmod 600 it)", path);
	close(fd);
	if (rc != 0)
		return say(err, el, rc, "--secret-file %s: %s", path, strerror(-rc));
	if (n > 0 && sec->secret[n - 1] == '\n')
		n--;
	if (n > 0 && sec->secret[n - 1] == '\r')
		n--;
	if ((size_t)n >= sizeof(sec->secret) || n < SECRET_MIN)
		return say(err, el, MU_EARG, "--secret-file %s: the secret must be %d to %d bytes",
		           path, SECRET_MIN, SECRET_MAX - 1);
	sec->secret_len = (size_t)n;
	return 0;
}

/* OpenSSL's last error, for a message. */
static const char *ssl_why(void)
{
	static __thread char buf[256];
	unsigned long e = ERR_get_error();

	if (e == 0)
		return "unknown error";
	ERR_error_string_n(e, buf, sizeof(buf));
	return buf;
}

static SSL_CTX *new_ctx(int server)
{
	SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());

	if (ctx == NULL)
		return NULL;
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	/* our protocols frame every message: a missing close_notify cannot
	 * truncate one unnoticed, so EOF reads as EOF */
	SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
	return ctx;
}

static int load_pair(SSL_CTX *ctx, const mu_secure_opts_t *o, char *err, size_t el)
{
	if (SSL_CTX_use_certificate_chain_file(ctx, o->tls_cert) != 1)
		return say(err, el, MU_ETLS, "--tls-cert %s: %s", o->tls_cert, ssl_why());
	if (SSL_CTX_use_PrivateKey_file(ctx, o->tls_key, SSL_FILETYPE_PEM) != 1)
		return say(err, el, MU_ETLS, "--tls-key %s: %s", o->tls_key, ssl_why());
	if (SSL_CTX_check_private_key(ctx) != 1)
		return say(err, el, MU_ETLS, "--tls-key %s does not match --tls-cert %s", o->tls_key,
		           o->tls_cert);
	return 0;
}

static int load_ca(SSL_CTX *ctx, const char *ca, char *err, size_t el)
{
	if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1)
		return say(err, el, MU_ETLS, "--tls-ca %s: %s", ca, ssl_why());
	return 0;
}

static int make_tls(mu_secure_t *sec, const mu_secure_opts_t *o, char *err, size_t el)
{
	int pair = o->tls_cert != NULL && o->tls_key != NULL, rc = 0;

	if ((o->tls_cert != NULL) != (o->tls_key != NULL))
		return say(err, el, MU_EARG, "--tls-cert and --tls-key go together");
	if (pair) {
		/* accepting: our certificate; with a CA, every client needs one */
		if ((sec->server = new_ctx(1)) == NULL)
			return say(err, el, MU_ENOMEM, "TLS: %s", ssl_why());
		rc = load_pair(sec->server, o, err, el);
		if (rc == 0 && o->tls_ca != NULL) {
			rc = load_ca(sec->server, o->tls_ca, err, el);
			SSL_CTX_set_verify(sec->server, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
			                   NULL);
		}
		if (rc != 0)
			return rc;
	}
	/* connecting: the server's certificate is checked, against the CA
	 * given or the system's; ours is shown to a server that asks */
	if ((sec->client = new_ctx(0)) == NULL)
		return say(err, el, MU_ENOMEM, "TLS: %s", ssl_why());
	if (pair && (rc = load_pair(sec->client, o, err, el)) != 0)
		return rc;
	if (o->tls_ca != NULL)
		rc = load_ca(sec->client, o->tls_ca, err, el);
	else if (SSL_CTX_set_default_verify_paths(sec->client) != 1)
		rc = say(err, el, MU_ETLS, "TLS: no system CA store: %s", ssl_why());
	SSL_CTX_set_verify(sec->client, o->tls_no_verify ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
	return rc;
}

int mu_secure_new(const mu_secure_opts_t *uo, mu_secure_t **out, char *err,
                  size_t errlen)
{
	mu_secure_opts_t oo, *o = &oo;
	mu_secure_t *sec;
	int rc = 0;

	*out = NULL;
	memset(o, 0, sizeof(*o));
	if (mu__opts_read(o, sizeof(*o), uo) != 0)
		return say(err, errlen, MU_EARG, "security options not made by "
		           "mu_secure_opts_init, or asking for what this library (%s) lacks",
		           mu_version());
	if (o->secret_file == NULL && o->tls_cert == NULL && o->tls_key == NULL &&
	    o->tls_ca == NULL)
		return 0; /* plain TCP: NULL says so */
	sec = mu__calloc(1, sizeof(*sec));
	if (sec == NULL)
		return MU_ENOMEM;
	if (o->secret_file != NULL)
		rc = read_secret(sec, o->secret_file, err, errlen);
	if (rc == 0 && (o->tls_cert != NULL || o->tls_key != NULL || o->tls_ca != NULL))
		rc = make_tls(sec, o, err, errlen);
	if (rc != 0) {
		mu_secure_free(sec);
		return rc;
	}
	*out = sec;
	return 0;
}

void mu_secure_free(mu_secure_t *sec)
{
	if (sec == NULL)
		return;
	SSL_CTX_free(sec->server);
	SSL_CTX_free(sec->client);
	OPENSSL_cleanse(sec->secret, sizeof(sec->secret));
	mu__free(sec);
}

int mu__secure_stream(const mu_secure_t *sec, int fd, int server,
                      const char *host, mu_stream_t **out)
{
	SSL_CTX *ctx;
	int rc = mu__stream_tcp_new(fd, out);

	if (rc != 0 || sec == NULL)
		return rc;
	ctx = server ? sec->server : sec->client;
	if (ctx != NULL)
		rc = mu__tls_wrap(*out, ctx, server, host);
	if (rc == 0 && sec->secret_len > 0)
		rc = mu__auth_start(*out, sec->secret, sec->secret_len, server);
	if (rc != 0) {
		mu__stream_close(*out);
		*out = NULL;
	}
	return rc;
}

const char *mu__secure_kind(const mu_secure_t *sec)
{
	int tls = sec != NULL && (sec->server != NULL || sec->client != NULL);
	int secret = sec != NULL && sec->secret_len > 0;

	return tls && secret ? "TLS + shared secret" : tls ? "TLS" : secret ? "shared secret"
	                                                                  : "plain";
}
