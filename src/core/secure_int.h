/* SPDX-License-Identifier: MIT */
/*
 * What a mu_secure_t holds, and how a socket becomes a stream under it:
 * TLS around it when configured, then the shared-secret handshake.
 */
#ifndef MU_CORE_SECURE_INT_H
#define MU_CORE_SECURE_INT_H

#include "muster/stream.h"
#include "core/stream_int.h"

/*
 * A stream over fd (taken; closed on failure) as sec says (NULL: plain
 * TCP). server: this side accepted the connection; host: the name or
 * address a client dialled, which the server's certificate must match.
 * The handshakes run on the stream's first reads and writes (or
 * mu__sock_handshake). 0, MU_ENOMEM, MU_ETLS.
 */
int mu__secure_stream(const mu_secure_t *sec, int fd, int server,
                      const char *host, mu_stream_t **out);

/* What sec protects with, for reports: "plain", "TLS", "shared secret",
 * "TLS + shared secret". */
const char *mu__secure_kind(const mu_secure_t *sec);

#endif
