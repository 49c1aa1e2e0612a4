/* SPDX-License-Identifier: MIT */
/*
 * Monotonic clock and deadlines.
 */
#include <time.h>

#include "core/time_int.h"

int64_t mu__now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double mu__clock_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int64_t mu__deadline(int64_t timeout_ms)
{
	int64_t now;

	if (timeout_ms < 0)
		return MU_NO_DEADLINE;
	now = mu__now_ms();
	return timeout_ms > MU_NO_DEADLINE - now - 1 ? MU_NO_DEADLINE - 1
	                                             : now + timeout_ms;
}

int mu__remaining_ms(int64_t deadline)
{
	int64_t left;

	if (deadline == MU_NO_DEADLINE)
		return -1;
	left = deadline - mu__now_ms();
	if (left < 0)
		return 0;
	return left > INT32_MAX ? INT32_MAX : (int)left;
}
