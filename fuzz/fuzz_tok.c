/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer driver for the tokenizers. The first byte picks what the rest
 * is:
 *   0  a tokenizer.json: built, and when it builds, a fixed text is
 *      encoded, decoded and streamed with it;
 *   1  text for a built-in byte-level tokenizer (Llama 3's regex, merges,
 *      special and plain added tokens): decode(encode(x)) must be x, byte
 *      for byte, and streaming must give decode's text;
 *   2  text for a built-in SentencePiece-style one (Llama 2's layout, byte
 *      fallback): the same, for text without U+2581 (which decodes as a
 *      space);
 *   3  a llama2.c tokenizer file, read as 300 ids: built and used.
 * Nothing may crash; a broken round trip aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "tok/impl_int.h"

static mu__tok_t *bytelevel, *spm;

static const char sample[] = "Hello, w\xc3\xb6rld! 12345 \xe4\xbd\xa0\xe5\xa5\xbd "
                             "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd\n\t <s><|e|> \xff";

static void alpha(mu__buf_t *b, const char *raw, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char u[4];
		uint32_t cp = mu__tok_byte_cp((unsigned char)raw[i]);

		if (cp == '"' || cp == '\\')
			mu__buf_appendc(b, '\\');
		mu__buf_append(b, u, mu__tok_utf8_put(cp, u));
	}
}

static mu__tok_t *build_bytelevel(void)
{
	static const char *const merges[] = {"t|h", "th|e", " |t", " |the", "e|r", " |a", "i|n",
	                                     "1|2", "12|3", "\xc3|\xb6", "<|s"};
	mu__buf_t b;
	mu__tok_t *t = NULL;
	size_t nm = sizeof(merges) / sizeof(merges[0]);

	mu__buf_init(&b, 1 << 24);
	mu__buf_appends(&b, "{\"added_tokens\":[{\"id\":300,\"content\":\"<|e|>\",\"special\":true},"
	                    "{\"id\":301,\"content\":\"<x>\",\"special\":false}],"
	                    "\"normalizer\":null,\"post_processor\":null,"
	                    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":"
	                    "\"Split\",\"pattern\":{\"Regex\":\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|"
	                    "[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}"
	                    "\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
	                    "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
	                    "\"add_prefix_space\":false,\"use_regex\":false}]},"
	                    "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
	                    "\"ignore_merges\":true,\"vocab\":{");
	for (unsigned c = 0; c < 256; c++) {
		char ch = (char)c;

		mu__buf_appends(&b, c ? ",\"" : "\"");
		alpha(&b, &ch, 1);
		mu__buf_printf(&b, "\":%u", c);
	}
	for (size_t i = 0; i < nm; i++) {
		const char *bar = strchr(merges[i], '|');

		mu__buf_appends(&b, ",\"");
		alpha(&b, merges[i], (size_t)(bar - merges[i]));
		alpha(&b, bar + 1, strlen(bar + 1));
		mu__buf_printf(&b, "\":%zu", 256 + i);
	}
	mu__buf_appends(&b, "},\"merges\":[");
	for (size_t i = 0; i < nm; i++) {
		const char *bar = strchr(merges[i], '|');

		mu__buf_appends(&b, i ? ",[\"" : "[\"");
		alpha(&b, merges[i], (size_t)(bar - merges[i]));
		mu__buf_appends(&b, "\",\"");
		alpha(&b, bar + 1, strlen(bar + 1));
		mu__buf_appends(&b, "\"]");
	}
	mu__buf_appends(&b, "]}}");
	if (mu__tok_from_hf(b.data, b.len, NULL, 0, &t, NULL, 0) != 0)
		abort();
	mu__buf_free(&b);
	return t;
}

static mu__tok_t *build_spm(void)
{
	mu__buf_t b;
	mu__tok_t *t = NULL;

	mu__buf_init(&b, 1 << 24);
	mu__buf_appends(&b, "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},"
	                    "{\"id\":1,\"content\":\"<s>\",\"special\":true}],"
	                    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":"
	                    "\"Prepend\",\"prepend\":\"\xe2\x96\x81\"},{\"type\":\"Replace\",\"pattern\":"
	                    "{\"String\":\" \"},\"content\":\"\xe2\x96\x81\"}]},\"pre_tokenizer\":null,"
	                    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":["
	                    "{\"SpecialToken\":{\"id\":\"<s>\"}},{\"Sequence\":{\"id\":\"A\"}}],"
	                    "\"special_tokens\":{\"<s>\":{\"ids\":[1]}}},\"decoder\":{\"type\":"
	                    "\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":"
	                    "\"\xe2\x96\x81\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},"
	                    "{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,"
	                    "\"stop\":0}]},\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\","
	                    "\"byte_fallback\":true,\"fuse_unk\":true,\"vocab\":{\"<unk>\":0,\"<s>\":1");
	for (unsigned c = 0; c < 256; c++)
		mu__buf_printf(&b, ",\"<0x%02X>\":%u", c, c + 2);
	mu__buf_appends(&b, ",\"\xe2\x96\x81\":258,\"a\":259,\"b\":260,\"\xe2\x96\x81" "a\":261,"
	                    "\"\xe2\x96\x81" "ab\":262,\"\xc3\xa9\":263,\"\xe2\x96\x81\xe2\x96\x81\":264},"
	                    "\"merges\":[\"\xe2\x96\x81 a\",\"\xe2\x96\x81" "a b\","
	                    "\"\xe2\x96\x81 \xe2\x96\x81\"]}}");
	if (mu__tok_from_hf(b.data, b.len, NULL, 0, &t, NULL, 0) != 0)
		abort();
	mu__buf_free(&b);
	return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	bytelevel = build_bytelevel();
	spm = build_spm();
	return 0;
}

/* Encode, decode, stream; abort when exact and the text did not come back. */
static void use(const mu__tok_t *t, const char *text, size_t len, int flags, int exact)
{
	int32_t *ids = NULL;
	char *back = NULL, *out;
	size_t n = 0, bl = 0, cap = mu__tok_stream_cap(t), k, got = 0;
	mu__tok_stream_t s;

	if (mu__tok_encode(t, text, len, flags, &ids, &n) != 0)
		return;
	if (mu__tok_decode(t, ids, n, exact, &back, &bl) == 0 && exact &&
	    (bl != len || memcmp(back, text, len) != 0))
		abort();
	out = malloc(cap);
	mu__tok_stream_init(&s, t);
	s.keep_special = exact;
	for (size_t i = 0; out != NULL && back != NULL && i <= n; i++) {
		int rc = i < n ? mu__tok_stream_feed(&s, ids[i], out, cap, &k)
		               : mu__tok_stream_flush(&s, out, cap, &k);

		if (rc != 0 || got + k > bl || memcmp(back + got, out, k) != 0)
			abort(); /* the stream strayed from decode */
		got += k;
	}
	if (out != NULL && back != NULL && got != bl)
		abort();
	free(out);
	mu__free(ids);
	mu__free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data + 1;
	mu__tok_t *t = NULL;
	size_t len = size - 1;

	if (size == 0)
		return 0;
	switch (data[0] % 4) {
	case 0:
		if (mu__tok_from_hf(p, len, NULL, 0, &t, NULL, 0) == 0)
			use(t, sample, sizeof(sample) - 1, MU__TOK_BOS | MU__TOK_SPECIAL, 0);
		break;
	case 1:
		use(bytelevel, p, len, MU__TOK_SPECIAL, 1);
		use(bytelevel, p, len, 0, 1);
		break;
	case 2:
		/* U+2581 in the text comes back as a space; the rest exactly */
		use(spm, p, len, 0, memmem(p, len, "\xe2\x96\x81", 3) == NULL);
		break;
	default:
		if (mu__tok_from_llama2c(p, len, 300, &t, NULL, 0) == 0)
			use(t, sample, sizeof(sample) - 1, MU__TOK_BOS, 0);
		break;
	}
	mu__tok_free(t);
	return 0;
}
