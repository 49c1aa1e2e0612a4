/* SPDX-License-Identifier: MIT */
/*
 * What the pipeline's files share: the model (model.c), the stage
 * (stage.c), the serving loop (serve.c) and the coordinator (coord.c).
 */
#ifndef MU_PIPELINE_PIPELINE_INT_H
#define MU_PIPELINE_PIPELINE_INT_H

#include <pthread.h>
#include <stdint.h>

#include "muster/pipeline.h"
#include "core/strmap_int.h"
#include "model/model_int.h"
#include "model/plan_int.h"
#include "model/safetensors_int.h"
#include "pipeline/msg_int.h"

struct mu_model_s {
	char *dir;
	mu__graph_t g;
	mu__st_file_t st;
	mu__strmap_t pbytes;   /* param -> uint64_t f32 bytes */
	mu__strmap_t pshapes;  /* param -> mu__shape_t */
	mu__strmap_t shapes;   /* every value -> mu__shape_t */
	double *flops;         /* per node */
	uint64_t param_bytes;
	uint64_t digest;
	mu__strmap_t loaded;   /* mu_model_run's weights: name -> tensor */
};

struct mu_plan_s {
	mu__plan_t p;
};

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
	pthread_mutex_t lock;  /* one forward at a time */
};

/* FNV-1a, 64 bits, continued from h (start with MU_FNV_INIT). */
#define MU_FNV_INIT 0xcbf29ce484222325ULL
uint64_t mu__fnv(uint64_t h, const void *p, size_t n);

/* "[1, 2400]" */
void mu__dims_text(uint32_t rank, const uint64_t *dims, char *buf, size_t len);

/* VmRSS of this process in bytes (0 when unknown). */
uint64_t mu__self_rss(void);
/* This process's peak resident set since it started (VmHWM; unlike
 * getrusage's ru_maxrss it does not carry over the high-water mark of the
 * process that forked it). */
uint64_t mu__self_peak_rss(void);

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

void mu__pipe_handle(mu__serve_ctx_t *ctx, const mu__msg_t *m, const char *body,
                     mu_tensor_list_t *in, mu__reply_t *r);

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

/* What one device session is doing (device.c). */
typedef struct {
	mu_device_t *d;
	mu_stage_t *pending;    /* assigned, weights still streaming */
	double t0;              /* when ASSIGN came */
	uint64_t received;      /* weight bytes streamed so far */
	uint64_t budget_need;
} mu__device_sess_t;

/* Set ctx up to serve a session as device d (ss: the session's state);
 * _done frees whatever stage the session built. */
void mu__device_ctx(mu__serve_ctx_t *ctx, mu__device_sess_t *ss, mu_device_t *d);
void mu__device_ctx_done(mu__serve_ctx_t *ctx);

/*
 * A coordinator over sessions already open (the main job): n empty
 * stages, then each set from its session (taken on success) and its
 * READY/INFO description; setting a stage again replaces its device (the
 * node range must be the same). mu__coord_check: the stages cover the
 * graph. mu__coord_failed_stage: whose connection broke in the last
 * forward call (-1: none; a stage's own ERROR is not a broken connection).
 */
int mu__coord_new(int n, const mu_coord_opts_t *o, mu_coord_t **out);
int mu__coord_set(mu_coord_t *c, int i, mu_session_t *sess, const char *addr,
                  const char *desc, char *err, size_t el);
int mu__coord_check(const mu_coord_t *c, char *err, size_t el);
int mu__coord_failed_stage(const mu_coord_t *c);

#endif
