/* SPDX-License-Identifier: MIT */
/*
 * A decoder from a GGUF file: general.architecture picks the entry of
 * the architecture table (llm/arch.c), the hyperparameters come from the
 * keys the field table names (llm/hparams.c), the tensors as they are
 * stored (any type of the kernels' weight-type table), and the tokenizer from
 * tokenizer.ggml.*.
 *
 * RoPE: the entry says how its GGUF rows rotate (llama.cpp's converter
 * writes "llama" Q/K rows back in Meta's interleaved order and rotates
 * adjacent pairs; "qwen2" keeps HF's order and rotates halves, NEOX). We
 * follow the file, never permute.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/error_int.h"
#include "formats/gguf_int.h"
#include "llm/arch_int.h"
#include "llm/llm_int.h"

static void gguf_priv_free(void *p)
{
	if (p != NULL)
		mu__gguf_free(p);
	mu__free(p);
}

static int arch_f32(const mu__gguf_t *g, const char *arch, const char *suffix,
                    double def, float *out, char *why, size_t wl)
{
	char key[128];
	double v = def;
	int rc;

	snprintf(key, sizeof(key), "%s.%s", arch, suffix);
	rc = mu__gguf_get_f64(g, key, &v, why, wl);
	if (rc != 0 && rc != -ENOENT)
		return rc;
	*out = (float)v;
	return 0;
}

static int read_scaling(const mu__gguf_t *g, const char *arch, mu__llm_hp_t *h,
                        char *why, size_t wl)
{
	char key[128];
	const char *s;
	uint64_t n;
	int rc;

	snprintf(key, sizeof(key), "%s.rope.scaling.type", arch);
	rc = mu__gguf_get_str(g, key, &s, &n, why, wl);
	if (rc == -ENOENT || (n == 4 && memcmp(s, "none", 4) == 0))
		return 0;
	if (rc != 0)
		return rc;
	if (n != 6 || memcmp(s, "linear", 6) != 0)
		return mu__why(why, wl, MU_EPROTO, "GGUF %s \"%.*s\" is not supported (muster takes "
		               "linear, or llama3 factors in rope_freqs.weight)", key, (int)n, s);
	h->scaling = MU__RS_LINEAR;
	return arch_f32(g, arch, "rope.scaling.factor", 1.0, &h->sc_factor, why, wl);
}

/* The fields the table keys for GGUF, each from "<arch>.<suffix>" (or its
 * absolute key), else its default. */
static int read_fields(const mu__gguf_t *g, mu__llm_hp_t *h, char *why, size_t wl)
{
	char key[128], range[64];
	const mu__hpf_t *f;
	int64_t iv;
	double v;
	size_t i;
	int rc;

	for (i = 0; (f = mu__hpf_at(i)) != NULL; i++) {
		if (f->gguf == NULL)
			continue;
		mu__hpf_gguf_key(f->gguf, h->arch, key, sizeof(key));
		if (f->kind == MU__HPK_TOKEN) { /* lenient: a bad id is no id */
			rc = mu__gguf_get_int(g, key, 0, INT32_MAX, &iv, NULL, 0);
			mu__hpf_set(f, h, rc == 0 ? (double)iv : f->gguf_def);
			continue;
		}
		if (f->kind == MU__HPK_NUM)
			rc = mu__gguf_get_f64(g, key, &v, why, wl);
		else if ((rc = mu__gguf_get_int(g, key, INT32_MIN, INT32_MAX, &iv, why, wl)) == 0)
			v = (double)iv;
		if (rc == -ENOENT && (f->flags & MU__HPF_REQUIRED))
			return mu__why(why, wl, MU_EPROTO, "GGUF key %s is missing", key);
		if (rc == -ENOENT)
			v = mu__hpf_default(f, h, 1);
		else if (rc != 0)
			return rc;
		if (!mu__hpf_in_range(f, v)) {
			mu__hpf_range_text(f, range, sizeof(range));
			return mu__why(why, wl, MU_EPROTO, "GGUF %s is %g; muster takes %s", key, v, range);
		}
		mu__hpf_set(f, h, v);
	}
	return 0;
}

/* A GGUF key (under prefix, the file's architecture name) that asks for a
 * feature the entry does not run. */
static int refuse_features(const mu__gguf_t *g, const char *prefix, const mu__arch_t *a,
                           char *why, size_t wl)
{
	const mu__feature_t *ft;
	const mu__gguf_kv_t *kv;
	char key[128];
	size_t i, k;

	for (i = 0; (ft = mu__arch_feature_at(i)) != NULL; i++)
		for (k = 0; !(a->features & ft->flag) && k < 2 && ft->gguf_keys[k] != NULL; k++) {
			mu__hpf_gguf_key(ft->gguf_keys[k], prefix, key, sizeof(key));
			kv = mu__gguf_find(g, key);
			if (kv != NULL && (kv->type == MU__GGUF_ARRAY ? kv->arr_n > 0
			                                              : kv->u != 0 || kv->f != 0))
				return mu__why(why, wl, MU_EPROTO, "GGUF %s asks for %s, which muster does "
				               "not run for %s", key, ft->what, a->name);
		}
	return 0;
}

/* RoPE over all of each head: a file that rotates part of it (Phi-4-mini,
 * StableLM: rope.dimension_count below the head's width) is refused, not
 * run rotating the whole head. */
static int check_rotary(const mu__gguf_t *g, const mu__llm_hp_t *h, char *why, size_t wl)
{
	char key[128];
	int64_t n;

	snprintf(key, sizeof(key), "%s.rope.dimension_count", h->arch);
	if (mu__gguf_get_int(g, key, 0, INT32_MAX, &n, NULL, 0) != 0 || n == h->head_dim)
		return 0;
	return mu__why(why, wl, MU_EPROTO, "GGUF %s is %lld, but heads are %d wide: a rotation of "
	               "part of each head, which muster does not run", key, (long long)n,
	               h->head_dim);
}

static int read_hp(const mu__gguf_t *g, mu__llm_hp_t *h, char *why, size_t wl)
{
	const mu__arch_t *a;
	const char *arch;
	char list[256];
	uint64_t alen;
	int rc;

	rc = mu__gguf_get_str(g, "general.architecture", &arch, &alen, why, wl);
	if (rc == -ENOENT)
		return mu__why(why, wl, MU_EPROTO, "GGUF key general.architecture is missing");
	if (rc != 0)
		return rc;
	if ((a = mu__arch_by_gguf(arch, (size_t)alen)) == NULL) {
		mu__arch_list(MU__ARCH_LIST_GGUF, list, sizeof(list));
		return mu__why(why, wl, MU_EPROTO, "general.architecture \"%.*s\" is not supported "
		               "(muster runs %s)", (int)(alen > 64 ? 64 : alen), arch, list);
	}
	/* the file's name prefixes its keys while they are read; then hp
	 * takes the entry's (GGUF's llama is our llama) */
	snprintf(h->arch, sizeof(h->arch), "%.*s", (int)alen, arch);
	if ((rc = refuse_features(g, h->arch, a, why, wl)) != 0 ||
	    (rc = read_fields(g, h, why, wl)) != 0 || (rc = read_scaling(g, h->arch, h, why, wl)) != 0)
		return rc;
	if ((rc = check_rotary(g, h, why, wl)) != 0)
		return rc;
	snprintf(h->arch, sizeof(h->arch), "%s", a->name);
	h->rope = a->rope_gguf;
	return 0;
}

/* The weight type of GGUF tensor t, by the kernels' table; MU_EPROTO when
 * muster does not compute it, naming ggml's type and what muster takes. */
static int wtype_of(const mu__llm_src_t *src, const mu__gguf_tensor_t *t, mu__wtype_t *wt,
                    char *why, size_t wl)
{
	const char *ggml = mu__ggml_type_name(t->type);
	char list[256];

	if (mu__wtype_by_ggml(t->type, wt) == 0)
		return 0;
	mu__wtype_list(0, list, sizeof(list));
	if (ggml == NULL)
		return mu__why(why, wl, MU_EPROTO, "%.200s: tensor %.100s has ggml type %u, which ggml "
		               "does not name; muster computes with %s", src->path, t->name, t->type, list);
	return mu__why(why, wl, MU_EPROTO, "%.200s: tensor %.100s has ggml type %s (%u); muster "
	               "computes with %s", src->path, t->name, ggml, t->type, list);
}

/* Every 1-D and 2-D tensor goes into the directory; a tensor of a type we
 * do not compute with is refused by name when the decoder needs it
 * (mu__llm_check finds it missing), so report it here instead. */
static int add_tensors(mu__llm_src_t *src, const mu__gguf_t *g, char *why, size_t wl)
{
	size_t i;
	int rc;

	for (i = 0; i < g->nt; i++) {
		const mu__gguf_tensor_t *t = &g->t[i];
		mu__wtype_t wt;

		if (t->n_dims > 2 || t->ne[2] != 1 || t->ne[3] != 1)
			continue;
		if ((rc = wtype_of(src, t, &wt, why, wl)) != 0)
			return rc;
		rc = mu__llm_add_tensor(src, t->name, wt, t->data, (int64_t)t->ne[1], (int64_t)t->ne[0]);
		if (rc == MU_EARG)
			return mu__why(why, wl, MU_EPROTO, "%.200s: tensor %.100s has a shape its type "
			               "cannot hold", src->path, t->name);
		if (rc != 0)
			return rc;
	}
	return 0;
}

int mu__llm_open_gguf(const char *path, mu__llm_src_t *src, char *why, size_t wl)
{
	const char *embd, *out;
	const unsigned char *base;
	const mu__llm_tensor_t *emb;
	const mu__arch_t *a;
	mu__gguf_t *g;
	size_t len;
	int rc;

	src->fmt = MU__FMT_GGUF;
	if ((rc = mu__llm_map_file(path, src, &base, &len, why, wl)) != 0)
		return rc;
	g = mu__calloc(1, sizeof(*g));
	if (g == NULL)
		return MU_ENOMEM;
	src->priv = g;
	src->priv_free = gguf_priv_free;
	if ((rc = mu__gguf_parse(base, len, g, why, wl)) != 0) {
		src->priv = NULL;
		mu__free(g);
		return rc;
	}
	if ((rc = read_hp(g, &src->hp, why, wl)) != 0 || (rc = add_tensors(src, g, why, wl)) != 0)
		return rc;
	/* the two fields GGUF keeps in its tensors */
	a = mu__arch_by_name(src->hp.arch);
	embd = mu__arch_model_name(a, MU__R_TOKEN_EMBD);
	out = mu__arch_model_name(a, MU__R_OUTPUT);
	if ((emb = mu__llm_src_tensor(src, embd)) == NULL)
		return mu__why(why, wl, MU_EPROTO, "%.200s: tensor %s is missing", path, embd);
	src->hp.vocab = emb->m.rows > INT32_MAX ? 0 : (int32_t)emb->m.rows;
	src->hp.tied = mu__llm_src_tensor(src, out) == NULL;
	src->tokenizer = mu__llm_gguf_tokenizer;
	return 0;
}

/* Copy the pieces of a string array into vectors the tokenizer copies
 * again; GGUF strings are not NUL-terminated. */
static int gguf_strings(const mu__gguf_kv_t *kv, char ***out, size_t **lens)
{
	uint64_t pos = 0, i, n;
	const char *s;
	char **v;

	*out = NULL;
	*lens = NULL;
	v = mu__calloc((size_t)kv->arr_n + 1, sizeof(*v));
	*lens = mu__calloc((size_t)kv->arr_n + 1, sizeof(**lens));
	if (v == NULL || *lens == NULL) {
		mu__free(v);
		mu__free(*lens);
		*lens = NULL;
		return MU_ENOMEM;
	}
	for (i = 0; i < kv->arr_n; i++) {
		if (mu__gguf_arr_str(kv, &pos, &s, &n) != 0 ||
		    (v[i] = mu__strndup(s, (size_t)n)) == NULL) {
			mu__strv_free(v);
			mu__free(*lens);
			*lens = NULL;
			return MU_ENOMEM;
		}
		(*lens)[i] = (size_t)n;
	}
	*out = v;
	return 0;
}

static const mu__gguf_kv_t *gguf_array(const mu__gguf_t *g, const char *key,
                                       uint32_t type, uint64_t n)
{
	const mu__gguf_kv_t *kv = mu__gguf_find(g, key);

	if (kv == NULL || kv->type != MU__GGUF_ARRAY)
		return NULL;
	if (type == MU__GGUF_STRING ? kv->arr_type != type
	                            : (kv->arr_type == MU__GGUF_STRING || kv->arr_type == MU__GGUF_ARRAY))
		return NULL;
	return n != 0 && kv->arr_n != n ? NULL : kv;
}

static int32_t gguf_id(const mu__gguf_t *g, const char *key)
{
	int64_t v;

	return mu__gguf_get_int(g, key, 0, INT32_MAX, &v, NULL, 0) == 0 ? (int32_t)v : -1;
}

static int gguf_flag(const mu__gguf_t *g, const char *key)
{
	const mu__gguf_kv_t *kv = mu__gguf_find(g, key);

	return kv == NULL || kv->type != MU__GGUF_BOOL ? -1 : (int)kv->u;
}

int mu__llm_gguf_tokenizer(const void *srcp, mu__tok_t **out, char *why, size_t wl)
{
	const mu__llm_src_t *src = srcp;
	const mu__gguf_t *g = src->priv;
	const mu__gguf_kv_t *tok, *sc, *ty, *mg;
	mu__tok_vocab_t v;
	char **pieces = NULL, **merges = NULL, *model = NULL, *pre = NULL, *tmpl = NULL;
	size_t *lens = NULL, *mlens = NULL;
	float *scores = NULL;
	int32_t *types = NULL;
	const char *s;
	uint64_t n, i;
	int rc;

	memset(&v, 0, sizeof(v));
	tok = gguf_array(g, "tokenizer.ggml.tokens", MU__GGUF_STRING, 0);
	if (tok == NULL || mu__gguf_get_str(g, "tokenizer.ggml.model", &s, &n, NULL, 0) != 0)
		return mu__why(why, wl, MU_EPROTO, "%.200s carries no tokenizer (tokenizer.ggml.model "
		               "and tokenizer.ggml.tokens)", src->path);
	if ((model = mu__strndup(s, (size_t)n)) == NULL)
		return MU_ENOMEM;
	if (mu__gguf_get_str(g, "tokenizer.ggml.pre", &s, &n, NULL, 0) == 0)
		pre = mu__strndup(s, (size_t)n);
	if (mu__gguf_get_str(g, "tokenizer.chat_template", &s, &n, NULL, 0) == 0)
		tmpl = mu__strndup(s, (size_t)n);
	sc = gguf_array(g, "tokenizer.ggml.scores", MU__GGUF_F32, tok->arr_n);
	ty = gguf_array(g, "tokenizer.ggml.token_type", MU__GGUF_I32, tok->arr_n);
	mg = gguf_array(g, "tokenizer.ggml.merges", MU__GGUF_STRING, 0);
	rc = gguf_strings(tok, &pieces, &lens);
	if (rc == 0 && mg != NULL)
		rc = gguf_strings(mg, &merges, &mlens);
	scores = sc != NULL ? mu__calloc((size_t)tok->arr_n + 1, sizeof(*scores)) : NULL;
	types = ty != NULL ? mu__calloc((size_t)tok->arr_n + 1, sizeof(*types)) : NULL;
	if (rc == 0 && ((sc != NULL && scores == NULL) || (ty != NULL && types == NULL)))
		rc = MU_ENOMEM;
	for (i = 0; rc == 0 && i < tok->arr_n; i++) {
		if (scores != NULL)
			scores[i] = (float)mu__gguf_arr_f64(sc, i);
		if (types != NULL)
			types[i] = (int32_t)mu__gguf_arr_i64(ty, i);
	}
	if (rc == 0) {
		v.model = model;
		v.pre = pre;
		v.n = (size_t)tok->arr_n;
		v.tokens = (const char *const *)pieces;
		v.token_lens = lens;
		v.scores = scores;
		v.types = types;
		v.nmerges = mg != NULL ? (size_t)mg->arr_n : 0;
		v.merges = (const char *const *)merges;
		v.bos = gguf_id(g, "tokenizer.ggml.bos_token_id");
		v.eos = gguf_id(g, "tokenizer.ggml.eos_token_id");
		v.unk = gguf_id(g, "tokenizer.ggml.unknown_token_id");
		v.pad = gguf_id(g, "tokenizer.ggml.padding_token_id");
		v.add_bos = gguf_flag(g, "tokenizer.ggml.add_bos_token");
		v.add_eos = gguf_flag(g, "tokenizer.ggml.add_eos_token");
		v.chat_template = tmpl;
		rc = mu__tok_from_vocab(&v, out, why, wl);
	}
	mu__strv_free(pieces);
	mu__strv_free(merges);
	mu__free(lens);
	mu__free(mlens);
	mu__free(scores);
	mu__free(types);
	mu__free(model);
	mu__free(pre);
	mu__free(tmpl);
	return rc;
}
