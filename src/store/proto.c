/* SPDX-License-Identifier: MIT */
/*
 * TCPStore codec: dialect detection, request decoding with limits checked
 * as soon as each length is read, and the primitive encoders.
 */
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/endian_int.h"
#include "store/proto_int.h"

static const mu__store_op_t v1_ops[] = {
	MU_SOP_SET, MU_SOP_COMPARE_SET, MU_SOP_GET, MU_SOP_ADD, MU_SOP_CHECK,
	MU_SOP_WAIT, MU_SOP_GETNUMKEYS, MU_SOP_WATCH_KEY, MU_SOP_DELETE_KEY,
};

static const mu__store_op_t v2_ops[] = {
	MU_SOP_VALIDATE, MU_SOP_SET, MU_SOP_COMPARE_SET, MU_SOP_GET, MU_SOP_ADD,
	MU_SOP_CHECK, MU_SOP_WAIT, MU_SOP_GETNUMKEYS, MU_SOP_DELETE_KEY,
	MU_SOP_APPEND, MU_SOP_MULTI_GET, MU_SOP_MULTI_SET, MU_SOP_CANCEL_WAIT,
	MU_SOP_PING, MU_SOP_QUEUE_PUSH, MU_SOP_QUEUE_POP, MU_SOP_QUEUE_LEN,
	MU_SOP_LIST,
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

void mu__store_limits_init(mu__store_limits_t *l)
{
	l->max_key = 64u << 10;
	l->max_value = 64u << 20;
	l->max_keys = 131072;
	l->max_request = l->max_value + (1u << 20);
	l->max_watches = 1024;
	l->max_watches_total = 65536;
}

int mu__store_detect(const void *data, size_t len)
{
	static const unsigned char v2[5] = {0x00, 0xCE, 0xF7, 0x85, 0x3C};
	size_t n = len < 5 ? len : 5;

	if (memcmp(data, v2, n) != 0)
		return 1;
	return n == 5 ? 2 : 0;
}

int mu__store_opcode(mu__store_dialect_t d, mu__store_op_t op)
{
	const mu__store_op_t *t = d == MU_STORE_V1 ? v1_ops : v2_ops;
	size_t n = d == MU_STORE_V1 ? NELEM(v1_ops) : NELEM(v2_ops), i;

	for (i = 0; i < n; i++)
		if (t[i] == op)
			return (int)i;
	return -1;
}

const char *mu__store_op_name(mu__store_op_t op)
{
	static const char *names[MU_SOP_COUNT] = {
		"VALIDATE", "SET", "COMPARE_SET", "GET", "ADD", "CHECK", "WAIT",
		"GETNUMKEYS", "WATCH_KEY", "DELETE_KEY", "APPEND", "MULTI_GET",
		"MULTI_SET", "CANCEL_WAIT", "PING", "QUEUE_PUSH", "QUEUE_POP",
		"QUEUE_LEN", "LIST",
	};

	return (unsigned)op < MU_SOP_COUNT ? names[op] : "?";
}

/* ---- decoding ---- */

typedef struct {
	const unsigned char *p;
	size_t len, off;
	size_t need; /* when incomplete: bytes the buffer must hold */
	const mu__store_limits_t *lim;
} cur_t;

/* 1 when n more bytes are there, else 0 (and need is set). */
static int have(cur_t *c, size_t n)
{
	if (c->len - c->off >= n)
		return 1;
	c->need = c->off + n;
	return 0;
}

static int get_u32(cur_t *c, uint32_t *v)
{
	if (!have(c, 4))
		return 0;
	*v = mu_le32_get(c->p + c->off);
	c->off += 4;
	return 1;
}

static int get_u64(cur_t *c, uint64_t *v)
{
	if (!have(c, 8))
		return 0;
	*v = mu_le64_get(c->p + c->off);
	c->off += 8;
	return 1;
}

/* A string of at most max bytes: 1, 0 (incomplete) or MU_ETOOBIG. */
static int get_str(cur_t *c, size_t max, mu__span_t *out)
{
	uint64_t n;

	if (!get_u64(c, &n))
		return 0;
	if (n > max || c->off > c->lim->max_request ||
	    n > c->lim->max_request - c->off)
		return MU_ETOOBIG;
	if (!have(c, (size_t)n))
		return 0;
	if (out != NULL) {
		out->p = (const char *)c->p + c->off;
		out->n = (size_t)n;
	}
	c->off += (size_t)n;
	return 1;
}

#define STEP(expr)                                                             \
	do {                                                                   \
		int rc_ = (expr);                                              \
		if (rc_ <= 0)                                                  \
			return rc_;                                            \
	} while (0)

/*
 * CHECK/WAIT/MULTI_GET (pairs = 0) or MULTI_SET (pairs = 1). With r NULL
 * it only walks; with r it also fills the arrays, which the caller sized.
 */
static int keylist(cur_t *c, int pairs, mu__store_req_t *r, uint64_t *count)
{
	uint64_t n, i;

	if (!get_u64(c, &n))
		return 0;
	if (n > c->lim->max_keys)
		return MU_ETOOBIG;
	*count = n;
	for (i = 0; i < n; i++) {
		STEP(get_str(c, c->lim->max_key, r ? &r->keys[i] : NULL));
		if (pairs)
			STEP(get_str(c, c->lim->max_value, r ? &r->values[i] : NULL));
	}
	return 1;
}

static int body(cur_t *c, mu__store_req_t *r, int fill)
{
	const mu__store_limits_t *l = c->lim;
	uint64_t u, count;
	mu__store_req_t *out = fill ? r : NULL;

	switch (r->op) {
	case MU_SOP_VALIDATE:
	case MU_SOP_PING:
		return get_u32(c, &r->u32);
	case MU_SOP_SET:
	case MU_SOP_APPEND:
	case MU_SOP_QUEUE_PUSH:
		STEP(get_str(c, l->max_key, &r->key));
		return get_str(c, l->max_value, &r->value);
	case MU_SOP_COMPARE_SET:
		STEP(get_str(c, l->max_key, &r->key));
		STEP(get_str(c, l->max_value, &r->value));
		return get_str(c, l->max_value, &r->desired);
	case MU_SOP_GET:
	case MU_SOP_WATCH_KEY:
	case MU_SOP_DELETE_KEY:
	case MU_SOP_QUEUE_POP:
	case MU_SOP_QUEUE_LEN:
		return get_str(c, l->max_key, &r->key);
	case MU_SOP_ADD:
		STEP(get_str(c, l->max_key, &r->key));
		STEP(get_u64(c, &u));
		r->delta = (int64_t)u; /* two's complement on every C11 target */
		return 1;
	case MU_SOP_CHECK:
	case MU_SOP_WAIT:
	case MU_SOP_MULTI_GET:
	case MU_SOP_MULTI_SET:
		STEP(keylist(c, r->op == MU_SOP_MULTI_SET, out, &count));
		r->nkeys = (size_t)count;
		return 1;
	default: /* GETNUMKEYS, CANCEL_WAIT, LIST: the opcode is all */
		return 1;
	}
}

int mu__store_req_decode(mu__store_dialect_t d, const void *data, size_t len,
                         const mu__store_limits_t *lim, mu__store_req_t *req,
                         size_t *used, size_t *need)
{
	const mu__store_op_t *t = d == MU_STORE_V1 ? v1_ops : v2_ops;
	size_t nt = d == MU_STORE_V1 ? NELEM(v1_ops) : NELEM(v2_ops);
	cur_t c = {data, len, 1, 0, lim};
	const unsigned char *p = data;
	int rc;

	memset(req, 0, sizeof(*req));
	*need = 1;
	if (len < 1)
		return 0;
	if (p[0] >= nt)
		return MU_EPROTO;
	req->op = t[p[0]];
	/* walk first: nothing is allocated for a request not yet complete */
	rc = body(&c, req, 0);
	if (rc <= 0) {
		*need = c.need;
		return rc;
	}
	if (req->nkeys > 0) {
		req->keys = mu__calloc(req->nkeys, sizeof(*req->keys));
		if (req->op == MU_SOP_MULTI_SET)
			req->values = mu__calloc(req->nkeys, sizeof(*req->values));
		if (req->keys == NULL ||
		    (req->op == MU_SOP_MULTI_SET && req->values == NULL)) {
			mu__store_req_free(req);
			return MU_ENOMEM;
		}
		c.off = 1;
		body(&c, req, 1); /* cannot fail: the walk succeeded */
	}
	*used = c.off;
	return 1;
}

void mu__store_req_free(mu__store_req_t *req)
{
	mu__free(req->keys);
	mu__free(req->values);
	req->keys = NULL;
	req->values = NULL;
}

/* ---- encoding ---- */

int mu__store_put_u8(mu__buf_t *b, uint8_t v)
{
	return mu__buf_append(b, &v, 1);
}

int mu__store_put_u32(mu__buf_t *b, uint32_t v)
{
	unsigned char x[4];

	mu_le32_put(x, v);
	return mu__buf_append(b, x, 4);
}

int mu__store_put_u64(mu__buf_t *b, uint64_t v)
{
	unsigned char x[8];

	mu_le64_put(x, v);
	return mu__buf_append(b, x, 8);
}

int mu__store_put_str(mu__buf_t *b, const void *p, size_t n)
{
	int rc = mu__store_put_u64(b, n);

	return rc != 0 ? rc : mu__buf_append(b, p, n);
}

/* ---- ADD's number parsing ---- */

int mu__store_stoll(const char *p, size_t n, int64_t *out)
{
	const char *end = memchr(p, '\0', n);
	size_t i = 0, len = end != NULL ? (size_t)(end - p) : n;
	uint64_t v = 0, limit;
	int neg = 0, digits = 0;

	while (i < len && (p[i] == ' ' || (p[i] >= '\t' && p[i] <= '\r')))
		i++;
	if (i < len && (p[i] == '+' || p[i] == '-'))
		neg = p[i++] == '-';
	limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
	for (; i < len && p[i] >= '0' && p[i] <= '9'; i++, digits++) {
		unsigned d = (unsigned)(p[i] - '0');

		if (v > (limit - d) / 10)
			return MU_ETOOBIG;
		v = v * 10 + d;
	}
	if (digits == 0)
		return MU_EPROTO;
	/* -(2^63) needs care: negate in unsigned, then convert */
	*out = neg ? (int64_t)(~v + 1) : (int64_t)v;
	return 0;
}
