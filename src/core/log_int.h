/* SPDX-License-Identifier: MIT */
/*
 * Internal logging: formats a line and hands it to the sink installed with
 * mu_log_set_sink(). Cheap when the level is filtered out (the check comes
 * before formatting).
 */
#ifndef MU_CORE_LOG_INT_H
#define MU_CORE_LOG_INT_H

#include "muster/common.h"

int mu__log_enabled(mu_log_level_t level);
void mu__log(mu_log_level_t level, const char *module, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Room for any line mu__log_format makes of one mu__log message. */
#define MU_LOG_LINE_MAX 4096

/*
 * One log line into buf[0..n), newline and NUL included, its length
 * returned (0 when n is too small to hold a line). Text:
 * "YYYY-mm-dd HH:MM:SS.mmm LEVEL component: message" in local time (the
 * stamp and level TVM's Python tools print). JSON (json != 0), one object
 * per line: {"time": RFC 3339 UTC with milliseconds, "level": "error" |
 * "warning" | "info" | "debug", "component", "msg"}. A message too long for
 * buf is cut, never the line's end.
 *
 * Either way a message is one line whatever it holds: controls (C0, DEL,
 * C1) and bytes that are not well-formed UTF-8 are escaped, so a peer's
 * text in a message (a request path with %0a in it) cannot forge a line.
 * Text: \n \r \t \\, \xNN for other C0 controls, DEL and bytes of no valid
 * sequence, \u0080..\u009f for C1. JSON: RFC 8259's escapes, and \\xNN for
 * a byte of no valid sequence (JSON holds only Unicode). Every sink of
 * the library and the command formats here.
 */
size_t mu__log_format(char *buf, size_t n, int json, mu_log_level_t level,
                      const char *module, const char *msg);

#endif
