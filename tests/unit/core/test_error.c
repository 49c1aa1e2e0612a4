/* SPDX-License-Identifier: MIT */
/* Unit tests for src/core/error.c: mu_strerror, mu__why and mu_version. */
#include <errno.h>
#include <stdio.h>

#include "mu_test.h"

#include "core/error_int.h"

/* Every MU_E* code of include/muster/common.h; add new ones here. */
static const int codes[] = {
	MU_EPROTO, MU_EBADMAGIC, MU_ETOOBIG, MU_EJSON,  MU_EEOF,   MU_EFAIL,
	MU_EMISMATCH, MU_ESTOPPED, MU_EBIND, MU_EARG, MU_ENOMEM, MU_ERESOLVE,
	MU_EAUTH, MU_ETLS,
};
#define NCODES (sizeof(codes) / sizeof(codes[0]))

static void test_own_codes_named_and_distinct(void **state)
{
	size_t i, j;

	(void)state;
	for (i = 0; i < NCODES; i++) {
		const char *t = mu_strerror(codes[i]);

		/* the documented range, so they never collide with an errno */
		assert_true(codes[i] <= -1000 && codes[i] >= -1099);
		assert_non_null(t);
		assert_true(t[0] != '\0');
		/* our own text, not glibc's "Unknown error 1000" fallback */
		assert_string_not_equal(t, strerror(-codes[i]));
		assert_string_not_equal(t, "unknown error");
		for (j = 0; j < i; j++) {
			assert_int_not_equal(codes[i], codes[j]);
			assert_string_not_equal(t, mu_strerror(codes[j]));
		}
	}
	/* the list above is complete: any other code of the reserved range
	 * has no text of ours, so a new MU_E* with its own text fails here
	 * until it is listed */
	for (i = 1000; i <= 1099; i++) {
		int c = -(int)i, listed = 0;

		for (j = 0; j < NCODES; j++)
			listed |= codes[j] == c;
		if (!listed)
			assert_true(strcmp(mu_strerror(c), "unknown error") == 0 ||
			            strncmp(mu_strerror(c), "Unknown error", 13) == 0);
	}
}

static void test_errno_and_others(void **state)
{
	static const int errs[] = {ECONNREFUSED, ETIMEDOUT, EADDRINUSE, ENOENT,
	                           EPIPE, EINVAL};
	size_t i;

	(void)state;
	assert_string_equal(mu_strerror(0), "success");
	for (i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
		assert_string_equal(mu_strerror(-errs[i]), strerror(errs[i]));
	/* out of every range: a fixed text, never NULL */
	assert_string_equal(mu_strerror(1), "unknown error");
	assert_string_equal(mu_strerror(-100000), "unknown error");
	assert_non_null(mu_strerror(MU_ERESOLVE - 1));
}

/* The contract: the text is static, so it outlives later calls (glibc's
 * strerror() frees its "Unknown error N" buffer on the next call). */
static void test_text_outlives_later_calls(void **state)
{
	const char *a, *b;
	char copy[64];

	(void)state;
	a = mu_strerror(-4000);
	snprintf(copy, sizeof(copy), "%s", a);
	b = mu_strerror(-4001);
	(void)strerror(4002);
	assert_string_equal(a, copy);
	assert_non_null(b);
	a = mu_strerror(-ECONNRESET);
	(void)strerror(4003);
	assert_string_equal(a, strerror(ECONNRESET));
}

static void test_why(void **state)
{
	char why[16];

	(void)state;
	assert_int_equal(mu__why(why, sizeof(why), MU_EPROTO, "bad %s %d", "x",
	                         7), MU_EPROTO);
	assert_string_equal(why, "bad x 7");
	/* cut to the buffer, always terminated */
	assert_int_equal(mu__why(why, sizeof(why), MU_EARG, "%s",
	                         "0123456789abcdefXYZ"), MU_EARG);
	assert_string_equal(why, "0123456789abcde");
	/* a NULL buffer is allowed */
	assert_int_equal(mu__why(NULL, 0, MU_EJSON, "x"), MU_EJSON);
}

/* mu_version: the numbers of version.h, as text and as one number */
static void test_version(void **state)
{
	char want[32];

	(void)state;
	snprintf(want, sizeof(want), "%d.%d.%d", MU_VERSION_MAJOR, MU_VERSION_MINOR,
	         MU_VERSION_PATCH);
	assert_string_equal(mu_version(), want);
	assert_string_equal(MU_VERSION_STRING, want);
	assert_int_equal(mu_version_num(), MU_VERSION_NUM);
	assert_int_equal(MU_VERSION_NUM, (MU_VERSION_MAJOR << 16) | (MU_VERSION_MINOR << 8) |
	                 MU_VERSION_PATCH);
	assert_true(MU_VERSION_NUM >= MU_VERSION_AT(0, 1, 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_own_codes_named_and_distinct),
		cmocka_unit_test(test_errno_and_others),
		cmocka_unit_test(test_text_outlives_later_calls),
		cmocka_unit_test(test_why),
		cmocka_unit_test(test_version),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
