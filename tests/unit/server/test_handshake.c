/* SPDX-License-Identifier: MIT */
/* Unit tests for src/server/handshake.c: the TVM session handshake bytes. */
#include "mu_test.h"

#include "core/endian_int.h"
#include "server/handshake_int.h"
#include "tracker/proto_int.h"

static void test_hello_roundtrip(void **state)
{
	mu__buf_t b;
	const char *key, *mk;
	size_t keylen, mklen;
	double t = -1;

	(void)state;
	mu__buf_init(&b, 1024);
	assert_int_equal(mu__rpc_hello_encode(&b, "rasp:0.5", 2.5), 0);
	/* 71 f2 0f 00, length, then the key string */
	assert_memory_equal(b.data, "\x71\xf2\x0f\x00", 4);
	assert_int_equal(mu_le32_get(b.data + 4), strlen("client:rasp:0.5 -timeout=2.5"));
	assert_memory_equal(b.data + 8, "client:rasp:0.5 -timeout=2.5", b.len - 8);
	/* partial input: need more, never a false start */
	for (size_t n = 0; n < b.len; n++)
		assert_int_equal(mu__rpc_hello_peek(b.data, n, MU_RPC_MAX_KEY, &key, &keylen), 0);
	assert_int_equal(mu__rpc_hello_peek(b.data, b.len, MU_RPC_MAX_KEY, &key, &keylen), 1);
	assert_int_equal(mu__rpc_parse_client_key(key, keylen, &mk, &mklen, &t), 0);
	assert_int_equal(mklen, 8);
	assert_memory_equal(mk, "rasp:0.5", 8);
	assert_true(t == 2.5);
	mu__buf_reset(&b);
	assert_int_equal(mu__rpc_hello_encode(&b, "k", 0), 0);
	assert_memory_equal(b.data + 8, "client:k", 8); /* no option when 0 */
	mu__buf_free(&b);
}

static void test_hello_bad_bytes(void **state)
{
	unsigned char b[12] = {0x71, 0xf2, 0x02, 0x00}; /* the tracker's magic */
	const char *key;
	size_t keylen;

	(void)state;
	assert_int_equal(mu__rpc_hello_peek(b, 4, 100, &key, &keylen), MU_EBADMAGIC);
	mu_le32_put(b, MU_RPC_MAGIC);
	mu_le32_put(b + 4, 0);
	assert_int_equal(mu__rpc_hello_peek(b, 8, 100, &key, &keylen), MU_EPROTO);
	mu_le32_put(b + 4, (uint32_t)-5);
	assert_int_equal(mu__rpc_hello_peek(b, 8, 100, &key, &keylen), MU_EPROTO);
	mu_le32_put(b + 4, 101);
	assert_int_equal(mu__rpc_hello_peek(b, 8, 100, &key, &keylen), MU_ETOOBIG);
	mu_le32_put(b + 4, 0x7fffffff);
	assert_int_equal(mu__rpc_hello_peek(b, 8, MU_RPC_MAX_KEY, &key, &keylen), MU_ETOOBIG);
}

static int parse(const char *s, double *t, char *mk, size_t mksize)
{
	const char *p;
	size_t n;
	int rc = mu__rpc_parse_client_key(s, strlen(s), &p, &n, t);

	if (rc == 0) {
		assert_true(n < mksize);
		memcpy(mk, p, n);
		mk[n] = '\0';
	}
	return rc;
}

static void test_client_key_options(void **state)
{
	char mk[64];
	double t;

	(void)state;
	assert_int_equal(parse("client:rasp:0.34918486802148674", &t, mk, sizeof(mk)), 0);
	assert_string_equal(mk, "rasp:0.34918486802148674");
	assert_true(t == 0);
	/* integer and fractional -timeout, extra options ignored (TVM) */
	assert_int_equal(parse("client:k:1 -timeout=10", &t, mk, sizeof(mk)), 0);
	assert_true(t == 10);
	assert_int_equal(parse("client:k:1  -foo=bar -timeout=0.5", &t, mk, sizeof(mk)), 0);
	assert_string_equal(mk, "k:1");
	assert_true(t == 0.5);
	/* a key with ':' (adb serial) is still just the first token */
	assert_int_equal(parse("client:10.0.0.2:5555:0.1", &t, mk, sizeof(mk)), 0);
	assert_string_equal(mk, "10.0.0.2:5555:0.1");
	assert_int_equal(parse("client:", &t, mk, sizeof(mk)), 0);
	assert_string_equal(mk, "");
	assert_int_equal(parse("server:k", &t, mk, sizeof(mk)), MU_EPROTO);
	assert_int_equal(parse("clien", &t, mk, sizeof(mk)), MU_EPROTO);
	assert_int_equal(parse("client:k -timeout=x", &t, mk, sizeof(mk)), MU_EPROTO);
	assert_int_equal(parse("client:k -timeout=-1", &t, mk, sizeof(mk)), MU_EPROTO);
	assert_int_equal(parse("client:k -timeout=nan", &t, mk, sizeof(mk)), MU_EPROTO);
}

static void test_replies(void **state)
{
	mu__buf_t b;
	int ok = -1;
	size_t used = 0;

	(void)state;
	mu__buf_init(&b, 1024);
	assert_int_equal(mu__rpc_reply_encode(&b, 1, "rasp"), 0);
	assert_memory_equal(b.data, "\x71\xf2\x0f\x00\x0b\x00\x00\x00server:rasp", 19);
	for (size_t n = 0; n < b.len; n++)
		assert_int_equal(mu__rpc_reply_peek(b.data, n, &ok, &used), 0);
	assert_int_equal(mu__rpc_reply_peek(b.data, b.len, &ok, &used), 1);
	assert_int_equal(ok, 1);
	assert_int_equal(used, 19);
	mu__buf_reset(&b);
	assert_int_equal(mu__rpc_reply_encode(&b, 0, "rasp"), 0);
	assert_int_equal(b.len, 4);
	assert_memory_equal(b.data, "\x73\xf2\x0f\x00", 4);
	assert_int_equal(mu__rpc_reply_peek(b.data, 4, &ok, &used), 1);
	assert_int_equal(ok, 0);
	/* the proxy's DUPLICATE is a refusal too; anything else is garbage */
	assert_int_equal(mu__rpc_reply_peek("\x72\xf2\x0f\x00", 4, &ok, &used), 1);
	assert_int_equal(ok, 0);
	assert_int_equal(mu__rpc_reply_peek("\x71\xf2\x02\x00", 4, &ok, &used), MU_EPROTO);
	assert_int_equal(mu__rpc_reply_peek("\x71\xf2\x0f\x00\xff\xff\xff\x7f", 8, &ok, &used), MU_ETOOBIG);
	mu__buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hello_roundtrip),
		cmocka_unit_test(test_hello_bad_bytes),
		cmocka_unit_test(test_client_key_options),
		cmocka_unit_test(test_replies),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
