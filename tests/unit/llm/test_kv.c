/* SPDX-License-Identifier: MIT */
/*
 * KV cache types (src/llm/kv.c) in the decoder, over a small random
 * llama2.c checkpoint written here with heads of 32 (what q8_0 takes):
 * for each type a split of the layers equals the whole bit for bit, a
 * prefill equals token-by-token decode, and the AVX2 kernels the portable
 * ones; the types really differ (f16 and
 * q8_0 round what f32 keeps); a sequence's bytes are its type's; q8_0 is
 * refused for a head dim not of whole blocks; names parse, and a wrong
 * one is told the choices.
 */
#include "mu_test.h"

#include <math.h>
#include <unistd.h>

#include "llm/llm_int.h"
#include "llm_fixture.h"

enum { DIM = 64, HID = 96, LAYERS = 3, HEADS = 2, KVH = 1, VOCAB = 40, SEQ = 64, N = 12 };

static char path[64], path8[64];
static mu__llm_src_t src, src8;

/* A checkpoint of dim and heads (kv heads half of them, or 1). */
static void write_model(char *where, int32_t dim, int32_t heads)
{
	llm_fixture_shape_t s = {dim, HID, LAYERS, heads, heads / 2 > 0 ? heads / 2 : 1, VOCAB, SEQ};

	assert_int_equal(llm_fixture_write(where, 64, "/tmp/mu_test_kv_XXXXXX", &s, 7), 0);
}

static int setup(void **state)
{
	(void)state;
	write_model(path, DIM, HEADS);
	write_model(path8, 32, 4); /* heads of 8 */
	if (mu__llm_src_open(path, NULL, &src, NULL, 0) != 0)
		return -1;
	return mu__llm_src_open(path8, NULL, &src8, NULL, 0);
}

static int teardown(void **state)
{
	(void)state;
	mu__llm_src_free(&src);
	mu__llm_src_free(&src8);
	unlink(path);
	unlink(path8);
	return 0;
}

static mu__dec_t *dec(int first, int last, int threads, int kvt)
{
	mu__dec_opts_t o = {threads, 4, (uint64_t)1 << 30, 16, 0, 0, kvt};
	mu__dec_t *d = NULL;
	char why[256] = "";

	assert_int_equal(mu__dec_new(&src, first, last, &o, &d, why, sizeof(why)), 0);
	return d;
}

static const int32_t toks[N] = {1, 7, 3, 39, 0, 12, 12, 5, 30, 2, 8, 19};

/* Logits of every position, fed `chunk` positions at a time. */
static void run_whole(int kvt, int chunk, int threads, float *logits)
{
	mu__dec_t *d = dec(0, LAYERS, threads, kvt);

	assert_int_equal(mu__dec_seq_open(d, 0, 1, 32, NULL, 0), 0);
	for (int32_t pos = 0; pos < N; pos += chunk) {
		int32_t n = N - pos < chunk ? N - pos : chunk;

		assert_int_equal(mu__dec_forward(d, 0, 1, pos, n, toks + pos, NULL,
		                                 logits + (size_t)pos * VOCAB, 1, NULL, 0), 0);
	}
	mu__dec_free(d);
}

static void test_prefill_equals_decode(void **state)
{
	float a[N * VOCAB], b[N * VOCAB], c[N * VOCAB];

	(void)state;
	for (int t = 0; t < MU__KV_COUNT; t++) {
		run_whole(t, N, 1, a);
		run_whole(t, 1, 1, b);
		run_whole(t, 5, 3, c);
		assert_memory_equal(a, b, sizeof(a));
		assert_memory_equal(a, c, sizeof(a));
	}
}

/* Every instruction set reads a cache as the portable code does
 * (kern/attn.c): the same logits whatever the kernels (the checkpoint's
 * weights are f32, whose products agree too), a prefill on three threads
 * against decoding on one. */
static void test_isas_agree(void **state)
{
	static const char *const isas[] = {"avx2", "avx2-vnni"};
	float a[N * VOCAB], b[N * VOCAB];

	(void)state;
	for (int t = 0; t < MU__KV_COUNT; t++) {
		assert_true(mu__attn_has(mu__kv_types[t].wt)); /* attention reads the type */
		assert_int_equal(mu__kern_force_isa("portable"), 0);
		run_whole(t, 1, 1, a);
		for (int i = 0; i < 2; i++) {
			if (mu__kern_force_isa(isas[i]) != 0)
				continue; /* not this CPU's */
			run_whole(t, N, 3, b);
			if (memcmp(a, b, sizeof(a)) != 0)
				fail_msg("kv %s: the %s kernels' logits differ from the portable ones",
				         mu__kv_name(t), isas[i]);
		}
	}
	assert_int_equal(mu__kern_force_isa(NULL), 0);
}

/* Two stages, each with its own cache of its layers, in the same type. */
static void test_split_equals_whole(void **state)
{
	float want[N * VOCAB], x[N * DIM], got[N * VOCAB];

	(void)state;
	for (int t = 0; t < MU__KV_COUNT; t++) {
		mu__dec_t *s0 = dec(0, 1, 1, MU__KV_F32), *s1 = dec(1, LAYERS, 2, MU__KV_F32);

		run_whole(t, N, 1, want);
		/* the type asked when opening rules over the stage's own */
		assert_int_equal(mu__dec_seq_open_kv(s0, 9, 5, 32, t, NULL, 0), 0);
		assert_int_equal(mu__dec_seq_open_kv(s1, 9, 5, 32, t, NULL, 0), 0);
		for (int32_t pos = 0; pos < N; pos += 4) {
			assert_int_equal(mu__dec_forward(s0, 9, 5, pos, 4, toks + pos, NULL, x, 0, NULL,
			                                 0), 0);
			assert_int_equal(mu__dec_forward(s1, 9, 5, pos, 4, NULL, x,
			                                 got + (size_t)pos * VOCAB, 1, NULL, 0), 0);
		}
		assert_memory_equal(want, got, sizeof(want));
		mu__dec_free(s0);
		mu__dec_free(s1);
	}
}

/* The cache's type is what attention reads: each rounds differently. */
static void test_types_differ(void **state)
{
	float f32[N * VOCAB], f16[N * VOCAB], q8[N * VOCAB];
	double d16 = 0, d8 = 0;

	(void)state;
	run_whole(MU__KV_F32, N, 1, f32);
	run_whole(MU__KV_F16, N, 1, f16);
	run_whole(MU__KV_Q8_0, N, 1, q8);
	/* position 0 attends to itself alone: softmax weight 1, so only V's
	 * rounding shows; later ones differ more */
	assert_true(memcmp(f32, f16, sizeof(f32)) != 0);
	assert_true(memcmp(f16, q8, sizeof(f16)) != 0);
	for (size_t i = 0; i < N * VOCAB; i++) {
		d16 = fmax(d16, fabs((double)f32[i] - f16[i]));
		d8 = fmax(d8, fabs((double)f32[i] - q8[i]));
	}
	/* close to f32 all the same, q8_0 further than f16 */
	assert_true(d16 < 1e-2 && d8 < 1e-1 && d16 < d8);
}

static void test_bytes_per_type(void **state)
{
	mu__dec_t *d = dec(0, LAYERS, 1, MU__KV_F16);
	uint64_t row = KVH * (DIM / HEADS); /* elements of a position's K (or V) */
	char why[256];

	(void)state;
	assert_true(mu__dec_kv_per_seq(d, 10) == LAYERS * 2 * 10 * row * 2);
	assert_true(mu__dec_kv_per_seq_type(d, 10, MU__KV_F32) == LAYERS * 2 * 10 * row * 4);
	assert_true(mu__dec_kv_per_seq_type(d, 10, MU__KV_Q8_0) == LAYERS * 2 * 10 * (row / 32 * 34));
	assert_int_equal(mu__dec_seq_open_kv(d, 1, 1, 10, MU__KV_Q8_0, why, sizeof(why)), 0);
	assert_int_equal(mu__dec_seq_open(d, 1, 2, 10, why, sizeof(why)), 0);
	assert_true(mu__dec_kv_reserved(d) == LAYERS * 2 * 10 * (row / 32 * 34 + row * 2));
	assert_int_equal(mu__dec_seq_close(d, 1, 1), 0);
	assert_true(mu__dec_kv_reserved(d) == LAYERS * 2 * 10 * row * 2);
	mu__dec_free(d);
}

/* q8_0 stores blocks of 32 a head: heads of 8 are refused, naming them. */
static void test_q8_head_dim_refused(void **state)
{
	mu__dec_opts_t o = {1, 4, (uint64_t)1 << 30, 16, 0, 0, MU__KV_Q8_0};
	mu__dec_t *d = NULL;
	char why[256] = "";

	(void)state;
	assert_int_equal(mu__kv_check(MU__KV_Q8_0, &src8.hp, why, sizeof(why)), MU_EARG);
	assert_int_equal(mu__dec_new(&src8, 0, LAYERS, &o, &d, why, sizeof(why)), MU_EARG);
	assert_null(d);
	assert_non_null(strstr(why, "head dim 8 is not a multiple of 32"));
	o.kv_type = MU__KV_F16;
	assert_int_equal(mu__dec_new(&src8, 0, LAYERS, &o, &d, why, sizeof(why)), 0);
	why[0] = '\0';
	assert_int_equal(mu__dec_seq_open_kv(d, 0, 1, 8, MU__KV_Q8_0, why, sizeof(why)), MU_EARG);
	assert_non_null(strstr(why, "head dim 8"));
	assert_int_equal(mu__dec_seqs(d), 0);
	assert_int_equal(mu__dec_seq_open_kv(d, 0, 1, 8, MU__KV_F32, why, sizeof(why)), 0);
	mu__dec_free(d);
	assert_int_equal(mu__kv_check(MU__KV_Q8_0, &src.hp, why, sizeof(why)), 0);
}

static void test_names(void **state)
{
	char why[128], list[64];
	int t = -1;

	(void)state;
	for (int i = 0; i < MU__KV_COUNT; i++) {
		assert_int_equal(mu__kv_by_name(mu__kv_name(i), &t, why, sizeof(why)), 0);
		assert_int_equal(t, i);
	}
	assert_string_equal(mu__kv_list(list, sizeof(list)), "f32, f16 or q8_0");
	assert_int_equal(mu__kv_by_name("F16", &t, why, sizeof(why)), MU_EARG);
	assert_string_equal(why, "a KV cache type is f32, f16 or q8_0, not 'F16'");
	assert_int_equal(t, MU__KV_Q8_0); /* untouched */
	assert_string_equal(mu__kv_name(MU__KV_COUNT), "?");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_prefill_equals_decode),
		cmocka_unit_test(test_isas_agree),
		cmocka_unit_test(test_split_equals_whole),
		cmocka_unit_test(test_types_differ),
		cmocka_unit_test(test_bytes_per_type),
		cmocka_unit_test(test_q8_head_dim_refused),
		cmocka_unit_test(test_names),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
