/* SPDX-License-Identifier: MIT */
/*
 * Reasons for humans: parsers and loaders return a code and write why into
 * a caller's buffer (which may be NULL), naming the thing and the rule.
 */
#ifndef MU_CORE_ERROR_INT_H
#define MU_CORE_ERROR_INT_H

#include <stddef.h>

/* Format the reason into why (wl bytes; NULL: dropped) and return rc. */
int mu__why(char *why, size_t wl, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
