/* SPDX-License-Identifier: MIT */
/*
 * Tokenizers as include/muster/llm.h hands them out: a model's own (its
 * handle's) or one built from a tokenizer's files alone, over tok/'s.
 */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/error_int.h"
#include "core/json_int.h"
#include "pipeline/llm/handle_int.h"

/* A handle over t (taken), or MU_ENOMEM with t freed. */
static int wrap(int rc, mu__tok_t *t, mu_tokenizer_t **out, char *err, size_t el)
{
	if (rc != 0)
		return rc;
	if ((*out = mu__calloc(1, sizeof(**out))) == NULL) {
		mu__tok_free(t);
		return mu__why(err, el, MU_ENOMEM, "out of memory");
	}
	(*out)->t = t;
	return 0;
}

int mu_tokenizer_from_hf(const char *json, size_t len, const char *config, size_t config_len,
                         mu_tokenizer_t **out, char *err, size_t el)
{
	mu__tok_t *t = NULL;
	int rc = mu__tok_from_hf(json, len, config, config_len, &t, err, el);

	*out = NULL;
	return wrap(rc, t, out, err, el);
}

int mu_tokenizer_from_llama2c(const void *data, size_t len, int32_t vocab, mu_tokenizer_t **out,
                              char *err, size_t el)
{
	mu__tok_t *t = NULL;
	int rc = mu__tok_from_llama2c(data, len, vocab, &t, err, el);

	*out = NULL;
	return wrap(rc, t, out, err, el);
}

/* ---- a GGUF's tokenizer metadata as JSON ---- */

static const cJSON *meta(const cJSON *m, const char *key)
{
	char k[96];

	snprintf(k, sizeof(k), "tokenizer.ggml.%s", key);
	return cJSON_GetObjectItemCaseSensitive(m, k);
}

static int32_t meta_id(const cJSON *m, const char *key)
{
	const cJSON *v = meta(m, key);

	return mu__json_is_int(v, 0, INT32_MAX) ? (int32_t)v->valuedouble : -1;
}

static int meta_flag(const cJSON *m, const char *key)
{
	const cJSON *v = meta(m, key);

	return cJSON_IsBool(v) ? cJSON_IsTrue(v) : -1;
}

/* The strings of an array (pointing into it), or NULL with *n = 0. */
static const char **meta_strings(const cJSON *a, size_t *n)
{
	const char **v;
	const cJSON *c;
	size_t i = 0;

	*n = 0;
	if (!cJSON_IsArray(a) || (v = mu__calloc((size_t)cJSON_GetArraySize(a) + 1, sizeof(*v))) == NULL)
		return NULL;
	cJSON_ArrayForEach(c, a) {
		if (!cJSON_IsString(c)) {
			mu__free(v);
			return NULL;
		}
		v[i++] = c->valuestring;
	}
	*n = i;
	return v;
}

/* The numbers of m's key as n floats, or NULL when it is not that. */
static float *meta_floats(const cJSON *m, const char *key, size_t n)
{
	const cJSON *a = meta(m, key), *c;
	float *v;
	size_t k = 0;

	if (a == NULL || cJSON_GetArraySize(a) != (int)n || (v = mu__calloc(n + 1, sizeof(*v))) == NULL)
		return NULL;
	cJSON_ArrayForEach(c, a) v[k++] = (float)c->valuedouble;
	return v;
}

static int32_t *meta_ints(const cJSON *m, const char *key, size_t n)
{
	const cJSON *a = meta(m, key), *c;
	int32_t *v;
	size_t k = 0;

	if (a == NULL || cJSON_GetArraySize(a) != (int)n || (v = mu__calloc(n + 1, sizeof(*v))) == NULL)
		return NULL;
	cJSON_ArrayForEach(c, a) v[k++] = (int32_t)c->valuedouble;
	return v;
}

/* Built the way a GGUF file's tokenizer is (mu__tok_from_vocab). */
int mu_tokenizer_from_gguf_meta(const char *json, size_t len, mu_tokenizer_t **out, char *err,
                                size_t el)
{
	cJSON *m = NULL;
	mu__tok_vocab_t v;
	const cJSON *c;
	float *scores;
	int32_t *types;
	mu__tok_t *t = NULL;
	int rc = mu__json_parse(json, len, &m);

	*out = NULL;
	memset(&v, 0, sizeof(v));
	if (rc != 0 || !cJSON_IsObject(m)) {
		cJSON_Delete(m);
		return mu__why(err, el, rc != 0 ? rc : MU_EPROTO, "not a JSON object");
	}
	c = meta(m, "model");
	v.model = cJSON_IsString(c) ? c->valuestring : NULL;
	c = meta(m, "pre");
	v.pre = cJSON_IsString(c) ? c->valuestring : NULL;
	v.tokens = meta_strings(meta(m, "tokens"), &v.n);
	v.merges = meta_strings(meta(m, "merges"), &v.nmerges);
	v.scores = scores = meta_floats(m, "scores", v.n);
	v.types = types = meta_ints(m, "token_type", v.n);
	v.bos = meta_id(m, "bos_token_id");
	v.eos = meta_id(m, "eos_token_id");
	v.unk = meta_id(m, "unknown_token_id");
	v.pad = meta_id(m, "padding_token_id");
	v.add_bos = meta_flag(m, "add_bos_token");
	v.add_eos = meta_flag(m, "add_eos_token");
	v.no_space_prefix = meta_flag(m, "add_space_prefix") == 0;
	c = cJSON_GetObjectItemCaseSensitive(m, "tokenizer.chat_template");
	v.chat_template = cJSON_IsString(c) ? c->valuestring : NULL;
	rc = mu__tok_from_vocab(&v, &t, err, el);
	mu__free((void *)v.tokens);
	mu__free((void *)v.merges);
	mu__free(scores);
	mu__free(types);
	cJSON_Delete(m);
	return wrap(rc, t, out, err, el);
}

/* ---- using one ---- */

void mu_tokenizer_free(mu_tokenizer_t *t)
{
	if (t == NULL)
		return;
	mu__tok_free(t->t);
	mu__free(t);
}

int mu_tokenizer_encode(const mu_tokenizer_t *t, const char *text, size_t len, int flags,
                        int32_t **ids, size_t *n)
{
	return mu__tok_encode(t->t, text, len,
	                      ((flags & MU_TOK_BOS) ? MU__TOK_BOS : 0) |
	                      ((flags & MU_TOK_SPECIAL) ? MU__TOK_SPECIAL : 0), ids, n);
}

int mu_tokenizer_decode(const mu_tokenizer_t *t, const int32_t *ids, size_t n, int keep_special,
                        char **text, size_t *len)
{
	return mu__tok_decode(t->t, ids, n, keep_special, text, len);
}

int32_t mu_tokenizer_vocab(const mu_tokenizer_t *t)
{
	return mu__tok_vocab_size(t->t);
}

int32_t mu_tokenizer_bos(const mu_tokenizer_t *t)
{
	return mu__tok_bos(t->t);
}
