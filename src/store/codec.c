/* SPDX-License-Identifier: MIT */
/*
 * The public request codec (include/muster/store.h, mu_store_request_*):
 * a request of one key laid out as proto.c's decoder reads it, with the
 * opcode of the dialect from proto.c's tables. Sized first, then written,
 * so a short buffer gets nothing and learns the size it needs. Replies
 * are the caller's to read; the blocking client (client.c) has its own
 * encoders, which know about its "/" key prefix.
 */
#include <errno.h>
#include <string.h>

#include "muster/store.h"
#include "core/endian_int.h"
#include "core/opts_int.h"
#include "store/proto_int.h"

/* The codec's operations in the order of mu_store_op_t. */
static const mu__store_op_t ops[] = {
	MU_SOP_VALIDATE, MU_SOP_PING, MU_SOP_SET, MU_SOP_COMPARE_SET, MU_SOP_GET,
	MU_SOP_ADD, MU_SOP_CHECK, MU_SOP_WAIT, MU_SOP_GETNUMKEYS, MU_SOP_DELETE_KEY,
	MU_SOP_APPEND,
};

void mu_store_request_init_size(mu_store_request_t *r, size_t size)
{
	mu_store_request_t d;

	memset(&d, 0, sizeof(d));
	d.struct_size = sizeof(d);
	mu__opts_fill(r, size, &d, sizeof(d));
}

/* Bytes written so far, into p when p is not NULL (the sizing pass). */
typedef struct {
	unsigned char *p;
	size_t len;
} out_t;

static void put(out_t *o, const void *p, size_t n)
{
	if (o->p != NULL && n > 0)
		memcpy(o->p + o->len, p, n);
	o->len += n;
}

static void put_u32(out_t *o, uint32_t v)
{
	unsigned char x[4];

	mu_le32_put(x, v);
	put(o, x, 4);
}

static void put_u64(out_t *o, uint64_t v)
{
	unsigned char x[8];

	mu_le64_put(x, v);
	put(o, x, 8);
}

static void put_str(out_t *o, const void *p, size_t n)
{
	put_u64(o, n);
	put(o, p, n);
}

/* The request after its opcode byte (docs/protocols/tcpstore.md). */
static void body(const mu_store_request_t *r, out_t *o)
{
	switch (r->op) {
	case MU_STORE_OP_VALIDATE:
		put_u32(o, MU_STORE_V2_MAGIC);
		break;
	case MU_STORE_OP_PING:
		put_u32(o, r->nonce);
		break;
	case MU_STORE_OP_SET:
	case MU_STORE_OP_APPEND:
		put_str(o, r->key, r->key_len);
		put_str(o, r->value, r->value_len);
		break;
	case MU_STORE_OP_COMPARE_SET:
		put_str(o, r->key, r->key_len);
		put_str(o, r->value, r->value_len);
		put_str(o, r->desired, r->desired_len);
		break;
	case MU_STORE_OP_ADD:
		put_str(o, r->key, r->key_len);
		put_u64(o, (uint64_t)r->delta); /* two's complement on the wire */
		break;
	case MU_STORE_OP_CHECK:
	case MU_STORE_OP_WAIT:
		put_u64(o, 1);
		put_str(o, r->key, r->key_len);
		break;
	case MU_STORE_OP_NUM_KEYS:
		break;
	default: /* GET, DELETE */
		put_str(o, r->key, r->key_len);
		break;
	}
}

/* A (pointer, length) pair the request may carry: 0, MU_ETOOBIG for a
 * length no buffer holds, MU_EARG for a length without bytes. */
static int span_ok(const void *p, size_t n)
{
	if (n > SIZE_MAX / 4)
		return MU_ETOOBIG;
	return p != NULL || n == 0 ? 0 : MU_EARG;
}

int mu_store_request_encode(const mu_store_request_t *ur, void *buf, size_t cap, size_t *len)
{
	mu_store_request_t r;
	out_t size = {NULL, 1}, o = {buf, 1};
	int code, rc;

	memset(&r, 0, sizeof(r));
	r.struct_size = sizeof(r);
	if (mu__opts_read(&r, sizeof(r), ur) != 0 ||
	    (r.dialect != MU_STORE_DIALECT_V1 && r.dialect != MU_STORE_DIALECT_V2) ||
	    (unsigned)r.op >= sizeof(ops) / sizeof(ops[0]))
		return MU_EARG;
	if ((rc = span_ok(r.key, r.key_len)) != 0 || (rc = span_ok(r.value, r.value_len)) != 0 ||
	    (rc = span_ok(r.desired, r.desired_len)) != 0)
		return rc;
	code = mu__store_opcode(r.dialect == MU_STORE_DIALECT_V1 ? MU_STORE_V1 : MU_STORE_V2,
	                        ops[r.op]);
	if (code < 0)
		return -ENOTSUP;
	body(&r, &size);
	*len = size.len;
	if (size.len > cap || buf == NULL)
		return MU_ETOOBIG;
	o.p[0] = (unsigned char)code;
	body(&r, &o);
	return 0;
}
