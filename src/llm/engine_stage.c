/* SPDX-License-Identifier: MIT */
/*
 * One stage of the engine (llm/engine_priv_int.h): which sequences it
 * opens and closes, the batch it runs next, what its reply hands on, and
 * what happens when it fails: a stage's own error ends the sequences of
 * the batch; a lost device ends everything, or, when the engine can
 * recover, is replaced and has its KV caches rebuilt by replaying the
 * inputs the engine kept. A stage that comes back where it was (opts.
 * retry_ms) is down while it is lost: tried again with a growing wait,
 * and rebuilt the same way once it answers.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/log_int.h"
#include "core/sock_int.h"
#include "core/time_int.h"
#include "llm/engine_priv_int.h"

#define LOG "engine"
#define RETRY_FIRST_MS 100 /* the first wait between attempts to bring a stage back */

/* ---- the inputs a stage's positions keep for replay ---- */

/* Rows [pos, pos + m) of stage k's inputs arrive (k >= 1). */
static int in_push(mu__eng_t *e, mu__eng_inbuf_t *b, const float *rows, int32_t m)
{
	size_t dim = (size_t)e->o.dim;

	if (b->n + m > b->cap) {
		int32_t cap = b->cap ? b->cap : 16;
		float *p;

		while (cap < b->n + m)
			cap *= 2;
		if ((p = mu__realloc(b->rows, (size_t)cap * dim * sizeof(float))) == NULL)
			return MU_ENOMEM;
		b->rows = p;
		b->cap = cap;
	}
	memcpy(b->rows + (size_t)b->n * dim, rows, (size_t)m * dim * sizeof(float));
	b->n += m;
	return 0;
}

/* Positions below upto are done at the stage: drop their inputs. */
static void in_drop(mu__eng_t *e, mu__eng_inbuf_t *b, int32_t upto)
{
	size_t dim = (size_t)e->o.dim;
	int32_t k = upto - b->base;

	if (k <= 0)
		return;
	memmove(b->rows, b->rows + (size_t)k * dim, (size_t)(b->n - k) * dim * sizeof(float));
	b->n -= k;
	b->base = upto;
}

/* ---- one stage ---- */

/* The device is gone (or silent), as opposed to a stage's own ERROR. */
static int lost(int rc)
{
	return rc == MU_EEOF || rc == -ETIMEDOUT || rc == -ECONNRESET || rc == -EPIPE ||
	       rc == -ECONNABORTED || rc == -ENOTCONN || rc == -EBADF || rc == -EIO;
}

/* A lost device found by an open or close is handled like one found by a
 * batch (replaced, when the engine can); the open is tried again after.
 * 1 when something changed (the round made progress). */
int mu__eng_control(mu__eng_t *e, int k)
{
	mu__eng_stage_t *s = &e->s[k];
	char why[512];
	mu__list_t *it;
	int rc, moved = 0;

	mu__list_foreach(it, &e->active) {
		mu__eng_seq_t *q = mu__container_of(it, mu__eng_seq_t, node);

		if (!q->ending && !q->opened[k] && (k == 0 || q->opened[k - 1])) {
			rc = s->l.open(s->l.ud, q->sid, q->r.ctx, why, sizeof(why));
			moved = 1;
			if (rc == 0) {
				q->opened[k] = 1;
			} else if (lost(rc)) {
				mu__eng_stage_failed(e, k, rc, why);
				return 1; /* the list may have changed: the next round goes on */
			} else {
				mu__eng_seq_end(q, rc, MU__STOP_LENGTH, why);
			}
		}
		if (q->ending && q->opened[k] && !mu__eng_in_flight(e, q)) {
			rc = s->l.close(s->l.ud, q->sid, why, sizeof(why));
			q->opened[k] = 0;
			moved = 1;
			if (lost(rc)) {
				mu__eng_stage_failed(e, k, rc, why);
				return 1;
			}
		}
	}
	return moved;
}

/* Take rows of q for stage k (at most budget); 0 when it has none. */
static int32_t take(mu__eng_t *e, int k, mu__eng_seq_t *q, int32_t budget, int32_t row)
{
	mu__eng_stage_t *s = &e->s[k];
	int32_t m = q->avail[k] - q->sent[k];
	size_t dim = (size_t)e->o.dim;

	if (q->ending || !q->opened[k] || q->inflight[k] || m <= 0 || budget <= 0)
		return 0;
	m = m < budget ? m : budget;
	if (k == 0)
		memcpy(s->tok + row, q->toks + q->sent[0], (size_t)m * sizeof(int32_t));
	else
		memcpy(s->x + (size_t)row * dim,
		       q->in[k].rows + (size_t)(q->sent[k] - q->in[k].base) * dim,
		       (size_t)m * dim * sizeof(float));
	s->items[s->nbatch] = (mu__dec_item_t){q->sid, q->sent[k], m, 0};
	s->batch[s->nbatch++] = q;
	q->sent[k] += m;
	q->inflight[k] = 1;
	return m;
}

/* Build and submit stage k's next batch; 1 when one went out. The
 * sequences are taken from a rotating start so none waits behind the
 * others' prefills for long. */
int mu__eng_start_batch(mu__eng_t *e, int k, mu__eng_seq_t **all, int nall, char *why,
                        size_t wl, int *err)
{
	mu__eng_stage_t *s = &e->s[k];
	int32_t budget = s->l.max_chunk, rows = 0;
	int i, start = nall > 0 ? e->rotate++ % nall : 0, most = MU__DEC_MAX_ITEMS;

	/* Stage 0 takes a group of about S/N sequences, so that N groups fill
	 * the N stages (each later stage takes what reaches it): batching
	 * everything at once would leave all but one stage idle. */
	if (k == 0 && e->n > 1)
		most = (nall + e->n - 1) / e->n;
	if (!e->o.batch)
		most = 1;
	*err = 0;
	s->nbatch = 0;
	for (i = 0; i < nall && budget > 0; i++) {
		if (s->nbatch == most)
			break;
		int32_t m = take(e, k, all[(start + i) % nall], budget, rows);

		rows += m;
		budget -= m;
	}
	if (s->nbatch == 0)
		return 0;
	*err = s->l.submit(s->l.ud, s->items, s->nbatch, rows, s->tok, s->x, why, wl);
	if (*err != 0) { /* nothing went: sent again when the stage can take it */
		for (i = 0; i < s->nbatch; i++) {
			s->batch[i]->inflight[k] = 0;
			s->batch[i]->sent[k] = s->batch[i]->done[k];
		}
		return 0;
	}
	s->busy = 1;
	s->stats.batches++;
	s->stats.rows += (uint64_t)rows;
	return 1;
}

/* Rows of stage k's inputs for q, kept for replay while the budget
 * lasts; past it, q keeps only what is still to be run. */
static int keep(mu__eng_t *e, mu__eng_seq_t *q, int k, const float *rows, int32_t n)
{
	uint64_t row = (uint64_t)e->o.dim * sizeof(float);

	if (e->o.recover != NULL && !q->no_replay) {
		if (__atomic_load_n(&e->kept, __ATOMIC_RELAXED) + (uint64_t)n * row > e->o.replay_bytes) {
			q->no_replay = 1;
			for (int j = 1; j < e->n; j++) {
				__atomic_fetch_sub(&e->kept, (uint64_t)q->in[j].n * row, __ATOMIC_RELAXED);
				in_drop(e, &q->in[j], q->done[j]);
			}
		} else {
			__atomic_fetch_add(&e->kept, (uint64_t)n * row, __ATOMIC_RELAXED);
		}
	}
	return in_push(e, &q->in[k], rows, n);
}

/* Run one batch on link k and wait for it (replays). */
static int run_now(mu__eng_t *e, int k, const mu__dec_item_t *it, const int32_t *tok,
                   const float *x, char *why, size_t wl)
{
	mu__eng_stage_t *s = &e->s[k];
	const float *out;
	double ms;
	mu_stream_t *st;
	char ready;
	int rc = s->l.submit(s->l.ud, it, 1, it->n, tok, x, why, wl);

	if (rc == 0 && (st = s->l.stream(s->l.ud)) != NULL) {
		if (mu__sock_poll(&st, 1, &ready, e->o.io_timeout_ms) != 1) {
			snprintf(why, wl, "%s: no reply in %d ms while replaying", s->l.name,
			         e->o.io_timeout_ms);
			return -ETIMEDOUT;
		}
	}
	return rc == 0 ? s->l.finish(s->l.ud, &out, &ms, why, wl) : rc;
}

/*
 * Stage k is on a new device: open every sequence there again and run the
 * positions it had done, from the inputs kept, so its KV cache is what
 * the lost device held (the kernels are batch-invariant: the same bits).
 * The outputs are not needed; later stages have them already.
 */
static int replay(mu__eng_t *e, int k, char *why, size_t wl)
{
	mu__eng_stage_t *s = &e->s[k];
	size_t dim = (size_t)e->o.dim;
	mu__list_t *it;
	int rc;

	mu__list_foreach(it, &e->active)
		mu__container_of(it, mu__eng_seq_t, node)->opened[k] = 0;
	mu__list_foreach(it, &e->active) {
		mu__eng_seq_t *q = mu__container_of(it, mu__eng_seq_t, node);

		if (q->ending || q->done[k] == 0)
			continue;
		if (k > 0 && q->no_replay) {
			mu__eng_seq_end(q, MU_EFAIL, MU__STOP_LENGTH, "its stage was lost and its inputs there were "
			        "not kept (past the replay memory)");
			continue;
		}
		if ((rc = s->l.open(s->l.ud, q->sid, q->r.ctx, why, wl)) != 0)
			return rc;
		q->opened[k] = 1;
		for (int32_t pos = 0, m; pos < q->done[k]; pos += m) {
			mu__dec_item_t item = {q->sid, pos, 0, 0};

			m = q->done[k] - pos < s->l.max_chunk ? q->done[k] - pos : s->l.max_chunk;
			item.n = m;
			rc = run_now(e, k, &item, k == 0 ? q->toks + pos : NULL,
			             k == 0 ? NULL : q->in[k].rows + (size_t)(pos - q->in[k].base) * dim,
			             why, wl);
			if (rc != 0)
				return rc;
			e->st.replayed += (uint64_t)m;
		}
	}
	return 0;
}

/* Stage k's reply: hand each item's rows on, or sample. */
int mu__eng_reply(mu__eng_t *e, int k, char *why, size_t wl)
{
	mu__eng_stage_t *s = &e->s[k];
	const float *out;
	double ms = 0;
	size_t width = (size_t)(k == e->n - 1 ? e->o.vocab : e->o.dim);
	int i, rc = s->l.finish(s->l.ud, &out, &ms, why, wl);

	s->busy = 0;
	s->stats.busy_ms += ms;
	for (i = 0; i < s->nbatch; i++) {
		mu__eng_seq_t *q = s->batch[i];
		int32_t n = s->items[i].n;

		q->inflight[k] = 0;
		if (rc != 0) { /* not done there: sent again if the stage comes back */
			q->sent[k] = q->done[k];
			continue;
		}
		q->done[k] += n;
		if (k > 0 && (e->o.recover == NULL || q->no_replay))
			in_drop(e, &q->in[k], q->done[k]);
		if (k < e->n - 1) {
			if (!q->ending && keep(e, q, k + 1, out, n) != 0)
				mu__eng_seq_end(q, MU_ENOMEM, MU__STOP_LENGTH, "out of memory");
			q->avail[k + 1] += n;
			out += (size_t)n * width;
			continue;
		}
		if (!q->ending && q->done[k] == q->ntok) {
			s->stats.tokens++;
			mu__eng_sampled(e, q, out);
		}
		out += width;
	}
	return rc;
}

/* Every sequence ends with why: the chain is broken for good. */
static void fail_all(mu__eng_t *e, int k, int rc, const char *why)
{
	mu__list_t *it;

	mu__log(MU_LOG_ERROR, LOG, "%s failed: %s", e->s[k].l.name, why);
	mu__list_foreach(it, &e->active) {
		mu__eng_seq_t *q = mu__container_of(it, mu__eng_seq_t, node);

		mu__eng_seq_end(q, rc, MU__STOP_LENGTH, why);
		memset(q->inflight, 0, (size_t)e->n * sizeof(int));
		memset(q->opened, 0, (size_t)e->n * sizeof(int));
	}
	mu__eng_stop(e);
}

/* A stage answered a batch with an error of its own: those sequences end;
 * the connection is in step and the others go on. */
static void fail_batch(mu__eng_t *e, int k, int rc, const char *why)
{
	for (int i = 0; i < e->s[k].nbatch; i++)
		mu__eng_seq_end(e->s[k].batch[i], rc, MU__STOP_LENGTH, why);
}

/* ---- a stage that comes back where it was (opts.retry_ms) ---- */

/* Nothing of any sequence is open or in flight at stage k: its peer is
 * gone, or a new connection starts clean. */
static void forget(mu__eng_t *e, int k)
{
	mu__list_t *it;

	mu__list_foreach(it, &e->active) {
		mu__eng_seq_t *q = mu__container_of(it, mu__eng_seq_t, node);

		q->opened[k] = 0;
		q->inflight[k] = 0;
		q->sent[k] = q->done[k];
	}
	e->s[k].busy = 0;
}

/* why without the stage's name in front, which the texts of a down
 * stage give once. */
static const char *unnamed(const mu__eng_stage_t *s, const char *why)
{
	size_t n = strlen(s->l.name);

	return strncmp(why, s->l.name, n) == 0 && strncmp(why + n, ": ", 2) == 0 ? why + n + 2 : why;
}

/* Stage k is lost: down from now, unless it was already, and tried again
 * at once (it may only have closed an idle connection). */
static void stage_down(mu__eng_t *e, int k, const char *why)
{
	mu__eng_stage_t *s = &e->s[k];

	forget(e, k);
	if (s->down)
		return;
	why = unnamed(s, why);
	mu__log(MU_LOG_WARN, LOG, "%s is lost (%s): reconnecting", s->l.name, why);
	uv_mutex_lock(&e->lock);
	s->down = 1;
	s->down_at = mu__clock_ms();
	s->down_since = (int64_t)time(NULL);
	s->next_try = s->down_at;
	s->backoff_ms = RETRY_FIRST_MS;
	snprintf(s->lost, sizeof(s->lost), "%s", why);
	s->retry[0] = '\0';
	uv_mutex_unlock(&e->lock);
}

/* One attempt at bringing stage k back: a new connection (recover), then
 * its KV caches rebuilt from the inputs kept. Else the next attempt waits
 * longer, up to retry_ms. */
static void try_back(mu__eng_t *e, int k)
{
	mu__eng_stage_t *s = &e->s[k];
	char why[512] = "";
	int rc = e->o.recover(e->o.recover_ud, k, why, sizeof(why));

	if (rc == 0 && (rc = replay(e, k, why, sizeof(why))) == 0) {
		uv_mutex_lock(&e->lock);
		s->down = 0;
		e->st.recoveries++;
		e->st.recovery_ms += mu__clock_ms() - s->down_at;
		uv_mutex_unlock(&e->lock);
		mu__log(MU_LOG_INFO, LOG, "%s is back after %.1f s", s->l.name,
		        (mu__clock_ms() - s->down_at) / 1e3);
		return;
	}
	forget(e, k); /* a replay cut short: the next connection starts over */
	if (strcmp(s->retry, unnamed(s, why)) != 0)
		mu__log(MU_LOG_WARN, LOG, "%s is still down: %s", s->l.name, unnamed(s, why));
	uv_mutex_lock(&e->lock);
	snprintf(s->retry, sizeof(s->retry), "%s", unnamed(s, why));
	s->next_try = mu__clock_ms() + s->backoff_ms;
	s->backoff_ms = s->backoff_ms * 2 < e->o.retry_ms ? s->backoff_ms * 2 : e->o.retry_ms;
	uv_mutex_unlock(&e->lock);
}

static void down_of(mu__eng_t *e, int k, mu__eng_down_t *d)
{
	const mu__eng_stage_t *s = &e->s[k];

	snprintf(d->name, sizeof(d->name), "%s", s->l.name);
	d->since = s->down_since;
	d->down_ms = mu__clock_ms() - s->down_at;
	snprintf(d->lost, sizeof(d->lost), "%s", s->lost);
	snprintf(d->retry, sizeof(d->retry), "%s", s->retry);
}

int mu__eng_stage_down(mu__eng_t *e, int k, mu__eng_down_t *out)
{
	int down;

	uv_mutex_lock(&e->lock);
	down = k >= 0 && k < e->n && e->s[k].down;
	if (down)
		down_of(e, k, out);
	uv_mutex_unlock(&e->lock);
	return down;
}

void mu__eng_check_down(mu__eng_t *e)
{
	mu__eng_down_t d;
	mu__list_t *it;
	char text[1400];

	for (int k = 0; k < e->n; k++) {
		mu__eng_stage_t *s = &e->s[k];

		if (s->down && mu__clock_ms() >= s->next_try)
			try_back(e, k);
		if (!s->down || mu__clock_ms() - s->down_at < e->o.io_timeout_ms)
			continue;
		/* waited long enough: what needs it fails, saying what is wrong */
		down_of(e, k, &d);
		mu__eng_down_text(&d, text, sizeof(text));
		mu__list_foreach(it, &e->active)
			mu__eng_seq_end(mu__container_of(it, mu__eng_seq_t, node), MU__ENG_EDOWN,
			                MU__STOP_LENGTH, text);
	}
}

int mu__eng_down_wait(mu__eng_t *e)
{
	double now = mu__clock_ms(), w = -1;

	for (int k = 0; k < e->n; k++) {
		const mu__eng_stage_t *s = &e->s[k];
		double t = s->next_try - now, end = s->down_at + e->o.io_timeout_ms - now;

		if (!s->down)
			continue;
		if (end > 0 && end < t && !mu__list_empty(&e->active))
			t = end;
		t = t < 1 ? 1 : t;
		w = w < 0 || t < w ? t : w;
	}
	return (int)w;
}

void mu__eng_watch(mu__eng_t *e)
{
	char why[512];

	for (int k = 0; k < e->n; k++) {
		mu__eng_stage_t *s = &e->s[k];
		mu_stream_t *st = s->l.stream(s->l.ud);

		if (s->down || s->busy || st == NULL || mu__sock_idle_ok(st))
			continue;
		snprintf(why, sizeof(why), "%s: closed its connection while idle, or sent what nobody "
		         "asked for", s->l.name);
		mu__eng_stage_failed(e, k, MU_EEOF, why);
	}
}

void mu__eng_stage_failed(mu__eng_t *e, int k, int rc, const char *why)
{
	char more[512];
	double t0 = mu__clock_ms();

	if (!lost(rc)) {
		fail_batch(e, k, rc, why);
		return;
	}
	if (e->o.recover != NULL && e->o.retry_ms > 0) {
		stage_down(e, k, why);
		try_back(e, k);
		return;
	}
	if (e->o.recover == NULL || e->st.recoveries >= e->o.max_recoveries) {
		fail_all(e, k, rc, why);
		return;
	}
	mu__log(MU_LOG_WARN, LOG, "%s is lost (%s): asking for another device", e->s[k].l.name, why);
	if (e->o.recover(e->o.recover_ud, k, more, sizeof(more)) != 0) {
		char both[1100];

		snprintf(both, sizeof(both), "%s; no replacement: %s", why, more);
		fail_all(e, k, rc, both);
		return;
	}
	if (replay(e, k, more, sizeof(more)) != 0) {
		fail_all(e, k, MU_EFAIL, more);
		return;
	}
	e->st.recoveries++;
	e->st.recovery_ms += mu__clock_ms() - t0;
}

/* Wait for the busy remote stages; handle the replies that came. */
void mu__eng_wait_replies(mu__eng_t *e)
{
	mu_stream_t *p[64];
	char ready[64];
	int map[64], n = 0, k, r;
	char why[512];

	for (k = 0; k < e->n && n < 64; k++)
		if (e->s[k].busy && e->s[k].l.stream(e->s[k].l.ud) != NULL) {
			p[n] = e->s[k].l.stream(e->s[k].l.ud);
			map[n++] = k;
		}
	if (n == 0)
		return;
	r = mu__sock_poll(p, n, ready, e->o.io_timeout_ms);
	if (r == 0) {
		for (k = 0; k < n; k++) {
			mu__eng_stage_t *s = &e->s[map[k]];

			snprintf(why, sizeof(why), "%s: no reply in %d ms (--io-timeout)", s->l.name,
			         e->o.io_timeout_ms);
			s->busy = 0;
			for (int i = 0; i < s->nbatch; i++) {
				s->batch[i]->inflight[map[k]] = 0;
				s->batch[i]->sent[map[k]] = s->batch[i]->done[map[k]];
			}
			mu__eng_stage_failed(e, map[k], -ETIMEDOUT, why);
		}
		return;
	}
	for (k = 0; k < n; k++)
		if (ready[k] && (r = mu__eng_reply(e, map[k], why, sizeof(why))) != 0)
			mu__eng_stage_failed(e, map[k], r, why);
}

