/* SPDX-License-Identifier: MIT */
/*
 * A registry of metrics that muster's servers count into, and its text in
 * the Prometheus exposition format (version 0.0.4), for a scraper.
 *
 * Make one registry, hand it to the servers of this process through their
 * options (the `metrics` member of mu_tracker_opts_t and the others; NULL,
 * the default, counts nothing), and serve mu_metrics_render's text at
 * /metrics (`muster tracker --metrics HOST:PORT` does exactly that). The
 * series each server keeps are listed in docs/metrics.md. The text also
 * has the process's own figures (process_resident_memory_bytes,
 * process_open_fds, process_cpu_seconds_total, process_start_time_seconds)
 * read at each render.
 *
 * Thread-safe: servers count from their own threads while another thread
 * renders. A registry must outlive every server given it.
 */
#ifndef MUSTER_METRICS_H
#define MUSTER_METRICS_H

#include <stddef.h>

#include "muster/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mu_metrics_s mu_metrics_t;

/* 0 with *out, or MU_ENOMEM (*out NULL). */
MU_EXTERN int mu_metrics_new(mu_metrics_t **out);
/* NULL is a no-op. Only once no server counts into it any more. */
MU_EXTERN void mu_metrics_free(mu_metrics_t *m);

/*
 * The exposition text of everything in m now: *text (NUL-terminated, free
 * it with mu_free) and its length. 0 or MU_ENOMEM (*text NULL).
 */
MU_EXTERN int mu_metrics_render(mu_metrics_t *m, char **text, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
