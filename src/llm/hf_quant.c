/* SPDX-License-Identifier: MIT */
/*
 * mu_hf_quantize (muster/formats.h): an HF directory quantized as the GGUF
 * that tools/llm_convert.py hf-to-gguf makes of it with --type the
 * source's type, without writing that file. The metadata is built as
 * gguf_metadata and gguf_tokenizer_metadata there build it, key for key
 * and type for type, written as a GGUF image in memory and parsed; the
 * tensors are the directory's safetensors as the decoder's loader maps
 * them (llm/load_hf.c: GGUF names, shapes checked against config.json),
 * 1-D ones widened to F32, the matrices as they are, with the rows of a
 * llama Q/K put back from HF's rotate-half order to GGUF's pairs by a row
 * order the quantizer reads them in (formats/gguf_quantize_int.h). The
 * quantizer reads rows through f32, exact from F32, F16 and BF16, so the
 * output is the two-step one byte for byte.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "muster/formats.h"
#include "core/alloc_int.h"
#include "core/endian_int.h"
#include "core/error_int.h"
#include "core/json_int.h"
#include "formats/gguf_int.h"
#include "formats/gguf_quantize_int.h"
#include "formats/quant_rules_int.h"
#include "llm/hf_gguf_int.h"
#include "llm/llm_int.h"

#define CONFIG_MAX ((size_t)1 << 20)
#define IMAGE_MAX ((size_t)1 << 30)

void mu__kvw_init(mu__kvw_t *w)
{
	static const unsigned char head[24] = {'G', 'G', 'U', 'F', 3};

	mu__buf_init(&w->b, IMAGE_MAX);
	w->nkv = 0;
	w->rc = mu__buf_append(&w->b, head, sizeof(head));
}

static void put(mu__kvw_t *w, const void *p, size_t n)
{
	if (w->rc == 0)
		w->rc = mu__buf_append(&w->b, p, n);
}

static void put32(mu__kvw_t *w, uint32_t v)
{
	unsigned char b[4];

	mu_le32_put(b, v);
	put(w, b, 4);
}

static void put_str(mu__kvw_t *w, const char *s, size_t len)
{
	unsigned char b[8];

	mu_le64_put(b, len);
	put(w, b, 8);
	put(w, s, len);
}

static void key(mu__kvw_t *w, const char *k, uint32_t type)
{
	put_str(w, k, strlen(k));
	put32(w, type);
	w->nkv++;
}

void mu__kvw_u32(mu__kvw_t *w, const char *k, uint32_t v)
{
	key(w, k, MU__GGUF_U32);
	put32(w, v);
}

void mu__kvw_f32(mu__kvw_t *w, const char *k, float v)
{
	uint32_t u;

	memcpy(&u, &v, 4);
	key(w, k, MU__GGUF_F32);
	put32(w, u);
}

void mu__kvw_bool(mu__kvw_t *w, const char *k, int v)
{
	unsigned char b = v != 0;

	key(w, k, MU__GGUF_BOOL);
	put(w, &b, 1);
}

void mu__kvw_str(mu__kvw_t *w, const char *k, const char *s, size_t len)
{
	key(w, k, MU__GGUF_STRING);
	put_str(w, s, len);
}

static void arr_head(mu__kvw_t *w, const char *k, uint32_t etype, uint64_t n)
{
	unsigned char b[8];

	key(w, k, MU__GGUF_ARRAY);
	put32(w, etype);
	mu_le64_put(b, n);
	put(w, b, 8);
}

void mu__kvw_arr_str(mu__kvw_t *w, const char *k, uint64_t n)
{
	arr_head(w, k, MU__GGUF_STRING, n);
}

void mu__kvw_elem_str(mu__kvw_t *w, const char *s, size_t len)
{
	put_str(w, s, len);
}

void mu__kvw_arr_u32(mu__kvw_t *w, const char *k, uint32_t etype, const uint32_t *v, uint64_t n)
{
	arr_head(w, k, etype, n);
	for (uint64_t i = 0; i < n; i++)
		put32(w, v[i]);
}

/* What config.json says, checked as llm_convert.py check_hf_config does. */
typedef struct {
	const char *arch; /* GGUF's: "llama", "qwen2", "qwen3" or "phi3" */
	int64_t dim, hidden, layers, heads, kv, head_dim, vocab;
	int tied, llama3;
} cfg_t;

static const cJSON *item(const cJSON *c, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, k);

	return cJSON_IsNull(v) ? NULL : v;
}

static int is_true(const cJSON *v)
{
	return v != NULL && !cJSON_IsFalse(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0) &&
	       !(cJSON_IsString(v) && v->valuestring[0] == '\0');
}

static int cfg_pos(const cJSON *c, const char *k, int64_t *out, const char *path, char *why,
                   size_t wl)
{
	if (!mu__json_is_int(item(c, k), 1, UINT32_MAX))
		return mu__why(why, wl, MU_EPROTO, "%s: %s is missing or not a positive integer", path,
		               k);
	*out = (int64_t)item(c, k)->valuedouble;
	return 0;
}

static int check_cfg(const cJSON *c, cfg_t *o, const char *path, char *why, size_t wl)
{
	static const char *const need[] = {"hidden_size", "intermediate_size", "num_hidden_layers",
	                                   "num_attention_heads", "vocab_size"};
	static const char *const refused[] = {"attention_bias", "mlp_bias", "use_sliding_window"};
	int64_t *dst[] = {&o->dim, &o->hidden, &o->layers, &o->heads, &o->vocab};
	const cJSON *a = cJSON_GetArrayItem(item(c, "architectures"), 0), *act, *rs, *ty;
	int rc;

	memset(o, 0, sizeof(*o));
	if (cJSON_IsString(a) && (strcmp(a->valuestring, "LlamaForCausalLM") == 0 ||
	                          strcmp(a->valuestring, "MistralForCausalLM") == 0))
		o->arch = "llama";
	else if (cJSON_IsString(a) && strcmp(a->valuestring, "Qwen2ForCausalLM") == 0)
		o->arch = "qwen2";
	else if (cJSON_IsString(a) && strcmp(a->valuestring, "Qwen3ForCausalLM") == 0)
		o->arch = "qwen3";
	else if (cJSON_IsString(a) && strcmp(a->valuestring, "Phi3ForCausalLM") == 0)
		o->arch = "phi3";
	else
		return mu__why(why, wl, MU_EPROTO, "%s: architectures \"%.80s\" is not supported (muster "
		               "quantizes LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
		               "Qwen3ForCausalLM and Phi3ForCausalLM)",
		               path, cJSON_IsString(a) ? a->valuestring : "?");
	for (size_t i = 0; i < 5; i++)
		if ((rc = cfg_pos(c, need[i], dst[i], path, why, wl)) != 0)
			return rc;
	act = item(c, "hidden_act");
	if (act != NULL && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0))
		return mu__why(why, wl, MU_EPROTO, "%s: hidden_act is not \"silu\"", path);
	for (size_t i = 0; i < 3; i++)
		if (is_true(item(c, refused[i])))
			return mu__why(why, wl, MU_EPROTO, "%s: %s: true is not supported", path, refused[i]);
	if ((rs = item(c, "rope_scaling")) != NULL && is_true(rs)) {
		ty = item(rs, "rope_type") != NULL ? item(rs, "rope_type") : item(rs, "type");
		if (!cJSON_IsString(ty) || (strcmp(ty->valuestring, "llama3") != 0 &&
		                            strcmp(ty->valuestring, "linear") != 0 &&
		                            strcmp(ty->valuestring, "default") != 0))
			return mu__why(why, wl, MU_EPROTO, "%s: rope_scaling type \"%.40s\" is not "
			               "supported (llama3, linear)", path,
			               cJSON_IsString(ty) ? ty->valuestring : "?");
		o->llama3 = strcmp(ty->valuestring, "llama3") == 0;
	}
	o->kv = o->heads;
	if (is_true(item(c, "num_key_value_heads")) &&
	    (!mu__json_is_int(item(c, "num_key_value_heads"), 1, UINT32_MAX) ||
	     o->heads % (int64_t)item(c, "num_key_value_heads")->valuedouble != 0))
		return mu__why(why, wl, MU_EPROTO, "%s: num_key_value_heads must divide "
		               "num_attention_heads %lld", path, (long long)o->heads);
	if (is_true(item(c, "num_key_value_heads")))
		o->kv = (int64_t)item(c, "num_key_value_heads")->valuedouble;
	o->head_dim = o->dim / o->heads;
	if (is_true(item(c, "head_dim")) && !mu__json_is_int(item(c, "head_dim"), 1, UINT32_MAX))
		return mu__why(why, wl, MU_EPROTO, "%s: head_dim must be a positive even number", path);
	if (is_true(item(c, "head_dim")))
		o->head_dim = (int64_t)item(c, "head_dim")->valuedouble;
	if (o->head_dim <= 0 || o->head_dim % 2 != 0)
		return mu__why(why, wl, MU_EPROTO, "%s: head_dim %lld must be a positive even number",
		               path, (long long)o->head_dim);
	o->tied = is_true(item(c, "tie_word_embeddings"));
	return 0;
}

static double num(const cJSON *c, const char *k, double def)
{
	const cJSON *v = item(c, k);

	return cJSON_IsNumber(v) ? v->valuedouble : def;
}

/* The last component of dir made absolute (os.path.abspath: "." and ".."
 * resolved by the text, symlinks not): the converter's general.name. */
static void dir_name(const char *dir, char *out, size_t n)
{
	char path[8192] = "", *save = NULL, *p;
	char *parts[512];
	int np = 0;

	if (dir[0] != '/' && getcwd(path, sizeof(path) / 2) == NULL)
		path[0] = '\0';
	snprintf(path + strlen(path), sizeof(path) - strlen(path), "/%s", dir);
	for (p = strtok_r(path, "/", &save); p != NULL; p = strtok_r(NULL, "/", &save)) {
		if (strcmp(p, ".") == 0)
			continue;
		if (strcmp(p, "..") == 0)
			np -= np > 0;
		else if (np < 512)
			parts[np++] = p;
	}
	snprintf(out, n, "%s", np > 0 ? parts[np - 1] : "");
}

/* gguf_metadata's keys. */
static void write_meta(mu__kvw_t *w, const cJSON *c, const cfg_t *o, const char *name,
                       uint32_t ftype)
{
	const cJSON *rs = item(c, "rope_scaling"), *ty;
	char k[128];
	const char *a = o->arch;

	mu__kvw_str(w, "general.architecture", a, strlen(a));
	mu__kvw_str(w, "general.name", name, strlen(name));
	mu__kvw_u32(w, "general.alignment", 32);
	mu__kvw_u32(w, "general.file_type", ftype);
	mu__kvw_u32(w, "general.quantization_version", 2);
#define U32(K, V) (snprintf(k, sizeof(k), "%s." K, a), mu__kvw_u32(w, k, (uint32_t)(V)))
#define F32(K, V) (snprintf(k, sizeof(k), "%s." K, a), mu__kvw_f32(w, k, (float)(V)))
	U32("vocab_size", o->vocab);
	U32("context_length", num(c, "max_position_embeddings", 2048));
	U32("embedding_length", o->dim);
	U32("block_count", o->layers);
	U32("feed_forward_length", o->hidden);
	U32("rope.dimension_count", o->head_dim);
	U32("attention.head_count", o->heads);
	U32("attention.head_count_kv", o->kv);
	if (o->head_dim != o->dim / o->heads) {
		U32("attention.key_length", o->head_dim);
		U32("attention.value_length", o->head_dim);
	}
	F32("attention.layer_norm_rms_epsilon", num(c, "rms_norm_eps", 1e-6));
	F32("rope.freq_base", num(c, "rope_theta", 10000.0));
	ty = item(rs, "rope_type") != NULL ? item(rs, "rope_type") : item(rs, "type");
	if (cJSON_IsString(ty) && strcmp(ty->valuestring, "linear") == 0) {
		snprintf(k, sizeof(k), "%s.rope.scaling.type", a);
		mu__kvw_str(w, k, "linear", 6);
		F32("rope.scaling.factor", num(rs, "factor", 0));
	}
#undef U32
#undef F32
}

/* llm_convert.py llama3_rope_factors: what llama.cpp divides each RoPE
 * frequency by, n = head_dim / 2 of them. */
static int llama3_factors(const cJSON *c, int64_t head_dim, float *out, const char *path,
                          char *why, size_t wl)
{
	const cJSON *rs = item(c, "rope_scaling");
	static const char *const keys[] = {"factor", "low_freq_factor", "high_freq_factor",
	                                   "original_max_position_embeddings"};
	double theta = num(c, "rope_theta", 10000.0), v[4];

	for (int i = 0; i < 4; i++) {
		if (!cJSON_IsNumber(item(rs, keys[i])))
			return mu__why(why, wl, MU_EPROTO, "%s: rope_scaling.%s is missing", path, keys[i]);
		v[i] = item(rs, keys[i])->valuedouble;
	}
	for (int64_t j = 0; j < head_dim / 2; j++) {
		double f = 1.0 / pow(theta, (double)(2 * j) / (double)head_dim);
		double wavelen = 2 * M_PI / f, smooth;

		if (wavelen < v[3] / v[2]) {
			out[j] = 1.0f;
		} else if (wavelen > v[3] / v[1]) {
			out[j] = (float)v[0];
		} else {
			smooth = (v[3] / wavelen - v[1]) / (v[2] - v[1]);
			out[j] = (float)(1.0 / ((1 - smooth) / v[0] + smooth));
		}
	}
	return 0;
}

/* GGUF's tensor names and HF's, for messages. */
static const char *const names[][2] = {
	{"attn_norm.weight", "input_layernorm.weight"},
	{"attn_q.weight", "self_attn.q_proj.weight"}, {"attn_q.bias", "self_attn.q_proj.bias"},
	{"attn_k.weight", "self_attn.k_proj.weight"}, {"attn_k.bias", "self_attn.k_proj.bias"},
	{"attn_v.weight", "self_attn.v_proj.weight"}, {"attn_v.bias", "self_attn.v_proj.bias"},
	{"attn_output.weight", "self_attn.o_proj.weight"},
	{"ffn_norm.weight", "post_attention_layernorm.weight"},
	{"ffn_gate.weight", "mlp.gate_proj.weight"}, {"ffn_up.weight", "mlp.up_proj.weight"},
	{"ffn_down.weight", "mlp.down_proj.weight"},
};

/* Qwen3's layer: names' without the biases, with q/k norms after the
 * output projection, as gguf_tensor_plan orders them. */
static const char *const qwen3_names[][2] = {
	{"attn_norm.weight", "input_layernorm.weight"},
	{"attn_q.weight", "self_attn.q_proj.weight"},
	{"attn_k.weight", "self_attn.k_proj.weight"},
	{"attn_v.weight", "self_attn.v_proj.weight"},
	{"attn_output.weight", "self_attn.o_proj.weight"},
	{"attn_q_norm.weight", "self_attn.q_norm.weight"},
	{"attn_k_norm.weight", "self_attn.k_norm.weight"},
	{"ffn_norm.weight", "post_attention_layernorm.weight"},
	{"ffn_gate.weight", "mlp.gate_proj.weight"}, {"ffn_up.weight", "mlp.up_proj.weight"},
	{"ffn_down.weight", "mlp.down_proj.weight"},
};

/* Phi-3's: q, k, v in one matrix, gate and up in another (ffn_up). */
static const char *const phi3_names[][2] = {
	{"attn_norm.weight", "input_layernorm.weight"},
	{"attn_qkv.weight", "self_attn.qkv_proj.weight"},
	{"attn_output.weight", "self_attn.o_proj.weight"},
	{"ffn_norm.weight", "post_attention_layernorm.weight"},
	{"ffn_up.weight", "mlp.gate_up_proj.weight"},
	{"ffn_down.weight", "mlp.down_proj.weight"},
};

/* The GGUF in memory: its image (metadata), the tensors' row orders and
 * the buffers of the tensors widened to F32. */
typedef struct {
	mu__kvw_t w;
	mu__gguf_t g;
	size_t cap;
	uint32_t **rows;
	void **owned;
	size_t nowned;
} hfq_t;

static int own(hfq_t *q, void *p)
{
	void **v;

	if (p == NULL || (v = mu__realloc(q->owned, (q->nowned + 1) * sizeof(*v))) == NULL) {
		mu__free(p);
		return MU_ENOMEM;
	}
	q->owned = v;
	q->owned[q->nowned++] = p;
	return 0;
}

/* Tensor name of ggml type `type`, [rows, cols] (a vector when rows is 0). */
static int add(hfq_t *q, const char *name, uint32_t type, const void *data, int64_t rows,
               int64_t cols, uint64_t bytes, uint32_t *order)
{
	mu__gguf_tensor_t *t;

	if (q->g.nt == q->cap) {
		size_t n = q->cap ? q->cap * 2 : 64;
		mu__gguf_tensor_t *nt = mu__realloc(q->g.t, n * sizeof(*nt));
		uint32_t **nr = nt != NULL ? mu__realloc(q->rows, n * sizeof(*nr)) : NULL;

		if (nt != NULL)
			q->g.t = nt;
		if (nr == NULL) {
			mu__free(order);
			return MU_ENOMEM;
		}
		q->rows = nr;
		q->cap = n;
	}
	t = &q->g.t[q->g.nt];
	memset(t, 0, sizeof(*t));
	if ((t->name = mu__strdup(name)) == NULL) {
		mu__free(order);
		return MU_ENOMEM;
	}
	t->type = type;
	t->n_dims = rows > 0 ? 2 : 1;
	t->ne[0] = (uint64_t)cols;
	t->ne[1] = rows > 0 ? (uint64_t)rows : 1;
	t->ne[2] = t->ne[3] = 1;
	t->bytes = bytes;
	t->data = data;
	q->rows[q->g.nt++] = order;
	return 0;
}

/* Row r of the GGUF llama Q/K is HF's row order[r] (to_interleaved). */
static uint32_t *interleave(int64_t rows, int64_t heads)
{
	int64_t per = rows / heads, half = per / 2;
	uint32_t *o = mu__malloc((size_t)rows * sizeof(*o));

	for (int64_t h = 0; o != NULL && h < heads; h++)
		for (int64_t j = 0; j < half; j++)
			for (int64_t s = 0; s < 2; s++)
				o[h * per + 2 * j + s] = (uint32_t)(h * per + s * half + j);
	return o;
}

/* One of the source's tensors, as hf-to-gguf writes it. */
static int add_src(hfq_t *q, const mu__llm_src_t *src, const cfg_t *o, const char *name,
                   char *why, size_t wl)
{
	const mu__llm_tensor_t *t = mu__llm_src_tensor(src, name);
	size_t n = strlen(name);
	uint32_t *order = NULL;
	float *f;
	int rc;

	if (t == NULL)
		return mu__why(why, wl, MU_EPROTO, "%.300s: tensor %s is missing", src->path, name);
	if ((n > 12 && strcmp(name + n - 12, "_norm.weight") == 0) ||
	    (n > 5 && strcmp(name + n - 5, ".bias") == 0)) {
		if (t->m.type == MU__WT_F32)
			return add(q, name, 0, t->m.data, 0, t->m.cols, t->bytes, NULL);
		if ((f = mu__malloc((size_t)t->m.cols * sizeof(float))) == NULL || (rc = own(q, f)) != 0)
			return MU_ENOMEM;
		mu__wtypes[t->m.type].to_f32(t->m.data, t->m.cols, f);
		return add(q, name, 0, f, 0, t->m.cols, (uint64_t)t->m.cols * 4, NULL);
	}
	if (strcmp(o->arch, "llama") == 0 && (strstr(name, ".attn_q.weight") != NULL ||
	                                      strstr(name, ".attn_k.weight") != NULL)) {
		order = interleave(t->m.rows, strstr(name, ".attn_q.") != NULL ? o->heads : o->kv);
		if (order == NULL)
			return MU_ENOMEM;
	}
	return add(q, name, mu__wtypes[t->m.type].ggml, t->m.data, t->m.rows, t->m.cols, t->bytes,
	           order);
}

/* The tensors in gguf_tensor_plan's order, rope_freqs first. */
static int add_all(hfq_t *q, const mu__llm_src_t *src, const cJSON *c, const cfg_t *o,
                   const char *path, char *why, size_t wl)
{
	int qwen = strcmp(o->arch, "qwen2") == 0, rc = 0;
	char name[64];
	float *f;

	if (o->llama3) {
		if ((f = mu__malloc((size_t)(o->head_dim / 2) * sizeof(float))) == NULL ||
		    (rc = own(q, f)) != 0)
			return MU_ENOMEM;
		if ((rc = llama3_factors(c, o->head_dim, f, path, why, wl)) != 0 ||
		    (rc = add(q, "rope_freqs.weight", 0, f, 0, o->head_dim / 2,
		              (uint64_t)(o->head_dim / 2) * 4, NULL)) != 0)
			return rc;
	}
	const char *const(*list)[2] = names;
	size_t n = sizeof(names) / sizeof(names[0]);

	if (strcmp(o->arch, "qwen3") == 0) {
		list = qwen3_names;
		n = sizeof(qwen3_names) / sizeof(qwen3_names[0]);
	} else if (strcmp(o->arch, "phi3") == 0) {
		list = phi3_names;
		n = sizeof(phi3_names) / sizeof(phi3_names[0]);
	}
	rc = add_src(q, src, o, "token_embd.weight", why, wl);
	for (int64_t l = 0; rc == 0 && l < o->layers; l++)
		for (size_t i = 0; rc == 0 && i < n; i++) {
			if (!qwen && strstr(list[i][0], ".bias") != NULL)
				continue;
			snprintf(name, sizeof(name), "blk.%lld.%s", (long long)l, list[i][0]);
			rc = add_src(q, src, o, name, why, wl);
		}
	if (rc == 0)
		rc = add_src(q, src, o, "output_norm.weight", why, wl);
	if (rc == 0 && !o->tied)
		rc = add_src(q, src, o, "output.weight", why, wl);
	return rc;
}

/* The loader's message names a tensor by its GGUF name: add HF's. */
static void add_hf_name(char *err, size_t el)
{
	char *p = strstr(err, "tensor "), g[64] = "", hf[96] = "";
	int layer = -1;

	if (p == NULL || sscanf(p, "tensor %63s", g) != 1)
		return;
	if (strcmp(g, "token_embd.weight") == 0)
		snprintf(hf, sizeof(hf), "model.embed_tokens.weight");
	else if (strcmp(g, "output_norm.weight") == 0)
		snprintf(hf, sizeof(hf), "model.norm.weight");
	else if (strcmp(g, "output.weight") == 0)
		snprintf(hf, sizeof(hf), "lm_head.weight");
	for (size_t i = 0; hf[0] == '\0' && i < sizeof(names) / sizeof(names[0]); i++) {
		char want[80];

		if (sscanf(g, "blk.%d.", &layer) != 1)
			break;
		snprintf(want, sizeof(want), "blk.%d.%s", layer, names[i][0]);
		if (strcmp(g, want) == 0)
			snprintf(hf, sizeof(hf), "model.layers.%d.%s", layer, names[i][1]);
	}
	if (hf[0] != '\0' && strlen(err) + strlen(hf) + 16 < el)
		snprintf(err + strlen(err), el - strlen(err), " (%s in the safetensors)", hf);
}

static int read_config(const char *in, cJSON **c, char *path, size_t pl, char *err, size_t el)
{
	struct stat st;
	mu__buf_t b;
	int rc;

	if (stat(in, &st) != 0 || !S_ISDIR(st.st_mode))
		return mu__why(err, el, stat(in, &st) != 0 ? -errno : -ENOTDIR,
		               "%.300s is not a directory", in);
	snprintf(path, pl, "%s/config.json", in);
	rc = mu__buf_read_file(&b, path, CONFIG_MAX, err, el);
	if (rc == -ENOENT)
		return mu__why(err, el, MU_EPROTO, "%.300s: no config.json (not an HF checkpoint "
		               "directory)", in);
	if (rc != 0)
		return rc;
	rc = mu__json_parse(b.data != NULL ? b.data : "", b.len, c);
	mu__buf_free(&b);
	if (rc == MU_EJSON)
		return mu__why(err, el, MU_EPROTO, "%.300s is not valid JSON", path);
	if (rc == 0 && !cJSON_IsObject(*c))
		return mu__why(err, el, MU_EPROTO, "%.300s is not a JSON object", path);
	return rc;
}

/* The image's header counts (no tensors, nkv keys) and its padding. */
static int finish_image(hfq_t *q)
{
	static const unsigned char zero[32];

	if (q->w.rc != 0)
		return q->w.rc;
	mu_le64_put((unsigned char *)q->w.b.data + 16, q->w.nkv);
	return mu__buf_append(&q->w.b, zero, (32 - q->w.b.len % 32) % 32);
}

static int check_args(const char *in, const char *out, const char *type, int threads, char *err,
                      size_t el)
{
	const mu__qftype_t *ft = type != NULL ? mu__qftype(type) : NULL;

	if (in == NULL || out == NULL)
		return mu__why(err, el, MU_EARG, "needs an input and an output");
	if (threads < 1 || threads > MU__POOL_MAX_THREADS)
		return mu__why(err, el, MU_EARG, "threads %d is not in [1, %d]", threads,
		               MU__POOL_MAX_THREADS);
	if (ft == NULL)
		return mu__why(err, el, MU_EARG, "unknown type \"%s\"; the types are %s",
		               type ? type : "", mu__qftype_list());
	if (ft->why != NULL)
		return mu__why(err, el, MU_EARG, "type %s is not written: %s", type, ft->why);
	return 0;
}

int mu_hf_quantize(const char *in, const char *out, const char *type, int threads,
                   mu_quant_summary_t *sum, char *err, size_t errlen)
{
	char path[4200], name[256];
	mu__llm_src_t src;
	cJSON *c = NULL;
	cfg_t o;
	hfq_t q;
	int rc, opened = 0;

	if (errlen > 0)
		err[0] = '\0';
	memset(&q, 0, sizeof(q));
	mu__kvw_init(&q.w);
	if ((rc = check_args(in, out, type, threads, err, errlen)) == 0 &&
	    (rc = read_config(in, &c, path, sizeof(path), err, errlen)) == 0)
		rc = check_cfg(c, &o, path, err, errlen);
	if (rc == 0 && (rc = mu__llm_src_open(in, NULL, &src, err, errlen)) == 0)
		opened = 1;
	else if (rc != 0 && errlen > 0)
		add_hf_name(err, errlen);
	if (rc == 0) {
		dir_name(in, name, sizeof(name));
		write_meta(&q.w, c, &o, name, 0);
		rc = mu__hf_gguf_tokenizer(&q.w, in, c, o.vocab, err, errlen);
	}
	if (rc == 0 && (rc = finish_image(&q)) == 0)
		rc = mu__gguf_parse(q.w.b.data, q.w.b.len, &q.g, err, errlen);
	if (rc == 0)
		rc = add_all(&q, &src, c, &o, path, err, errlen);
	if (rc == 0)
		rc = mu__gguf_quantize_parsed(&q.g, (const uint32_t *const *)q.rows, name, out, type,
		                              threads, sum, err, errlen);
	if (rc != 0 && errlen > 0 && err[0] == '\0')
		snprintf(err, errlen, "%s", mu_strerror(rc));
	for (size_t i = 0; q.rows != NULL && i < q.g.nt; i++)
		mu__free(q.rows[i]);
	for (size_t i = 0; i < q.nowned; i++)
		mu__free(q.owned[i]);
	mu__free(q.rows);
	mu__free(q.owned);
	mu__gguf_free(&q.g);
	mu__buf_free(&q.w.b);
	if (opened)
		mu__llm_src_free(&src);
	cJSON_Delete(c);
	return rc;
}
