/* SPDX-License-Identifier: MIT */
/* Unit tests for src/core/json.c: strict parsing, Python-identical output. */
#include "mu_test.h"

#include <limits.h>
#include <math.h>

#include "core/json_int.h"

static char *dump(const char *json)
{
	static char out[512];
	mu__buf_t b;
	cJSON *v;

	assert_int_equal(mu__json_parse(json, strlen(json), &v), 0);
	mu__buf_init(&b, sizeof(out) - 1);
	assert_int_equal(mu__json_dump(&b, v), 0);
	memcpy(out, b.data, b.len + 1);
	mu__buf_free(&b);
	cJSON_Delete(v);
	return out;
}

static void test_dump_matches_python(void **state)
{
	(void)state;
	/* json.dumps(...) output, as Python 3.11 prints it */
	assert_string_equal(dump("[0,[\"127.0.0.1\",9090,\"rasp:0.5\"]]"),
	                    "[0, [\"127.0.0.1\", 9090, \"rasp:0.5\"]]");
	assert_string_equal(dump("{\"key\" : \"server:x\",\"addr\":[null,\"9090\"]}"),
	                    "{\"key\": \"server:x\", \"addr\": [null, \"9090\"]}");
	assert_string_equal(dump("[true,false,null,-1,1.5,1e300,{},[]]"),
	                    "[true, false, null, -1, 1.5, 1e+300, {}, []]");
	assert_string_equal(dump("0.1"), "0.1");
}

static void test_dump_escapes_like_ensure_ascii(void **state)
{
	(void)state;
	/* json.dumps("d\u00e9v\U0001F600\x01\t\"\\\x7f") */
	assert_string_equal(dump("\"d\xc3\xa9v\xf0\x9f\x98\x80\\u0001\\t\\\"\\\\\\u007f\""),
	                    "\"d\\u00e9v\\ud83d\\ude00\\u0001\\t\\\"\\\\\\u007f\"");
}

static void test_parse_is_strict(void **state)
{
	cJSON *v = NULL;

	(void)state;
	assert_int_equal(mu__json_parse(" [1] \n", 6, &v), 0);
	cJSON_Delete(v);
	assert_int_equal(mu__json_parse("[1] x", 5, &v), MU_EJSON);
	assert_null(v);
	assert_int_equal(mu__json_parse("[1][2]", 6, &v), MU_EJSON);
	assert_int_equal(mu__json_parse("[1,", 3, &v), MU_EJSON);
	assert_int_equal(mu__json_parse("", 0, &v), MU_EJSON);
	assert_int_equal(mu__json_parse("[1]\0", 4, &v), MU_EJSON);
	/* Only `len` bytes count, whatever follows in memory. */
	assert_int_equal(mu__json_parse("[12]garbage", 4, &v), 0);
	assert_int_equal(cJSON_GetArrayItem(v, 0)->valueint, 12);
	cJSON_Delete(v);
}

static void test_parse_refuses_deep_nesting(void **state)
{
	char text[2 * (MU_JSON_MAX_DEPTH + 1) + 1];
	cJSON *v = NULL;
	int i;

	(void)state;
	for (i = 0; i <= MU_JSON_MAX_DEPTH; i++) {
		text[i] = '[';
		text[2 * (MU_JSON_MAX_DEPTH + 1) - 1 - i] = ']';
	}
	text[sizeof(text) - 1] = '\0';
	assert_int_equal(mu__json_parse(text, strlen(text), &v), MU_EJSON);
	/* one level less is fine; brackets inside strings do not count */
	assert_int_equal(mu__json_parse(text + 1, strlen(text) - 2, &v), 0);
	cJSON_Delete(v);
	{
		const char *str = "[\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"]";

		assert_int_equal(mu__json_parse(str, strlen(str), &v), 0);
	}
	cJSON_Delete(v);
}

static void test_utf8_validation(void **state)
{
	cJSON *v = NULL;

	(void)state;
	assert_true(mu__utf8_valid("d\xc3\xa9v \xf0\x9f\x98\x80", 9));
	assert_false(mu__utf8_valid("\xff", 1));
	assert_false(mu__utf8_valid("\xc3", 1));           /* truncated */
	assert_false(mu__utf8_valid("\xc0\xaf", 2));       /* overlong '/' */
	assert_false(mu__utf8_valid("\xed\xa0\x80", 3));   /* a surrogate */
	assert_false(mu__utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
	assert_int_equal(mu__json_parse("[\"\xff\"]", 5, &v), MU_EJSON);
	assert_null(v);
}

static void test_is_int(void **state)
{
	cJSON *v;

	(void)state;
	v = cJSON_CreateNumber(9090);
	assert_true(mu__json_is_int(v, 0, 65535));
	assert_false(mu__json_is_int(v, 0, 100));
	cJSON_SetNumberValue(v, 1.5);
	assert_false(mu__json_is_int(v, 0, 65535));
	cJSON_Delete(v);
	v = cJSON_CreateString("1");
	assert_false(mu__json_is_int(v, 0, 65535));
	cJSON_Delete(v);
}

static void repaired(const char *in, size_t n, const char *want)
{
	mu__buf_t b;

	mu__buf_init(&b, 1024);
	assert_int_equal(mu__utf8_repair(in, n, &b), 0);
	assert_int_equal(b.len, strlen(want));
	assert_memory_equal(b.data, want, b.len);
	mu__buf_free(&b);
}

static void test_utf8_repair(void **state)
{
	(void)state;
	repaired("ab\xc3\xa9", 4, "ab\xc3\xa9");                 /* valid text is kept */
	repaired("a\xffz", 3, "a\xef\xbf\xbdz");                  /* a stray byte */
	repaired("\xe2\x96", 2, "\xef\xbf\xbd\xef\xbf\xbd");      /* cut short at the end */
	repaired("\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd");      /* overlong */
	repaired("\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"); /* surrogate */
	repaired("\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80");     /* 4 bytes */
}

/* Parse text as one JSON value (the test frees it). */
static cJSON *num(const char *text)
{
	cJSON *v = NULL;

	assert_int_equal(mu__json_parse(text, strlen(text), &v), 0);
	return v;
}

static void test_int_range_checked(void **state)
{
	static const char *const refused[] = {
		"1099511627776", "-2147483649", "2147483648", "2.5", "1e400", "-1e400",
		"\"1\"", "null", "true", "[1]",
	};
	cJSON *v;
	int x = 7;

	(void)state;
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		v = num(refused[i]);
		assert_int_equal(mu__json_int(v, INT_MIN, INT_MAX, &x), MU_EPROTO);
		assert_int_equal(x, 7); /* untouched on failure */
		cJSON_Delete(v);
	}
	assert_int_equal(mu__json_int(NULL, 0, 1, &x), MU_EPROTO);
	v = num("2147483647");
	assert_int_equal(mu__json_int(v, INT_MIN, INT_MAX, &x), 0);
	assert_int_equal(x, INT_MAX);
	assert_int_equal(mu__json_int(v, 0, 10, &x), MU_EPROTO);
	cJSON_Delete(v);
	v = num("-2147483648");
	assert_int_equal(mu__json_int(v, INT_MIN, INT_MAX, &x), 0);
	assert_int_equal(x, INT_MIN);
	cJSON_Delete(v);
	v = num("3.0"); /* whole, though written with a fraction */
	assert_int_equal(mu__json_int(v, 0, 3, &x), 0);
	assert_int_equal(x, 3);
	cJSON_Delete(v);
}

static void test_int64_and_u64_stop_at_2p53(void **state)
{
	int64_t i = 0;
	uint64_t u = 0;
	cJSON *v;

	(void)state;
	v = num("9007199254740991");
	assert_int_equal(mu__json_int64(v, -MU_JSON_INT_MAX, MU_JSON_INT_MAX, &i), 0);
	assert_true(i == MU_JSON_INT_MAX);
	assert_int_equal(mu__json_u64(v, UINT64_MAX, &u), 0);
	assert_true(u == (uint64_t)MU_JSON_INT_MAX);
	cJSON_Delete(v);
	/* 2^63 and 2^64 would overflow a cast to int64_t and uint64_t */
	v = num("9223372036854775808");
	assert_int_equal(mu__json_int64(v, -MU_JSON_INT_MAX, MU_JSON_INT_MAX, &i), MU_EPROTO);
	assert_int_equal(mu__json_u64(v, UINT64_MAX, &u), MU_EPROTO);
	cJSON_Delete(v);
	v = num("18446744073709551616");
	assert_int_equal(mu__json_u64(v, UINT64_MAX, &u), MU_EPROTO);
	cJSON_Delete(v);
	v = num("-1");
	assert_int_equal(mu__json_u64(v, UINT64_MAX, &u), MU_EPROTO);
	cJSON_Delete(v);
	/* bounds past 2^53 are refused as a caller's error */
	v = num("1");
	assert_int_equal(mu__json_int64(v, INT64_MIN, INT64_MAX, &i), MU_EPROTO);
	cJSON_Delete(v);
}

static void test_double_range_checked(void **state)
{
	double d = 0;
	cJSON *v;

	(void)state;
	v = num("1.5");
	assert_int_equal(mu__json_double(v, 0, 2, &d), 0);
	assert_true(d == 1.5);
	assert_int_equal(mu__json_double(v, 2, 3, &d), MU_EPROTO);
	cJSON_Delete(v);
	v = num("1e400"); /* cJSON reads it as infinity */
	assert_int_equal(mu__json_double(v, -HUGE_VAL, HUGE_VAL, &d), MU_EPROTO);
	cJSON_Delete(v);
	v = num("\"1\"");
	assert_int_equal(mu__json_double(v, 0, 2, &d), MU_EPROTO);
	cJSON_Delete(v);
}

/* mu__json_parse_nul's value cap: commas and opening brackets outside
 * strings, refused as MU_ETOOBIG before cJSON builds anything. */
static void test_value_cap(void **state)
{
	const char *four = "[1,2,3,4]", *str = "[\"a,b,[c,{d\"]";
	cJSON *j;
	int nul;

	(void)state;
	/* "[" and three commas: four values */
	assert_int_equal(mu__json_parse_nul(four, strlen(four), 3, &j, &nul), MU_ETOOBIG);
	assert_null(j);
	assert_int_equal(mu__json_parse_nul(four, strlen(four), 4, &j, &nul), 0);
	cJSON_Delete(j);
	assert_int_equal(mu__json_parse_nul(four, strlen(four), 0, &j, &nul), 0);
	cJSON_Delete(j);
	/* inside a string they are text */
	assert_int_equal(mu__json_parse_nul(str, strlen(str), 1, &j, &nul), 0);
	cJSON_Delete(j);
	assert_int_equal(mu__json_parse_nul("[1,", 3, 0, &j, &nul), MU_EJSON);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dump_matches_python),
		cmocka_unit_test(test_dump_escapes_like_ensure_ascii),
		cmocka_unit_test(test_parse_is_strict),
		cmocka_unit_test(test_parse_refuses_deep_nesting),
		cmocka_unit_test(test_utf8_validation),
		cmocka_unit_test(test_is_int),
		cmocka_unit_test(test_utf8_repair),
		cmocka_unit_test(test_int_range_checked),
		cmocka_unit_test(test_int64_and_u64_stop_at_2p53),
		cmocka_unit_test(test_double_range_checked),
		cmocka_unit_test(test_value_cap),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
