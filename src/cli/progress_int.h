/* SPDX-License-Identifier: MIT */
/*
 * The command's progress sink: one status line on stderr, redrawn in
 * place ("\r" then erase-to-end-of-line), drawn from the library's
 * progress events (mu_progress_set_sink in muster/common.h).
 *
 * A step is drawn only when progress is on (cli_progress_enable: on once
 * installed, off for --quiet) AND stderr is a terminal when the step
 * begins (isatty(2), checked then, so a --log-file that took over stderr
 * silences it). Piped or logged to a file, nothing is written at all: no
 * partial lines, no escapes.
 *
 *   BYTES  "WHAT: 12.0 MiB of 50.0 MiB (24%), 8.1 MiB/s, ETA 5 s"
 *          ("WHAT: 12.0 MiB, 8.1 MiB/s" when the total is unknown)
 *   STATE  "WHAT: STATE"
 *
 * Redraws of a step are at most every CLI_PROGRESS_MS of its clock; its
 * first update, its last bytes (done == total) and a changed state always
 * draw. END erases the line if the step drew one, and cli_progress_clear
 * erases whatever line is shown before other stderr output (log lines,
 * narration), the next update drawing it again. Any thread; one lock
 * serialises the writes.
 */
#ifndef MU_CLI_PROGRESS_INT_H
#define MU_CLI_PROGRESS_INT_H

#include "muster/common.h"

#define CLI_PROGRESS_MS 100

/* Install cli_progress_sink as the library's progress sink, with progress
 * on; before anything starts (main does it). */
void cli_progress_install(void);

/* On (1) or off (0, --quiet): decides for the steps that begin after. */
void cli_progress_enable(int on);

/* Erase the status line on show, if any, before writing to stderr. */
void cli_progress_clear(void);

/* The sink (what tests drive with events of their own). */
void cli_progress_sink(const mu_progress_event_t *ev, void *ud);

/* mu_log_stderr_sink, with the status line erased before each line. */
void cli_log_stderr_sink(mu_log_level_t level, const char *module, const char *msg,
                         void *ud);

#endif
