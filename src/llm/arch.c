/* SPDX-License-Identifier: MIT */
/*
 * The architecture table: every decoder architecture muster runs, with its
 * names in each format, its RoPE layout, activation, norm, features and
 * tensors (arch_int.h says what each field means), and the lookups the
 * loaders, the checker and the binder make in it. Adding an architecture
 * is an entry here plus the code of any feature it needs
 * (docs/internals/llm.md).
 */
#include <stdio.h>
#include <string.h>

#include "muster/common.h"
#include "core/error_int.h"
#include "llm/arch_int.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* The tensors of the whole model, alike in the whole Llama family. In a
 * llama2.c checkpoint, place 11 holds the two legacy freq_cis tables,
 * which no tensor here is. */
static const mu__tspec_t family_model[] = {
	{MU__R_TOKEN_EMBD, "token_embd.weight", "model.embed_tokens.weight", MU__SZ_VOCAB,
	 MU__SZ_DIM, MU__NEED_REQUIRED, MU__AT_FIRST, 0},
	{MU__R_OUTPUT_NORM, "output_norm.weight", "model.norm.weight", MU__SZ_1, MU__SZ_DIM,
	 MU__NEED_REQUIRED, MU__AT_LAST, 10},
	{MU__R_OUTPUT, "output.weight", "lm_head.weight", MU__SZ_VOCAB, MU__SZ_DIM,
	 MU__NEED_UNTIED, MU__AT_LAST, 12},
	{MU__R_ROPE_FREQS, "rope_freqs.weight", NULL, MU__SZ_1, MU__SZ_HALF_HEAD,
	 MU__NEED_OPTIONAL, MU__AT_EVERY, -1},
};

/*
 * The rows of the Llama family's block, as GGUF and HF name them; each
 * architecture's list below says which it has, how much it needs each,
 * and (llama2.c) in which place of that checkpoint it lies (-1: none).
 */
#define ROW(role, gguf, hf, rows, cols, need, l2c) \
	{MU__R_##role, gguf, hf, MU__SZ_##rows, MU__SZ_##cols, MU__NEED_##need, 0, l2c}
#define ATTN_NORM(l2c) ROW(ATTN_NORM, "attn_norm.weight", "input_layernorm.weight", 1, DIM, REQUIRED, l2c)
#define Q(l2c) ROW(Q, "attn_q.weight", "self_attn.q_proj.weight", QDIM, DIM, REQUIRED, l2c)
#define K(l2c) ROW(K, "attn_k.weight", "self_attn.k_proj.weight", KVDIM, DIM, REQUIRED, l2c)
#define V(l2c) ROW(V, "attn_v.weight", "self_attn.v_proj.weight", KVDIM, DIM, REQUIRED, l2c)
#define O(l2c) ROW(O, "attn_output.weight", "self_attn.o_proj.weight", DIM, QDIM, REQUIRED, l2c)
#define FFN_NORM(l2c) \
	ROW(FFN_NORM, "ffn_norm.weight", "post_attention_layernorm.weight", 1, DIM, REQUIRED, l2c)
#define GATE(l2c) ROW(GATE, "ffn_gate.weight", "mlp.gate_proj.weight", HIDDEN, DIM, REQUIRED, l2c)
#define UP(l2c) ROW(UP, "ffn_up.weight", "mlp.up_proj.weight", HIDDEN, DIM, REQUIRED, l2c)
#define DOWN(l2c) ROW(DOWN, "ffn_down.weight", "mlp.down_proj.weight", DIM, HIDDEN, REQUIRED, l2c)
#define Q_BIAS(need) ROW(Q_BIAS, "attn_q.bias", "self_attn.q_proj.bias", 1, QDIM, need, -1)
#define K_BIAS(need) ROW(K_BIAS, "attn_k.bias", "self_attn.k_proj.bias", 1, KVDIM, need, -1)
#define V_BIAS(need) ROW(V_BIAS, "attn_v.bias", "self_attn.v_proj.bias", 1, KVDIM, need, -1)
#define O_BIAS(need) ROW(O_BIAS, "attn_output.bias", "self_attn.o_proj.bias", 1, DIM, need, -1)
#define Q_NORM ROW(Q_NORM, "attn_q_norm.weight", "self_attn.q_norm.weight", 1, HEAD, REQUIRED, -1)
#define K_NORM ROW(K_NORM, "attn_k_norm.weight", "self_attn.k_norm.weight", 1, HEAD, REQUIRED, -1)

/* Llama: Meta's block; q/k/v/o biases when config.json's attention_bias
 * asks for them. llama2.c checkpoints are this. */
static const mu__tspec_t llama_layer[] = {
	ATTN_NORM(1), Q(2), K(3), V(4), O(5), FFN_NORM(6), GATE(7), UP(9), DOWN(8),
	Q_BIAS(OPTIONAL), K_BIAS(OPTIONAL), V_BIAS(OPTIONAL), O_BIAS(OPTIONAL),
};

/* Mistral: Llama's block without biases. */
static const mu__tspec_t mistral_layer[] = {
	ATTN_NORM(-1), Q(-1), K(-1), V(-1), O(-1), FFN_NORM(-1), GATE(-1), UP(-1), DOWN(-1),
};

/* Qwen2: Llama's block with q/k/v biases (always: transformers' Qwen2
 * builds them unconditionally), none on the output. */
static const mu__tspec_t qwen2_layer[] = {
	ATTN_NORM(-1), Q(-1), K(-1), V(-1), O(-1), FFN_NORM(-1), GATE(-1), UP(-1), DOWN(-1),
	Q_BIAS(REQUIRED), K_BIAS(REQUIRED), V_BIAS(REQUIRED),
};

/* Qwen3: Llama's block without biases (attention_bias is false in every
 * released model), and an RMSNorm of each head of q and of k, one weight
 * vector of head_dim for all heads, before RoPE. */
static const mu__tspec_t qwen3_layer[] = {
	ATTN_NORM(-1), Q(-1), K(-1), V(-1), O(-1), FFN_NORM(-1), GATE(-1), UP(-1), DOWN(-1),
	Q_NORM, K_NORM,
};

/* Phi-3: Llama's block with q, k and v in one matrix and gate and up in
 * another (GGUF keeps the second's name, ffn_up, at twice the rows), the
 * binder viewing each part's rows in place. GGUF files have no window:
 * llama.cpp turned Phi's off (its phi3 loader zeroes n_swa); HF configs
 * give one (2047 in Phi-3-mini-4k), and transformers applies it. */
static const mu__tspec_t phi3_layer[] = {
	ATTN_NORM(-1),
	ROW(QKV, "attn_qkv.weight", "self_attn.qkv_proj.weight", QKVDIM, DIM, REQUIRED, -1),
	O(-1), FFN_NORM(-1),
	ROW(GATE_UP, "ffn_up.weight", "mlp.gate_up_proj.weight", HIDDEN2, DIM, REQUIRED, -1),
	DOWN(-1),
};

/* GGUF writes Mistral as llama (llama.cpp's converter), so the mistral
 * entry has no GGUF name of its own. RoPE: HF rows rotate halves
 * (rotate_half); llama.cpp un-permutes llama's Q/K rows back to Meta's
 * pairs and keeps qwen2's halves. */
static const mu__arch_t archs[] = {
	{"llama", {"LlamaForCausalLM"}, "llama", {"llama"}, MU__ROPE_HALVES, MU__ROPE_PAIRS,
	 MU__ACT_SILU, MU__NORM_RMS, 0, MU__WIN_NONE, "model.layers.", family_model, llama_layer,
	 N(family_model), N(llama_layer)},
	{"mistral", {"MistralForCausalLM"}, "mistral", {NULL}, MU__ROPE_HALVES, MU__ROPE_PAIRS,
	 MU__ACT_SILU, MU__NORM_RMS, 0, MU__WIN_ALWAYS, "model.layers.", family_model,
	 mistral_layer, N(family_model), N(mistral_layer)},
	{"qwen2", {"Qwen2ForCausalLM"}, "qwen2", {"qwen2"}, MU__ROPE_HALVES, MU__ROPE_HALVES,
	 MU__ACT_SILU, MU__NORM_RMS, 0, MU__WIN_OPT_IN, "model.layers.", family_model, qwen2_layer,
	 N(family_model), N(qwen2_layer)},
	{"qwen3", {"Qwen3ForCausalLM"}, "qwen3", {"qwen3"}, MU__ROPE_HALVES, MU__ROPE_HALVES,
	 MU__ACT_SILU, MU__NORM_RMS, MU__AF_QK_NORM, MU__WIN_OPT_IN, "model.layers.", family_model,
	 qwen3_layer, N(family_model), N(qwen3_layer)},
	{"phi3", {"Phi3ForCausalLM"}, "phi3", {"phi3"}, MU__ROPE_HALVES, MU__ROPE_HALVES,
	 MU__ACT_SILU, MU__NORM_RMS, MU__AF_FUSED_QKV, MU__WIN_IF_SET, "model.layers.", family_model,
	 phi3_layer, N(family_model), N(phi3_layer)},
};

/* What a file may ask for that an entry without the feature refuses. */
static const mu__feature_t features[] = {
	{MU__AF_QK_NORM, "QK norm", {"qk_layernorm", "use_qk_norm"}, {NULL},
	 {"attn_q_norm.weight", "attn_k_norm.weight"},
	 {"self_attn.q_norm.weight", "self_attn.k_norm.weight"}},
	{MU__AF_SOFTCAP, "soft-capping", {"attn_logit_softcapping", "final_logit_softcapping"},
	 {"%s.attn_logit_softcapping", "%s.final_logit_softcapping"}, {NULL}, {NULL}},
	{MU__AF_FUSED_QKV, "a fused QKV projection", {NULL}, {NULL}, {"attn_qkv.weight"},
	 {"self_attn.qkv_proj.weight"}},
	{MU__AF_MOE, "a mixture of experts", {"num_local_experts", "num_experts", "n_routed_experts"},
	 {"%s.expert_count"}, {"ffn_gate_inp.weight"},
	 {"block_sparse_moe.gate.weight", "mlp.gate.weight"}},
	{MU__AF_SWA_LAYERS, "a sliding window on some layers", {"sliding_window_pattern"},
	 {"%s.attention.sliding_window_pattern"}, {NULL}, {NULL}},
	/* llama.cpp's converter writes the key only beside the factor tensors
	 * (rope_factors_long/short.weight); config.json's rope_scaling
	 * "longrope" is refused as an unknown rope_type */
	{MU__AF_LONGROPE, "LongRoPE", {NULL}, {"%s.rope.scaling.attn_factor"}, {NULL}, {NULL}},
	{MU__AF_MLP_BIAS, "feed-forward biases", {"mlp_bias"}, {NULL},
	 {"ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"},
	 {"mlp.gate_proj.bias", "mlp.up_proj.bias", "mlp.down_proj.bias"}},
};

const mu__arch_t *mu__arch_at(size_t i)
{
	return i < N(archs) ? &archs[i] : NULL;
}

const mu__feature_t *mu__arch_feature_at(size_t i)
{
	return i < N(features) ? &features[i] : NULL;
}

const char *mu__arch_act_name(mu__act_t act)
{
	return act == MU__ACT_SILU ? "silu" : "?";
}

const mu__arch_t *mu__arch_by_name(const char *name)
{
	size_t i;

	for (i = 0; i < N(archs); i++)
		if (strcmp(archs[i].name, name) == 0)
			return &archs[i];
	return NULL;
}

const mu__arch_t *mu__arch_by_hf(const char *cls)
{
	size_t i, k;

	for (i = 0; i < N(archs); i++)
		for (k = 0; k < MU__ARCH_NAMES && archs[i].hf_class[k] != NULL; k++)
			if (strcmp(archs[i].hf_class[k], cls) == 0)
				return &archs[i];
	return NULL;
}

const mu__arch_t *mu__arch_by_model_type(const char *type)
{
	size_t i;

	for (i = 0; i < N(archs); i++)
		if (strcmp(archs[i].model_type, type) == 0)
			return &archs[i];
	return NULL;
}

const mu__arch_t *mu__arch_by_gguf(const char *s, size_t len)
{
	size_t i, k;

	for (i = 0; i < N(archs); i++)
		for (k = 0; k < MU__ARCH_NAMES && archs[i].gguf[k] != NULL; k++)
			if (strlen(archs[i].gguf[k]) == len && memcmp(archs[i].gguf[k], s, len) == 0)
				return &archs[i];
	return NULL;
}

int mu__arch_list(mu__arch_list_t which, char *out, size_t n)
{
	const char *names[N(archs) * MU__ARCH_NAMES];
	size_t i, k, m = 0, at = 0;
	int w;

	for (i = 0; i < N(archs); i++) {
		if (which == MU__ARCH_LIST_NAME)
			names[m++] = archs[i].name;
		for (k = 0; which != MU__ARCH_LIST_NAME && k < MU__ARCH_NAMES; k++) {
			const char *s = which == MU__ARCH_LIST_HF ? archs[i].hf_class[k] : archs[i].gguf[k];

			if (s != NULL)
				names[m++] = s;
		}
	}
	if (n > 0)
		out[0] = '\0';
	for (i = 0; i < m; i++) {
		w = snprintf(out + (at < n ? at : n), at < n ? n - at : 0, "%s%s",
		             i == 0 ? "" : i + 1 == m ? " and " : ", ", names[i]);
		at += (size_t)w;
	}
	return (int)at;
}

int64_t mu__arch_size(const mu__llm_hp_t *h, mu__sz_t s)
{
	switch (s) {
	case MU__SZ_1: return 1;
	case MU__SZ_DIM: return h->dim;
	case MU__SZ_QDIM: return (int64_t)h->n_heads * h->head_dim;
	case MU__SZ_KVDIM: return (int64_t)h->n_kv_heads * h->head_dim;
	case MU__SZ_HIDDEN: return h->hidden;
	case MU__SZ_VOCAB: return h->vocab;
	case MU__SZ_HALF_HEAD: return h->head_dim / 2;
	case MU__SZ_HEAD: return h->head_dim;
	case MU__SZ_QKVDIM: return (int64_t)(h->n_heads + 2 * h->n_kv_heads) * h->head_dim;
	case MU__SZ_HIDDEN2: return 2 * (int64_t)h->hidden;
	}
	return 0;
}

const char *mu__arch_model_name(const mu__arch_t *a, mu__role_t r)
{
	size_t i;

	for (i = 0; i < a->nmodel; i++)
		if (a->model[i].role == r)
			return a->model[i].gguf;
	return NULL;
}

/* "blk.N.rest": N, and rest's offset; -1 when name is no layer's. */
static int layer_of(const char *name, const char *prefix, size_t *rest)
{
	size_t pl = strlen(prefix), i;
	long l = 0;

	if (strncmp(name, prefix, pl) != 0)
		return -1;
	for (i = pl; name[i] >= '0' && name[i] <= '9' && i < pl + 5; i++)
		l = l * 10 + (name[i] - '0');
	if (i == pl || name[i] != '.' || (name[pl] == '0' && i > pl + 1))
		return -1;
	*rest = i + 1;
	return (int)l;
}

const mu__tspec_t *mu__arch_spec(const mu__arch_t *a, const char *name, int *layer)
{
	size_t i, rest;
	int l = layer_of(name, "blk.", &rest);

	*layer = l;
	for (i = 0; l < 0 && i < a->nmodel; i++)
		if (strcmp(a->model[i].gguf, name) == 0)
			return &a->model[i];
	for (i = 0; l >= 0 && i < a->nlayer; i++)
		if (strcmp(a->layer[i].gguf, name + rest) == 0)
			return &a->layer[i];
	return NULL;
}

static int has_name(const char *const *v, size_t n, const char *rest)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (v[i] != NULL && strcmp(v[i], rest) == 0)
			return 1;
	return 0;
}

static int spec_named(const mu__tspec_t *t, size_t n, const char *rest, int hf)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(hf ? (t[i].hf != NULL ? t[i].hf : "") : t[i].gguf, rest) == 0)
			return 1;
	return 0;
}

/* A layer tensor's name that a does not have but muster knows: refused
 * with what it belongs to. Unknown names are skipped (0). */
static int foreign(const mu__arch_t *a, const char *where, const char *full, const char *rest,
                   int hf, char *why, size_t wl)
{
	size_t i;

	if (spec_named(a->layer, a->nlayer, rest, hf))
		return 0;
	for (i = 0; i < N(features); i++)
		if (!(a->features & features[i].flag) &&
		    has_name(hf ? features[i].hf_tensors : features[i].gguf_tensors, 3, rest))
			return mu__why(why, wl, MU_EPROTO, "%.200s: tensor %.100s asks for %s, which "
			               "muster does not run for %s", where, full, features[i].what,
			               a->name);
	for (i = 0; i < N(archs); i++)
		if (&archs[i] != a && spec_named(archs[i].layer, archs[i].nlayer, rest, hf))
			return mu__why(why, wl, MU_EPROTO, "%.200s: tensor %.100s is not part of a %s "
			               "model (%s has it)", where, full, a->name, archs[i].name);
	return 0;
}

int mu__arch_check_foreign(const mu__arch_t *a, const char *name, const char *where,
                           char *why, size_t wl)
{
	size_t rest;

	if (layer_of(name, "blk.", &rest) < 0)
		return 0;
	return foreign(a, where, name, name + rest, 0, why, wl);
}

int mu__arch_hf_to_gguf(const mu__arch_t *a, const char *hf, char *out, size_t n,
                        const char *where, char *why, size_t wl)
{
	size_t i, rest;
	int l = layer_of(hf, a->hf_layers, &rest);

	for (i = 0; l < 0 && i < a->nmodel; i++)
		if (a->model[i].hf != NULL && strcmp(a->model[i].hf, hf) == 0) {
			snprintf(out, n, "%s", a->model[i].gguf);
			return 1;
		}
	for (i = 0; l >= 0 && i < a->nlayer; i++)
		if (a->layer[i].hf != NULL && strcmp(a->layer[i].hf, hf + rest) == 0) {
			snprintf(out, n, "blk.%d.%s", l, a->layer[i].gguf);
			return 1;
		}
	return l >= 0 ? foreign(a, where, hf, hf + rest, 1, why, wl) : 0;
}
