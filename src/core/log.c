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

void mu_log_stderr_sink(mu_log_level_t level, const char *module,
                        const char *msg, void *ud)
{
	struct timeval tv;
	struct tm tm;
	char stamp[32];

	(void)module;
	(void)ud;
	gettimeofday(&tv, NULL);
	localtime_r(&tv.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
	/* One fprintf per line: stdio locks the stream, so threads' lines
	 * never interleave mid-line. */
	fprintf(stderr, "%s.%03ld %s %s\n", stamp, (long)(tv.tv_usec / 1000),
	        level_name(level), msg);
}
