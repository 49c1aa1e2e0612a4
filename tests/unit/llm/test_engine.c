/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/llm/engine.c and engine_stage.c: the engine over a
 * made-up stage (a link whose logits put the next token at the last one
 * plus one), so what it generates is known. Sequence ids are given in
 * turn and never twice among the open ones, with no table behind them
 * (no allocation anywhere near the ids' range); the stop reasons and
 * figures are what the old single-sequence loop reported; max_tokens 0
 * runs the prompt and samples nothing; on_logits sees each sampled step.
 * A stage that dies and comes back where it was (retry_ms) is waited for
 * and replayed, or fails what waited past io_timeout with MU__ENG_EDOWN
 * and is used again once it is back.
 */
#include "mu_test.h"

#include <unistd.h>

#include "llm/engine_int.h"

#define VOCAB 16
#define MAX_OPEN 64

/* ---- a stage in this process that needs no model ---- */

typedef struct {
	float out[256 * VOCAB];
	uint64_t open[MAX_OPEN];  /* ids open now (0: a free slot) */
	uint64_t seen[1024];      /* every id opened, in order */
	int nseen, max_open, nopen;
	int dup;                  /* an id opened while open */
	/* a stage that dies and comes back (retry_ms): the die_at-th submit
	 * and everything after fails as a lost connection, until recover has
	 * been called back_after times (atomic: the test changes it) */
	int die_at, submits, dead, tries, back_after;
} fake_t;

static int fake_open(void *ud, uint64_t seq, int32_t ctx, char *why, size_t wl)
{
	fake_t *f = ud;
	int i, slot = -1;

	(void)ctx;
	(void)why;
	(void)wl;
	if (f->dead)
		return MU_EEOF;
	for (i = 0; i < MAX_OPEN; i++) {
		if (f->open[i] == seq)
			f->dup = 1;
		if (f->open[i] == 0 && slot < 0)
			slot = i;
	}
	if (slot < 0 || seq == 0 || seq > MU__ENG_MAX_SID)
		return MU_EARG;
	f->open[slot] = seq;
	if (f->nseen < 1024)
		f->seen[f->nseen++] = seq;
	if (++f->nopen > f->max_open)
		f->max_open = f->nopen;
	return 0;
}

static int fake_close(void *ud, uint64_t seq, char *why, size_t wl)
{
	fake_t *f = ud;

	(void)why;
	(void)wl;
	for (int i = 0; i < MAX_OPEN; i++)
		if (f->open[i] == seq) {
			f->open[i] = 0;
			f->nopen--;
			return 0;
		}
	return MU_EARG;
}

/* Each item's last row: logits peaked at (its token + 1) % VOCAB. */
static int fake_submit(void *ud, const mu__dec_item_t *it, int k, int32_t rows,
                       const int32_t *tokens, const float *x, char *why, size_t wl)
{
	fake_t *f = ud;
	int32_t row = 0;

	(void)rows;
	(void)x;
	(void)why;
	(void)wl;
	if (f->die_at > 0 && ++f->submits == f->die_at)
		f->dead = 1;
	if (f->dead)
		return MU_EEOF;
	for (int i = 0; i < k; i++) {
		int32_t next = (tokens[row + it[i].n - 1] + 1) % VOCAB;

		for (int v = 0; v < VOCAB; v++)
			f->out[i * VOCAB + v] = v == next ? 10.0f : -(float)v / 100.0f;
		row += it[i].n;
	}
	return 0;
}

static mu_stream_t *fake_stream(void *ud)
{
	(void)ud;
	return NULL;
}

static int fake_finish(void *ud, const float **out, double *ms, char *why, size_t wl)
{
	fake_t *f = ud;

	(void)why;
	(void)wl;
	*out = f->out;
	*ms = 0;
	return 0;
}

/* The recover hook: a new connection to a fresh stage, once it is back. */
static int fake_recover(void *ud, int stage, char *why, size_t wl)
{
	fake_t *f = ud;

	assert_int_equal(stage, 0);
	if (++f->tries < __atomic_load_n(&f->back_after, __ATOMIC_RELAXED)) {
		snprintf(why, wl, "fake: cannot connect: Connection refused");
		return -ECONNREFUSED;
	}
	f->dead = 0;
	memset(f->open, 0, sizeof(f->open)); /* the old connection's sequences went */
	f->nopen = 0;
	return 0;
}

/* An engine whose one stage comes back where it was (retry_ms). */
static mu__eng_t *engine_retrying(fake_t *f, int io_timeout_ms)
{
	mu__eng_link_t l = {fake_open, fake_close, fake_submit, fake_stream, fake_finish, NULL,
	                    f, 64, MAX_OPEN, "fake"};
	mu__eng_opts_t o = {.dim = 4, .vocab = VOCAB, .ctx_max = 128, .max_active = 2,
	                    .batch = 1, .io_timeout_ms = io_timeout_ms, .recover = fake_recover,
	                    .recover_ud = f, .replay_bytes = 1 << 20, .retry_ms = 200};
	mu__eng_t *e = NULL;

	assert_int_equal(mu__eng_new(&l, 1, &o, &e), 0);
	return e;
}

static mu__eng_t *engine(fake_t *f, int max_active)
{
	mu__eng_link_t l = {fake_open, fake_close, fake_submit, fake_stream, fake_finish, NULL,
	                    f, 64, MAX_OPEN, "fake"};
	mu__eng_opts_t o = {.dim = 4, .vocab = VOCAB, .ctx_max = 128, .max_active = max_active,
	                    .batch = 1, .io_timeout_ms = 1000};
	mu__eng_t *e = NULL;

	assert_int_equal(mu__eng_new(&l, 1, &o, &e), 0);
	return e;
}

/* ---- one request's record ---- */

typedef struct {
	int32_t toks[64];
	int ntok, nlogits, done, rc, stop, stop_after;
	mu__gen_stats_t st;
} rec_t;

static int rec_token(void *ud, int32_t id)
{
	rec_t *r = ud;

	if (r->ntok < 64)
		r->toks[r->ntok++] = id;
	return r->stop_after > 0 && r->ntok >= r->stop_after;
}

static void rec_logits(void *ud, const float *logits, int32_t vocab)
{
	rec_t *r = ud;

	assert_int_equal(vocab, VOCAB);
	assert_true(logits[0] == logits[0]);
	r->nlogits++;
}

static void rec_done(void *ud, int rc, const char *why, int stop, const mu__gen_stats_t *st)
{
	rec_t *r = ud;

	(void)why;
	r->rc = rc;
	r->stop = stop;
	r->st = *st;
	r->done++;
}

static mu__eng_req_t request(rec_t *r, const int32_t *prompt, int32_t n, int32_t max_tokens)
{
	mu__eng_req_t q = {0};

	q.prompt = prompt;
	q.nprompt = n;
	q.ctx = 64;
	q.max_tokens = max_tokens;
	q.on_token = rec_token;
	q.on_done = rec_done;
	q.on_logits = rec_logits;
	q.ud = r;
	return q;
}

static void test_generates_and_stops(void **state)
{
	fake_t f = {0};
	mu__eng_t *e = engine(&f, 1);
	int32_t prompt[3] = {1, 2, 3}, eos = 7;
	rec_t a = {0}, b = {0}, c = {0};
	mu__eng_req_t q;

	(void)state;
	q = request(&a, prompt, 3, 5); /* length: 4 5 6 7 8, the last not fed back */
	assert_int_equal(mu__eng_submit(e, &q, NULL), 0);
	q = request(&b, prompt, 3, 10); /* EOS after 4 5 6: all three fed back */
	q.eos = &eos;
	q.neos = 1;
	assert_int_equal(mu__eng_submit(e, &q, NULL), 0);
	q = request(&c, prompt, 3, 50); /* the context: 8 positions */
	q.ctx = 8;
	assert_int_equal(mu__eng_submit(e, &q, NULL), 0);
	mu__eng_drain(e);
	assert_int_equal(a.done, 1);
	assert_int_equal(a.rc, 0);
	assert_int_equal(a.stop, MU__STOP_LENGTH);
	assert_int_equal(a.ntok, 5);
	for (int i = 0; i < 5; i++)
		assert_int_equal(a.toks[i], 4 + i);
	assert_int_equal(a.nlogits, 5);
	assert_int_equal(a.st.prompt_tokens, 3);
	assert_int_equal(a.st.new_tokens, 5);
	assert_int_equal(a.st.decode_steps, 4);
	assert_int_equal(b.stop, MU__STOP_EOS);
	assert_int_equal(b.ntok, 3);
	assert_int_equal(b.st.decode_steps, 3);
	assert_int_equal(b.nlogits, 4);
	assert_int_equal(c.stop, MU__STOP_CTX);
	assert_int_equal(c.ntok, 6); /* positions 3..7 fed, the 6th token has no room */
	assert_int_equal(c.st.decode_steps, 5);
	mu__eng_free(e);
	assert_int_equal(f.nopen, 0);
	assert_int_equal(f.dup, 0);
}

static void test_no_tokens_asked(void **state)
{
	fake_t f = {0};
	mu__eng_t *e = engine(&f, 1);
	int32_t prompt[2] = {5, 6};
	rec_t a = {0};
	mu__eng_req_t q = request(&a, prompt, 2, 0);

	(void)state;
	assert_int_equal(mu__eng_submit(e, &q, NULL), 0);
	mu__eng_drain(e);
	assert_int_equal(a.done, 1);
	assert_int_equal(a.rc, 0);
	assert_int_equal(a.stop, MU__STOP_LENGTH);
	assert_int_equal(a.ntok, 0);
	assert_int_equal(a.nlogits, 0);
	assert_int_equal(a.st.new_tokens, 0);
	assert_int_equal(f.nseen, 1); /* the prompt did run */
	mu__eng_free(e);
}

static void test_consumer_stops(void **state)
{
	fake_t f = {0};
	mu__eng_t *e = engine(&f, 1);
	int32_t prompt[1] = {0};
	rec_t a = {.stop_after = 2};
	mu__eng_req_t q = request(&a, prompt, 1, 30);

	(void)state;
	assert_int_equal(mu__eng_submit(e, &q, NULL), 0);
	mu__eng_drain(e);
	assert_int_equal(a.ntok, 2);
	assert_int_equal(a.rc, MU_ESTOPPED);
	mu__eng_free(e);
	assert_int_equal(f.nopen, 0);
}

/* The largest single allocation while an engine is made and runs. */
static size_t biggest;

static void *big_malloc(size_t n)
{
	if (n > biggest)
		biggest = n;
	return malloc(n);
}

static void *big_realloc(void *p, size_t n)
{
	if (n > biggest)
		biggest = n;
	return realloc(p, n);
}

static void test_ids_in_turn_without_a_table(void **state)
{
	enum { N = 40 };
	fake_t f = {0};
	mu__eng_t *e;
	int32_t prompt[1] = {3};
	rec_t r[N];
	mu__eng_req_t q;

	(void)state;
	memset(r, 0, sizeof(r));
	biggest = 0;
	mu_set_allocator(big_malloc, big_realloc, free);
	e = engine(&f, 4);
	for (int i = 0; i < N; i++) {
		q = request(&r[i], prompt, 1, 3 + i % 5);
		assert_int_equal(mu__eng_submit(e, &q, NULL), 0);
	}
	mu__eng_drain(e);
	mu__eng_free(e);
	mu_set_allocator(malloc, realloc, free);
	/* the ids' range has no table: nothing near MU__ENG_MAX_SID bytes */
	assert_true(biggest < (size_t)1 << 20);
	assert_int_equal(f.dup, 0);
	assert_int_equal(f.nopen, 0);
	assert_true(f.max_open >= 1 && f.max_open <= 4); /* max_active */
	assert_int_equal(f.nseen, N);
	for (int i = 0; i < N; i++) {
		assert_int_equal(f.seen[i], (uint64_t)i + 1); /* in turn: none reused early */
		assert_int_equal(r[i].done, 1);
		assert_int_equal(r[i].rc, 0);
		assert_int_equal(r[i].ntok, 3 + i % 5);
	}
}

static void test_refusals(void **state)
{
	fake_t f = {0};
	mu__eng_t *e = engine(&f, 1);
	int32_t prompt[1] = {3};
	rec_t a = {0};
	mu__eng_req_t q = request(&a, prompt, 1, 3);

	(void)state;
	q.nprompt = 0;
	assert_int_equal(mu__eng_submit(e, &q, NULL), MU_EARG);
	q.nprompt = 1;
	q.ctx = 1000; /* over ctx_max */
	assert_int_equal(mu__eng_submit(e, &q, NULL), MU_EARG);
	q.ctx = 64;
	q.max_tokens = -1;
	assert_int_equal(mu__eng_submit(e, &q, NULL), MU_EARG);
	mu__eng_free(e);
	assert_int_equal(a.done, 0); /* a refused request is never called back */
}

/* The stage dies mid-request and refuses twice: the request waits, the
 * stage's cache is replayed, and the tokens are what they would be. */
static void test_stage_comes_back(void **state)
{
	fake_t f = {.die_at = 3, .back_after = 3};
	mu__eng_t *e = engine_retrying(&f, 10000);
	int32_t prompt[3] = {1, 2, 3};
	rec_t a = {0};
	mu__eng_req_t q = request(&a, prompt, 3, 8);
	mu__eng_stats_t st;
	mu__eng_down_t d;

	(void)state;
	assert_int_equal(mu__eng_submit(e, &q, NULL), 0);
	mu__eng_drain(e);
	assert_int_equal(a.rc, 0);
	assert_int_equal(a.ntok, 8);
	for (int i = 0; i < 8; i++)
		assert_int_equal(a.toks[i], (4 + i) % VOCAB);
	mu__eng_stats(e, &st);
	assert_int_equal(st.recoveries, 1);
	assert_true(st.replayed > 0);
	assert_int_equal(f.tries, 3);
	assert_int_equal(mu__eng_stage_down(e, 0, &d), 0);
	mu__eng_free(e);
	assert_int_equal(f.nopen, 0);
}

/* Down past io_timeout: the request fails naming the stage, one that
 * starts then fails at once, and once the stage is back one succeeds. */
static void test_stage_down_fails_then_back(void **state)
{
	fake_t f = {.die_at = 2, .back_after = 1 << 30};
	mu__eng_t *e = engine_retrying(&f, 300);
	int32_t prompt[2] = {5, 6};
	rec_t a = {0}, b = {0}, c = {0};
	mu__eng_req_t q = request(&a, prompt, 2, 4);
	mu__eng_down_t d;
	char text[1400];

	(void)state;
	assert_int_equal(mu__eng_submit(e, &q, NULL), 0);
	mu__eng_drain(e);
	assert_int_equal(a.rc, MU__ENG_EDOWN);
	assert_int_equal(mu__eng_stage_down(e, 0, &d), 1);
	assert_string_equal(d.name, "fake");
	assert_true(d.down_ms >= 300);
	mu__eng_down_text(&d, text, sizeof(text));
	assert_non_null(strstr(text, "fake is down since "));
	assert_non_null(strstr(text, "Connection refused"));
	q = request(&b, prompt, 2, 4);
	assert_int_equal(mu__eng_submit(e, &q, NULL), 0);
	mu__eng_drain(e);
	assert_int_equal(b.rc, MU__ENG_EDOWN);
	__atomic_store_n(&f.back_after, 0, __ATOMIC_RELAXED);
	for (int i = 0; i < 300 && mu__eng_stage_down(e, 0, &d); i++)
		usleep(10 * 1000);
	assert_int_equal(mu__eng_stage_down(e, 0, &d), 0);
	q = request(&c, prompt, 2, 4);
	assert_int_equal(mu__eng_submit(e, &q, NULL), 0);
	mu__eng_drain(e);
	assert_int_equal(c.rc, 0);
	assert_int_equal(c.ntok, 4);
	assert_int_equal(c.toks[0], 7);
	mu__eng_free(e);
	assert_int_equal(f.nopen, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_generates_and_stops),
		cmocka_unit_test(test_no_tokens_asked),
		cmocka_unit_test(test_consumer_stops),
		cmocka_unit_test(test_ids_in_turn_without_a_table),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_stage_comes_back),
		cmocka_unit_test(test_stage_down_fails_then_back),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
