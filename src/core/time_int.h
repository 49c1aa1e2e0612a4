/* SPDX-License-Identifier: MIT */
/*
 * Monotonic time in milliseconds, and deadlines built on it. A deadline is
 * an absolute mu__now_ms() value; MU_NO_DEADLINE means "wait forever", which
 * callers use only when their own caller asked for it.
 */
#ifndef MU_CORE_TIME_INT_H
#define MU_CORE_TIME_INT_H

#include <stdint.h>

#define MU_NO_DEADLINE INT64_MAX

int64_t mu__now_ms(void);
/* The same clock with sub-millisecond resolution, for measuring. */
double mu__clock_ms(void);

/* timeout_ms < 0 means no deadline. */
int64_t mu__deadline(int64_t timeout_ms);

/* Milliseconds left, clamped to [0, INT32_MAX]; -1 for MU_NO_DEADLINE (poll's "forever"). */
int mu__remaining_ms(int64_t deadline);

#endif
