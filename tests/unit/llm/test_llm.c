/* SPDX-License-Identifier: MIT */
/*
 * The decoder over a small random llama2.c checkpoint written here:
 * a split of the layers equals the whole bit for bit, so do chunked and
 * one-at-a-time prefills and sequences batched in one call; sequence
 * limits and owners hold; the layer split balances bytes.
 *
 * The wire form and the digest are the same bytes as the last version's
 * (the tables they walk: test_arch.c). Tensor hashes are kept beside the
 * checkpoint per range; the weights digest is one of names and hashes,
 * in name order.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>
#include <cmocka.h>

#include "muster/common.h"
#include "llm/arch_int.h"
#include "llm/llm_int.h"
#include "llm_fixture.h"

enum { DIM = 32, HID = 48, LAYERS = 4, HEADS = 4, KVH = 2, VOCAB = 40, SEQ = 64 };

static char path[64];
static mu__llm_src_t src;

static void write_model(void)
{
	llm_fixture_shape_t s = {DIM, HID, LAYERS, HEADS, KVH, VOCAB, SEQ};

	assert_int_equal(llm_fixture_write(path, sizeof(path), "/tmp/mu_test_llm_XXXXXX", &s, 42),
			 0);
}

static int setup(void **state)
{
	(void)state;
	write_model();
	return mu__llm_src_open(path, NULL, &src, NULL, 0);
}

static int teardown(void **state)
{
	(void)state;
	mu__llm_src_free(&src);
	unlink(path);
	return 0;
}

static mu__dec_t *dec(int first, int last, int threads)
{
	mu__dec_opts_t o = {threads, 4, (uint64_t)1 << 30, 16, 0, 0, MU__KV_F32};
	mu__dec_t *d = NULL;

	assert_int_equal(mu__dec_new(&src, first, last, &o, &d, NULL, 0), 0);
	return d;
}

static const int32_t toks[12] = {1, 7, 3, 39, 0, 12, 12, 5, 30, 2, 8, 19};

/* Logits of every position, fed `chunk` positions at a time. */
static void run_whole(int chunk, int threads, float *logits)
{
	mu__dec_t *d = dec(0, LAYERS, threads);
	int32_t pos;

	assert_int_equal(mu__dec_seq_open(d, 0, 1, 32, NULL, 0), 0);
	for (pos = 0; pos < 12; pos += chunk) {
		int32_t n = 12 - pos < chunk ? 12 - pos : chunk;

		assert_int_equal(mu__dec_forward(d, 0, 1, pos, n, toks + pos, NULL,
		                                 logits + (size_t)pos * VOCAB, 1, NULL, 0), 0);
	}
	mu__dec_free(d);
}

static void test_chunks_and_threads_agree(void **state)
{
	float a[12 * VOCAB], b[12 * VOCAB], c[12 * VOCAB];

	(void)state;
	run_whole(12, 1, a);
	run_whole(1, 1, b);
	run_whole(5, 3, c);
	assert_memory_equal(a, b, sizeof(a));
	assert_memory_equal(a, c, sizeof(a));
}

static void test_split_equals_whole(void **state)
{
	float want[12 * VOCAB], x[12 * DIM], y[12 * DIM], got[12 * VOCAB];
	mu__dec_t *s0 = dec(0, 1, 1), *s1 = dec(1, 3, 2), *s2 = dec(3, LAYERS, 1);

	(void)state;
	run_whole(12, 1, want);
	assert_int_equal(mu__dec_seq_open(s0, 9, 5, 32, NULL, 0), 0);
	assert_int_equal(mu__dec_seq_open(s1, 9, 5, 32, NULL, 0), 0);
	assert_int_equal(mu__dec_seq_open(s2, 9, 5, 32, NULL, 0), 0);
	assert_int_equal(mu__dec_forward(s0, 9, 5, 0, 12, toks, NULL, x, 0, NULL, 0), 0);
	assert_int_equal(mu__dec_forward(s1, 9, 5, 0, 12, NULL, x, y, 0, NULL, 0), 0);
	assert_int_equal(mu__dec_forward(s2, 9, 5, 0, 12, NULL, y, got, 1, NULL, 0), 0);
	assert_memory_equal(want, got, sizeof(want));
	mu__dec_free(s0);
	mu__dec_free(s1);
	mu__dec_free(s2);
}

/* Two sequences batched in one call give each its own bits. */
static void test_batch_equals_alone(void **state)
{
	float want[12 * VOCAB], got[2 * VOCAB], first[VOCAB * 7];
	mu__dec_t *d = dec(0, LAYERS, 2);
	mu__dec_item_t it[2] = {{1, 7, 1, 0}, {2, 0, 6, 0}};
	int32_t t2[7];

	(void)state;
	run_whole(12, 1, want);
	assert_int_equal(mu__dec_seq_open(d, 0, 1, 32, NULL, 0), 0);
	assert_int_equal(mu__dec_seq_open(d, 0, 2, 32, NULL, 0), 0);
	/* seq 1 has 7 positions; then one call: seq 1's 8th, seq 2's first 6 */
	assert_int_equal(mu__dec_forward(d, 0, 1, 0, 7, toks, NULL, first, 1, NULL, 0), 0);
	t2[0] = toks[7];
	memcpy(t2 + 1, toks, 6 * sizeof(int32_t));
	assert_int_equal(mu__dec_forward_batch(d, 0, it, 2, t2, NULL, got, NULL, 0), 0);
	assert_memory_equal(got, want + 7 * VOCAB, VOCAB * sizeof(float));
	assert_memory_equal(got + VOCAB, want + 5 * VOCAB, VOCAB * sizeof(float));
	mu__dec_free(d);
}

static void test_sequence_limits(void **state)
{
	mu__dec_opts_t o = {1, 2, 0, 16, 0, 0, MU__KV_F32};
	mu__dec_t *d = NULL;
	float out[VOCAB];
	char why[256];
	int32_t t = 1;

	(void)state;
	/* KV per sequence of 10 positions: 4 layers x 2 x 10 x 16 x 4 bytes */
	o.kv_bytes = 2 * 4 * 2 * 10 * 16 * 4;
	assert_int_equal(mu__dec_new(&src, 0, LAYERS, &o, &d, NULL, 0), 0);
	assert_int_equal(mu__dec_kv_per_seq(d, 10), 4 * 2 * 10 * 16 * 4);
	assert_int_equal(mu__dec_seq_open(d, 1, 1, 10, why, sizeof(why)), 0);
	assert_int_equal(mu__dec_seq_open(d, 1, 1, 10, why, sizeof(why)), -17 /* EEXIST */);
	assert_int_equal(mu__dec_seq_open(d, 1, 2, 11, why, sizeof(why)), MU_ETOOBIG);
	assert_non_null(strstr(why, "--kv-mem"));
	assert_int_equal(mu__dec_seq_open(d, 2, 1, 10, why, sizeof(why)), 0); /* another owner */
	assert_int_equal(mu__dec_seq_open(d, 3, 1, 1, why, sizeof(why)), MU_ETOOBIG);
	assert_non_null(strstr(why, "--max-sequences"));
	assert_int_equal(mu__dec_seq_open(d, 3, 1, SEQ + 1, why, sizeof(why)), MU_ETOOBIG);
	assert_int_equal(mu__dec_forward(d, 2, 7, 0, 1, &t, NULL, out, 0, why, sizeof(why)), -2);
	assert_int_equal(mu__dec_forward(d, 1, 1, 1, 1, &t, NULL, out, 0, why, sizeof(why)), MU_EARG);
	t = VOCAB;
	assert_int_equal(mu__dec_forward(d, 1, 1, 0, 1, &t, NULL, out, 0, why, sizeof(why)), MU_EARG);
	assert_int_equal(mu__dec_seq_close_owner(d, 1), 1);
	assert_int_equal(mu__dec_seqs(d), 1);
	assert_int_equal(mu__dec_seq_close(d, 2, 1), 0);
	assert_int_equal(mu__dec_kv_reserved(d), 0);
	mu__dec_free(d);
}

static void test_split_balances_bytes(void **state)
{
	int cut[5];

	(void)state;
	assert_int_equal(mu__llm_split(&src, 4, cut), 0);
	assert_int_equal(cut[0], 0);
	assert_int_equal(cut[4], LAYERS);
	for (int i = 0; i < 4; i++)
		assert_int_equal(cut[i + 1] - cut[i], 1);
	assert_int_equal(mu__llm_split(&src, 2, cut), 0);
	assert_true(cut[1] >= 1 && cut[1] <= 3);
	assert_int_equal(mu__llm_split(&src, 5, cut), MU_EARG);
}

/* ---- the wire form and the digest: the same bytes as the last version ---- */

static void test_wire_and_digest_unchanged(void **state)
{
	static const char json[] =
		"{\"arch\":\"llama\",\"dim\":32,\"hidden\":48,\"layers\":4,\"heads\":4,\"kv_heads\":2,"
		"\"head_dim\":8,\"vocab\":40,\"ctx\":64,\"window\":0,\"eps\":9.99999974737875e-06,"
		"\"theta\":10000,\"rope\":0,\"scaling\":0,\"sc_factor\":0,\"sc_low\":0,\"sc_high\":0,"
		"\"sc_orig\":0,\"tied\":false}";
	static const struct { const char *file; uint64_t digest; } pinned[] = {
		{MU_SOURCE_DIR "/models/stories260K/stories260K.gguf", 0x3ffc1d32c12b6972ull},
		{MU_SOURCE_DIR "/models/stories260K/stories260K.bin", 0xe2acc8a9e6f7329eull},
	};
	cJSON *o = cJSON_CreateObject();
	mu__llm_hp_t back, want = src.hp;
	mu__llm_src_t s;
	char *text;

	(void)state;
	assert_int_equal(mu__llm_hp_to_json(&src.hp, o), 0);
	text = cJSON_PrintUnformatted(o);
	assert_string_equal(text, json);
	cJSON_free(text);
	assert_int_equal(mu__llm_hp_from_json(o, &back, NULL, 0), 0);
	want.bos = want.eos = -1; /* the tokenizer's, not the wire's */
	assert_memory_equal(&back, &want, sizeof(want));
	cJSON_Delete(o);
	assert_true(mu__llm_digest(&src) == 0x49664d48f7d6a147ull);
	for (size_t i = 0; i < sizeof(pinned) / sizeof(pinned[0]); i++) {
		assert_int_equal(mu__llm_src_open(pinned[i].file, NULL, &s, NULL, 0), 0);
		assert_true(mu__llm_digest(&s) == pinned[i].digest);
		mu__llm_src_free(&s);
	}
}

/* ---- tensor hashes and the weights digest ---- */

static void test_hashes_and_weights_digest(void **state)
{
	char (*hex)[65] = calloc(src.nt, sizeof(*hex)), (*rev)[65] = calloc(src.nt, sizeof(*rev));
	char cache[96], whole[65], again[65], part[65];
	mu__llm_src_t r = src;
	int computed;

	(void)state;
	snprintf(cache, sizeof(cache), "%s.muster-sha256.json", path);
	unlink(cache);
	/* a stage hashes its own tensors only, and keeps them */
	assert_int_equal(mu__llm_src_hashes(&src, 1, 2, hex, &computed, NULL, 0), 0);
	assert_true(computed);
	for (size_t i = 0; i < src.nt; i++)
		assert_int_equal(strlen(hex[i]), mu__llm_tensor_in(&src, i, 1, 2) ? 64 : 0);
	assert_int_equal(mu__llm_weights_digest(&src, (const char (*)[65])hex, 1, 2, part), 0);
	assert_int_equal(strlen(part), 64);
	assert_int_equal(mu__llm_weights_digest(&src, (const char (*)[65])hex, 0, LAYERS, whole),
	                 MU_EARG); /* not every tensor was hashed */
	assert_int_equal(mu__llm_src_hashes(&src, 1, 2, hex, &computed, NULL, 0), 0);
	assert_false(computed);
	/* all of them: the cache had some, the rest are computed, then kept */
	assert_int_equal(mu__llm_src_hashes(&src, -1, -1, hex, &computed, NULL, 0), 0);
	assert_true(computed);
	assert_int_equal(mu__llm_src_hashes(&src, -1, -1, hex, &computed, NULL, 0), 0);
	assert_false(computed);
	assert_int_equal(mu__llm_weights_digest(&src, (const char (*)[65])hex, 1, 2, again), 0);
	assert_string_equal(again, part);
	assert_int_equal(mu__llm_weights_digest(&src, (const char (*)[65])hex, 0, LAYERS, whole), 0);
	assert_string_not_equal(whole, part);
	/* by name: the tensors' order in the file does not count */
	r.t = calloc(src.nt, sizeof(*r.t));
	for (size_t i = 0; i < src.nt; i++) {
		r.t[i] = src.t[src.nt - 1 - i];
		memcpy(rev[i], hex[src.nt - 1 - i], 65);
	}
	assert_int_equal(mu__llm_weights_digest(&r, (const char (*)[65])rev, 0, LAYERS, again), 0);
	assert_string_equal(again, whole);
	/* one tensor's bytes: another digest */
	rev[0][0] = rev[0][0] == '0' ? '1' : '0';
	assert_int_equal(mu__llm_weights_digest(&r, (const char (*)[65])rev, 0, LAYERS, again), 0);
	assert_string_not_equal(again, whole);
	free(r.t);
	free(hex);
	free(rev);
	unlink(cache);
}

/* A field added later (MU__HPF_WIRE_NEW) is left out at its default, so
 * the JSON and the digest stay those of a peer that does not know it. */
static void test_new_wire_field(void **state)
{
	mu__hpf_t f = *mu__hpf_at(8);
	mu__llm_hp_t h = src.hp;
	char why[128];
	cJSON *o = cJSON_CreateObject();

	(void)state;
	assert_string_equal(f.name, "window");
	assert_int_equal(mu__hpf_from_json(&f, o, &h, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "config.window"));
	f.flags |= MU__HPF_WIRE_NEW;
	h.window = 0;
	assert_false(mu__hpf_travels(&f, &h));
	mu__hpf_to_json(&f, &h, o);
	assert_null(cJSON_GetObjectItemCaseSensitive(o, "window"));
	h.window = 7;
	assert_int_equal(mu__hpf_from_json(&f, o, &h, why, sizeof(why)), 0);
	assert_int_equal(h.window, 0);
	h.window = 5;
	assert_true(mu__hpf_travels(&f, &h));
	mu__hpf_to_json(&f, &h, o);
	h.window = 0;
	assert_int_equal(mu__hpf_from_json(&f, o, &h, why, sizeof(why)), 0);
	assert_int_equal(h.window, 5);
	cJSON_Delete(o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_chunks_and_threads_agree),
		cmocka_unit_test(test_split_equals_whole),
		cmocka_unit_test(test_batch_equals_alone),
		cmocka_unit_test(test_sequence_limits),
		cmocka_unit_test(test_split_balances_bytes),
		cmocka_unit_test(test_wire_and_digest_unchanged),
		cmocka_unit_test(test_new_wire_field),
		cmocka_unit_test(test_hashes_and_weights_digest),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
