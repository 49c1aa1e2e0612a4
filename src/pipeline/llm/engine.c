/* SPDX-License-Identifier: MIT */
/*
 * The generation engine (pipeline/llm/engine_int.h): sequences, the rows each
 * stage has for them, and the loop that keeps every stage busy.
 *
 * Per sequence and stage k: avail[k] positions have their input at k
 * (stage 0: tokens known; stage k > 0: activations stage k-1 returned),
 * sent[k] were handed to k, done[k] came back. A stage takes, from every
 * sequence with avail > sent and none in flight there, up to its row
 * budget, in a rotating order so no sequence starves. The last stage's
 * reply for a sequence that has caught up with its tokens is sampled; the
 * new token makes one more position available at stage 0.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include <uv.h>

#include "core/alloc_int.h"
#include "core/sock_int.h"
#include "core/list_int.h"
#include "core/log_int.h"
#include "core/time_int.h"
#include "pipeline/llm/engine_int.h"

#define LOG "engine"
#define MAX_SID 16777215 /* SEQ_BATCH carries ids as exact f32 */

typedef struct {
	float *rows;          /* inputs of positions [base, base + n) */
	int32_t base, n, cap;
} inbuf_t;

typedef struct {
	mu__list_t node;
	uint64_t rid;
	uint64_t sid;
	mu__eng_req_t r;
	int32_t *toks, ntok, captok, nprompt;
	int32_t *eos;
	mu__sampler_t sm;
	int32_t *avail, *sent, *done;
	inbuf_t *in;          /* per stage; stage 0 reads toks */
	int *opened, *inflight;
	int ending;           /* stopped or failed: close once nothing is in flight */
	int no_replay;        /* its inputs are not kept (over replay_bytes) */
	int cancel;
	int rc, stop;
	char why[512];
	mu__gen_stats_t st;
	double t0, t_first;
} eseq_t;

typedef struct {
	mu__eng_link_t l;
	int busy;
	eseq_t **batch;       /* the sequences of the outstanding batch */
	mu__dec_item_t *items;
	int nbatch;
	int32_t *tok;
	float *x;
	mu__eng_stage_stats_t stats;
} stage_t;

struct mu__eng_s {
	stage_t *s;
	int n;
	mu__eng_opts_t o;
	uv_thread_t thread;
	uv_mutex_t lock;
	uv_cond_t cond;       /* new work for the thread; drained for callers */
	mu__list_t queue;     /* submitted, not yet admitted */
	mu__list_t active;
	int nactive, stopping, thread_started;
	uint64_t next_rid, pending;
	uint8_t *sid_used;    /* MAX_SID + 1 flags */
	int rotate;
	mu__eng_stats_t st;
};

/* ---- sequences ---- */

static void seq_free(mu__eng_t *e, eseq_t *q)
{
	int k;

	for (k = 0; k < e->n; k++) {
		if (q->in != NULL && e->o.recover != NULL && !q->no_replay)
			e->st.kept_bytes -= (uint64_t)q->in[k].n * (uint64_t)e->o.dim * sizeof(float);
		mu__free(q->in != NULL ? q->in[k].rows : NULL);
	}
	mu__free(q->in);
	mu__free(q->toks);
	mu__free(q->eos);
	mu__free(q->avail);
	mu__free(q->opened);
	mu__sampler_free(&q->sm);
	if (q->sid != 0)
		e->sid_used[q->sid] = 0;
	mu__free(q);
}

static eseq_t *seq_new(mu__eng_t *e, const mu__eng_req_t *r)
{
	eseq_t *q = mu__calloc(1, sizeof(*q));
	int n = e->n;

	if (q == NULL)
		return NULL;
	q->r = *r;
	q->captok = r->nprompt + (r->max_tokens > 0 ? r->max_tokens : 0) + 1;
	q->toks = mu__malloc((size_t)q->captok * sizeof(int32_t));
	q->eos = mu__malloc((r->neos + 1) * sizeof(int32_t));
	q->avail = mu__calloc((size_t)n * 3, sizeof(int32_t));
	q->opened = mu__calloc((size_t)n * 2, sizeof(int));
	q->in = mu__calloc((size_t)n, sizeof(inbuf_t));
	if (q->toks == NULL || q->eos == NULL || q->avail == NULL || q->opened == NULL ||
	    q->in == NULL || mu__sampler_init(&q->sm, &r->sample, e->o.vocab) != 0) {
		seq_free(e, q);
		return NULL;
	}
	memcpy(q->toks, r->prompt, (size_t)r->nprompt * sizeof(int32_t));
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

/* Rows [pos, pos + m) of stage k's inputs arrive (k >= 1). */
static int in_push(mu__eng_t *e, inbuf_t *b, const float *rows, int32_t m)
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
static void in_drop(mu__eng_t *e, inbuf_t *b, int32_t upto)
{
	size_t dim = (size_t)e->o.dim;
	int32_t k = upto - b->base;

	if (k <= 0)
		return;
	memmove(b->rows, b->rows + (size_t)k * dim, (size_t)(b->n - k) * dim * sizeof(float));
	b->n -= k;
	b->base = upto;
}

static int in_flight(const mu__eng_t *e, const eseq_t *q)
{
	for (int k = 0; k < e->n; k++)
		if (q->inflight[k])
			return 1;
	return 0;
}

static void seq_end(eseq_t *q, int rc, int stop, const char *why)
{
	if (q->ending)
		return;
	q->ending = 1;
	q->rc = rc;
	q->stop = stop;
	snprintf(q->why, sizeof(q->why), "%s", why != NULL ? why : "");
}

/* ---- admitting, sampling ---- */

static int admit_one(mu__eng_t *e)
{
	eseq_t *q;
	uint64_t sid;

	if (mu__list_empty(&e->queue) || e->nactive >= e->o.max_active)
		return 0;
	for (sid = 1; sid <= MAX_SID && e->sid_used[sid]; sid++)
		;
	if (sid > MAX_SID)
		return 0;
	q = mu__container_of(mu__list_head(&e->queue), eseq_t, node);
	mu__list_remove(&q->node);
	e->sid_used[sid] = 1;
	q->sid = sid;
	q->t0 = mu__clock_ms();
	mu__list_insert_tail(&e->active, &q->node);
	e->nactive++;
	return 1;
}

static int is_eos(const eseq_t *q, int32_t id)
{
	for (size_t i = 0; i < q->r.neos; i++)
		if (q->eos[i] == id)
			return 1;
	return 0;
}

/* The logits of the sequence's last position: the next token, or the
 * end. */
static void sampled(eseq_t *q, const float *logits, int32_t vocab)
{
	float *l = (float *)logits; /* the link's buffer: ours until the next submit */
	int32_t next = mu__sample(&q->sm, l);
	double now = mu__clock_ms();

	(void)vocab;
	if (q->st.new_tokens == 0) {
		q->t_first = now;
		q->st.ttft_s = (now - q->t0) / 1e3;
		q->st.prefill_s = q->st.ttft_s;
	}
	if (!q->r.ignore_eos && is_eos(q, next)) {
		seq_end(q, 0, MU__STOP_EOS, NULL);
		return;
	}
	q->st.new_tokens++;
	if (q->r.on_token != NULL && q->r.on_token(q->r.ud, next) != 0) {
		seq_end(q, MU_ESTOPPED, MU__STOP_LENGTH, "the consumer went away");
		return;
	}
	if (q->st.new_tokens >= q->r.max_tokens) {
		seq_end(q, 0, MU__STOP_LENGTH, NULL);
		return;
	}
	if (q->ntok >= q->r.ctx || q->ntok >= q->captok) {
		seq_end(q, 0, MU__STOP_CTX, NULL);
		return;
	}
	q->toks[q->ntok++] = next;
	q->avail[0] = q->ntok;
}

/* ---- one stage ---- */

/* Sequences to open here before they run, or to close once they ended
 * and nothing of theirs is in flight anywhere. */
static int lost(int rc);
static void stage_failed(mu__eng_t *e, int k, int rc, const char *why);

/* A lost device found by an open or close is handled like one found by a
 * batch (replaced, when the engine can); the open is tried again after.
 * 1 when something changed (the round made progress). */
static int control(mu__eng_t *e, int k)
{
	stage_t *s = &e->s[k];
	char why[512];
	mu__list_t *it;
	int rc, moved = 0;

	mu__list_foreach(it, &e->active) {
		eseq_t *q = mu__container_of(it, eseq_t, node);

		if (!q->ending && !q->opened[k] && (k == 0 || q->opened[k - 1])) {
			rc = s->l.open(s->l.ud, q->sid, q->r.ctx, why, sizeof(why));
			moved = 1;
			if (rc == 0) {
				q->opened[k] = 1;
			} else if (lost(rc)) {
				stage_failed(e, k, rc, why);
				return 1; /* the list may have changed: the next round goes on */
			} else {
				seq_end(q, rc, MU__STOP_LENGTH, why);
			}
		}
		if (q->ending && q->opened[k] && !in_flight(e, q)) {
			rc = s->l.close(s->l.ud, q->sid, why, sizeof(why));
			q->opened[k] = 0;
			moved = 1;
			if (lost(rc)) {
				stage_failed(e, k, rc, why);
				return 1;
			}
		}
	}
	return moved;
}

/* Take rows of q for stage k (at most budget); 0 when it has none. */
static int32_t take(mu__eng_t *e, int k, eseq_t *q, int32_t budget, int32_t row)
{
	stage_t *s = &e->s[k];
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
static int start_batch(mu__eng_t *e, int k, eseq_t **all, int nall, char *why, size_t wl,
                       int *err)
{
	stage_t *s = &e->s[k];
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
	if (*err != 0) {
		for (i = 0; i < s->nbatch; i++)
			s->batch[i]->inflight[k] = 0;
		return 0;
	}
	s->busy = 1;
	s->stats.batches++;
	s->stats.rows += (uint64_t)rows;
	return 1;
}

/* Rows of stage k's inputs for q, kept for replay while the budget
 * lasts; past it, q keeps only what is still to be run. */
static int keep(mu__eng_t *e, eseq_t *q, int k, const float *rows, int32_t n)
{
	uint64_t row = (uint64_t)e->o.dim * sizeof(float);

	if (e->o.recover != NULL && !q->no_replay) {
		if (e->st.kept_bytes + (uint64_t)n * row > e->o.replay_bytes) {
			q->no_replay = 1;
			for (int j = 1; j < e->n; j++) {
				e->st.kept_bytes -= (uint64_t)q->in[j].n * row;
				in_drop(e, &q->in[j], q->done[j]);
			}
		} else {
			e->st.kept_bytes += (uint64_t)n * row;
		}
	}
	return in_push(e, &q->in[k], rows, n);
}

/* Run one batch on link k and wait for it (replays). */
static int run_now(mu__eng_t *e, int k, const mu__dec_item_t *it, const int32_t *tok,
                   const float *x, char *why, size_t wl)
{
	stage_t *s = &e->s[k];
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
	stage_t *s = &e->s[k];
	size_t dim = (size_t)e->o.dim;
	mu__list_t *it;
	int rc;

	mu__list_foreach(it, &e->active)
		mu__container_of(it, eseq_t, node)->opened[k] = 0;
	mu__list_foreach(it, &e->active) {
		eseq_t *q = mu__container_of(it, eseq_t, node);

		if (q->ending || q->done[k] == 0)
			continue;
		if (k > 0 && q->no_replay) {
			seq_end(q, MU_EFAIL, MU__STOP_LENGTH, "its stage was lost and its inputs there were "
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
static int reply(mu__eng_t *e, int k, char *why, size_t wl)
{
	stage_t *s = &e->s[k];
	const float *out;
	double ms = 0;
	size_t width = (size_t)(k == e->n - 1 ? e->o.vocab : e->o.dim);
	int i, rc = s->l.finish(s->l.ud, &out, &ms, why, wl);

	s->busy = 0;
	s->stats.busy_ms += ms;
	for (i = 0; i < s->nbatch; i++) {
		eseq_t *q = s->batch[i];
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
				seq_end(q, MU_ENOMEM, MU__STOP_LENGTH, "out of memory");
			q->avail[k + 1] += n;
			out += (size_t)n * width;
			continue;
		}
		if (!q->ending && q->done[k] == q->ntok) {
			s->stats.tokens++;
			sampled(q, out, e->o.vocab);
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
		eseq_t *q = mu__container_of(it, eseq_t, node);

		seq_end(q, rc, MU__STOP_LENGTH, why);
		memset(q->inflight, 0, (size_t)e->n * sizeof(int));
		memset(q->opened, 0, (size_t)e->n * sizeof(int));
	}
	e->stopping = 1;
}

/* A stage answered a batch with an error of its own: those sequences end;
 * the connection is in step and the others go on. */
static void fail_batch(mu__eng_t *e, int k, int rc, const char *why)
{
	for (int i = 0; i < e->s[k].nbatch; i++)
		seq_end(e->s[k].batch[i], rc, MU__STOP_LENGTH, why);
}

/* The device is gone (or silent), as opposed to a stage's own ERROR. */
static int lost(int rc)
{
	return rc == MU_EEOF || rc == -ETIMEDOUT || rc == -ECONNRESET || rc == -EPIPE ||
	       rc == -ECONNABORTED || rc == -ENOTCONN || rc == -EBADF || rc == -EIO;
}

static void stage_failed(mu__eng_t *e, int k, int rc, const char *why)
{
	char more[512];
	double t0 = mu__clock_ms();

	if (!lost(rc)) {
		fail_batch(e, k, rc, why);
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

/* ---- the thread ---- */

/* Sequences that ended and are closed everywhere: report and free. */
static void retire(mu__eng_t *e)
{
	mu__list_t *it, *tmp;
	int k, open;

	mu__list_foreach_safe(it, tmp, &e->active) {
		eseq_t *q = mu__container_of(it, eseq_t, node);

		for (open = 0, k = 0; k < e->n; k++)
			open |= q->opened[k];
		if (!q->ending || open || in_flight(e, q))
			continue;
		q->st.prompt_tokens = q->nprompt;
		q->st.decode_steps = q->st.new_tokens > 0 ? q->st.new_tokens - 1 : 0;
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

/* Wait for the busy remote stages; handle the replies that came. */
static void wait_replies(mu__eng_t *e)
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
			stage_t *s = &e->s[map[k]];

			snprintf(why, sizeof(why), "%s: no reply in %d ms (--io-timeout)", s->l.name,
			         e->o.io_timeout_ms);
			s->busy = 0;
			for (int i = 0; i < s->nbatch; i++) {
				s->batch[i]->inflight[map[k]] = 0;
				s->batch[i]->sent[map[k]] = s->batch[i]->done[map[k]];
			}
			stage_failed(e, map[k], -ETIMEDOUT, why);
		}
		return;
	}
	for (k = 0; k < n; k++)
		if (ready[k] && (r = reply(e, map[k], why, sizeof(why))) != 0)
			stage_failed(e, map[k], r, why);
}

/* One round over the stages: controls, new batches, replies. 1 when
 * something moved. */
static int round_once(mu__eng_t *e, eseq_t **all)
{
	mu__list_t *it;
	char why[512];
	int k, nall = 0, moved = 0, err, rc;

	mu__list_foreach(it, &e->active) {
		eseq_t *q = mu__container_of(it, eseq_t, node);

		if (e->stopping || __atomic_load_n(&q->cancel, __ATOMIC_RELAXED))
			seq_end(q, MU_ESTOPPED, MU__STOP_LENGTH, e->stopping ? "the engine stopped"
			                                                     : "cancelled");
		all[nall++] = q;
	}
	for (k = 0; k < e->n; k++) {
		if (e->s[k].busy)
			continue;
		moved |= control(e, k);
		if (e->stopping)
			continue;
		if (start_batch(e, k, all, nall, why, sizeof(why), &err)) {
			moved = 1;
			if (e->s[k].l.stream(e->s[k].l.ud) == NULL &&
			    (rc = reply(e, k, why, sizeof(why))) != 0)
				stage_failed(e, k, rc, why);
		} else if (err != 0) {
			stage_failed(e, k, err, why);
		}
	}
	for (k = 0; k < e->n; k++)
		if (e->s[k].busy)
			moved = 1;
	wait_replies(e);
	retire(e);
	return moved;
}

static void fail_queued(mu__eng_t *e)
{
	mu__list_t *it, *tmp;

	mu__list_foreach_safe(it, tmp, &e->queue) {
		eseq_t *q = mu__container_of(it, eseq_t, node);

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

	for (k = 0; k < e->n && !e->stopping; k++)
		if (e->s[k].l.ping != NULL && (rc = e->s[k].l.ping(e->s[k].l.ud, why, sizeof(why))) != 0)
			stage_failed(e, k, rc, why);
}

static void engine_thread(void *arg)
{
	mu__eng_t *e = arg;
	eseq_t **all = mu__calloc((size_t)e->o.max_active + 1, sizeof(*all));
	int moved;

	uv_mutex_lock(&e->lock);
	for (;;) {
		while (!e->stopping && admit_one(e))
			;
		if (e->stopping)
			fail_queued(e);
		if (e->stopping && mu__list_empty(&e->active))
			break;
		uv_mutex_unlock(&e->lock);
		moved = all != NULL ? round_once(e, all) : 0;
		if (all == NULL)
			e->stopping = 1;
		uv_mutex_lock(&e->lock);
		if (moved || e->stopping || !mu__list_empty(&e->queue))
			continue;
		if (e->o.keepalive_ms <= 0) {
			uv_cond_wait(&e->cond, &e->lock);
		} else if (uv_cond_timedwait(&e->cond, &e->lock,
		                             (uint64_t)e->o.keepalive_ms * 1000000) == UV_ETIMEDOUT &&
		           mu__list_empty(&e->active) && mu__list_empty(&e->queue)) {
			uv_mutex_unlock(&e->lock);
			keepalive(e);
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
	e->sid_used = mu__calloc(MAX_SID + 1, 1);
	for (k = 0; e->s != NULL && k < n; k++)
		rows = links[k].max_chunk > rows ? links[k].max_chunk : rows;
	for (k = 0; e->s != NULL && e->sid_used != NULL && k < n; k++) {
		stage_t *s = &e->s[k];

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
	if (e->s == NULL || e->sid_used == NULL || k < n ||
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
	eseq_t *q;

	if (r->nprompt < 1 || r->nprompt > r->ctx || r->ctx > e->o.ctx_max || r->max_tokens < 0)
		return MU_EARG;
	if ((q = seq_new(e, r)) == NULL)
		return MU_ENOMEM;
	uv_mutex_lock(&e->lock);
	if (e->stopping) {
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
		if (mu__container_of(it, eseq_t, node)->rid == id)
			__atomic_store_n(&mu__container_of(it, eseq_t, node)->cancel, 1, __ATOMIC_RELAXED);
	mu__list_foreach(it, &e->queue)
		if (mu__container_of(it, eseq_t, node)->rid == id)
			__atomic_store_n(&mu__container_of(it, eseq_t, node)->cancel, 1, __ATOMIC_RELAXED);
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
}

void mu__eng_free(mu__eng_t *e)
{
	int k;

	if (e == NULL)
		return;
	if (e->thread_started) {
		uv_mutex_lock(&e->lock);
		e->stopping = 1;
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
	mu__free(e->sid_used);
	uv_cond_destroy(&e->cond);
	uv_mutex_destroy(&e->lock);
	mu__free(e);
}
