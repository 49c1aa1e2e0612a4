/* SPDX-License-Identifier: MIT */
/* Unit tests for src/store/proto.c: both dialects' request layouts. */
#include "mu_test.h"

#include "core/endian_int.h"
#include "store/proto_int.h"

static mu__store_limits_t lim;

static int setup(void **state)
{
	(void)state;
	mu__store_limits_init(&lim);
	return 0;
}

static void test_detect(void **state)
{
	(void)state;
	assert_int_equal(mu__store_detect("", 0), 0);
	assert_int_equal(mu__store_detect("\x00", 1), 0);
	assert_int_equal(mu__store_detect("\x00\xce\xf7", 3), 0);
	assert_int_equal(mu__store_detect("\x00\xce\xf7\x85\x3c", 5), 2);
	assert_int_equal(mu__store_detect("\x00\xce\xf7\x85\x3d", 5), 1);
	assert_int_equal(mu__store_detect("\x05", 1), 1);     /* v1 WAIT */
	assert_int_equal(mu__store_detect("\x00\x02", 2), 1); /* v1 SET, short key */
}

/* The captured 1.13 bytes of spec §5: SET "/k" = "v\0w". */
static const char v1_set[] =
	"\x00" "\x02\x00\x00\x00\x00\x00\x00\x00" "/k"
	"\x03\x00\x00\x00\x00\x00\x00\x00" "v\0w";

static void test_v1_set_split_anywhere(void **state)
{
	mu__store_req_t r;
	size_t used, need, n = sizeof(v1_set) - 1;

	(void)state;
	for (size_t cut = 0; cut < n; cut++) {
		assert_int_equal(mu__store_req_decode(MU_STORE_V1, v1_set, cut, &lim, &r, &used, &need), 0);
		assert_true(need > cut && need <= n); /* never asks for more than the request */
	}
	assert_int_equal(mu__store_req_decode(MU_STORE_V1, v1_set, n, &lim, &r, &used, &need), 1);
	assert_int_equal(used, n);
	assert_int_equal(r.op, MU_SOP_SET);
	assert_int_equal(r.key.n, 2);
	assert_memory_equal(r.key.p, "/k", 2);
	assert_int_equal(r.value.n, 3);
	assert_memory_equal(r.value.p, "v\0w", 3);
	mu__store_req_free(&r);
}

static void test_opcode_tables(void **state)
{
	(void)state;
	/* v2 = v1 shifted by one, with VALIDATE at 0; WATCH_KEY only in v1 */
	assert_int_equal(mu__store_opcode(MU_STORE_V1, MU_SOP_SET), 0);
	assert_int_equal(mu__store_opcode(MU_STORE_V2, MU_SOP_SET), 1);
	assert_int_equal(mu__store_opcode(MU_STORE_V1, MU_SOP_WAIT), 5);
	assert_int_equal(mu__store_opcode(MU_STORE_V2, MU_SOP_WAIT), 6);
	assert_int_equal(mu__store_opcode(MU_STORE_V1, MU_SOP_DELETE_KEY), 8);
	assert_int_equal(mu__store_opcode(MU_STORE_V2, MU_SOP_DELETE_KEY), 8);
	assert_int_equal(mu__store_opcode(MU_STORE_V1, MU_SOP_WATCH_KEY), 7);
	assert_int_equal(mu__store_opcode(MU_STORE_V2, MU_SOP_WATCH_KEY), -1);
	assert_int_equal(mu__store_opcode(MU_STORE_V2, MU_SOP_CANCEL_WAIT), 12);
	assert_int_equal(mu__store_opcode(MU_STORE_V2, MU_SOP_PING), 13);
	assert_int_equal(mu__store_opcode(MU_STORE_V2, MU_SOP_LIST), 17);
	assert_int_equal(mu__store_opcode(MU_STORE_V1, MU_SOP_APPEND), -1);
}

static void test_unknown_opcode(void **state)
{
	mu__store_req_t r;
	size_t used, need;

	(void)state;
	assert_int_equal(mu__store_req_decode(MU_STORE_V1, "\x09", 1, &lim, &r, &used, &need), MU_EPROTO);
	assert_int_equal(mu__store_req_decode(MU_STORE_V2, "\x12", 1, &lim, &r, &used, &need), MU_EPROTO);
	assert_int_equal(mu__store_req_decode(MU_STORE_V2, "\xff", 1, &lim, &r, &used, &need), MU_EPROTO);
}

static void test_limits_before_bytes(void **state)
{
	unsigned char b[32] = {0x02}; /* v1 GET */
	mu__store_req_t r;
	size_t used, need;

	(void)state;
	/* a key length of 2^63 is refused as soon as its 8 bytes are in */
	mu_le64_put(b + 1, (uint64_t)1 << 63);
	assert_int_equal(mu__store_req_decode(MU_STORE_V1, b, 9, &lim, &r, &used, &need), MU_ETOOBIG);
	mu_le64_put(b + 1, lim.max_key + 1);
	assert_int_equal(mu__store_req_decode(MU_STORE_V1, b, 9, &lim, &r, &used, &need), MU_ETOOBIG);
	mu_le64_put(b + 1, lim.max_key);
	assert_int_equal(mu__store_req_decode(MU_STORE_V1, b, 9, &lim, &r, &used, &need), 0);
	assert_int_equal(need, 9 + lim.max_key);
	/* a key count over the limit (v1 WAIT) */
	b[0] = 0x05;
	mu_le64_put(b + 1, lim.max_keys + 1);
	assert_int_equal(mu__store_req_decode(MU_STORE_V1, b, 9, &lim, &r, &used, &need), MU_ETOOBIG);
}

static size_t keylist(unsigned char *b, int op, int n)
{
	size_t off = 0;

	b[off++] = (unsigned char)op;
	mu_le64_put(b + off, (uint64_t)n);
	off += 8;
	for (int i = 0; i < n; i++) {
		mu_le64_put(b + off, 2);
		off += 8;
		b[off++] = '/';
		b[off++] = (unsigned char)('a' + i);
	}
	return off;
}

static void test_keylists_and_multi_set(void **state)
{
	unsigned char b[256];
	mu__store_req_t r;
	size_t used, need, n;

	(void)state;
	n = keylist(b, 6, 3); /* v2 WAIT ["/a", "/b", "/c"] */
	assert_int_equal(mu__store_req_decode(MU_STORE_V2, b, n - 1, &lim, &r, &used, &need), 0);
	assert_null(r.keys); /* nothing allocated before the request is whole */
	assert_int_equal(mu__store_req_decode(MU_STORE_V2, b, n, &lim, &r, &used, &need), 1);
	assert_int_equal(r.op, MU_SOP_WAIT);
	assert_int_equal(r.nkeys, 3);
	assert_memory_equal(r.keys[2].p, "/c", 2);
	mu__store_req_free(&r);
	/* an empty list is legal (CHECK [] is READY) */
	n = keylist(b, 5, 0);
	assert_int_equal(mu__store_req_decode(MU_STORE_V2, b, n, &lim, &r, &used, &need), 1);
	assert_int_equal(r.nkeys, 0);
	mu__store_req_free(&r);
	/* v2 MULTI_SET: count then (key, value) pairs */
	n = 0;
	b[n++] = 11;
	mu_le64_put(b + n, 2);
	n += 8;
	for (int i = 0; i < 2; i++) {
		mu_le64_put(b + n, 2);
		n += 8;
		b[n++] = '/';
		b[n++] = (unsigned char)('x' + i);
		mu_le64_put(b + n, 1);
		n += 8;
		b[n++] = (unsigned char)('0' + i);
	}
	assert_int_equal(mu__store_req_decode(MU_STORE_V2, b, n, &lim, &r, &used, &need), 1);
	assert_int_equal(r.op, MU_SOP_MULTI_SET);
	assert_int_equal(r.nkeys, 2);
	assert_memory_equal(r.values[1].p, "1", 1);
	mu__store_req_free(&r);
}

static void test_small_requests(void **state)
{
	mu__store_req_t r;
	size_t used, need;
	static const char validate_ping[] = "\x00\xce\xf7\x85\x3c\x0d\x39\x30\x00\x00";

	(void)state;
	assert_int_equal(mu__store_req_decode(MU_STORE_V2, validate_ping, 10, &lim, &r, &used, &need), 1);
	assert_int_equal(r.op, MU_SOP_VALIDATE);
	assert_int_equal(r.u32, MU_STORE_V2_MAGIC);
	assert_int_equal(used, 5);
	assert_int_equal(mu__store_req_decode(MU_STORE_V2, validate_ping + 5, 5, &lim, &r, &used, &need), 1);
	assert_int_equal(r.op, MU_SOP_PING);
	assert_int_equal(r.u32, 12345);
	assert_int_equal(mu__store_req_decode(MU_STORE_V2, "\x07", 1, &lim, &r, &used, &need), 1);
	assert_int_equal(r.op, MU_SOP_GETNUMKEYS);
	assert_int_equal(mu__store_req_decode(MU_STORE_V2, "\x0c", 1, &lim, &r, &used, &need), 1);
	assert_int_equal(r.op, MU_SOP_CANCEL_WAIT);
}

static void test_stoll(void **state)
{
	int64_t v;

	(void)state;
	assert_int_equal(mu__store_stoll("42", 2, &v), 0);
	assert_true(v == 42);
	assert_int_equal(mu__store_stoll(" \t-5", 4, &v), 0);
	assert_true(v == -5);
	assert_int_equal(mu__store_stoll("12abc", 5, &v), 0);
	assert_true(v == 12);
	assert_int_equal(mu__store_stoll("0x10", 4, &v), 0);
	assert_true(v == 0);
	assert_int_equal(mu__store_stoll("+7", 2, &v), 0);
	assert_true(v == 7);
	assert_int_equal(mu__store_stoll("9\0" "9", 3, &v), 0); /* ends at NUL */
	assert_true(v == 9);
	assert_int_equal(mu__store_stoll("9223372036854775807", 19, &v), 0);
	assert_true(v == INT64_MAX);
	assert_int_equal(mu__store_stoll("-9223372036854775808", 20, &v), 0);
	assert_true(v == INT64_MIN);
	assert_int_equal(mu__store_stoll("9223372036854775808", 19, &v), MU_ETOOBIG);
	assert_int_equal(mu__store_stoll("", 0, &v), MU_EPROTO);
	assert_int_equal(mu__store_stoll("abc", 3, &v), MU_EPROTO);
	assert_int_equal(mu__store_stoll("\0", 1, &v), MU_EPROTO);
	assert_int_equal(mu__store_stoll("-", 1, &v), MU_EPROTO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_detect),
		cmocka_unit_test(test_v1_set_split_anywhere),
		cmocka_unit_test(test_opcode_tables),
		cmocka_unit_test(test_unknown_opcode),
		cmocka_unit_test(test_limits_before_bytes),
		cmocka_unit_test(test_keylists_and_multi_set),
		cmocka_unit_test(test_small_requests),
		cmocka_unit_test(test_stoll),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
