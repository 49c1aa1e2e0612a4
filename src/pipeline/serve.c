/* SPDX-License-Identifier: MIT */
/*
 * Serving a stage. mu__pipe_handle turns a message read in full into its
 * reply, apart from any I/O: INFO and CLOSE here, the messages of the
 * stage's kind through the kind's table (pipeline/stage_int.h), those of
 * a device's session to the device. Two transports drive it:
 *
 *  - mu__serve_chan (here): a blocking loop over one tracker session, on
 *    the session's own thread (the device serves one job at a time);
 *  - `muster stage`'s server, one libuv loop for every connection
 *    (stage_server.c, stage_conn.c).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc_int.h"
#include "core/log_int.h"
#include "pipeline/serve_int.h"

#define LOG "stage"

/* ---- the handler ---- */

void mu__reply_init(mu__reply_t *r)
{
	memset(r, 0, sizeof(*r));
	mu_tensor_list_init(&r->out);
}

void mu__reply_free(mu__reply_t *r)
{
	if (r->text_owned)
		mu__free(r->text);
	mu_tensor_list_free(&r->out);
	mu__reply_init(r);
}

void mu__reply_error(mu__reply_t *r, uint64_t id, int code, int fatal, const char *fmt, ...)
{
	char text[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	mu__reply_free(r);
	r->m = (mu__msg_t){MU_MSG_ERROR, code, id, 0, 0, 0};
	r->text = mu__strdup(text);
	r->text_owned = 1;
	r->fatal = fatal;
}

void mu__reply_text(mu__reply_t *r, int type, uint64_t id, const char *text)
{
	r->m = (mu__msg_t){(uint16_t)type, 0, id, 0, 0, 0};
	r->text = (char *)text;
	r->text_owned = 0;
}

/* INFO: the stage's description (its kind's, as of now, when it keeps
 * one), or the device's before a stage is assigned. */
static void info(mu__serve_ctx_t *ctx, const mu__msg_t *m, const char *body,
                 mu_tensor_list_t *in, mu__reply_t *r)
{
	if (ctx->stage == NULL && ctx->on_other != NULL)
		ctx->on_other(ctx, m, body, in, r); /* a device not assigned yet */
	else if (ctx->stage == NULL)
		mu__reply_error(r, m->id, MU_EARG, 0, "no stage is loaded here yet");
	else if (ctx->stage->kind->info != NULL)
		ctx->stage->kind->info(ctx->stage, m, r);
	else
		mu__reply_text(r, MU_MSG_INFO, m->id, mu_stage_describe(ctx->stage));
}

/* A message of a stage kind that is not this stage's. */
static void other_kind(mu__serve_ctx_t *ctx, const mu__stage_kind_t *k, const mu__msg_t *m,
                       mu__reply_t *r)
{
	const mu__stage_kind_t *mine = ctx->stage->kind;
	char msgs[256];

	mu__stage_kind_msgs(mine, msgs, sizeof(msgs));
	mu__reply_error(r, m->id, MU_EPROTO, 0, "%s is for %s stages; this is a stage of kind %s, "
	                "which answers %s", mu__msg_type_name(m->type), k->name, mine->name, msgs);
}

int mu__pipe_may_wait(const mu__serve_ctx_t *ctx, const mu__msg_t *m)
{
	const mu__stage_kind_t *k = ctx->stage != NULL ? ctx->stage->kind : NULL;

	return k != NULL && ((k->msgs & MU__MSG_BIT(m->type)) != 0 ||
	                     (m->type == MU_MSG_INFO && k->info != NULL));
}

void mu__pipe_handle(mu__serve_ctx_t *ctx, uint64_t owner, const mu__msg_t *m,
                     const char *body, mu_tensor_list_t *in, mu__reply_t *r)
{
	const mu__stage_kind_t *k;

	mu__reply_init(r);
	if (body == NULL)
		body = "";
	switch (m->type) {
	case MU_MSG_INFO:
		info(ctx, m, body, in, r);
		return;
	case MU_MSG_CLOSE:
		r->fatal = 1; /* no reply: the peer is going */
		return;
	case MU_MSG_ASSIGN:
	case MU_MSG_WEIGHTS:
	case MU_MSG_TENSOR:
	case MU_MSG_LOAD:
		if (ctx->on_other != NULL) {
			ctx->on_other(ctx, m, body, in, r);
			return;
		}
		break;
	default:
		break;
	}
	if (ctx->stage != NULL && (ctx->stage->kind->msgs & MU__MSG_BIT(m->type)) != 0) {
		ctx->stage->kind->handle(ctx->stage, owner, ctx->name, m, body, in, r);
		return;
	}
	k = mu__stage_kind_owning(m->type);
	if (k != NULL && ctx->stage == NULL) {
		mu__reply_error(r, m->id, MU_EARG, 0, "no stage is loaded here yet");
		return;
	}
	if (k != NULL) {
		other_kind(ctx, k, m, r);
		return;
	}
	mu__reply_error(r, m->id, MU_EPROTO, 0, "a %s message is not expected here",
	                mu__msg_type_name(m->type));
}

/*
 * The cause for a message cut short: how much of its header (what is
 * "header") or body (what is "FORWARD body", ...) came, then what
 * happened: a stall of stall_ms (rc -ETIMEDOUT), or the end of the stream.
 */
void mu__cut_short(char *t, size_t n, const char *what, uint64_t got, uint64_t of, int rc,
                   int stall_ms)
{
	int k = snprintf(t, n, "truncated message: %llu of %llu %s bytes, then ",
	                 (unsigned long long)got, (unsigned long long)of, what);

	if (k < 0 || (size_t)k >= n)
		return;
	if (rc == -ETIMEDOUT)
		snprintf(t + k, n - (size_t)k, "nothing for %g s", stall_ms / 1000.0);
	else if (rc == MU_EEOF || rc == MU_EPROTO)
		snprintf(t + k, n - (size_t)k, "the stream ended");
	else
		snprintf(t + k, n - (size_t)k, "%s", mu_strerror(rc));
}

/* ---- over a blocking channel (tracker sessions) ---- */

static int chan_reply(mu__chan_t *c, mu__reply_t *r)
{
	if (r->m.type == MU_MSG_RESULT)
		return mu__msg_send_frame(c, &r->m, &r->out);
	if (r->m.type != 0)
		return mu__msg_send(c, &r->m, r->text, r->text != NULL ? strlen(r->text) : 0);
	return 0;
}

/* Say why (a peer that stalled, or only shut its sending side, still
 * reads), then stop writing and let what it has in flight arrive. */
static void chan_fail(mu__chan_t *c, mu__serve_ctx_t *ctx, uint64_t id, int code,
                      const char *why)
{
	mu__reply_t r;

	mu__reply_init(&r);
	mu__reply_error(&r, id, code, 1, "%s", why);
	chan_reply(c, &r);
	mu__log(MU_LOG_WARN, LOG, "%s: closing the session: %s", ctx->name, why);
	mu__reply_free(&r);
	mu__chan_linger(c);
}

int mu__serve_chan(mu__chan_t *c, mu__serve_ctx_t *ctx)
{
	mu__msg_t m;
	mu__reply_t r;
	mu_tensor_list_t in;
	char *body, why[512];
	int rc = 0;

	while (ctx->stop == NULL || !*ctx->stop) {
		rc = mu__msg_recv(c, &m, ctx->idle_ms);
		if (rc == MU_EEOF)
			return 0; /* closed between messages: a goodbye */
		if (rc != 0 && c->got > 0 && c->got < MU_MSG_HEADER) {
			mu__cut_short(why, sizeof(why), "header", c->got, MU_MSG_HEADER, rc, c->io_ms);
			chan_fail(c, ctx, 0, rc == -ETIMEDOUT ? rc : MU_EPROTO, why);
			return rc;
		}
		if (rc == MU_EBADMAGIC || rc == MU_EPROTO || rc == MU_ETOOBIG) {
			snprintf(why, sizeof(why), "bad message header: %s", mu_strerror(rc));
			chan_fail(c, ctx, 0, rc, why);
			return rc;
		}
		if (rc != 0)
			return rc; /* idle too long between messages, or a broken socket */
		body = NULL;
		mu_tensor_list_init(&in);
		rc = mu__msg_is_frame(m.type) ? mu__msg_recv_frame(c, &m, &in)
		                              : mu__msg_recv_body(c, &m, &body);
		if (rc != 0) {
			char what[32];

			snprintf(what, sizeof(what), "%s body", mu__msg_type_name(m.type));
			if (rc == MU_EEOF || rc == -ETIMEDOUT)
				mu__cut_short(why, sizeof(why), what, c->got, m.len, rc, c->io_ms);
			else
				snprintf(why, sizeof(why), "bad %s: %s", what, mu_strerror(rc));
			chan_fail(c, ctx, m.id, rc == MU_EEOF ? MU_EPROTO : rc, why);
			mu_tensor_list_free(&in);
			return rc;
		}
		mu__pipe_handle(ctx, 0, &m, body, &in, &r);
		mu__free(body);
		mu_tensor_list_free(&in);
		rc = chan_reply(c, &r);
		if (rc == 0 && r.m.type == MU_MSG_RESULT && ctx->on_forward != NULL)
			ctx->on_forward(ctx->ud);
		if (rc == 0 && r.fatal && r.m.type == MU_MSG_ERROR)
			mu__chan_linger(c);
		if (rc == 0 && r.fatal)
			rc = m.type == MU_MSG_CLOSE ? 0 : r.m.status;
		mu__reply_free(&r);
		if (rc != 0 || m.type == MU_MSG_CLOSE)
			return rc;
	}
	return 0;
}
