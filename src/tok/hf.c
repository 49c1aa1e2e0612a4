/* SPDX-License-Identifier: MIT */
/*
 * mu__tok_from_hf: an HF tokenizer.json with a BPE model (and, when given,
 * its tokenizer_config.json) into a tokenizer. This file reads the model,
 * vocabulary, merges, added tokens and config; tok/hf_pipe.c reads the
 * normalizer, pre-tokenizer, decoder and post-processor. Fields that only
 * matter for batches of training data ("truncation", "padding") are
 * ignored; anything that would change the ids or the text and is not
 * supported is refused with its name and value.
 */
#include <stdio.h>
#include <string.h>

#include "core/alloc_int.h"
#include "core/error_int.h"
#include "muster/common.h"
#include "tok/hf_int.h"

/* model.*: a BPE we can run exactly. */
static int check_model(const cJSON *m, char *why, size_t wl)
{
	static const char *const empty_ok[] = {"continuing_subword_prefix", "end_of_word_suffix"};
	const cJSON *v;

	if (!cJSON_IsObject(m))
		return mu__tok_hf_bad(why, wl, "", "model", m);
	v = cJSON_GetObjectItemCaseSensitive(m, "type");
	if (!cJSON_IsString(v) || strcmp(v->valuestring, "BPE") != 0)
		return mu__tok_hf_bad(why, wl, "model", "type", v);
	v = cJSON_GetObjectItemCaseSensitive(m, "dropout");
	if (v != NULL && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0))
		return mu__tok_hf_bad(why, wl, "model", "dropout", v);
	for (int i = 0; i < 2; i++) {
		v = cJSON_GetObjectItemCaseSensitive(m, empty_ok[i]);
		if (v != NULL && !cJSON_IsNull(v) && !(cJSON_IsString(v) && v->valuestring[0] == '\0'))
			return mu__tok_hf_bad(why, wl, "model", empty_ok[i], v);
	}
	v = cJSON_GetObjectItemCaseSensitive(m, "unk_token");
	if (v != NULL && !cJSON_IsNull(v) && !cJSON_IsString(v))
		return mu__tok_hf_bad(why, wl, "model", "unk_token", v);
	if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(m, "vocab")))
		return mu__tok_hf_bad(why, wl, "model", "vocab", cJSON_GetObjectItemCaseSensitive(m, "vocab"));
	if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(m, "merges")))
		return mu__tok_hf_bad(why, wl, "model", "merges", cJSON_GetObjectItemCaseSensitive(m, "merges"));
	return 0;
}

/* The vocabulary size: one past the largest id of the vocabulary and the
 * added tokens (which may lie beyond it, as Llama 3's do). */
static int count_ids(const cJSON *vocab, const cJSON *added, int32_t *n, char *why, size_t wl)
{
	const cJSON *c;
	double max = -1;

	cJSON_ArrayForEach(c, vocab) {
		if (!mu__json_is_int(c, 0, MU__TOK_MAX_VOCAB - 1))
			return mu__why(why, wl, MU_EPROTO, "model.vocab[\"%.80s\"]: not an id below %d",
			               c->string, MU__TOK_MAX_VOCAB);
		max = c->valuedouble > max ? c->valuedouble : max;
	}
	if (added != NULL && !cJSON_IsNull(added) && !cJSON_IsArray(added))
		return mu__tok_hf_bad(why, wl, "", "added_tokens", added);
	cJSON_ArrayForEach(c, added) {
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");

		if (!mu__json_is_int(id, 0, MU__TOK_MAX_VOCAB - 1))
			return mu__tok_hf_bad(why, wl, "added_tokens[]", "id", id);
		max = id->valuedouble > max ? id->valuedouble : max;
	}
	if (max < 0)
		return mu__why(why, wl, MU_EPROTO, "model.vocab is empty");
	*n = (int32_t)max + 1;
	return 0;
}

static int load_vocab(mu__tok_t *t, const cJSON *model, char *why, size_t wl)
{
	const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token"), *c;
	int rc;

	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(model, "vocab")) {
		int32_t id = (int32_t)c->valuedouble;
		size_t len = strlen(c->string);

		if (t->attr[id] & MU__TOK_A_PRESENT)
			return mu__why(why, wl, MU_EPROTO, "model.vocab: id %d is given twice", (int)id);
		if (len == 0 || len > MU__TOK_MAX_PIECE)
			return mu__why(why, wl, MU_EPROTO, "model.vocab: id %d has a piece of %zu bytes",
			               (int)id, len);
		if ((rc = mu__tok_set_piece(t, id, c->string, len)) != 0)
			return rc;
		if (cJSON_IsString(unk) && strcmp(unk->valuestring, c->string) == 0)
			t->unk = id;
	}
	if (cJSON_IsString(unk) && t->unk < 0)
		return mu__why(why, wl, MU_EPROTO, "model.unk_token \"%.80s\" is not in the vocabulary",
		               unk->valuestring);
	return 0;
}

static int load_added(mu__tok_t *t, const cJSON *added, char *why, size_t wl)
{
	const cJSON *c;
	int i = 0, rc;

	cJSON_ArrayForEach(c, added) {
		const cJSON *content = cJSON_GetObjectItemCaseSensitive(c, "content");
		int32_t id = (int32_t)cJSON_GetObjectItemCaseSensitive(c, "id")->valuedouble;
		char path[48];
		int special, lstrip, rstrip, norm, single;

		snprintf(path, sizeof(path), "added_tokens[%d]", i++);
		if (!cJSON_IsString(content) || content->valuestring[0] == '\0' ||
		    strlen(content->valuestring) > MU__TOK_MAX_PIECE)
			return mu__tok_hf_bad(why, wl, path, "content", content);
		if ((special = mu__tok_hf_bool(c, "special", 0, path, why, wl)) < 0 ||
		    (lstrip = mu__tok_hf_bool(c, "lstrip", 0, path, why, wl)) < 0 ||
		    (rstrip = mu__tok_hf_bool(c, "rstrip", 0, path, why, wl)) < 0 ||
		    (norm = mu__tok_hf_bool(c, "normalized", !special, path, why, wl)) < 0 ||
		    (single = mu__tok_hf_bool(c, "single_word", 0, path, why, wl)) < 0)
			return MU_EPROTO;
		if (single)
			return mu__tok_hf_bad(why, wl, path, "single_word",
			                      cJSON_GetObjectItemCaseSensitive(c, "single_word"));
		rc = mu__tok_add_added(t, id, content->valuestring, strlen(content->valuestring),
		                       special, lstrip, rstrip, norm);
		if (rc != 0)
			return rc;
	}
	return 0;
}

static int load_merges(mu__tok_t *t, const cJSON *merges, char *why, size_t wl)
{
	const cJSON *c;
	uint32_t rank = 0;
	int rc;

	if (cJSON_GetArraySize(merges) > MU__TOK_MAX_MERGES)
		return mu__why(why, wl, MU_ETOOBIG, "model.merges: more than %d", MU__TOK_MAX_MERGES);
	cJSON_ArrayForEach(c, merges) {
		const char *a = NULL, *b = NULL, *sp;
		size_t alen = 0, blen = 0;
		char inner[200];

		if (cJSON_IsString(c) && (sp = strchr(c->valuestring, ' ')) != NULL &&
		    strchr(sp + 1, ' ') == NULL) { /* "a b": exactly one space */
			a = c->valuestring;
			alen = (size_t)(sp - a);
			b = sp + 1;
			blen = strlen(b);
		} else if (cJSON_GetArraySize(c) == 2 && cJSON_IsString(cJSON_GetArrayItem(c, 0)) &&
		           cJSON_IsString(cJSON_GetArrayItem(c, 1))) { /* ["a", "b"] */
			a = cJSON_GetArrayItem(c, 0)->valuestring;
			b = cJSON_GetArrayItem(c, 1)->valuestring;
			alen = strlen(a);
			blen = strlen(b);
		}
		if (a == NULL || alen == 0 || blen == 0)
			return mu__why(why, wl, MU_EPROTO, "model.merges[%u] is not \"a b\" or [\"a\", \"b\"]",
			               (unsigned)rank);
		rc = mu__tok_add_merge(t, a, alen, b, blen, rank, inner, sizeof(inner));
		if (rc == MU_EPROTO)
			return mu__why(why, wl, rc, "model.merges[%u]: %s", (unsigned)rank, inner);
		if (rc != 0)
			return rc;
		rank++;
	}
	return 0;
}

/* ---- tokenizer_config.json ---- */

/* The id of a token named by its text: an added token's content, else a
 * vocabulary piece; -1 when neither. */
static int32_t id_of_text(const mu__tok_t *t, const char *s)
{
	size_t len = strlen(s);

	for (size_t i = 0; i < t->nadded; i++)
		if (t->out[t->added[i].id].len == len &&
		    memcmp(t->arena.data + t->out[t->added[i].id].off, s, len) == 0)
			return t->added[i].id;
	for (int32_t i = 0; i < t->n; i++)
		if ((t->attr[i] & MU__TOK_A_PRESENT) && t->piece[i].len == len &&
		    memcmp(t->arena.data + t->piece[i].off, s, len) == 0)
			return i;
	return -1;
}

/* bos_token / eos_token: a string, or an object with "content". */
static int32_t config_token(const mu__tok_t *t, const cJSON *cfg, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, name);

	if (cJSON_IsObject(v))
		v = cJSON_GetObjectItemCaseSensitive(v, "content");
	return cJSON_IsString(v) && v->valuestring[0] != '\0' ? id_of_text(t, v->valuestring) : -1;
}

/* add_bos_token / add_eos_token, when the config says, decide whether the
 * template starts with BOS / ends with EOS (as transformers' Llama
 * tokenizers rebuild their template from them). */
static int config_add(mu__tok_t *t, const cJSON *cfg, int32_t bos, int32_t eos, char *why,
                      size_t wl)
{
	int add_bos = mu__tok_hf_bool(cfg, "add_bos_token", -2, "tokenizer_config", why, wl);
	int add_eos = mu__tok_hf_bool(cfg, "add_eos_token", -2, "tokenizer_config", why, wl);
	size_t cap;

	if (add_bos == -1 || add_eos == -1)
		return MU_EPROTO;
	if (add_bos == 1 && bos >= 0 && (t->nprefix == 0 || t->prefix[0] != bos)) {
		cap = t->nprefix;
		if (mu__tok_push_id(&t->prefix, &t->nprefix, &cap, bos) != 0)
			return MU_ENOMEM;
		memmove(t->prefix + 1, t->prefix, (t->nprefix - 1) * sizeof(*t->prefix));
		t->prefix[0] = bos;
	} else if (add_bos == 0 && t->nprefix > 0 && t->prefix[0] == bos) {
		memmove(t->prefix, t->prefix + 1, --t->nprefix * sizeof(*t->prefix));
	}
	if (add_eos == 1 && eos >= 0 && (t->nsuffix == 0 || t->suffix[t->nsuffix - 1] != eos)) {
		cap = t->nsuffix;
		if (mu__tok_push_id(&t->suffix, &t->nsuffix, &cap, eos) != 0)
			return MU_ENOMEM;
	} else if (add_eos == 0 && t->nsuffix > 0 && t->suffix[t->nsuffix - 1] == eos) {
		t->nsuffix--;
	}
	return 0;
}

/* chat_template: a string, or a list of {name, template} ("default" or the
 * first). */
static int config_template(mu__tok_t *t, const cJSON *cfg)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template"), *c;

	if (cJSON_IsArray(v)) {
		const cJSON *pick = NULL;

		cJSON_ArrayForEach(c, v) {
			const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "name");

			if (pick == NULL || (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0))
				pick = c;
		}
		v = cJSON_GetObjectItemCaseSensitive(pick, "template");
	}
	if (!cJSON_IsString(v))
		return 0;
	t->chat_template = mu__strdup(v->valuestring);
	return t->chat_template == NULL ? MU_ENOMEM : 0;
}

static int load_config(mu__tok_t *t, const cJSON *cfg, char *why, size_t wl)
{
	int32_t bos = config_token(t, cfg, "bos_token"), eos = config_token(t, cfg, "eos_token");
	int rc;

	if ((rc = config_add(t, cfg, bos, eos, why, wl)) != 0)
		return rc;
	t->bos = bos >= 0 ? bos : t->nprefix > 0 ? t->prefix[0] : -1;
	if (eos >= 0 && (rc = mu__tok_add_eos(t, &eos, 1)) != 0)
		return rc;
	return config_template(t, cfg);
}

static int parse(const char *text, size_t len, const char *name, cJSON **out, char *why,
                 size_t wl)
{
	int rc = mu__json_parse(text, len, out);

	if (rc == MU_EJSON)
		return mu__why(why, wl, rc, "%s is not valid JSON", name);
	if (rc == 0 && !cJSON_IsObject(*out))
		return mu__why(why, wl, MU_EPROTO, "%s is not a JSON object", name);
	return rc;
}

static int build(const cJSON *root, const cJSON *cfg, mu__tok_t **out, char *why, size_t wl)
{
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
	const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
	mu__tok_dec_t dec;
	mu__tok_t *t = NULL;
	int32_t n = 0;
	int rc, f;

	if ((rc = check_model(model, why, wl)) != 0 ||
	    (rc = count_ids(cJSON_GetObjectItemCaseSensitive(model, "vocab"), added, &n, why, wl)) != 0)
		return rc;
	if ((rc = mu__tok_new(n, MU__TOK_RANK, 0, &t)) != 0)
		return mu__why(why, wl, rc, "cannot hold a vocabulary of %d ids", (int)n);
	*out = t;
	if ((rc = mu__tok_hf_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"),
	                                "normalizer", 0, why, wl)) != 0 ||
	    (rc = mu__tok_hf_pretokenizer(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"),
	                                  "pre_tokenizer", 0, why, wl)) != 0 ||
	    (rc = load_vocab(t, model, why, wl)) != 0)
		return rc;
	if ((f = mu__tok_hf_bool(model, "fuse_unk", 0, "model", why, wl)) < 0)
		return MU_EPROTO;
	t->fuse_unk = f;
	if ((f = mu__tok_hf_bool(model, "byte_fallback", 0, "model", why, wl)) < 0)
		return MU_EPROTO;
	t->byte_fallback = f;
	if ((f = mu__tok_hf_bool(model, "ignore_merges", 0, "model", why, wl)) < 0)
		return MU_EPROTO;
	t->ignore_merges = f;
	if ((rc = load_added(t, added, why, wl)) != 0 || (rc = mu__tok_index(t)) != 0 ||
	    (rc = load_merges(t, cJSON_GetObjectItemCaseSensitive(model, "merges"), why, wl)) != 0 ||
	    (rc = mu__tok_hf_decoder(cJSON_GetObjectItemCaseSensitive(root, "decoder"), &dec, why,
	                             wl)) != 0 ||
	    (rc = mu__tok_hf_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), why,
	                          wl)) != 0 ||
	    (rc = mu__tok_finish(t, &dec, why, wl)) != 0)
		return rc;
	if (cfg != NULL)
		return load_config(t, cfg, why, wl);
	t->bos = t->nprefix > 0 ? t->prefix[0] : -1;
	return 0;
}

int mu__tok_from_hf(const char *json, size_t len, const char *config, size_t config_len,
                    mu__tok_t **out, char *why, size_t wl)
{
	cJSON *root = NULL, *cfg = NULL;
	mu__tok_t *t = NULL;
	int rc;

	*out = NULL;
	rc = parse(json, len, "tokenizer.json", &root, why, wl);
	if (rc == 0 && config != NULL)
		rc = parse(config, config_len, "tokenizer_config.json", &cfg, why, wl);
	if (rc == 0)
		rc = build(root, cfg, &t, why, wl);
	if (rc == MU_ENOMEM)
		mu__why(why, wl, rc, "out of memory");
	cJSON_Delete(root);
	cJSON_Delete(cfg);
	if (rc != 0) {
		mu__tok_free(t);
		return rc;
	}
	*out = t;
	return 0;
}
