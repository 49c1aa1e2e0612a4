/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/store/codec.c, the public request codec: torch's
 * captured bytes (1.13's SET, 2.x's VALIDATE + PING) come out byte for
 * byte; every request of either dialect decodes, with the server's own
 * decoder, to what was encoded; a short buffer gets nothing and learns
 * the size; requests a dialect lacks, and requests that are not ones,
 * are refused.
 */
#include <errno.h>

#include "mu_test.h"

#include "muster/store.h"
#include "store/proto_int.h"

static mu_store_request_t req(mu_store_dialect_t d, mu_store_op_t op)
{
	mu_store_request_t r;

	mu_store_request_init(&r);
	r.dialect = d;
	r.op = op;
	r.key = "/k";
	r.key_len = 2;
	return r;
}

static void test_torch_bytes(void **state)
{
	/* spec §5: torch 1.13's SET "/k" = "v\0w" */
	static const char v1_set[] = "\x00" "\x02\x00\x00\x00\x00\x00\x00\x00" "/k"
	                             "\x03\x00\x00\x00\x00\x00\x00\x00" "v\0w";
	/* torch 2.x's opening segment: VALIDATE, the magic, PING, a nonce */
	static const char v2_hello[] = "\x00\xce\xf7\x85\x3c" "\x0d\x04\x03\xff\x00";
	mu_store_request_t r = req(MU_STORE_DIALECT_V1, MU_STORE_OP_SET);
	unsigned char buf[64];
	size_t n, m;

	(void)state;
	r.value = "v\0w";
	r.value_len = 3;
	assert_int_equal(mu_store_request_encode(&r, buf, sizeof(buf), &n), 0);
	assert_int_equal(n, sizeof(v1_set) - 1);
	assert_memory_equal(buf, v1_set, n);
	r = req(MU_STORE_DIALECT_V2, MU_STORE_OP_VALIDATE);
	assert_int_equal(mu_store_request_encode(&r, buf, sizeof(buf), &n), 0);
	r = req(MU_STORE_DIALECT_V2, MU_STORE_OP_PING);
	r.nonce = 0xff0304;
	assert_int_equal(mu_store_request_encode(&r, buf + n, sizeof(buf) - n, &m), 0);
	assert_int_equal(n + m, 10);
	assert_memory_equal(buf, v2_hello, 10);
}

/* Encode, then decode with the server's decoder: the same request. */
static void round_trip(mu_store_request_t *r, mu__store_op_t op)
{
	mu__store_dialect_t d = r->dialect == MU_STORE_DIALECT_V1 ? MU_STORE_V1 : MU_STORE_V2;
	mu__store_limits_t lim;
	mu__store_req_t dr;
	unsigned char buf[128];
	size_t n, used = 0, need;

	mu__store_limits_init(&lim);
	assert_int_equal(mu_store_request_encode(r, buf, sizeof(buf), &n), 0);
	assert_int_equal(mu__store_req_decode(d, buf, n, &lim, &dr, &used, &need), 1);
	assert_int_equal(used, n);
	assert_int_equal(dr.op, op);
	switch (op) {
	case MU_SOP_VALIDATE:
		assert_int_equal(dr.u32, MU_STORE_V2_MAGIC);
		break;
	case MU_SOP_PING:
		assert_int_equal(dr.u32, r->nonce);
		break;
	case MU_SOP_CHECK:
	case MU_SOP_WAIT:
		assert_int_equal(dr.nkeys, 1);
		assert_int_equal(dr.keys[0].n, r->key_len);
		assert_memory_equal(dr.keys[0].p, r->key, r->key_len);
		break;
	case MU_SOP_GETNUMKEYS:
		assert_int_equal(n, 1);
		break;
	default:
		assert_int_equal(dr.key.n, r->key_len);
		assert_memory_equal(dr.key.p, r->key, r->key_len);
		assert_int_equal(dr.value.n, op == MU_SOP_SET || op == MU_SOP_APPEND ||
		                             op == MU_SOP_COMPARE_SET ? r->value_len : 0);
		if (op == MU_SOP_COMPARE_SET)
			assert_memory_equal(dr.desired.p, r->desired, r->desired_len);
		if (op == MU_SOP_ADD)
			assert_int_equal(dr.delta, r->delta);
		break;
	}
	mu__store_req_free(&dr);
}

static void test_every_request_decodes(void **state)
{
	static const mu__store_op_t want[] = {
		MU_SOP_VALIDATE, MU_SOP_PING, MU_SOP_SET, MU_SOP_COMPARE_SET, MU_SOP_GET,
		MU_SOP_ADD, MU_SOP_CHECK, MU_SOP_WAIT, MU_SOP_GETNUMKEYS, MU_SOP_DELETE_KEY,
		MU_SOP_APPEND,
	};

	(void)state;
	for (int d = MU_STORE_DIALECT_V1; d <= MU_STORE_DIALECT_V2; d++)
		for (int op = MU_STORE_OP_VALIDATE; op <= MU_STORE_OP_APPEND; op++) {
			mu_store_request_t r = req((mu_store_dialect_t)d, (mu_store_op_t)op);
			unsigned char buf[8];
			size_t n;

			r.value = "value";
			r.value_len = 5;
			r.desired = "new";
			r.desired_len = 3;
			r.delta = -3;
			r.nonce = 77;
			if (d == MU_STORE_DIALECT_V1 && (op == MU_STORE_OP_VALIDATE ||
			    op == MU_STORE_OP_PING || op == MU_STORE_OP_APPEND)) {
				assert_int_equal(mu_store_request_encode(&r, buf, sizeof(buf), &n),
				                 -ENOTSUP);
				continue;
			}
			round_trip(&r, want[op]);
		}
}

static void test_short_buffer_and_refusals(void **state)
{
	mu_store_request_t r = req(MU_STORE_DIALECT_V2, MU_STORE_OP_GET);
	unsigned char buf[64];
	size_t n = 0;

	(void)state;
	memset(buf, 0xee, sizeof(buf));
	assert_int_equal(mu_store_request_encode(&r, buf, 10, &n), MU_ETOOBIG);
	assert_int_equal(n, 11); /* opcode, u64 length, "/k" */
	assert_int_equal(buf[0], 0xee);
	assert_int_equal(mu_store_request_encode(&r, NULL, 0, &n), MU_ETOOBIG);
	assert_int_equal(n, 11);
	assert_int_equal(mu_store_request_encode(&r, buf, 11, &n), 0);
	r.dialect = MU_STORE_AUTO;
	assert_int_equal(mu_store_request_encode(&r, buf, sizeof(buf), &n), MU_EARG);
	r = req(MU_STORE_DIALECT_V2, (mu_store_op_t)99);
	assert_int_equal(mu_store_request_encode(&r, buf, sizeof(buf), &n), MU_EARG);
	r = req(MU_STORE_DIALECT_V2, MU_STORE_OP_SET);
	r.value_len = 4; /* and no bytes */
	assert_int_equal(mu_store_request_encode(&r, buf, sizeof(buf), &n), MU_EARG);
	r.value = "abcd";
	r.value_len = SIZE_MAX;
	assert_int_equal(mu_store_request_encode(&r, buf, sizeof(buf), &n), MU_ETOOBIG);
	r = req(MU_STORE_DIALECT_V2, MU_STORE_OP_SET);
	r.struct_size = 0; /* never given to its init */
	assert_int_equal(mu_store_request_encode(&r, buf, sizeof(buf), &n), MU_EARG);
	assert_int_equal(mu_store_request_encode(NULL, buf, sizeof(buf), &n), MU_EARG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_torch_bytes),
		cmocka_unit_test(test_every_request_decodes),
		cmocka_unit_test(test_short_buffer_and_refusals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
