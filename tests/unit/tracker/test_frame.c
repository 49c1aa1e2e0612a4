/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/tracker/frame.c, the public framing: a frame made by
 * mu_tracker_frame_encode is found whole by mu_tracker_frame_peek and by
 * the tracker's own boundary check, at every cut of the stream; a short
 * buffer gets nothing and learns the size; empty and oversized frames are
 * refused on both sides.
 */
#include <errno.h>

#include "mu_test.h"

#include "muster/tracker.h"
#include "core/endian_int.h"
#include "tracker/proto_int.h"

static void test_encode_then_peek(void **state)
{
	static const char body[] = "[4, \"bench\", \"\", 3]";
	unsigned char buf[64], two[128];
	size_t n = 0, m = 0, blen = 0, len = sizeof(body) - 1;

	(void)state;
	assert_int_equal(mu_tracker_frame_encode(body, len, buf, sizeof(buf), &n), 0);
	assert_int_equal(n, 4 + len);
	assert_int_equal(mu_le32_get(buf), len);
	assert_memory_equal(buf + 4, body, len);
	/* two frames back to back, cut anywhere: whole only once all is in */
	memcpy(two, buf, n);
	assert_int_equal(mu_tracker_frame_encode("0", 1, two + n, sizeof(two) - n, &m), 0);
	for (size_t cut = 0; cut <= n + m; cut++) {
		int want = cut >= n ? 1 : 0;

		assert_int_equal(mu_tracker_frame_peek(two, cut, 1u << 20, &blen), want);
		assert_int_equal(mu__tracker_frame_peek(two, cut, 1u << 20, &blen), want);
		if (want)
			assert_int_equal(blen, len);
	}
	assert_int_equal(mu_tracker_frame_peek(two + n, m, 1u << 20, &blen), 1);
	assert_int_equal(blen, 1);
	assert_int_equal(MU_TRACKER_MAGIC, 0x2F271); /* TVM's RPC_TRACKER_MAGIC */
}

static void test_refusals(void **state)
{
	unsigned char buf[8];
	size_t n = 0, blen;

	(void)state;
	memset(buf, 0xee, sizeof(buf));
	assert_int_equal(mu_tracker_frame_encode("12345", 5, buf, 8, &n), MU_ETOOBIG);
	assert_int_equal(n, 9);
	assert_int_equal(buf[0], 0xee); /* nothing written */
	assert_int_equal(mu_tracker_frame_encode("1234", 4, buf, 8, &n), 0);
	assert_int_equal(mu_tracker_frame_encode("1", 1, NULL, 0, &n), MU_ETOOBIG);
	assert_int_equal(mu_tracker_frame_encode("", 0, buf, 8, &n), MU_EARG);
	assert_int_equal(mu_tracker_frame_encode(NULL, 3, buf, 8, &n), MU_EARG);
	assert_int_equal(mu_tracker_frame_encode("x", (size_t)INT32_MAX + 1, buf, 8, &n),
	                 MU_ETOOBIG);
	/* a length of 0 or less, or over the reader's limit */
	mu_le32_put(buf, 0);
	assert_int_equal(mu_tracker_frame_peek(buf, 4, 100, &blen), MU_EPROTO);
	mu_le32_put(buf, (uint32_t)-5);
	assert_int_equal(mu_tracker_frame_peek(buf, 4, 100, &blen), MU_EPROTO);
	mu_le32_put(buf, 101);
	assert_int_equal(mu_tracker_frame_peek(buf, 4, 100, &blen), MU_ETOOBIG);
	assert_int_equal(mu_tracker_frame_peek(buf, 3, 100, &blen), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_encode_then_peek),
		cmocka_unit_test(test_refusals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
