/* SPDX-License-Identifier: MIT */
/*
 * PyTorch c10d TCPStore wire codec, both dialects, pure (no sockets).
 * Layouts: ../shared/spec/tcpstore.md §3-§5, docs/protocols/tcpstore.md.
 *
 *   v1 (torch 1.13):  no handshake; SET=0 ... DELETE_KEY=8, WATCH_KEY=7
 *   v2 (torch 2.x):   VALIDATE=0 first (u32 magic 0x3C85F7CE), then the same
 *                     operations shifted by one, plus APPEND ... LIST
 *
 * Integers are little-endian; every length and count is a u64; a string is
 * a u64 length then that many raw bytes (NUL allowed).
 */
#ifndef MU_STORE_PROTO_INT_H
#define MU_STORE_PROTO_INT_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf_int.h"

#define MU_STORE_V2_MAGIC 0x3C85F7CEu

typedef enum { MU_STORE_V1 = 1, MU_STORE_V2 = 2 } mu__store_dialect_t;

/* Operations, independent of the wire numbering. */
typedef enum {
	MU_SOP_VALIDATE,
	MU_SOP_SET,
	MU_SOP_COMPARE_SET,
	MU_SOP_GET,
	MU_SOP_ADD,
	MU_SOP_CHECK,
	MU_SOP_WAIT,
	MU_SOP_GETNUMKEYS,
	MU_SOP_WATCH_KEY,
	MU_SOP_DELETE_KEY,
	MU_SOP_APPEND,
	MU_SOP_MULTI_GET,
	MU_SOP_MULTI_SET,
	MU_SOP_CANCEL_WAIT,
	MU_SOP_PING,
	MU_SOP_QUEUE_PUSH,
	MU_SOP_QUEUE_POP,
	MU_SOP_QUEUE_LEN,
	MU_SOP_LIST,
	MU_SOP_COUNT
} mu__store_op_t;

/* Reply codes (u8). */
#define MU_STORE_READY 0
#define MU_STORE_NOT_READY 1
#define MU_STORE_STOP_WAITING 0
#define MU_STORE_WAIT_CANCELED 1
#define MU_STORE_KEY_UPDATED 0
#define MU_STORE_KEY_CREATED 1
#define MU_STORE_KEY_DELETED 2
#define MU_STORE_KEY_CALLBACK_REGISTERED 3

typedef struct {
	const char *p;
	size_t n;
} mu__span_t;

/* Limits checked before anything a peer declares is allocated or awaited. */
typedef struct {
	size_t max_key;     /* bytes in one key; default 64 KiB */
	size_t max_value;   /* bytes in one value; default 64 MiB */
	size_t max_keys;    /* keys in one CHECK/WAIT/MULTI_*; default 131072 */
	size_t max_request; /* bytes of one whole request; default max_value + 1 MiB */
	size_t max_watches; /* v1 watches one connection may hold; default 1024 */
	size_t max_watches_total; /* ... all connections together; default 65536 */
} mu__store_limits_t;

void mu__store_limits_init(mu__store_limits_t *l);

/*
 * A decoded request. Spans point into the input bytes, which must stay put
 * until the request is executed; keys/values (CHECK, WAIT, MULTI_GET,
 * MULTI_SET) are arrays owned by the request (mu__store_req_free).
 */
typedef struct {
	mu__store_op_t op;
	mu__span_t key;     /* single-key operations */
	mu__span_t value;   /* SET, APPEND, QUEUE_PUSH; COMPARE_SET: expected */
	mu__span_t desired; /* COMPARE_SET */
	int64_t delta;      /* ADD */
	uint32_t u32;       /* VALIDATE: magic; PING: nonce */
	size_t nkeys;
	mu__span_t *keys;   /* nkeys entries */
	mu__span_t *values; /* MULTI_SET: nkeys entries */
} mu__store_req_t;

/*
 * Which dialect a connection speaks, from its first bytes: 2 when they are
 * 00 CE F7 85 3C (VALIDATE + magic), 1 for anything else, 0 while the bytes
 * so far could still be either.
 */
int mu__store_detect(const void *data, size_t len);

/*
 * Decode one request from the start of data. Returns 1 (complete; *used
 * bytes), 0 (incomplete: no decision is possible before the buffer holds at
 * least *need bytes), MU_EPROTO (unknown opcode for the dialect),
 * MU_ETOOBIG (a length or count over its limit, reported as soon as that
 * length is read), MU_ENOMEM.
 */
int mu__store_req_decode(mu__store_dialect_t d, const void *data, size_t len,
                         const mu__store_limits_t *lim, mu__store_req_t *req,
                         size_t *used, size_t *need);
void mu__store_req_free(mu__store_req_t *req);

/* The wire opcode of op in dialect d, or -1 when d has no such operation. */
int mu__store_opcode(mu__store_dialect_t d, mu__store_op_t op);

/* Name of an operation, for logs. */
const char *mu__store_op_name(mu__store_op_t op);

/* Encoders (client side, and server replies). All return 0 or MU_E*. */
int mu__store_put_u8(mu__buf_t *b, uint8_t v);
int mu__store_put_u32(mu__buf_t *b, uint32_t v);
int mu__store_put_u64(mu__buf_t *b, uint64_t v);
int mu__store_put_str(mu__buf_t *b, const void *p, size_t n);

/*
 * Parse a value the way C++ std::stoll does (base 10): leading whitespace,
 * an optional sign, then digits up to the first non-digit; the text ends at
 * the first NUL. 0, or MU_EPROTO (no digits) / MU_ETOOBIG (out of int64).
 */
int mu__store_stoll(const char *p, size_t n, int64_t *out);

#endif
