/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer driver: tensor frames read through a TLS stream (core/tls.c
 * under tensor/frame.c), the way a device session or stage reads them
 * when run with --tls-*. The first byte picks the way in:
 *   even: a TLS client (another thread, certificate unchecked) sends the
 *         rest as application data, in records of sizes the byte picks,
 *         and the server reads frames until an error or the end;
 *   odd:  the rest is written raw to a TLS server, as a peer without TLS
 *         or a broken one would, and the server must refuse it (MU_ETLS
 *         or the end) without reading payload.
 * The server's key and self-signed certificate are made once, in memory.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "muster/stream.h"
#include "muster/tensor.h"
#include "core/stream_int.h"
#include "core/tls_int.h"

static SSL_CTX *server_ctx, *client_ctx;

static void make_contexts(void)
{
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *x = X509_new();
	X509_NAME *name = X509_get_subject_name(x);

	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_gmtime_adj(X509_getm_notBefore(x), 0);
	X509_gmtime_adj(X509_getm_notAfter(x), 3600L * 24 * 365);
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"fuzz", -1, -1, 0);
	X509_set_issuer_name(x, name);
	X509_set_pubkey(x, key);
	if (key == NULL || X509_sign(x, key, EVP_sha256()) == 0)
		abort();
	server_ctx = SSL_CTX_new(TLS_server_method());
	client_ctx = SSL_CTX_new(TLS_client_method());
	if (SSL_CTX_use_certificate(server_ctx, x) != 1 || SSL_CTX_use_PrivateKey(server_ctx, key) != 1)
		abort();
	SSL_CTX_set_options(server_ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
	SSL_CTX_set_options(client_ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
	SSL_CTX_set_verify(client_ctx, SSL_VERIFY_NONE, NULL);
	X509_free(x);
	EVP_PKEY_free(key);
}

typedef struct {
	int fd;
	const uint8_t *data;
	size_t size;
	unsigned chunk;
} client_t;

static void *client_main(void *arg)
{
	client_t *c = arg;
	mu_stream_t *s = NULL;

	if (mu__stream_tcp_new(c->fd, &s) != 0 || mu__tls_wrap(s, client_ctx, 0, NULL) != 0) {
		mu__stream_close(s);
		return NULL;
	}
	for (size_t off = 0; off < c->size; off += c->chunk)
		if (mu_stream_send(s, c->data + off, c->size - off < c->chunk ? c->size - off
		                   : c->chunk, 2000) != 0)
			break;
	mu_stream_shutdown(s);
	mu__stream_close(s);
	return NULL;
}

static void serve(int fd)
{
	mu_frame_limits_t lim = {256, 64, 1 << 20};
	mu_stream_t *s = NULL;
	int rc = 0;

	if (mu__stream_tcp_new(fd, &s) != 0 || mu__tls_wrap(s, server_ctx, 1, NULL) != 0) {
		mu__stream_close(s);
		return;
	}
	for (int i = 0; i < 16 && rc == 0; i++) {
		mu_tensor_list_t l;

		mu_tensor_list_init(&l);
		rc = mu_frame_recv(s, &lim, &l, 2000);
		mu_tensor_list_free(&l);
	}
	mu__stream_close(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	int sv[2];

	if (size < 1 || size > 65536)
		return 0;
	pthread_once(&once, make_contexts);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		return 0;
	if (data[0] & 1) {
		if (write(sv[1], data + 1, size - 1) < 0)
			(void)0; /* the server sees what fitted */
		shutdown(sv[1], SHUT_WR);
		serve(sv[0]);
		close(sv[1]);
	} else {
		client_t c = {sv[1], data + 1, size - 1, 1u + (unsigned)data[0] * 64u};
		pthread_t t;

		if (pthread_create(&t, NULL, client_main, &c) != 0) {
			close(sv[0]);
			close(sv[1]);
			return 0;
		}
		serve(sv[0]);
		pthread_join(t, NULL);
	}
	return 0;
}
