/* SPDX-License-Identifier: MIT */
/*
 * Progress of long steps -- weight streaming, hashing a large checkpoint,
 * waiting for devices -- reported as events to the sink the program
 * installed (mu_progress_set_sink in muster/common.h). The library only
 * describes; drawing, throttling and deciding whether anyone watches are
 * the program's (the muster command's status line is src/cli/progress.c).
 * With no sink installed when a step starts, the step reports nothing and
 * costs nothing past that check.
 *
 * A mu__progress_t belongs to the one thread that runs its step; every
 * update is reported (the sink throttles what it draws).
 */
#ifndef MU_CORE_PROGRESS_INT_H
#define MU_CORE_PROGRESS_INT_H

#include <stdint.h>

typedef struct {
	char what[160];
	uint64_t id;
	uint64_t total;   /* bytes, 0 when unknown */
	int64_t t0_ms;    /* mu__now_ms at the start */
	int on;           /* a sink was installed at the start */
} mu__progress_t;

/* Begin a step named by the printf-style label (BEGIN); total in bytes,
 * or 0 when unknown. */
void mu__progress_start(mu__progress_t *p, uint64_t total, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* done of total bytes (BYTES). */
void mu__progress_bytes(mu__progress_t *p, uint64_t done);

/* Where the step stands, in words (STATE); changed: more than a clock in
 * the text moved since the last. */
void mu__progress_text(mu__progress_t *p, int changed, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The step is over (END). */
void mu__progress_end(mu__progress_t *p);

#endif
