/* SPDX-License-Identifier: MIT */
/* Unit tests for src/serve/stopscan.c: stop strings over streamed text. */
#include "mu_test.h"

#include "core/buf_int.h"
#include "serve/stopscan_int.h"

/* Feed pieces one by one; the text passed on and whether a stop hit. */
static int feed_all(const char *const *stops, int n, const char *const *pieces, mu__buf_t *out)
{
	mu__stopscan_t s;
	int hit = 0;

	assert_int_equal(mu__stopscan_init(&s, stops, n), 0);
	for (int i = 0; pieces[i] != NULL && !hit; i++)
		hit = mu__stopscan_feed(&s, pieces[i], strlen(pieces[i]), out);
	if (!hit)
		assert_int_equal(mu__stopscan_flush(&s, out), 0);
	mu__stopscan_free(&s);
	return hit;
}

static void test_stop_across_pieces(void **state)
{
	const char *stops[] = {"END", "\n\n"};
	const char *pieces[] = {"Hello wor", "ld E", "N", "Dafter", NULL};
	mu__buf_t out;

	(void)state;
	mu__buf_init(&out, 1 << 20);
	assert_int_equal(feed_all(stops, 2, pieces, &out), 1);
	assert_string_equal(out.data, "Hello world ");
	mu__buf_free(&out);
}

static void test_what_is_held_back_comes_out(void **state)
{
	const char *stops[] = {"ENDING"};
	mu__stopscan_t s;
	mu__buf_t out;

	(void)state;
	mu__buf_init(&out, 1 << 20);
	assert_int_equal(mu__stopscan_init(&s, stops, 1), 0);
	assert_int_equal(mu__stopscan_feed(&s, "a", 1, &out), 0);
	assert_int_equal(mu__stopscan_feed(&s, "EN", 2, &out), 0);
	assert_string_equal(out.data, "a");   /* "EN" may begin ENDING: held */
	assert_int_equal(mu__stopscan_feed(&s, "DIx", 3, &out), 0);
	assert_string_equal(out.data, "aENDIx");
	assert_int_equal(mu__stopscan_feed(&s, "END", 3, &out), 0);
	assert_int_equal(mu__stopscan_flush(&s, &out), 0);
	assert_string_equal(out.data, "aENDIxEND");
	mu__stopscan_free(&s);
	mu__buf_free(&out);
}

static void test_earliest_stop_wins_and_empty_ones_are_ignored(void **state)
{
	const char *stops[] = {"", "cd", "bcd"};
	const char *pieces[] = {"abcde", NULL};
	const char *none[] = {"", NULL};
	const char *plain[] = {"x", "y", NULL};
	mu__buf_t out;

	(void)state;
	mu__buf_init(&out, 1 << 20);
	assert_int_equal(feed_all(stops, 3, pieces, &out), 1);
	assert_string_equal(out.data, "a");
	mu__buf_reset(&out);
	assert_int_equal(feed_all(none, 1, plain, &out), 0);
	assert_string_equal(out.data, "xy");
	mu__buf_free(&out);
}

static void test_utf8_is_not_split(void **state)
{
	/* A stop that starts with a multi-byte character holds back whole
	 * characters only. */
	const char *stops[] = {"\xc3\xa9t\xc3\xa9"};
	mu__stopscan_t s;
	mu__buf_t out;

	(void)state;
	mu__buf_init(&out, 1 << 20);
	assert_int_equal(mu__stopscan_init(&s, stops, 1), 0);
	assert_int_equal(mu__stopscan_feed(&s, "caf\xc3\xa9", 5, &out), 0);
	assert_string_equal(out.data, "caf");
	assert_int_equal(mu__stopscan_feed(&s, "!", 1, &out), 0);
	assert_string_equal(out.data, "caf\xc3\xa9!");
	mu__stopscan_free(&s);
	mu__buf_free(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stop_across_pieces),
		cmocka_unit_test(test_what_is_held_back_comes_out),
		cmocka_unit_test(test_earliest_stop_wins_and_empty_ones_are_ignored),
		cmocka_unit_test(test_utf8_is_not_split),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
