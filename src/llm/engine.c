/* SPDX-License-Identifier: MIT */
/*
 * The generation engine (llm/engine_int.h): sequences, admitting and
 * sampling, the thread whose rounds keep every stage busy, and the calls
 * of the header. One stage's batches and failures are llm/engine_stage.c's
 * (the state both share: llm/engine_priv_int.h).
 *
 * A stage takes, from every sequence with positions available and none
 * in flight there, up to its row budget, in a rotating order so no
 * sequence starves. The last stage's reply for a sequence that has caught
 * up with its tokens is sampled; the new token makes one more position
 * available at stage 0.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/log_int.h"
#include "core/time_int.h"
#include "llm/engine_priv_int.h"

#define LOG "engine"
#define WATCH_MS 500 /* idle, with stages that come back: how often their connections are looked at */

/* ---- sequences ---- */

static void seq_free(mu__eng_t *e, mu__eng_seq_t *q)
{
	int k;

	for (k = 0; k < e->n; k++) {
		if (q->in != NULL && e->o.recover != NULL && !q->no_replay)
			__atomic_fetch_sub(&e->kept, (uint64_t)q->in[k].n * (uint64_t)e->o.dim * sizeof(float),
			                   __ATOMIC_RELAXED);
		mu__free(q->in != NULL ? q->in[k].rows : NULL);
	}
	mu__free(q->in);
	mu__free(q->toks);
	mu__free(q->eos);
	mu__free(q->avail);
	mu__free(q->opened);
	mu__sampler_free(&q->sm);
	mu__free(q);
}

static mu__eng_seq_t *seq_new(mu__eng_t *e, const mu__eng_req_t *r)
{
	mu__eng_seq_t *q = mu__calloc(1, sizeof(*q));
	int n = e->n;

	if (q == NULL)
		return NULL;
	q->r = *r;
	q->captok = r->nprompt + (r->max_tokens > 0 ? r->max_tokens : 0) + 1;
	q->toks = mu__malloc((size_t)q->captok * sizeof(int32_t));
	q->eos = mu__malloc((r->neos + 1) * sizeof(int32_t));
	q->avail = mu__calloc((size_t)n * 3, sizeof(int32_t));
	q->opened = mu__calloc((size_t)n * 2, sizeof(int));
	q->in = mu__calloc((size_t)n, sizeof(mu__eng_inbuf_t));
	if (q->toks == NULL || q->eos == NULL || q->avail == NULL || q->opened == NULL ||
	    q->in == NULL || mu__sampler_init(&q->sm, &r->sample, e->o.vocab) != 0) {
		seq_free(e, q);
		return NULL;
	}
	memcpy(q->toks, r->prompt, (size_t)r->nprompt * sizeof(int32_t));
	if (r->neos > 0) /* eos may be NULL when there is none */
		memcpy(q->eos, r->eos, r->neos * sizeof(int32_t));
	q->r.prompt = q->toks;
	q->r.eos = q->eos;
	q->ntok = q->nprompt = r->nprompt;
	q->sent = q->avail + n;
	q->done = q->avail + 2 * n;
	q->inflight = q->opened + n;
	q->avail[0] = q->ntok;
	return q;
}

int mu__eng_in_flight(const mu__eng_t *e, const mu__eng_seq_t *q)
{
	for (int k = 0; k < e->n; k++)
		if (q->inflight[k])
			return 1;
	return 0;
}

void mu__eng_seq_end(mu__eng_seq_t *q, int rc, int stop, const char *why)
{
	if (q->ending)
		return;
	q->ending = 1;
	q->rc = rc;
	q->stop = stop;
	snprintf(q->why, sizeof(q->why), "%s", why != NULL ? why : "");
}

/* ---- admitting, sampling ---- */

static int sid_in_use(const mu__eng_t *e, uint64_t sid)
{
	const mu__list_t *it;

	mu__list_foreach(it, &e->active)
		if (mu__container_of(it, mu__eng_seq_t, node)->sid == sid)
			return 1;
	return 0;
}

/*
 * The id after the one given last, wrapping to 1 past MU__ENG_MAX_SID,
 * skipping those of active sequences (a retired one is closed on every
 * stage, so its id is free again). There are at most max_active of them,
 * far fewer than the ids, so the search ends within max_active + 1 steps
 * and needs no table of the ids in use.
 */
static uint64_t next_sid(mu__eng_t *e)
{
	do
		e->last_sid = e->last_sid % MU__ENG_MAX_SID + 1;
	while (sid_in_use(e, e->last_sid));
	return e->last_sid;
}

static int admit_one(mu__eng_t *e)
{
	mu__eng_seq_t *q;

	if (mu__list_empty(&e->queue) || e->nactive >= e->o.max_active)
		return 0;
	q = mu__container_of(mu__list_head(&e->queue), mu__eng_seq_t, node);
	mu__list_remove(&q->node);
	q->sid = next_sid(e);
	q->t0 = mu__clock_ms();
	mu__list_insert_tail(&e->active, &q->node);
	e->nactive++;
	return 1;
}

static int is_eos(const mu__eng_seq_t *q, int32_t id)
{
	for (size_t i = 0; i < q->r.neos; i++)
		if (q->eos[i] == id)
			return 1;
	return 0;
}

/* The logits of the sequence's last position: the next token, or the
 * end. With max_tokens 0 the prompt was all there was to run. */
void mu__eng_sampled(mu__eng_t *e, mu__eng_seq_t *q, const float *logits)
{
	float *l = (float *)logits; /* the link's buffer: ours until the next submit */
	double now = mu__clock_ms();
	int32_t next;

	if (q->st.new_tokens == 0) {
		q->t_first = now;
		q->st.ttft_s = (now - q->t0) / 1e3;
		q->st.prefill_s = q->st.ttft_s;
	}
	if (q->r.max_tokens <= 0) {
		mu__eng_seq_end(q, 0, MU__STOP_LENGTH, NULL);
		return;
	}
	if (q->r.on_logits != NULL)
		q->r.on_logits(q->r.ud, l, e->o.vocab);
	next = mu__sample(&q->sm, l);
	if (!q->r.ignore_eos && is_eos(q, next)) {
		mu__eng_seq_end(q, 0, MU__STOP_EOS, NULL);
		return;
	}
	q->st.new_tokens++;
	if (q->r.on_token != NULL && q->r.on_token(q->r.ud, next) != 0) {
		mu__eng_seq_end(q, MU_ESTOPPED, MU__STOP_LENGTH, "the consumer went away");
		return;
	}
	if (q->st.new_tokens >= q->r.max_tokens) {
		mu__eng_seq_end(q, 0, MU__STOP_LENGTH, NULL);
		return;
	}
	if (q->ntok >= q->r.ctx || q->ntok >= q->captok) {
		mu__eng_seq_end(q, 0, MU__STOP_CTX, NULL);
		return;
	}
	q->toks[q->ntok++] = next;
	q->avail[0] = q->ntok;
}

/* ---- the thread ---- */

/* Sequences that ended and are closed everywhere: report and free. */
static void retire(mu__eng_t *e)
{
	mu__list_t *it, *tmp;
	int k, open;

	mu__list_foreach_safe(it, tmp, &e->active) {
		mu__eng_seq_t *q = mu__container_of(it, mu__eng_seq_t, node);

		for (open = 0, k = 0; k < e->n; k++)
			open |= q->opened[k];
		if (!q->ending || open || mu__eng_in_flight(e, q))
			continue;
		q->st.prompt_tokens = q->nprompt;
		/* the tokens fed back: every new one but one that ended it */
		q->st.decode_steps = q->ntok - q->nprompt;
		q->st.decode_s = q->t_first > 0 ? (mu__clock_ms() - q->t_first) / 1e3 : 0;
		q->st.stop = (mu__stop_t)q->stop;
		if (q->r.on_done != NULL)
			q->r.on_done(q->r.ud, q->rc, q->why, q->stop, &q->st);
		uv_mutex_lock(&e->lock);
		mu__list_remove(&q->node);
		e->nactive--;
		e->pending--;
		uv_cond_broadcast(&e->cond);
		uv_mutex_unlock(&e->lock);
		seq_free(e, q);
	}
}

/* One round over the stages: controls, new batches, replies. 1 when
 * something moved. */
static int round_once(mu__eng_t *e, mu__eng_seq_t **all)
{
	mu__list_t *it;
	char why[512];
	int k, nall = 0, moved = 0, err, rc;

	mu__list_foreach(it, &e->active) {
		mu__eng_seq_t *q = mu__container_of(it, mu__eng_seq_t, node);

		if (mu__eng_stopping(e) || __atomic_load_n(&q->cancel, __ATOMIC_RELAXED))
			mu__eng_seq_end(q, MU_ESTOPPED, MU__STOP_LENGTH,
			                mu__eng_stopping(e) ? "the engine stopped" : "cancelled");
		all[nall++] = q;
	}
	if (e->o.retry_ms > 0 && !mu__eng_stopping(e)) /* stopping: no more attempts */
		mu__eng_check_down(e);
	for (k = 0; k < e->n; k++) {
		if (e->s[k].busy || e->s[k].down)
			continue;
		moved |= mu__eng_control(e, k);
		if (mu__eng_stopping(e))
			continue;
		if (mu__eng_start_batch(e, k, all, nall, why, sizeof(why), &err)) {
			moved = 1;
			if (e->s[k].l.stream(e->s[k].l.ud) == NULL &&
			    (rc = mu__eng_reply(e, k, why, sizeof(why))) != 0)
				mu__eng_stage_failed(e, k, rc, why);
		} else if (err != 0) {
			mu__eng_stage_failed(e, k, err, why);
		}
	}
	for (k = 0; k < e->n; k++)
		if (e->s[k].busy)
			moved = 1;
	mu__eng_wait_replies(e);
	retire(e);
	return moved;
}

static void fail_queued(mu__eng_t *e)
{
	mu__list_t *it, *tmp;

	mu__list_foreach_safe(it, tmp, &e->queue) {
		mu__eng_seq_t *q = mu__container_of(it, mu__eng_seq_t, node);

		mu__list_remove(&q->node);
		uv_mutex_unlock(&e->lock);
		if (q->r.on_done != NULL)
			q->r.on_done(q->r.ud, MU_ESTOPPED, "the engine stopped", MU__STOP_LENGTH, &q->st);
		uv_mutex_lock(&e->lock);
		e->pending--;
		seq_free(e, q);
	}
	uv_cond_broadcast(&e->cond);
}

/* Nothing ran for a while: ping every stage, so no device ends an idle
 * session under us; one that does not answer is lost, as in a batch. */
static void keepalive(mu__eng_t *e)
{
	char why[512];
	int k, rc;

	for (k = 0; k < e->n && !mu__eng_stopping(e); k++)
		if (!e->s[k].down && e->s[k].l.ping != NULL &&
		    (rc = e->s[k].l.ping(e->s[k].l.ud, why, sizeof(why))) != 0)
			mu__eng_stage_failed(e, k, rc, why);
}

/* How long the thread may wait for news when nothing moves: until a down
 * stage's next attempt, the next look at idle connections, or the next
 * keepalive; -1: until there is news. Under the lock. */
static int idle_wait_ms(mu__eng_t *e)
{
	int w = e->o.retry_ms > 0 ? mu__eng_down_wait(e) : -1, ka;
	int idle = mu__list_empty(&e->active) && mu__list_empty(&e->queue);
	double since = mu__clock_ms() - e->last_moved;

	if (idle && e->o.retry_ms > 0 && (w < 0 || w > WATCH_MS))
		w = WATCH_MS;
	if (idle && e->o.keepalive_ms > 0) {
		ka = since >= e->o.keepalive_ms ? 0 : (int)(e->o.keepalive_ms - since);
		w = w < 0 || ka < w ? ka : w;
	}
	return w;
}

/* Idle past a wait: look at the idle connections, ping the stages when
 * the keepalive is due. Not under the lock. */
static void idle_work(mu__eng_t *e)
{
	if (e->o.retry_ms > 0)
		mu__eng_watch(e);
	if (e->o.keepalive_ms > 0 && mu__clock_ms() - e->last_moved >= e->o.keepalive_ms) {
		keepalive(e);
		e->last_moved = mu__clock_ms();
	}
}

static void engine_thread(void *arg)
{
	mu__eng_t *e = arg;
	mu__eng_seq_t **all = mu__calloc((size_t)e->o.max_active + 1, sizeof(*all));
	int moved, wait;

	uv_mutex_lock(&e->lock);
	e->last_moved = mu__clock_ms();
	for (;;) {
		while (!mu__eng_stopping(e) && admit_one(e))
			;
		if (mu__eng_stopping(e))
			fail_queued(e);
		if (mu__eng_stopping(e) && mu__list_empty(&e->active))
			break;
		uv_mutex_unlock(&e->lock);
		moved = all != NULL ? round_once(e, all) : 0;
		if (all == NULL)
			mu__eng_stop(e);
		uv_mutex_lock(&e->lock);
		if (moved)
			e->last_moved = mu__clock_ms();
		if (moved || mu__eng_stopping(e) || !mu__list_empty(&e->queue))
			continue;
		wait = idle_wait_ms(e);
		if (wait < 0) {
			uv_cond_wait(&e->cond, &e->lock);
		} else if (uv_cond_timedwait(&e->cond, &e->lock, (uint64_t)wait * 1000000) ==
		                   UV_ETIMEDOUT &&
		           mu__list_empty(&e->active) && mu__list_empty(&e->queue)) {
			uv_mutex_unlock(&e->lock);
			idle_work(e);
			uv_mutex_lock(&e->lock);
		}
	}
	uv_mutex_unlock(&e->lock);
	mu__free(all);
}

/* ---- the API ---- */

int mu__eng_new(const mu__eng_link_t *links, int n, const mu__eng_opts_t *o, mu__eng_t **out)
{
	mu__eng_t *e;
	int k, rows = 1;

	*out = NULL;
	if (n < 1 || o->max_active < 1 || o->dim < 1 || o->vocab < 1)
		return MU_EARG;
	if ((e = mu__calloc(1, sizeof(*e))) == NULL)
		return MU_ENOMEM;
	e->o = *o;
	e->n = n;
	e->s = mu__calloc((size_t)n, sizeof(*e->s));
	for (k = 0; e->s != NULL && k < n; k++)
		rows = links[k].max_chunk > rows ? links[k].max_chunk : rows;
	for (k = 0; e->s != NULL && k < n; k++) {
		mu__eng_stage_t *s = &e->s[k];

		s->l = links[k];
		s->batch = mu__calloc(MU__DEC_MAX_ITEMS, sizeof(*s->batch));
		s->items = mu__calloc(MU__DEC_MAX_ITEMS, sizeof(*s->items));
		s->tok = k == 0 ? mu__calloc((size_t)rows, sizeof(int32_t)) : NULL;
		s->x = k > 0 ? mu__calloc((size_t)rows * (size_t)o->dim, sizeof(float)) : NULL;
		if (s->batch == NULL || s->items == NULL || (k == 0 ? !s->tok : !s->x))
			break;
		if (links[k].max_seqs < e->o.max_active)
			e->o.max_active = links[k].max_seqs;
	}
	mu__list_init(&e->queue);
	mu__list_init(&e->active);
	uv_mutex_init(&e->lock);
	uv_cond_init(&e->cond);
	if (e->s == NULL || k < n ||
	    uv_thread_create(&e->thread, engine_thread, e) != 0) {
		mu__eng_free(e);
		return MU_ENOMEM;
	}
	e->thread_started = 1;
	*out = e;
	return 0;
}

int mu__eng_submit(mu__eng_t *e, const mu__eng_req_t *r, uint64_t *id)
{
	mu__eng_seq_t *q;

	if (r->nprompt < 1 || r->nprompt > r->ctx || r->ctx > e->o.ctx_max || r->max_tokens < 0)
		return MU_EARG;
	if ((q = seq_new(e, r)) == NULL)
		return MU_ENOMEM;
	uv_mutex_lock(&e->lock);
	if (mu__eng_stopping(e)) {
		uv_mutex_unlock(&e->lock);
		seq_free(e, q);
		return MU_ESTOPPED;
	}
	q->rid = ++e->next_rid;
	if (id != NULL)
		*id = q->rid;
	e->pending++;
	mu__list_insert_tail(&e->queue, &q->node);
	uv_cond_broadcast(&e->cond);
	uv_mutex_unlock(&e->lock);
	return 0;
}

void mu__eng_cancel(mu__eng_t *e, uint64_t id)
{
	mu__list_t *it;

	uv_mutex_lock(&e->lock);
	mu__list_foreach(it, &e->active)
		if (mu__container_of(it, mu__eng_seq_t, node)->rid == id)
			__atomic_store_n(&mu__container_of(it, mu__eng_seq_t, node)->cancel, 1, __ATOMIC_RELAXED);
	mu__list_foreach(it, &e->queue)
		if (mu__container_of(it, mu__eng_seq_t, node)->rid == id)
			__atomic_store_n(&mu__container_of(it, mu__eng_seq_t, node)->cancel, 1, __ATOMIC_RELAXED);
	uv_cond_broadcast(&e->cond);
	uv_mutex_unlock(&e->lock);
}

void mu__eng_drain(mu__eng_t *e)
{
	uv_mutex_lock(&e->lock);
	while (e->pending > 0)
		uv_cond_wait(&e->cond, &e->lock);
	uv_mutex_unlock(&e->lock);
}

void mu__eng_stage_stats(mu__eng_t *e, int i, mu__eng_stage_stats_t *st)
{
	*st = e->s[i].stats;
}

void mu__eng_stats(mu__eng_t *e, mu__eng_stats_t *st)
{
	uv_mutex_lock(&e->lock);
	*st = e->st;
	uv_mutex_unlock(&e->lock);
	st->kept_bytes = __atomic_load_n(&e->kept, __ATOMIC_RELAXED);
}

int mu__eng_stages(const mu__eng_t *e)
{
	return e->n;
}

void mu__eng_down_text(const mu__eng_down_t *d, char *out, size_t n)
{
	char since[32] = "?";
	time_t t = (time_t)d->since;
	struct tm tm;

	if (gmtime_r(&t, &tm) != NULL)
		strftime(since, sizeof(since), "%Y-%m-%dT%H:%M:%SZ", &tm);
	snprintf(out, n, "%s is down since %s (%.1f s): %s%s%s", d->name, since, d->down_ms / 1e3,
	         d->lost, d->retry[0] ? "; reconnecting: " : "", d->retry);
}

void mu__eng_free(mu__eng_t *e)
{
	int k;

	if (e == NULL)
		return;
	if (e->thread_started) {
		uv_mutex_lock(&e->lock);
		mu__eng_stop(e);
		uv_cond_broadcast(&e->cond);
		uv_mutex_unlock(&e->lock);
		uv_thread_join(&e->thread);
	}
	for (k = 0; e->s != NULL && k < e->n; k++) {
		mu__free(e->s[k].batch);
		mu__free(e->s[k].items);
		mu__free(e->s[k].tok);
		mu__free(e->s[k].x);
	}
	mu__free(e->s);
	uv_cond_destroy(&e->cond);
	uv_mutex_destroy(&e->lock);
	mu__free(e);
}
