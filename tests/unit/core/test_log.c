/* SPDX-License-Identifier: MIT */
/* Unit tests for src/core/log.c: the sink, level filtering, message text. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "mu_test.h"

#include "core/log_int.h"

/* What the sink saw, one entry per call. */
typedef struct {
	int n;
	mu_log_level_t level[8];
	char module[8][16];
	char msg[8][1100];
	void *ud[8];
} seen_t;

static void record(mu_log_level_t level, const char *module, const char *msg,
                   void *ud)
{
	seen_t *s = ud;

	assert_true(s->n < 8);
	s->level[s->n] = level;
	snprintf(s->module[s->n], sizeof(s->module[0]), "%s", module);
	snprintf(s->msg[s->n], sizeof(s->msg[0]), "%s", msg);
	s->ud[s->n] = ud;
	s->n++;
}

static int teardown(void **state)
{
	(void)state;
	mu_log_set_sink(NULL, NULL, MU_LOG_INFO);
	return 0;
}

static void test_no_sink_drops(void **state)
{
	(void)state;
	mu_log_set_sink(NULL, NULL, MU_LOG_DEBUG);
	assert_false(mu__log_enabled(MU_LOG_ERROR));
	mu__log(MU_LOG_ERROR, "core", "dropped %d", 1); /* must not crash */
}

static void test_levels_filter(void **state)
{
	seen_t s = {0};

	(void)state;
	mu_log_set_sink(record, &s, MU_LOG_WARN);
	assert_true(mu__log_enabled(MU_LOG_ERROR));
	assert_true(mu__log_enabled(MU_LOG_WARN));
	assert_false(mu__log_enabled(MU_LOG_INFO));
	assert_false(mu__log_enabled(MU_LOG_DEBUG));
	mu__log(MU_LOG_DEBUG, "t", "debug");
	mu__log(MU_LOG_INFO, "t", "info");
	mu__log(MU_LOG_WARN, "t", "warn");
	mu__log(MU_LOG_ERROR, "t", "error");
	assert_int_equal(s.n, 2);
	assert_int_equal(s.level[0], MU_LOG_WARN);
	assert_string_equal(s.msg[0], "warn");
	assert_int_equal(s.level[1], MU_LOG_ERROR);
	assert_string_equal(s.msg[1], "error");

	/* the most verbose level lets everything through */
	s.n = 0;
	mu_log_set_sink(record, &s, MU_LOG_DEBUG);
	mu__log(MU_LOG_DEBUG, "t", "debug");
	mu__log(MU_LOG_INFO, "t", "info");
	assert_int_equal(s.n, 2);
	assert_int_equal(s.level[0], MU_LOG_DEBUG);
	assert_int_equal(s.level[1], MU_LOG_INFO);

	/* MU_LOG_ERROR only: warnings are filtered too */
	s.n = 0;
	mu_log_set_sink(record, &s, MU_LOG_ERROR);
	mu__log(MU_LOG_WARN, "t", "warn");
	mu__log(MU_LOG_ERROR, "t", "error");
	assert_int_equal(s.n, 1);
	assert_string_equal(s.msg[0], "error");
}

static void test_message_module_and_ud(void **state)
{
	seen_t s = {0};

	(void)state;
	mu_log_set_sink(record, &s, MU_LOG_INFO);
	mu__log(MU_LOG_INFO, "tracker", "Bind to %s:%d (%s)", "127.0.0.1", 9190,
	        "x");
	assert_int_equal(s.n, 1);
	assert_string_equal(s.module[0], "tracker");
	assert_string_equal(s.msg[0], "Bind to 127.0.0.1:9190 (x)");
	assert_ptr_equal(s.ud[0], &s);

	/* uninstalling the sink stops delivery */
	mu_log_set_sink(NULL, &s, MU_LOG_DEBUG);
	mu__log(MU_LOG_ERROR, "tracker", "gone");
	assert_int_equal(s.n, 1);
}

static void test_long_line_is_cut_not_lost(void **state)
{
	seen_t s = {0};
	char big[3000];
	size_t len;

	(void)state;
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	mu_log_set_sink(record, &s, MU_LOG_INFO);
	mu__log(MU_LOG_INFO, "t", "<%s>", big);
	assert_int_equal(s.n, 1);
	len = strlen(s.msg[0]);
	assert_true(len > 1000 && len < sizeof(big));
	assert_int_equal(s.msg[0][0], '<');
	assert_int_equal(s.msg[0][len - 1], 'a');
}

/* The stderr sink's line: "YYYY-mm-dd HH:MM:SS.mmm LEVEL component: message\n". */
static void test_stderr_sink_format(void **state)
{
	static const struct {
		mu_log_level_t level;
		const char *name;
	} cases[] = {{MU_LOG_ERROR, "ERROR"},
	             {MU_LOG_WARN, "WARNING"},
	             {MU_LOG_INFO, "INFO"},
	             {MU_LOG_DEBUG, "DEBUG"}};
	char path[] = "/tmp/mu_test_logXXXXXX";
	char line[256];
	int fd, saved, y, mo, d, h, mi, sec, ms, n;
	size_t i;
	FILE *f;

	(void)state;
	fd = mkstemp(path);
	assert_true(fd >= 0);
	fflush(stderr);
	saved = dup(2);
	assert_true(saved >= 0);
	assert_int_equal(dup2(fd, 2), 2);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		mu_log_stderr_sink(cases[i].level, "t", "hello world", NULL);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	close(fd);
	f = fopen(path, "r");
	assert_non_null(f);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char level[16], rest[64];

		assert_non_null(fgets(line, sizeof(line), f));
		n = sscanf(line, "%4d-%2d-%2d %2d:%2d:%2d.%3d %15s %63[^\n]", &y,
		           &mo, &d, &h, &mi, &sec, &ms, level, rest);
		assert_int_equal(n, 9);
		assert_true(y >= 2000 && mo >= 1 && mo <= 12 && ms >= 0 && ms < 1000);
		assert_string_equal(level, cases[i].name);
		assert_string_equal(rest, "t: hello world");
		assert_int_equal(line[strlen(line) - 1], '\n');
		/* fixed-width stamp: "2026-01-02 03:04:05.006 " is 24 chars */
		assert_int_equal(line[10], ' ');
		assert_int_equal(line[19], '.');
		assert_int_equal(line[23], ' ');
	}
	assert_null(fgets(line, sizeof(line), f));
	fclose(f);
	unlink(path);
}

/* No component, no "component: " prefix. */
static void test_text_without_component(void **state)
{
	char line[MU_LOG_LINE_MAX];
	size_t n;

	(void)state;
	n = mu__log_format(line, sizeof(line), 0, MU_LOG_INFO, "", "bare");
	assert_true(n > 0 && n == strlen(line));
	assert_string_equal(line + 24, "INFO bare\n");
	assert_int_equal(mu__log_format(line, 100, 0, MU_LOG_INFO, "x", "y"), 0);
}

/* --log-format json: one object per line, escapes, fixed fields. */
static void test_json_line(void **state)
{
	char line[MU_LOG_LINE_MAX];
	cJSON *v;
	size_t n;
	int y, mo, d, h, mi, sec, ms;
	char z;

	(void)state;
	n = mu__log_format(line, sizeof(line), 1, MU_LOG_WARN, "store",
	                   "a \"quoted\" \\ path\nand\ta \x01 control");
	assert_int_equal(n, strlen(line));
	assert_int_equal(line[n - 1], '\n');
	assert_null(memchr(line, '\n', n - 1)); /* one line */
	v = cJSON_Parse(line);
	assert_non_null(v);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(v, "level")), "warning");
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(v, "component")), "store");
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(v, "msg")),
	                    "a \"quoted\" \\ path\nand\ta \x01 control");
	assert_int_equal(sscanf(cJSON_GetStringValue(cJSON_GetObjectItem(v, "time")),
	                        "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c", &y, &mo, &d, &h, &mi, &sec, &ms,
	                        &z), 8);
	assert_int_equal(z, 'Z');
	assert_int_equal(cJSON_GetArraySize(v), 4);
	cJSON_Delete(v);
}

/* A message that needs escaping past the buffer is cut; the line still
 * parses and ends where it must. */
static void test_json_long_message_is_cut_whole(void **state)
{
	static char msg[6000];
	char line[1024];
	cJSON *v;
	size_t n;

	(void)state;
	memset(msg, '"', sizeof(msg) - 1);
	n = mu__log_format(line, sizeof(line), 1, MU_LOG_ERROR, "tracker", msg);
	assert_true(n > 0 && n < sizeof(line));
	assert_int_equal(line[n - 1], '\n');
	v = cJSON_Parse(line);
	assert_non_null(v);
	assert_true(strlen(cJSON_GetStringValue(cJSON_GetObjectItem(v, "msg"))) > 100);
	cJSON_Delete(v);
}

/* What a peer put in a message cannot end the line or forge another:
 * controls, C1 and bytes of no valid UTF-8 come out escaped, through the
 * stderr sink (what the command's sinks call) as through the formatter. */
static void test_text_escapes_what_could_forge_a_line(void **state)
{
	static const char forged[] =
		"GET /x\n2026-01-01 00:00:00.000 INFO serve: admin logged in\r\x1b[2J\t\\ "
		"\x7f \xc2\x9b \xff\xfe \xc3\x28 \xe2\x82 \xed\xa0\x80 \xc0\xaf \xf4\x90\x80\x80 "
		"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
	static const char want[] =
		"GET /x\\n2026-01-01 00:00:00.000 INFO serve: admin logged in\\r\\x1b[2J\\t\\\\ "
		"\\x7f \\u009b \\xff\\xfe \\xc3( \\xe2\\x82 \\xed\\xa0\\x80 \\xc0\\xaf "
		"\\xf4\\x90\\x80\\x80 caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n";
	char path[] = "/tmp/mu_test_logXXXXXX";
	char line[MU_LOG_LINE_MAX], back[MU_LOG_LINE_MAX];
	int fd, saved;
	size_t n;
	FILE *f;

	(void)state;
	n = mu__log_format(line, sizeof(line), 0, MU_LOG_INFO, "serve", forged);
	assert_int_equal(n, strlen(line));
	assert_memory_equal(line + 24, "INFO serve: ", strlen("INFO serve: "));
	assert_string_equal(line + 24 + strlen("INFO serve: "), want);

	fd = mkstemp(path);
	assert_true(fd >= 0);
	fflush(stderr);
	saved = dup(2);
	assert_int_equal(dup2(fd, 2), 2);
	mu_log_stderr_sink(MU_LOG_WARN, "serve", forged, NULL);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	close(fd);
	f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(fgets(back, sizeof(back), f));
	assert_null(fgets(line, sizeof(line), f)); /* one line, not two */
	fclose(f);
	unlink(path);
	assert_string_equal(back + 24 + strlen("WARNING serve: "), want);
}

/* A line cut short never ends inside an escape or a character. */
static void test_text_cut_keeps_escapes_whole(void **state)
{
	static char msg[3000];
	char line[600];
	size_t n, i;

	(void)state;
	for (i = 0; i + 2 < sizeof(msg); i += 2)
		memcpy(msg + i, i % 4 == 0 ? "\n\xc3" : "\xa9\x01", 2);
	n = mu__log_format(line, sizeof(line), 0, MU_LOG_INFO, "t", msg);
	assert_true(n > 500 && n < sizeof(line));
	assert_int_equal(line[n - 1], '\n');
	assert_null(memchr(line, '\n', n - 1));
	assert_null(memchr(line, '\x01', n));
	assert_true(memcmp(line + n - 5, "\\x01\n", 5) == 0 ||
	            memcmp(line + n - 3, "\xc3\xa9\n", 3) == 0 || memcmp(line + n - 3, "\\n\n", 3) == 0);
}

/* JSON: valid UTF-8 and C1 decode to themselves; a byte of no valid
 * sequence reads "\xNN" (the line stays valid JSON, which holds only
 * Unicode). */
static void test_json_escapes_invalid_utf8(void **state)
{
	char line[MU_LOG_LINE_MAX];
	cJSON *v;

	(void)state;
	assert_true(mu__log_format(line, sizeof(line), 1, MU_LOG_INFO, "serve",
	                           "a\xff b\xc2\x85 caf\xc3\xa9 \x7f") > 0);
	v = cJSON_Parse(line);
	assert_non_null(v);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(v, "msg")),
	                    "a\\xff b\xc2\x85 caf\xc3\xa9 \x7f");
	assert_non_null(strstr(line, "b\\u0085 caf\xc3\xa9 \\u007f"));
	cJSON_Delete(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_no_sink_drops, teardown),
		cmocka_unit_test_teardown(test_levels_filter, teardown),
		cmocka_unit_test_teardown(test_message_module_and_ud, teardown),
		cmocka_unit_test_teardown(test_long_line_is_cut_not_lost, teardown),
		cmocka_unit_test_teardown(test_stderr_sink_format, teardown),
		cmocka_unit_test(test_text_without_component),
		cmocka_unit_test(test_json_line),
		cmocka_unit_test(test_json_long_message_is_cut_whole),
		cmocka_unit_test(test_text_escapes_what_could_forge_a_line),
		cmocka_unit_test(test_text_cut_keeps_escapes_whole),
		cmocka_unit_test(test_json_escapes_invalid_utf8),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
