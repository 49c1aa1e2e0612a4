/* SPDX-License-Identifier: MIT */
/*
 * HTTP servers: the OpenAI-compatible API over a decoder LLM (what
 * `muster serve` runs; the routes, errors and limits are docs/serve.md's),
 * and the Prometheus endpoint of a metrics registry (what every server
 * command's --metrics runs).
 *
 * Both are h2o 2.2 on a libuv loop that the caller's thread runs
 * (mu_serve_run, mu_metrics_server_run). Run them on a thread that lives
 * as long as the process, such as the main thread: h2o keeps freed memory
 * in a per-thread free list it has no call to empty, so a thread that ran
 * it and ends leaks that memory.
 */
#ifndef MUSTER_SERVE_H
#define MUSTER_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "muster/common.h"
#include "muster/metrics.h"
#include "muster/pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the OpenAI API over a decoder LLM ---- */

typedef struct mu_serve_s mu_serve_t;

/* The longest API key, in bytes. */
#define MU_SERVE_KEY_MAX 512

typedef struct {
	size_t struct_size;          /* set by mu_serve_opts_init */

	/* The model and where it runs. The checkpoint is always opened here
	 * (its tokenizer and chat template); its weights only when it runs in
	 * this process. */
	const char *model;           /* an HF directory, a GGUF file or a
	                              * llama2.c checkpoint (required) */
	const char *tokenizer;       /* a llama2.c checkpoint's tokenizer;
	                              * NULL: tokenizer.bin or tok<vocab>.bin
	                              * beside it */
	const char *const *stages;   /* run over these `muster stage` servers
	                              * ("host:port", in order); NULL: not */
	int nstages;
	const mu_coord_opts_t *coord;/* toward the stages; NULL: defaults */
	const mu_cluster_opts_t *cluster; /* run over devices from this tracker
	                              * (key, devices, weights, narration; its
	                              * coord is used toward them), cut to fit
	                              * their memory; a device lost on the way
	                              * is replaced. NULL: not. Not with stages */
	int max_seqs;                /* with cluster: sequences each device
	                              * keeps a KV cache for; 0 (default):
	                              * parallel */
	uint64_t replay_bytes;       /* with stages or cluster: activations
	                              * kept to rebuild a lost stage's or
	                              * device's KV cache; default 256 MiB */
	int threads;                 /* compute threads in this process;
	                              * default 1 */
	int32_t ctx;                 /* positions a sequence may use; 0
	                              * (default): the model's, at most 4096
	                              * (and the stages' smallest) */
	int chunk;                   /* prompt positions per forward; 256 */
	int parallel;                /* requests generated at once, batched
	                              * and pipelined; more wait. Default 4 */
	int batch;                   /* 0: one sequence per batch (to measure
	                              * what batching gives); default 1 */
	int keepalive_ms;            /* over stages or devices: ping idle ones
	                              * this often (devices end idle sessions);
	                              * default 60000; 0: never */

	/* The HTTP side. */
	const char *host;            /* default "127.0.0.1" */
	int port;                    /* default 8080; 0: a free one
	                              * (mu_serve_port) */
	const char *model_name;      /* the model's id in the API; NULL
	                              * (default): the file or directory name
	                              * of model */
	int max_conns;               /* connections at once (past it, the
	                              * longest-idle one makes room; a newcomer
	                              * is closed only when all are busy);
	                              * default 32 */
	size_t max_body;             /* a request body (413 past it); default
	                              * 4 MiB, at least 1 KiB */
	int io_timeout_ms;           /* a client sending its request, or not
	                              * reading its stream; a stage making no
	                              * progress on a batch; requests waiting
	                              * for a lost stage to come back (then
	                              * 503 stage_down). Default 60000 */
	const char *api_key;         /* require "Authorization: Bearer KEY" on
	                              * every route but /health (401 without);
	                              * NULL (default): no key, unless: */
	const char *api_key_file;    /* read the key from this file (see
	                              * mu_serve_read_key) when api_key is NULL */
	mu_metrics_t *metrics;       /* count into this registry
	                              * (muster_serve_*, docs/metrics.md); NULL
	                              * (default): nothing. It must outlive the
	                              * server */

	/* What requests get when they do not say. */
	int32_t max_tokens;          /* a completion's length; 0 (default): the
	                              * rest of the context */
	float temperature;           /* 0 picks the likeliest; default 0.8 */
	int top_k;                   /* 0: all; default 40 */
	float top_p;                 /* in (0, 1]; default 0.95 */
	int have_seed;               /* seed is every such request's seed;
	                              * 0 (default): a random one each */
	uint64_t seed;
	int no_bos;                  /* do not start completion prompts with
	                              * BOS */
	int ignore_eos;              /* go on past the end-of-text token */
	const char *chat_template;   /* render chats as this family (chatml,
	                              * qwen3, llama3, llama3.1, llama2,
	                              * mistral) whatever the model's template
	                              * is; NULL (default): recognise it */

	int max_conns_per_addr;      /* connections from one client address;
	                              * 0 (default): a quarter of max_conns,
	                              * at least 4 (or max_conns). A newcomer past this or
	                              * max_conns displaces the longest-idle
	                              * connection (of its address, or of the
	                              * server); it is closed only when every
	                              * one is busy */
	int kv_type;                 /* a mu_llm_kv_type_t (muster/llm.h):
	                              * the KV cache's type here and on the
	                              * stages or devices; default
	                              * MU_LLM_KV_F16 */
} mu_serve_opts_t;

MU_EXTERN void mu_serve_opts_init_size(mu_serve_opts_t *o, size_t size);
#define mu_serve_opts_init(o) mu_serve_opts_init_size((o), sizeof(*(o)))

/*
 * Open the model where o says it runs (load it here, connect to the
 * stages, or place it on devices from the tracker), start the generation
 * engine over it and bind the HTTP port: when this returns 0 the server
 * accepts connections, and mu_serve_run answers them. Blocking (loading
 * and placing take time), on the thread that then runs it (its h2o
 * context is made here). On failure *out is NULL, nothing
 * is left running, and err says which step failed ("cannot open the
 * model: ...", "cannot use the stages: ...", "cannot listen on HOST port
 * P: ..."): MU_EARG for options out of range, MU_EBIND, or the failing
 * step's code.
 */
MU_EXTERN int mu_serve_start(const mu_serve_opts_t *o, mu_serve_t **out,
                             char *err, size_t errlen);
/* The bound port. */
MU_EXTERN int mu_serve_port(const mu_serve_t *s);
/* Positions a sequence may use (what o->ctx became). */
MU_EXTERN int mu_serve_ctx(const mu_serve_t *s);
/* Where the model runs, as /health says: "this process, 2 threads, kernels
 * avx2", "3 stages", "2 devices from the tracker". Valid until free. */
MU_EXTERN const char *mu_serve_where(const mu_serve_t *s);
/* The model's id in the API. Valid until free. */
MU_EXTERN const char *mu_serve_model_name(const mu_serve_t *s);
/*
 * Serve on the calling thread until mu_serve_stop. Then stop: new
 * connections are refused, running generations are cancelled (a stream
 * gets a shutting_down error event, a whole reply a 503), idle
 * connections close, and a client that does not read its reply is cut
 * off after io_timeout_ms; this returns when every connection has closed.
 * Once per server. 0.
 */
MU_EXTERN int mu_serve_run(mu_serve_t *s);
/* Make mu_serve_run stop and return. Any thread (not a signal handler);
 * before mu_serve_run runs, it returns as soon as it starts. */
MU_EXTERN void mu_serve_stop(mu_serve_t *s);
/* Free everything, the engine and the model included: after mu_serve_run
 * returned (or without it), on the thread that ran it. NULL is a no-op. */
MU_EXTERN void mu_serve_free(mu_serve_t *s);

/*
 * An API key file: its first line, without the line end, is the key, 1 to
 * MU_SERVE_KEY_MAX printable ASCII characters and no space. Into key
 * (size bytes, at least MU_SERVE_KEY_MAX + 1), NUL-terminated. 0; MU_EARG
 * when the file holds no such key (err: "must hold one key of 1 to 512
 * printable characters, without spaces"); -errno when it cannot be read
 * (err names the file and why). Say nothing about the file's mode: a
 * caller warns when others may read it.
 */
MU_EXTERN int mu_serve_read_key(const char *path, char *key, size_t size,
                                char *err, size_t errlen);

/* The chat template families that chat_template names, from 0 on
 * ("chatml", "qwen3", ...); NULL past the last. Static strings. */
MU_EXTERN const char *mu_serve_chat_family(int i);

/* ---- the Prometheus endpoint ---- */

/*
 * GET (and HEAD) /metrics answers the registry's text (mu_metrics_render,
 * rendered at each scrape), / a line pointing there, anything else 404,
 * another method 405, each on a connection of its own (Connection:
 * close). At most 16 connections at once: past that a new one displaces
 * the oldest still waiting for its request, so idle holders cannot stop
 * scrapes. A request head is at most 8 KiB, sent within 10 s.
 */
typedef struct mu_metrics_server_s mu_metrics_server_t;

typedef struct {
	size_t struct_size;       /* set by mu_metrics_server_opts_init */
	const char *host;         /* default "127.0.0.1" */
	int port;                 /* default 0: a free one (see _port) */
	mu_serve_t *serve;        /* NULL (default): a loop of its own, run by
	                           * mu_metrics_server_run. Else on that API
	                           * server's loop, which mu_serve_run runs:
	                           * start it before mu_serve_run, free it
	                           * after, before mu_serve_free */
} mu_metrics_server_opts_t;

MU_EXTERN void mu_metrics_server_opts_init_size(mu_metrics_server_opts_t *o,
                                                size_t size);
#define mu_metrics_server_opts_init(o) \
	mu_metrics_server_opts_init_size((o), sizeof(*(o)))

/*
 * Bind host:port and serve m (which must outlive the server). 0 with *out,
 * or MU_EARG, MU_ENOMEM, MU_EBIND / MU_ERESOLVE / -errno with err ("cannot
 * listen on HOST port P: ..."); *out NULL then. On the thread that runs
 * its loop.
 */
MU_EXTERN int mu_metrics_server_start(mu_metrics_t *m,
                                      const mu_metrics_server_opts_t *o,
                                      mu_metrics_server_t **out, char *err,
                                      size_t errlen);
MU_EXTERN int mu_metrics_server_port(const mu_metrics_server_t *ms);
/* One of its own loop: serve on the calling thread until
 * mu_metrics_server_stop. 0, or MU_EARG for one on an API server's loop. */
MU_EXTERN int mu_metrics_server_run(mu_metrics_server_t *ms);
/* Make mu_metrics_server_run return. Any thread (not a signal handler);
 * before it runs, it returns at once. */
MU_EXTERN void mu_metrics_server_stop(mu_metrics_server_t *ms);
/* Close every scraper's connection and free, on the thread that ran the
 * loop, once mu_metrics_server_run (or mu_serve_run) has returned or
 * before it ran. NULL is a no-op. */
MU_EXTERN void mu_metrics_server_free(mu_metrics_server_t *ms);

#ifdef __cplusplus
}
#endif
#endif
