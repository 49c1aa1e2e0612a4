/* SPDX-License-Identifier: MIT */
/*
 * The metrics registry and its Prometheus text (muster/metrics.h,
 * core/metrics_int.h).
 *
 * Written here rather than taken from a library: Debian 12 has no C
 * client for Prometheus (prometheus-cpp is C++, and libprom is not
 * packaged), and what muster needs is small: counters, gauges and
 * histograms with at most one label, and the text format 0.0.4. The
 * format's rules followed here: a HELP and a TYPE line before a family's
 * samples; label values escape backslash, double quote and newline, HELP
 * text backslash and newline; histogram buckets are cumulative, labelled
 * le="..." and end with le="+Inf", which equals _count; numbers are Go's
 * float text (integers print plainly, infinities as +Inf/-Inf, NaN).
 * tests/unit/core/test_metrics.c checks the text, and the interop test
 * has Prometheus itself (and promtool) read it.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "muster/metrics.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/list_int.h"
#include "core/metrics_int.h"
#include "core/strmap_int.h"

#define MAX_LABEL_VALUE 128
#define MAX_TEXT ((size_t)256 << 20)

const double mu__metric_seconds[] = {0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                     0.05,   0.1,    0.25,  0.5,    1,     2.5,  5,
                                     10,     30,     60};
const int mu__metric_nseconds = (int)(sizeof(mu__metric_seconds) / sizeof(double));

typedef struct {
	mu__list_t node;    /* in family.series, in order of creation */
	double value;       /* counter, gauge */
	double sum;         /* histogram */
	uint64_t count;
	uint64_t *buckets;  /* nbounds counts, each of its own bucket only */
	char lv[];
} series_t;

struct mu__metric_s {
	mu__list_t node;    /* in the registry's families */
	mu__metric_kind_t kind;
	char *name, *help, *label; /* label NULL: one series, lv "" */
	double *bounds;
	int nbounds;
	mu__strmap_t map;   /* label value -> series_t */
	mu__list_t series;
	mu_metrics_t *reg;
};

struct mu_metrics_s {
	uv_mutex_t lock;    /* guards every family and series */
	mu__list_t families;
};

int mu_metrics_new(mu_metrics_t **out)
{
	mu_metrics_t *m = mu__calloc(1, sizeof(*m));

	*out = NULL;
	if (m == NULL)
		return MU_ENOMEM;
	if (uv_mutex_init(&m->lock) != 0) {
		mu__free(m);
		return MU_ENOMEM;
	}
	mu__list_init(&m->families);
	*out = m;
	return 0;
}

static void family_free(mu__metric_t *f)
{
	mu__list_t *it, *tmp;

	mu__list_foreach_safe(it, tmp, &f->series) {
		series_t *s = mu__container_of(it, series_t, node);

		mu__free(s->buckets);
		mu__free(s);
	}
	mu__strmap_free(&f->map, NULL);
	mu__free(f->name);
	mu__free(f->help);
	mu__free(f->label);
	mu__free(f->bounds);
	mu__free(f);
}

void mu_metrics_free(mu_metrics_t *m)
{
	mu__list_t *it, *tmp;

	if (m == NULL)
		return;
	mu__list_foreach_safe(it, tmp, &m->families)
		family_free(mu__container_of(it, mu__metric_t, node));
	uv_mutex_destroy(&m->lock);
	mu__free(m);
}

static mu__metric_t *find_family(mu_metrics_t *m, const char *name)
{
	mu__list_t *it;

	mu__list_foreach(it, &m->families) {
		mu__metric_t *f = mu__container_of(it, mu__metric_t, node);

		if (strcmp(f->name, name) == 0)
			return f;
	}
	return NULL;
}

mu__metric_t *mu__metric_family(mu_metrics_t *m, mu__metric_kind_t kind, const char *name,
                                const char *help, const char *label,
                                const double *bounds, int nbounds)
{
	mu__metric_t *f;

	if (m == NULL)
		return NULL;
	uv_mutex_lock(&m->lock);
	f = find_family(m, name);
	if (f != NULL) {
		uv_mutex_unlock(&m->lock);
		return f;
	}
	f = mu__calloc(1, sizeof(*f));
	if (f != NULL) {
		f->kind = kind;
		f->reg = m;
		f->name = mu__strdup(name);
		f->help = mu__strdup(help);
		f->label = label != NULL ? mu__strdup(label) : NULL;
		f->nbounds = kind == MU_METRIC_HISTOGRAM ? nbounds : 0;
		f->bounds = f->nbounds > 0 ? mu__malloc(sizeof(double) * (size_t)nbounds) : NULL;
		mu__strmap_init(&f->map);
		mu__list_init(&f->series);
		if (f->name == NULL || f->help == NULL || (label != NULL && f->label == NULL) ||
		    (f->nbounds > 0 && f->bounds == NULL)) {
			family_free(f);
			f = NULL;
		} else {
			if (f->nbounds > 0)
				memcpy(f->bounds, bounds, sizeof(double) * (size_t)nbounds);
			mu__list_insert_tail(&m->families, &f->node);
		}
	}
	uv_mutex_unlock(&m->lock);
	return f;
}

/* Under the lock: the series of lv, made when new; NULL when memory is
 * short. Past MU_METRIC_MAX_SERIES new values share "_other". */
static series_t *series_get(mu__metric_t *f, const char *lv)
{
	size_t n;
	series_t *s;

	if (f->label == NULL || lv == NULL)
		lv = "";
	n = strnlen(lv, MAX_LABEL_VALUE);
	s = mu__strmap_get(&f->map, lv, n);
	if (s != NULL)
		return s;
	if (f->map.count >= MU_METRIC_MAX_SERIES) {
		lv = "_other";
		n = strlen(lv);
		if ((s = mu__strmap_get(&f->map, lv, n)) != NULL)
			return s;
	}
	s = mu__calloc(1, sizeof(*s) + n + 1);
	if (s == NULL)
		return NULL;
	memcpy(s->lv, lv, n);
	if (f->nbounds > 0 &&
	    (s->buckets = mu__calloc((size_t)f->nbounds, sizeof(uint64_t))) == NULL) {
		mu__free(s);
		return NULL;
	}
	if (mu__strmap_put(&f->map, s->lv, n, s, NULL) != 0) {
		mu__free(s->buckets);
		mu__free(s);
		return NULL;
	}
	mu__list_insert_tail(&f->series, &s->node);
	return s;
}

void mu__metric_add(mu__metric_t *f, const char *lv, double v)
{
	series_t *s;

	if (f == NULL)
		return;
	uv_mutex_lock(&f->reg->lock);
	if ((s = series_get(f, lv)) != NULL)
		s->value += v;
	uv_mutex_unlock(&f->reg->lock);
}

void mu__metric_set(mu__metric_t *f, const char *lv, double v)
{
	series_t *s;

	if (f == NULL)
		return;
	uv_mutex_lock(&f->reg->lock);
	if ((s = series_get(f, lv)) != NULL)
		s->value = v;
	uv_mutex_unlock(&f->reg->lock);
}

void mu__metric_observe(mu__metric_t *f, const char *lv, double v)
{
	series_t *s;
	int i;

	if (f == NULL)
		return;
	uv_mutex_lock(&f->reg->lock);
	if ((s = series_get(f, lv)) != NULL) {
		for (i = 0; i < f->nbounds && v > f->bounds[i]; i++)
			;
		if (i < f->nbounds)
			s->buckets[i]++;
		s->sum += v;
		s->count++;
	}
	uv_mutex_unlock(&f->reg->lock);
}

void mu__metric_touch(mu__metric_t *f, const char *lv)
{
	if (f == NULL)
		return;
	uv_mutex_lock(&f->reg->lock);
	series_get(f, lv);
	uv_mutex_unlock(&f->reg->lock);
}

/* ---- the text ---- */

/* A sample value as Prometheus writes one. */
static void num(char *out, size_t n, double v)
{
	if (isnan(v))
		snprintf(out, n, "NaN");
	else if (isinf(v))
		snprintf(out, n, "%s", v > 0 ? "+Inf" : "-Inf");
	else if (v == floor(v) && fabs(v) < 9007199254740992.0)
		snprintf(out, n, "%.0f", v);
	else /* the shortest text that reads back as v: 0.1, not 0.10000000000000001 */
		for (int prec = 15; prec <= 17; prec++) {
			snprintf(out, n, "%.*g", prec, v);
			if (strtod(out, NULL) == v)
				break;
		}
}

/* s with the escapes of a label value (quote != 0) or of HELP text. */
static int escaped(mu__buf_t *b, const char *s, int quote)
{
	int rc = 0;

	for (; *s != '\0' && rc == 0; s++) {
		if (*s == '\\')
			rc = mu__buf_appends(b, "\\\\");
		else if (*s == '\n')
			rc = mu__buf_appends(b, "\\n");
		else if (*s == '"' && quote)
			rc = mu__buf_appends(b, "\\\"");
		else
			rc = mu__buf_appendc(b, *s);
	}
	return rc;
}

/* name{label="lv",le="x"} v  (le: NULL for no bucket label) */
static int sample(mu__buf_t *b, const mu__metric_t *f, const char *suffix, const series_t *s,
                  const char *le, double v)
{
	char val[64];
	int rc = mu__buf_printf(b, "%s%s", f->name, suffix);
	int labels = f->label != NULL || le != NULL;

	if (rc == 0 && labels)
		rc = mu__buf_appendc(b, '{');
	if (rc == 0 && f->label != NULL) {
		rc = mu__buf_printf(b, "%s=\"", f->label);
		if (rc == 0)
			rc = escaped(b, s->lv, 1);
		if (rc == 0)
			rc = mu__buf_appends(b, le != NULL ? "\"," : "\"");
	}
	if (rc == 0 && le != NULL)
		rc = mu__buf_printf(b, "le=\"%s\"", le);
	if (rc == 0 && labels)
		rc = mu__buf_appendc(b, '}');
	num(val, sizeof(val), v);
	return rc == 0 ? mu__buf_printf(b, " %s\n", val) : rc;
}

static int render_series(mu__buf_t *b, const mu__metric_t *f, const series_t *s)
{
	char le[64];
	uint64_t cum = 0;
	int i, rc = 0;

	if (f->kind != MU_METRIC_HISTOGRAM)
		return sample(b, f, "", s, NULL, s->value);
	for (i = 0; i < f->nbounds && rc == 0; i++) {
		cum += s->buckets[i];
		num(le, sizeof(le), f->bounds[i]);
		rc = sample(b, f, "_bucket", s, le, (double)cum);
	}
	if (rc == 0)
		rc = sample(b, f, "_bucket", s, "+Inf", (double)s->count);
	if (rc == 0)
		rc = sample(b, f, "_sum", s, NULL, s->sum);
	if (rc == 0)
		rc = sample(b, f, "_count", s, NULL, (double)s->count);
	return rc;
}

static int render_family(mu__buf_t *b, const mu__metric_t *f)
{
	static const char *const kinds[] = {"counter", "gauge", "histogram"};
	mu__list_t *it;
	int rc;

	if (mu__list_empty(&f->series))
		return 0; /* a family with no sample yet says nothing */
	rc = mu__buf_printf(b, "# HELP %s ", f->name);
	if (rc == 0)
		rc = escaped(b, f->help, 0);
	if (rc == 0)
		rc = mu__buf_printf(b, "\n# TYPE %s %s\n", f->name, kinds[f->kind]);
	mu__list_foreach(it, &f->series) {
		if (rc != 0)
			break;
		rc = render_series(b, f, mu__container_of(it, series_t, node));
	}
	return rc;
}

/* ---- the process's own figures, read at each render (Linux /proc) ---- */

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory's own descriptor */
}

/* utime + stime in seconds, and the start time in seconds since the epoch,
 * from /proc/self/stat (fields 14, 15 and 22) and /proc/stat's btime. */
static int proc_times(double *cpu, double *start)
{
	char buf[1024], *p;
	unsigned long long ut, st, starttime, btime = 0;
	long tck = sysconf(_SC_CLK_TCK);
	FILE *f = fopen("/proc/self/stat", "r");
	size_t n;

	if (f == NULL || tck <= 0) {
		if (f != NULL)
			fclose(f);
		return -1;
	}
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* the command name may hold spaces */
	if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu "
	                        "%*d %*d %*d %*d %*d %*d %llu", &ut, &st, &starttime) != 3)
		return -1;
	f = fopen("/proc/stat", "r");
	while (f != NULL && fgets(buf, sizeof(buf), f) != NULL)
		if (sscanf(buf, "btime %llu", &btime) == 1)
			break;
	if (f != NULL)
		fclose(f);
	*cpu = (double)(ut + st) / (double)tck;
	*start = (double)btime + (double)starttime / (double)tck;
	return 0;
}

static int render_process(mu__buf_t *b)
{
	long pages = 0, psz = sysconf(_SC_PAGESIZE);
	double cpu, start;
	FILE *f = fopen("/proc/self/statm", "r");
	int fds = open_fds(), rc = 0;

	if (f != NULL) {
		if (fscanf(f, "%*d %ld", &pages) != 1)
			pages = 0;
		fclose(f);
	}
	rc = mu__buf_printf(b, "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
	                       "# TYPE process_resident_memory_bytes gauge\n"
	                       "process_resident_memory_bytes %ld\n", pages * psz);
	if (rc == 0 && fds >= 0)
		rc = mu__buf_printf(b, "# HELP process_open_fds Number of open file descriptors.\n"
		                       "# TYPE process_open_fds gauge\nprocess_open_fds %d\n", fds);
	if (rc == 0 && proc_times(&cpu, &start) == 0)
		rc = mu__buf_printf(b, "# HELP process_cpu_seconds_total Total user and system CPU "
		                       "time spent in seconds.\n# TYPE process_cpu_seconds_total counter\n"
		                       "process_cpu_seconds_total %.2f\n"
		                       "# HELP process_start_time_seconds Start time of the process "
		                       "since unix epoch in seconds.\n"
		                       "# TYPE process_start_time_seconds gauge\n"
		                       "process_start_time_seconds %.2f\n", cpu, start);
	if (rc == 0)
		rc = mu__buf_printf(b, "# HELP muster_build_info The muster version this process "
		                       "runs.\n# TYPE muster_build_info gauge\n"
		                       "muster_build_info{version=\"%s\"} 1\n", mu_version());
	return rc;
}

int mu_metrics_render(mu_metrics_t *m, char **text, size_t *len)
{
	mu__buf_t b;
	mu__list_t *it;
	int rc = 0;

	*text = NULL;
	mu__buf_init(&b, MAX_TEXT);
	uv_mutex_lock(&m->lock);
	mu__list_foreach(it, &m->families) {
		rc = render_family(&b, mu__container_of(it, mu__metric_t, node));
		if (rc != 0)
			break;
	}
	uv_mutex_unlock(&m->lock);
	if (rc == 0)
		rc = render_process(&b);
	if (rc == 0)
		rc = mu__buf_appendc(&b, '\0');
	if (rc != 0) {
		mu__buf_free(&b);
		return MU_ENOMEM;
	}
	*text = mu__buf_take(&b, len);
	if (*text == NULL)
		return MU_ENOMEM;
	(*len)--;
	return 0;
}
