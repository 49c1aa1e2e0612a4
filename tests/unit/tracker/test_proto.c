/* SPDX-License-Identifier: MIT */
/* Unit tests for src/tracker/proto.c: frames and message validation. */
#include "mu_test.h"

#include "core/endian_int.h"
#include "core/json_int.h"
#include "tracker/proto_int.h"

static void frame_hdr(unsigned char *p, int32_t n)
{
	mu_le32_put(p, (uint32_t)n);
}

static void test_frame_peek(void **state)
{
	unsigned char b[16] = {0};
	size_t n = 0;

	(void)state;
	assert_int_equal(mu__tracker_frame_peek(b, 3, 100, &n), 0); /* header incomplete */
	frame_hdr(b, 3);
	memcpy(b + 4, "[1]", 3);
	assert_int_equal(mu__tracker_frame_peek(b, 6, 100, &n), 0); /* body incomplete */
	assert_int_equal(mu__tracker_frame_peek(b, 7, 100, &n), 1);
	assert_int_equal(n, 3);
	/* extra bytes of the next frame do not matter */
	assert_int_equal(mu__tracker_frame_peek(b, 12, 100, &n), 1);
	frame_hdr(b, 0);
	assert_int_equal(mu__tracker_frame_peek(b, 4, 100, &n), MU_EPROTO);
	frame_hdr(b, -1);
	assert_int_equal(mu__tracker_frame_peek(b, 4, 100, &n), MU_EPROTO);
	frame_hdr(b, INT32_MIN);
	assert_int_equal(mu__tracker_frame_peek(b, 4, 100, &n), MU_EPROTO);
	/* over the limit is refused as soon as the length is known */
	frame_hdr(b, 101);
	assert_int_equal(mu__tracker_frame_peek(b, 4, 100, &n), MU_ETOOBIG);
	frame_hdr(b, INT32_MAX);
	assert_int_equal(mu__tracker_frame_peek(b, 4, MU_TRACKER_MAX_FRAME, &n), MU_ETOOBIG);
	frame_hdr(b, MU_TRACKER_MAX_FRAME);
	assert_int_equal(mu__tracker_frame_peek(b, 4, MU_TRACKER_MAX_FRAME, &n), 0);
}

static void test_frame_encoding(void **state)
{
	mu__buf_t b;
	cJSON *v;

	(void)state;
	mu__buf_init(&b, 1024);
	assert_int_equal(mu__tracker_frame_int(&b, 0), 0);
	assert_int_equal(mu__tracker_frame_int(&b, -1), 0);
	assert_memory_equal(b.data, "\x01\x00\x00\x00" "0" "\x02\x00\x00\x00" "-1", 11);
	mu__buf_reset(&b);
	assert_int_equal(mu__json_parse("[0,[\"1.2.3.4\",9090,\"k:0.5\"]]", 28, &v), 0);
	assert_int_equal(mu__tracker_frame_json(&b, v), 0);
	assert_int_equal(mu_le32_get(b.data), b.len - 4);
	assert_string_equal(b.data + 4, "[0, [\"1.2.3.4\", 9090, \"k:0.5\"]]");
	cJSON_Delete(v);
	/* a frame that does not fit leaves nothing behind */
	mu__buf_free(&b);
	mu__buf_init(&b, 6);
	assert_int_equal(mu__tracker_frame_int(&b, -12345), MU_ETOOBIG);
	assert_int_equal(b.len, 0);
	mu__buf_free(&b);
}

static int parse(const char *json, mu__tracker_msg_t *m)
{
	char why[160];

	return mu__tracker_msg_parse(json, strlen(json), m, why, sizeof(why));
}

static void test_parse_valid_messages(void **state)
{
	mu__tracker_msg_t m;

	(void)state;
	assert_int_equal(parse("[1]", &m), 0);
	assert_int_equal(m.code, MU_TC_PING);
	mu__tracker_msg_free(&m);

	/* Python server PUT, 4 elements with null custom address */
	assert_int_equal(parse("[3, \"rasp\", [9090, \"rasp:0.84\"], null]", &m), 0);
	assert_int_equal(m.code, MU_TC_PUT);
	assert_string_equal(m.key, "rasp");
	assert_string_equal(m.matchkey, "rasp:0.84");
	assert_int_equal(m.port->valueint, 9090);
	assert_null(m.custom_addr);
	mu__tracker_msg_free(&m);

	/* 3-element PUT; key with ':' (adb serial); custom address */
	assert_int_equal(parse("[3,\"10.0.0.2:5555\",[9091,\"10.0.0.2:5555:0.1\"]]", &m), 0);
	assert_string_equal(m.key, "10.0.0.2:5555");
	mu__tracker_msg_free(&m);
	assert_int_equal(parse("[3, \"k\", [\"9090\", \"k:1\"], \"1.2.3.4\"]", &m), 0);
	assert_string_equal(m.custom_addr, "1.2.3.4");
	assert_true(cJSON_IsString(m.port));
	mu__tracker_msg_free(&m);

	/* REQUEST with a float priority, user ignored */
	assert_int_equal(parse("[4, \"rasp\", {\"any\": 1}, 2.5]", &m), 0);
	assert_int_equal(m.code, MU_TC_REQUEST);
	assert_true(m.priority == 2.5);
	mu__tracker_msg_free(&m);

	/* C++ server UPDATE_INFO: string port; Java: space before colon */
	assert_int_equal(parse("[5, {\"key\": \"server:rasp\", \"addr\": [null, \"9090\"]}]", &m), 0);
	assert_non_null(m.info);
	mu__tracker_msg_free(&m);
	assert_int_equal(parse("[5,{\"key\" : \"server:a\",\"addr\" : [\"1.2.3.4\",9090]}]", &m), 0);
	mu__tracker_msg_free(&m);

	/* STOP with any value; matching is the server's business */
	assert_int_equal(parse("[2, 17]", &m), 0);
	assert_true(cJSON_IsNumber(m.stop_key));
	mu__tracker_msg_free(&m);
	assert_int_equal(parse("[6]", &m), 0);
	mu__tracker_msg_free(&m);
	assert_int_equal(parse("[7]", &m), 0);
	mu__tracker_msg_free(&m);
}

static void test_parse_rejects_bad_shapes(void **state)
{
	static const char *bad[] = {
		"{\"code\": 1}", "[]", "\"x\"", "1", "[\"1\"]", "[1.5]", "[99]",
		"[-1]", "[0]", "[2]",
		"[3]", "[3, \"k\"]", "[3, 5, [9090, \"k:1\"]]",
		"[3, \"k\", [9090]]", "[3, \"k\", [9090, \"k:1\", 3]]",
		"[3, \"k\", [9090, 7]]", "[3, \"k\", [70000, \"k:1\"]]",
		"[3, \"k\", [{}, \"k:1\"]]", "[3, \"k\", [9090, \"k:1\"], 5]",
		"[4, \"k\", \"\"]", "[4, \"k\", \"\", \"1\"]", "[4, 1, \"\", 1]",
		"[5]", "[5, []]", "[5, {\"key\": \"server:x\"}]",
		"[5, {\"key\": 1, \"addr\": [null, 1]}]",
		"[5, {\"key\": \"s\", \"addr\": [null, 1, 2]}]",
		"[5, {\"key\": \"s\", \"addr\": [5, 1]}]",
		"[5, {\"key\": \"s\", \"addr\": [null, null]}]",
	};
	mu__tracker_msg_t m;
	char why[160];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = mu__tracker_msg_parse(bad[i], strlen(bad[i]), &m, why, sizeof(why));

		if (rc != MU_EPROTO)
			fail_msg("accepted or misjudged %s (rc %d)", bad[i], rc);
		assert_true(why[0] != '\0'); /* the log line says why */
		assert_null(m.root);
	}
	assert_int_equal(mu__tracker_msg_parse("[1", 2, &m, why, sizeof(why)), MU_EJSON);
	assert_string_equal(why, "invalid JSON");
}

static void test_parse_limits_strings(void **state)
{
	char *json = malloc(MU_TRACKER_MAX_STR + 64);
	mu__tracker_msg_t m;

	(void)state;
	memcpy(json, "[4, \"", 5);
	memset(json + 5, 'k', MU_TRACKER_MAX_STR + 1);
	memcpy(json + 5 + MU_TRACKER_MAX_STR + 1, "\", \"\", 1]", 10);
	assert_int_equal(parse(json, &m), MU_EPROTO);
	free(json);
}

static void test_parse_out_of_memory(void **state)
{
	const char *msg = "[5, {\"key\": \"server:rasp\", \"addr\": [null, \"9090\"]}]";
	mu__tracker_msg_t m;
	long n;
	int rc;

	(void)state;
	/* Every allocation in turn fails: never a crash or a leak. */
	for (n = 0; n < 100; n++) {
		mu_test_fail_after(n);
		rc = parse(msg, &m);
		mu_test_alloc_reset();
		if (rc == 0) {
			mu__tracker_msg_free(&m);
			break;
		}
		assert_true(rc == MU_EJSON || rc == MU_ENOMEM || rc == MU_EPROTO);
	}
	assert_true(n < 100);
}

static void test_grant_parse(void **state)
{
	char addr[64], mk[64];
	int port = 0;
	const char *ok = "[0, [\"10.0.0.7\", 9090, \"rasp:0.84\"]]";
	const char *sport = "[0, [\"10.0.0.7\", \"9091\", \"rasp:0.84\"]]";

	(void)state;
	assert_int_equal(mu__tracker_grant_parse(ok, strlen(ok), addr, sizeof(addr), &port, mk, sizeof(mk)), 0);
	assert_string_equal(addr, "10.0.0.7");
	assert_int_equal(port, 9090);
	assert_string_equal(mk, "rasp:0.84");
	assert_int_equal(mu__tracker_grant_parse(sport, strlen(sport), addr, sizeof(addr), &port, mk, sizeof(mk)), 0);
	assert_int_equal(port, 9091);
	assert_int_equal(mu__tracker_grant_parse("-1", 2, addr, sizeof(addr), &port, mk, sizeof(mk)), MU_EPROTO);
	assert_int_equal(mu__tracker_grant_parse("[0, [\"a\", 1]]", 13, addr, sizeof(addr), &port, mk, sizeof(mk)), MU_EPROTO);
	assert_int_equal(mu__tracker_grant_parse(ok, strlen(ok), addr, 4, &port, mk, sizeof(mk)), MU_ETOOBIG);
	/* a refusal (a muster tracker past a limit) is an answer, not garbage */
	assert_int_equal(mu__tracker_grant_parse("[-1, \"why\"]", 11, addr, sizeof(addr), &port, mk,
	                                         sizeof(mk)), MU_EFAIL);
	assert_int_equal(mu__tracker_grant_parse("[-1]", 4, addr, sizeof(addr), &port, mk, sizeof(mk)),
	                 MU_EFAIL);
	/* a port past 65535 or fractional is refused before any conversion */
	assert_int_equal(mu__tracker_grant_parse("[0, [\"a\", 1e300, \"k\"]]", 22, addr, sizeof(addr),
	                                         &port, mk, sizeof(mk)), MU_EPROTO);
	assert_int_equal(mu__tracker_grant_parse("[0, [\"a\", 90.5, \"k\"]]", 21, addr, sizeof(addr),
	                                         &port, mk, sizeof(mk)), MU_EPROTO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_frame_peek),
		cmocka_unit_test(test_frame_encoding),
		cmocka_unit_test(test_parse_valid_messages),
		cmocka_unit_test(test_parse_rejects_bad_shapes),
		cmocka_unit_test(test_parse_limits_strings),
		cmocka_unit_test(test_parse_out_of_memory),
		cmocka_unit_test(test_grant_parse),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
