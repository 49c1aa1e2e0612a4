/* SPDX-License-Identifier: MIT */
/*
 * The shared-secret handshake (docs/protocols/auth.md): a mutual
 * challenge-response that a stream runs before its first payload byte
 * when its mu_secure_t has a secret. Each side sends a random nonce; each
 * proves it holds the secret with HMAC-SHA256 over both nonces, labelled
 * by its role so that a proof cannot be reflected back. The client proves
 * itself first; the server answers a bad or missing proof with an ERROR
 * message and closes. The secret never crosses the wire.
 *
 * The codec (mu__auth_decode) is pure, for the fuzzer; the state machine
 * (mu__auth_step) runs on the stream's own table without blocking.
 */
#ifndef MU_CORE_AUTH_INT_H
#define MU_CORE_AUTH_INT_H

#include <stddef.h>
#include <stdint.h>

#include "core/stream_int.h"

#define MU_AUTH_MAGIC "MUAU"
#define MU_AUTH_NONCE 32
#define MU_AUTH_MAC 32
#define MU_AUTH_MAX_TEXT 256   /* an ERROR's text */
#define MU_AUTH_HELLO_LEN 40   /* magic, type, version, role, 0, nonce */
#define MU_AUTH_PROOF_LEN 40   /* magic, type, 0, 0, 0, mac */

enum { MU_AUTH_HELLO = 1, MU_AUTH_PROOF = 2, MU_AUTH_ERROR = 3 };
enum { MU_AUTH_CLIENT = 1, MU_AUTH_SERVER = 2 };

typedef struct {
	int type;
	int version;                     /* HELLO */
	int role;                        /* HELLO */
	unsigned char data[MU_AUTH_MAC]; /* HELLO: nonce; PROOF: mac */
	char text[MU_AUTH_MAX_TEXT + 1]; /* ERROR, NUL-terminated */
} mu__auth_msg_t;

/*
 * Decode one message from the front of p[0..n). 1 with *m and *used set;
 * 0 when more bytes are needed; MU_EBADMAGIC when the bytes are not this
 * protocol's (a peer without the handshake); MU_EPROTO for a bad type,
 * version or length.
 */
int mu__auth_decode(const void *p, size_t n, mu__auth_msg_t *m, size_t *used);

/* Encode: out must hold 8 + MU_AUTH_MAX_TEXT bytes; the length is returned. */
size_t mu__auth_encode_hello(unsigned char *out, int role, const unsigned char *nonce);
size_t mu__auth_encode_proof(unsigned char *out, const unsigned char *mac);
size_t mu__auth_encode_error(unsigned char *out, const char *text);

/*
 * The proof the side `role` gives: HMAC-SHA256(secret, label(role) ||
 * the other side's nonce || its own nonce). 0 or MU_EFAIL.
 */
int mu__auth_proof(const void *secret, size_t len, int role,
                   const unsigned char *own, const unsigned char *other,
                   unsigned char *mac);

/*
 * Start the handshake on s (server: the accepting side), with secret
 * (borrowed: it outlives the stream). 0 or MU_ENOMEM.
 */
int mu__auth_start(mu_stream_t *s, const void *secret, size_t len, int server);

/*
 * Run the handshake as far as the socket allows: 0 when it is done (s->auth
 * is gone then, and bytes read past it are put back on the stream);
 * -EAGAIN (s->want says on what); MU_EAUTH when it failed (logged, with
 * the peer's address and why); or the stream's error.
 */
int mu__auth_step(mu_stream_t *s);

/*
 * A client that expected its protocol's first bytes and got p[0..n)
 * instead: when they are this handshake's (the server wants a shared
 * secret this client does not have, or tells it in the clear that it
 * speaks TLS), log why with the peer's address and return MU_EAUTH or
 * MU_ETLS; else 0 (the caller's own error stands).
 */
int mu__auth_sniff(const mu_stream_t *s, const void *p, size_t n);

/* Free the handshake state, if any. */
void mu__auth_free(mu_stream_t *s);

#endif
