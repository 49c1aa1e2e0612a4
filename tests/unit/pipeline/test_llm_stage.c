/* SPDX-License-Identifier: MIT */
/*
 * LLM stages (src/pipeline/llm/stage.c) and the id tensors of their
 * messages (src/pipeline/llm/seqmsg.c): token and sequence ids read as
 * I32 and in the F32 form of before, bit for bit the same; every other
 * dtype and shape refused with the cause, never read as F32; the
 * coordinator sending I32 to a stage that says it reads them and F32 to
 * one that does not. The stage is a tiny random llama2.c checkpoint.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mu_test.h"

#include "core/alloc_int.h"
#include "pipeline/llm/coord_int.h"
#include "pipeline/llm/seqmsg_int.h"
#include "pipeline/llm/stage_int.h"
#include "pipeline/serve_int.h"

#define VOCAB 32
#define DIM 16

static char path[64];

/* dim 16, hidden 24, 2 layers, 2 heads, 1 KV head, vocab 32, context 16 */
static int setup(void **state)
{
	int32_t hdr[7] = {DIM, 24, 2, 2, 1, VOCAB, 16};
	size_t floats = 32 * 16 + 2 * 16 + 2 * (16 * 16 + 8 * 16 * 2 + 16 * 16) + 2 * 16 +
	                2 * 24 * 16 * 3 + 16 + 16 * 8;
	uint32_t s = 1;
	FILE *f;
	int fd;

	(void)state;
	snprintf(path, sizeof(path), "/tmp/mu_llm_stage_XXXXXX");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	f = fopen(path, "wb");
	fwrite(hdr, sizeof(hdr), 1, f);
	for (size_t i = 0; i < floats; i++) {
		float v = (float)((s = s * 1103515245u + 12345u) >> 16) / 65536.0f - 0.5f;

		fwrite(&v, 4, 1, f);
	}
	fclose(f);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return unlink(path);
}

/* The stage of layers [first, last) (first < 0: the whole model). */
static mu_stage_t *open_stage(int first, int last)
{
	mu__llm_stage_opts_t o;
	mu_stage_t *s = NULL;
	char err[512];

	mu__llm_stage_opts_init(&o);
	o.max_seqs = 4;
	o.kv_bytes = 1 << 20;
	o.max_chunk = 8;
	assert_int_equal(mu__stage_open_llm(path, NULL, 0, 1, first, last, &o, &s, err,
	                                    sizeof(err)), 0);
	return s;
}

/* A tensor of dtype and shape whose elements are vals (as that dtype). */
static mu_tensor_t *typed(const char *name, mu_dtype_t dt, uint32_t rank, uint64_t d0,
                          uint64_t d1, const double *vals)
{
	uint64_t dims[2] = {d0, d1};
	mu_tensor_t *t;

	assert_int_equal(mu_tensor_new_typed(name, dt, rank, dims, &t), 0);
	for (uint64_t i = 0; i < t->numel; i++) {
		switch (dt) {
		case MU_DTYPE_F32: t->data[i] = (float)vals[i]; break;
		case MU_DTYPE_I32: ((int32_t *)t->raw)[i] = (int32_t)vals[i]; break;
		case MU_DTYPE_I64: ((int64_t *)t->raw)[i] = (int64_t)vals[i]; break;
		case MU_DTYPE_U8: ((uint8_t *)t->raw)[i] = (uint8_t)vals[i]; break;
		default: fail_msg("no such dtype in this test");
		}
	}
	return t;
}

static void ask(mu_stage_t *s, uint64_t owner, int type, uint64_t seq, uint32_t arg,
                const char *body, mu_tensor_list_t *in, mu__reply_t *r)
{
	mu__serve_ctx_t ctx;
	mu__msg_t m = {(uint16_t)type, 0, 9, seq, 0, arg};
	mu_tensor_list_t none;

	memset(&ctx, 0, sizeof(ctx));
	ctx.stage = s;
	ctx.name = "test";
	mu_tensor_list_init(&none);
	mu__pipe_handle(&ctx, owner, &m, body != NULL ? body : "", in != NULL ? in : &none, r);
	mu_tensor_list_free(&none);
}

static void open_seq(mu_stage_t *s, uint64_t seq)
{
	mu__reply_t r;

	ask(s, 1, MU_MSG_SEQ_OPEN, seq, 0, "{\"ctx\": 16}", NULL, &r);
	assert_int_equal(r.m.type, MU_MSG_READY);
	mu__reply_free(&r);
}

/* SEQ_FORWARD of a one-tensor frame t (taken): the reply. */
static void forward1(mu_stage_t *s, uint64_t seq, uint32_t pos, mu_tensor_t *t, mu__reply_t *r)
{
	mu_tensor_list_t in;

	mu_tensor_list_init(&in);
	assert_int_equal(mu_tensor_list_push(&in, t), 0);
	ask(s, 1, MU_MSG_SEQ_FORWARD, seq, pos, NULL, &in, r);
	mu_tensor_list_free(&in);
}

static void batch(mu_stage_t *s, mu_tensor_t *items, mu_tensor_t *rows, mu__reply_t *r)
{
	mu_tensor_list_t in;

	mu_tensor_list_init(&in);
	assert_int_equal(mu_tensor_list_push(&in, items), 0);
	assert_int_equal(mu_tensor_list_push(&in, rows), 0);
	ask(s, 1, MU_MSG_SEQ_BATCH, 0, 0, NULL, &in, r);
	mu_tensor_list_free(&in);
}

/* The reply is one F32 tensor [rows, cols]: its floats, copied. */
static float *result(mu__reply_t *r, uint64_t rows, uint64_t cols)
{
	const mu_tensor_t *t;
	float *v;

	if (r->m.type != MU_MSG_RESULT)
		fail_msg("not a RESULT: %s", r->text != NULL ? r->text : "(no text)");
	assert_int_equal(r->out.n, 1);
	t = r->out.t[0];
	assert_int_equal(t->dtype, MU_DTYPE_F32);
	assert_int_equal(t->rank, 2);
	assert_int_equal(t->dims[0], rows);
	assert_int_equal(t->dims[1], cols);
	v = malloc(t->numel * sizeof(float));
	memcpy(v, t->data, t->numel * sizeof(float));
	mu__reply_free(r);
	return v;
}

static void expect_refused(mu__reply_t *r, const char *needle)
{
	assert_int_equal(r->m.type, MU_MSG_ERROR);
	assert_int_equal(r->m.status, MU_EPROTO);
	assert_false(r->fatal); /* well formed: the connection stays */
	if (strstr(r->text, needle) == NULL)
		fail_msg("ERROR \"%s\" does not say \"%s\"", r->text, needle);
	mu__reply_free(r);
}

/* I32 token ids and the F32 form of before give the same bits. */
static void test_tokens_both_forms(void **state)
{
	const double ids[3] = {1, 7, 30};
	mu_stage_t *s = open_stage(-1, -1);
	mu__reply_t r;
	float *a, *b;

	(void)state;
	open_seq(s, 1);
	open_seq(s, 2);
	forward1(s, 1, 0, typed("tokens", MU_DTYPE_I32, 1, 3, 0, ids), &r);
	a = result(&r, 1, VOCAB);
	forward1(s, 2, 0, typed("tokens", MU_DTYPE_F32, 1, 3, 0, ids), &r);
	b = result(&r, 1, VOCAB);
	assert_memory_equal(a, b, VOCAB * sizeof(float));
	free(a);
	free(b);
	mu_stage_free(s);
}

/* SEQ_BATCH's items and tokens, I32 and F32: the same bits; and the
 * logits of every row with all_logits. */
static void test_batch_both_forms(void **state)
{
	const double items[8] = {1, 0, 2, 0, 2, 0, 1, 1}, toks[3] = {3, 4, 5};
	mu_stage_t *s = open_stage(-1, -1);
	mu__reply_t r;
	float *a, *b;

	(void)state;
	open_seq(s, 1);
	open_seq(s, 2);
	batch(s, typed("items", MU_DTYPE_I32, 2, 2, 4, items),
	      typed("tokens", MU_DTYPE_I32, 1, 3, 0, toks), &r);
	a = result(&r, 2, VOCAB); /* item 0's last row, item 1's one row */
	batch(s, typed("items", MU_DTYPE_F32, 2, 2, 4, items),
	      typed("tokens", MU_DTYPE_F32, 1, 3, 0, toks), &r);
	b = result(&r, 2, VOCAB); /* positions rewound: the same run again */
	assert_memory_equal(a, b, 2 * VOCAB * sizeof(float));
	/* mixed forms are read too: I32 items with F32 tokens */
	batch(s, typed("items", MU_DTYPE_I32, 2, 2, 4, items),
	      typed("tokens", MU_DTYPE_F32, 1, 3, 0, toks), &r);
	free(b);
	b = result(&r, 2, VOCAB);
	assert_memory_equal(a, b, 2 * VOCAB * sizeof(float));
	free(a);
	free(b);
	mu_stage_free(s);
}

/* Every other dtype or shape of the ids is refused with why (under ASan
 * a U8 or I64 read as F32 would be caught past its buffer). */
static void test_tokens_refused(void **state)
{
	const double ids[4] = {1, 2, 3, 4}, bad[2] = {1, VOCAB}, neg[1] = {-1}, half[1] = {2.5};
	const double zeros[DIM] = {0};
	mu_stage_t *s = open_stage(-1, -1);
	mu__reply_t r;

	(void)state;
	open_seq(s, 1);
	forward1(s, 1, 0, typed("tokens", MU_DTYPE_U8, 1, 4, 0, ids), &r);
	expect_refused(&r, "\"tokens\" is U8: ids are I32");
	forward1(s, 1, 0, typed("tokens", MU_DTYPE_I64, 1, 2, 0, ids), &r);
	expect_refused(&r, "\"tokens\" is I64");
	forward1(s, 1, 0, typed("tokens", MU_DTYPE_I32, 1, 2, 0, bad), &r);
	expect_refused(&r, "token 1 is 32, not an id of the vocabulary of 32");
	forward1(s, 1, 0, typed("tokens", MU_DTYPE_I32, 1, 1, 0, neg), &r);
	expect_refused(&r, "token 0 is -1");
	forward1(s, 1, 0, typed("tokens", MU_DTYPE_F32, 1, 1, 0, half), &r);
	expect_refused(&r, "token 0 is 2.5");
	forward1(s, 1, 0, typed("tokens", MU_DTYPE_I32, 2, 2, 2, ids), &r);
	expect_refused(&r, "\"tokens\" [n]");
	forward1(s, 1, 0, typed("x", MU_DTYPE_F32, 2, 1, DIM, zeros), &r);
	expect_refused(&r, "\"tokens\" [n]");
	/* the stage is still good for a well-formed forward */
	forward1(s, 1, 0, typed("tokens", MU_DTYPE_I32, 1, 1, 0, ids), &r);
	free(result(&r, 1, VOCAB));
	mu_stage_free(s);
}

static void test_items_refused(void **state)
{
	const double ok[4] = {1, 0, 1, 0}, two[4] = {1, 0, 1, 2}, neg[4] = {1, -3, 1, 0};
	const double frac[4] = {1.5, 0, 1, 0}, big[4] = {16777216.0, 0, 1, 0}, tok[1] = {5};
	const double empty[4] = {1, 0, 0, 0};
	mu_stage_t *s = open_stage(-1, -1);
	mu__reply_t r;

	(void)state;
	open_seq(s, 1);
	batch(s, typed("items", MU_DTYPE_U8, 2, 1, 4, ok), typed("tokens", MU_DTYPE_I32, 1, 1, 0, tok),
	      &r);
	expect_refused(&r, "\"items\" is U8");
	batch(s, typed("items", MU_DTYPE_I64, 2, 1, 4, ok), typed("tokens", MU_DTYPE_I32, 1, 1, 0, tok),
	      &r);
	expect_refused(&r, "\"items\" is I64");
	batch(s, typed("items", MU_DTYPE_I32, 2, 1, 3, ok), typed("tokens", MU_DTYPE_I32, 1, 1, 0, tok),
	      &r);
	expect_refused(&r, "\"items\" [k, 4]");
	batch(s, typed("items", MU_DTYPE_I32, 2, 1, 4, two),
	      typed("tokens", MU_DTYPE_I32, 1, 1, 0, tok), &r);
	expect_refused(&r, "item 0: 2 is not 0 or 1 (all_logits)");
	batch(s, typed("items", MU_DTYPE_I32, 2, 1, 4, neg),
	      typed("tokens", MU_DTYPE_I32, 1, 1, 0, tok), &r);
	expect_refused(&r, "item 0: -3 is not a non-negative integer");
	batch(s, typed("items", MU_DTYPE_F32, 2, 1, 4, frac),
	      typed("tokens", MU_DTYPE_I32, 1, 1, 0, tok), &r);
	expect_refused(&r, "item 0: 1.5 is not an integer from 0 to 2^24");
	batch(s, typed("items", MU_DTYPE_F32, 2, 1, 4, big),
	      typed("tokens", MU_DTYPE_I32, 1, 1, 0, tok), &r);
	expect_refused(&r, "is not an integer from 0 to 2^24");
	batch(s, typed("items", MU_DTYPE_I32, 2, 1, 4, empty),
	      typed("tokens", MU_DTYPE_I32, 1, 1, 0, tok), &r);
	expect_refused(&r, "or an empty one");
	batch(s, typed("items", MU_DTYPE_I32, 2, 1, 4, ok), typed("tokens", MU_DTYPE_U8, 1, 1, 0, tok),
	      &r);
	expect_refused(&r, "\"tokens\" is U8");
	mu_stage_free(s);
}

/* A stage past the first takes activations, F32 only. */
static void test_activations_f32_only(void **state)
{
	double x[8 * DIM] = {0};
	mu_stage_t *s = open_stage(1, 2);
	mu__reply_t r;

	(void)state;
	open_seq(s, 1);
	forward1(s, 1, 0, typed("x", MU_DTYPE_I32, 2, 1, DIM, x), &r);
	expect_refused(&r, "\"x\" is I32: activations are F32");
	/* a quarter of the bytes 8 rows of F32 take: read as F32, past the end */
	forward1(s, 1, 0, typed("x", MU_DTYPE_U8, 2, 8, DIM, x), &r);
	expect_refused(&r, "\"x\" is U8");
	forward1(s, 1, 0, typed("x", MU_DTYPE_F32, 2, 1, DIM, x), &r);
	free(result(&r, 1, VOCAB));
	mu_stage_free(s);
}

/* The codec alone: what the coordinator builds, a stage reads back. */
static void test_codec(void **state)
{
	const int32_t tok[3] = {0, 5, MU__SEQ_F32_IDS};
	mu__dec_item_t it[2] = {{(uint64_t)INT32_MAX, 3, 2, 1}, {7, 0, 1, 0}}, back[2];
	mu_tensor_t *t = NULL;
	int32_t got[3];
	char why[256];

	(void)state;
	assert_int_equal(mu__seq_tokens_new(tok, 3, 0, &t, why, sizeof(why)), 0);
	assert_int_equal(t->dtype, MU_DTYPE_I32);
	assert_int_equal(mu__seq_tokens_read(t, 8, MU__SEQ_F32_IDS + 1, got, why, sizeof(why)), 3);
	assert_memory_equal(got, tok, sizeof(tok));
	/* a vocabulary smaller than an id: refused, not wrapped */
	assert_int_equal(mu__seq_tokens_read(t, 8, 6, got, why, sizeof(why)), -1);
	/* more ids than the stage takes */
	assert_int_equal(mu__seq_tokens_read(t, 2, MU__SEQ_F32_IDS + 1, got, why, sizeof(why)), -1);
	mu_tensor_free(t);
	/* the F32 form carries ids below 2^24 only */
	assert_int_equal(mu__seq_tokens_new(tok, 3, 1, &t, why, sizeof(why)), MU_ETOOBIG);
	assert_null(t);
	assert_int_equal(mu__seq_tokens_new(tok, 2, 1, &t, why, sizeof(why)), 0);
	assert_int_equal(t->dtype, MU_DTYPE_F32);
	assert_true(t->data[1] == 5.0f);
	mu_tensor_free(t);
	/* I32 items carry sequence ids up to 2^31 - 1 */
	assert_int_equal(mu__seq_items_new(it, 2, 0, &t, why, sizeof(why)), 0);
	assert_int_equal(mu__seq_items_read(t, 4, back, why, sizeof(why)), 2);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(back[i].id, it[i].id);
		assert_int_equal(back[i].pos, it[i].pos);
		assert_int_equal(back[i].n, it[i].n);
		assert_int_equal(back[i].all_logits, it[i].all_logits);
	}
	assert_int_equal(mu__seq_items_read(t, 1, back, why, sizeof(why)), -1); /* k > max */
	mu_tensor_free(t);
	assert_int_equal(mu__seq_items_new(it, 2, 1, &t, why, sizeof(why)), MU_ETOOBIG);
	assert_non_null(strstr(why, "F32 items"));
	it[0].id = (uint64_t)INT32_MAX + 1;
	assert_int_equal(mu__seq_items_new(it, 2, 0, &t, why, sizeof(why)), MU_ETOOBIG);
	assert_null(t);
}

/* The kind's table: found by name, owning the SEQ messages; FORWARD is
 * refused saying what the stage answers; INFO says "ids": "I32"; a gone
 * connection's sequences are released. */
static void test_kind(void **state)
{
	const double x[1] = {0};
	mu_stage_t *s = open_stage(-1, -1);
	mu_tensor_list_t in;
	mu__reply_t r;
	uint64_t kv;
	int seqs;

	(void)state;
	assert_ptr_equal(s->kind, &mu__stage_kind_llm);
	assert_ptr_equal(mu__stage_kind_find("llm"), &mu__stage_kind_llm);
	assert_ptr_equal(mu__stage_kind_owning(MU_MSG_SEQ_BATCH), &mu__stage_kind_llm);
	ask(s, 1, MU_MSG_INFO, 0, 0, NULL, NULL, &r);
	assert_int_equal(r.m.type, MU_MSG_INFO);
	assert_non_null(strstr(r.text, "\"kind\": \"llm\""));
	assert_non_null(strstr(r.text, "\"ids\": \"I32\""));
	mu__reply_free(&r);
	mu_tensor_list_init(&in);
	assert_int_equal(mu_tensor_list_push(&in, typed("x", MU_DTYPE_F32, 1, 1, 0, x)), 0);
	ask(s, 1, MU_MSG_FORWARD, 0, 0, NULL, &in, &r);
	mu_tensor_list_free(&in);
	expect_refused(&r, "FORWARD is for graph stages; this is a stage of kind llm, which answers "
	               "INFO, SEQ_OPEN, SEQ_FORWARD, SEQ_CLOSE, SEQ_BATCH");
	open_seq(s, 1);
	open_seq(s, 2);
	s->kind->usage(s, &kv, &seqs);
	assert_int_equal(seqs, 2);
	assert_true(kv > 0);
	s->kind->release(s, 1);
	s->kind->usage(s, &kv, &seqs);
	assert_int_equal(seqs, 0);
	assert_int_equal(kv, 0);
	assert_int_equal(mu_stage_set_threads(s, 2), 0); /* chosen at open: nothing to change */
	{
		mu_tensor_list_t out;
		char err[256];

		mu_tensor_list_init(&out);
		assert_int_equal(mu_stage_forward(s, &out, &out, err, sizeof(err)), MU_EARG);
		assert_non_null(strstr(err, "not one of kind llm"));
	}
	mu_stage_free(s);
}

/* ---- the coordinator's side, over a stage server ---- */

/*
 * A stage kind of its own that counts the dtypes of the id tensors that
 * come, with the real LLM stage behind it; with strip_ids its INFO lacks
 * "ids", as a stage's of before I32 ids does. (That a kind takes one
 * table and nothing else is what docs/internals/pipeline.md promises.)
 */
typedef struct {
	mu_stage_t base;
	mu_stage_t *real;
	int strip_ids;
	int lie;                 /* RESULTs become [lie - 1, vocab] (of U8 when lie is 3) */
	int saw_i32, saw_f32;
} old_t;

static void old_handle(mu_stage_t *st, uint64_t owner, const char *who, const mu__msg_t *m,
                       const char *body, mu_tensor_list_t *in, mu__reply_t *r)
{
	old_t *o = (old_t *)st;

	for (size_t i = 0; i < in->n; i++)
		if (strcmp(in->t[i]->name, "x") != 0) {
			o->saw_i32 += in->t[i]->dtype == MU_DTYPE_I32;
			o->saw_f32 += in->t[i]->dtype == MU_DTYPE_F32;
		}
	o->real->kind->handle(o->real, owner, who, m, body, in, r);
	if (o->lie > 0 && r->m.type == MU_MSG_RESULT) {
		uint64_t dims[2] = {(uint64_t)(o->lie == 3 ? 1 : o->lie - 1), VOCAB};
		mu_tensor_t *t;

		assert_int_equal(mu_tensor_new_typed("logits", o->lie == 3 ? MU_DTYPE_U8 : MU_DTYPE_F32,
		                                     2, dims, &t), 0);
		mu_tensor_free(r->out.t[0]);
		r->out.t[0] = t;
	}
}

static void old_info(mu_stage_t *st, const mu__msg_t *m, mu__reply_t *r)
{
	static const char said[] = "\"ids\": \"I32\", ";
	old_t *o = (old_t *)st;
	const char *d = mu_stage_describe(o->real), *ids = strstr(d, said);
	size_t k = (size_t)(ids - d);

	assert_non_null(ids);
	r->text = mu__strdup(d);
	if (o->strip_ids)
		memmove(r->text + k, r->text + k + strlen(said), strlen(d) - k - strlen(said) + 1);
	r->text_owned = 1;
	r->m = (mu__msg_t){MU_MSG_INFO, 0, m->id, 0, 0, 0};
}

static void old_release(mu_stage_t *st, uint64_t owner)
{
	old_t *o = (old_t *)st;

	o->real->kind->release(o->real, owner);
}

static void old_free(mu_stage_t *st)
{
	(void)st; /* the test's */
}

static const mu__stage_kind_t old_kind = {
	.version = MU__STAGE_KIND_VERSION,
	.name = "old-llm",
	.msgs = MU__MSG_BIT(MU_MSG_SEQ_OPEN) | MU__MSG_BIT(MU_MSG_SEQ_FORWARD) |
	        MU__MSG_BIT(MU_MSG_SEQ_BATCH) | MU__MSG_BIT(MU_MSG_SEQ_CLOSE),
	.handle = old_handle,
	.info = old_info,
	.release = old_release,
	.free = old_free,
};

/* Generate with the link (SEQ_BATCH) through a stage server serving s:
 * the logits of two steps of one sequence, and of the prompt alone in a
 * second one. */
static void drive(mu_stage_t *s, float *logits)
{
	const char *addr[1];
	char a[32], why[512];
	mu_stage_server_opts_t so;
	mu_stage_server_t *srv;
	mu__llm_coord_opts_t co;
	mu__llm_coord_t *c;
	mu__eng_link_t link;
	const int32_t prompt[2] = {1, 9}, next = 4;
	mu__dec_item_t it = {5, 0, 2, 0}, first = {3, 0, 2, 0}, second = {3, 2, 1, 0};
	const float *out;
	double ms;

	mu_stage_server_opts_init(&so);
	assert_int_equal(mu_stage_server_start(s, &so, &srv), 0);
	snprintf(a, sizeof(a), "127.0.0.1:%d", mu_stage_server_port(srv));
	addr[0] = a;
	mu__llm_coord_opts_init(&co);
	co.sec = NULL;
	if (mu__llm_coord_connect(addr, 1, &co, &c, why, sizeof(why)) != 0)
		fail_msg("connect: %s", why);
	mu__llm_coord_link(c, 0, 8, &link);
	assert_int_equal(link.open(link.ud, 3, 16, why, sizeof(why)), 0);
	assert_int_equal(link.submit(link.ud, &first, 1, 2, prompt, NULL, why, sizeof(why)), 0);
	if (link.finish(link.ud, &out, &ms, why, sizeof(why)) != 0)
		fail_msg("step 1: %s", why);
	memcpy(logits, out, VOCAB * sizeof(float));
	assert_int_equal(link.submit(link.ud, &second, 1, 1, &next, NULL, why, sizeof(why)), 0);
	if (link.finish(link.ud, &out, &ms, why, sizeof(why)) != 0)
		fail_msg("step 2: %s", why);
	memcpy(logits + VOCAB, out, VOCAB * sizeof(float));
	assert_int_equal(link.close(link.ud, 3, why, sizeof(why)), 0);
	assert_int_equal(link.open(link.ud, 5, 16, why, sizeof(why)), 0);
	assert_int_equal(link.submit(link.ud, &it, 1, 2, prompt, NULL, why, sizeof(why)), 0);
	if (link.finish(link.ud, &out, &ms, why, sizeof(why)) != 0)
		fail_msg("batch: %s", why);
	memcpy(logits + 2 * VOCAB, out, VOCAB * sizeof(float));
	assert_int_equal(link.close(link.ud, 5, why, sizeof(why)), 0);
	mu__llm_coord_free(c);
	mu_stage_server_free(srv);
}

static void test_coordinator_forms(void **state)
{
	mu_stage_t *s = open_stage(-1, -1);
	old_t old = {{&old_kind, 0, 1, s->digest, NULL}, s, 1, 0, 0, 0};
	old_t cur = {{&old_kind, 0, 1, s->digest, NULL}, s, 0, 0, 0, 0};
	float now[3 * VOCAB], before[3 * VOCAB];

	(void)state;
	drive(&cur.base, now);
	drive(&old.base, before);
	/* a stage that says it reads I32 gets I32 ids only */
	assert_int_equal(cur.saw_i32, 6); /* three batches' items and tokens */
	assert_int_equal(cur.saw_f32, 0);
	/* the stage of before got F32 ids only, and the same logits came */
	assert_int_equal(old.saw_i32, 0);
	assert_int_equal(old.saw_f32, 6);
	assert_memory_equal(now, before, sizeof(now));
	/* the prompt alone and in a batch: the same bits; the next step's differ */
	assert_memory_equal(now, now + 2 * VOCAB, VOCAB * sizeof(float));
	assert_memory_not_equal(now, now + VOCAB, VOCAB * sizeof(float));
	mu_stage_free(s);
}

/* A stage whose RESULT is not what was asked for: the coordinator
 * refuses it rather than read floats it does not hold. */
static void test_coordinator_checks_results(void **state)
{
	mu_stage_t *s = open_stage(-1, -1);
	const int32_t prompt[2] = {1, 9};
	mu__dec_item_t it = {5, 0, 2, 0};
	char a[32], why[512];
	const char *addr[1] = {a};
	const float *out;
	double ms;

	(void)state;
	for (int lie = 1; lie <= 3; lie++) {
		old_t o = {{&old_kind, 0, 1, s->digest, NULL}, s, 0, lie, 0, 0};
		mu_stage_server_opts_t so;
		mu_stage_server_t *srv;
		mu__llm_coord_opts_t co;
		mu__llm_coord_t *c;
		mu__eng_link_t link;

		mu_stage_server_opts_init(&so);
		assert_int_equal(mu_stage_server_start(&o.base, &so, &srv), 0);
		snprintf(a, sizeof(a), "127.0.0.1:%d", mu_stage_server_port(srv));
		mu__llm_coord_opts_init(&co);
		co.sec = NULL;
		assert_int_equal(mu__llm_coord_connect(addr, 1, &co, &c, why, sizeof(why)), 0);
		mu__llm_coord_link(c, 0, 8, &link);
		assert_int_equal(link.open(link.ud, 5, 16, why, sizeof(why)), 0);
		assert_int_equal(link.submit(link.ud, &it, 1, 2, prompt, NULL, why, sizeof(why)), 0);
		assert_int_equal(link.finish(link.ud, &out, &ms, why, sizeof(why)),
		                 lie == 2 ? 0 : MU_EPROTO);
		if (lie != 2)
			assert_non_null(strstr(why, "not F32 [1, 32]"));
		mu__llm_coord_free(c);
		mu_stage_server_free(srv);
	}
	mu_stage_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tokens_both_forms),
		cmocka_unit_test(test_batch_both_forms),
		cmocka_unit_test(test_tokens_refused),
		cmocka_unit_test(test_items_refused),
		cmocka_unit_test(test_activations_f32_only),
		cmocka_unit_test(test_codec),
		cmocka_unit_test(test_kind),
		cmocka_unit_test(test_coordinator_forms),
		cmocka_unit_test(test_coordinator_checks_results),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
