/* SPDX-License-Identifier: MIT */
/*
 * Small tokenizers written out for the tokenizer tests (test_tok.c,
 * test_tok_hf.c): a byte-level tokenizer.json whose ids 0..255 are the
 * bytes and whose merges' results follow in order, so a test can say which
 * ids a text must give by reasoning about its merges.
 */
#ifndef MU_TEST_TOK_FIX_H
#define MU_TEST_TOK_FIX_H

#include <stdio.h>

#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "tok/impl_int.h"

/* Raw bytes as a JSON string body in GPT-2's alphabet (" " is "Ġ"). */
static inline void fix_alpha(mu__buf_t *b, const char *raw, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		uint32_t cp = mu__tok_byte_cp((unsigned char)raw[i]);
		char u[4];

		if (cp == '"' || cp == '\\')
			mu__buf_appendc(b, '\\');
		mu__buf_append(b, u, mu__tok_utf8_put(cp, u));
	}
}

/*
 * A byte-level BPE tokenizer.json. merges: raw "a|b" strings (the bar
 * splits; no quotes or backslashes). The other arguments are JSON
 * text put in as they are (NULL: null). model_extra: more members of
 * "model" (may be "").
 */
static inline char *fix_bytelevel(const char *const *merges, size_t nm, const char *norm,
                                  const char *pre, const char *added, const char *post,
                                  const char *model_extra)
{
	mu__buf_t b;

	mu__buf_init(&b, 1 << 24);
	mu__buf_printf(&b, "{\"version\":\"1.0\",\"added_tokens\":%s,\"normalizer\":%s,",
	               added ? added : "[]", norm ? norm : "null");
	mu__buf_printf(&b, "\"pre_tokenizer\":%s,\"post_processor\":%s,",
	               pre ? pre : "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
	                           "\"use_regex\":false}",
	               post ? post : "null");
	mu__buf_printf(&b, "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",%s"
	                   "\"vocab\":{",
	               model_extra ? model_extra : "");
	for (unsigned c = 0; c < 256; c++) {
		char ch = (char)c;

		mu__buf_appends(&b, c ? ",\"" : "\"");
		fix_alpha(&b, &ch, 1);
		mu__buf_printf(&b, "\":%u", c);
	}
	for (size_t i = 0; i < nm; i++) {
		const char *sp = strchr(merges[i], '|');

		mu__buf_appends(&b, ",\"");
		fix_alpha(&b, merges[i], (size_t)(sp - merges[i]));
		fix_alpha(&b, sp + 1, strlen(sp + 1));
		mu__buf_printf(&b, "\":%zu", 256 + i);
	}
	mu__buf_appends(&b, "},\"merges\":[");
	for (size_t i = 0; i < nm; i++) {
		const char *sp = strchr(merges[i], '|');

		mu__buf_appends(&b, i ? ",\"" : "\"");
		fix_alpha(&b, merges[i], (size_t)(sp - merges[i]));
		mu__buf_appendc(&b, ' ');
		fix_alpha(&b, sp + 1, strlen(sp + 1));
		mu__buf_appendc(&b, '"');
	}
	mu__buf_appends(&b, "]}}");
	return mu__buf_take(&b, NULL);
}

/* Encode and compare with want[0..n). */
#define FIX_IDS(t, text, flags, ...)                                           \
	do {                                                                   \
		const int32_t want_[] = {__VA_ARGS__};                         \
		fix_expect((t), (text), strlen(text), (flags), want_,           \
		           sizeof(want_) / sizeof(want_[0]));                  \
	} while (0)

static inline void fix_expect(const mu__tok_t *t, const char *text, size_t len, int flags,
                              const int32_t *want, size_t n)
{
	int32_t *ids = NULL;
	size_t got = 0;

	assert_int_equal(mu__tok_encode(t, text, len, flags, &ids, &got), 0);
	if (got != n || memcmp(ids, want, n * sizeof(*ids)) != 0) {
		fprintf(stderr, "text \"%.*s\": got", (int)len, text);
		for (size_t i = 0; i < got; i++)
			fprintf(stderr, " %d", (int)ids[i]);
		fprintf(stderr, ", want");
		for (size_t i = 0; i < n; i++)
			fprintf(stderr, " %d", (int)want[i]);
		fprintf(stderr, "\n");
		fail();
	}
	mu__free(ids);
}

/* decode(ids) as a NUL-terminated string the caller frees. */
static inline char *fix_decode(const mu__tok_t *t, const int32_t *ids, size_t n, int keep)
{
	char *text = NULL;
	size_t len = 0;

	assert_int_equal(mu__tok_decode(t, ids, n, keep, &text, &len), 0);
	assert_non_null(text);
	assert_int_equal(strlen(text), len);
	return text;
}

/* encode then decode gives back the text. */
static inline void fix_roundtrip(const mu__tok_t *t, const char *text, size_t len, int flags)
{
	int32_t *ids = NULL;
	char *back = NULL;
	size_t n = 0, bl = 0;

	assert_int_equal(mu__tok_encode(t, text, len, flags, &ids, &n), 0);
	assert_int_equal(mu__tok_decode(t, ids, n, 0, &back, &bl), 0);
	if (bl != len || memcmp(back, text, len) != 0) {
		fprintf(stderr, "roundtrip of \"%.*s\" gave \"%.*s\"\n", (int)len, text, (int)bl, back);
		fail();
	}
	mu__free(ids);
	mu__free(back);
}

#endif
