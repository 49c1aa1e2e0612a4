/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/pipeline/device.c: what a device session answers to
 * an ASSIGN whose numbers do not fit, through the session's own message
 * loop over a socket pair (as fuzz/fuzz_pipe_msg.c drives it). Run under
 * the ASan+UBSan build too: before the numbers were range-checked, the
 * corpus input's "last" of 2^40 was cast to int and cut() then computed
 * INT_MIN - 1, which UBSan aborts on.
 */
#include "mu_test.h"

#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/endian_int.h"
#include "core/stream_int.h"
#include "pipeline/device_int.h"

static mu_device_t *device;

typedef struct {
	int type;
	int status;
	char text[2048];
} reply_t;

/* Feed `data` to a device session's loop; the first reply goes to r. */
static void run(const void *data, size_t n, reply_t *r)
{
	unsigned char h[MU_MSG_HEADER];
	mu__serve_ctx_t ctx;
	mu__device_sess_t ss;
	mu__chan_t c;
	mu_stream_t *st;
	size_t len, got = 0;
	ssize_t k;
	int sv[2];

	memset(r, 0, sizeof(*r));
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(write(sv[1], data, n), (ssize_t)n);
	shutdown(sv[1], SHUT_WR);
	mu__device_ctx(&ctx, &ss, device);
	ctx.idle_ms = 0;
	assert_int_equal(mu__stream_tcp_new(sv[0], &st), 0);
	mu__chan_init(&c, st, NULL, 1000, 1u << 20);
	mu__serve_chan(&c, &ctx);
	mu__device_ctx_done(&ctx);
	mu__stream_close(st);
	while (got < sizeof(h) && (k = read(sv[1], h + got, sizeof(h) - got)) > 0)
		got += (size_t)k;
	assert_int_equal(got, sizeof(h));
	assert_memory_equal(h, MU_MSG_MAGIC, 4);
	r->type = mu_le16_get(h + 6);
	r->status = (int32_t)mu_le32_get(h + 8);
	len = (size_t)mu_le64_get(h + 32);
	assert_true(len < sizeof(r->text));
	for (got = 0; got < len && (k = read(sv[1], r->text + got, len - got)) > 0;)
		got += (size_t)k;
	assert_int_equal(got, len);
	close(sv[1]);
}

/* An ASSIGN message with `json` as its body. */
static size_t assign_msg(const char *json, unsigned char *out, size_t cap)
{
	mu__msg_t m = {MU_MSG_ASSIGN, 0, 1, 0, 0, 0};
	size_t n = strlen(json);

	assert_true(MU_MSG_HEADER + n <= cap);
	m.len = n;
	mu__msg_encode(&m, out);
	memcpy(out + MU_MSG_HEADER, json, n);
	return MU_MSG_HEADER + n;
}

static void test_corpus_assign_last_2p40(void **state)
{
	static unsigned char buf[1 << 16];
	FILE *f = fopen(MU_SOURCE_DIR "/fuzz/corpus/pipe_msg/assign_last_2p40", "rb");
	reply_t r;
	size_t n;

	(void)state;
	assert_non_null(f);
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	assert_true(n > MU_MSG_HEADER);
	/* the corpus input really carries last = 2^40 and a graph that parses,
	 * so the old code reached cut() with it */
	assert_non_null(strstr((char *)buf + MU_MSG_HEADER, "\"last\":1099511627776"));
	run(buf, n, &r);
	assert_int_equal(r.type, MU_MSG_ERROR);
	assert_int_equal(r.status, MU_EPROTO);
	assert_non_null(strstr(r.text, "out of range"));
}

static void test_assign_numbers_out_of_range(void **state)
{
	static const char *const bad[] = {
		"{\"stage\":0,\"of\":1099511627776,\"first\":0,\"last\":1,\"param_bytes\":0,"
		"\"digest\":\"1\",\"weights\":\"local\"}",
		"{\"stage\":-1,\"of\":1,\"first\":0,\"last\":1,\"param_bytes\":0,"
		"\"digest\":\"1\",\"weights\":\"local\"}",
		"{\"stage\":1,\"of\":1,\"first\":0,\"last\":1,\"param_bytes\":0,"
		"\"digest\":\"1\",\"weights\":\"local\"}",
		"{\"stage\":0,\"of\":1,\"first\":-1099511627776,\"last\":1,\"param_bytes\":0,"
		"\"digest\":\"1\",\"weights\":\"local\"}",
		"{\"stage\":0,\"of\":1,\"first\":0,\"last\":-2147483648,\"param_bytes\":0,"
		"\"digest\":\"1\",\"weights\":\"local\"}",
		"{\"stage\":0,\"of\":1,\"first\":0,\"last\":2.5,\"param_bytes\":0,"
		"\"digest\":\"1\",\"weights\":\"local\"}",
		"{\"stage\":0,\"of\":1,\"first\":1e300,\"last\":1,\"param_bytes\":0,"
		"\"digest\":\"1\",\"weights\":\"local\"}",
		"{\"stage\":0,\"of\":1,\"first\":0,\"last\":1,\"param_bytes\":1e400,"
		"\"digest\":\"1\",\"weights\":\"local\"}",
		"{\"stage\":0,\"of\":1,\"first\":0,\"last\":\"1\",\"param_bytes\":0,"
		"\"digest\":\"1\",\"weights\":\"local\"}",
		"{\"stage\":0,\"of\":1,\"first\":0,\"param_bytes\":0,"
		"\"digest\":\"1\",\"weights\":\"local\"}",
	};
	unsigned char buf[1024];
	reply_t r;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		run(buf, assign_msg(bad[i], buf, sizeof(buf)), &r);
		assert_int_equal(r.type, MU_MSG_ERROR);
		assert_int_equal(r.status, MU_EPROTO);
		assert_non_null(strstr(r.text, "out of range"));
	}
}

static void test_assign_in_range_reaches_the_model(void **state)
{
	unsigned char buf[1024];
	reply_t r;

	(void)state;
	/* numbers in range pass the check; this device holds no model */
	run(buf, assign_msg("{\"stage\":0,\"of\":2,\"first\":0,\"last\":2147483647,"
	                    "\"param_bytes\":0,\"digest\":\"1\",\"weights\":\"local\"}",
	                    buf, sizeof(buf)), &r);
	assert_int_equal(r.type, MU_MSG_ERROR);
	assert_int_equal(r.status, MU_EARG);
	assert_non_null(strstr(r.text, "holds no model"));
}

/* ASSIGN picks the stage kind it names; one that is none is refused with
 * the kinds there are (from the table). */
static void test_assign_kind(void **state)
{
	unsigned char buf[1024];
	reply_t r;

	(void)state;
	run(buf, assign_msg("{\"kind\":\"tensor-parallel\",\"stage\":0,\"of\":1}", buf,
	                    sizeof(buf)), &r);
	assert_int_equal(r.type, MU_MSG_ERROR);
	assert_int_equal(r.status, MU_EPROTO);
	assert_non_null(strstr(r.text, "one of the stage kinds this device serves: graph, llm"));
	run(buf, assign_msg("{\"kind\":7}", buf, sizeof(buf)), &r);
	assert_int_equal(r.type, MU_MSG_ERROR);
	assert_non_null(strstr(r.text, "graph, llm"));
	/* named or not, a graph stage's ASSIGN reaches the graph kind */
	run(buf, assign_msg("{\"kind\":\"graph\",\"stage\":0,\"of\":2,\"first\":0,\"last\":2,"
	                    "\"param_bytes\":0,\"digest\":\"1\",\"weights\":\"local\"}",
	                    buf, sizeof(buf)), &r);
	assert_non_null(strstr(r.text, "holds no model"));
	/* and an LLM's the LLM kind */
	run(buf, assign_msg("{\"kind\":\"llm\",\"stage\":0,\"of\":1,\"first\":0,\"last\":2,"
	                    "\"max_sequences\":1,\"kv_bytes\":1,\"max_chunk\":1,"
	                    "\"param_bytes\":0,\"digest\":\"1\",\"weights\":\"local\"}",
	                    buf, sizeof(buf)), &r);
	assert_int_equal(r.status, MU_EARG);
	assert_non_null(strstr(r.text, "holds no checkpoint"));
}

/* Weights, LOAD and a stage's own messages before there is a stage. */
static void test_out_of_order(void **state)
{
	static const int types[] = {MU_MSG_WEIGHTS, MU_MSG_TENSOR, MU_MSG_LOAD, MU_MSG_SEQ_FORWARD,
	                            MU_MSG_FORWARD};
	static const char *const says[] = {"WEIGHTS before an ASSIGN", "TENSOR before an ASSIGN",
	                                   "LOAD with no stage streaming", "no stage is loaded",
	                                   "no stage is loaded"};
	unsigned char buf[MU_MSG_HEADER + 4];
	reply_t r;

	(void)state;
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		mu__msg_t m = {(uint16_t)types[i], 0, 1, 0, 0, 0};
		size_t n = MU_MSG_HEADER;

		if (mu__msg_is_frame(types[i])) { /* an empty frame */
			m.len = 4;
			memset(buf + MU_MSG_HEADER, 0, 4);
			n += 4;
		}
		mu__msg_encode(&m, buf);
		run(buf, n, &r);
		assert_int_equal(r.type, MU_MSG_ERROR);
		if (strstr(r.text, says[i]) == NULL)
			fail_msg("%s: \"%s\" does not say \"%s\"", mu__msg_type_name(types[i]), r.text,
			         says[i]);
	}
}

static int setup(void **state)
{
	mu_device_opts_t o;

	(void)state;
	mu_device_opts_init(&o);
	o.mem_budget = 1 << 20;
	return mu_device_new(&o, &device, NULL, 0);
}

static int teardown(void **state)
{
	(void)state;
	mu_device_free(device);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_corpus_assign_last_2p40),
		cmocka_unit_test(test_assign_kind),
		cmocka_unit_test(test_out_of_order),
		cmocka_unit_test(test_assign_numbers_out_of_range),
		cmocka_unit_test(test_assign_in_range_reaches_the_model),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
