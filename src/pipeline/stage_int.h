/* SPDX-License-Identifier: MIT */
/*
 * A stage as the common code sees it, whatever its kind: a head every
 * kind's own struct starts with, and the kind's method table (as
 * sqlite3_vfs or redis's ConnectionType are), through which the serving
 * loops, the stage server and a device reach a stage. The kinds live in
 * their folders (pipeline/graph: a range of a graph's nodes; pipeline/llm:
 * layers of a decoder LLM) and the common files include none of their
 * headers. docs/internals/pipeline.md says how to add a kind.
 */
#ifndef MU_PIPELINE_STAGE_INT_H
#define MU_PIPELINE_STAGE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "muster/pipeline.h"
#include "pipeline/msg_int.h"

struct cJSON;
typedef struct mu__stage_kind_s mu__stage_kind_t;
typedef struct mu__device_sess_s mu__device_sess_t; /* pipeline/device_int.h */

/*
 * The head of every stage: the first member of its kind's struct, so a
 * kind turns a mu_stage_t * back into its own with a cast. Set by the
 * kind when it builds the stage; the common code only reads it.
 */
struct mu_stage_s {
	const mu__stage_kind_t *kind;
	int index, of;           /* stage index of `of` */
	uint64_t digest;         /* of the model it is a stage of */
	char *desc;              /* JSON as of loading (mu_stage_describe); the kind's */
};

/*
 * A reply, apart from any I/O: what a handler makes of a message read in
 * full (pipeline/serve_int.h sends it).
 */
typedef struct {
	mu__msg_t m;            /* type 0: no reply */
	char *text;             /* body for INFO, READY, ERROR */
	int text_owned;
	mu_tensor_list_t out;   /* body for RESULT */
	int fatal;              /* close once it is sent */
	int64_t positions;      /* SEQ_FORWARD/SEQ_BATCH's RESULT: positions run (metrics) */
} mu__reply_t;

void mu__reply_init(mu__reply_t *r);
void mu__reply_free(mu__reply_t *r);
/* An ERROR reply to id, the text copied. */
void mu__reply_error(mu__reply_t *r, uint64_t id, int code, int fatal, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
/* A reply of type with a borrowed text (the stage's description, say). */
void mu__reply_text(mu__reply_t *r, int type, uint64_t id, const char *text);

/* A model a device holds (its own copy), as the kind that knows it saw
 * it: what the device publishes of it and finds it by. */
typedef struct {
	uint64_t digest;
	uint64_t param_bytes;    /* what a whole-model stage would hold */
	int layers;              /* the kind's unit of splitting, if it has one (0) */
} mu__held_t;

#define MU__STAGE_KIND_VERSION 1
/* A message type as a bit of a kind's `msgs` / `dev_msgs`. */
#define MU__MSG_BIT(type) (1u << (type))

/*
 * A stage kind. Entries marked optional may be NULL; the others must be
 * set. Every stage entry may be called from any thread (the stage server
 * runs them on libuv's pool); a kind that keeps state across calls locks
 * it. The device entries run on the session's own thread.
 */
struct mu__stage_kind_s {
	int version;             /* MU__STAGE_KIND_VERSION */
	const char *name;        /* "graph", "llm": ASSIGN's "kind" */
	/* The message types `handle` answers (MU__MSG_BIT of each), and that
	 * run off the stage server's loop: they may wait for a compute. */
	uint32_t msgs;
	/* The types that carry an assigned stage's weights to a device
	 * (WEIGHTS, TENSOR): answered by `receive`. */
	uint32_t dev_msgs;

	/* ---- a stage of this kind ---- */

	/* Answer m (a type of `msgs`) from owner, the connection's serial
	 * (0 on a tracker session); who names the stage in logs ("stage
	 * 2/3"). body is NUL-terminated text for JSON types (never NULL), in
	 * the decoded frame for frame types (the kind may take tensors out).
	 * A request that cannot run gets a non-fatal ERROR. */
	void (*handle)(mu_stage_t *s, uint64_t owner, const char *who, const mu__msg_t *m,
	               const char *body, mu_tensor_list_t *in, mu__reply_t *r);
	/* Optional: INFO's reply, the description as of now (it may wait for
	 * a compute: then INFO runs off the loop too). NULL: s->desc. */
	void (*info)(mu_stage_t *s, const mu__msg_t *m, mu__reply_t *r);
	/* Optional: the connection owner has gone; free what it held. */
	void (*release)(mu_stage_t *s, uint64_t owner);
	/* Optional: KV cache bytes reserved and sequences open, for metrics;
	 * never waits for a compute. Set only by kinds that keep sequences. */
	void (*usage)(mu_stage_t *s, uint64_t *kv_bytes, int *seqs);
	/* Optional: threads of its forwards (mu_stage_set_threads); NULL: the
	 * kind chose them when it built the stage. */
	int (*set_threads)(mu_stage_t *s, int threads);
	void (*free)(mu_stage_t *s);

	/* ---- a device's side (pipeline/device.c) ---- */

	/* Is the model at path one of this kind? 0 with h filled; 1 when it
	 * is not this kind's (the next kind is asked); an error, with err,
	 * when it is but cannot be opened. */
	int (*probe)(const char *path, mu__held_t *h, char *err, size_t el);
	/* Optional: what the device publishes of a held model besides dir,
	 * digest and param_bytes (into m, a cJSON object). */
	void (*held_caps)(const mu__held_t *h, struct cJSON *m);
	/* ASSIGN of this kind (o: its JSON). Either the stage is ready
	 * (mu__device_ready) or its weights will stream: ss->pending set,
	 * READY saying so. A refusal is a fatal ERROR. */
	void (*assign)(mu__device_sess_t *ss, const mu__msg_t *m, const struct cJSON *o,
	               mu__reply_t *r);
	/* A message of `dev_msgs` for ss->pending; no reply unless it fails. */
	void (*receive)(mu__device_sess_t *ss, const mu__msg_t *m, const char *body,
	                mu_tensor_list_t *in, mu__reply_t *r);
	/* LOAD: build the stage from ss->pending (then mu__device_ready). */
	void (*load)(mu__device_sess_t *ss, const mu__msg_t *m, mu__reply_t *r);
	void (*pending_free)(void *pending);
};

/* The kinds, defined in their folders; the common code names them only
 * here. mu__stage_kinds lists them, NULL-terminated, in the order a device
 * asks them what a held model is. */
extern const mu__stage_kind_t mu__stage_kind_graph; /* pipeline/graph/stage.c */
extern const mu__stage_kind_t mu__stage_kind_llm;   /* pipeline/llm/stage.c */
extern const mu__stage_kind_t *const mu__stage_kinds[];

/* The kind called name, or NULL. */
const mu__stage_kind_t *mu__stage_kind_find(const char *name);
/* The kind whose stages answer a message of this type, or NULL. */
const mu__stage_kind_t *mu__stage_kind_owning(int type);
/* Into t: "graph, llm" (the kinds), or a kind's messages ("INFO, SEQ_OPEN,
 * ..."): what errors list, from the table. */
void mu__stage_kind_names(char *t, size_t n);
void mu__stage_kind_msgs(const mu__stage_kind_t *k, char *t, size_t n);

#endif
