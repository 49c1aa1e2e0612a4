/* SPDX-License-Identifier: MIT */
/* Unit tests for src/md/blob.c and src/md/p2p_proto.c: the bytes. */
#include "mu_test.h"

#include "muster/md.h"
#include "core/endian_int.h"
#include "md/md_int.h"
#include "md/p2p_proto_int.h"

static void test_blob_layout(void **state)
{
	void *blob;
	size_t len, n;
	const void *payload;
	char name[32], label[32];

	(void)state;
	assert_int_equal(mu_md_blob_make("A", "xy", 2, &blob, &len), 0);
	/* "nixlSerDes|" "Agent" <8> "A" "|" "MusterData" <8> "xy" "|" */
	assert_int_equal(len, 11 + 5 + 8 + 1 + 1 + 10 + 8 + 2 + 1);
	assert_memory_equal(blob, "nixlSerDes|Agent\x01\0\0\0\0\0\0\0A|MusterData\x02", 37);
	assert_int_equal(mu_md_blob_name(blob, len, name, sizeof(name)), 0);
	assert_string_equal(name, "A");
	assert_int_equal(mu_md_blob_payload(blob, len, &payload, &n), 0);
	assert_int_equal(n, 2);
	assert_memory_equal(payload, "xy", 2);
	assert_int_equal(mu__md_blob_label(blob, len, label, sizeof(label)), MU_EPROTO);
	/* truncated anywhere: never a name */
	for (size_t cut = 0; cut < 26; cut++)
		assert_int_equal(mu_md_blob_name(blob, cut, name, sizeof(name)), MU_EPROTO);
	mu_free(blob);
	assert_int_equal(mu__md_blob_make("A", "conn", "", 0, &blob, &len), 0);
	assert_int_equal(mu__md_blob_label(blob, len, label, sizeof(label)), 0);
	assert_string_equal(label, "conn");
	mu_free(blob);
	assert_int_equal(mu_md_blob_name("nixlSerDes|Agent\x00\0\0\0\0\0\0\0|", 25, name, sizeof(name)), MU_EPROTO);
	assert_int_equal(mu_md_blob_name("nixlSerDes|Conns", 16, name, sizeof(name)), MU_EPROTO);
	/* a 2^63 length cannot reach past the end */
	assert_int_equal(mu_md_blob_name("nixlSerDes|Agent\0\0\0\0\0\0\0\x80" "A|", 27, name, sizeof(name)), MU_EPROTO);
}

static void test_p2p_frames(void **state)
{
	mu__buf_t b;
	mu__p2p_cmd_t cmd;
	const void *arg;
	size_t plen, argn;

	(void)state;
	mu__buf_init(&b, 1024);
	assert_int_equal(mu__p2p_frame(&b, MU_P2P_INVL, "A", 1), 0);
	assert_memory_equal(b.data, "\x0e\0\0\0\0\0\0\0NIXLCOMM:INVLA", 22);
	for (size_t cut = 0; cut < b.len; cut++)
		assert_int_equal(mu__p2p_frame_peek(b.data, cut, 1024, &plen), 0);
	assert_int_equal(mu__p2p_frame_peek(b.data, b.len, 1024, &plen), 1);
	assert_int_equal(mu__p2p_parse(b.data + 8, plen, &cmd, &arg, &argn), 0);
	assert_int_equal(cmd, MU_P2P_INVL);
	assert_int_equal(argn, 1);
	mu__buf_reset(&b);
	assert_int_equal(mu__p2p_frame(&b, MU_P2P_SEND, NULL, 0), 0);
	assert_int_equal(b.len, 8 + 13);
	/* a blob that contains "NIXLCOMM:" stays one command */
	mu__buf_reset(&b);
	assert_int_equal(mu__p2p_frame(&b, MU_P2P_LOAD, "xNIXLCOMM:INVLy", 15), 0);
	assert_int_equal(mu__p2p_frame_peek(b.data, b.len, 1024, &plen), 1);
	assert_int_equal(mu__p2p_parse(b.data + 8, plen, &cmd, &arg, &argn), 0);
	assert_int_equal(cmd, MU_P2P_LOAD);
	assert_int_equal(argn, 15);
	/* bad frames */
	mu_le64_put(b.data, (uint64_t)1 << 63);
	assert_int_equal(mu__p2p_frame_peek(b.data, 8, 1024, &plen), MU_ETOOBIG);
	mu_le64_put(b.data, 5);
	assert_int_equal(mu__p2p_frame_peek(b.data, 8, 1024, &plen), MU_EPROTO);
	assert_int_equal(mu__p2p_parse("NIXLCOMM:HELO", 13, &cmd, &arg, &argn), MU_EPROTO);
	assert_int_equal(mu__p2p_parse("nixlcomm:LOAD", 13, &cmd, &arg, &argn), MU_EPROTO);
	mu__buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_blob_layout),
		cmocka_unit_test(test_p2p_frames),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
