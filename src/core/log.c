/* SPDX-License-Identifier: MIT */
/*
 * The log sink: the one piece of mutable global state besides the allocator.
 * It is written once by mu_log_set_sink() before anything starts and only
 * read afterwards, so loggers on any thread need no lock.
 */
#include <stdint.h>
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
 * Length of the well-formed UTF-8 sequence at s (RFC 3629: no overlong
 * forms, no surrogates, nothing past U+10FFFF), or 0 when s does not
 * start one. *cp gets the code point.
 */
static size_t utf8_seq(const unsigned char *s, uint32_t *cp)
{
	size_t len, i;
	uint32_t c, min;

	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	if ((s[0] & 0xe0) == 0xc0) {
		len = 2, c = s[0] & 0x1fu, min = 0x80;
	} else if ((s[0] & 0xf0) == 0xe0) {
		len = 3, c = s[0] & 0x0fu, min = 0x800;
	} else if ((s[0] & 0xf8) == 0xf0) {
		len = 4, c = s[0] & 0x07u, min = 0x10000;
	} else {
		return 0;
	}
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80) /* the NUL that ends s stops here too */
			return 0;
		c = c << 6 | (s[i] & 0x3fu);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return len;
}

/*
 * Append msg to buf[*at..end) with every byte that could end the line,
 * move the cursor or forge another line escaped: C0 and C1 controls and
 * DEL, and bytes that are not well-formed UTF-8. What a peer puts in a
 * message (a request path, a key, a device name) then stays on its own
 * line, whatever it holds. Text (json 0): "\n", "\r", "\t", "\\" and
 * "\xNN" (a control, or a byte of no valid sequence); a C1 control,
 * valid UTF-8 but read as an escape by some terminals, as "\u0085". JSON:
 * RFC 8259's escapes for '"', '\\' and controls (its msg decodes to the
 * message), and the text's "\xNN" for a byte of no valid sequence (the
 * decoded msg reads "\xNN": JSON cannot carry the byte itself). A
 * character is written whole or not at all; the message is cut at end.
 *
 * By hand rather than through cJSON because a sink runs on every thread
 * that logs, also when memory is short, and must not allocate: the line
 * is built on the caller's stack.
 */
static void escape_msg(char *buf, size_t end, size_t *at, const char *msg, int json)
{
	const unsigned char *s = (const unsigned char *)msg;
	char esc[8];

	while (*s != '\0') {
		uint32_t cp = 0;
		size_t len = utf8_seq(s, &cp), k;
		const char *out = esc;

		if (len == 0) {
			k = (size_t)snprintf(esc, sizeof(esc), json ? "\\\\x%02x" : "\\x%02x", *s);
			len = 1;
		} else if (cp == '\\' || (json && cp == '"')) {
			esc[0] = '\\', esc[1] = (char)cp, k = 2;
		} else if (cp == '\n' || cp == '\r' || cp == '\t') {
			esc[0] = '\\', esc[1] = cp == '\n' ? 'n' : cp == '\r' ? 'r' : 't', k = 2;
		} else if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0)) {
			k = (size_t)snprintf(esc, sizeof(esc),
			                     json || cp >= 0x80 ? "\\u%04x" : "\\x%02x", (unsigned)cp);
		} else {
			out = (const char *)s, k = len;
		}
		if (*at + k > end)
			return;
		memcpy(buf + *at, out, k);
		*at += k;
		s += len;
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
	if (module == NULL)
		module = "";
	if (!json) {
		localtime_r(&tv.tv_sec, &tm);
		strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
		/* the component is the code's own name: short, and cut at 128 */
		k = snprintf(buf, 256, "%s.%03ld %s %.128s%s", stamp, (long)(tv.tv_usec / 1000),
		             level_name(level), module, module[0] != '\0' ? ": " : "");
		at = k < 0 ? 0 : (size_t)k < 256 ? (size_t)k : 255;
		escape_msg(buf, n - 2, &at, msg, 0);
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
	 * what is left but the line's end. */
	escape_msg(buf, at + 128, &at, module, 1);
	at += (size_t)snprintf(buf + at, n - at, "\",\"msg\":\"");
	escape_msg(buf, n - 4, &at, msg, 1);
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
