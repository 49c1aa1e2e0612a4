/* SPDX-License-Identifier: MIT */
/*
 * The OpenAI API over HTTP (http.c) in front of the generation engine
 * (llm/engine_int.h): what mu_serve_start (serve.c) runs.
 *
 *   api.c      the server: its loop, the routes, turning a request into
 *              prompt ids and sampling options, the one log line per
 *              request
 *   api_prep.c a request's body turned into what the engine runs (JSON,
 *              the chat template, the tokenizer) on libuv's worker
 *              threads, never on the loop; the result posted back to it
 *   api_gen.c  one generation: the engine's callbacks, the hand-off of
 *              text to the loop, the reply (whole or as server-sent
 *              events), a client that goes away
 *
 * Threads: the loop runs on the thread that calls mu__srv_run; a request's
 * preparation runs on a worker thread (uv_queue_work) with the server's
 * read-only parts (options, tokenizer, chat template); the engine calls
 * back on its own thread. Text crosses from the engine to the loop
 * under the server's lock and a uv_async_t wakes the loop; nothing else
 * is shared.
 */
#ifndef MU_SERVE_API_INT_H
#define MU_SERVE_API_INT_H

#include <stdint.h>

#include <h2o.h>
#include <uv.h>

#include "core/buf_int.h"
#include "core/list_int.h"
#include "tok/tok_int.h"
#include "llm/engine_int.h"
#include "core/metrics_int.h"
#include "serve/chat_int.h"
#include "serve/http_int.h"
#include "serve/oai_int.h"
#include "serve/stopscan_int.h"

typedef struct {
	const char *host;
	int port;
	const char *model_name;    /* the id clients name in "model" */
	int max_conns;
	int max_per_addr;          /* connections from one client address */
	size_t max_body;           /* bytes of a request body (413 past it) */
	int io_timeout_ms;         /* reading a request; a client not reading its reply */
	mu__sample_opts_t sample;  /* defaults of requests that say nothing */
	int have_seed;             /* sample.seed given: every request without one uses it */
	int32_t max_tokens;        /* default completion length; 0: the rest of the context */
	int32_t ctx;               /* positions a sequence may use at most */
	int no_bos, ignore_eos;
	const char *chat_template; /* force a family; NULL: recognise the model's */
	const char *where;         /* "this process, 2 threads" / "3 stages", for /health */
	mu_metrics_t *metrics;     /* muster_serve_* (docs/metrics.md); NULL: none */
	const char *api_key;       /* NULL: open; else every route but /health
	                            * needs "Authorization: Bearer <api_key>" */
} mu__srv_opts_t;

typedef struct mu__srv_s mu__srv_t;

/* A server on its own loop over e and tok (both outlive it). 0, or an
 * error with why. */
int mu__srv_new(const mu__srv_opts_t *o, mu__eng_t *e, const mu__tok_t *tok, mu__srv_t **out,
                char *why, size_t wl);
int mu__srv_port(const mu__srv_t *s);
/* The server's loop (the main thread runs it in mu__srv_run): others may
 * add handles there before mu__srv_run, and close them before mu__srv_free. */
uv_loop_t *mu__srv_loop(mu__srv_t *s);
/* Serve until mu__srv_stop, then end every request and connection. */
int mu__srv_run(mu__srv_t *s);
/* Ask mu__srv_run to return (any thread, async-signal context excluded). */
void mu__srv_stop(mu__srv_t *s);
void mu__srv_free(mu__srv_t *s);

/* ---- shared by api.c and api_gen.c ---- */

struct mu__srv_s {
	mu__srv_opts_t o;
	uv_loop_t loop;
	mu__http_t *http;
	int port;
	mu__eng_t *eng;
	const mu__tok_t *tok;
	mu__chat_tmpl_t chat;
	int have_chat;
	char chat_why[600];        /* why chat is unavailable */
	int32_t eot;               /* the chat template's end-of-turn id, or -1 */
	uv_async_t wake;           /* the engine has news; or stop was asked */
	uv_timer_t tick;           /* clients that went away, stalled writers */
	uv_mutex_t lock;           /* guards dirty and every gen's shared part */
	mu__list_t dirty;          /* gens with news for the loop */
	mu__list_t gens;           /* every live gen (loop thread) */
	int ngens;
	mu__list_t preps;          /* requests being prepared (loop thread) */
	int npreps;
	int stop_asked;            /* atomic */
	int stopping;
	char engine_error[300];    /* the engine stopped (a stage failed): why */
	char last_error[300];      /* the last generation that failed: why */
	uint64_t served, next_id;
	int64_t started;
	/* docs/metrics.md; each NULL without a registry */
	mu__metric_t *m_reqs, *m_secs, *m_prompt, *m_completion, *m_running;
};

/* What a generation request asks for, ready for the engine. */
typedef struct {
	mu__oai_kind_t kind;
	int stream, include_usage;
	int32_t *ids;              /* the prompt (owned by the caller) */
	size_t nids;
	int32_t max_tokens;
	mu__sample_opts_t sample;
	const char *const *stop;
	int nstop;
} mu__gen_ask_t;

typedef enum { MU__PREP_COMPLETIONS, MU__PREP_CHAT, MU__PREP_TEMPLATE } mu__prep_kind_t;

/* Decode req's body, render and tokenize it off the loop, then start its
 * generation (or answer /apply-template, or the error) on the loop.
 * Answers req on every path. */
void mu__prep_start(mu__srv_t *s, h2o_req_t *req, mu__prep_kind_t kind, double t0);
/* The loop: clients of requests in preparation that went away. */
void mu__prep_tick(mu__srv_t *s);
/* A whole JSON reply, logged. */
void mu__srv_reply_json(h2o_req_t *req, int status, mu__buf_t *b, int32_t prompt, double t0,
                        const char *note);

/* Start generating for req. Answers req on every path: an error reply
 * when the engine refuses it. */
void mu__gen_start(mu__srv_t *s, h2o_req_t *req, const mu__gen_ask_t *a, double t0);
/* The loop: take the engine's news (wake); check clients (tick). */
void mu__gen_take_news(mu__srv_t *s);
void mu__gen_tick(mu__srv_t *s);
/* Cancel every running generation (stopping the server). */
void mu__gen_cancel_all(mu__srv_t *s);
/* Send an OpenAI error reply and log the request. */
void mu__srv_error(mu__srv_t *s, h2o_req_t *req, const mu__oai_err_t *e, double t0);
/* The request's log line: what is "METHOD PATH". */
void mu__srv_log(const char *what, int status, int32_t prompt, int32_t completion, double t0,
                 const char *note);

#endif
