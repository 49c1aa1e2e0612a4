/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/llm/plan.c over tensor directories made up here
 * (names and sizes, no data): the split into n stages is the best by
 * mu__llm_src_bytes, with a head tied to the embedding counted once by a
 * stage that holds both ends; placement counts the KV cache, fits
 * exactly what fits, and fills larger devices more.
 */
#include "mu_test.h"

#include "llm/plan_int.h"

static mu__llm_tensor_t t[64];
static mu__llm_src_t src;

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void add(const char *name, uint64_t bytes)
{
	snprintf(t[src.nt].name, sizeof(t[src.nt].name), "%s", name);
	t[src.nt++].bytes = bytes;
}

/* L layers of random sizes, an embedding, a norm, and a head unless tied. */
static void make(int L, int tied)
{
	char name[64];

	memset(&src, 0, sizeof(src));
	src.t = t;
	src.hp.n_layers = L;
	src.hp.tied = tied;
	src.hp.n_kv_heads = 2;
	src.hp.head_dim = 8;
	add("token_embd.weight", 100 + next() % 400);
	for (int l = 0; l < L; l++)
		for (int k = 0; k < 2; k++) {
			snprintf(name, sizeof(name), "blk.%d.w%d.weight", l, k);
			add(name, next() % 300);
		}
	add("output_norm.weight", next() % 20);
	if (!tied)
		add("output.weight", 100 + next() % 400);
}

static uint64_t max64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/* The smallest largest stage (by mu__llm_src_bytes) of any cut of
 * layers [at, L) into k stages. */
static uint64_t brute(int at, int k)
{
	uint64_t best = UINT64_MAX;

	if (k == 1)
		return mu__llm_src_bytes(&src, at, src.hp.n_layers);
	for (int end = at + 1; end <= src.hp.n_layers - k + 1; end++) {
		uint64_t m = max64(mu__llm_src_bytes(&src, at, end), brute(end, k - 1));

		best = m < best ? m : best;
	}
	return best;
}

static void test_split_vs_brute_force(void **state)
{
	int cut[10];

	(void)state;
	for (int round = 0; round < 400; round++) {
		int L = 1 + (int)(next() % 8), n = 1 + (int)(next() % (uint64_t)L);
		uint64_t got = 0;

		make(L, round % 2);
		assert_int_equal(mu__llm_split(&src, n, cut), 0);
		assert_int_equal(cut[0], 0);
		assert_int_equal(cut[n], L);
		for (int i = 0; i < n; i++) {
			assert_true(cut[i] < cut[i + 1]);
			got = max64(got, mu__llm_src_bytes(&src, cut[i], cut[i + 1]));
		}
		assert_true(got == brute(0, n));
	}
	assert_int_equal(mu__llm_split(&src, 0, cut), MU_EARG);
	assert_int_equal(mu__llm_split(&src, src.hp.n_layers + 1, cut), MU_EARG);
}

/* One device holds it all exactly when its budget is the whole model's
 * weights (a tied head once) and KV cache. */
static void test_plan_exact_fit(void **state)
{
	int order[2], cut[2];
	char err[512];

	(void)state;
	for (int tied = 0; tied <= 1; tied++) {
		uint64_t all;

		make(4, tied);
		all = mu__llm_src_bytes(&src, 0, 4) + mu__llm_kv_bytes(&src, 0, 4, 16, 2, MU__KV_F32);
		assert_true(mu__llm_kv_bytes(&src, 0, 4, 16, 2, MU__KV_F32) == 4 * 2 * 2 * 8 * 4 * 16 * 2);
		assert_int_equal(mu__llm_plan(&src, 16, 2, MU__KV_F32, (uint64_t[]){all}, 1, order, cut, err,
		                              sizeof(err)), 0);
		assert_int_equal(cut[0], 4);
		assert_int_equal(mu__llm_plan(&src, 16, 2, MU__KV_F32, (uint64_t[]){all - 1}, 1, order, cut, err,
		                              sizeof(err)), MU_ETOOBIG);
		assert_non_null(strstr(err, "does not fit the 1 device granted"));
		/* a device with no room for a layer takes nothing */
		assert_int_equal(mu__llm_plan(&src, 16, 2, MU__KV_F32, (uint64_t[]){1, all}, 2, order, cut, err,
		                              sizeof(err)), 0);
		assert_int_equal(order[0], 0);
		assert_int_equal(cut[0], 0);
		assert_int_equal(order[1], 1);
		assert_int_equal(cut[1], 4);
	}
}

/* Equal layers: a device with three times the budget takes three times
 * the layers (where evening out the stages would give each half). */
static void test_plan_shares(void **state)
{
	char name[64], err[512];
	int order[2], cut[2];
	uint64_t layer, budget[2];

	(void)state;
	memset(&src, 0, sizeof(src));
	src.t = t;
	src.hp.n_layers = 8;
	src.hp.n_kv_heads = 1;
	src.hp.head_dim = 4;
	for (int l = 0; l < 8; l++) {
		snprintf(name, sizeof(name), "blk.%d.w.weight", l);
		add(name, 1000);
	}
	layer = 1000 + mu__llm_kv_bytes(&src, 0, 1, 8, 1, MU__KV_F32);
	budget[0] = 12 * layer; /* room for twice as much: each half full */
	budget[1] = 4 * layer;
	assert_int_equal(mu__llm_plan(&src, 8, 1, MU__KV_F32, budget, 2, order, cut, err, sizeof(err)), 0);
	assert_int_equal(order[0], 0);
	assert_int_equal(cut[0], 6);
	assert_int_equal(cut[1], 8);
	budget[0] = 4 * layer;
	budget[1] = 12 * layer;
	assert_int_equal(mu__llm_plan(&src, 8, 1, MU__KV_F32, budget, 2, order, cut, err, sizeof(err)), 0);
	assert_int_equal(order[0], 0); /* the given order first: it ties */
	assert_int_equal(cut[0], 2);
}

/* The KV cache counts in its type's bytes: f16 half of f32, q8_0 34 bytes
 * a block of 32; q8_0 is refused for a head dim not of whole blocks, and
 * a device's fit follows the type's figure. */
static void test_plan_kv_types(void **state)
{
	int order[1], cut[1];
	uint64_t f32, f16, q8, all;
	char err[512];

	(void)state;
	make(4, 0); /* 2 kv heads of 8 */
	f32 = mu__llm_kv_bytes(&src, 0, 4, 16, 2, MU__KV_F32);
	f16 = mu__llm_kv_bytes(&src, 0, 4, 16, 2, MU__KV_F16);
	assert_true(f16 * 2 == f32);
	assert_int_equal(mu__llm_plan(&src, 16, 2, MU__KV_Q8_0, (uint64_t[]){UINT64_MAX / 2}, 1,
	                              order, cut, err, sizeof(err)), MU_EARG);
	assert_non_null(strstr(err, "head dim 8 is not a multiple of 32"));
	/* a budget that fits the f16 cache exactly, not the f32 one */
	all = mu__llm_src_bytes(&src, 0, 4) + f16;
	assert_int_equal(mu__llm_plan(&src, 16, 2, MU__KV_F16, (uint64_t[]){all}, 1, order, cut,
	                              err, sizeof(err)), 0);
	assert_int_equal(cut[0], 4);
	assert_int_equal(mu__llm_plan(&src, 16, 2, MU__KV_F32, (uint64_t[]){all}, 1, order, cut,
	                              err, sizeof(err)), MU_ETOOBIG);
	assert_non_null(strstr(err, "an f32 KV cache"));
	src.hp.head_dim = 32;
	q8 = mu__llm_kv_bytes(&src, 0, 4, 16, 2, MU__KV_Q8_0);
	assert_true(q8 == (uint64_t)4 * 2 * 16 * 2 * (2 * 32 / 32 * 34));
	assert_true(mu__llm_kv_bytes(&src, 0, 4, 16, 2, MU__KV_F16) == (uint64_t)4 * 2 * 16 * 2 * 64 * 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_split_vs_brute_force),
		cmocka_unit_test(test_plan_exact_fit),
		cmocka_unit_test(test_plan_shares),
		cmocka_unit_test(test_plan_kv_types),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
