/* SPDX-License-Identifier: MIT */
/*
 * The pipeline sections of an HF tokenizer.json: "normalizer",
 * "pre_tokenizer", "decoder" and "post_processor", turned into the steps of
 * tok/impl_int.h. What the real Llama 2 / Llama 3 / Qwen / Mistral files use
 * is supported; anything else is refused with the field and value named
 * (tok/hf.c parses the rest of the file).
 */
#include <stdio.h>
#include <string.h>

#include "core/alloc_int.h"
#include "core/error_int.h"
#include "muster/common.h"
#include "tok/impl_int.h"
#include "tok/hf_int.h"

static const char *type_of(const cJSON *v)
{
	const cJSON *ty = cJSON_GetObjectItemCaseSensitive(v, "type");

	return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

int mu__tok_hf_bad(char *why, size_t wl, const char *path, const char *field, const cJSON *v)
{
	const char *sep = path[0] != '\0' && field[0] != '\0' ? "." : "";

	if (v == NULL)
		return mu__why(why, wl, MU_EPROTO, "%s%s%s is missing", path, sep, field);
	if (cJSON_IsString(v))
		return mu__why(why, wl, MU_EPROTO, "%s%s%s \"%.80s\" is not supported", path, sep,
		               field, v->valuestring);
	if (cJSON_IsNumber(v))
		return mu__why(why, wl, MU_EPROTO, "%s%s%s %g is not supported", path, sep, field,
		               v->valuedouble);
	if (cJSON_IsBool(v))
		return mu__why(why, wl, MU_EPROTO, "%s%s%s %s is not supported", path, sep, field,
		               cJSON_IsTrue(v) ? "true" : "false");
	return mu__why(why, wl, MU_EPROTO, "%s%s%s has the wrong type", path, sep, field);
}

/* A boolean member: its value, dflt when absent or null, -1 (why) when it
 * is something else. */
int mu__tok_hf_bool(const cJSON *o, const char *name, int dflt, const char *path, char *why,
                    size_t wl)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	if (v == NULL || cJSON_IsNull(v))
		return dflt;
	if (cJSON_IsBool(v))
		return cJSON_IsTrue(v);
	mu__tok_hf_bad(why, wl, path, name, v);
	return -1;
}

/* {"String": s} or {"Regex": r}, compiled. */
static int pattern(const cJSON *o, const char *path, pcre2_code **re, char *why, size_t wl)
{
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "pattern");
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(p, "String");
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(p, "Regex");
	int rc;

	if (!cJSON_IsString(s) && !cJSON_IsString(r))
		return mu__tok_hf_bad(why, wl, path, "pattern", p);
	s = cJSON_IsString(s) ? s : r;
	if (s->valuestring[0] == '\0')
		return mu__why(why, wl, MU_EPROTO, "%s.pattern is empty", path);
	rc = mu__tok_regex(s->valuestring, strlen(s->valuestring), s != r, re, why, wl);
	if (rc == MU_EPROTO) {
		char inner[200];

		snprintf(inner, sizeof(inner), "%s", why != NULL ? why : "");
		return mu__why(why, wl, rc, "%s.pattern: %s", path, inner);
	}
	return rc;
}

static int str_member(const cJSON *o, const char *name, const char *path, const char **s,
                      char *why, size_t wl)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	if (!cJSON_IsString(v))
		return mu__tok_hf_bad(why, wl, path, name, v);
	if (strlen(v->valuestring) > MU__TOK_MAX_PIECE)
		return mu__why(why, wl, MU_ETOOBIG, "%s.%s is too long", path, name);
	*s = v->valuestring;
	return 0;
}

/* ---- normalizer ---- */

int mu__tok_hf_normalizer(mu__tok_t *t, const cJSON *v, const char *path, int depth,
                          char *why, size_t wl)
{
	static const char *const forms[] = {"NFC", "NFD", "NFKC", "NFKD"};
	const char *ty = type_of(v), *s;
	mu__tok_norm_t *op;
	char sub[160];
	int rc, l, r;

	if (v == NULL || cJSON_IsNull(v))
		return 0;
	if (ty == NULL || depth > 8)
		return mu__tok_hf_bad(why, wl, path, "type", cJSON_GetObjectItemCaseSensitive(v, "type"));
	if (strcmp(ty, "Sequence") == 0) {
		const cJSON *list = cJSON_GetObjectItemCaseSensitive(v, "normalizers"), *c;
		int i = 0;

		if (!cJSON_IsArray(list))
			return mu__tok_hf_bad(why, wl, path, "normalizers", list);
		cJSON_ArrayForEach(c, list) {
			snprintf(sub, sizeof(sub), "%s.normalizers[%d]", path, i++);
			if ((rc = mu__tok_hf_normalizer(t, c, sub, depth + 1, why, wl)) != 0)
				return rc;
		}
		return 0;
	}
	if (t->nnorm == MU__TOK_MAX_OPS)
		return mu__why(why, wl, MU_ETOOBIG, "%s: more than %d normalizers", path,
		               MU__TOK_MAX_OPS);
	op = &t->norm[t->nnorm];
	memset(op, 0, sizeof(*op));
	for (int i = 0; i < 4; i++)
		if (strcmp(ty, forms[i]) == 0) {
			op->kind = (mu__tok_norm_kind_t)(MU__TOK_N_NFC + i);
			t->nnorm++;
			return 0;
		}
	if (strcmp(ty, "Prepend") == 0 || strcmp(ty, "Replace") == 0) {
		int prepend = ty[1] == 'r';

		op->kind = prepend ? MU__TOK_N_PREPEND : MU__TOK_N_REPLACE;
		if ((rc = str_member(v, prepend ? "prepend" : "content", path, &s, why, wl)) != 0)
			return rc;
		if (!prepend && (rc = pattern(v, path, &op->re, why, wl)) != 0)
			return rc;
		op->slen = strlen(s);
		op->s = mu__strdup(s);
		t->nnorm++; /* owned by t from here, freed with it */
		return op->s == NULL ? MU_ENOMEM : 0;
	}
	if (strcmp(ty, "Lowercase") == 0 || strcmp(ty, "StripAccents") == 0) {
		op->kind = ty[0] == 'L' ? MU__TOK_N_LOWER : MU__TOK_N_STRIP_ACCENTS;
		t->nnorm++;
		return 0;
	}
	if (strcmp(ty, "Strip") == 0) {
		if ((l = mu__tok_hf_bool(v, "strip_left", 1, path, why, wl)) < 0 ||
		    (r = mu__tok_hf_bool(v, "strip_right", 1, path, why, wl)) < 0)
			return MU_EPROTO;
		op->kind = MU__TOK_N_STRIP;
		op->left = l;
		op->right = r;
		t->nnorm++;
		return 0;
	}
	return mu__tok_hf_bad(why, wl, path, "type", cJSON_GetObjectItemCaseSensitive(v, "type"));
}

/* ---- pre_tokenizer ---- */

static mu__tok_pre_t *pre_op(mu__tok_t *t, const char *path, char *why, size_t wl)
{
	mu__tok_pre_t *op;

	if (t->npre == MU__TOK_MAX_OPS) {
		mu__why(why, wl, MU_ETOOBIG, "%s: more than %d pre-tokenizer steps", path,
		        MU__TOK_MAX_OPS);
		return NULL;
	}
	op = &t->pre[t->npre++];
	memset(op, 0, sizeof(*op));
	op->behavior = MU__TOK_B_ISOLATED;
	return op;
}

/* A Split step with a pattern of our own. */
static int pre_split(mu__tok_t *t, const char *re, mu__tok_behavior_t b, int invert,
                     const char *path, char *why, size_t wl)
{
	mu__tok_pre_t *op = pre_op(t, path, why, wl);

	if (op == NULL)
		return MU_ETOOBIG;
	op->behavior = b;
	op->invert = invert;
	return mu__tok_regex(re, strlen(re), 0, &op->re, why, wl);
}

static int behavior(const cJSON *v, const char *path, mu__tok_behavior_t *b, char *why,
                    size_t wl)
{
	static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious",
	                                    "MergedWithNext", "Contiguous"};
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(v, "behavior");

	for (int i = 0; cJSON_IsString(s) && i < 5; i++)
		if (strcmp(s->valuestring, names[i]) == 0) {
			*b = (mu__tok_behavior_t)i;
			return 0;
		}
	return mu__tok_hf_bad(why, wl, path, "behavior", s);
}

static int metaspace(mu__tok_t *t, const cJSON *v, const char *path, char *why, size_t wl)
{
	const cJSON *sch = cJSON_GetObjectItemCaseSensitive(v, "prepend_scheme");
	mu__tok_pre_t *op;
	const char *rep;
	int rc, legacy, split;

	if ((rc = str_member(v, "replacement", path, &rep, why, wl)) != 0)
		return rc;
	if (strlen(rep) == 0 || strlen(rep) >= sizeof(op->rep))
		return mu__tok_hf_bad(why, wl, path, "replacement",
		                      cJSON_GetObjectItemCaseSensitive(v, "replacement"));
	if ((legacy = mu__tok_hf_bool(v, "add_prefix_space", 1, path, why, wl)) < 0 ||
	    (split = mu__tok_hf_bool(v, "split", 1, path, why, wl)) < 0)
		return MU_EPROTO;
	if ((op = pre_op(t, path, why, wl)) == NULL)
		return MU_ETOOBIG;
	op->kind = MU__TOK_P_METASPACE;
	op->replen = strlen(rep);
	memcpy(op->rep, rep, op->replen);
	op->split = split;
	op->behavior = MU__TOK_B_NEXT; /* each replacement starts a piece */
	op->prepend = legacy ? MU__TOK_PREPEND_ALWAYS : MU__TOK_PREPEND_NEVER;
	if (cJSON_IsString(sch) && strcmp(sch->valuestring, "always") == 0)
		op->prepend = MU__TOK_PREPEND_ALWAYS;
	else if (cJSON_IsString(sch) && strcmp(sch->valuestring, "first") == 0)
		op->prepend = MU__TOK_PREPEND_FIRST;
	else if (cJSON_IsString(sch) && strcmp(sch->valuestring, "never") == 0)
		op->prepend = MU__TOK_PREPEND_NEVER;
	else if (sch != NULL && !cJSON_IsNull(sch))
		return mu__tok_hf_bad(why, wl, path, "prepend_scheme", sch);
	return mu__tok_regex(rep, op->replen, 1, &op->re, why, wl);
}

static int byte_level(mu__tok_t *t, const cJSON *v, const char *path, char *why, size_t wl)
{
	int prefix = mu__tok_hf_bool(v, "add_prefix_space", 1, path, why, wl);
	int regex = mu__tok_hf_bool(v, "use_regex", 1, path, why, wl);
	mu__tok_pre_t *op;

	if (prefix < 0 || regex < 0)
		return MU_EPROTO;
	t->byte_level = 1;
	if (prefix) {
		if ((op = pre_op(t, path, why, wl)) == NULL)
			return MU_ETOOBIG;
		op->kind = MU__TOK_P_PREFIX;
	}
	return regex ? pre_split(t, MU__TOK_RE_GPT2, MU__TOK_B_ISOLATED, 0, path, why, wl) : 0;
}

int mu__tok_hf_pretokenizer(mu__tok_t *t, const cJSON *v, const char *path, int depth,
                            char *why, size_t wl)
{
	const char *ty = type_of(v);
	mu__tok_pre_t *op;
	char sub[160];
	int rc, inv;

	if (v == NULL || cJSON_IsNull(v))
		return 0;
	if (ty == NULL || depth > 8)
		return mu__tok_hf_bad(why, wl, path, "type", cJSON_GetObjectItemCaseSensitive(v, "type"));
	/* the model sees bytes from ByteLevel on: nothing may split them after */
	if (t->byte_level)
		return mu__why(why, wl, MU_EPROTO, "%s: a \"%s\" after ByteLevel is not supported",
		               path, ty);
	if (strcmp(ty, "Sequence") == 0) {
		const cJSON *list = cJSON_GetObjectItemCaseSensitive(v, "pretokenizers"), *c;
		int i = 0;

		if (!cJSON_IsArray(list))
			return mu__tok_hf_bad(why, wl, path, "pretokenizers", list);
		cJSON_ArrayForEach(c, list) {
			snprintf(sub, sizeof(sub), "%s.pretokenizers[%d]", path, i++);
			if ((rc = mu__tok_hf_pretokenizer(t, c, sub, depth + 1, why, wl)) != 0)
				return rc;
		}
		return 0;
	}
	if (strcmp(ty, "ByteLevel") == 0)
		return byte_level(t, v, path, why, wl);
	if (strcmp(ty, "Metaspace") == 0)
		return metaspace(t, v, path, why, wl);
	if (strcmp(ty, "Split") == 0) {
		if ((inv = mu__tok_hf_bool(v, "invert", 0, path, why, wl)) < 0)
			return MU_EPROTO;
		if ((op = pre_op(t, path, why, wl)) == NULL)
			return MU_ETOOBIG;
		op->invert = inv;
		if ((rc = behavior(v, path, &op->behavior, why, wl)) != 0)
			return rc;
		return pattern(v, path, &op->re, why, wl);
	}
	if (strcmp(ty, "Digits") == 0) {
		if ((inv = mu__tok_hf_bool(v, "individual_digits", 0, path, why, wl)) < 0)
			return MU_EPROTO;
		/* HF: char::is_numeric, i.e. \p{N} */
		return pre_split(t, inv ? "\\p{N}" : "\\p{N}+", MU__TOK_B_ISOLATED, 0, path, why, wl);
	}
	if (strcmp(ty, "Whitespace") == 0) /* HF keeps the matches of \w+|[^\w\s]+ */
		return pre_split(t, "\\w+|[^\\w\\s]+", MU__TOK_B_REMOVED, 1, path, why, wl);
	if (strcmp(ty, "WhitespaceSplit") == 0)
		return pre_split(t, "\\s+", MU__TOK_B_REMOVED, 0, path, why, wl);
	if (strcmp(ty, "Punctuation") == 0) {
		mu__tok_behavior_t b = MU__TOK_B_ISOLATED;

		if (cJSON_GetObjectItemCaseSensitive(v, "behavior") != NULL &&
		    (rc = behavior(v, path, &b, why, wl)) != 0)
			return rc;
		/* HF: ASCII punctuation or a Unicode P category, one by one */
		return pre_split(t, "[\\p{P}\\x21-\\x2F\\x3A-\\x40\\x5B-\\x60\\x7B-\\x7E]", b, 0, path,
		                 why, wl);
	}
	return mu__tok_hf_bad(why, wl, path, "type", cJSON_GetObjectItemCaseSensitive(v, "type"));
}

/* ---- decoder ---- */

static int int_member(const cJSON *o, const char *name, int dflt, const char *path, int *out,
                      char *why, size_t wl)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	*out = dflt;
	if (v == NULL || cJSON_IsNull(v))
		return 0;
	if (!mu__json_is_int(v, 0, 1 << 20))
		return mu__tok_hf_bad(why, wl, path, name, v);
	*out = (int)v->valuedouble;
	return 0;
}

static int dec_replace(mu__tok_dec_t *d, const char *from, const char *to, const char *path,
                       char *why, size_t wl)
{
	if (d->fromlen > 0 || strlen(from) == 0 || strlen(from) >= sizeof(d->from) ||
	    strlen(to) >= sizeof(d->to))
		return mu__why(why, wl, MU_EPROTO,
		               "%s: only one Replace of a short literal is supported", path);
	d->fromlen = strlen(from);
	d->tolen = strlen(to);
	memcpy(d->from, from, d->fromlen);
	memcpy(d->to, to, d->tolen);
	return 0;
}

static int dec_strip(const cJSON *v, mu__tok_dec_t *d, int fused, const char *path, char *why,
                     size_t wl)
{
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
	int start, stop, rc;

	if (!cJSON_IsString(c) || strcmp(c->valuestring, " ") != 0)
		return mu__tok_hf_bad(why, wl, path, "content", c);
	if ((rc = int_member(v, "start", 0, path, &start, why, wl)) != 0 ||
	    (rc = int_member(v, "stop", 0, path, &stop, why, wl)) != 0)
		return rc;
	if (!fused) {
		d->strip_start = start;
		d->strip_stop = stop;
		return 0;
	}
	/* after Fuse it acts on the whole text: its end is unknown to a stream */
	if (stop != 0)
		return mu__tok_hf_bad(why, wl, path, "stop", cJSON_GetObjectItemCaseSensitive(v, "stop"));
	d->strip = start > 0 ? MU__TOK_STRIP_START : MU__TOK_STRIP_NONE;
	d->strip_n = (unsigned)start;
	return 0;
}

static int dec_one(const cJSON *v, mu__tok_dec_t *d, int *fused, const char *path, char *why,
                   size_t wl)
{
	const char *ty = type_of(v), *rep;
	const cJSON *p;
	int rc, prefix;

	if (ty == NULL)
		return mu__tok_hf_bad(why, wl, path, "type", cJSON_GetObjectItemCaseSensitive(v, "type"));
	if (strcmp(ty, "ByteLevel") == 0)
		d->byte_level = 1;
	else if (strcmp(ty, "ByteFallback") == 0)
		d->byte_fallback = 1;
	else if (strcmp(ty, "Fuse") == 0)
		*fused = 1;
	else if (strcmp(ty, "Strip") == 0)
		return dec_strip(v, d, *fused, path, why, wl);
	else if (strcmp(ty, "Replace") == 0) {
		p = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(v, "pattern"),
		                                     "String");
		if (!cJSON_IsString(p))
			return mu__tok_hf_bad(why, wl, path, "pattern",
			                      cJSON_GetObjectItemCaseSensitive(v, "pattern"));
		if ((rc = str_member(v, "content", path, &rep, why, wl)) != 0)
			return rc;
		return dec_replace(d, p->valuestring, rep, path, why, wl);
	} else if (strcmp(ty, "Metaspace") == 0) {
		p = cJSON_GetObjectItemCaseSensitive(v, "prepend_scheme");
		if ((rc = str_member(v, "replacement", path, &rep, why, wl)) != 0)
			return rc;
		if ((prefix = mu__tok_hf_bool(v, "add_prefix_space", 1, path, why, wl)) < 0)
			return MU_EPROTO;
		if (cJSON_IsString(p))
			prefix = strcmp(p->valuestring, "never") != 0;
		if (prefix) { /* the first token's leading space goes */
			d->strip = MU__TOK_STRIP_START;
			d->strip_n = 1;
		}
		return dec_replace(d, rep, " ", path, why, wl);
	} else
		return mu__tok_hf_bad(why, wl, path, "type", cJSON_GetObjectItemCaseSensitive(v, "type"));
	return 0;
}

int mu__tok_hf_decoder(const cJSON *v, mu__tok_dec_t *d, char *why, size_t wl)
{
	const cJSON *list, *c;
	char sub[64];
	int fused = 0, rc, i = 0;

	memset(d, 0, sizeof(*d));
	if (v == NULL || cJSON_IsNull(v)) /* HF would join the pieces with spaces */
		return mu__why(why, wl, MU_EPROTO, "decoder null is not supported");
	if (type_of(v) == NULL || strcmp(type_of(v), "Sequence") != 0)
		return dec_one(v, d, &fused, "decoder", why, wl);
	list = cJSON_GetObjectItemCaseSensitive(v, "decoders");
	if (!cJSON_IsArray(list))
		return mu__tok_hf_bad(why, wl, "decoder", "decoders", list);
	cJSON_ArrayForEach(c, list) {
		snprintf(sub, sizeof(sub), "decoder.decoders[%d]", i++);
		if ((rc = dec_one(c, d, &fused, sub, why, wl)) != 0)
			return rc;
	}
	return 0;
}

/* ---- post_processor ---- */

static int template_ids(mu__tok_t *t, const cJSON *specials, const cJSON *name, int after,
                        const char *path, char *why, size_t wl)
{
	const cJSON *ids, *c;

	if (!cJSON_IsString(name))
		return mu__tok_hf_bad(why, wl, path, "single", name);
	ids = cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(specials, name->valuestring), "ids");
	if (!cJSON_IsArray(ids))
		return mu__why(why, wl, MU_EPROTO, "%s.special_tokens has no ids for \"%.80s\"", path,
		               name->valuestring);
	cJSON_ArrayForEach(c, ids) {
		size_t cap = after ? t->nsuffix : t->nprefix;
		int rc;

		if (!mu__json_is_int(c, 0, t->n - 1))
			return mu__tok_hf_bad(why, wl, path, "special_tokens ids", c);
		rc = after ? mu__tok_push_id(&t->suffix, &t->nsuffix, &cap, (int32_t)c->valuedouble)
		           : mu__tok_push_id(&t->prefix, &t->nprefix, &cap, (int32_t)c->valuedouble);
		if (rc != 0)
			return rc;
	}
	return 0;
}

static int post_one(mu__tok_t *t, const cJSON *v, const char *path, char *why, size_t wl)
{
	const char *ty = type_of(v);
	const cJSON *single, *specials, *it;
	int after = 0, rc;

	if (ty != NULL && strcmp(ty, "ByteLevel") == 0)
		return 0; /* offsets only */
	if (ty == NULL || strcmp(ty, "TemplateProcessing") != 0)
		return mu__tok_hf_bad(why, wl, path, "type", cJSON_GetObjectItemCaseSensitive(v, "type"));
	single = cJSON_GetObjectItemCaseSensitive(v, "single");
	specials = cJSON_GetObjectItemCaseSensitive(v, "special_tokens");
	if (!cJSON_IsArray(single))
		return mu__tok_hf_bad(why, wl, path, "single", single);
	cJSON_ArrayForEach(it, single) {
		const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
		const cJSON *sq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(sp != NULL ? sp : sq, "id");

		if (sq != NULL && cJSON_IsString(id) && strcmp(id->valuestring, "A") == 0 && !after)
			after = 1;
		else if (sp != NULL && (rc = template_ids(t, specials, id, after, path, why, wl)) != 0)
			return rc;
		else if (sp == NULL)
			return mu__tok_hf_bad(why, wl, path, "single", id);
	}
	return 0;
}

int mu__tok_hf_post(mu__tok_t *t, const cJSON *v, char *why, size_t wl)
{
	const cJSON *list, *c;
	char sub[64];
	int rc, i = 0;

	if (v == NULL || cJSON_IsNull(v))
		return 0;
	if (type_of(v) == NULL || strcmp(type_of(v), "Sequence") != 0)
		return post_one(t, v, "post_processor", why, wl);
	list = cJSON_GetObjectItemCaseSensitive(v, "processors");
	if (!cJSON_IsArray(list))
		return mu__tok_hf_bad(why, wl, "post_processor", "processors", list);
	cJSON_ArrayForEach(c, list) {
		snprintf(sub, sizeof(sub), "post_processor.processors[%d]", i++);
		if ((rc = post_one(t, c, sub, why, wl)) != 0)
			return rc;
	}
	return 0;
}
