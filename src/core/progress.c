/* SPDX-License-Identifier: MIT */
/* The status line of core/progress_int.h. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "core/progress_int.h"
#include "core/time_int.h"

static int enabled;
static uv_once_t lock_once = UV_ONCE_INIT;
static uv_mutex_t lock;
static int shown; /* under lock: a line is on the terminal */

static void lock_init(void)
{
	uv_mutex_init(&lock);
}

void mu__progress_enable(int on)
{
	uv_once(&lock_once, lock_init);
	enabled = on;
}

void mu__progress_start(mu__progress_t *p, uint64_t total, const char *fmt, ...)
{
	va_list ap;

	memset(p, 0, sizeof(*p));
	va_start(ap, fmt);
	vsnprintf(p->label, sizeof(p->label), fmt, ap);
	va_end(ap);
	p->total = total;
	p->t0_ms = mu__now_ms();
	p->last_ms = -1;
	p->on = enabled && isatty(STDERR_FILENO);
}

/* Draw "LABEL: text" over the line on show, unless within the interval. */
static void draw(mu__progress_t *p, int force, const char *text)
{
	int64_t now = mu__now_ms();

	if (!force && p->last_ms >= 0 && now - p->last_ms < MU__PROGRESS_MS)
		return;
	p->last_ms = now;
	uv_mutex_lock(&lock);
	/* one write: the line never mixes with another thread's */
	fprintf(stderr, "\r\033[K%s: %s", p->label, text);
	fflush(stderr);
	shown = 1;
	uv_mutex_unlock(&lock);
}

static void human(char *buf, size_t n, double bytes)
{
	if (bytes >= 1024.0 * 1024 * 1024)
		snprintf(buf, n, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
	else
		snprintf(buf, n, "%.1f MiB", bytes / (1024.0 * 1024));
}

void mu__progress_bytes(mu__progress_t *p, uint64_t done)
{
	char text[200], d[32], t[32], r[32];
	double s;
	int last = p->total > 0 && done >= p->total;

	if (!p->on)
		return;
	s = (double)(mu__now_ms() - p->t0_ms) / 1000.0;
	human(d, sizeof(d), (double)done);
	human(r, sizeof(r), s > 0.05 ? (double)done / s : 0);
	if (p->total == 0) {
		snprintf(text, sizeof(text), "%s, %s/s", d, r);
	} else {
		double left = done > 0 && s > 0.05 ? s * (double)(p->total - (last ? p->total : done)) /
		                                     (double)done : -1;

		human(t, sizeof(t), (double)p->total);
		if (left >= 0)
			snprintf(text, sizeof(text), "%s of %s (%d%%), %s/s, ETA %.0f s", d, t,
			         (int)(100.0 * (double)done / (double)p->total), r, left);
		else
			snprintf(text, sizeof(text), "%s of %s (%d%%)", d, t,
			         (int)(100.0 * (double)done / (double)p->total));
	}
	draw(p, last, text);
}

void mu__progress_text(mu__progress_t *p, int force, const char *fmt, ...)
{
	char text[400];
	va_list ap;

	if (!p->on)
		return;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	draw(p, force, text);
}

void mu__progress_clear(void)
{
	if (!enabled)
		return;
	uv_mutex_lock(&lock);
	if (shown) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
		shown = 0;
	}
	uv_mutex_unlock(&lock);
}

void mu__progress_end(mu__progress_t *p)
{
	if (p->on && p->last_ms >= 0)
		mu__progress_clear();
	p->on = 0;
}
