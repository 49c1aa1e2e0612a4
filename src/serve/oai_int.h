/* SPDX-License-Identifier: MIT */
/*
 * The OpenAI API's JSON, apart from any I/O: decoding and checking a
 * /v1/completions or /v1/chat/completions request body, and encoding the
 * replies (a whole result, server-sent-event chunks, errors, the model
 * list) in the shapes the official clients parse.
 *
 * Every top-level field of a request is looked up in one table (oai.c):
 * those we honour, those that do not change the text (user, metadata,
 * store, ...), and those we cannot honour, which are refused (400 naming
 * the field) unless set to their neutral value: n > 1, best_of > 1, echo,
 * suffix, logprobs, logit_bias, tools and functions, a response_format
 * other than text, non-zero presence/frequency penalties, and the other
 * servers' extensions (min_p, repetition_penalty, grammar, json_schema,
 * mirostat, min_tokens, ignore_eos, stop_token_ids, ...). A field the
 * table does not know is refused too, as OpenAI's API refuses it: a
 * request never silently gets less than it asked for.
 */
#ifndef MU_SERVE_OAI_INT_H
#define MU_SERVE_OAI_INT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/buf_int.h"
#include "serve/chat_int.h"
#include "serve/stopscan_int.h"

typedef enum { MU__OAI_COMPLETIONS, MU__OAI_CHAT } mu__oai_kind_t;

/* An error as the API reports it: {"error": {"message", "type", "param",
 * "code"}} with an HTTP status. */
typedef struct {
	int status;
	const char *type;      /* "invalid_request_error", "server_error", ... */
	const char *param;     /* the field at fault (pbuf), or NULL */
	const char *code;      /* a machine-readable code, or NULL */
	char message[640];
	char pbuf[80];         /* param's copy: an error outlives the request it names */
} mu__oai_err_t;

/* Fill e; returns -1 so callers can `return mu__oai_fail(...)`. */
int mu__oai_fail(mu__oai_err_t *e, int status, const char *type, const char *param,
                 const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#define MU__OAI_MAX_MESSAGES 4096
/* JSON values a body may hold: a prompt of 2^20 token ids and the rest */
#define MU__OAI_MAX_VALUES ((1 << 20) + 65536)

/* A decoded request. Strings point into root (or into joined), both owned
 * by the request: free with mu__oai_req_free. */
typedef struct {
	mu__oai_kind_t kind;
	cJSON *root;
	const char *model;            /* NULL when absent */
	const char *prompt;           /* completions: the prompt text, or NULL */
	size_t prompt_len;            /* its bytes (it may hold NULs) */
	int32_t *prompt_ids;          /* completions: the prompt given as token ids */
	size_t nprompt_ids;
	mu__chat_msg_t *msgs;         /* chat */
	int nmsgs;
	char **joined;                /* contents given as parts, joined (owned) */
	int64_t max_tokens;           /* -1 when absent */
	int has_temperature, has_top_p, has_top_k, has_seed;
	double temperature, top_p;
	int top_k;                    /* 0: all */
	uint64_t seed;
	const char *stop[MU__STOPSCAN_MAX];
	int nstop;
	int stream, include_usage;
	int enable_thinking;          /* chat_template_kwargs.enable_thinking, -1 absent */
} mu__oai_req_t;

/*
 * Decode body[0..len) as a request of the given kind; token ids in a
 * prompt must be below vocab. Prompts and message contents keep a NUL
 * (\\u0000) with their lengths; other strings that hold one are refused. 0 with r filled, or -1 with e filled (status
 * 400, the field in param). r needs mu__oai_req_free either way.
 */
int mu__oai_decode(mu__oai_kind_t kind, const char *body, size_t len, int32_t vocab,
                   mu__oai_req_t *r, mu__oai_err_t *e);
void mu__oai_req_free(mu__oai_req_t *r);

/* What every reply of one request repeats. */
typedef struct {
	mu__oai_kind_t kind;
	const char *id;               /* "cmpl-..." or "chatcmpl-..." */
	int64_t created;              /* Unix seconds */
	const char *model;
} mu__oai_head_t;

typedef struct {
	int32_t prompt, completion;
} mu__oai_usage_t;

/* The JSON of a whole result. text may hold any bytes: what is not UTF-8
 * becomes U+FFFD. finish: "stop" or "length". 0, MU_ETOOBIG, MU_ENOMEM. */
int mu__oai_result(const mu__oai_head_t *h, const char *text, size_t len, const char *finish,
                   const mu__oai_usage_t *u, mu__buf_t *out);
/*
 * One server-sent event "data: {...}\n\n" with a piece of text (chat: as
 * delta.content; first adds delta.role), or with finish set, the last
 * chunk of the choice (empty text / empty delta). usage_null: the client
 * asked for usage, so every chunk carries "usage": null.
 */
int mu__oai_chunk(const mu__oai_head_t *h, const char *text, size_t len, int first,
                  const char *finish, int usage_null, mu__buf_t *out);
/* The usage event (stream_options.include_usage): no choices. */
int mu__oai_usage_chunk(const mu__oai_head_t *h, const mu__oai_usage_t *u, mu__buf_t *out);
/* The error's JSON body. */
int mu__oai_error_json(const mu__oai_err_t *e, mu__buf_t *out);
/* GET /v1/models: the one model served, with its context as meta. */
int mu__oai_models(const char *model, int64_t created, int32_t ctx, mu__buf_t *out);

#endif
