/* SPDX-License-Identifier: MIT */
/*
 * The LLM stage kind: layers [first, last) of a decoder checkpoint loaded
 * from this machine's copy, serving sequences (docs/protocols/pipeline.md,
 * "Sequences"). SEQ_OPEN reserves a sequence's KV cache, SEQ_FORWARD and
 * SEQ_BATCH run positions through the layers (token ids in on the first
 * stage, activations in between, logits out of the last), SEQ_CLOSE frees
 * it. Sequences belong to the connection that opened them and go with it.
 * Its table (mu__stage_kind_llm) is at the end.
 *
 * One forward at a time per stage (the decoder's scratch is shared); the
 * stage server calls in from libuv's thread pool, so every entry point
 * takes the lock.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <uv.h>

#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/json_int.h"
#include "core/log_int.h"
#include "core/proc_int.h"
#include "core/sha256_int.h"
#include "core/time_int.h"
#include "pipeline/llm/seqmsg_int.h"
#include "pipeline/llm/stage_int.h"

#define LOG "stage"

/* An LLM stage: the common head first (pipeline/stage_int.h). */
typedef struct {
	mu_stage_t base;
	mu__llm_src_t src;
	mu__dec_t *dec;
	mu__llm_stage_opts_t o;
	int first, last;      /* its layers */
	uv_mutex_t lock;
	int32_t *tok;         /* token ids of the chunk being run */
	char weights[MU_SHA256_HEX]; /* the weights digest of its layers */
	char model[96];       /* the checkpoint's file name, for a peer's errors */
	double load_ms;
	uint64_t kv_now;      /* atomic: mu__dec_kv_reserved after the last change */
	int seqs_now;         /* atomic: mu__dec_seqs ... */
} lstage_t;

/* Under s->lock, after sequences opened or closed. */
static void usage_changed(lstage_t *s)
{
	__atomic_store_n(&s->kv_now, mu__dec_kv_reserved(s->dec), __ATOMIC_RELAXED);
	__atomic_store_n(&s->seqs_now, mu__dec_seqs(s->dec), __ATOMIC_RELAXED);
}

static void usage(mu_stage_t *st, uint64_t *kv_bytes, int *seqs)
{
	lstage_t *s = (lstage_t *)st;

	*kv_bytes = __atomic_load_n(&s->kv_now, __ATOMIC_RELAXED);
	*seqs = __atomic_load_n(&s->seqs_now, __ATOMIC_RELAXED);
}

void mu__llm_stage_opts_init(mu__llm_stage_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->threads = 1;
	o->max_seqs = 8;
	o->kv_bytes = (uint64_t)1 << 30;
	o->max_chunk = 256;
	o->kv_type = MU__KV_F16;
}

/* The KV cache types a SEQ_OPEN may name here (those the model's head
 * dim takes), as JSON strings: "\"f32\", \"f16\"". */
static const char *kv_types(const lstage_t *s, char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = '\0';
	for (int t = 0; t < MU__KV_COUNT && at < len; t++)
		if (mu__kv_check(t, &s->src.hp, NULL, 0) == 0) {
			int n = snprintf(buf + at, len - at, "%s\"%s\"", at > 0 ? ", " : "",
			                 mu__kv_name(t));

			at += n > 0 ? (size_t)n : 0;
		}
	return buf;
}

/* The stage's description as at load, plus what it holds now. */
static int describe(lstage_t *s, double load_ms)
{
	const mu__llm_hp_t *h = &s->src.hp;
	char types[64];
	mu__buf_t b;
	int rc;

	s->load_ms = load_ms;
	mu__buf_init(&b, 1 << 16);
	rc = mu__buf_printf(&b, "{\"kind\": \"llm\", \"stage\": %d, \"of\": %d, \"arch\": \"%s\", "
	                    "\"first\": %d, \"last\": %d, \"layers\": %d, \"dim\": %d, "
	                    "\"vocab\": %d, \"ctx\": %d, \"embeds\": %s, \"head\": %s, "
	                    "\"digest\": \"%016llx\", \"max_sequences\": %d, "
	                    "\"max_sequences_per_connection\": %d, \"sequence_idle_timeout_s\": %g, "
	                    "\"kv_bytes\": %llu, "
	                    "\"kv_bytes_per_position\": %llu, \"kv_type\": \"%s\", "
	                    "\"kv_types\": [%s], \"max_chunk\": %d, \"ids\": \"I32\", "
	                    "\"weights_sha256\": \"%s\", \"model\": \"%s\", \"threads\": %d, "
	                    "\"kernels\": \"%s\", \"resident_bytes\": %llu, \"rss_bytes\": %llu, "
	                    "\"load_ms\": %.3f, \"sequences_open\": %d, \"kv_reserved\": %llu}",
	                    s->base.index, s->base.of, h->arch, s->first, s->last, h->n_layers, h->dim,
	                    h->vocab, h->ctx, s->first == 0 ? "true" : "false",
	                    s->last == h->n_layers ? "true" : "false",
	                    (unsigned long long)s->base.digest, s->o.max_seqs,
	                    s->o.max_seqs_per_owner > 0 ? s->o.max_seqs_per_owner : s->o.max_seqs,
	                    s->o.seq_idle_ms / 1000.0,
	                    (unsigned long long)s->o.kv_bytes,
	                    (unsigned long long)mu__dec_kv_per_seq(s->dec, 1),
	                    mu__kv_name(s->o.kv_type), kv_types(s, types, sizeof(types)), s->o.max_chunk,
	                    s->weights, s->model, s->o.threads, mu__kern_isa(),
	                    (unsigned long long)mu__llm_src_bytes(&s->src, s->first, s->last),
	                    (unsigned long long)mu__self_rss(), load_ms, mu__dec_seqs(s->dec),
	                    (unsigned long long)mu__dec_kv_reserved(s->dec));
	if (rc != 0) {
		mu__buf_free(&b);
		return rc;
	}
	mu__free(s->base.desc);
	s->base.desc = mu__buf_take(&b, NULL);
	return 0;
}

/* Layers [first, last) for stage index of `of`, balanced by bytes. */
static int place(lstage_t *s, int first, int last, char *err, size_t el)
{
	int n = s->src.hp.n_layers, cut[1025], rc;

	if (first >= 0) {
		s->first = first;
		s->last = last;
		return 0;
	}
	if (s->base.of < 1 || s->base.index < 0 || s->base.index >= s->base.of || s->base.of > n || s->base.of > 1024) {
		snprintf(err, el, "stage %d of %d: the model has %d layers", s->base.index, s->base.of, n);
		return MU_EARG;
	}
	rc = mu__llm_split(&s->src, s->base.of, cut);
	if (rc != 0)
		return rc;
	s->first = cut[s->base.index];
	s->last = cut[s->base.index + 1];
	return 0;
}

/* The weights digest of s's layers from the hashes of src's tensors
 * (hex, in src's order), and the name the checkpoint goes by. */
static int weigh(lstage_t *s, const char (*hex)[MU_SHA256_HEX], const char *path, char *err,
                 size_t el)
{
	const char *base = strrchr(path, '/');
	size_t i;
	int rc = mu__llm_weights_digest(&s->src, hex, s->first, s->last, s->weights);

	if (rc != 0) {
		snprintf(err, el, "cannot compute the digest of the stage's weights: %s",
		         mu_strerror(rc));
		return rc;
	}
	/* a file name for a peer's error message: JSON-safe as it is */
	snprintf(s->model, sizeof(s->model), "%s", base != NULL && base[1] ? base + 1 : path);
	for (i = 0; s->model[i] != '\0'; i++)
		if (s->model[i] == '"' || s->model[i] == '\\' || (unsigned char)s->model[i] < 0x20)
			s->model[i] = '_';
	return 0;
}

/* Hash the tensors of s's layers in its own checkpoint (from the cache
 * beside it when that is current) and take their weights digest. */
static int weigh_own(lstage_t *s, char *err, size_t el)
{
	char (*hex)[MU_SHA256_HEX] = mu__calloc(s->src.nt + 1, sizeof(*hex));
	int computed, rc;

	if (hex == NULL)
		return MU_ENOMEM;
	rc = mu__llm_src_hashes(&s->src, s->first, s->last, hex, &computed, err, el);
	if (rc == 0)
		rc = weigh(s, (const char (*)[MU_SHA256_HEX])hex, s->src.path, err, el);
	mu__free(hex);
	return rc;
}

static void stage_free(mu_stage_t *st)
{
	lstage_t *s = (lstage_t *)st;

	mu__dec_free(s->dec);
	if (s->src.path != NULL)
		mu__llm_src_free(&s->src);
	mu__free(s->tok);
	mu__free(s->base.desc);
	uv_mutex_destroy(&s->lock);
	mu__free(s);
}

/* Make the decoder of s (its fields set) and describe it; on failure
 * frees s. */
static int finish(lstage_t *s, double t0, mu_stage_t **out, char *err, size_t el)
{
	mu__dec_opts_t d = {s->o.threads, s->o.max_seqs, s->o.kv_bytes, s->o.max_chunk,
	                    s->o.max_seqs_per_owner, s->o.seq_idle_ms, s->o.kv_type};
	int rc = mu__dec_new(&s->src, s->first, s->last, &d, &s->dec, err, el);

	if (rc == 0 && (s->tok = mu__malloc((size_t)s->o.max_chunk * sizeof(int32_t))) == NULL)
		rc = MU_ENOMEM;
	if (rc == 0) {
		mu__llm_src_touch(&s->src, s->first, s->last);
		rc = describe(s, mu__clock_ms() - t0);
	}
	if (rc != 0) {
		stage_free(&s->base);
		return rc;
	}
	*out = &s->base;
	return 0;
}

static lstage_t *stage_alloc(int index, int of, const mu__llm_stage_opts_t *o)
{
	lstage_t *s = mu__calloc(1, sizeof(*s));

	if (s == NULL)
		return NULL;
	uv_mutex_init(&s->lock);
	s->base.kind = &mu__stage_kind_llm;
	s->base.index = index;
	s->base.of = of;
	s->o = *o;
	s->first = -1;
	return s;
}

int mu__stage_open_llm(const char *path, const char *tok_path, int index, int of,
                       int first, int last, const mu__llm_stage_opts_t *o,
                       mu_stage_t **out, char *err, size_t el)
{
	lstage_t *s = stage_alloc(index, of, o);
	double t0 = mu__clock_ms();
	int rc;

	*out = NULL;
	if (s == NULL)
		return MU_ENOMEM;
	rc = mu__llm_src_open(path, tok_path, &s->src, err, el);
	if (rc == 0) {
		s->base.digest = mu__llm_digest(&s->src);
		rc = place(s, first, last, err, el);
	}
	if (rc == 0)
		rc = weigh_own(s, err, el);
	if (rc != 0) {
		stage_free(&s->base);
		return rc;
	}
	return finish(s, t0, out, err, el);
}

int mu__stage_from_llm_src(mu__llm_src_t *src, uint64_t digest, const char (*hex)[65],
                           int index, int of, int first, int last,
                           const mu__llm_stage_opts_t *o, mu_stage_t **out, char *err,
                           size_t el)
{
	lstage_t *s = stage_alloc(index, of, o);
	int rc;

	*out = NULL;
	if (s == NULL) {
		mu__llm_src_free(src);
		return MU_ENOMEM;
	}
	s->src = *src;
	memset(src, 0, sizeof(*src));
	s->base.digest = digest;
	s->first = first;
	s->last = last;
	if ((rc = weigh(s, hex, "(streamed)", err, el)) != 0) {
		stage_free(&s->base);
		return rc;
	}
	return finish(s, mu__clock_ms(), out, err, el);
}

static void release(mu_stage_t *st, uint64_t owner)
{
	lstage_t *s = (lstage_t *)st;
	int n;

	uv_mutex_lock(&s->lock);
	n = mu__dec_seq_close_owner(s->dec, owner);
	usage_changed(s);
	uv_mutex_unlock(&s->lock);
	if (n > 0)
		mu__log(MU_LOG_INFO, LOG, "stage %d/%d: freed %d sequence%s of a closed connection",
		        s->base.index, s->base.of, n, n == 1 ? "" : "s");
}

static void ready(mu__reply_t *r, uint64_t id, uint64_t seq, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* A READY reply with a small JSON body. */
static void ready(mu__reply_t *r, uint64_t id, uint64_t seq, const char *fmt, ...)
{
	char text[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	r->m = (mu__msg_t){MU_MSG_READY, 0, id, seq, 0, 0};
	r->text = mu__strdup(text);
	r->text_owned = 1;
	if (r->text == NULL)
		mu__reply_error(r, id, MU_ENOMEM, 0, "out of memory");
}

static void seq_open(lstage_t *s, uint64_t owner, const mu__msg_t *m, const char *body,
                     mu__reply_t *r)
{
	cJSON *j = NULL;
	const cJSON *ctx, *kvt;
	char why[512];
	int rc, expired, type = s->o.kv_type;

	if (mu__json_parse(body, strlen(body), &j) != 0 || !cJSON_IsObject(j)) {
		cJSON_Delete(j);
		mu__reply_error(r, m->id, MU_EJSON, 0, "SEQ_OPEN: the body is not a JSON object");
		return;
	}
	ctx = cJSON_GetObjectItemCaseSensitive(j, "ctx");
	if (!mu__json_is_int(ctx, 1, INT32_MAX)) {
		cJSON_Delete(j);
		mu__reply_error(r, m->id, MU_EPROTO, 0, "SEQ_OPEN: \"ctx\" must be a positive integer");
		return;
	}
	kvt = cJSON_GetObjectItemCaseSensitive(j, "kv_type");
	if (kvt != NULL && (!cJSON_IsString(kvt) ||
	                    mu__kv_by_name(kvt->valuestring, &type, why, sizeof(why)) != 0)) {
		mu__reply_error(r, m->id, MU_EPROTO, 0, "SEQ_OPEN: \"kv_type\": %s",
		                cJSON_IsString(kvt) ? why : "not a string");
		cJSON_Delete(j);
		return;
	}
	uv_mutex_lock(&s->lock);
	expired = mu__dec_seq_expire(s->dec, mu__clock_ms());
	if (expired > 0)
		mu__log(MU_LOG_INFO, "stage", "stage %d/%d: closed %d sequence%s unused for %g s "
		        "(--sequence-idle-timeout)", s->base.index, s->base.of, expired,
		        expired == 1 ? "" : "s", s->o.seq_idle_ms / 1000.0);
	rc = mu__dec_seq_open_kv(s->dec, owner, m->aux, (int32_t)ctx->valuedouble, type, why,
	                         sizeof(why));
	usage_changed(s);
	uv_mutex_unlock(&s->lock);
	if (rc != 0)
		mu__reply_error(r, m->id, rc, 0, "stage %d/%d: %s", s->base.index, s->base.of, why);
	else
		ready(r, m->id, m->aux, "{\"seq\": %llu, \"ctx\": %d, \"kv_type\": \"%s\", "
		      "\"kv_bytes\": %llu}", (unsigned long long)m->aux, (int)ctx->valuedouble,
		      mu__kv_name(type),
		      (unsigned long long)mu__dec_kv_per_seq_type(s->dec, (int32_t)ctx->valuedouble, type));
	cJSON_Delete(j);
}

static void seq_close(lstage_t *s, uint64_t owner, const mu__msg_t *m, mu__reply_t *r)
{
	int rc;

	uv_mutex_lock(&s->lock);
	rc = mu__dec_seq_close(s->dec, owner, m->aux);
	usage_changed(s);
	uv_mutex_unlock(&s->lock);
	if (rc != 0)
		mu__reply_error(r, m->id, rc, 0, "stage %d/%d: sequence %llu is not open here",
		                s->base.index, s->base.of, (unsigned long long)m->aux);
	else
		ready(r, m->id, m->aux, "{\"seq\": %llu, \"closed\": true}", (unsigned long long)m->aux);
}

/* The rows' input: token ids (I32, or exact integers as F32 from a peer
 * of before I32 ids) on the first stage, activations [rows, dim] (F32)
 * elsewhere; `extra` other tensors may come with it (SEQ_BATCH's items).
 * Rows, or -1 with why. */
static int32_t rows_input(lstage_t *s, const mu_tensor_list_t *in, size_t extra,
                          const float **x, char *why, size_t wl)
{
	const mu__llm_hp_t *h = &s->src.hp;
	int embeds = s->first == 0;
	const mu_tensor_t *t = mu_tensor_list_find(in, embeds ? "tokens" : "x");

	*x = NULL;
	if (t == NULL || in->n != 1 + extra || t->rank != (embeds ? 1u : 2u) || t->dims[0] < 1 ||
	    t->dims[0] > (uint64_t)s->o.max_chunk || (!embeds && t->dims[1] != (uint64_t)h->dim)) {
		snprintf(why, wl, "the input is one tensor, %s, of 1 to %d positions%s",
		         embeds ? "\"tokens\" [n]" : "\"x\" [n, dim]", s->o.max_chunk,
		         embeds ? "" : " (dim is the model's)");
		return -1;
	}
	if (embeds)
		return mu__seq_tokens_read(t, s->o.max_chunk, h->vocab, s->tok, why, wl);
	if (t->dtype != MU_DTYPE_F32) {
		snprintf(why, wl, "\"x\" is %s: activations are F32", mu_dtype_name((int)t->dtype));
		return -1;
	}
	*x = t->data;
	return (int32_t)t->dims[0];
}

/* SEQ_BATCH's items [k, 4]: (seq, pos, n, all_logits). Items, or -1 with
 * why. */
static int batch_items(const lstage_t *s, const mu_tensor_list_t *in, mu__dec_item_t *it,
                       int32_t *rows, int32_t *outrows, char *why, size_t wl)
{
	const mu_tensor_t *t = mu_tensor_list_find(in, "items");
	int k, i;

	*rows = *outrows = 0;
	if (t == NULL) {
		snprintf(why, wl, "SEQ_BATCH carries \"items\" [k, 4] with k from 1 to %d",
		         MU__DEC_MAX_ITEMS);
		return -1;
	}
	if ((k = mu__seq_items_read(t, MU__DEC_MAX_ITEMS, it, why, wl)) < 0)
		return -1;
	for (i = 0; i < k; i++) {
		if (it[i].n < 1 || it[i].n > s->o.max_chunk - *rows) {
			snprintf(why, wl, "the items hold more than %d positions, or an empty one",
			         s->o.max_chunk);
			return -1;
		}
		*rows += it[i].n;
		*outrows += it[i].all_logits ? it[i].n : 1;
	}
	return k;
}

/* Run items on the decoder into a RESULT "x" [rows, dim] or "logits"
 * [outrows, vocab]. Called with the lock held. */
static int run_items(lstage_t *s, uint64_t owner, const mu__dec_item_t *it, int k,
                     int32_t rows, int32_t outrows, const float *x, mu__reply_t *r,
                     char *why, size_t wl)
{
	const mu__llm_hp_t *h = &s->src.hp;
	int head = s->last == h->n_layers;
	uint64_t dims[2] = {head ? (uint64_t)outrows : (uint64_t)rows,
	                    head ? (uint64_t)h->vocab : (uint64_t)h->dim};
	mu_tensor_t *t = NULL;
	int rc = mu_tensor_new(head ? "logits" : "x", 2, dims, &t);

	if (rc != 0) {
		snprintf(why, wl, "out of memory for the result");
		return rc;
	}
	rc = mu__dec_forward_batch(s->dec, owner, it, k, s->first == 0 ? s->tok : NULL, x, t->data,
	                           why, wl);
	if (rc == 0)
		rc = mu_tensor_list_push(&r->out, t);
	if (rc != 0)
		mu_tensor_free(t);
	return rc;
}

/* SEQ_FORWARD (one sequence, in the header) and SEQ_BATCH (items). */
static void seq_run(lstage_t *s, uint64_t owner, const mu__msg_t *m,
                    const mu_tensor_list_t *in, mu__reply_t *r)
{
	mu__dec_item_t it[MU__DEC_MAX_ITEMS];
	int32_t rows, outrows = 0, n = 0;
	const float *x;
	char why[512];
	double t0;
	int k = 1, rc;

	uv_mutex_lock(&s->lock);
	if (m->type == MU_MSG_SEQ_BATCH) {
		k = batch_items(s, in, it, &rows, &outrows, why, sizeof(why));
		if (k > 0 && (n = rows_input(s, in, 1, &x, why, sizeof(why))) >= 0 && n != rows) {
			snprintf(why, sizeof(why), "the items hold %d positions, the input %d", rows, n);
			n = -1;
		}
	} else {
		n = rows_input(s, in, 0, &x, why, sizeof(why));
		it[0] = (mu__dec_item_t){m->aux, (int32_t)(m->arg & ~MU_SEQ_ALL_LOGITS), n,
		                         (m->arg & MU_SEQ_ALL_LOGITS) != 0};
		outrows = it[0].all_logits ? n : 1;
	}
	if (k < 0 || n < 0) {
		uv_mutex_unlock(&s->lock);
		mu__reply_error(r, m->id, MU_EPROTO, 0, "stage %d/%d: %s", s->base.index, s->base.of, why);
		return;
	}
	t0 = mu__clock_ms();
	rc = run_items(s, owner, it, k, n, outrows, x, r, why, sizeof(why));
	uv_mutex_unlock(&s->lock);
	if (rc != 0) {
		mu__reply_error(r, m->id, rc, 0, "stage %d/%d: %s", s->base.index, s->base.of, why);
		return;
	}
	r->m = (mu__msg_t){MU_MSG_RESULT, 0, m->id, (uint64_t)((mu__clock_ms() - t0) * 1e6), 0, 0};
	r->positions = n;
}

/* INFO: the description with the sequences held right now. */
static void info(mu_stage_t *st, const mu__msg_t *m, mu__reply_t *r)
{
	lstage_t *s = (lstage_t *)st;
	int rc;

	uv_mutex_lock(&s->lock);
	rc = describe(s, s->load_ms);
	r->text = rc == 0 ? mu__strdup(s->base.desc) : NULL;
	uv_mutex_unlock(&s->lock);
	if (r->text == NULL) {
		mu__reply_error(r, m->id, MU_ENOMEM, 0, "out of memory");
		return;
	}
	r->m = (mu__msg_t){MU_MSG_INFO, 0, m->id, 0, 0, 0};
	r->text_owned = 1;
}

static void handle(mu_stage_t *st, uint64_t owner, const char *who, const mu__msg_t *m,
                   const char *body, mu_tensor_list_t *in, mu__reply_t *r)
{
	lstage_t *s = (lstage_t *)st;

	(void)who;
	switch (m->type) {
	case MU_MSG_SEQ_OPEN:
		seq_open(s, owner, m, body != NULL ? body : "", r);
		return;
	case MU_MSG_SEQ_FORWARD:
	case MU_MSG_SEQ_BATCH:
		seq_run(s, owner, m, in, r);
		return;
	case MU_MSG_SEQ_CLOSE:
		seq_close(s, owner, m, r);
		return;
	default:
		mu__reply_error(r, m->id, MU_EPROTO, 0, "a %s message is not expected by an LLM stage",
		                mu__msg_type_name(m->type));
	}
}

const mu__stage_kind_t mu__stage_kind_llm = {
	.version = MU__STAGE_KIND_VERSION,
	.name = "llm",
	.msgs = MU__MSG_BIT(MU_MSG_SEQ_OPEN) | MU__MSG_BIT(MU_MSG_SEQ_FORWARD) |
	        MU__MSG_BIT(MU_MSG_SEQ_BATCH) | MU__MSG_BIT(MU_MSG_SEQ_CLOSE),
	.dev_msgs = MU__MSG_BIT(MU_MSG_TENSOR),
	.handle = handle,
	.info = info,
	.release = release,
	.usage = usage,
	.free = stage_free,
	.probe = mu__llm_dev_probe,
	.held_caps = mu__llm_dev_held_caps,
	.assign = mu__llm_dev_assign,
	.receive = mu__llm_dev_tensor,
	.load = mu__llm_dev_load,
	.pending_free = mu__llm_dev_pending_free,
};
