/* SPDX-License-Identifier: MIT */
/*
 * The TVM RPC session handshake (spec §9), pure codec:
 *
 *   client -> server   int32 RPC_MAGIC, int32 N, N bytes "client:MATCHKEY[ opts]"
 *   server -> client   int32 RPC_CODE_SUCCESS, int32 M, M bytes "server:KEY"
 *                   or int32 RPC_CODE_MISMATCH (then the server closes)
 *
 * Only the first whitespace-separated token is the key; the one option TVM
 * has is "-timeout=N" (seconds, integer or fractional).
 */
#ifndef MU_SERVER_HANDSHAKE_INT_H
#define MU_SERVER_HANDSHAKE_INT_H

#include <stddef.h>

#include "core/buf_int.h"

/* The longest client key string a server reads (peer-sized). */
#define MU_RPC_MAX_KEY 4096

/*
 * Look at the start of a client's handshake. Returns 0 when more bytes are
 * needed, 1 when it is complete (*key / *keylen: the key string, after the
 * 8 header bytes; the handshake spans 8 + keylen bytes), MU_EBADMAGIC for a
 * wrong magic, MU_EPROTO for a length <= 0, MU_ETOOBIG for one over max.
 */
int mu__rpc_hello_peek(const void *data, size_t len, size_t max,
                       const char **key, size_t *keylen);

/*
 * Split a client key string. *mk / *mklen: the matchkey after "client:";
 * *timeout: the -timeout option, 0 when absent. MU_EPROTO when the first
 * token does not start with "client:", or -timeout is not a number >= 0.
 */
int mu__rpc_parse_client_key(const char *s, size_t n, const char **mk,
                             size_t *mklen, double *timeout);

/* Append the client's hello for matchkey (and -timeout=T when T > 0). */
int mu__rpc_hello_encode(mu__buf_t *out, const char *matchkey, double timeout);

/*
 * Append a busy server's answer (docs/protocols/tvm-rpc.md): MISMATCH,
 * which is all a TVM client reads, then muster's reason, int32 N and N
 * bytes starting "busy:".
 */
int mu__rpc_busy_encode(mu__buf_t *out, const char *why);

/* Append the server's answer: SUCCESS plus "server:KEY", or MISMATCH. */
int mu__rpc_reply_encode(mu__buf_t *out, int success, const char *key);

/*
 * Read the server's answer from its first bytes. Returns 0 (need more), 1
 * (complete: *success set, *len bytes consumed), or MU_EPROTO/MU_ETOOBIG.
 */
int mu__rpc_reply_peek(const void *data, size_t len, int *success,
                       size_t *consumed);

#endif
