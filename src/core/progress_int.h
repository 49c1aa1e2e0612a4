/* SPDX-License-Identifier: MIT */
/*
 * Progress a person watches: one status line on stderr, redrawn in place
 * ("\r" then erase-to-end-of-line), for long steps -- weight streaming,
 * hashing a large checkpoint, waiting for devices.
 *
 * Off unless the program turned it on (mu__progress_enable: the muster
 * command does, a program using the library does not) AND stderr is a
 * terminal when a step starts (isatty(2), checked then, so a --log-file
 * that took over stderr silences it). Piped or logged to a file, nothing
 * is written at all: no partial lines, no escapes.
 *
 * Redraws are at most every MU__PROGRESS_MS; the first update and the
 * last (done == total) always draw. mu__progress_end erases the line, and
 * mu__progress_clear erases whatever line is shown before other stderr
 * output (log lines, narration), the next update drawing it again. Any
 * thread; one lock serialises the writes.
 */
#ifndef MU_CORE_PROGRESS_INT_H
#define MU_CORE_PROGRESS_INT_H

#include <stdint.h>

#define MU__PROGRESS_MS 100

typedef struct {
	char label[160];
	uint64_t total;   /* bytes, 0 when unknown */
	int64_t t0_ms;    /* mu__now_ms at start */
	int64_t last_ms;  /* last draw, -1 before the first */
	int on;           /* drawing (decided at start) */
} mu__progress_t;

/* The program's choice; 0 by default. */
void mu__progress_enable(int on);

/* Begin a step named by the printf-style label; total in bytes, or 0. */
void mu__progress_start(mu__progress_t *p, uint64_t total, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* done of total bytes: "LABEL: 12.0 of 50.0 MiB (24%), 8.1 MiB/s, ETA 5 s". */
void mu__progress_bytes(mu__progress_t *p, uint64_t done);

/* A free-form state: "LABEL: TEXT"; force draws even within the interval. */
void mu__progress_text(mu__progress_t *p, int force, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The step is over: erase its line. */
void mu__progress_end(mu__progress_t *p);

/* Erase the line on show, if any, before writing something else to stderr. */
void mu__progress_clear(void);

#endif
