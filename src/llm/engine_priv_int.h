/* SPDX-License-Identifier: MIT */
/*
 * The engine's own state, shared by its two files: llm/engine.c (the
 * sequences, admitting and sampling, the thread, the calls of
 * llm/engine_int.h) and llm/engine_stage.c (one stage: its batches, its
 * replies, and what happens when its device is lost). Nothing outside
 * them includes this.
 *
 * Per sequence and stage k: avail[k] positions have their input at k
 * (stage 0: tokens known; stage k > 0: activations stage k-1 returned),
 * sent[k] were handed to k, done[k] came back; done[k] <= sent[k] <=
 * avail[k]. inflight[k] is set while a batch of k holds rows of the
 * sequence, opened[k] while k has it open.
 */
#ifndef MU_LLM_ENGINE_PRIV_INT_H
#define MU_LLM_ENGINE_PRIV_INT_H

#include <uv.h>

#include "core/list_int.h"
#include "llm/engine_int.h"

typedef struct {
	float *rows;          /* inputs of positions [base, base + n) */
	int32_t base, n, cap;
} mu__eng_inbuf_t;

typedef struct {
	mu__list_t node;      /* the engine's queue, then its active list */
	uint64_t rid;         /* the request's id (mu__eng_cancel) */
	uint64_t sid;         /* the sequence's id on the stages, once admitted */
	mu__eng_req_t r;
	int32_t *toks, ntok, captok, nprompt;
	int32_t *eos;
	mu__sampler_t sm;
	int32_t *avail, *sent, *done;
	mu__eng_inbuf_t *in;  /* per stage; stage 0 reads toks */
	int *opened, *inflight;
	int ending;           /* stopped or failed: close once nothing is in flight */
	int no_replay;        /* its inputs are not kept (over replay_bytes) */
	int cancel;           /* atomic: mu__eng_cancel asked */
	int rc, stop;
	char why[512];
	mu__gen_stats_t st;
	double t0, t_first;
} mu__eng_seq_t;

typedef struct {
	mu__eng_link_t l;
	int busy;             /* a batch is outstanding */
	mu__eng_seq_t **batch; /* the sequences of the outstanding batch */
	mu__dec_item_t *items;
	int nbatch;
	int32_t *tok;         /* stage 0's rows of token ids */
	float *x;             /* a later stage's rows of activations */
	mu__eng_stage_stats_t stats;
	/* Down (opts.retry_ms): lost and not brought back yet. Written on the
	 * engine's thread under the engine's lock, read by health checks. */
	int down;
	double down_at;       /* mu__clock_ms() of the loss */
	int64_t down_since;   /* the same in seconds since 1970 */
	double next_try;      /* mu__clock_ms() of the next attempt */
	int backoff_ms;       /* the wait after the next failed attempt */
	char lost[512], retry[512];
} mu__eng_stage_t;

struct mu__eng_s {
	mu__eng_stage_t *s;
	int n;
	mu__eng_opts_t o;
	uv_thread_t thread;
	uv_mutex_t lock;
	uv_cond_t cond;       /* new work for the thread; drained for callers */
	mu__list_t queue;     /* submitted, not yet admitted */
	mu__list_t active;
	int nactive, thread_started;
	int stopping;         /* atomic (mu__eng_stopping): set once, by either side */
	uint64_t next_rid, pending;
	uint64_t last_sid;    /* the sequence id given last */
	int rotate;
	double last_moved;    /* mu__clock_ms() when a round last did something */
	mu__eng_stats_t st;   /* under lock; its kept_bytes stays 0, see kept */
	uint64_t kept;        /* atomic: inputs held for replay, changed by the
	                         engine's thread outside the lock (mu__eng_stats
	                         reads it into kept_bytes) */
};

/* The engine stops: mu__eng_free asked, or a chain broke for good. Read
 * and set from both the engine's thread and the callers'. */
static inline int mu__eng_stopping(const mu__eng_t *e)
{
	return __atomic_load_n(&e->stopping, __ATOMIC_ACQUIRE);
}

static inline void mu__eng_stop(mu__eng_t *e)
{
	__atomic_store_n(&e->stopping, 1, __ATOMIC_RELEASE);
}

/* ---- engine.c ---- */

/* q ends (once): rc 0 and why it stopped, or the error and its text. */
void mu__eng_seq_end(mu__eng_seq_t *q, int rc, int stop, const char *why);
/* Has q rows in a batch anywhere? */
int mu__eng_in_flight(const mu__eng_t *e, const mu__eng_seq_t *q);
/* The logits of q's last position: the next token, or the end. */
void mu__eng_sampled(mu__eng_t *e, mu__eng_seq_t *q, const float *logits);

/* ---- engine_stage.c ---- */

/* Sequences to open at stage k before they run, or to close once they
 * ended and nothing of theirs is in flight: 1 when something changed. */
int mu__eng_control(mu__eng_t *e, int k);
/* Build and submit stage k's next batch from all[0..nall): 1 when one
 * went out; else *err says whether submitting failed. */
int mu__eng_start_batch(mu__eng_t *e, int k, mu__eng_seq_t **all, int nall, char *why,
                        size_t wl, int *err);
/* Stage k's reply: hand each item's rows on, or sample. */
int mu__eng_reply(mu__eng_t *e, int k, char *why, size_t wl);
/* Stage k failed with rc: its batch's sequences end (a stage's own
 * error), or the stage is replaced and its caches rebuilt (a lost
 * device, with recover), or everything ends. */
void mu__eng_stage_failed(mu__eng_t *e, int k, int rc, const char *why);
/* Wait for the busy remote stages; handle the replies that came. */
void mu__eng_wait_replies(mu__eng_t *e);
/* Down stages (opts.retry_ms): try to bring back those whose wait is
 * over, and fail what waited for one past io_timeout_ms. */
void mu__eng_check_down(mu__eng_t *e);
/* Milliseconds until mu__eng_check_down has something to do (-1: no
 * stage is down). */
int mu__eng_down_wait(mu__eng_t *e);
/* Nothing runs (opts.retry_ms): a stage whose idle connection became
 * readable closed it or broke the protocol; it is lost. */
void mu__eng_watch(mu__eng_t *e);

#endif
