/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/tok/tok.c, tok/vocab.c, tok/dec.c (and tok/bpe.c,
 * tok/text.c under them): stories260K's llama2.c tokenizer against run.c's
 * encoder as written there (a slow copy below), the same vocabulary as
 * GGUF arrays, GGUF "gpt2" arrays against the equivalent tokenizer.json,
 * streaming decode, invalid UTF-8, threads, bad files.
 */
#include <pthread.h>

#include "mu_test.h"

#include "core/json_int.h"
#include "tok_fix.h"

#define BOS MU__TOK_BOS
#define SPECIAL MU__TOK_SPECIAL
#define TOK512 MU_SOURCE_DIR "/models/stories260K/tok512.bin"

/* A seeded generator, so a failing text can be found again. */
typedef struct {
	uint64_t s;
} rng_t;

static void rng_seed(rng_t *r, uint64_t seed)
{
	r->s = seed * 0x9e3779b97f4a7c15ULL + 1;
}

static uint64_t rng_next(rng_t *r)
{
	r->s ^= r->s << 13;
	r->s ^= r->s >> 7;
	r->s ^= r->s << 17;
	return r->s;
}

static char *tok_bin;
static size_t tok_len;

/* tok512.bin as pieces and scores, read here independently. */
static char *pieces[512];
static size_t plens[512];
static float scores[512];

static int setup(void **state)
{
	FILE *f = fopen(TOK512, "rb");
	size_t o = 4;

	(void)state;
	if (f == NULL)
		return -1;
	tok_bin = malloc(1 << 16);
	tok_len = fread(tok_bin, 1, 1 << 16, f);
	fclose(f);
	for (int i = 0; i < 512; i++) {
		int32_t n;

		memcpy(&scores[i], tok_bin + o, 4);
		memcpy(&n, tok_bin + o + 4, 4);
		o += 8;
		pieces[i] = tok_bin + o;
		plens[i] = (size_t)n;
		o += (size_t)n;
	}
	return o <= tok_len ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	free(tok_bin);
	return 0;
}

static int find_piece(const char *s, size_t len)
{
	for (int i = 0; i < 512; i++)
		if (plens[i] == len && memcmp(pieces[i], s, len) == 0)
			return i;
	return -1;
}

/* karpathy's run.c encode() with BOS, step by step as it is written there:
 * dummy " ", characters or their bytes (id + 3), then merge the best-
 * scoring adjacent pair (the first on ties) until none merges. */
static size_t runc_encode(const char *text, int32_t *out)
{
	size_t n = 0, len = strlen(text);
	char buf[64];

	out[n++] = 1;
	if (len > 0)
		out[n++] = find_piece(" ", 1);
	for (size_t i = 0; i < len;) {
		size_t j = i + 1;
		int id;

		while (j < len && ((unsigned char)text[j] & 0xC0) == 0x80 && j - i < 4)
			j++;
		id = find_piece(text + i, j - i);
		if (id >= 0)
			out[n++] = id;
		else
			for (size_t k = i; k < j; k++)
				out[n++] = (unsigned char)text[k] + 3;
		i = j;
	}
	for (;;) {
		float best = -1e10f;
		int best_id = -1;
		size_t at = 0;

		for (size_t i = 0; i + 1 < n; i++) {
			size_t a = plens[out[i]], b = plens[out[i + 1]];
			int id;

			memcpy(buf, pieces[out[i]], a);
			memcpy(buf + a, pieces[out[i + 1]], b);
			id = find_piece(buf, a + b);
			if (id >= 0 && scores[id] > best) {
				best = scores[id];
				best_id = id;
				at = i;
			}
		}
		if (best_id < 0)
			break;
		out[at] = best_id;
		memmove(out + at + 1, out + at + 2, (n - at - 2) * sizeof(*out));
		n--;
	}
	return n;
}

/* Random text from pieces that exercise merges, spaces, UTF-8. */
static void random_text(rng_t *r, char *out, size_t cap)
{
	static const char *const parts[] = {
		"a", "b", "e", "t", "h", "o", "n", " ", "  ", "\n", "\t", "Once", " upon", " time",
		"!", ",", "1", "7", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "the", "ly", "'s"};
	size_t n = 1 + rng_next(r) % 30, len = 0;

	out[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		const char *p = parts[rng_next(r) % (sizeof(parts) / sizeof(parts[0]))];

		if (len + strlen(p) + 1 > cap)
			break;
		memcpy(out + len, p, strlen(p) + 1);
		len += strlen(p);
	}
}

static mu__tok_t *llama2c(void)
{
	mu__tok_t *t = NULL;
	char why[200] = "";

	assert_int_equal(mu__tok_from_llama2c(tok_bin, tok_len, 512, &t, why, sizeof(why)), 0);
	return t;
}

static void test_llama2c_matches_runc(void **state)
{
	mu__tok_t *t = llama2c();
	rng_t r;
	char text[512];
	int32_t want[1200];

	(void)state;
	rng_seed(&r, 42);
	for (int k = 0; k < 400; k++) {
		random_text(&r, text, sizeof(text));
		fix_expect(t, text, strlen(text), BOS, want, runc_encode(text, want));
		fix_roundtrip(t, text, strlen(text), BOS);
	}
	FIX_IDS(t, "", BOS, 1);
	FIX_IDS(t, "", 0);
	/* special tokens' text is ordinary text to run.c */
	fix_expect(t, "<s>", 3, BOS | SPECIAL, want, runc_encode("<s>", want));
	mu__tok_free(t);
}

static void test_llama2c_decode(void **state)
{
	mu__tok_t *t = llama2c();
	int32_t once[] = {1, 0}, no_bos[] = {0};
	size_t n;
	const char *p;
	char *s;

	(void)state;
	once[1] = no_bos[0] = find_piece(" Once", 5);
	assert_true(once[1] > 0);
	s = fix_decode(t, once, 2, 0); /* the space right after BOS goes */
	assert_string_equal(s, "Once");
	mu__free(s);
	s = fix_decode(t, no_bos, 1, 0); /* only there */
	assert_string_equal(s, " Once");
	mu__free(s);
	assert_int_equal(mu__tok_vocab_size(t), 512);
	assert_int_equal(mu__tok_bos(t), 1);
	assert_int_equal(mu__tok_eos(t, &n)[0], 2);
	assert_int_equal(n, 1);
	p = mu__tok_piece(t, once[1], &n);
	assert_int_equal(n, 5);
	assert_memory_equal(p, " Once", 5);
	assert_null(mu__tok_piece(t, 512, &n));
	assert_null(mu__tok_piece(t, -1, &n));
	assert_null(mu__tok_chat_template(t));
	assert_int_equal(mu__tok_add_eos(t, (const int32_t[]){2, 5}, 2), 0);
	assert_int_equal(mu__tok_eos(t, &n)[1], 5);
	assert_int_equal(n, 2);
	assert_int_equal(mu__tok_add_eos(t, (const int32_t[]){512}, 1), MU_EARG);
	mu__tok_free(t);
}

/* tok512 as a GGUF holds it: U+2581 for spaces, types, "<s>". */
static mu__tok_t *gguf_llama(void)
{
	static char buf[512][64];
	static const char *tokens[512];
	static size_t lens[512];
	static int32_t types[512];
	mu__tok_vocab_t v;
	mu__tok_t *t = NULL;
	char why[200] = "";

	for (int i = 0; i < 512; i++) {
		size_t n = 0;

		for (size_t k = 0; k < plens[i]; k++) {
			if (pieces[i][k] == ' ') {
				memcpy(buf[i] + n, "\xe2\x96\x81", 3);
				n += 3;
			} else {
				buf[i][n++] = pieces[i][k];
			}
		}
		if (i == 1 || i == 2)
			n = (size_t)snprintf(buf[i], 64, i == 1 ? "<s>" : "</s>");
		buf[i][n] = '\0';
		tokens[i] = buf[i];
		lens[i] = n;
		types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
	}
	memset(&v, 0, sizeof(v));
	v.model = "llama";
	v.n = 512;
	v.tokens = tokens;
	v.token_lens = lens;
	v.scores = scores;
	v.types = types;
	v.bos = 1;
	v.eos = 2;
	v.unk = 0;
	v.pad = -1;
	v.add_bos = -1;
	v.add_eos = -1;
	v.chat_template = "{{ messages }}";
	assert_int_equal(mu__tok_from_vocab(&v, &t, why, sizeof(why)), 0);
	return t;
}

/* The GGUF form of the same vocabulary tokenizes text the same way. */
static void test_gguf_llama(void **state)
{
	mu__tok_t *a = llama2c(), *b = gguf_llama();
	rng_t r;
	char text[512];
	int32_t want[1200];

	(void)state;
	rng_seed(&r, 7);
	for (int k = 0; k < 200; k++) {
		random_text(&r, text, sizeof(text));
		fix_expect(b, text, strlen(text), BOS, want, runc_encode(text, want));
		fix_roundtrip(b, text, strlen(text), BOS);
		fix_roundtrip(b, text, strlen(text), 0);
	}
	/* control tokens are matched only when asked, each section prefixed */
	FIX_IDS(b, "<s>", BOS | SPECIAL, 1, 1);
	assert_int_equal(find_piece(" a", 2) > 0, 1);
	FIX_IDS(b, "a</s>a", SPECIAL, find_piece(" a", 2), 2, find_piece(" a", 2));
	assert_string_equal(mu__tok_chat_template(b), "{{ messages }}");
	mu__tok_free(a);
	mu__tok_free(b);
}

/* GGUF "gpt2" arrays and the tokenizer.json they come from agree. */
static void test_gguf_gpt2(void **state)
{
	static const char *const m[] = {"t|h", "th|e", " |t", " |the", "a|n", "an|d", " |a"};
	static const char *const mg[] = {"t h", "th e", "\xc4\xa0 t", "\xc4\xa0 the", "a n",
	                                 "an d", "\xc4\xa0 a"};
	static const char *const tail[] = {"th", "the", "\xc4\xa0t", "\xc4\xa0the", "an", "and",
	                                   "\xc4\xa0" "a", "<|e|>"};
	const char *tokens[256 + 8];
	char alpha[256][4];
	int32_t types[256 + 8];
	mu__tok_vocab_t v;
	mu__tok_t *g = NULL, *h;
	char *json, why[200] = "";
	rng_t r;
	char text[512];

	(void)state;
	for (int i = 0; i < 256; i++) {
		alpha[i][mu__tok_utf8_put(mu__tok_byte_cp((unsigned)i), alpha[i])] = '\0';
		tokens[i] = alpha[i];
		types[i] = 1;
	}
	for (int i = 0; i < 8; i++) {
		tokens[256 + i] = tail[i];
		types[256 + i] = i == 7 ? 3 : 1;
	}
	memset(&v, 0, sizeof(v));
	v.model = "gpt2";
	v.pre = "gpt-2";
	v.n = 264;
	v.tokens = tokens;
	v.types = types;
	v.nmerges = 7;
	v.merges = mg;
	v.bos = v.eos = 263;
	v.unk = v.pad = -1;
	v.add_bos = v.add_eos = -1;
	if (mu__tok_from_vocab(&v, &g, why, sizeof(why)) != 0)
		fprintf(stderr, "%s\n", why);
	assert_non_null(g);
	json = fix_bytelevel(m, 7, NULL, "{\"type\":\"ByteLevel\",\"add_prefix_space\":false}",
	                     "[{\"id\":263,\"content\":\"<|e|>\",\"special\":true}]", NULL, NULL);
	assert_int_equal(mu__tok_from_hf(json, strlen(json), NULL, 0, &h, why, sizeof(why)), 0);
	mu__free(json);
	rng_seed(&r, 3);
	for (int k = 0; k < 200; k++) {
		int32_t *a, *b;
		size_t na, nb;

		random_text(&r, text, sizeof(text));
		if (k % 3 == 0)
			strncat(text, "<|e|> the and", sizeof(text) - strlen(text) - 1);
		assert_int_equal(mu__tok_encode(g, text, strlen(text), BOS | SPECIAL, &a, &na), 0);
		assert_int_equal(mu__tok_encode(h, text, strlen(text), BOS | SPECIAL, &b, &nb), 0);
		assert_int_equal(na, nb);
		assert_memory_equal(a, b, na * sizeof(*a));
		mu__free(a);
		mu__free(b);
		fix_roundtrip(g, text, strlen(text), 0);
	}
	FIX_IDS(g, " the and", 0, 259, ' ', 261);
	mu__tok_free(g);
	mu__tok_free(h);
	/* the pre-tokenizers llama.cpp names, and one it does not */
	v.pre = "llama-bpe";
	assert_int_equal(mu__tok_from_vocab(&v, &g, why, sizeof(why)), 0);
	mu__tok_free(g);
	v.pre = "qwen2";
	assert_int_equal(mu__tok_from_vocab(&v, &g, why, sizeof(why)), 0);
	mu__tok_free(g);
	v.pre = "nonesuch";
	assert_int_equal(mu__tok_from_vocab(&v, &g, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "tokenizer.ggml.pre \"nonesuch\""));
	v.pre = "gpt-2";
	v.model = "bert";
	assert_int_equal(mu__tok_from_vocab(&v, &g, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "tokenizer.ggml.model \"bert\""));
	v.model = "gpt2";
	v.nmerges = 0;
	assert_int_equal(mu__tok_from_vocab(&v, &g, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "tokenizer.ggml.merges is missing"));
	assert_null(g);
}

/* Feeding ids one by one gives decode's text, cut only between
 * characters. */
static void stream_check(const mu__tok_t *t, const int32_t *ids, size_t n, int valid)
{
	mu__tok_stream_t s;
	mu__buf_t got;
	char *want, *out;
	size_t cap = mu__tok_stream_cap(t), k;

	out = malloc(cap);
	mu__buf_init(&got, 1 << 20);
	mu__tok_stream_init(&s, t);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(mu__tok_stream_feed(&s, ids[i], out, cap, &k), 0);
		if (valid)
			assert_true(mu__utf8_valid(out, k));
		mu__buf_append(&got, out, k);
	}
	assert_int_equal(mu__tok_stream_flush(&s, out, cap, &k), 0);
	mu__buf_append(&got, out, k);
	assert_int_equal(s.nfed, n);
	assert_int_equal(mu__tok_decode(t, ids, n, 0, &want, &k), 0);
	assert_int_equal(got.len, k);
	assert_memory_equal(got.data != NULL ? got.data : "", want, k);
	mu__free(want);
	mu__buf_free(&got);
	free(out);
}

static void test_stream(void **state)
{
	mu__tok_t *ts[2] = {llama2c(), NULL};
	char *json = fix_bytelevel(NULL, 0, NULL, NULL, NULL, NULL, NULL);
	rng_t r;
	char text[512], out[4];
	mu__tok_stream_t s;
	size_t k;

	(void)state;
	assert_int_equal(mu__tok_from_hf(json, strlen(json), NULL, 0, &ts[1], NULL, 0), 0);
	mu__free(json);
	rng_seed(&r, 11);
	for (int k2 = 0; k2 < 300; k2++) {
		const mu__tok_t *t = ts[k2 % 2];
		int32_t *ids, rnd[40];
		size_t n;

		random_text(&r, text, sizeof(text));
		assert_int_equal(mu__tok_encode(t, text, strlen(text), BOS, &ids, &n), 0);
		stream_check(t, ids, n, 1);
		mu__free(ids);
		for (size_t i = 0; i < 40; i++)
			rnd[i] = (int32_t)(rng_next(&r) % 260);
		stream_check(t, rnd, 40, 0);
	}
	/* a piece that does not fit: nothing consumed */
	mu__tok_stream_init(&s, ts[0]);
	assert_int_equal(mu__tok_stream_feed(&s, find_piece(" Once", 5), out, 2, &k), MU_ETOOBIG);
	assert_int_equal(s.nfed, 0);
	assert_int_equal(mu__tok_stream_feed(&s, 0xe4 + 3, out, 4, &k), 0); /* <0xE4> */
	assert_int_equal(k, 0);
	assert_int_equal(mu__tok_stream_flush(&s, out, 4, &k), 0);
	assert_int_equal(k, 1);
	assert_int_equal((unsigned char)out[0], 0xe4);
	mu__tok_free(ts[0]);
	mu__tok_free(ts[1]);
}

/* Any bytes encode, and decode back byte for byte. */
static void test_invalid_utf8(void **state)
{
	mu__tok_t *t = llama2c(), *g = gguf_llama();
	char *json = fix_bytelevel(NULL, 0, NULL, "{\"type\":\"ByteLevel\",\"add_prefix_space\":false}",
	                           NULL, NULL, NULL);
	mu__tok_t *h = NULL;
	static const char bad[] = "\xff a\xc3 \xe4\xb8 \xed\xa0\x80 \xf4\x90\x80\x80\xc0\xaf\x80 x\xe2";

	(void)state;
	assert_int_equal(mu__tok_from_hf(json, strlen(json), NULL, 0, &h, NULL, 0), 0);
	mu__free(json);
	fix_roundtrip(t, bad, sizeof(bad) - 1, BOS);
	fix_roundtrip(g, bad, sizeof(bad) - 1, BOS);
	fix_roundtrip(h, bad, sizeof(bad) - 1, BOS);
	fix_roundtrip(h, "a\0b", 3, 0);
	mu__tok_free(t);
	mu__tok_free(g);
	mu__tok_free(h);
}

typedef struct {
	const mu__tok_t *t;
	int ok;
} job_t;

static void *encode_many(void *arg)
{
	job_t *j = arg;
	rng_t r;
	char text[512];
	int32_t want[1200];

	rng_seed(&r, 5);
	j->ok = 1;
	for (int k = 0; k < 300 && j->ok; k++) {
		int32_t *ids;
		size_t n, m;

		random_text(&r, text, sizeof(text));
		m = runc_encode(text, want);
		j->ok = mu__tok_encode(j->t, text, strlen(text), BOS, &ids, &n) == 0 && n == m &&
		        memcmp(ids, want, n * sizeof(*ids)) == 0;
		mu__free(ids);
	}
	return NULL;
}

/* One tokenizer, used from two threads at once. */
static void test_threads(void **state)
{
	mu__tok_t *t = llama2c();
	job_t j[2] = {{t, 0}, {t, 0}};
	pthread_t th[2];

	(void)state;
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, encode_many, &j[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	assert_true(j[0].ok && j[1].ok);
	mu__tok_free(t);
}

static void test_llama2c_refused(void **state)
{
	mu__tok_t *t = NULL;
	char why[200] = "";

	(void)state;
	assert_int_equal(mu__tok_from_llama2c(tok_bin, 100, 512, &t, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "ends at token"));
	assert_int_equal(mu__tok_from_llama2c(tok_bin, tok_len, 600, &t, why, sizeof(why)),
	                 MU_EPROTO);
	assert_int_equal(mu__tok_from_llama2c(tok_bin, tok_len, 100, &t, why, sizeof(why)),
	                 MU_EPROTO);
	assert_non_null(strstr(why, "vocabulary size 100"));
	assert_int_equal(mu__tok_from_llama2c(tok_bin, 3, 512, &t, why, sizeof(why)), MU_EPROTO);
	assert_null(t);
	/* fewer ids than the file holds: the first ones, as run.c reads them */
	assert_int_equal(mu__tok_from_llama2c(tok_bin, tok_len, 300, &t, why, sizeof(why)), 0);
	assert_int_equal(mu__tok_vocab_size(t), 300);
	mu__tok_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_llama2c_matches_runc),
		cmocka_unit_test(test_llama2c_decode),
		cmocka_unit_test(test_gguf_llama),
		cmocka_unit_test(test_gguf_gpt2),
		cmocka_unit_test(test_stream),
		cmocka_unit_test(test_invalid_utf8),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_llama2c_refused),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
