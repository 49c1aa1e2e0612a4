/* SPDX-License-Identifier: MIT */
/*
 * Counting into a registry (muster/metrics.h) from the servers.
 *
 * A family is one metric name with its kind, help text and at most one
 * label (op, key, backend ...). Families are registered when a server
 * starts; a NULL registry gives a NULL family, and every call on a NULL
 * family does nothing, so a server without metrics pays one branch.
 *
 * Label values can come from peers (a tracker's device keys): a family
 * keeps at most MU_METRIC_MAX_SERIES of them, and values past that are
 * counted together under the value "_other", so a peer cannot grow the
 * registry without bound. Values are cut at 128 bytes.
 *
 * Any thread; each call takes the registry's lock briefly.
 */
#ifndef MU_CORE_METRICS_INT_H
#define MU_CORE_METRICS_INT_H

#include <stddef.h>
#include <stdint.h>

#include "muster/metrics.h"

#define MU_METRIC_MAX_SERIES 1000

typedef struct mu__metric_s mu__metric_t;

typedef enum {
	MU_METRIC_COUNTER,   /* only grows; name ends in _total */
	MU_METRIC_GAUGE,     /* a level: set, or moved up and down */
	MU_METRIC_HISTOGRAM  /* observations in cumulative buckets, _sum, _count */
} mu__metric_kind_t;

/* Bucket bounds for durations in seconds: 100 us to 60 s. */
extern const double mu__metric_seconds[];
extern const int mu__metric_nseconds;

/*
 * The family `name` in m, made on first use: kind, help (one line), label
 * (the label's name, or NULL for a family without one), and for
 * histograms the upper bounds of the buckets, ascending (+Inf is implied).
 * A second call with the same name returns the same family. NULL when m
 * is NULL or memory is short (counting into it then does nothing).
 */
mu__metric_t *mu__metric_family(mu_metrics_t *m, mu__metric_kind_t kind, const char *name,
                                const char *help, const char *label,
                                const double *bounds, int nbounds);

/* Counter or gauge: add v (a gauge may go down). lv: the label's value,
 * ignored (may be NULL) for a family without a label. */
void mu__metric_add(mu__metric_t *f, const char *lv, double v);
/* Gauge: set to v. */
void mu__metric_set(mu__metric_t *f, const char *lv, double v);
/* Histogram: one observation of v. */
void mu__metric_observe(mu__metric_t *f, const char *lv, double v);
/* Make the series of lv exist (at 0), so a scraper sees it before the
 * first event. */
void mu__metric_touch(mu__metric_t *f, const char *lv);

#endif
