/* SPDX-License-Identifier: MIT */
/*
 * What the pipeline's files share: the stage (stage.c), the serving loop
 * (serve.c) and the coordinator (coord.c). The model and plan objects
 * they build on are the model layer's (model/model_api_int.h).
 */
#ifndef MU_PIPELINE_PIPELINE_INT_H
#define MU_PIPELINE_PIPELINE_INT_H

#include <uv.h>
#include <stdint.h>

#include "muster/md.h"
#include "muster/pipeline.h"
#include "core/proc_int.h"
#include "core/strmap_int.h"
#include "llm/llm_int.h"
#include "graph/model_int.h"
#include "graph/graph_int.h"
#include "graph/plan_int.h"
#include "formats/safetensors_int.h"
#include "pipeline/msg_int.h"

struct mu_stage_s {
	mu_model_t *model;     /* owned, when loaded from a directory */
	mu__graph_t own;       /* the graph, when assigned over a session */
	const mu__graph_t *g;
	int index, of;
	mu__plan_t plan;       /* one stage: the range and its boundary */
	mu__strmap_t in_shapes;/* input -> mu__shape_t, when known */
	mu__strmap_t params;   /* name -> mu_tensor_t */
	uint64_t digest;
	uint64_t resident;     /* bytes of the weights held */
	uint64_t rss;          /* the process's resident set after loading */
	double load_ms;
	char *desc;            /* JSON */
	uv_mutex_t lock;  /* one forward at a time */
	mu__pool_t *pool;      /* its forwards' products split over it; NULL:
	                        * one thread (mu_stage_set_threads) */
	struct mu__llm_stage_s *llm; /* set: a decoder LLM's stage (pipeline/llm/stage.c) */
};

/*
 * A stage to be filled over a session: the graph's JSON text, the node
 * range, the input shapes (name -> shape JSON object, may be NULL) and
 * the dtypes of those that are not F32 (name -> "I64" ..., may be NULL).
 * Then mu__stage_add_param for each weight and mu__stage_finish.
 */
int mu__stage_new(const char *graph_json, size_t len, int first, int last,
                  int index, int of, uint64_t digest, const cJSON *in_shapes,
                  const cJSON *in_dtypes, mu_stage_t **out, char *err, size_t errlen);
/* Take t as one of the stage's weights (checked: wanted, not seen yet). */
int mu__stage_add_param(mu_stage_t *s, mu_tensor_t *t, char *err, size_t errlen);
/* Every weight is there: record figures, describe. */
int mu__stage_finish(mu_stage_t *s, double load_ms, char *err, size_t errlen);

/*
 * Serving, apart from any I/O: a message whose body was read in full
 * (text, NUL-terminated, for JSON types; decoded tensors for frame types)
 * becomes a reply. The stage's own blocking loop over a session
 * (mu__serve_chan) and `muster stage`'s libuv server (stage_server.c) both call
 * mu__pipe_handle; FORWARD runs the stage's compute, so the libuv server
 * calls it off the loop.
 */
typedef struct mu__serve_ctx_s mu__serve_ctx_t;

typedef struct {
	mu__msg_t m;            /* type 0: no reply */
	char *text;             /* body for INFO, READY, ERROR */
	int text_owned;
	mu_tensor_list_t out;   /* body for RESULT */
	int fatal;              /* close once it is sent */
	int64_t positions;      /* SEQ_FORWARD/SEQ_BATCH's RESULT: positions run (metrics) */
} mu__reply_t;

struct mu__serve_ctx_s {
	mu_stage_t *stage;       /* NULL until one is assigned */
	const char *name;        /* "stage 2/3", for logs */
	int idle_ms;             /* between messages; < 0 forever */
	void (*on_forward)(void *ud);
	void *ud;
	volatile int *stop;
	/* types ASSIGN, WEIGHTS, LOAD (sessions of the main job); NULL: refused */
	void (*on_other)(mu__serve_ctx_t *ctx, const mu__msg_t *m, const char *body,
	                 mu_tensor_list_t *in, mu__reply_t *r);
	void *other_ud;
};

void mu__reply_init(mu__reply_t *r);
void mu__reply_free(mu__reply_t *r);
/* An ERROR reply to id, the text copied. */
void mu__reply_error(mu__reply_t *r, uint64_t id, int code, int fatal, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* owner: who sent it (a connection's serial), for state kept per peer. */
void mu__pipe_handle(mu__serve_ctx_t *ctx, uint64_t owner, const mu__msg_t *m, const char *body,
                     mu_tensor_list_t *in, mu__reply_t *r);

/*
 * Serve one session (a blocking channel) until it closes, says CLOSE, or
 * breaks the protocol (told why first, when its header was readable), or
 * *stop is set. 0 for an orderly end.
 */
int mu__serve_chan(mu__chan_t *c, mu__serve_ctx_t *ctx);

/* ---- stages of decoder LLMs (pipeline/llm/stage.c) ---- */

typedef struct mu__llm_stage_s mu__llm_stage_t;

typedef struct {
	int threads;          /* compute threads */
	int max_seqs;         /* sequences open at once (all connections) */
	uint64_t kv_bytes;    /* KV cache all sequences may reserve */
	int max_chunk;        /* positions per SEQ_FORWARD */
} mu__llm_stage_opts_t;

void mu__llm_stage_opts_init(mu__llm_stage_opts_t *o);
/*
 * Load the stage of a checkpoint (an HF directory, GGUF or llama2.c file):
 * layers [first, last) when first >= 0, else stage index of `of` split by
 * weight bytes. The stage's own weights are made resident; nothing else
 * of the files is read.
 */
int mu__stage_open_llm(const char *path, const char *tok_path, int index, int of,
                       int first, int last, const mu__llm_stage_opts_t *o,
                       mu_stage_t **out, char *err, size_t el);
/* The same from an open source (taken: freed with the stage, or on
 * failure) whose digest is given (a stage assembled from streamed
 * tensors cannot compute the whole checkpoint's). */
int mu__stage_from_llm_src(mu__llm_src_t *src, uint64_t digest, int index, int of, int first,
                           int last, const mu__llm_stage_opts_t *o, mu_stage_t **out,
                           char *err, size_t el);
void mu__llm_stage_free(mu__llm_stage_t *s);
/* SEQ_OPEN, SEQ_FORWARD and SEQ_CLOSE from the connection owner. Any
 * thread. */
void mu__llm_stage_handle(mu__llm_stage_t *s, uint64_t owner, const mu__msg_t *m,
                          const char *body, mu_tensor_list_t *in, mu__reply_t *r);
/* The connection owner has gone: free its sequences. Any thread. */
void mu__llm_stage_release(mu__llm_stage_t *s, uint64_t owner);
/* KV cache bytes reserved and sequences open, as of the last change.
 * Any thread, and never waits for a forward (metrics read it). */
void mu__llm_stage_usage(mu__llm_stage_t *s, uint64_t *kv_bytes, int *seqs);

/* Into t: why a message was cut short after got of its `of` bytes of
 * `what` ("header", "FORWARD body", ...): a stall of stall_ms when rc is
 * -ETIMEDOUT, else the end of the stream or rc's text. */
void mu__cut_short(char *t, size_t n, const char *what, uint64_t got, uint64_t of, int rc,
                   int stall_ms);

/* ---- devices from the tracker, coordinator side (devices.c) ---- */

typedef struct {
	mu_session_t *sess;     /* NULL once handed on or closed */
	char addr[300];
	uint64_t budget;        /* its memory budget */
	int threads;
	int nheld;
	uint64_t held[64];      /* digests of the models it holds */
} mu__device_t;

typedef struct {
	const char *tracker_host, *key;
	int tracker_port;
	double priority;
	int request_timeout_ms;  /* to get each device */
	int io_timeout_ms;       /* on its session */
	uint64_t max_frame_bytes;
	const mu_secure_t *sec;  /* toward the devices; NULL: plain TCP */
	void (*say)(void *ud, const char *line); /* narration, or NULL */
	void *ud;
} mu__devpool_opts_t;

typedef struct {
	mu__devpool_opts_t o;
	char *key, *thost;
	int tport;
	double priority;
	int request_timeout_ms, io_timeout_ms;
	uint64_t max_frame;
	mu_md_agent_t *md;       /* fetches the devices' metadata */
	void (*say)(void *ud, const char *line);
	void *ud;
} mu__devpool_t;

/* A pool over a tracker and key, with its own md agent. */
int mu__devpool_init(mu__devpool_t *p, const mu__devpool_opts_t *o, char *err, size_t el);
void mu__devpool_free(mu__devpool_t *p);
void mu__devpool_say(const mu__devpool_t *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* One device (a session, what it offers), or n requested at once. */
int mu__devpool_get(mu__devpool_t *p, mu__device_t *d, char *err, size_t el);
int mu__devpool_get_many(mu__devpool_t *p, mu__device_t *devs, int n, char *err, size_t el);
int mu__device_holds(const mu__device_t *d, uint64_t digest);
/* Send a text message on ch and read its reply of type want (text into
 * *reply); an ERROR reply becomes an error with its text in err. */
int mu__device_exchange(mu__chan_t *ch, mu__msg_t *m, const char *body, int want, char **reply,
                        char *err, size_t el, const char *addr);

/* What one device session is doing (device.c). */
typedef struct {
	mu_device_t *d;
	mu_stage_t *pending;    /* assigned, weights still streaming */
	double t0;              /* when ASSIGN came */
	uint64_t received;      /* weight bytes streamed so far */
	uint64_t budget_need;
	struct mu__llm_pending_s *llm; /* an LLM stage whose tensors stream in */
} mu__device_sess_t;

/* Set ctx up to serve a session as device d (ss: the session's state);
 * _done frees whatever stage the session built. */
void mu__device_ctx(mu__serve_ctx_t *ctx, mu__device_sess_t *ss, mu_device_t *d);
void mu__device_ctx_done(mu__serve_ctx_t *ctx);

/* The device's side of an LLM stage (pipeline/llm/device.c): ASSIGN with "kind":
 * "llm" (local_path: the device's checkpoint of that digest, or NULL),
 * TENSOR, LOAD. The device's cache directory and budget come from ss->d. */
typedef struct mu__llm_pending_s mu__llm_pending_t;
void mu__device_assign_llm(mu__serve_ctx_t *ctx, mu__device_sess_t *ss, const mu__msg_t *m,
                           const cJSON *o, const char *local_path, mu__reply_t *r);
void mu__device_tensor_llm(mu__device_sess_t *ss, const mu__msg_t *m, const char *body,
                           mu__reply_t *r);
void mu__device_load_llm(mu__serve_ctx_t *ctx, mu__device_sess_t *ss, const mu__msg_t *m,
                         mu__reply_t *r);
void mu__llm_pending_free(mu__llm_pending_t *p);
/* What pipeline/llm/device.c needs of the device. */
const char *mu__device_cache_dir(const mu_device_t *d);
uint64_t mu__device_mem(const mu_device_t *d);
int mu__device_threads(const mu_device_t *d);

/*
 * A coordinator over sessions already open (the main job): n empty
 * stages, then each set from its session (taken on success) and its
 * READY/INFO description; setting a stage again replaces its device (the
 * node range must be the same). mu__coord_check: the stages cover the
 * graph. mu__coord_failed_stage: whose connection broke in the last
 * forward call (-1: none; a stage's own ERROR is not a broken connection).
 */
int mu__coord_new(int n, const mu_coord_opts_t *o, mu_coord_t **out);
/* Fill o with this build's coordinator defaults (full size). */
void mu__coord_defaults(mu_coord_opts_t *o);
int mu__coord_set(mu_coord_t *c, int i, mu_session_t *sess, const char *addr,
                  const char *desc, char *err, size_t el);
int mu__coord_check(const mu_coord_t *c, char *err, size_t el);
int mu__coord_failed_stage(const mu_coord_t *c);

#endif
