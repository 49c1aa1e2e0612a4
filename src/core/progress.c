/* SPDX-License-Identifier: MIT */
/*
 * The progress sink, and the events of core/progress_int.h. The sink is
 * written once by mu_progress_set_sink() before anything starts and only
 * read afterwards, as the log sink is; step ids come from one atomic
 * counter.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "muster/common.h"
#include "core/progress_int.h"
#include "core/time_int.h"

static mu_progress_sink_cb sink_cb;
static void *sink_ud;
static atomic_uint_fast64_t next_id;

void mu_progress_set_sink(mu_progress_sink_cb cb, void *ud)
{
	sink_cb = cb;
	sink_ud = ud;
}

static void emit(const mu__progress_t *p, mu_progress_kind_t kind, uint64_t done,
                 const char *state, int changed)
{
	mu_progress_event_t ev;

	memset(&ev, 0, sizeof(ev));
	ev.struct_size = sizeof(ev);
	ev.kind = kind;
	ev.id = p->id;
	ev.what = p->what;
	ev.done = done;
	ev.total = p->total;
	ev.state = state;
	ev.changed = changed;
	ev.elapsed_ms = mu__now_ms() - p->t0_ms;
	sink_cb(&ev, sink_ud);
}

void mu__progress_start(mu__progress_t *p, uint64_t total, const char *fmt, ...)
{
	va_list ap;

	memset(p, 0, sizeof(*p));
	p->on = sink_cb != NULL;
	if (!p->on)
		return;
	va_start(ap, fmt);
	vsnprintf(p->what, sizeof(p->what), fmt, ap);
	va_end(ap);
	p->id = atomic_fetch_add(&next_id, 1) + 1;
	p->total = total;
	p->t0_ms = mu__now_ms();
	emit(p, MU_PROGRESS_BEGIN, 0, NULL, 0);
}

void mu__progress_bytes(mu__progress_t *p, uint64_t done)
{
	if (p->on)
		emit(p, MU_PROGRESS_BYTES, done, NULL, 0);
}

void mu__progress_text(mu__progress_t *p, int changed, const char *fmt, ...)
{
	char state[400];
	va_list ap;

	if (!p->on)
		return;
	va_start(ap, fmt);
	vsnprintf(state, sizeof(state), fmt, ap);
	va_end(ap);
	emit(p, MU_PROGRESS_STATE, 0, state, changed != 0);
}

void mu__progress_end(mu__progress_t *p)
{
	if (p->on)
		emit(p, MU_PROGRESS_END, 0, NULL, 0);
	p->on = 0;
}
