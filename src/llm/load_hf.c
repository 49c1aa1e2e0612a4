/* SPDX-License-Identifier: MIT */
/*
 * A decoder from an HF checkpoint directory: config.json (Llama, Mistral
 * and Qwen2 causal LMs), model.safetensors or shards listed in
 * model.safetensors.index.json, and tokenizer.json with
 * tokenizer_config.json and generation_config.json when present.
 *
 * Tensors get GGUF's names (model.layers.N.self_attn.q_proj.weight is
 * blk.N.attn_q.weight) so the decoder reads every format alike. HF keeps
 * Q/K rows in rotate_half order, so the decoder rotates halves.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/error_int.h"
#include "core/json_int.h"
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

/* A token id or a list of them (eos_token_id): the first. */
static int32_t cfg_id(const cJSON *c, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);

	if (cJSON_IsArray(v))
		v = cJSON_GetArrayItem(v, 0);
	return mu__json_is_int(v, 0, INT32_MAX) ? (int32_t)v->valuedouble : -1;
}

static int read_arch(const cJSON *c, mu__llm_hp_t *h, char *why, size_t wl)
{
	static const struct { const char *cls, *arch; } known[] = {
		{"LlamaForCausalLM", "llama"}, {"MistralForCausalLM", "mistral"},
		{"Qwen2ForCausalLM", "qwen2"},
	};
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(c, "architectures");
	const cJSON *act = cJSON_GetObjectItemCaseSensitive(c, "hidden_act");
	const char *cls;
	size_t i;

	a = cJSON_IsArray(a) ? cJSON_GetArrayItem(a, 0) : NULL;
	if (!cJSON_IsString(a))
		return mu__why(why, wl, MU_EPROTO, "config.json: architectures is missing");
	cls = a->valuestring;
	for (i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (strcmp(cls, known[i].cls) == 0)
			break;
	if (i == sizeof(known) / sizeof(known[0]))
		return mu__why(why, wl, MU_EPROTO, "config.json: architectures \"%.100s\" is not "
		               "supported (muster runs LlamaForCausalLM, MistralForCausalLM and "
		               "Qwen2ForCausalLM)", cls);
	snprintf(h->arch, sizeof(h->arch), "%s", known[i].arch);
	if (act != NULL && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0))
		return mu__why(why, wl, MU_EPROTO, "config.json: hidden_act \"%.60s\" is not "
		               "supported (muster runs silu)",
		               cJSON_IsString(act) ? act->valuestring : "?");
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "mlp_bias")))
		return mu__why(why, wl, MU_EPROTO, "config.json: mlp_bias true is not supported");
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

static int read_config(const cJSON *c, mu__llm_hp_t *h, char *why, size_t wl)
{
	const cJSON *sw = cJSON_GetObjectItemCaseSensitive(c, "sliding_window");
	int rc;

	if (!cJSON_IsObject(c))
		return mu__why(why, wl, MU_EPROTO, "config.json is not a JSON object");
	if ((rc = read_arch(c, h, why, wl)) != 0 ||
	    (rc = cfg_int(c, "hidden_size", -1, 1, 1 << 16, &h->dim, why, wl)) != 0 ||
	    (rc = cfg_int(c, "intermediate_size", -1, 1, 1 << 18, &h->hidden, why, wl)) != 0 ||
	    (rc = cfg_int(c, "num_hidden_layers", -1, 1, 1024, &h->n_layers, why, wl)) != 0 ||
	    (rc = cfg_int(c, "num_attention_heads", -1, 1, 1024, &h->n_heads, why, wl)) != 0 ||
	    (rc = cfg_int(c, "num_key_value_heads", h->n_heads, 1, 1024, &h->n_kv_heads, why, wl)) ||
	    (rc = cfg_int(c, "head_dim", h->dim / h->n_heads, 1, 1024, &h->head_dim, why, wl)) ||
	    (rc = cfg_int(c, "vocab_size", -1, 1, 1 << 22, &h->vocab, why, wl)) != 0 ||
	    (rc = cfg_int(c, "max_position_embeddings", 2048, 1, 1 << 24, &h->ctx, why, wl)) ||
	    (rc = cfg_num(c, "rms_norm_eps", 1e-6, &h->eps, why, wl)) != 0 ||
	    (rc = cfg_num(c, "rope_theta", 10000.0, &h->theta, why, wl)) != 0 ||
	    (rc = read_scaling(c, h, why, wl)) != 0)
		return rc;
	/* Mistral's window is 4096 when config.json omits it (transformers'
	 * MistralConfig), none when it is null; Qwen2 carries one it does not
	 * use unless use_sliding_window. */
	if (strcmp(h->arch, "mistral") == 0 && sw == NULL)
		h->window = 4096;
	else if (mu__json_is_int(sw, 1, 1 << 30) &&
	         (strcmp(h->arch, "mistral") == 0 ||
	          cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "use_sliding_window"))))
		h->window = (int32_t)sw->valuedouble;
	h->tied = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "tie_word_embeddings"));
	h->rope = MU__ROPE_HALVES;
	h->bos = cfg_id(c, "bos_token_id");
	h->eos = cfg_id(c, "eos_token_id");
	return 0;
}

/* HF's name for a tensor, as GGUF names it; NULL for tensors we skip. */
static const char *gguf_name(const char *hf, char *out, size_t n)
{
	static const struct { const char *hf, *gg; } sub[] = {
		{"input_layernorm.weight", "attn_norm.weight"},
		{"post_attention_layernorm.weight", "ffn_norm.weight"},
		{"self_attn.q_proj.weight", "attn_q.weight"}, {"self_attn.q_proj.bias", "attn_q.bias"},
		{"self_attn.k_proj.weight", "attn_k.weight"}, {"self_attn.k_proj.bias", "attn_k.bias"},
		{"self_attn.v_proj.weight", "attn_v.weight"}, {"self_attn.v_proj.bias", "attn_v.bias"},
		{"self_attn.o_proj.weight", "attn_output.weight"},
		{"self_attn.o_proj.bias", "attn_output.bias"},
		{"mlp.gate_proj.weight", "ffn_gate.weight"}, {"mlp.up_proj.weight", "ffn_up.weight"},
		{"mlp.down_proj.weight", "ffn_down.weight"},
	};
	int l, off = 0;
	size_t i;

	if (strcmp(hf, "model.embed_tokens.weight") == 0)
		return "token_embd.weight";
	if (strcmp(hf, "model.norm.weight") == 0)
		return "output_norm.weight";
	if (strcmp(hf, "lm_head.weight") == 0)
		return "output.weight";
	if (sscanf(hf, "model.layers.%d.%n", &l, &off) != 1 || off == 0 || l < 0)
		return NULL;
	for (i = 0; i < sizeof(sub) / sizeof(sub[0]); i++)
		if (strcmp(hf + off, sub[i].hf) == 0) {
			snprintf(out, n, "blk.%d.%s", l, sub[i].gg);
			return out;
		}
	return NULL;
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
	char buf[64];
	const char *name = gguf_name(e->name, buf, sizeof(buf));
	mu__wtype_t t;
	const void *p;

	if (name == NULL || (src->hp.tied && strcmp(name, "output.weight") == 0))
		return 0;
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
	hlen = len >= 8 ? (uint64_t)base[0] | (uint64_t)base[1] << 8 | (uint64_t)base[2] << 16 |
	                  (uint64_t)base[3] << 24 | (uint64_t)base[4] << 32 |
	                  (uint64_t)base[5] << 40 | (uint64_t)base[6] << 48 | (uint64_t)base[7] << 56
	                : 0;
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
