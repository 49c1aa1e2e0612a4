/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/etcd/proto.c (and core/base64.c): request bodies and
 * the gateway's responses as captured from etcd 3.4.23 (spec etcd-v3.md).
 */
#include <errno.h>

#include "mu_test.h"

#include "core/alloc_int.h"
#include "core/base64_int.h"
#include "etcd/proto_int.h"

static void test_base64(void **state)
{
	mu__buf_t b;

	(void)state;
	mu__buf_init(&b, 1024);
	assert_int_equal(mu__base64_encode(&b, "/nixl/agents/a/", 15), 0);
	assert_string_equal(b.data, "L25peGwvYWdlbnRzL2Ev");
	mu__buf_reset(&b);
	assert_int_equal(mu__base64_encode(&b, "\0", 1), 0);
	assert_string_equal(b.data, "AA==");
	mu__buf_reset(&b);
	assert_int_equal(mu__base64_decode(&b, "dmFsdWU=", 8), 0);
	assert_string_equal(b.data, "value");
	mu__buf_reset(&b);
	assert_int_equal(mu__base64_decode(&b, "dmFsdWU", 7), 0); /* unpadded */
	assert_string_equal(b.data, "value");
	assert_int_equal(mu__base64_decode(&b, "d$==", 4), MU_EPROTO);
	assert_int_equal(mu__base64_decode(&b, "d", 1), MU_EPROTO);
	mu__buf_free(&b);
}

static void test_prefix_end(void **state)
{
	char *e;
	size_t n;

	(void)state;
	assert_int_equal(mu__etcd_prefix_end("/nixl/agents/a/", 15, &e, &n), 0);
	assert_int_equal(n, 15);
	assert_memory_equal(e, "/nixl/agents/a0", 15);
	mu__free(e);
	assert_int_equal(mu__etcd_prefix_end("a\xff\xff", 3, &e, &n), 0);
	assert_int_equal(n, 1);
	assert_memory_equal(e, "b", 1);
	mu__free(e);
	assert_int_equal(mu__etcd_prefix_end("\xff", 1, &e, &n), 0);
	assert_int_equal(n, 1);
	assert_memory_equal(e, "\0", 1); /* every key */
	mu__free(e);
}

static void test_bodies(void **state)
{
	mu__buf_t b;

	(void)state;
	mu__buf_init(&b, 4096);
	assert_int_equal(mu__etcd_body_put(&b, "k", 1, "v", 1, 7587884), 0);
	assert_string_equal(b.data, "{\"key\":\"aw==\",\"value\":\"dg==\",\"lease\":\"7587884\"}");
	mu__buf_reset(&b);
	assert_int_equal(mu__etcd_body_range(&b, "a", 1, "b", 1), 0);
	assert_string_equal(b.data, "{\"key\":\"YQ==\",\"range_end\":\"Yg==\"}");
	mu__buf_reset(&b);
	assert_int_equal(mu__etcd_body_txn_put(&b, "k", 1, -1, "v", 1, 0), 0);
	assert_non_null(strstr(b.data, "\"target\":\"VERSION\",\"version\":\"0\""));
	assert_non_null(strstr(b.data, "\"success\":[{\"request_put\":{\"key\":\"aw==\""));
	mu__buf_reset(&b);
	assert_int_equal(mu__etcd_body_txn_put(&b, "k", 1, 42, "v", 1, 0), 0);
	assert_non_null(strstr(b.data, "\"target\":\"MOD\",\"mod_revision\":\"42\""));
	mu__buf_reset(&b);
	assert_int_equal(mu__etcd_body_watch(&b, "k", 1, NULL, 0, 13, 0), 0);
	assert_string_equal(b.data, "{\"create_request\":{\"key\":\"aw==\",\"start_revision\":\"13\"}}");
	mu__buf_reset(&b);
	assert_int_equal(mu__etcd_body_watch(&b, "k", 1, "l", 1, 0, 1), 0);
	assert_string_equal(b.data, "{\"create_request\":{\"key\":\"aw==\",\"range_end\":\"bA==\",\"filters\":[\"NOPUT\"]}}");
	mu__buf_free(&b);
}

static int classify(int status, const char *body, char *msg, size_t n)
{
	cJSON *root = NULL;
	int rc = mu__etcd_response(status, body, strlen(body), &root, msg, n);

	cJSON_Delete(root);
	return rc;
}

static void test_errors(void **state)
{
	char msg[256];

	(void)state;
	assert_int_equal(classify(200, "{\"header\":{\"revision\":\"5\"}}", msg, sizeof(msg)), 0);
	assert_int_equal(classify(400, "{\"error\":\"etcdserver: request is too large\",\"message\":\"etcdserver: request is too large\",\"code\":3}", msg, sizeof(msg)), MU_ETOOBIG);
	assert_string_equal(msg, "etcdserver: request is too large");
	assert_int_equal(classify(404, "{\"error\":\"etcdserver: requested lease not found\",\"code\":5}", msg, sizeof(msg)), -ENOENT);
	assert_int_equal(classify(500, "{\"error\":\"context deadline exceeded\",\"code\":2}", msg, sizeof(msg)), -ETIMEDOUT);
	assert_int_equal(classify(503, "{\"error\":\"etcdserver: no leader\",\"code\":14}", msg, sizeof(msg)), -ECONNREFUSED);
	assert_int_equal(classify(400, "{\"error\":\"illegal base64 data at input byte 0\",\"code\":3}", msg, sizeof(msg)), MU_EFAIL);
	/* plain text, not etcd's error object: something else answered */
	assert_int_equal(classify(404, "404 page not found\n", msg, sizeof(msg)), MU_EPROTO);
	assert_non_null(strstr(msg, "404"));
	/* garbage where a JSON object was promised */
	assert_int_equal(classify(200, "<html>", msg, sizeof(msg)), MU_EPROTO);
	assert_int_equal(classify(200, "[1]", msg, sizeof(msg)), MU_EPROTO);
	/* a 5xx of any kind: the member cannot serve now, another may */
	assert_int_equal(classify(500, "oops", msg, sizeof(msg)), -ECONNREFUSED);
	assert_int_equal(classify(502, "<html>bad gateway</html>", msg, sizeof(msg)), -ECONNREFUSED);
}

static void test_range_with_omitted_fields(void **state)
{
	/* a missing key: no kvs, no count; an empty value: no "value" */
	const char *missing = "{\"header\":{\"cluster_id\":\"14841639068965178418\",\"member_id\":\"10276657743932975437\",\"revision\":\"7\",\"raft_term\":\"2\"}}";
	const char *one = "{\"header\":{\"revision\":\"9\"},\"kvs\":[{\"key\":\"L24vYS8=\",\"create_revision\":\"8\",\"mod_revision\":\"9\",\"version\":\"2\",\"lease\":\"7587884399712340744\"}],\"count\":\"1\"}";
	mu_etcd_range_t r;
	char msg[64];
	cJSON *root;

	(void)state;
	assert_int_equal(mu__etcd_response(200, missing, strlen(missing), &root, msg, sizeof(msg)), 0);
	assert_int_equal(mu__etcd_parse_range(root, &r), 0);
	assert_int_equal(r.n, 0);
	assert_true(r.revision == 7);
	mu_etcd_range_free(&r);
	cJSON_Delete(root);
	assert_int_equal(mu__etcd_response(200, one, strlen(one), &root, msg, sizeof(msg)), 0);
	assert_int_equal(mu__etcd_parse_range(root, &r), 0);
	assert_int_equal(r.n, 1);
	assert_int_equal(r.kvs[0].klen, 5);
	assert_memory_equal(r.kvs[0].key, "/n/a/", 5);
	assert_int_equal(r.kvs[0].vlen, 0);
	assert_non_null(r.kvs[0].value); /* "" rather than NULL */
	/* a 63-bit lease id survives (never through a double) */
	assert_true(r.kvs[0].lease == INT64_C(7587884399712340744));
	mu_etcd_range_free(&r);
	cJSON_Delete(root);
}

static void test_watch_messages(void **state)
{
	const char *created = "{\"result\":{\"header\":{\"revision\":\"2\"},\"created\":true}}";
	const char *events = "{\"result\":{\"header\":{\"revision\":\"4\"},\"events\":[{\"kv\":{\"key\":\"aw==\",\"value\":\"dg==\",\"mod_revision\":\"3\"}},{\"type\":\"DELETE\",\"kv\":{\"key\":\"aw==\",\"mod_revision\":\"4\"}}]}}";
	const char *compacted = "{\"result\":{\"header\":{\"revision\":\"9\"},\"canceled\":true,\"compact_revision\":\"5\"}}";
	mu__etcd_watch_msg_t m;

	(void)state;
	assert_int_equal(mu__etcd_parse_watch(created, strlen(created), &m), 0);
	assert_true(m.created);
	assert_true(m.revision == 2);
	assert_int_equal(m.nevents, 0);
	mu__etcd_watch_msg_free(&m);
	assert_int_equal(mu__etcd_parse_watch(events, strlen(events), &m), 0);
	assert_int_equal(m.nevents, 2);
	assert_int_equal(m.types[0], MU_ETCD_EVENT_PUT); /* "type" left out */
	assert_int_equal(m.types[1], MU_ETCD_EVENT_DELETE);
	assert_memory_equal(m.kvs[0].value, "v", 1);
	assert_true(m.kvs[1].mod_revision == 4);
	mu__etcd_watch_msg_free(&m);
	assert_int_equal(mu__etcd_parse_watch(compacted, strlen(compacted), &m), 0);
	assert_true(m.canceled);
	assert_true(m.compact_revision == 5);
	mu__etcd_watch_msg_free(&m);
	assert_int_equal(mu__etcd_parse_watch("{\"error\":{\"grpc_code\":14}}", 26, &m), MU_EPROTO);
	assert_int_equal(mu__etcd_parse_watch("{\"result\":{\"events\":[{\"kv\":{\"key\":\"!!\"}}]}}", 43, &m), MU_EPROTO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_base64),
		cmocka_unit_test(test_prefix_end),
		cmocka_unit_test(test_bodies),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_range_with_omitted_fields),
		cmocka_unit_test(test_watch_messages),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
