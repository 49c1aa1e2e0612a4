/* SPDX-License-Identifier: MIT */
/*
 * A decoder from an HF checkpoint directory: config.json (its
 * "architectures" picks the entry of the architecture table, llm/arch.c;
 * the fields come from the keys of the field table, llm/hparams.c),
 * model.safetensors or shards listed in model.safetensors.index.json, and
 * tokenizer.json with tokenizer_config.json and generation_config.json
 * when present.
 *
 * Tensors get GGUF's names by the entry's specs
 * (model.layers.N.self_attn.q_proj.weight is blk.N.attn_q.weight) so the
 * decoder reads every format alike. HF keeps Q/K rows in rotate_half
 * order, so the decoder rotates halves.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/endian_int.h"
#include "core/error_int.h"
#include "core/json_int.h"
#include "llm/arch_int.h"
#include "llm/llm_int.h"
#include "formats/safetensors_int.h"

#define HF_CONFIG_MAX ((size_t)1 << 20)
#define HF_INDEX_MAX ((size_t)64 << 20)
#define HF_TOKENIZER_MAX ((size_t)128 << 20)

typedef struct {
	char *dir;
	void **owned; /* aligned copies of misaligned tensors */
	size_t nowned;
} hf_t;

static void hf_free(void *p)
{
	hf_t *hf = p;
	size_t i;

	if (hf == NULL)
		return;
	for (i = 0; i < hf->nowned; i++)
		mu__free(hf->owned[i]);
	mu__free(hf->owned);
	mu__free(hf->dir);
	mu__free(hf);
}

static int read_json(const char *dir, const char *file, size_t max, int optional,
                     cJSON **out, char *why, size_t wl)
{
	char path[4096];
	mu__buf_t b;
	int rc;

	*out = NULL;
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	rc = mu__buf_read_file(&b, path, max, why, wl);
	if (rc == -ENOENT && optional)
		return 0;
	if (rc != 0)
		return rc;
	rc = mu__json_parse(b.data != NULL ? b.data : "", b.len, out);
	mu__buf_free(&b);
	if (rc == MU_EJSON)
		return mu__why(why, wl, rc, "%.300s is not valid JSON", path);
	return rc;
}

/* An integer field: absent gives def (or an error when def < 0 means
 * required); present must be an integer in [lo, hi]. */
static int cfg_int(const cJSON *c, const char *key, int64_t def, int64_t lo, int64_t hi,
                   int32_t *out, char *why, size_t wl)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);

	if (v == NULL || cJSON_IsNull(v)) {
		if (def < 0)
			return mu__why(why, wl, MU_EPROTO, "config.json: %s is missing", key);
		*out = (int32_t)def;
		return 0;
	}
	if (!mu__json_is_int(v, (double)lo, (double)hi))
		return mu__why(why, wl, MU_EPROTO, "config.json: %s is not an integer in [%lld, %lld]",
		               key, (long long)lo, (long long)hi);
	*out = (int32_t)v->valuedouble;
	return 0;
}

static int cfg_num(const cJSON *c, const char *key, double def, float *out, char *why,
                   size_t wl)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);

	if (v == NULL || cJSON_IsNull(v)) {
		*out = (float)def;
		return 0;
	}
	if (!cJSON_IsNumber(v) || !(v->valuedouble > -1e30 && v->valuedouble < 1e30))
		return mu__why(why, wl, MU_EPROTO, "config.json: %s is not a number", key);
	*out = (float)v->valuedouble;
	return 0;
}

/* A number of field f from config.json's key: in the field's range. */
static int cfg_value(const cJSON *v, const mu__hpf_t *f, const char *key, mu__llm_hp_t *h,
                     char *why, size_t wl)
{
	char range[64];
	int ok = f->kind == MU__HPK_NUM ? cJSON_IsNumber(v) && mu__hpf_in_range(f, v->valuedouble)
	                                : mu__json_is_int(v, f->lo, f->hi);

	if (!ok) {
		mu__hpf_range_text(f, range, sizeof(range));
		return mu__why(why, wl, MU_EPROTO, "config.json: %s is not %s", key, range);
	}
	mu__hpf_set(f, h, v->valuedouble);
	return 0;
}

/* A token id or a list of them (eos_token_id): the first. */
static int32_t cfg_id(const cJSON *v)
{
	if (cJSON_IsArray(v))
		v = cJSON_GetArrayItem(v, 0);
	return mu__json_is_int(v, 0, INT32_MAX) ? (int32_t)v->valuedouble : -1;
}

/* Is config.json's value set: present and not null, false or 0? */
static int is_set(const cJSON *v)
{
	return v != NULL && !cJSON_IsNull(v) && !cJSON_IsFalse(v) &&
	       !(cJSON_IsNumber(v) && v->valuedouble == 0);
}

/* The entry of config.json's "architectures" (or, without one, of its
 * "model_type"), refusing what the entry does not run. */
static int read_arch(const cJSON *c, const mu__arch_t **out, char *why, size_t wl)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(c, "architectures");
	const cJSON *mt = cJSON_GetObjectItemCaseSensitive(c, "model_type");
	const cJSON *act = cJSON_GetObjectItemCaseSensitive(c, "hidden_act");
	const mu__feature_t *ft;
	const mu__arch_t *e;
	char list[256];
	size_t i, k;

	a = cJSON_IsArray(a) ? cJSON_GetArrayItem(a, 0) : NULL;
	if (cJSON_IsString(a))
		e = mu__arch_by_hf(a->valuestring);
	else if (cJSON_IsString(mt))
		e = mu__arch_by_model_type(mt->valuestring);
	else
		return mu__why(why, wl, MU_EPROTO, "config.json: architectures is missing");
	if (e == NULL) {
		mu__arch_list(MU__ARCH_LIST_HF, list, sizeof(list));
		return mu__why(why, wl, MU_EPROTO, "config.json: %s \"%.100s\" is not supported "
		               "(muster runs %s)", cJSON_IsString(a) ? "architectures" : "model_type",
		               cJSON_IsString(a) ? a->valuestring : mt->valuestring, list);
	}
	if (act != NULL && (!cJSON_IsString(act) ||
	                    strcmp(act->valuestring, mu__arch_act_name(e->act)) != 0))
		return mu__why(why, wl, MU_EPROTO, "config.json: hidden_act \"%.60s\" is not "
		               "supported (muster runs %s for %s)",
		               cJSON_IsString(act) ? act->valuestring : "?", mu__arch_act_name(e->act),
		               e->name);
	for (i = 0; (ft = mu__arch_feature_at(i)) != NULL; i++)
		for (k = 0; !(e->features & ft->flag) && k < 3 && ft->hf_keys[k] != NULL; k++)
			if (is_set(cJSON_GetObjectItemCaseSensitive(c, ft->hf_keys[k])))
				return mu__why(why, wl, MU_EPROTO, "config.json: %s asks for %s, which "
				               "muster does not run for %s", ft->hf_keys[k], ft->what,
				               e->name);
	*out = e;
	return 0;
}

/* The fields the table keys for config.json, each from the first of its
 * keys present, else its default. */
static int read_fields(const cJSON *c, mu__llm_hp_t *h, char *why, size_t wl)
{
	const mu__hpf_t *f;
	const cJSON *v;
	size_t i, k;
	int rc;

	for (i = 0; (f = mu__hpf_at(i)) != NULL; i++) {
		if (f->hf[0] == NULL)
			continue;
		for (v = NULL, k = 0; k < 2 && f->hf[k] != NULL && v == NULL; k++) {
			v = cJSON_GetObjectItemCaseSensitive(c, f->hf[k]);
			v = cJSON_IsNull(v) ? NULL : v;
		}
		if (f->kind == MU__HPK_TOKEN)
			mu__hpf_set(f, h, cfg_id(v));
		else if (f->kind == MU__HPK_BOOL)
			mu__hpf_set(f, h, cJSON_IsTrue(v));
		else if (v == NULL && (f->flags & MU__HPF_REQUIRED))
			return mu__why(why, wl, MU_EPROTO, "config.json: %s is missing", f->hf[0]);
		else if (v == NULL)
			mu__hpf_set(f, h, mu__hpf_default(f, h, 0));
		else if ((rc = cfg_value(v, f, f->hf[k - 1], h, why, wl)) != 0)
			return rc;
	}
	return 0;
}

/* The sliding window by the entry's rule: on every layer (h->window set),
 * on none, or refused when only some layers slide (the entry does not run
 * MU__AF_SWA_LAYERS). */
static int read_window(const cJSON *c, const mu__arch_t *e, mu__llm_hp_t *h, char *why,
                       size_t wl)
{
	const cJSON *sw = cJSON_GetObjectItemCaseSensitive(c, "sliding_window");
	const cJSON *lt = cJSON_GetObjectItemCaseSensitive(c, "layer_types"), *t;
	const cJSON *types = cJSON_IsArray(lt) ? lt : NULL;
	int32_t size = 0, mwl = 28;
	int slide = 0, full = 0, rc;

	/* Mistral's is 4096 when config.json omits it (transformers'
	 * MistralConfig), none when it is null */
	if (mu__json_is_int(sw, 1, 1 << 30))
		size = (int32_t)sw->valuedouble;
	else if (e->window == MU__WIN_ALWAYS && sw == NULL)
		size = 4096;
	cJSON_ArrayForEach(t, types) {
		if (cJSON_IsString(t) && strcmp(t->valuestring, "sliding_attention") == 0)
			slide++;
		else
			full++;
	}
	/* transformers' Qwen2: no window without use_sliding_window; with it,
	 * the layers layer_types says, else those from max_window_layers on */
	if (e->window == MU__WIN_NONE || size == 0 ||
	    (e->window == MU__WIN_OPT_IN &&
	     !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "use_sliding_window"))))
		return 0;
	if (e->window == MU__WIN_OPT_IN && types == NULL) {
		if ((rc = cfg_int(c, "max_window_layers", 28, 0, 1 << 20, &mwl, why, wl)) != 0)
			return rc;
		slide = h->n_layers > mwl ? h->n_layers - mwl : 0;
		full = h->n_layers - slide;
	}
	if (!(e->features & MU__AF_SWA_LAYERS) && slide > 0 && full > 0)
		return mu__why(why, wl, MU_EPROTO, "config.json: %d of %d layers slide (layer_types, "
		               "max_window_layers): a sliding window on some layers, which muster "
		               "does not run for %s", slide, slide + full, e->name);
	if (e->window == MU__WIN_ALWAYS || e->window == MU__WIN_IF_SET || slide > 0)
		h->window = size;
	return 0;
}

static int read_scaling(const cJSON *c, mu__llm_hp_t *h, char *why, size_t wl)
{
	const cJSON *rs = cJSON_GetObjectItemCaseSensitive(c, "rope_scaling"), *t;
	int rc;

	if (rs == NULL || cJSON_IsNull(rs))
		return 0;
	t = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
	if (t == NULL)
		t = cJSON_GetObjectItemCaseSensitive(rs, "type");
	if (!cJSON_IsString(t))
		return mu__why(why, wl, MU_EPROTO, "config.json: rope_scaling has no rope_type");
	if (strcmp(t->valuestring, "default") == 0)
		return 0;
	if (strcmp(t->valuestring, "linear") == 0)
		h->scaling = MU__RS_LINEAR;
	else if (strcmp(t->valuestring, "llama3") == 0)
		h->scaling = MU__RS_LLAMA3;
	else
		return mu__why(why, wl, MU_EPROTO, "config.json: rope_scaling.rope_type \"%.60s\" is "
		               "not supported (muster takes linear and llama3)", t->valuestring);
	if ((rc = cfg_num(rs, "factor", 0, &h->sc_factor, why, wl)) != 0)
		return rc;
	if (h->scaling == MU__RS_LINEAR)
		return 0;
	if ((rc = cfg_num(rs, "low_freq_factor", 0, &h->sc_low, why, wl)) != 0 ||
	    (rc = cfg_num(rs, "high_freq_factor", 0, &h->sc_high, why, wl)) != 0)
		return rc;
	return cfg_int(rs, "original_max_position_embeddings", -1, 1, 1 << 30, &h->sc_orig,
	               why, wl);
}

/* RoPE over all of each head: Phi-4-mini rotates 3/4 of it, which muster
 * does not run, so it is refused rather than rotated whole. */
static int check_rotary(const cJSON *c, char *why, size_t wl)
{
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(c, "partial_rotary_factor");

	if (p == NULL || cJSON_IsNull(p) || (cJSON_IsNumber(p) && p->valuedouble == 1.0))
		return 0;
	return mu__why(why, wl, MU_EPROTO, "config.json: partial_rotary_factor %g: a rotation of "
	               "part of each head, which muster does not run",
	               cJSON_IsNumber(p) ? p->valuedouble : -1.0);
}

static int read_config(const cJSON *c, mu__llm_hp_t *h, char *why, size_t wl)
{
	const mu__arch_t *e;
	int rc;

	if (!cJSON_IsObject(c))
		return mu__why(why, wl, MU_EPROTO, "config.json is not a JSON object");
	if ((rc = read_arch(c, &e, why, wl)) != 0 || (rc = read_fields(c, h, why, wl)) != 0 ||
	    (rc = read_scaling(c, h, why, wl)) != 0 || (rc = read_window(c, e, h, why, wl)) != 0)
		return rc;
	if ((rc = check_rotary(c, why, wl)) != 0)
		return rc;
	snprintf(h->arch, sizeof(h->arch), "%s", e->name);
	h->rope = e->rope_hf;
	return 0;
}

/* Data in place when aligned for its element, else an aligned copy. */
static const void *aligned(hf_t *hf, const unsigned char *p, uint64_t n, size_t el)
{
	void **v;
	void *q;

	if ((uintptr_t)p % el == 0)
		return p;
	v = mu__realloc(hf->owned, (hf->nowned + 1) * sizeof(*v));
	if (v == NULL)
		return NULL;
	hf->owned = v;
	if ((q = mu__memdup(p, (size_t)n)) == NULL)
		return NULL;
	hf->owned[hf->nowned++] = q;
	return q;
}

static int add_entry(mu__llm_src_t *src, hf_t *hf, const mu__st_file_t *f,
                     const mu__st_entry_t *e, char *why, size_t wl)
{
	const mu__arch_t *a = mu__arch_by_name(src->hp.arch);
	const mu__tspec_t *spec;
	char name[64];
	mu__wtype_t t;
	const void *p;
	int rc, l;

	rc = mu__arch_hf_to_gguf(a, e->name, name, sizeof(name), hf->dir, why, wl);
	if (rc <= 0)
		return rc; /* refused, or a name we skip */
	spec = mu__arch_spec(a, name, &l);
	if (src->hp.tied && spec != NULL && spec->need == MU__NEED_UNTIED)
		return 0; /* lm_head of a tied model */
	if (mu__llm_src_tensor(src, name) != NULL)
		return mu__why(why, wl, MU_EPROTO, "%.200s: tensor %.200s appears twice", hf->dir, e->name);
	/* safetensors spells its element types as ggml does (F32, F16, BF16):
	 * the kernels' table by name, its unquantized types only */
	if (mu__wtype_by_name(mu_dtype_name(e->dtype), &t) != 0 || mu__wtypes[t].block != 1) {
		char list[128];

		return mu__why(why, wl, MU_EPROTO, "%.200s: tensor %.200s is %s; muster computes with %s",
		               hf->dir, e->name, mu_dtype_name(e->dtype),
		               mu__wtype_list(1, list, sizeof(list)));
	}
	if (e->rank != 1 && e->rank != 2)
		return mu__why(why, wl, MU_EPROTO, "%.200s: tensor %.200s has rank %u", hf->dir,
		               e->name, e->rank);
	p = aligned(hf, f->data + e->begin, e->end - e->begin, mu__wtypes[t].block_bytes);
	if (p == NULL)
		return MU_ENOMEM;
	return mu__llm_add_tensor(src, name, t, p, e->rank == 2 ? (int64_t)e->dims[0] : 1,
	                          (int64_t)e->dims[e->rank - 1]);
}

/* Map one safetensors file and put its tensors in the directory. */
static int add_file(mu__llm_src_t *src, hf_t *hf, const char *file, char *why, size_t wl)
{
	char path[4096];
	const unsigned char *base;
	mu__st_file_t f;
	uint64_t hlen;
	size_t len, i;
	int rc;

	snprintf(path, sizeof(path), "%s/%s", hf->dir, file);
	if ((rc = mu__llm_map_file(path, src, &base, &len, why, wl)) != 0)
		return rc;
	hlen = len >= 8 ? mu_le64_get(base) : 0;
	if (len < 8 || hlen > MU_ST_MAX_HEADER || hlen > len - 8)
		return mu__why(why, wl, MU_EPROTO, "%.300s is not safetensors (header length)", path);
	rc = mu__st_parse((const char *)base + 8, (size_t)hlen, len - 8 - hlen, &f, why, wl);
	if (rc != 0)
		return rc;
	f.data = base + 8 + hlen;
	for (i = 0; rc == 0 && i < f.n; i++)
		rc = add_entry(src, hf, &f, &f.e[i], why, wl);
	f.map = NULL; /* ours, not the parser's */
	mu__st_close(&f);
	return rc;
}

/* The shard files of the index, each once, in order of first mention. */
static int add_shards(mu__llm_src_t *src, hf_t *hf, const cJSON *idx, char *why, size_t wl)
{
	const cJSON *map = cJSON_GetObjectItemCaseSensitive(idx, "weight_map"), *e, *p;
	int rc, seen;

	if (!cJSON_IsObject(map))
		return mu__why(why, wl, MU_EPROTO, "model.safetensors.index.json: weight_map is missing");
	cJSON_ArrayForEach(e, map) {
		if (!cJSON_IsString(e) || strchr(e->valuestring, '/') != NULL)
			return mu__why(why, wl, MU_EPROTO, "model.safetensors.index.json: the file of %.200s "
			               "is not a file name in the directory", e->string);
		seen = 0;
		for (p = map->child; p != e; p = p->next)
			if (strcmp(p->valuestring, e->valuestring) == 0)
				seen = 1;
		if (!seen && (rc = add_file(src, hf, e->valuestring, why, wl)) != 0)
			return rc;
	}
	return 0;
}

int mu__llm_open_hf(const char *dir, mu__llm_src_t *src, char *why, size_t wl)
{
	cJSON *cfg = NULL, *idx = NULL;
	hf_t *hf;
	int rc;

	src->fmt = MU__FMT_HF;
	if ((hf = mu__calloc(1, sizeof(*hf))) == NULL || (hf->dir = mu__strdup(dir)) == NULL) {
		hf_free(hf);
		return MU_ENOMEM;
	}
	src->priv = hf;
	src->priv_free = hf_free;
	src->tokenizer = mu__llm_hf_tokenizer;
	if ((rc = read_json(dir, "config.json", HF_CONFIG_MAX, 0, &cfg, why, wl)) != 0)
		return rc;
	rc = read_config(cfg, &src->hp, why, wl);
	cJSON_Delete(cfg);
	if (rc == 0)
		rc = mu__llm_check_hp(src, why, wl);
	if (rc == 0)
		rc = read_json(dir, "model.safetensors.index.json", HF_INDEX_MAX, 1, &idx, why, wl);
	if (rc == 0)
		rc = idx != NULL ? add_shards(src, hf, idx, why, wl)
		                 : add_file(src, hf, "model.safetensors", why, wl);
	cJSON_Delete(idx);
	return rc;
}

/* generation_config.json's eos_token_id (an id or a list) adds stops. */
static int add_gen_eos(const char *dir, mu__tok_t *t, char *why, size_t wl)
{
	cJSON *g = NULL;
	const cJSON *e, *v;
	int32_t ids[16];
	size_t n = 0;
	int rc = read_json(dir, "generation_config.json", HF_CONFIG_MAX, 1, &g, why, wl);

	if (rc != 0 || g == NULL)
		return rc;
	e = cJSON_GetObjectItemCaseSensitive(g, "eos_token_id");
	if (mu__json_is_int(e, 0, INT32_MAX))
		ids[n++] = (int32_t)e->valuedouble;
	if (!cJSON_IsArray(e))
		e = NULL;
	cJSON_ArrayForEach(v, e)
		if (n < 16 && mu__json_is_int(v, 0, INT32_MAX))
			ids[n++] = (int32_t)v->valuedouble;
	cJSON_Delete(g);
	return n > 0 ? mu__tok_add_eos(t, ids, n) : 0;
}

int mu__llm_hf_tokenizer(const void *srcp, mu__tok_t **out, char *why, size_t wl)
{
	const mu__llm_src_t *src = srcp;
	const hf_t *hf = src->priv;
	char path[4096];
	mu__buf_t tj, tc;
	int rc;

	*out = NULL;
	snprintf(path, sizeof(path), "%s/tokenizer.json", hf->dir);
	if ((rc = mu__buf_read_file(&tj, path, HF_TOKENIZER_MAX, why, wl)) != 0)
		return rc;
	snprintf(path, sizeof(path), "%s/tokenizer_config.json", hf->dir);
	rc = mu__buf_read_file(&tc, path, HF_TOKENIZER_MAX, why, wl);
	if (rc == -ENOENT) {
		mu__buf_init(&tc, 0);
		rc = 0;
	}
	if (rc == 0)
		rc = mu__tok_from_hf(tj.data, tj.len, tc.data, tc.len, out, why, wl);
	if (rc == 0 && src->hp.eos >= 0)
		rc = mu__tok_add_eos(*out, &src->hp.eos, 1);
	if (rc == 0)
		rc = add_gen_eos(hf->dir, *out, why, wl);
	if (rc != 0 && *out != NULL) {
		mu__tok_free(*out);
		*out = NULL;
	}
	mu__buf_free(&tj);
	mu__buf_free(&tc);
	return rc;
}
