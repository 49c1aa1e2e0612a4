/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/tok/hf.c and tok/hf_pipe.c (with tok.c,
 * tok/text.c and tok/bpe.c underneath): small tokenizer.json files whose
 * ids follow from their merges by hand, one per part of HF's pipeline
 * (merge order, added tokens, template, split behaviours, normalizers,
 * SentencePiece-style byte fallback, Metaspace), and every field we refuse
 * named in the error.
 */
#include <utf8proc.h>

#include "mu_test.h"

#include "tok/hf_int.h"
#include "tok_fix.h"

#define BOS MU__TOK_BOS
#define SPECIAL MU__TOK_SPECIAL

static mu__tok_t *load(const char *json, const char *config)
{
	mu__tok_t *t = NULL;
	char why[256] = "";
	int rc = mu__tok_from_hf(json, strlen(json), config, config ? strlen(config) : 0, &t, why,
	                         sizeof(why));

	if (rc != 0)
		fprintf(stderr, "mu__tok_from_hf: %s\n", why);
	assert_int_equal(rc, 0);
	return t;
}

static mu__tok_t *bytelevel(const char *const *m, size_t nm, const char *pre, const char *added,
                            const char *post, const char *extra)
{
	char *json = fix_bytelevel(m, nm, NULL, pre, added, post, extra);
	mu__tok_t *t = load(json, NULL);

	mu__free(json);
	return t;
}

/* Lowest rank first, the leftmost of equal ranks, and "a b" and ["a","b"]
 * merges the same. */
static void test_merge_order(void **state)
{
	static const char *const m[] = {"a|b", "ab|c", "b|c", "a|a"}; /* 256.. */
	mu__tok_t *t = bytelevel(m, 4, NULL, NULL, NULL, NULL);
	char *json;

	(void)state;
	FIX_IDS(t, "abc", 0, 257);
	FIX_IDS(t, "abcbc", 0, 257, 258);
	FIX_IDS(t, "bc", 0, 258);
	FIX_IDS(t, "aaa", 0, 259, 'a');
	FIX_IDS(t, "cab", 0, 'c', 256);
	FIX_IDS(t, "", 0);
	mu__tok_free(t);
	/* the same merges as pairs */
	json = fix_bytelevel(m, 4, NULL, NULL, NULL, NULL, NULL);
	{
		char *p = strstr(json, "\"merges\":[");
		mu__buf_t b;

		mu__buf_init(&b, 1 << 20);
		mu__buf_append(&b, json, (size_t)(p - json));
		mu__buf_appends(&b, "\"merges\":[[\"a\",\"b\"],[\"ab\",\"c\"],[\"b\",\"c\"],[\"a\",\"a\"]]}}");
		t = load(b.data, NULL);
		mu__buf_free(&b);
	}
	FIX_IDS(t, "abcbc", 0, 257, 258);
	FIX_IDS(t, "aaa", 0, 259, 'a');
	mu__tok_free(t);
	mu__free(json);
}

/* ignore_merges: a word in the vocabulary is taken whole. */
static void test_ignore_merges(void **state)
{
	static const char *const m[] = {"x|y", "y|z", "x|yz"}; /* xy, yz, xyz */
	mu__tok_t *t = bytelevel(m, 3, NULL, NULL, NULL, NULL);

	(void)state;
	FIX_IDS(t, "xyz", 0, 256, 'z'); /* x y merges first, then nothing */
	mu__tok_free(t);
	t = bytelevel(m, 3, NULL, NULL, NULL, "\"ignore_merges\":true,");
	FIX_IDS(t, "xyz", 0, 258);
	mu__tok_free(t);
}

/* ByteLevel's GPT-2 regex cuts words: "o" and " w" never merge. */
static void test_bytelevel_regex(void **state)
{
	static const char *const m[] = {"o| ", " |w", " w|o"}; /* "o ", " w", " wo" */
	mu__tok_t *t = bytelevel(m, 3, NULL, NULL, NULL, NULL);

	(void)state;
	FIX_IDS(t, "o wo", 0, 256, 'w', 'o');
	mu__tok_free(t);
	t = bytelevel(m, 3, "{\"type\":\"ByteLevel\",\"add_prefix_space\":false}", NULL, NULL, NULL);
	FIX_IDS(t, "o wo", 0, 'o', 258);
	FIX_IDS(t, "wo", 0, 'w', 'o');
	mu__tok_free(t);
	t = bytelevel(m, 3, "{\"type\":\"ByteLevel\",\"add_prefix_space\":true}", NULL, NULL, NULL);
	FIX_IDS(t, "wo", 0, 258); /* " wo" */
	mu__tok_free(t);
}

static void split_case(const char *behavior, int invert, const int32_t *want, size_t n)
{
	static const char *const m[] = {"a|-", "-|b", "-|-"}; /* a- -b -- */
	char pre[256];
	mu__tok_t *t;

	snprintf(pre, sizeof(pre),
	         "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
	         "{\"String\":\"-\"},\"behavior\":\"%s\",\"invert\":%s},{\"type\":\"ByteLevel\","
	         "\"add_prefix_space\":false,\"use_regex\":false}]}",
	         behavior, invert ? "true" : "false");
	t = bytelevel(m, 3, pre, NULL, NULL, NULL);
	fix_expect(t, "a--b", 4, 0, want, n);
	mu__tok_free(t);
}

/* Split's behaviours, seen through merges across the pieces' edges. */
static void test_split_behaviors(void **state)
{
	const int32_t removed[] = {'a', 'b'}, isolated[] = {'a', '-', '-', 'b'};
	const int32_t prev[] = {256, '-', 'b'}, next[] = {'a', '-', 257};
	const int32_t contig[] = {'a', 258, 'b'}, inverted[] = {'-', '-'};

	(void)state;
	split_case("Removed", 0, removed, 2);
	split_case("Isolated", 0, isolated, 4);
	split_case("MergedWithPrevious", 0, prev, 3);
	split_case("MergedWithNext", 0, next, 3);
	split_case("Contiguous", 0, contig, 3);
	split_case("Removed", 1, inverted, 2);
}

#define ADDED                                                                  \
	"[{\"id\":300,\"content\":\"<|s|>\",\"special\":true},"                    \
	"{\"id\":301,\"content\":\"<x>\",\"special\":false,\"normalized\":false}," \
	"{\"id\":302,\"content\":\"<l>\",\"special\":true,\"lstrip\":true,\"rstrip\":true}," \
	"{\"id\":303,\"content\":\"<x>y\",\"special\":false}]"

/* Added tokens: special ones only with MU__TOK_SPECIAL, the others always;
 * the longest wins; lstrip / rstrip take the spaces around. */
static void test_added_tokens(void **state)
{
	mu__tok_t *t = bytelevel(NULL, 0, NULL, ADDED, NULL, NULL);
	int32_t ids[] = {'a', 300, 'b', 301, 303};
	char *s;

	(void)state;
	assert_int_equal(mu__tok_vocab_size(t), 304);
	FIX_IDS(t, "a<|s|>b<x>c", SPECIAL, 'a', 300, 'b', 301, 'c');
	FIX_IDS(t, "a<|s|>b<x>c", 0, 'a', '<', '|', 's', '|', '>', 'b', 301, 'c');
	FIX_IDS(t, "<x>y<x>", 0, 303, 301);
	FIX_IDS(t, "a  <l>  b", SPECIAL, 'a', 302, 'b');
	FIX_IDS(t, "<|s|><|s|>", SPECIAL, 300, 300);
	/* decoding leaves special tokens out unless asked */
	s = fix_decode(t, ids, 5, 0);
	assert_string_equal(s, "ab<x><x>y");
	mu__free(s);
	s = fix_decode(t, ids, 5, 1);
	assert_string_equal(s, "a<|s|>b<x><x>y");
	mu__free(s);
	mu__tok_free(t);
}

#define TEMPLATE                                                               \
	"{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"          \
	"{\"id\":\"<|s|>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}," \
	"{\"SpecialToken\":{\"id\":\"<|e|>\",\"type_id\":0}}],\"special_tokens\":"  \
	"{\"<|s|>\":{\"id\":\"<|s|>\",\"ids\":[300]},\"<|e|>\":{\"ids\":[301]}}}"

/* The template puts BOS (and here EOS) around the text when asked; the
 * config's add_bos_token / add_eos_token override it. */
static void test_template(void **state)
{
	static const char added[] = "[{\"id\":300,\"content\":\"<|s|>\",\"special\":true},"
	                            "{\"id\":301,\"content\":\"<|e|>\",\"special\":true}]";
	char *json = fix_bytelevel(NULL, 0, NULL, NULL, added, TEMPLATE, NULL);
	char post[600];
	mu__tok_t *t = load(json, NULL);
	size_t n;

	(void)state;
	FIX_IDS(t, "ab", BOS, 300, 'a', 'b', 301);
	FIX_IDS(t, "ab", 0, 'a', 'b');
	FIX_IDS(t, "", BOS, 300, 301);
	assert_int_equal(mu__tok_bos(t), 300);
	assert_null(mu__tok_eos(t, &n));
	mu__tok_free(t);
	t = load(json, "{\"bos_token\":\"<|s|>\",\"eos_token\":{\"content\":\"<|e|>\"},"
	               "\"add_eos_token\":false,\"chat_template\":\"{{ x }}\"}");
	FIX_IDS(t, "ab", BOS, 300, 'a', 'b');
	assert_int_equal(mu__tok_eos(t, &n)[0], 301);
	assert_int_equal(n, 1);
	assert_string_equal(mu__tok_chat_template(t), "{{ x }}");
	mu__tok_free(t);
	t = load(json, "{\"bos_token\":\"<|s|>\",\"add_bos_token\":false}");
	FIX_IDS(t, "ab", BOS, 'a', 'b', 301);
	assert_int_equal(mu__tok_bos(t), 300);
	mu__tok_free(t);
	mu__free(json);
	/* Llama 3.1's form: a Sequence of ByteLevel and the template */
	snprintf(post, sizeof(post),
	         "{\"type\":\"Sequence\",\"processors\":[{\"type\":\"ByteLevel\"},%s]}", TEMPLATE);
	json = fix_bytelevel(NULL, 0, NULL, NULL, added, post, NULL);
	t = load(json, NULL);
	FIX_IDS(t, "a", BOS, 300, 'a', 301);
	mu__tok_free(t);
	mu__free(json);
}

static void test_normalizers(void **state)
{
	char *json = fix_bytelevel(NULL, 0,
	                           "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},"
	                           "{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"\\\\s+\"},"
	                           "\"content\":\"_\"}]}",
	                           NULL, NULL, NULL, NULL);
	mu__tok_t *t = load(json, NULL), *u;
	const char nfd[] = "e\xcc\x81 \t x", nfc[] = "\xc3\xa9_x";
	int32_t *a, *b;
	size_t na, nb;

	(void)state;
	assert_int_equal(mu__tok_encode(t, nfd, strlen(nfd), 0, &a, &na), 0);
	assert_int_equal(mu__tok_encode(t, nfc, strlen(nfc), 0, &b, &nb), 0);
	assert_int_equal(na, 4);
	assert_int_equal(na, nb);
	assert_memory_equal(a, b, na * sizeof(*a));
	mu__free(a);
	mu__free(b);
	/* invalid UTF-8 goes through NFC unchanged */
	FIX_IDS(t, "\xff\xc3", 0, 0xff, 0xc3);
	mu__tok_free(t);
	mu__free(json);
	json = fix_bytelevel(NULL, 0,
	                     "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Strip\","
	                     "\"strip_left\":true,\"strip_right\":true},{\"type\":\"Lowercase\"},"
	                     "{\"type\":\"NFD\"},{\"type\":\"StripAccents\"},{\"type\":\"Prepend\","
	                     "\"prepend\":\"^\"}]}",
	                     NULL, NULL, NULL, NULL);
	u = load(json, NULL);
	FIX_IDS(u, " \xc2\x85\xc3\x89" "a\xe3\x80\x80 ", 0, '^', 'e', 'a');
	mu__tok_free(u);
	mu__free(json);
}

/* NFC cut into pieces at ASCII characters gives NFC of the whole. */
static void test_nfc_pieces(void **state)
{
	static const char *const parts[] = {
		"a", "e", " ", "\xcc\x81", "\xcc\xa3", "\xc3\xa9", "\xe1\x84\x80", "\xe1\x85\xa1",
		"\xe1\x86\xa8", "\xe2\x84\xab", "\xef\xac\x81", "o", "\xcc\x82"};
	char *json = fix_bytelevel(NULL, 0, "{\"type\":\"NFC\"}", NULL, NULL, NULL, NULL);
	mu__tok_t *t = load(json, NULL);
	mu__tok_work_t w;
	uint64_t x = 99;

	(void)state;
	assert_int_equal(mu__tok_work_init(&w), 0);
	for (int k = 0; k < 2000; k++) {
		char text[256] = "";
		const char *got;
		size_t n = 1 + k % 12, glen, len = 0;
		unsigned char *want;

		for (size_t i = 0; i < n; i++) {
			const char *p;

			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
			p = parts[(x >> 33) % (sizeof(parts) / sizeof(parts[0]))];
			memcpy(text + len, p, strlen(p) + 1);
			len += strlen(p);
		}
		want = utf8proc_NFC((const unsigned char *)text);
		assert_int_equal(mu__tok_normalize(t, &w, text, strlen(text), &got, &glen), 0);
		assert_int_equal(glen, strlen((char *)want));
		assert_memory_equal(got, want, glen);
		free(want);
	}
	mu__tok_work_free(&w);
	mu__tok_free(t);
	mu__free(json);
}

/* Llama 2's layout: U+2581 for spaces, byte fallback, the Strip decoder. */
#define SPM_HEAD                                                               \
	"{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},"     \
	"{\"id\":1,\"content\":\"<s>\",\"special\":true}],"
#define SPM_MODEL(extra)                                                       \
	"\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\"," extra               \
	"\"vocab\":{\"<unk>\":0,\"<s>\":1,\"<0x20>\":2,\"<0xE2>\":3,\"<0x82>\":4,"   \
	"\"<0xAC>\":5,\"\xe2\x96\x81\":6,\"a\":7,\"b\":8,\"c\":9,\"\xe2\x96\x81"     \
	"a\":10,\"\xe2\x96\x81" "ab\":11,\"a\xe2\x96\x81\":12},\"merges\":["        \
	"\"\xe2\x96\x81 a\",\"\xe2\x96\x81" "a b\",\"a \xe2\x96\x81\"]}}"

static void test_sentencepiece(void **state)
{
	static const char json[] =
		SPM_HEAD
		"\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\","
		"\"prepend\":\"\xe2\x96\x81\"},{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},"
		"\"content\":\"\xe2\x96\x81\"}]},\"pre_tokenizer\":null,"
		"\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
		"{\"id\":\"<s>\"}},{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{\"<s>\":{\"ids\":[1]}}},"
		"\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":"
		"{\"String\":\"\xe2\x96\x81\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},"
		"{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},"
		SPM_MODEL("\"byte_fallback\":true,\"fuse_unk\":true,");
	mu__tok_t *t = load(json, NULL);
	int32_t ids[] = {1, 11, 6, 9, 3, 4, 5};
	char *s;

	(void)state;
	/* "▁ab▁c€": ▁ab, ▁, c, then € as its three bytes */
	FIX_IDS(t, "ab c\xe2\x82\xac", BOS, 1, 11, 6, 9, 3, 4, 5);
	/* "a▁" merges at rank 2, after "▁a" */
	FIX_IDS(t, "a a", 0, 10, 10);
	FIX_IDS(t, "ba b", 0, 6, 8, 12, 8);
	/* a section after an added token gets its own prefix */
	FIX_IDS(t, "a<s>a", SPECIAL, 10, 1, 10);
	s = fix_decode(t, ids, 7, 0);
	assert_string_equal(s, "ab c\xe2\x82\xac");
	mu__free(s);
	s = fix_decode(t, ids, 7, 1); /* <s> first: the strip finds no space */
	assert_string_equal(s, "<s> ab c\xe2\x82\xac");
	mu__free(s);
	fix_roundtrip(t, "  c  a", 6, BOS);
	mu__tok_free(t);
}

/* Without byte fallback, what the vocabulary lacks is <unk>, fused. */
static void test_unknown(void **state)
{
	static const char json[] =
		SPM_HEAD "\"normalizer\":null,\"pre_tokenizer\":null,\"post_processor\":null,"
		"\"decoder\":{\"type\":\"Fuse\"}," SPM_MODEL("\"fuse_unk\":true,");
	mu__tok_t *t = load(json, NULL);

	(void)state;
	FIX_IDS(t, "a\xe2\x82\xac\xe2\x82\xac" "b\xff", 0, 7, 0, 8, 0);
	mu__tok_free(t);
}

/* Mistral v0.3's layout: a Metaspace pre-tokenizer that splits, prepends
 * only to the first section, and a Metaspace decoder. */
static void test_metaspace(void **state)
{
	static const char json[] =
		SPM_HEAD "\"normalizer\":null,\"post_processor\":null,\"pre_tokenizer\":"
		"{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81\",\"prepend_scheme\":\"first\","
		"\"split\":true},\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":"
		"\"Metaspace\",\"replacement\":\"\xe2\x96\x81\",\"prepend_scheme\":\"first\"},"
		"{\"type\":\"ByteFallback\"}]}," SPM_MODEL("\"byte_fallback\":true,");
	mu__tok_t *t = load(json, NULL);
	int32_t ids[] = {10, 6, 9};
	char *s;

	(void)state;
	FIX_IDS(t, "a a", 0, 10, 10);      /* split: "a▁" cannot merge */
	FIX_IDS(t, "<s>a", SPECIAL, 1, 7); /* not the first section: no prefix */
	s = fix_decode(t, ids, 3, 0);
	assert_string_equal(s, "a c");
	mu__free(s);
	mu__tok_free(t);
}

static void expect_refused(const char *json, const char *config, const char *needle)
{
	mu__tok_t *t = NULL;
	char why[300] = "";
	int rc = mu__tok_from_hf(json, strlen(json), config, config ? strlen(config) : 0, &t, why,
	                         sizeof(why));

	if (rc == 0 || strstr(why, needle) == NULL)
		fprintf(stderr, "want an error with \"%s\", got %d \"%s\"\n", needle, rc, why);
	assert_true(rc == MU_EPROTO || rc == MU_EJSON);
	assert_null(t);
	assert_non_null(strstr(why, needle));
}

/* Replace needle (once) in the byte-level fixture and expect the error. */
static void refused_variant(const char *from, const char *to, const char *needle)
{
	char *json = fix_bytelevel(NULL, 0, NULL, NULL,
	                           "[{\"id\":300,\"content\":\"<s>\",\"special\":true}]",
	                           NULL, NULL);
	char *p = strstr(json, from);
	mu__buf_t b;

	assert_non_null(p);
	mu__buf_init(&b, 1 << 24);
	mu__buf_append(&b, json, (size_t)(p - json));
	mu__buf_appends(&b, to);
	mu__buf_appends(&b, p + strlen(from));
	expect_refused(b.data, NULL, needle);
	mu__buf_free(&b);
	mu__free(json);
}

static void test_refused(void **state)
{
	(void)state;
	expect_refused("{\"model\":", NULL, "not valid JSON");
	expect_refused("[]", NULL, "not a JSON object");
	expect_refused("{}", NULL, "model is missing");
	refused_variant("\"type\":\"BPE\"", "\"type\":\"Unigram\"", "model.type \"Unigram\"");
	refused_variant("\"type\":\"BPE\",", "\"type\":\"BPE\",\"dropout\":0.1,", "model.dropout 0.1");
	refused_variant("\"type\":\"BPE\",", "\"type\":\"BPE\",\"continuing_subword_prefix\":\"##\",",
	                "model.continuing_subword_prefix \"##\"");
	refused_variant("\"normalizer\":null", "\"normalizer\":{\"type\":\"Precompiled\"}",
	                "normalizer.type \"Precompiled\"");
	refused_variant("\"pre_tokenizer\":{\"type\":\"ByteLevel\"",
	                "\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"",
	                "pre_tokenizer.type \"BertPreTokenizer\"");
	refused_variant("\"pre_tokenizer\":{",
	                "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":"
	                "\"ByteLevel\"},{\"type\":\"Digits\"}]},\"x\":{",
	                "pre_tokenizer.pretokenizers[1]: a \"Digits\" after ByteLevel");
	refused_variant("\"pre_tokenizer\":{",
	                "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},"
	                "\"behavior\":\"Isolated\"},\"x\":{",
	                "pre_tokenizer.pattern");
	refused_variant("\"pre_tokenizer\":{",
	                "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\"x\"},"
	                "\"behavior\":\"Sideways\"},\"x\":{",
	                "pre_tokenizer.behavior \"Sideways\"");
	refused_variant("\"decoder\":{\"type\":\"ByteLevel\"}", "\"decoder\":{\"type\":\"CTC\"}",
	                "decoder.type \"CTC\"");
	refused_variant("\"decoder\":{\"type\":\"ByteLevel\"}", "\"decoder\":null",
	                "decoder null");
	refused_variant("\"post_processor\":null",
	                "\"post_processor\":{\"type\":\"RobertaProcessing\"}",
	                "post_processor.type \"RobertaProcessing\"");
	refused_variant("\"special\":true}", "\"special\":true,\"single_word\":true}",
	                "added_tokens[0].single_word true");
	refused_variant("\"merges\":[]", "\"merges\":[\"a b c\"]", "model.merges[0] is not");
	refused_variant("\"merges\":[]", "\"merges\":[\"a q\"]", "\"aq\" is not in the vocabulary");
	refused_variant("\"merges\":[]", "\"merges\":[\"a \xe2\x82\xac\"]",
	                "\"\xe2\x82\xac\" is not in the vocabulary");
	refused_variant("\"vocab\":{", "\"vocab\":{\"zz\":5,", "id 5 is given twice");
	refused_variant("\"vocab\":{", "\"vocab\":{\"zz\":-1,", "model.vocab[\"zz\"]");
	refused_variant("\"type\":\"BPE\",", "\"type\":\"BPE\",\"unk_token\":\"<nope>\",",
	                "unk_token \"<nope>\" is not in the vocabulary");
	expect_refused("{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}", NULL,
	               "model.vocab is empty");
}

/* Every allocation may fail: a clean MU_ENOMEM (no leak, no crash). */
static void test_out_of_memory(void **state)
{
	static const char *const m[] = {"a|b", "ab|c"};
	char *json = fix_bytelevel(m, 2, "{\"type\":\"NFC\"}", NULL, ADDED, TEMPLATE, NULL);
	int done = 0;

	(void)state;
	for (long n = 0; !done && n < 20000; n += 1 + n / 64) {
		mu__tok_t *t = NULL;
		int32_t *ids = NULL;
		size_t k = 0;
		int rc;

		mu_test_fail_after(n);
		rc = mu__tok_from_hf(json, strlen(json), NULL, 0, &t, NULL, 0);
		if (rc == 0) {
			rc = mu__tok_encode(t, "abc <x> abc", 11, BOS, &ids, &k);
			done = rc == 0;
		}
		mu_test_alloc_reset();
		/* cJSON cannot tell a failed allocation from bad text */
		assert_true(rc == 0 || rc == MU_ENOMEM || rc == MU_EJSON);
		mu__free(ids);
		mu__tok_free(t);
	}
	assert_true(done);
	mu__free(json);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_merge_order),
		cmocka_unit_test(test_ignore_merges),
		cmocka_unit_test(test_bytelevel_regex),
		cmocka_unit_test(test_split_behaviors),
		cmocka_unit_test(test_added_tokens),
		cmocka_unit_test(test_template),
		cmocka_unit_test(test_normalizers),
		cmocka_unit_test(test_nfc_pieces),
		cmocka_unit_test(test_sentencepiece),
		cmocka_unit_test(test_unknown),
		cmocka_unit_test(test_metaspace),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_out_of_memory),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
