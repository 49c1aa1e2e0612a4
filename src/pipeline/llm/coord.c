/* SPDX-License-Identifier: MIT */
/*
 * The coordinator of a decoder LLM split over `muster stage` servers: it
 * holds no weights, only the tokenizer (in the caller) and a connection
 * to each stage. Each stage is a link of the generation engine
 * (llm/engine_int.h): the engine sends the token ids to the first stage,
 * relays each stage's activations to the next, and takes the logits from
 * the last. The stages are checked before anything runs: every one serves an
 * LLM, all the same checkpoint (digest), their layer ranges in order
 * cover the model, the first embeds and the last has the head.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc_int.h"
#include "core/json_int.h"
#include "core/net_int.h"
#include "core/sock_int.h"
#include "core/time_int.h"
#include "pipeline/llm/coord_int.h"
#include "pipeline/llm/seqmsg_int.h"
#include "pipeline/msg_int.h"

/* A stage lost and tried again: how long one attempt may take at most
 * (the engine waits meanwhile). */
#define RECONNECT_MS 2000

typedef struct {
	struct mu__llm_coord_s *co;
	int i;
	uint64_t want_id;    /* the id the outstanding batch's reply carries */
	mu_tensor_list_t res; /* the link's last batch result */
	int32_t max_seqs;
	mu_session_t *sess;  /* a tracker session, or NULL for a plain socket */
	char addr[300];
	mu_stream_t *fd;   /* the stage's stream (the session's, if any) */
	mu__chan_t c;
	char *desc;
	int first, last;
	int ids_f32;         /* it reads ids as F32 only: a stage of before I32 ids */
	int kv_named;        /* its SEQ_OPEN takes "kv_type" (it lists "kv_types") */
	int streamed;        /* its weights were streamed from ours (the cluster) */
	int32_t want_rows, want_cols; /* the outstanding batch's result: [rows, cols] */
	double compute_ms;   /* the stage's own time, summed */
} lstage_t;

struct mu__llm_coord_s {
	lstage_t *s;
	int n;
	uint64_t next_id;
	int32_t vocab, dim, layers, ctx, max_chunk;
	char digest[32];
	mu__llm_coord_opts_t o;
};

void mu__llm_coord_opts_init(mu__llm_coord_opts_t *o)
{
	o->connect_timeout_ms = 10000;
	o->io_timeout_ms = 60000;
	o->kv_type = MU__KV_F16;
	o->max_frame_bytes = (uint64_t)1 << 30;
	o->sec = NULL;
	o->src = NULL;
	o->sha = NULL;
}

static int fail(const mu__llm_coord_t *c, int i, int rc, char *err, size_t el, const char *what)
{
	snprintf(err, el, "stage %d/%d (%s): %s: %s", i, c->n, c->s[i].addr, what,
	         rc == MU_EEOF ? "the connection was lost" : mu_strerror(rc));
	return rc;
}

/* The reply to request id: type want, or an ERROR whose text goes to err. */
static int reply(mu__llm_coord_t *c, int i, uint64_t id, int want, mu__msg_t *m, char *err,
                 size_t el, const char *what)
{
	lstage_t *s = &c->s[i];
	char *text = NULL;
	int rc = s->fd != NULL ? mu__msg_recv(&s->c, m, s->c.io_ms) : MU_EEOF;

	if (rc != 0)
		return fail(c, i, rc, err, el, what);
	if (m->type == MU_MSG_ERROR) {
		rc = mu__msg_recv_body(&s->c, m, &text);
		if (rc != 0)
			return fail(c, i, rc, err, el, what);
		snprintf(err, el, "stage %d/%d (%s) failed %s: %s", i, c->n, s->addr, what, text);
		mu__free(text);
		return m->status < 0 ? m->status : MU_EFAIL;
	}
	if (m->type != want || m->id != id) {
		snprintf(err, el, "stage %d/%d (%s): sent %s for request %llu while %s %llu was due", i,
		         c->n, s->addr, mu__msg_type_name(m->type), (unsigned long long)m->id,
		         mu__msg_type_name(want), (unsigned long long)id);
		return MU_EPROTO;
	}
	return 0;
}

/* Send a text message and read its text reply (of type want). */
static int ask(mu__llm_coord_t *c, int i, mu__msg_t *m, const char *body, int want, char **out,
               char *err, size_t el, const char *what)
{
	int rc;

	m->id = ++c->next_id;
	rc = c->s[i].fd == NULL ? MU_EEOF /* lost, not back yet */
	   : mu__msg_send(&c->s[i].c, m, body, body != NULL ? strlen(body) : 0);
	if (rc != 0)
		return fail(c, i, rc, err, el, what);
	if ((rc = reply(c, i, m->id, want, m, err, el, what)) != 0)
		return rc;
	rc = out != NULL ? mu__msg_recv_body(&c->s[i].c, m, out) : mu__msg_skip(&c->s[i].c, m);
	return rc != 0 ? fail(c, i, rc, err, el, what) : 0;
}

static int num(const cJSON *d, const char *k, int32_t *v)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(d, k);

	if (!mu__json_is_int(x, 0, INT32_MAX))
		return -1;
	*v = (int32_t)x->valuedouble;
	return 0;
}

/* Stage i (description d) holds layers [first, last) of the weights we
 * hold: its weights digest is ours for those layers. A stage that does
 * not say one cannot be told from one serving other weights of the same
 * shape, so it is refused too (docs/protocols/pipeline.md). */
static int check_weights(const mu__llm_coord_t *c, int i, const cJSON *d, int first, int last,
                         char *err, size_t el)
{
	const cJSON *w = cJSON_GetObjectItemCaseSensitive(d, "weights_sha256");
	const cJSON *mn = cJSON_GetObjectItemCaseSensitive(d, "model");
	const char *ours = strrchr(c->o.src->path, '/');
	char want[65];
	int rc;

	ours = ours != NULL ? ours + 1 : c->o.src->path;
	/* a device of before that took our tensors checked each one against
	 * the SHA-256 we sent: its weights are ours, though it cannot say so */
	if (!cJSON_IsString(w) && c->s[i].streamed)
		return 0;
	if (!cJSON_IsString(w)) {
		snprintf(err, el, "stage %d/%d (%s) does not say which weights it holds (its INFO has "
		         "no \"weights_sha256\": a muster stage of before weights digests), so it "
		         "cannot be told from a stage serving other weights of the same shape; run "
		         "it with this version of muster", i, c->n, c->s[i].addr);
		return MU_EPROTO;
	}
	if ((rc = mu__llm_weights_digest(c->o.src, c->o.sha, first, last, want)) != 0) {
		snprintf(err, el, "the weights digest of layers [%d, %d) of %s: %s", first, last, ours,
		         mu_strerror(rc));
		return rc;
	}
	if (strcmp(w->valuestring, want) == 0)
		return 0;
	snprintf(err, el, "stage %d/%d (%s) serves other weights than %s: its layers [%d, %d) "
	         "(of %.100s) have weights digest %.16s, ours %.16s (weights_sha256, SHA-256 of "
	         "the tensors' SHA-256s)", i, c->n, c->s[i].addr, ours, first, last,
	         cJSON_IsString(mn) ? mn->valuestring : "a checkpoint it does not name",
	         w->valuestring, want);
	return MU_EARG;
}

/* Stage i's INFO: an LLM stage that continues the chain where the last
 * one ended, of the same checkpoint. */
/* Whether a stage described by d keeps KV caches of type t: one that
 * lists "kv_types" (then *named: its SEQ_OPEN takes "kv_type") if t is
 * among them, one of before them if t is f32. */
static int kv_takes(const cJSON *d, int t, int *named)
{
	const cJSON *types = cJSON_GetObjectItemCaseSensitive(d, "kv_types"), *e;

	*named = cJSON_IsArray(types);
	if (!*named)
		return t == MU__KV_F32;
	cJSON_ArrayForEach(e, types)
		if (cJSON_IsString(e) && strcmp(e->valuestring, mu__kv_name(t)) == 0)
			return 1;
	return 0;
}

static int check_info(mu__llm_coord_t *c, int i, char *err, size_t el)
{
	lstage_t *s = &c->s[i];
	cJSON *d = NULL;
	const cJSON *dg, *kind, *ids;
	int32_t first, last, layers, dim, vocab, ctx, chunk, seqs, share;
	int rc = MU_EPROTO;

	if (mu__json_parse(s->desc, strlen(s->desc), &d) != 0)
		d = NULL;
	kind = cJSON_GetObjectItemCaseSensitive(d, "kind");
	dg = cJSON_GetObjectItemCaseSensitive(d, "digest");
	if (!cJSON_IsString(kind) || strcmp(kind->valuestring, "llm") != 0 || !cJSON_IsString(dg) ||
	    num(d, "first", &first) || num(d, "last", &last) || num(d, "layers", &layers) ||
	    num(d, "dim", &dim) || num(d, "vocab", &vocab) || num(d, "ctx", &ctx) ||
	    num(d, "max_chunk", &chunk) || num(d, "max_sequences", &seqs))
		snprintf(err, el, "stage %d/%d (%s) does not serve an LLM (a `muster stage --model` of "
		         "a GGUF, HF or llama2.c checkpoint)", i, c->n, s->addr);
	else if (i > 0 && strcmp(dg->valuestring, c->digest) != 0)
		snprintf(err, el, "stage %d/%d (%s) serves another checkpoint (digest %s; stage 0's is "
		         "%s)", i, c->n, s->addr, dg->valuestring, c->digest);
	else if (first != (i == 0 ? 0 : c->s[i - 1].last) || last <= first - (last == layers))
		snprintf(err, el, "stage %d/%d (%s) holds layers [%d, %d); the chain needs it to start "
		         "at %d", i, c->n, s->addr, first, last, i == 0 ? 0 : c->s[i - 1].last);
	else if (i == c->n - 1 && last != layers)
		snprintf(err, el, "the last stage (%s) ends at layer %d of %d: no stage has the rest",
		         s->addr, last, layers);
	else if (!kv_takes(d, c->o.kv_type, &s->kv_named))
		snprintf(err, el, "stage %d/%d (%s) cannot keep a KV cache in %s, this coordinator's "
		         "--kv-type%s", i, c->n, s->addr, mu__kv_name(c->o.kv_type),
		         s->kv_named ? "" : " (a muster stage of before --kv-type keeps f32 only: "
		         "update it, or use --kv-type f32)");
	else if (c->o.src == NULL)
		rc = 0;
	else
		rc = check_weights(c, i, d, first, last, err, el);
	if (rc == 0) {
		/* a stage of before I32 ids says nothing, and reads F32 ids only */
		ids = cJSON_GetObjectItemCaseSensitive(d, "ids");
		s->ids_f32 = !cJSON_IsString(ids) || strcmp(ids->valuestring, "I32") != 0;
		s->first = first;
		s->last = last;
		s->max_seqs = seqs;
		/* a stage keeps only a share of its sequences for one connection */
		if (num(d, "max_sequences_per_connection", &share) == 0 && share >= 1 && share < seqs)
			s->max_seqs = share;
		snprintf(c->digest, sizeof(c->digest), "%s", dg->valuestring);
		c->vocab = vocab;
		c->dim = dim;
		c->layers = layers;
		c->ctx = i == 0 || ctx < c->ctx ? ctx : c->ctx;
		c->max_chunk = i == 0 || chunk < c->max_chunk ? chunk : c->max_chunk;
	}
	cJSON_Delete(d);
	return rc;
}

/* Connect to stage i at s->addr by timeout_ms (retrying a refusal while
 * it may still be loading, when retry) and ask for its INFO. */
static int connect_stage(mu__llm_coord_t *c, int i, int timeout_ms, int retry, char *err,
                         size_t el)
{
	lstage_t *s = &c->s[i];
	int64_t deadline = mu__deadline(timeout_ms);
	mu__msg_t m = {MU_MSG_INFO, 0, 0, 0, 0, 0};
	char host[256];
	int port, rc;

	if (mu__split_hostport(s->addr, host, sizeof(host), &port) != 0) {
		snprintf(err, el, "stage %d: \"%s\" is not HOST:PORT", i, s->addr);
		return MU_EARG;
	}
	for (;;) { /* the stage may still be loading */
		rc = mu__sock_connect(host, port, c->o.sec, deadline, &s->fd);
		/* a refusal (secret, certificate) will not change on retry */
		if (rc == 0 || !retry || rc == MU_ERESOLVE || rc == MU_EAUTH || rc == MU_ETLS ||
		    mu__remaining_ms(deadline) == 0)
			break;
		usleep(50 * 1000);
	}
	if (rc != 0) {
		s->fd = NULL;
		snprintf(err, el, "stage %d/%d (%s): cannot connect: %s", i, c->n, s->addr,
		         mu_strerror(rc));
		return rc;
	}
	/* a stage that accepts but does not answer (stopped) is as good as
	 * down: its INFO is waited for no longer than the connection */
	mu__chan_init(&s->c, s->fd, NULL, retry ? c->o.io_timeout_ms : timeout_ms,
	              c->o.max_frame_bytes);
	rc = ask(c, i, &m, NULL, MU_MSG_INFO, &s->desc, err, el, "asking what it serves");
	s->c.io_ms = c->o.io_timeout_ms;
	return rc;
}

int mu__llm_coord_new(int n, const mu__llm_coord_opts_t *o, mu__llm_coord_t **out)
{
	mu__llm_coord_t *c;
	int i;

	*out = NULL;
	if (n < 1 || n > 1024)
		return MU_EARG;
	c = mu__calloc(1, sizeof(*c));
	if (c == NULL || (c->s = mu__calloc((size_t)n, sizeof(*c->s))) == NULL) {
		mu__free(c);
		return MU_ENOMEM;
	}
	c->n = n;
	c->o = *o;
	for (i = 0; i < n; i++) {
		c->s[i].fd = NULL;
		c->s[i].co = c;
		c->s[i].i = i;
		mu_tensor_list_init(&c->s[i].res);
	}
	*out = c;
	return 0;
}

/* Say goodbye to stage i's peer and forget it. */
static void drop(lstage_t *s)
{
	if (s->fd != NULL) {
		mu__msg_t m = {MU_MSG_CLOSE, 0, 0, 0, 0, 0};

		s->c.io_ms = 1000; /* a goodbye is worth a second at most */
		mu__msg_send(&s->c, &m, NULL, 0);
		if (s->sess != NULL)
			mu_session_close(s->sess);
		else
			mu__sock_close(s->fd);
	}
	s->fd = NULL;
	s->sess = NULL;
	mu__free(s->desc);
	s->desc = NULL;
	mu_tensor_list_free(&s->res);
}

int mu__llm_coord_set(mu__llm_coord_t *c, int i, mu_session_t *sess, const char *addr,
                      const char *desc, char *err, size_t el)
{
	lstage_t *s = &c->s[i];
	char *d = mu__strdup(desc);

	if (d == NULL)
		return MU_ENOMEM;
	drop(s);
	s->sess = sess;
	s->fd = mu_session_stream(sess);
	s->desc = d;
	snprintf(s->addr, sizeof(s->addr), "%s", addr);
	mu__chan_init(&s->c, s->fd, sess, c->o.io_timeout_ms, c->o.max_frame_bytes);
	return 0;
}

void mu__llm_coord_streamed(mu__llm_coord_t *c, int i, int streamed)
{
	c->s[i].streamed = streamed;
}

int mu__llm_coord_check(mu__llm_coord_t *c, char *err, size_t el)
{
	int i, rc = 0;

	for (i = 0; rc == 0 && i < c->n; i++)
		rc = check_info(c, i, err, el);
	return rc;
}

int mu__llm_coord_connect(const char *const *addrs, int n, const mu__llm_coord_opts_t *o,
                          mu__llm_coord_t **out, char *err, size_t el)
{
	mu__llm_coord_t *c;
	int i, rc;

	*out = NULL;
	if ((rc = mu__llm_coord_new(n, o, &c)) != 0) {
		snprintf(err, el, rc == MU_EARG ? "give 1 to 1024 stages" : "out of memory");
		return rc;
	}
	for (i = 0; rc == 0 && i < n; i++) {
		snprintf(c->s[i].addr, sizeof(c->s[i].addr), "%s", addrs[i]);
		rc = connect_stage(c, i, c->o.connect_timeout_ms, 1, err, el);
	}
	if (rc == 0)
		rc = mu__llm_coord_check(c, err, el);
	if (rc != 0) {
		mu__llm_coord_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

void mu__llm_coord_free(mu__llm_coord_t *c)
{
	int i;

	if (c == NULL)
		return;
	for (i = 0; i < c->n; i++)
		drop(&c->s[i]);
	mu__free(c->s);
	mu__free(c);
}

/* The stage as it came back must be what it was: 0, or err says how not. */
static int same_stage(const mu__llm_coord_t *c, int i, const mu__llm_coord_t *was, int first,
                      int last, int seqs, char *err, size_t el)
{
	const lstage_t *s = &c->s[i];

	if (s->first != first || s->last != last)
		snprintf(err, el, "stage %d/%d (%s) came back with layers [%d, %d); it had [%d, %d)", i,
		         c->n, s->addr, s->first, s->last, first, last);
	else if (strcmp(c->digest, was->digest) != 0 || c->layers != was->layers ||
	         c->dim != was->dim || c->vocab != was->vocab)
		snprintf(err, el, "stage %d/%d (%s) came back serving another checkpoint (digest %s; "
		         "it served %s)", i, c->n, s->addr, c->digest, was->digest);
	else if (c->ctx < was->ctx || c->max_chunk < was->max_chunk || s->max_seqs < seqs)
		snprintf(err, el, "stage %d/%d (%s) came back with less room: a context of %d, %d rows "
		         "a batch, %d sequences (it had at least %d, %d, %d)", i, c->n, s->addr,
		         c->ctx, c->max_chunk, s->max_seqs, was->ctx, was->max_chunk, seqs);
	else
		return 0;
	return MU_EPROTO;
}

int mu__llm_coord_recover(void *ud, int i, char *err, size_t el)
{
	mu__llm_coord_t *c = ud, was = *c;
	lstage_t *s = &c->s[i];
	int first = s->first, last = s->last, seqs = s->max_seqs, rc;
	int t = c->o.connect_timeout_ms < RECONNECT_MS ? c->o.connect_timeout_ms : RECONNECT_MS;

	drop(s); /* its sequences on the stage end with the connection */
	rc = connect_stage(c, i, t, 0, err, el);
	if (rc == 0)
		rc = check_info(c, i, err, el);
	if (rc == 0)
		rc = same_stage(c, i, &was, first, last, seqs, err, el);
	/* the chain's figures stay what the engine was started with */
	memcpy(c->digest, was.digest, sizeof(c->digest));
	c->vocab = was.vocab;
	c->dim = was.dim;
	c->layers = was.layers;
	c->ctx = was.ctx;
	c->max_chunk = was.max_chunk;
	if (rc != 0) {
		drop(s);
		s->first = first;
		s->last = last;
		s->max_seqs = seqs;
	}
	return rc;
}

int mu__llm_coord_stages(const mu__llm_coord_t *c)
{
	return c->n;
}

void mu__llm_coord_stage(const mu__llm_coord_t *c, int i, mu__llm_coord_stage_t *out)
{
	out->addr = c->s[i].addr;
	out->desc = c->s[i].desc;
	out->first = c->s[i].first;
	out->last = c->s[i].last;
	out->compute_ms = c->s[i].compute_ms;
}

int32_t mu__llm_coord_ctx(const mu__llm_coord_t *c)
{
	return c->ctx;
}

/* ---- stages as engine links ---- */

static int link_open(void *ud, uint64_t seq, int32_t ctx, char *why, size_t wl)
{
	lstage_t *s = ud;
	mu__msg_t m = {MU_MSG_SEQ_OPEN, 0, 0, seq, 0, 0};
	char body[96];

	if (s->kv_named)
		snprintf(body, sizeof(body), "{\"ctx\": %d, \"kv_type\": \"%s\"}", ctx,
		         mu__kv_name(s->co->o.kv_type));
	else /* a stage of before kv types: f32 (check_info) */
		snprintf(body, sizeof(body), "{\"ctx\": %d}", ctx);
	return ask(s->co, s->i, &m, body, MU_MSG_READY, NULL, why, wl, "opening a sequence");
}

static int link_close(void *ud, uint64_t seq, char *why, size_t wl)
{
	lstage_t *s = ud;
	mu__msg_t m = {MU_MSG_SEQ_CLOSE, 0, 0, seq, 0, 0};

	return ask(s->co, s->i, &m, NULL, MU_MSG_READY, NULL, why, wl, "closing a sequence");
}

/* A SEQ_BATCH: items [k, 4] and the rows (ids as the stage reads them). */
static int link_submit(void *ud, const mu__dec_item_t *it, int k, int32_t rows,
                       const int32_t *tokens, const float *x, char *why, size_t wl)
{
	lstage_t *s = ud;
	mu__llm_coord_t *c = s->co;
	uint64_t xdims[2] = {(uint64_t)rows, (uint64_t)c->dim};
	mu_tensor_t *items = NULL, *in = NULL;
	mu_tensor_list_t l;
	mu__msg_t m = {MU_MSG_SEQ_BATCH, 0, ++c->next_id, 0, 0, 0};
	int head = s->last == c->layers, rc, j;

	mu_tensor_list_free(&s->res);
	mu_tensor_list_init(&l);
	rc = mu__seq_items_new(it, k, s->ids_f32, &items, why, wl);
	if (rc == 0)
		rc = tokens != NULL ? mu__seq_tokens_new(tokens, rows, s->ids_f32, &in, why, wl)
		                    : mu_tensor_wrap("x", 2, xdims, (float *)x, &in);
	if (rc == 0 && (rc = mu_tensor_list_push(&l, items)) == 0)
		items = NULL;
	if (rc == 0 && (rc = mu_tensor_list_push(&l, in)) == 0)
		in = NULL;
	/* what the RESULT must be: every row's activations, or the logits of
	 * each item's last row (all its rows with all_logits) */
	s->want_rows = head ? 0 : rows;
	s->want_cols = head ? c->vocab : c->dim;
	for (j = 0; head && j < k; j++)
		s->want_rows += it[j].all_logits ? it[j].n : 1;
	if (rc == 0 && (rc = s->fd == NULL ? MU_EEOF : mu__msg_send_frame(&s->c, &m, &l)) != 0)
		fail(c, s->i, rc, why, wl, "sending a batch");
	s->want_id = m.id;
	mu_tensor_free(items);
	mu_tensor_free(in);
	mu_tensor_list_free(&l);
	return rc;
}

/* INFO, for its reply's sake: the session is in use. */
static int link_ping(void *ud, char *why, size_t wl)
{
	lstage_t *s = ud;
	mu__msg_t m = {MU_MSG_INFO, 0, 0, 0, 0, 0};

	return ask(s->co, s->i, &m, NULL, MU_MSG_INFO, NULL, why, wl, "keeping the session alive");
}

static mu_stream_t *link_stream(void *ud)
{
	return ((lstage_t *)ud)->fd;
}

static int link_finish(void *ud, const float **out, double *ms, char *why, size_t wl)
{
	lstage_t *s = ud;
	const mu_tensor_t *t;
	mu__msg_t m;
	int rc = reply(s->co, s->i, s->want_id, MU_MSG_RESULT, &m, why, wl, "in a batch");

	if (rc != 0)
		return rc;
	*ms = (double)m.aux / 1e6;
	s->compute_ms += *ms;
	if ((rc = mu__msg_recv_frame(&s->c, &m, &s->res)) != 0)
		return fail(s->co, s->i, rc, why, wl, "reading a batch's result");
	if (s->res.n != 1) {
		snprintf(why, wl, "stage %d/%d (%s) returned %zu tensors, not one", s->i, s->co->n,
		         s->addr, s->res.n);
		return MU_EPROTO;
	}
	t = s->res.t[0];
	/* the engine reads want_rows x want_cols floats: nothing else passes */
	if (t->dtype != MU_DTYPE_F32 || t->rank != 2 || t->dims[0] != (uint64_t)s->want_rows ||
	    t->dims[1] != (uint64_t)s->want_cols) {
		snprintf(why, wl, "stage %d/%d (%s) returned %s, not F32 [%d, %d]", s->i, s->co->n,
		         s->addr, t->name, (int)s->want_rows, (int)s->want_cols);
		return MU_EPROTO;
	}
	*out = t->data;
	return 0;
}

void mu__llm_coord_link(mu__llm_coord_t *c, int i, int32_t max_chunk, mu__eng_link_t *link)
{
	lstage_t *s = &c->s[i];

	*link = (mu__eng_link_t){link_open, link_close, link_submit, link_stream, link_finish, link_ping, s,
	                         max_chunk < c->max_chunk ? max_chunk : c->max_chunk, s->max_seqs,
	                         ""};
	snprintf(link->name, sizeof(link->name), "stage %d/%d (%s)", i, c->n, s->addr);
}

int32_t mu__llm_coord_dim(const mu__llm_coord_t *c)
{
	return c->dim;
}

int32_t mu__llm_coord_vocab(const mu__llm_coord_t *c)
{
	return c->vocab;
}
