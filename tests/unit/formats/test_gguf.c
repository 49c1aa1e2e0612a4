/* SPDX-License-Identifier: MIT */
/*
 * The GGUF reader: a file built here byte by byte is read back whole;
 * every truncation, a wrong magic or version, counts and lengths past the
 * buffer or the limits, bad dims, misaligned or out-of-range tensors and
 * duplicate names are refused with the reason; the typed getters check
 * types and ranges.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "muster/common.h"
#include "core/endian_int.h"
#include "formats/gguf_int.h"
#include "kern/kern_int.h"

typedef struct {
	unsigned char b[8192];
	size_t n;
} w_t;

static void u32(w_t *w, uint32_t v)
{
	mu_le32_put(w->b + w->n, v);
	w->n += 4;
}

static void u64(w_t *w, uint64_t v)
{
	mu_le64_put(w->b + w->n, v);
	w->n += 8;
}

static void str(w_t *w, const char *s)
{
	u64(w, strlen(s));
	memcpy(w->b + w->n, s, strlen(s));
	w->n += strlen(s);
}

/* A valid file: 4 keys, 2 tensors (F32 [4] at 0, Q8_0 [32, 2] at 32). */
static void build2(w_t *w, uint32_t version, uint64_t ntensors, const char *name2)
{
	memset(w, 0, sizeof(*w));
	memcpy(w->b, "GGUF", 4);
	w->n = 4;
	u32(w, version);
	u64(w, ntensors);
	u64(w, 4);
	str(w, "general.architecture");
	u32(w, MU__GGUF_STRING);
	str(w, "llama");
	str(w, "llama.block_count");
	u32(w, MU__GGUF_U32);
	u32(w, 22);
	str(w, "tokenizer.ggml.tokens");
	u32(w, MU__GGUF_ARRAY);
	u32(w, MU__GGUF_STRING);
	u64(w, 3);
	str(w, "<s>");
	str(w, "");
	str(w, "\xe2\x96\x81hi");
	str(w, "llama.rope.freq_base");
	u32(w, MU__GGUF_F32);
	{
		float f = 500000.0f;
		uint32_t x;

		memcpy(&x, &f, 4);
		u32(w, x);
	}
	str(w, "a");
	u32(w, 1);
	u64(w, 4);
	u32(w, mu__wtypes[MU__WT_F32].ggml);
	u64(w, 0);
	str(w, name2);
	u32(w, 2);
	u64(w, 32);
	u64(w, 2);
	u32(w, mu__wtypes[MU__WT_Q8_0].ggml);
	u64(w, 32);
	w->n = (w->n + 31) / 32 * 32; /* data area */
	w->n += 32 + 2 * 34;
}

static void build(w_t *w, uint32_t version, uint64_t ntensors)
{
	build2(w, version, ntensors, "blk.0.b");
}

static void test_reads_a_valid_file(void **state)
{
	w_t w;
	mu__gguf_t g;
	const mu__gguf_tensor_t *t;
	const mu__gguf_kv_t *kv;
	const char *s;
	uint64_t len, pos = 0;
	int64_t v;
	double f;

	(void)state;
	build(&w, 3, 2);
	assert_int_equal(mu__gguf_parse(w.b, w.n, &g, NULL, 0), 0);
	assert_int_equal(g.version, 3);
	assert_int_equal(g.nkv, 4);
	assert_int_equal(g.nt, 2);
	assert_int_equal(mu__gguf_get_str(&g, "general.architecture", &s, &len, NULL, 0), 0);
	assert_int_equal(len, 5);
	assert_memory_equal(s, "llama", 5);
	assert_int_equal(mu__gguf_get_int(&g, "llama.block_count", 0, 100, &v, NULL, 0), 0);
	assert_int_equal(v, 22);
	assert_int_equal(mu__gguf_get_int(&g, "llama.block_count", 0, 10, &v, NULL, 0), MU_EPROTO);
	assert_int_equal(mu__gguf_get_int(&g, "nope", 0, 10, &v, NULL, 0), -2 /* -ENOENT */);
	assert_int_equal(mu__gguf_get_int(&g, "general.architecture", 0, 10, &v, NULL, 0), MU_EPROTO);
	assert_int_equal(mu__gguf_get_int(&g, "llama.rope.freq_base", 0, 1 << 30, &v, NULL, 0),
	                 MU_EPROTO);
	assert_int_equal(mu__gguf_get_f64(&g, "llama.rope.freq_base", &f, NULL, 0), 0);
	assert_true(f == 500000.0);
	kv = mu__gguf_find(&g, "tokenizer.ggml.tokens");
	assert_non_null(kv);
	assert_int_equal(kv->arr_n, 3);
	assert_int_equal(mu__gguf_arr_str(kv, &pos, &s, &len), 0);
	assert_int_equal(len, 3);
	assert_int_equal(mu__gguf_arr_str(kv, &pos, &s, &len), 0);
	assert_int_equal(len, 0);
	assert_int_equal(mu__gguf_arr_str(kv, &pos, &s, &len), 0);
	assert_int_equal(len, 5);
	assert_int_equal(mu__gguf_arr_str(kv, &pos, &s, &len), MU_EPROTO);
	t = mu__gguf_tensor(&g, "blk.0.b");
	assert_non_null(t);
	assert_int_equal(t->ne[0], 32);
	assert_int_equal(t->ne[1], 2);
	assert_int_equal(t->bytes, 68);
	assert_ptr_equal(t->data, g.data + 32);
	assert_ptr_equal(mu__gguf_tensor(&g, "a")->data, g.data);
	mu__gguf_free(&g);
}

/* Every proper prefix of the file is refused, never read past. */
static void test_every_truncation_is_refused(void **state)
{
	w_t w;
	mu__gguf_t g;
	size_t cut;

	(void)state;
	build(&w, 3, 2);
	for (cut = 0; cut < w.n; cut++) {
		unsigned char *p = test_malloc(cut + 1);

		memcpy(p, w.b, cut);
		assert_int_not_equal(mu__gguf_parse(p, cut, &g, NULL, 0), 0);
		assert_null(g.kv);
		test_free(p);
	}
}

static void expect(const w_t *w, int rc, const char *word)
{
	mu__gguf_t g;
	char why[512] = "";

	assert_int_equal(mu__gguf_parse(w->b, w->n, &g, why, sizeof(why)), rc);
	if (rc == 0)
		mu__gguf_free(&g);
	if (word != NULL && strstr(why, word) == NULL)
		fail_msg("\"%s\" not in \"%s\"", word, why);
}

static void test_refuses_bad_headers(void **state)
{
	w_t w;

	(void)state;
	build(&w, 3, 2);
	w.b[0] = 'X';
	expect(&w, MU_EBADMAGIC, "magic");
	build(&w, 1, 2);
	expect(&w, MU_EPROTO, "version 1");
	build(&w, 2, 2);
	expect(&w, 0, NULL);
	build(&w, 3, (uint64_t)1 << 40);
	expect(&w, MU_ETOOBIG, "over the limits");
}

/* Patch the u64 at the offset where needle's bytes start plus delta. */
static void patch64(w_t *w, const char *needle, long delta, uint64_t v)
{
	unsigned char *p = memmem(w->b, w->n, needle, strlen(needle));

	assert_non_null(p);
	mu_le64_put(p + delta, v);
}

static void patch32(w_t *w, const char *needle, long delta, uint32_t v)
{
	unsigned char *p = memmem(w->b, w->n, needle, strlen(needle));

	assert_non_null(p);
	mu_le32_put(p + delta, v);
}

static void test_refuses_bad_lengths(void **state)
{
	w_t w;

	(void)state;
	build(&w, 3, 2);
	patch64(&w, "general.architecture", -8, (uint64_t)1 << 63); /* the key's length */
	expect(&w, MU_EPROTO, "key");
	build(&w, 3, 2);
	patch64(&w, "llama\x00", -8, 0xFFFFFFFFFFFFull); /* the string value's length */
	expect(&w, MU_EPROTO, "past the end");
	build(&w, 3, 2);
	patch64(&w, "tokenizer.ggml.tokens", 21 + 8, (uint64_t)1 << 60); /* the array's count */
	expect(&w, MU_EPROTO, "cannot fit");
	build(&w, 3, 2);
	patch32(&w, "llama.block_count", 17, 99); /* an unknown value type */
	expect(&w, MU_EPROTO, "unknown value type 99");
	build(&w, 3, 2);
	patch32(&w, "tokenizer.ggml.tokens", 21 + 4, MU__GGUF_ARRAY); /* arrays of arrays */
	expect(&w, MU_EPROTO, "not supported");
}

static void test_refuses_bad_tensors(void **state)
{
	w_t w;

	(void)state;
	build(&w, 3, 2);
	patch32(&w, "blk.0.b", 7, 5); /* n_dims */
	expect(&w, MU_EPROTO, "n_dims");
	build(&w, 3, 2);
	patch64(&w, "blk.0.b", 7 + 4, 0); /* a zero dim */
	expect(&w, MU_EPROTO, "dimension 0");
	build(&w, 3, 2);
	patch64(&w, "blk.0.b", 7 + 4 + 8, (uint64_t)1 << 39); /* product overflow */
	expect(&w, MU_EPROTO, "run past the end");
	build(&w, 3, 2);
	patch64(&w, "blk.0.b", 7 + 4 + 16 + 4, 8); /* misaligned offset */
	expect(&w, MU_EPROTO, "not aligned");
	build(&w, 3, 2);
	patch64(&w, "blk.0.b", 7 + 4 + 16 + 4, 64); /* past the end */
	expect(&w, MU_EPROTO, "past the end");
	build(&w, 3, 2);
	patch64(&w, "blk.0.b", 7 + 4, 31); /* not whole Q8_0 blocks */
	expect(&w, MU_EPROTO, "whole blocks");
	/* a type muster does not compute is still sized, and named */
	build(&w, 3, 2);
	patch32(&w, "blk.0.b", 7 + 4 + 16, 14); /* Q6_K rows of 32 elements */
	expect(&w, MU_EPROTO, "(Q6_K): its rows of 32 elements do not fill whole blocks of 256");
	build(&w, 3, 2);
	patch32(&w, "blk.0.b", 7 + 4 + 16, 14);
	patch64(&w, "blk.0.b", 7 + 4, 256); /* 2 x 210 bytes, past the end */
	expect(&w, MU_EPROTO, "blk.0.b (Q6_K): its 420 bytes at 32 run past the end of the file "
	                      "(truncated?)");
	build(&w, 3, 2);
	patch32(&w, "blk.0.b", 7 + 4 + 16, 99); /* unsized: the loaders refuse it by number */
	expect(&w, 0, NULL);
	build2(&w, 3, 2, "a");
	expect(&w, MU_EPROTO, "appears twice");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reads_a_valid_file),
		cmocka_unit_test(test_every_truncation_is_refused),
		cmocka_unit_test(test_refuses_bad_headers),
		cmocka_unit_test(test_refuses_bad_lengths),
		cmocka_unit_test(test_refuses_bad_tensors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
