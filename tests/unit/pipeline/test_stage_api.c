/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/pipeline/llm/stage_api.c: a decoder LLM's stage and
 * its placement through the public calls (muster/pipeline.h), over
 * stories260K (5 layers).
 */
#include "mu_test.h"

#include "muster/llm.h"
#include "muster/pipeline.h"

#define GGUF MU_SOURCE_DIR "/models/stories260K/stories260K.gguf"

static void test_load_a_stage(void **state)
{
	mu_llm_stage_opts_t o;
	mu_stage_t *s = (mu_stage_t *)&o;
	char err[512] = "";
	cJSON *d;

	(void)state;
	mu_llm_stage_opts_init(&o);
	assert_int_equal(o.struct_size, sizeof(o));
	assert_int_equal(o.of, 1);
	assert_int_equal(o.first, -1);
	assert_int_equal(o.max_seqs, 8);
	assert_int_equal(o.kv_bytes, (uint64_t)1 << 30);
	assert_int_equal(o.max_chunk, 256);
	o.threads = 0;
	assert_int_equal(mu_stage_load_llm(GGUF, &o, &s, err, sizeof(err)), MU_EARG);
	assert_null(s);
	o.threads = 1;
	o.index = 5;
	o.of = 2;
	assert_true(mu_stage_load_llm(GGUF, &o, &s, err, sizeof(err)) < 0);
	assert_non_null(strstr(err, "stage 5 of 2"));
	assert_true(mu_stage_load_llm("/nonexistent.gguf", &o, &s, NULL, 0) < 0);
	o.index = 1;
	assert_int_equal(mu_stage_load_llm(GGUF, &o, &s, err, sizeof(err)), 0);
	d = cJSON_Parse(mu_stage_describe(s));
	assert_non_null(d);
	assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(d, "first")) > 0);
	assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(d, "last")), 5);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(d, "head")));
	assert_true(cJSON_IsFalse(cJSON_GetObjectItem(d, "embeds")));
	cJSON_Delete(d);
	mu_stage_free(s);
	/* layers given instead */
	o.first = 0;
	o.last = 2;
	assert_int_equal(mu_stage_load_llm(GGUF, &o, &s, err, sizeof(err)), 0);
	d = cJSON_Parse(mu_stage_describe(s));
	assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(d, "last")), 2);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(d, "embeds")));
	cJSON_Delete(d);
	mu_stage_free(s);
}

static void test_plan(void **state)
{
	mu_llm_plan_opts_t o;
	mu_llm_plan_stage_t st;
	mu_llm_plan_t *p;
	uint64_t tiny[] = {1024}, roomy[] = {1 << 20, (uint64_t)1 << 30};
	char err[512] = "";
	int i, prev = 0;

	(void)state;
	mu_llm_plan_opts_init(&o);
	assert_int_equal(o.stages, 1);
	assert_int_equal(o.ctx, 2048);
	o.stages = 3;
	assert_int_equal(mu_llm_plan(GGUF, &o, &p, err, sizeof(err)), 0);
	assert_string_equal(mu_llm_plan_arch(p), "llama");
	assert_int_equal(mu_llm_plan_layers(p), 5);
	assert_int_equal(mu_llm_plan_stages(p), 3);
	for (i = 0; i < 3; i++) {
		mu_llm_plan_stage(p, i, &st);
		assert_int_equal(st.first, prev);
		assert_true(st.last > st.first && st.weight_bytes > 0 && st.kv_bytes > 0);
		assert_int_equal(st.device, -1);
		assert_int_equal(st.embeds, i == 0);
		assert_int_equal(st.head, i == 2);
		prev = st.last;
	}
	assert_int_equal(prev, 5);
	mu_llm_plan_free(p);
	o.stages = 40;
	assert_true(mu_llm_plan(GGUF, &o, &p, err, sizeof(err)) < 0);
	assert_null(p);
	assert_string_equal(err, "40 stages of a model of 5 layers");
	/* budgets: what does not fit says so; a roomy device takes it all */
	o.budgets = tiny;
	o.nbudgets = 1;
	assert_int_equal(mu_llm_plan(GGUF, &o, &p, err, sizeof(err)), MU_ETOOBIG);
	assert_non_null(strstr(err, "does not fit"));
	o.budgets = roomy;
	o.nbudgets = 2;
	o.ctx = 64;
	assert_int_equal(mu_llm_plan(GGUF, &o, &p, err, sizeof(err)), 0);
	assert_true(mu_llm_plan_stages(p) >= 1);
	mu_llm_plan_stage(p, mu_llm_plan_stages(p) - 1, &st);
	assert_true(st.device == 0 || st.device == 1);
	assert_int_equal(st.last, 5);
	assert_true(st.head);
	mu_llm_plan_free(p);
	o.nbudgets = 65;
	assert_int_equal(mu_llm_plan(GGUF, &o, &p, err, sizeof(err)), MU_EARG);
	mu_llm_plan_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_load_a_stage),
		cmocka_unit_test(test_plan),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
