/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/tracker/summary.c: the text must be byte for byte what
 * TVM's TrackerSession.text_summary() returns (spec §11).
 */
#include "mu_test.h"

#include "muster/tracker.h"

static char *text_of(const char *json)
{
	char *text = NULL;

	assert_int_equal(mu_tracker_summary_text(json, &text), 0);
	return text;
}

static void test_empty_tracker(void **state)
{
	char *t = text_of("{\"queue_info\": {}, \"server_info\": []}");

	(void)state;
	/* with no keys the dash lines are 27 long */
	assert_string_equal(t,
		"Server List\n"
		"------------------------------\n"
		"server-address           key\n"
		"------------------------------\n"
		"------------------------------\n"
		"\n"
		"Queue Status\n"
		"---------------------------\n"
		"key   total  free  pending\n"
		"---------------------------\n"
		"---------------------------\n");
	mu_free(t);
}

static void test_servers_and_queues(void **state)
{
	char *t = text_of(
		"{\"queue_info\": {\"rasp\": {\"free\": 1, \"pending\": 0},"
		" \"idle\": {\"free\": 0, \"pending\": 0},"
		" \"gpu\": {\"free\": 0, \"pending\": 3}},"
		" \"server_info\": ["
		"{\"key\": \"server:rasp\", \"addr\": [\"10.0.0.7\", 9090]},"
		"{\"key\": \"server:gpu\", \"addr\": [\"10.0.0.9\", \"9091\"]},"
		"{\"key\": \"server:rasp\", \"addr\": [\"10.0.0.8\", 9090]}]}");

	(void)state;
	/* servers sorted by key (stable), rows only where total or pending */
	assert_string_equal(t,
		"Server List\n"
		"------------------------------\n"
		"server-address           key\n"
		"------------------------------\n"
		"10.0.0.9:9091            server:gpu\n"
		"10.0.0.7:9090            server:rasp\n"
		"10.0.0.8:9090            server:rasp\n"
		"------------------------------\n"
		"\n"
		"Queue Status\n"
		"----------------------------\n"
		"key    total  free  pending\n"
		"----------------------------\n"
		"gpu    1      0     3      \n"
		"rasp   2      1     0      \n"
		"----------------------------\n");
	mu_free(t);
}

static void test_widths_count_characters(void **state)
{
	/* "d\u00e9v" is 3 characters, 4 bytes; the long address overflows its
	 * 21 columns (left-aligned, as f"{addr:21s}") rather than being cut;
	 * a null host prints as None */
	char *t = text_of(
		"{\"queue_info\": {\"d\\u00e9v\": {\"free\": 0, \"pending\": 1}},"
		" \"server_info\": [{\"key\": \"server:x\","
		" \"addr\": [null, 1]},"
		"{\"key\": \"server:y\", \"addr\": [\"fe80::1234:5678:9abc\", 9090]}]}");

	(void)state;
	assert_string_equal(t,
		"Server List\n"
		"------------------------------\n"
		"server-address           key\n"
		"------------------------------\n"
		"None:1                   server:x\n"
		"fe80::1234:5678:9abc:9090    server:y\n"
		"------------------------------\n"
		"\n"
		"Queue Status\n"
		"---------------------------\n"
		"key   total  free  pending\n"
		"---------------------------\n"
		"d\xc3\xa9v   0      0     1      \n"
		"---------------------------\n");
	mu_free(t);
}

static void test_bad_input(void **state)
{
	char *t = (char *)1;

	(void)state;
	assert_int_equal(mu_tracker_summary_text("[0]", &t), MU_EPROTO);
	assert_null(t);
	assert_int_equal(mu_tracker_summary_text("{", &t), MU_EJSON);
	assert_int_equal(mu_tracker_summary_text(
		"{\"queue_info\": {\"k\": {\"free\": \"x\"}}, \"server_info\": []}", &t),
		MU_EPROTO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty_tracker),
		cmocka_unit_test(test_servers_and_queues),
		cmocka_unit_test(test_widths_count_characters),
		cmocka_unit_test(test_bad_input),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
