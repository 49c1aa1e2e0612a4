/* SPDX-License-Identifier: MIT */
/*
 * A process's memory figures from /proc/PID/status (Linux).
 */
#ifndef MU_CORE_PROC_INT_H
#define MU_CORE_PROC_INT_H

/*
 * The "FIELD:  N kB" line of process pid's status (pid 0: this process),
 * e.g. "VmRSS" or "VmHWM", in KiB; -1 when there is no such process or line.
 */
long mu__proc_status_kib(int pid, const char *field);

#endif
