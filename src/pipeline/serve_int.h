/* SPDX-License-Identifier: MIT */
/*
 * Serving a stage, apart from any I/O (pipeline/serve.c): a message whose
 * body was read in full (text, NUL-terminated, for JSON types; decoded
 * tensors for frame types) becomes a reply. The stage's own blocking loop
 * over a session (mu__serve_chan) and `muster stage`'s libuv server
 * (stage_server.c) both call mu__pipe_handle; what a stage's kind answers
 * may wait for its compute, so the libuv server calls it off the loop.
 */
#ifndef MU_PIPELINE_SERVE_INT_H
#define MU_PIPELINE_SERVE_INT_H

#include <stdint.h>

#include "pipeline/msg_int.h"
#include "pipeline/stage_int.h"

typedef struct mu__serve_ctx_s mu__serve_ctx_t;

struct mu__serve_ctx_s {
	mu_stage_t *stage;       /* NULL until one is assigned */
	const char *name;        /* "stage 2/3", for logs */
	int idle_ms;             /* between messages; < 0 forever */
	void (*on_forward)(void *ud);
	void *ud;
	volatile int *stop;
	/* types ASSIGN, WEIGHTS, TENSOR, LOAD (sessions of the main job), and
	 * INFO before a stage is assigned; NULL: refused */
	void (*on_other)(mu__serve_ctx_t *ctx, const mu__msg_t *m, const char *body,
	                 mu_tensor_list_t *in, mu__reply_t *r);
	void *other_ud;
};

/*
 * owner: who sent it (a connection's serial), for state kept per peer.
 * INFO and CLOSE are answered here, the types of the stage's kind by the
 * kind (mu__stage_kind_t.handle), those of another kind with an ERROR
 * saying what this stage answers.
 */
void mu__pipe_handle(mu__serve_ctx_t *ctx, uint64_t owner, const mu__msg_t *m, const char *body,
                     mu_tensor_list_t *in, mu__reply_t *r);
/* Would mu__pipe_handle give m to code that may wait for a compute (the
 * stage's kind, or its INFO)? The stage server runs those off its loop. */
int mu__pipe_may_wait(const mu__serve_ctx_t *ctx, const mu__msg_t *m);

/*
 * Serve one session (a blocking channel) until it closes, says CLOSE, or
 * breaks the protocol (told why first, when its header was readable), or
 * *stop is set. 0 for an orderly end.
 */
int mu__serve_chan(mu__chan_t *c, mu__serve_ctx_t *ctx);

/* Into t: why a message was cut short after got of its `of` bytes of
 * `what` ("header", "FORWARD body", ...): a stall of stall_ms when rc is
 * -ETIMEDOUT, else the end of the stream or rc's text. */
void mu__cut_short(char *t, size_t n, const char *what, uint64_t got, uint64_t of, int rc,
                   int stall_ms);

#endif
