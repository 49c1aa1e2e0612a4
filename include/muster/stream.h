/* SPDX-License-Identifier: MIT */
/*
 * Streams and connection security.
 *
 * A stream is one connection to a peer as muster's own protocols use it:
 * a TCP socket, possibly under TLS, possibly past the shared-secret
 * handshake. Every muster connection is one (docs/internals/transport.md);
 * the public API hands out stream handles, never file descriptors, so that
 * what runs underneath (TLS, authentication, budgets) cannot be bypassed.
 *
 * A mu_secure_t says how muster's own protocols (the pipeline and session
 * protocols, device assignment and weight streaming) are protected: a
 * shared secret (a mutual HMAC-SHA256 challenge-response before any other
 * message; docs/protocols/auth.md) and/or TLS (OpenSSL; certificates are
 * verified by default, mutual when a CA is given to the server). One
 * mu_secure_t serves any number of connections on any threads; it must
 * outlive every server and client given it.
 */
#ifndef MUSTER_STREAM_H
#define MUSTER_STREAM_H

#include <stddef.h>

#include "muster/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mu_stream_s mu_stream_t;

/*
 * Write all len bytes, or read up to len (*n gets the count; 0 means the
 * peer closed), waiting at most timeout_ms (< 0: no limit). 0 or a
 * negative error (-ETIMEDOUT, MU_EEOF, MU_EAUTH, MU_ETLS, -errno). A
 * stream is used by one thread at a time.
 */
MU_EXTERN int mu_stream_send(mu_stream_t *s, const void *buf, size_t len,
                             int timeout_ms);
MU_EXTERN int mu_stream_recv(mu_stream_t *s, void *buf, size_t len,
                             size_t *n, int timeout_ms);
/* End the sending side (the peer reads EOF); reading goes on. 0 or -errno. */
MU_EXTERN int mu_stream_shutdown(mu_stream_t *s);
/* The other side, "ip:port" ("[v6]:port"). */
MU_EXTERN const char *mu_stream_peer(const mu_stream_t *s);
/* "tcp", "tls", "tcp+auth", "tls+auth": what protects the stream. */
MU_EXTERN const char *mu_stream_kind(const mu_stream_t *s);

typedef struct {
	size_t struct_size;  /* set by mu_secure_opts_init (muster/common.h) */
	/* A file holding the shared secret (at least 16 bytes; a trailing
	 * newline is not part of it). NULL: no shared-secret handshake. */
	const char *secret_file;
	/* PEM files. A server needs cert and key to speak TLS; a client
	 * speaks TLS when any of the three is set (cert and key: it shows a
	 * certificate of its own, for a server that asks). */
	const char *tls_cert;
	const char *tls_key;
	/* The CA that signs the peers' certificates. Client: verifies the
	 * server's certificate and name against it (NULL: the system's CAs).
	 * Server: asks every client for a certificate signed by it (mutual
	 * TLS); NULL: clients are not asked. */
	const char *tls_ca;
	/* Client: do not check the server's certificate (testing only). */
	int tls_no_verify;
} mu_secure_opts_t;

typedef struct mu_secure_s mu_secure_t;

MU_EXTERN void mu_secure_opts_init_size(mu_secure_opts_t *o, size_t size);
#define mu_secure_opts_init(o) mu_secure_opts_init_size((o), sizeof(*(o)))

/*
 * Read the secret and certificates now, so that a bad file fails here and
 * not at the first connection. *out is NULL when o asks for nothing (no
 * secret, no TLS): NULL is a valid mu_secure_t everywhere, meaning plain
 * TCP. err (may be NULL) gets a line saying what is wrong. MU_EARG,
 * MU_ETLS, -errno (a file that cannot be read).
 */
MU_EXTERN int mu_secure_new(const mu_secure_opts_t *o, mu_secure_t **out,
                            char *err, size_t errlen);
/* NULL is a no-op. */
MU_EXTERN void mu_secure_free(mu_secure_t *sec);

#ifdef __cplusplus
}
#endif
#endif
