/* SPDX-License-Identifier: MIT */
/*
 * The per-tensor rules of a quantization (formats/quant_rules.c), on the
 * tensors of an 8-layer llama walked in llama.cpp's order: which keep
 * their type, which get more bits by layer, the tied embeddings, the
 * fallbacks of rows that are not whole blocks, the refused file types.
 * tests/interop/test_quantize.py checks whole models against
 * llama_model_quantize itself.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mu_test.h"
#include "formats/quant_rules_int.h"
#include "kern/quant_int.h"

#define NL 8

static const uint64_t MAT[4] = {256, 256, 1, 1}, VEC[4] = {256, 1, 1, 1};

static void plan_init(mu__qplan_t *p, int tied)
{
	const char *names[] = {"output.weight", "blk.0.attn_v.weight"};

	memset(p, 0, sizeof(*p));
	p->n_layer = NL;
	p->n_gqa = 4;
	mu__quant_plan_names(p, tied ? names + 1 : names, tied ? 1 : 2);
	p->n_attn_v = NL; /* one per layer */
}

static int64_t pick(mu__qplan_t *p, const char *ft, const char *name, const uint64_t ne[4])
{
	char why[128];

	return mu__quant_pick(p, mu__qftype(ft), name, ne, MU__GGML_F32, why, sizeof(why));
}

/* Q4_K_M: attn_v and ffn_down are Q6_K where use_more_bits (layers 0, 3,
 * 6, 7 of 8), Q4_K elsewhere; norms stay F32; output Q6_K. */
static void test_q4_k_m_by_layer(void **state)
{
	mu__qplan_t p;
	char n[64];

	(void)state;
	plan_init(&p, 0);
	for (int l = 0; l < NL; l++) {
		uint32_t more = l == 0 || l == 3 || l == 6 || l == 7 ? MU__GGML_Q6_K : MU__GGML_Q4_K;

		snprintf(n, sizeof(n), "blk.%d.attn_norm.weight", l);
		assert_int_equal(pick(&p, "Q4_K_M", n, VEC), MU__GGML_F32);
		snprintf(n, sizeof(n), "blk.%d.attn_q.weight", l);
		assert_int_equal(pick(&p, "Q4_K_M", n, MAT), MU__GGML_Q4_K);
		snprintf(n, sizeof(n), "blk.%d.attn_v.weight", l);
		assert_int_equal(pick(&p, "Q4_K_M", n, MAT), more);
		snprintf(n, sizeof(n), "blk.%d.ffn_down.weight", l);
		assert_int_equal(pick(&p, "Q4_K_M", n, MAT), more);
		snprintf(n, sizeof(n), "blk.%d.ffn_norm.weight", l);
		assert_int_equal(pick(&p, "Q4_K_M", n, MAT), MU__GGML_F32); /* *_norm.weight */
	}
	assert_int_equal(pick(&p, "Q4_K_M", "output.weight", MAT), MU__GGML_Q6_K);
	assert_int_equal(pick(&p, "Q4_K_M", "token_embd.weight", MAT), MU__GGML_Q4_K);
	assert_int_equal(pick(&p, "Q4_K_M", "output_norm.weight", VEC), MU__GGML_F32);
}

static void test_tied_embeddings_and_float_types(void **state)
{
	mu__qplan_t p;

	(void)state;
	plan_init(&p, 1);
	assert_int_equal(p.tied, 1);
	assert_int_equal(pick(&p, "Q4_0", "token_embd.weight", MAT), MU__GGML_Q6_K);
	assert_int_equal(pick(&p, "Q8_0", "token_embd.weight", MAT), MU__GGML_Q8_0);
	assert_int_equal(pick(&p, "F16", "token_embd.weight", MAT), MU__GGML_F16);
	assert_int_equal(pick(&p, "BF16", "blk.0.attn_norm.weight", VEC), MU__GGML_F32);
	assert_int_equal(pick(&p, "F16", "blk.0.attn_v.weight", MAT), MU__GGML_F16);
}

/* Rows of 288 (32s, not 256s) and of 100 (not even 32s). */
static void test_fallbacks(void **state)
{
	static const uint64_t R288[4] = {288, 64, 1, 1}, R100[4] = {100, 64, 1, 1};
	mu__qplan_t p;

	(void)state;
	plan_init(&p, 0);
	assert_int_equal(pick(&p, "Q4_K_S", "blk.0.attn_q.weight", R288), MU__GGML_Q5_0);
	assert_int_equal(pick(&p, "Q5_K_S", "blk.0.attn_q.weight", R288), MU__GGML_Q5_1);
	assert_int_equal(pick(&p, "Q6_K", "blk.0.attn_q.weight", R288), MU__GGML_Q8_0);
	assert_int_equal(pick(&p, "Q2_K", "blk.0.attn_q.weight", R288), MU__GGML_Q4_0);
	assert_int_equal(pick(&p, "IQ4_XS", "blk.0.attn_q.weight", R288), MU__GGML_IQ4_NL);
	assert_int_equal(pick(&p, "Q4_K_M", "blk.0.attn_q.weight", R100), MU__GGML_F16);
	assert_int_equal(pick(&p, "Q4_0", "blk.0.attn_q.weight", R100), MU__GGML_F16);
	assert_int_equal(pick(&p, "Q4_K_M", "output.weight", R288), MU__GGML_Q8_0);
	assert_int_equal(p.fallbacks, 7);
}

static void test_file_types(void **state)
{
	(void)state;
	assert_non_null(strstr(mu__qftype_list(), "Q4_K_M"));
	assert_null(strstr(mu__qftype_list(), "IQ2"));
	assert_null(mu__qftype("q4_k_m"));
	assert_non_null(strstr(mu__qftype("IQ2_XS")->why, "importance matrix"));
	assert_null(mu__qftype("Q3_K_L")->why);
	assert_int_equal(mu__qftype("Q4_K_M")->ftype, 15);
}

static void test_order(void **state)
{
	const char *n[] = {"blk.10.a.weight", "output.weight", "blk.2.b.weight", "blk.2.a.weight",
	                   "token_embd.weight"};

	(void)state;
	qsort(n, 5, sizeof(n[0]), mu__quant_order);
	assert_string_equal(n[0], "output.weight");
	assert_string_equal(n[1], "token_embd.weight");
	assert_string_equal(n[2], "blk.2.a.weight");
	assert_string_equal(n[3], "blk.2.b.weight");
	assert_string_equal(n[4], "blk.10.a.weight");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_q4_k_m_by_layer),
		cmocka_unit_test(test_tied_embeddings_and_float_types),
		cmocka_unit_test(test_fallbacks),
		cmocka_unit_test(test_file_types),
		cmocka_unit_test(test_order),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
