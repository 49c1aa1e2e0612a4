/* SPDX-License-Identifier: MIT */
/*
 * The coordinator of a decoder LLM over `muster stage` servers: its
 * stages as links of the generation engine (llm/engine_int.h). Blocking;
 * one caller at a time (the engine's thread, once it runs).
 */
#ifndef MU_PIPELINE_LLM_COORD_INT_H
#define MU_PIPELINE_LLM_COORD_INT_H

#include <stdint.h>

#include "muster/server.h"
#include "llm/llm_int.h"
#include "llm/engine_int.h"
#include "pipeline/msg_int.h"

typedef struct mu__llm_coord_s mu__llm_coord_t;

typedef struct {
	int connect_timeout_ms;  /* per stage, retried while it loads */
	int io_timeout_ms;       /* a reply that makes no progress this long */
	uint64_t max_frame_bytes;
	const mu_secure_t *sec;  /* toward the stages; NULL: plain TCP */
	/* The checkpoint the stages must serve, and its tensors' SHA-256
	 * (sha[i] for src->t[i]): each stage's "weights_sha256" must be the
	 * weights digest of its layers of src (mu__llm_weights_digest), and
	 * a stage that does not say one is refused. NULL: not checked. Both
	 * must outlive the coordinator. */
	const mu__llm_src_t *src;
	const char (*sha)[65];
	/* The type (a mu__kv_t) every SEQ_OPEN asks the stages to keep the
	 * sequence's KV cache in: the coordinator's choice rules, as ctx does.
	 * A stage whose description has no "kv_types" (of before them) keeps
	 * f32 only, and is refused for any other type. Default f16. */
	int kv_type;
} mu__llm_coord_opts_t;

void mu__llm_coord_opts_init(mu__llm_coord_opts_t *o);

/*
 * Connect to the stages at addrs[0..n) in order and check that they form
 * one model (see pipeline/llm/coord.c). 0, or an error with err naming the stage.
 */
int mu__llm_coord_connect(const char *const *addrs, int n, const mu__llm_coord_opts_t *o,
                          mu__llm_coord_t **out, char *err, size_t el);
void mu__llm_coord_free(mu__llm_coord_t *c);

/*
 * Over tracker sessions (the LLM cluster): n stages with nothing yet; set
 * stage i to a device's session (taken) and the stage description it
 * answered READY with (replacing, and saying goodbye to, what was there);
 * check that the stages form one checkpoint in order.
 */
int mu__llm_coord_new(int n, const mu__llm_coord_opts_t *o, mu__llm_coord_t **out);
int mu__llm_coord_set(mu__llm_coord_t *c, int i, mu_session_t *sess, const char *addr,
                      const char *desc, char *err, size_t el);
int mu__llm_coord_check(mu__llm_coord_t *c, char *err, size_t el);
/* Stage i's weights were streamed from ours, each tensor checked against
 * its SHA-256 by the device: a device of before weights digests, which
 * says none, is taken at that (a local copy never is). */
void mu__llm_coord_streamed(mu__llm_coord_t *c, int i, int streamed);

/*
 * The engine's recover hook over `muster stage` servers (ud: c), for a
 * stage that comes back where it was (mu__eng_opts_t.retry_ms): one
 * attempt at a new connection to stage i's address, within the connect
 * timeout and 2 s at most. The old connection goes first (the stage ends
 * the sequences it held); the stage must then serve what it served: the
 * same layers of the same checkpoint, with at least the context, rows
 * per batch and sequences it had. 0, or err says why not.
 */
int mu__llm_coord_recover(void *ud, int i, char *err, size_t el);

typedef struct {
	const char *addr, *desc; /* desc: the stage's INFO JSON */
	int first, last;
	double compute_ms;       /* its own compute time so far */
} mu__llm_coord_stage_t;

int mu__llm_coord_stages(const mu__llm_coord_t *c);
void mu__llm_coord_stage(const mu__llm_coord_t *c, int i, mu__llm_coord_stage_t *out);
/* The smallest trained context among the stages. */
int32_t mu__llm_coord_ctx(const mu__llm_coord_t *c);

/* Stage i as a link for the engine (valid while c lives); rows per batch
 * at most max_chunk and the stages' own limit. */
void mu__llm_coord_link(mu__llm_coord_t *c, int i, int32_t max_chunk, mu__eng_link_t *link);
/* The model's width and vocabulary, as the stages said. */
int32_t mu__llm_coord_dim(const mu__llm_coord_t *c);
int32_t mu__llm_coord_vocab(const mu__llm_coord_t *c);

#endif
