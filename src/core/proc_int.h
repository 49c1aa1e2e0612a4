/* SPDX-License-Identifier: MIT */
/*
 * A process's memory figures from /proc/PID/status (Linux), and giving
 * back the pages of a file mapping.
 */
#ifndef MU_CORE_PROC_INT_H
#define MU_CORE_PROC_INT_H

/*
 * The "FIELD:  N kB" line of process pid's status (pid 0: this process),
 * e.g. "VmRSS" or "VmHWM", in KiB; -1 when there is no such process or line.
 */
long mu__proc_status_kib(int pid, const char *field);

#include <stdint.h>

/* VmRSS of this process in bytes (0 when unknown). */
uint64_t mu__self_rss(void);
/* This process's peak resident set since it started (VmHWM; unlike
 * getrusage's ru_maxrss it does not carry over the high-water mark of the
 * process that forked it). */
uint64_t mu__self_peak_rss(void);

/*
 * The whole pages inside [p, p + n) of a private file mapping leave this
 * process's resident set (MADV_DONTNEED); the file stays in the page
 * cache, and the pages come back from it if they are read again.
 */
void mu__pages_release(const void *p, uint64_t n);
/* Read one byte of every page of [p, p + n) (and its last byte), so a
 * mapping's pages are resident before something is timed or a stage says
 * it is ready. */
void mu__pages_touch(const void *p, uint64_t n);

#endif
