/* SPDX-License-Identifier: MIT */
/*
 * The generation engine: many sequences in flight over a chain of stages.
 *
 * Each stage is a link with at most one batch outstanding. While stage k
 * works on one batch, stage k+1 works on another, so sequences pipeline:
 * with S sequences and N stages, up to min(S, N) stages are busy at once.
 * Sequences waiting for the same stage go in one batch (SEQ_BATCH: one
 * product per weight matrix for all their rows), so a stage also gains
 * from S > N. A sequence's positions reach each stage in order, prefill
 * chunks included, and the kernels are batch-invariant, so what a
 * sequence generates does not depend on what ran beside it.
 *
 * The engine runs on its own thread; requests come from any thread, and
 * their callbacks run on the engine's thread.
 *
 * It is the one generation loop: a single sequence is the engine with one
 * request. What runs the layers is behind the link table below, so the
 * engine lives with the decoder (llm/) and knows nothing of the network:
 * a decoder in this process is mu__link_local (llm/link.c), a `muster
 * stage` over a connection is the coordinator's mu__llm_coord_link
 * (pipeline/llm/coord.c).
 */
#ifndef MU_LLM_ENGINE_INT_H
#define MU_LLM_ENGINE_INT_H

#include <errno.h>
#include <stdint.h>

#include "muster/stream.h"

#include "llm/gen_int.h"
#include "llm/llm_int.h"

/*
 * Sequence ids go from 1 to MU__ENG_MAX_SID, given in turn and skipping
 * those still in use, so the range bounds only how many sequences are open
 * at once. SEQ_BATCH carries them as I32 to stages that say they read it,
 * and as exact f32 to stages of the versions before (docs/protocols/
 * pipeline.md, "Ids"), which read nothing at or past 2^24: ids stay below
 * that, so a coordinator can drive either kind of stage.
 */
#define MU__ENG_MAX_SID ((uint64_t)(1u << 24) - 1)

/* A stage as the engine drives it. Calls come from the engine thread
 * only, never while a batch is outstanding except wait/finish. */
typedef struct {
	/* Reserve sequence seq (1 to MU__ENG_MAX_SID) for ctx positions /
	 * free it. */
	int (*open)(void *ud, uint64_t seq, int32_t ctx, char *why, size_t wl);
	int (*close)(void *ud, uint64_t seq, char *why, size_t wl);
	/* Start a batch: items, and rows of token ids (first stage) or of
	 * activations [rows][dim]. */
	int (*submit)(void *ud, const mu__dec_item_t *it, int k, int32_t rows,
	              const int32_t *tokens, const float *x, char *why, size_t wl);
	/* The stream the batch's reply comes on, or NULL when submit
	 * already computed it (a stage in this process). */
	mu_stream_t *(*stream)(void *ud);
	/* Read the reply: *out is rows of activations or logits (owned by the
	 * link until the next submit), *compute_ms the stage's own time. */
	int (*finish)(void *ud, const float **out, double *compute_ms, char *why, size_t wl);
	/* Optional: show the stage the connection is alive (a device ends a
	 * session idle past its --session-timeout); the engine calls it when
	 * it has had no sequence for keepalive_ms. */
	int (*ping)(void *ud, char *why, size_t wl);
	void *ud;
	int32_t max_chunk;   /* rows per batch */
	int max_seqs;        /* sequences it keeps open */
	char name[320];      /* "stage 1/3 (10.0.0.5:9090)" for errors */
} mu__eng_link_t;

typedef struct mu__eng_s mu__eng_t;

typedef struct {
	int32_t dim, vocab, ctx_max;
	int max_active;      /* sequences in flight; others queue */
	int batch;           /* 0: one sequence per batch (to measure) */
	int io_timeout_ms;   /* a stage silent this long mid-batch has failed */
	int keepalive_ms;    /* idle this long: ping the stages (0: never) */
	/*
	 * A stage whose device was lost (its connection broke, or it was
	 * silent past io_timeout_ms): put the same layers on another device
	 * so the link's calls reach it, and return 0; the engine then
	 * rebuilds that stage's KV caches by replaying the positions each
	 * sequence had there, from the inputs it kept, and goes on. NULL:
	 * a lost stage fails every sequence. Called on the engine thread.
	 */
	int (*recover)(void *ud, int stage, char *why, size_t wl);
	void *recover_ud;
	int max_recoveries;
	/* With recover: bytes of stage inputs (activations) kept in all for
	 * replay; a sequence whose inputs would pass it keeps none, and is
	 * failed rather than replayed if its stage is lost. */
	uint64_t replay_bytes;
	/*
	 * With recover: 0 (devices from a tracker): a stage recover cannot
	 * bring back ends the engine. > 0 (`muster stage` servers, which come
	 * back where they were): the stage is down, not gone. recover is
	 * tried again and again, the waits between attempts doubling up to
	 * retry_ms, and max_recoveries does not apply; what needs the stage
	 * waits for it up to io_timeout_ms after the loss, then fails with
	 * MU__ENG_EDOWN and what is wrong, as does what starts while it is
	 * still down after that. A stage that closes its idle connection is
	 * found within a second and brought back the same way.
	 */
	int retry_ms;
} mu__eng_opts_t;

/* What a sequence fails with while its stage is down (retry_ms). */
#define MU__ENG_EDOWN (-EHOSTDOWN)

typedef struct {
	const int32_t *prompt;   /* copied */
	int32_t nprompt;
	int32_t ctx;             /* positions to reserve */
	int32_t max_tokens;
	mu__sample_opts_t sample;
	const int32_t *eos;      /* copied; stop at any of them */
	size_t neos;
	int ignore_eos;
	/* Each new token; return non-zero to stop the sequence (a client that
	 * went away). */
	int (*on_token)(void *ud, int32_t id);
	/* The end: rc 0 and why the sequence stopped, or an error. */
	void (*on_done)(void *ud, int rc, const char *why, int stop,
	                const mu__gen_stats_t *st);
	void *ud;
	/* Optional: the logits of each step before it is sampled (the
	 * prompt's last position, then each token fed back). */
	void (*on_logits)(void *ud, const float *logits, int32_t vocab);
} mu__eng_req_t;

/*
 * Start the engine over links[0..n) (copied; what their ud points to
 * must outlive the engine). Stage 0 takes token ids; the last returns
 * logits.
 */
int mu__eng_new(const mu__eng_link_t *links, int n, const mu__eng_opts_t *o,
                mu__eng_t **out);
/* Queue a request; *id names it for cancel. MU_EARG for a prompt that is
 * empty or does not fit ctx, MU_ESTOPPED after stop. Any thread. With
 * max_tokens 0 the prompt is prefilled and nothing sampled (stop:
 * length). */
int mu__eng_submit(mu__eng_t *e, const mu__eng_req_t *r, uint64_t *id);
/* Stop a request early (its on_done still runs). Any thread. */
void mu__eng_cancel(mu__eng_t *e, uint64_t id);
/* Wait until every request submitted so far has ended. */
void mu__eng_drain(mu__eng_t *e);
/* Fail what is queued or running, stop the thread, free. */
void mu__eng_free(mu__eng_t *e);

typedef struct {
	uint64_t batches, rows, tokens;
	double busy_ms;       /* the stage's own compute time */
} mu__eng_stage_stats_t;

void mu__eng_stage_stats(mu__eng_t *e, int i, mu__eng_stage_stats_t *st);

typedef struct {
	int recoveries;          /* stages put back on a new device */
	double recovery_ms;      /* from the loss to generating again, summed */
	uint64_t replayed;       /* positions replayed to rebuild caches */
	uint64_t kept_bytes;     /* inputs held for replay now */
} mu__eng_stats_t;

void mu__eng_stats(mu__eng_t *e, mu__eng_stats_t *st);

/* A stage that is down (opts.retry_ms), as /health says it. */
typedef struct {
	char name[320];          /* the link's: "stage 1/2 (10.0.0.5:9090)" */
	int64_t since;           /* when it was lost, seconds since 1970 (UTC) */
	double down_ms;          /* how long ago */
	char lost[512];          /* why it was lost */
	char retry[512];         /* why the last attempt to bring it back failed */
} mu__eng_down_t;

/* The number of stages. */
int mu__eng_stages(const mu__eng_t *e);
/* 1 and *out when stage i is down now, else 0. Any thread. */
int mu__eng_stage_down(mu__eng_t *e, int i, mu__eng_down_t *out);
/* What is wrong with a down stage d, in one line for people and logs:
 * "stage 1/2 (addr) is down since 2026-12-02T06:40:01Z (12.3 s): ...". */
void mu__eng_down_text(const mu__eng_down_t *d, char *out, size_t n);

/* ---- links in this process (llm/link.c) ---- */

/* A link over d, which holds every layer it runs and must outlive the
 * link; max_seqs: the sequences d keeps open. Its batches compute as
 * they are submitted. Free with mu__link_local_free. */
int mu__link_local(mu__dec_t *d, int32_t max_chunk, int max_seqs, mu__eng_link_t *link);
void mu__link_local_free(mu__eng_link_t *link);

#endif
