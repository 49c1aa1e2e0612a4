/* SPDX-License-Identifier: MIT */
/*
 * The tokenizer.ggml.* keys of an HF directory (llm/hf_gguf_int.h), as
 * tools/llm_tok.py gguf_tokenizer derives them from tokenizer.json:
 *   - a BPE model with byte_fallback (SentencePiece-style) is model
 *     "llama", pre "default", with scores: -n for the n-th normal piece
 *     when the merges are exactly those such scores imply (spm_merges: every
 *     split of a piece into two pieces, by the halves' ids, then stably by
 *     the piece's score, highest first), else minus the rank of the first
 *     merge that makes the piece;
 *   - any other BPE model is "gpt2", its merges as "a b", pre named after
 *     the one pre-tokenizer regex it has.
 * Tokens are the vocabulary and the added tokens in id order, "[PAD<id>]"
 * for ids neither has, up to config.json's vocab_size; types 1 normal,
 * 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/error_int.h"
#include "core/json_int.h"
#include "core/strmap_int.h"
#include "formats/gguf_int.h"
#include "llm/hf_gguf_int.h"

#define TOK_MAX ((size_t)128 << 20)
#define MAX_IDS (1 << 24)

enum { NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, UNUSED = 5, BYTE = 6 };

/* tools/llm_tok.py _PRE_NAMES: the regex of a pre-tokenizer, by name. */
static const struct {
	const char *re, *name;
} pre_names[] = {
	{"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
	 "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	 "llama-bpe"},
	{"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
	 "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
	 "qwen2"},
	{"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", "gpt-2"},
};

typedef struct {
	const char *a, *b;
	size_t alen, blen;
} pair_t;

/* What is built from the files; tokens point into the JSON or pads. */
typedef struct {
	const char *path;          /* DIR/tokenizer.json, for messages */
	size_t n;
	const char **tokens;
	char **pads;               /* owned "[PAD<id>]" pieces */
	int32_t *types;
	pair_t *merges;
	size_t nmerges;
	int spm;
	mu__strmap_t ids;          /* piece -> last id + 1 */
} tk_t;

static void *id_val(size_t i)
{
	return (void *)(uintptr_t)(i + 1);
}

static int64_t lookup(const mu__strmap_t *m, const char *s, size_t len)
{
	uintptr_t v = (uintptr_t)mu__strmap_get(m, s, len);

	return v == 0 ? -1 : (int64_t)v - 1;
}

static int is_byte_piece(const char *s)
{
	const char *hex = "0123456789abcdefABCDEF";

	return strlen(s) == 6 && strncmp(s, "<0x", 3) == 0 && strchr(hex, s[3]) != NULL &&
	       strchr(hex, s[4]) != NULL && s[5] == '>';
}

static int truthy(const cJSON *v)
{
	return cJSON_IsTrue(v) || (cJSON_IsNumber(v) && v->valuedouble != 0) ||
	       (cJSON_IsString(v) && v->valuestring[0] != '\0') ||
	       ((cJSON_IsArray(v) || cJSON_IsObject(v)) && v->child != NULL);
}

/* The vocabulary and the added tokens: t->tokens and t->types. */
static int read_vocab(tk_t *t, const cJSON *model, const cJSON *added, int64_t vocab, char *why,
                      size_t wl)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, "vocab"), *e, *unk;
	const cJSON **by_id = NULL;
	unsigned char *seen = NULL;
	mu__strmap_t vm;
	int64_t max = -1, id;
	int rc = 0;

	if (!cJSON_IsObject(v))
		return mu__why(why, wl, MU_EPROTO, "%s: model.vocab is missing", t->path);
	mu__strmap_init(&vm);
	cJSON_ArrayForEach(e, v) {
		if (!mu__json_is_int(e, 0, MAX_IDS - 1)) {
			mu__strmap_free(&vm, NULL);
			return mu__why(why, wl, MU_EPROTO, "%s: model.vocab[\"%.60s\"] is not an id",
			               t->path, e->string);
		}
		if ((rc = mu__strmap_put(&vm, e->string, strlen(e->string),
		                         id_val((size_t)e->valuedouble), NULL)) != 0)
			break;
		max = e->valuedouble > max ? (int64_t)e->valuedouble : max;
	}
	cJSON_ArrayForEach(e, added) {
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");

		id = mu__json_is_int(cJSON_GetObjectItemCaseSensitive(e, "id"), 0, MAX_IDS - 1)
		         ? (int64_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble : -1;
		if (rc == 0 && (id < 0 || !cJSON_IsString(c)))
			rc = mu__why(why, wl, MU_EPROTO, "%s: added_tokens: an entry has no id or content",
			             t->path);
		max = id > max ? id : max;
	}
	if (rc == 0 && vocab < max + 1)
		rc = mu__why(why, wl, MU_EPROTO, "%s: config.json vocab_size %lld < the tokenizer's "
		             "%lld ids", t->path, (long long)vocab, (long long)max + 1);
	t->n = (size_t)vocab;
	if (rc == 0) {
		t->tokens = mu__calloc(t->n, sizeof(*t->tokens));
		t->types = mu__calloc(t->n, sizeof(*t->types));
		t->pads = mu__calloc(t->n, sizeof(*t->pads));
		by_id = mu__calloc((size_t)max + 1, sizeof(*by_id));
		seen = mu__calloc((size_t)max + 1, 1);
		if (t->tokens == NULL || t->types == NULL || t->pads == NULL || by_id == NULL ||
		    seen == NULL)
			rc = MU_ENOMEM;
	}
	/* Python's dict: an added id's last entry; its content joins the
	 * vocabulary unless there already */
	if (rc != 0)
		added = v = NULL;
	cJSON_ArrayForEach(e, added)
		by_id[(size_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble] = e;
	cJSON_ArrayForEach(e, v) {
		id = lookup(&vm, e->string, strlen(e->string));
		t->tokens[id] = e->string;
	}
	cJSON_ArrayForEach(e, added) {
		const char *c;

		id = (int64_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
		if (seen[id])
			continue;
		seen[id] = 1;
		c = cJSON_GetObjectItemCaseSensitive(by_id[id], "content")->valuestring;
		if (lookup(&vm, c, strlen(c)) < 0) {
			if ((rc = mu__strmap_put(&vm, c, strlen(c), id_val((size_t)id), NULL)) != 0)
				break;
			t->tokens[id] = c;
		}
	}
	unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
	for (size_t i = 0; rc == 0 && i < t->n; i++) {
		const cJSON *a = (int64_t)i <= max ? by_id[i] : NULL;

		if (t->tokens[i] == NULL) {
			char pad[32];

			snprintf(pad, sizeof(pad), "[PAD%zu]", i);
			if ((t->pads[i] = mu__strdup(pad)) == NULL)
				rc = MU_ENOMEM;
			t->tokens[i] = t->pads[i];
			t->types[i] = UNUSED;
		} else if (a != NULL) {
			t->types[i] = truthy(cJSON_GetObjectItemCaseSensitive(a, "special"))
			                  ? CONTROL : USER_DEFINED;
			if (t->spm && cJSON_IsString(unk) && strcmp(t->tokens[i], unk->valuestring) == 0)
				t->types[i] = UNKNOWN;
		} else {
			t->types[i] = t->spm && is_byte_piece(t->tokens[i]) ? BYTE : NORMAL;
		}
	}
	for (size_t i = 0; rc == 0 && i < t->n; i++)
		rc = mu__strmap_put(&t->ids, t->tokens[i], strlen(t->tokens[i]), id_val(i), NULL);
	mu__free(by_id);
	mu__free(seen);
	mu__strmap_free(&vm, NULL);
	return rc;
}

/* model.merges: "a b" strings or [a, b] pairs. */
static int read_merges(tk_t *t, const cJSON *model, char *why, size_t wl)
{
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(model, "merges"), *e;
	size_t i = 0;

	if (m == NULL)
		return 0;
	if (!cJSON_IsArray(m))
		return mu__why(why, wl, MU_EPROTO, "%s: model.merges is not a list", t->path);
	t->nmerges = (size_t)cJSON_GetArraySize(m);
	if ((t->merges = mu__calloc(t->nmerges ? t->nmerges : 1, sizeof(*t->merges))) == NULL)
		return MU_ENOMEM;
	cJSON_ArrayForEach(e, m) {
		pair_t *p = &t->merges[i];
		const char *sp;

		if (cJSON_IsString(e) && (sp = strchr(e->valuestring, ' ')) != NULL) {
			p->a = e->valuestring;
			p->alen = (size_t)(sp - e->valuestring);
			p->b = sp + 1;
		} else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
		           cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
		           cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
			p->a = cJSON_GetArrayItem(e, 0)->valuestring;
			p->alen = strlen(p->a);
			p->b = cJSON_GetArrayItem(e, 1)->valuestring;
		} else {
			return mu__why(why, wl, MU_EPROTO, "%s: model.merges[%zu] is not \"a b\" or "
			               "[a, b]", t->path, i);
		}
		p->blen = strlen(p->b);
		i++;
	}
	return 0;
}

/* A merge of spm_merges: the piece's score, its order, the halves' ids. */
typedef struct {
	float score;
	size_t seq;
	size_t a, b;
} smerge_t;

static int by_score(const void *x, const void *y)
{
	const smerge_t *p = x, *q = y;

	if (p->score != q->score)
		return p->score > q->score ? -1 : 1;
	return p->seq < q->seq ? -1 : p->seq > q->seq;
}

/* Do scores imply exactly t's merges (tools/llm_tok.py spm_merges)? */
static int spm_merges_equal(const tk_t *t, const float *scores, int *equal)
{
	smerge_t *m = NULL, *nm;
	size_t n = 0, cap = 0;

	*equal = 0;
	for (size_t i = 0; i < t->n; i++) {
		const char *p = t->tokens[i];
		size_t len = strlen(p), first = n;

		for (size_t k = 1; k < len; k++) {
			int64_t a, b;

			if (((unsigned char)p[k] & 0xC0) == 0x80)
				continue; /* a split between code points only */
			if ((a = lookup(&t->ids, p, k)) < 0 || (b = lookup(&t->ids, p + k, len - k)) < 0)
				continue;
			if (n == cap) {
				cap = cap ? cap * 2 : 1024;
				if ((nm = mu__realloc(m, cap * sizeof(*m))) == NULL) {
					mu__free(m);
					return MU_ENOMEM;
				}
				m = nm;
			}
			m[n++] = (smerge_t){scores[i], 0, (size_t)a, (size_t)b};
		}
		/* a piece's splits by the ids of their halves */
		for (size_t x = first + 1; x < n; x++)
			for (size_t y = x; y > first && (m[y - 1].a > m[y].a ||
			                                 (m[y - 1].a == m[y].a && m[y - 1].b > m[y].b)); y--) {
				smerge_t s = m[y];

				m[y] = m[y - 1];
				m[y - 1] = s;
			}
	}
	for (size_t i = 0; i < n; i++)
		m[i].seq = i;
	if (n > 0)
		qsort(m, n, sizeof(*m), by_score);
	*equal = n == t->nmerges;
	for (size_t i = 0; *equal && i < n; i++) {
		const pair_t *p = &t->merges[i];
		const char *a = t->tokens[m[i].a], *b = t->tokens[m[i].b];

		*equal = strlen(a) == p->alen && memcmp(a, p->a, p->alen) == 0 &&
		         strlen(b) == p->blen && memcmp(b, p->b, p->blen) == 0;
	}
	mu__free(m);
	return 0;
}

/* tools/llm_tok.py spm_scores. */
static int spm_scores(const tk_t *t, float *scores)
{
	size_t first = 0;
	int have = 0, equal, rc;
	mu__strmap_t rank;
	char *cat = NULL;

	for (size_t i = 0; i < t->n; i++) {
		scores[i] = 0.0f;
		if (t->types[i] == NORMAL || t->types[i] == USER_DEFINED) {
			first = have ? first : i;
			have = 1;
			scores[i] = (float)-(double)(i - first);
		}
	}
	if ((rc = spm_merges_equal(t, scores, &equal)) != 0 || equal)
		return rc;
	mu__strmap_init(&rank);
	for (size_t r = 0; rc == 0 && r < t->nmerges; r++) {
		const pair_t *p = &t->merges[r];

		if ((cat = mu__malloc(p->alen + p->blen + 1)) == NULL) {
			rc = MU_ENOMEM;
			break;
		}
		memcpy(cat, p->a, p->alen);
		memcpy(cat + p->alen, p->b, p->blen);
		if (lookup(&rank, cat, p->alen + p->blen) < 0)
			rc = mu__strmap_put(&rank, cat, p->alen + p->blen, id_val(r), NULL);
		mu__free(cat);
	}
	for (size_t i = 0; rc == 0 && i < t->n; i++)
		if (t->types[i] == NORMAL || t->types[i] == USER_DEFINED) {
			int64_t r = lookup(&rank, t->tokens[i], strlen(t->tokens[i]));

			scores[i] = (float)-(double)(r >= 0 ? (uint64_t)r : t->nmerges + i);
		}
	mu__strmap_free(&rank, NULL);
	return rc;
}

/* The regexes of a pre_tokenizer (tools/llm_tok.py _regexes), counted
 * into *n, the last kept in *re. */
static void regexes(const cJSON *pre, int depth, size_t *n, const char **re)
{
	const cJSON *ty = cJSON_GetObjectItemCaseSensitive(pre, "type"), *e, *r;

	if (!cJSON_IsString(ty) || depth > 8)
		return;
	if (strcmp(ty->valuestring, "Sequence") == 0) {
		cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers"))
			regexes(e, depth + 1, n, re);
	} else if (strcmp(ty->valuestring, "Split") == 0) {
		r = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(pre, "pattern"),
		                                     "Regex");
		if (cJSON_IsString(r) && r->valuestring[0] != '\0') {
			*re = r->valuestring;
			(*n)++;
		}
	} else if (strcmp(ty->valuestring, "ByteLevel") == 0 &&
	           !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(pre, "use_regex"))) {
		*re = pre_names[2].re;
		(*n)++;
	}
}

static int pre_name(const tk_t *t, const cJSON *tok, const char **name, char *why, size_t wl)
{
	const char *re = NULL;
	size_t n = 0;

	regexes(cJSON_GetObjectItemCaseSensitive(tok, "pre_tokenizer"), 0, &n, &re);
	for (size_t i = 0; n == 1 && i < sizeof(pre_names) / sizeof(pre_names[0]); i++)
		if (strcmp(re, pre_names[i].re) == 0) {
			*name = pre_names[i].name;
			return 0;
		}
	return mu__why(why, wl, MU_EPROTO, "%s: pre_tokenizer: %zu regexes%s%.80s%s; no llama.cpp "
	               "pre-tokenizer name known for it", t->path, n, n ? " (" : "",
	               n ? re : "", n ? ")" : "");
}

/* A special token's id by its name in tokenizer_config.json, or -1. */
static int64_t named_id(const tk_t *t, const cJSON *tc, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(tc, key);

	if (cJSON_IsObject(v))
		v = cJSON_GetObjectItemCaseSensitive(v, "content");
	return cJSON_IsString(v) ? lookup(&t->ids, v->valuestring, strlen(v->valuestring)) : -1;
}

/* config.json's id (the first of a list; -2 when absent, null or an
 * empty list: the tokenizer's then), or -1 when not an id. */
static int64_t cfg_id(const cJSON *cfg, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);

	if (cJSON_IsArray(v))
		v = cJSON_GetArrayItem(v, 0);
	if (v == NULL || cJSON_IsNull(v))
		return -2;
	return mu__json_is_int(v, 0, UINT32_MAX) ? (int64_t)v->valuedouble : -1;
}

/* The keys, in gguf_tokenizer_metadata's order. */
static void write_keys(mu__kvw_t *w, const tk_t *t, const cJSON *model, const cJSON *tc,
                       const cJSON *cfg, const char *pre, const float *scores)
{
	static const char *const ids[][3] = {{"bos", "bos_token_id", "bos_token"},
	                                     {"eos", "eos_token_id", "eos_token"}};
	static const char *const keys[] = {"add_bos_token", "add_eos_token"};
	int64_t unk, pad;
	char k[64];

	mu__kvw_str(w, "tokenizer.ggml.model", t->spm ? "llama" : "gpt2", t->spm ? 5 : 4);
	mu__kvw_str(w, "tokenizer.ggml.pre", pre, strlen(pre));
	mu__kvw_arr_str(w, "tokenizer.ggml.tokens", t->n);
	for (size_t i = 0; i < t->n; i++)
		mu__kvw_elem_str(w, t->tokens[i], strlen(t->tokens[i]));
	if (t->spm)
		mu__kvw_arr_u32(w, "tokenizer.ggml.scores", MU__GGUF_F32, (const uint32_t *)scores,
		                t->n);
	mu__kvw_arr_u32(w, "tokenizer.ggml.token_type", MU__GGUF_I32, (const uint32_t *)t->types,
	                t->n);
	if (!t->spm) {
		mu__kvw_arr_str(w, "tokenizer.ggml.merges", t->nmerges);
		for (size_t i = 0; i < t->nmerges; i++) {
			char *s = mu__malloc(t->merges[i].alen + t->merges[i].blen + 2);

			if (s == NULL) {
				w->rc = w->rc ? w->rc : MU_ENOMEM;
				break;
			}
			memcpy(s, t->merges[i].a, t->merges[i].alen);
			s[t->merges[i].alen] = ' ';
			memcpy(s + t->merges[i].alen + 1, t->merges[i].b, t->merges[i].blen);
			mu__kvw_elem_str(w, s, t->merges[i].alen + t->merges[i].blen + 1);
			mu__free(s);
		}
	}
	for (int i = 0; i < 2; i++) {
		int64_t id = cfg_id(cfg, ids[i][1]);

		id = id == -2 ? named_id(t, tc, ids[i][2]) : id;

		snprintf(k, sizeof(k), "tokenizer.ggml.%s_token_id", ids[i][0]);
		if (id >= 0)
			mu__kvw_u32(w, k, (uint32_t)id);
	}
	unk = named_id(t, tc, "unk_token");
	if (t->spm && unk < 0 && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(model, "unk_token")))
		unk = lookup(&t->ids, cJSON_GetObjectItemCaseSensitive(model, "unk_token")->valuestring,
		             strlen(cJSON_GetObjectItemCaseSensitive(model, "unk_token")->valuestring));
	if (unk >= 0)
		mu__kvw_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)unk);
	if ((pad = named_id(t, tc, "pad_token")) >= 0)
		mu__kvw_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)pad);
	for (int i = 0; i < 2; i++)
		if (cJSON_GetObjectItemCaseSensitive(tc, keys[i]) != NULL) {
			snprintf(k, sizeof(k), "tokenizer.ggml.%s", keys[i]);
			mu__kvw_bool(w, k, truthy(cJSON_GetObjectItemCaseSensitive(tc, keys[i])));
		}
}

static int read_json(const char *path, int optional, cJSON **out, char *why, size_t wl)
{
	mu__buf_t b;
	int rc = mu__buf_read_file(&b, path, TOK_MAX, why, wl);

	*out = NULL;
	if (rc == -ENOENT && optional)
		return 0;
	if (rc != 0)
		return rc;
	rc = mu__json_parse(b.data != NULL ? b.data : "", b.len, out);
	mu__buf_free(&b);
	return rc == MU_EJSON ? mu__why(why, wl, rc, "%.300s is not valid JSON", path) : rc;
}

static int build(mu__kvw_t *w, tk_t *t, const cJSON *tok, const cJSON *tc, const cJSON *cfg,
                 int64_t vocab, char *why, size_t wl)
{
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(tok, "model");
	const cJSON *ty = cJSON_GetObjectItemCaseSensitive(model, "type");
	const char *pre = "default";
	float *scores = NULL;
	int rc;

	if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "BPE") != 0)
		return mu__why(why, wl, MU_EPROTO, "%s: model.type \"%.40s\": only BPE", t->path,
		               cJSON_IsString(ty) ? ty->valuestring : "?");
	t->spm = truthy(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
	rc = read_vocab(t, model, cJSON_GetObjectItemCaseSensitive(tok, "added_tokens"), vocab, why,
	                wl);
	if (rc == 0)
		rc = read_merges(t, model, why, wl);
	if (rc == 0 && t->spm)
		rc = (scores = mu__calloc(t->n ? t->n : 1, sizeof(*scores))) == NULL ? MU_ENOMEM
		                                                                   : spm_scores(t, scores);
	else if (rc == 0)
		rc = pre_name(t, tok, &pre, why, wl);
	if (rc == 0)
		write_keys(w, t, model, tc, cfg, pre, scores);
	mu__free(scores);
	return rc != 0 ? rc : w->rc;
}

int mu__hf_gguf_tokenizer(mu__kvw_t *w, const char *dir, const cJSON *cfg, int64_t vocab,
                          char *why, size_t wl)
{
	char path[4096], cpath[4096];
	cJSON *tok = NULL, *tc = NULL;
	tk_t t;
	int rc;

	memset(&t, 0, sizeof(t));
	mu__strmap_init(&t.ids);
	snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
	snprintf(cpath, sizeof(cpath), "%s/tokenizer_config.json", dir);
	t.path = path;
	rc = read_json(path, 0, &tok, why, wl);
	if (rc == -ENOENT)
		rc = mu__why(why, wl, rc, "%.300s: no tokenizer.json", dir);
	if (rc == 0)
		rc = read_json(cpath, 1, &tc, why, wl);
	if (rc == 0 && (!cJSON_IsObject(tok) || (tc != NULL && !cJSON_IsObject(tc))))
		rc = mu__why(why, wl, MU_EPROTO, "%s is not a JSON object",
		             !cJSON_IsObject(tok) ? path : cpath);
	if (rc == 0)
		rc = build(w, &t, tok, tc, cfg, vocab, why, wl);
	for (size_t i = 0; t.pads != NULL && i < t.n; i++)
		mu__free(t.pads[i]);
	mu__free(t.pads);
	mu__free(t.tokens);
	mu__free(t.types);
	mu__free(t.merges);
	mu__strmap_free(&t.ids, NULL);
	cJSON_Delete(tok);
	cJSON_Delete(tc);
	return rc;
}
