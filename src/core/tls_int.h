/* SPDX-License-Identifier: MIT */
/*
 * TLS as a stream table (stream_int.h), over OpenSSL. The handshake runs
 * inside the first reads and writes (or mu__tls_handshake); certificates
 * are checked as the SSL_CTX of secure.c says (verification on by
 * default, the server's name or IP checked against what the client
 * dialled). A failure is logged once, with the peer's address and the
 * reason OpenSSL gives (an expired certificate, an unknown CA, a name
 * that does not match), and returned as MU_ETLS.
 */
#ifndef MU_CORE_TLS_INT_H
#define MU_CORE_TLS_INT_H

#include "core/stream_int.h"

/*
 * Put s (a plain TCP stream that has carried nothing yet) under TLS with
 * ctx (an SSL_CTX, borrowed; it outlives s). server: accept the
 * handshake; else connect, checking the certificate against host (a name
 * or an IP literal; NULL: no name check). 0, MU_ENOMEM or MU_ETLS.
 */
int mu__tls_wrap(mu_stream_t *s, void *ctx, int server, const char *host);

/* Run the TLS handshake as far as the socket allows: 0 when done,
 * -EAGAIN (s->want), MU_ETLS (logged), or the stream's error. */
int mu__tls_handshake(mu_stream_t *s);

#endif
