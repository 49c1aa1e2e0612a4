/* SPDX-License-Identifier: MIT */
/*
 * The log sink: the one piece of mutable global state besides the allocator.
 * It is written once by mu_log_set_sink() before anything starts and only
 * read afterwards, so loggers on any thread need no lock.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/time.h>

#include "muster/common.h"
#include "core/log_int.h"

static mu_log_sink_cb sink_cb;
static void *sink_ud;
static mu_log_level_t sink_max = MU_LOG_INFO;

void mu_log_set_sink(mu_log_sink_cb cb, void *ud, mu_log_level_t max_level)
{
	sink_cb = cb;
	sink_ud = ud;
	sink_max = max_level;
}

int mu__log_enabled(mu_log_level_t level)
{
	return sink_cb != NULL && level <= sink_max;
}

void mu__log(mu_log_level_t level, const char *module, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	if (!mu__log_enabled(level))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap); /* long lines are cut, not lost */
	va_end(ap);
	sink_cb(level, module, msg, sink_ud);
}

static const char *level_name(mu_log_level_t level)
{
	switch (level) {
	case MU_LOG_ERROR:
		return "ERROR";
	case MU_LOG_WARN:
		return "WARNING";
	case MU_LOG_INFO:
		return "INFO";
	default:
		return "DEBUG";
	}
}

/* JSON's lower-case names, as log shippers (Vector, Loki, Elastic) map them. */
static const char *level_json(mu_log_level_t level)
{
	switch (level) {
	case MU_LOG_ERROR:
		return "error";
	case MU_LOG_WARN:
		return "warning";
	case MU_LOG_INFO:
		return "info";
	default:
		return "debug";
	}
}

/*
 * Append s to buf[*at..n) as the body of a JSON string (RFC 8259 escapes;
 * other bytes as they are: messages are UTF-8 or ASCII). By hand rather
 * than through cJSON because a sink runs on every thread that logs, also
 * when memory is short, and must not allocate: the line is built on the
 * caller's stack.
 */
static void json_str(char *buf, size_t n, size_t *at, const char *s)
{
	for (; *s != '\0' && *at + 7 < n; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\') {
			buf[(*at)++] = '\\';
			buf[(*at)++] = (char)ch;
		} else if (ch < 0x20) {
			*at += (size_t)snprintf(buf + *at, n - *at, "\\u%04x", ch);
		} else {
			buf[(*at)++] = (char)ch;
		}
	}
}

size_t mu__log_format(char *buf, size_t n, int json, mu_log_level_t level,
                      const char *module, const char *msg)
{
	struct timeval tv;
	struct tm tm;
	char stamp[32];
	size_t at;
	int k;

	if (n < 512)
		return 0;
	gettimeofday(&tv, NULL);
	if (!json) {
		localtime_r(&tv.tv_sec, &tm);
		strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
		k = snprintf(buf, n - 1, "%s.%03ld %s %s%s%s", stamp, (long)(tv.tv_usec / 1000),
		             level_name(level), module != NULL ? module : "",
		             module != NULL && module[0] != '\0' ? ": " : "", msg);
		at = k < 0 ? 0 : (size_t)k < n - 1 ? (size_t)k : n - 2;
		buf[at++] = '\n';
		buf[at] = '\0';
		return at;
	}
	/* RFC 3339 in UTC: what every shipper parses without a format string. */
	gmtime_r(&tv.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
	k = snprintf(buf, n, "{\"time\":\"%s.%03ldZ\",\"level\":\"%s\",\"component\":\"", stamp,
	             (long)(tv.tv_usec / 1000), level_json(level));
	at = (size_t)k;
	/* Bounds: a component is short (cut at 128 bytes); the message takes
	 * what is left but the line's end (each escape is at most 6 bytes). */
	json_str(buf, at + 128, &at, module != NULL ? module : "");
	at += (size_t)snprintf(buf + at, n - at, "\",\"msg\":\"");
	json_str(buf, n - 8, &at, msg);
	memcpy(buf + at, "\"}\n", 4);
	return at + 3;
}

void mu_log_stderr_sink(mu_log_level_t level, const char *module,
                        const char *msg, void *ud)
{
	char line[MU_LOG_LINE_MAX];

	(void)ud;
	/* One fprintf per line: stdio locks the stream, so threads' lines
	 * never interleave mid-line. */
	if (mu__log_format(line, sizeof(line), 0, level, module, msg) > 0)
		fputs(line, stderr);
}
