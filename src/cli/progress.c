/* SPDX-License-Identifier: MIT */
/* The command's status line (cli/progress_int.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/progress_int.h"

/* Steps drawn at once (a run streams to each device on a thread of its
 * own); a step past these is not drawn. */
#define MAX_STEPS 32

typedef struct {
	uint64_t id;        /* 0: a free slot */
	int64_t last_ms;    /* the step's clock at its last draw, -1 before */
} step_t;

static atomic_int enabled;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int shown;                /* under lock: a line is on the terminal */
static step_t steps[MAX_STEPS]; /* under lock */

void cli_progress_enable(int on)
{
	atomic_store(&enabled, on);
}

void cli_progress_install(void)
{
	cli_progress_enable(1);
	mu_progress_set_sink(cli_progress_sink, NULL);
}

static void clear_locked(void)
{
	if (shown) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
		shown = 0;
	}
}

void cli_progress_clear(void)
{
	pthread_mutex_lock(&lock);
	clear_locked();
	pthread_mutex_unlock(&lock);
}

void cli_log_stderr_sink(mu_log_level_t level, const char *module, const char *msg, void *ud)
{
	cli_progress_clear(); /* a status line on show would run into it */
	mu_log_stderr_sink(level, module, msg, ud);
}

static step_t *find(uint64_t id)
{
	for (int i = 0; i < MAX_STEPS; i++)
		if (steps[i].id == id)
			return &steps[i];
	return NULL;
}

static void human(char *buf, size_t n, double bytes)
{
	if (bytes >= 1024.0 * 1024 * 1024)
		snprintf(buf, n, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
	else
		snprintf(buf, n, "%.1f MiB", bytes / (1024.0 * 1024));
}

static void bytes_text(const mu_progress_event_t *ev, char *text, size_t n)
{
	char d[32], t[32], r[32];
	double s = (double)ev->elapsed_ms / 1000.0;
	int last = ev->total > 0 && ev->done >= ev->total;

	human(d, sizeof(d), (double)ev->done);
	human(r, sizeof(r), s > 0.05 ? (double)ev->done / s : 0);
	if (ev->total == 0) {
		snprintf(text, n, "%s, %s/s", d, r);
		return;
	}
	human(t, sizeof(t), (double)ev->total);
	if (ev->done > 0 && s > 0.05)
		snprintf(text, n, "%s of %s (%d%%), %s/s, ETA %.0f s", d, t,
		         (int)(100.0 * (double)ev->done / (double)ev->total), r,
		         s * (double)(ev->total - (last ? ev->total : ev->done)) / (double)ev->done);
	else
		snprintf(text, n, "%s of %s (%d%%)", d, t,
		         (int)(100.0 * (double)ev->done / (double)ev->total));
}

/* An update of step st: drawn over the line unless within the interval. */
static void update(step_t *st, const mu_progress_event_t *ev)
{
	char text[400];
	int force = ev->kind == MU_PROGRESS_STATE ? ev->changed
	                                          : ev->total > 0 && ev->done >= ev->total;

	if (!force && st->last_ms >= 0 && ev->elapsed_ms - st->last_ms < CLI_PROGRESS_MS)
		return;
	st->last_ms = ev->elapsed_ms;
	if (ev->kind == MU_PROGRESS_STATE)
		snprintf(text, sizeof(text), "%s", ev->state != NULL ? ev->state : "");
	else
		bytes_text(ev, text, sizeof(text));
	/* one write: the line never mixes with another thread's */
	fprintf(stderr, "\r\033[K%s: %s", ev->what, text);
	fflush(stderr);
	shown = 1;
}

void cli_progress_sink(const mu_progress_event_t *ev, void *ud)
{
	step_t *st;

	(void)ud;
	pthread_mutex_lock(&lock);
	st = find(ev->id);
	if (ev->kind == MU_PROGRESS_BEGIN) {
		/* drawn only if someone watches a terminal now */
		if (st == NULL && atomic_load(&enabled) && isatty(STDERR_FILENO) &&
		    (st = find(0)) != NULL) {
			st->id = ev->id;
			st->last_ms = -1;
		}
	} else if (st != NULL && ev->kind == MU_PROGRESS_END) {
		if (st->last_ms >= 0)
			clear_locked();
		st->id = 0;
	} else if (st != NULL && (ev->kind == MU_PROGRESS_BYTES || ev->kind == MU_PROGRESS_STATE)) {
		update(st, ev);
	}
	pthread_mutex_unlock(&lock);
}
