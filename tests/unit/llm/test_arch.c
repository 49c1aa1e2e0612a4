/* SPDX-License-Identifier: MIT */
/*
 * The architecture and field tables (llm/arch.c, llm/hparams.c): every
 * entry and field coherent; each architecture's tensors as the checker
 * and the binder see them (written out here, not read from the table),
 * each required one refused by name when absent and the optional ones
 * used; HF names mapped; an unsupported architecture, or a file asking
 * for a feature no entry runs, refused with what is supported.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>
#include <cmocka.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "llm/arch_int.h"
#include "llm/llm_int.h"

static float rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return ((float)(*s >> 40) / 16777216.0f - 0.5f) * 0.4f;
}

/* ---- the tables ---- */

/* Specs of one list: roles of the right kind, each role, GGUF and HF name
 * once, vectors of one row. */
static void check_specs(const mu__tspec_t *t, size_t n, int layer)
{
	for (size_t i = 0; i < n; i++) {
		assert_true(layer ? t[i].role >= MU__R_FIRST_LAYER : t[i].role < MU__R_FIRST_LAYER);
		assert_true(t[i].role < MU__R_COUNT);
		assert_true(t[i].cols != MU__SZ_1);
		assert_true(strlen(t[i].gguf) + sizeof("blk.1023.") < 64);
		for (size_t j = 0; j < i; j++) {
			assert_int_not_equal(t[i].role, t[j].role);
			assert_string_not_equal(t[i].gguf, t[j].gguf);
			if (t[i].hf != NULL && t[j].hf != NULL)
				assert_string_not_equal(t[i].hf, t[j].hf);
		}
	}
}

static const mu__tspec_t *spec_of(const mu__tspec_t *t, size_t n, mu__role_t r)
{
	for (size_t i = 0; i < n; i++)
		if (t[i].role == r)
			return &t[i];
	return NULL;
}

static void test_arch_entries_coherent(void **state)
{
	static const mu__role_t core[] = {MU__R_ATTN_NORM, MU__R_Q, MU__R_K, MU__R_V, MU__R_O,
	                                  MU__R_FFN_NORM, MU__R_GATE, MU__R_UP, MU__R_DOWN};
	const mu__arch_t *a;
	const mu__tspec_t *t;
	char hf[128], gg[64], why[256];
	int places = 0, l;

	(void)state;
	for (size_t i = 0; (a = mu__arch_at(i)) != NULL; i++) {
		/* each name finds its own entry: no two entries share one */
		assert_true(strlen(a->name) > 0 && strlen(a->name) < sizeof(((mu__llm_hp_t *)0)->arch));
		assert_ptr_equal(mu__arch_by_name(a->name), a);
		assert_ptr_equal(mu__arch_by_model_type(a->model_type), a);
		assert_non_null(a->hf_class[0]);
		for (size_t k = 0; k < MU__ARCH_NAMES; k++) {
			if (a->hf_class[k] != NULL)
				assert_ptr_equal(mu__arch_by_hf(a->hf_class[k]), a);
			if (a->gguf[k] != NULL) /* it is hp.arch while the keys are read */
				assert_true(strlen(a->gguf[k]) < sizeof(((mu__llm_hp_t *)0)->arch));
			if (a->gguf[k] != NULL)
				assert_ptr_equal(mu__arch_by_gguf(a->gguf[k], strlen(a->gguf[k])), a);
		}
		/* the features entries' code runs so far: qwen3's QK norm, phi3's fused QKV */
		assert_int_equal(a->features, strcmp(a->name, "qwen3") == 0  ? MU__AF_QK_NORM
		                              : strcmp(a->name, "phi3") == 0 ? MU__AF_FUSED_QKV
		                                                             : 0u);
		/* an entry that runs a feature lists its tensors (else they would
		 * be skipped as unknown) */
		for (size_t k = 0; mu__arch_feature_at(k) != NULL; k++) {
			const mu__feature_t *ft = mu__arch_feature_at(k);

			for (size_t m = 0; (a->features & ft->flag) && m < 3 && ft->gguf_tensors[m]; m++) {
				snprintf(gg, sizeof(gg), "blk.0.%s", ft->gguf_tensors[m]);
				assert_non_null(mu__arch_spec(a, gg, &l));
			}
		}
		assert_true(a->rope_hf == MU__ROPE_HALVES); /* transformers' rotate_half */
		check_specs(a->model, a->nmodel, 0);
		check_specs(a->layer, a->nlayer, 1);
		for (size_t k = 0; k < sizeof(core) / sizeof(core[0]); k++) {
			mu__role_t r = core[k];

			/* a fused matrix stands for its parts */
			if (a->features & MU__AF_FUSED_QKV)
				r = r == MU__R_Q || r == MU__R_K || r == MU__R_V ? MU__R_QKV
				    : r == MU__R_GATE || r == MU__R_UP       ? MU__R_GATE_UP
				                                             : r;
			t = spec_of(a->layer, a->nlayer, r);
			assert_non_null(t);
			assert_int_equal(t->need, MU__NEED_REQUIRED);
		}
		assert_int_equal(spec_of(a->model, a->nmodel, MU__R_TOKEN_EMBD)->at, MU__AT_FIRST);
		assert_int_equal(spec_of(a->model, a->nmodel, MU__R_OUTPUT)->need, MU__NEED_UNTIED);
		assert_int_equal(spec_of(a->model, a->nmodel, MU__R_OUTPUT_NORM)->at, MU__AT_LAST);
		/* the name mapping agrees with the specs, and the specs find themselves */
		for (size_t k = 0; k < a->nlayer; k++) {
			snprintf(hf, sizeof(hf), "%s7.%s", a->hf_layers, a->layer[k].hf);
			assert_int_equal(mu__arch_hf_to_gguf(a, hf, gg, sizeof(gg), "x", why, sizeof(why)), 1);
			assert_true(strncmp(gg, "blk.7.", 6) == 0 && strcmp(gg + 6, a->layer[k].gguf) == 0);
			assert_ptr_equal(mu__arch_spec(a, gg, &l), &a->layer[k]);
			assert_int_equal(l, 7);
		}
		for (size_t k = 0; k < a->nmodel; k++) {
			if (a->model[k].hf != NULL) {
				assert_int_equal(mu__arch_hf_to_gguf(a, a->model[k].hf, gg, sizeof(gg), "x", why,
				                                     sizeof(why)), 1);
				assert_string_equal(gg, a->model[k].gguf);
			}
			assert_ptr_equal(mu__arch_spec(a, a->model[k].gguf, &l), &a->model[k]);
		}
	}
	/* llama2.c files are llama: places 0 to 12 but 11 (freq_cis), each once */
	a = mu__arch_by_name("llama");
	for (size_t k = 0; k < a->nmodel + a->nlayer; k++) {
		t = k < a->nmodel ? &a->model[k] : &a->layer[k - a->nmodel];
		if (t->l2c >= 0) {
			assert_true(t->l2c <= 12 && t->l2c != 11 && !(places & (1 << t->l2c)));
			places |= 1 << t->l2c;
		}
	}
	assert_int_equal(places, 0x1fff & ~(1 << 11));
}

static void test_arch_lists(void **state)
{
	char s[128];

	(void)state;
	mu__arch_list(MU__ARCH_LIST_NAME, s, sizeof(s));
	assert_string_equal(s, "llama, mistral, qwen2, qwen3 and phi3");
	mu__arch_list(MU__ARCH_LIST_HF, s, sizeof(s));
	assert_string_equal(s, "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
	                       "Qwen3ForCausalLM and Phi3ForCausalLM");
	mu__arch_list(MU__ARCH_LIST_GGUF, s, sizeof(s));
	assert_string_equal(s, "llama, qwen2, qwen3 and phi3"); /* GGUF writes Mistral as llama */
	assert_int_equal(mu__arch_list(MU__ARCH_LIST_NAME, s, 5), 37);
	assert_string_equal(s, "llam");
	assert_null(mu__arch_by_gguf("mistral", 7));
	assert_null(mu__arch_by_hf("GPTNeoXForCausalLM"));
}

static void test_fields_coherent(void **state)
{
	const mu__hpf_t *f, *g;

	(void)state;
	for (size_t i = 0; (f = mu__hpf_at(i)) != NULL; i++) {
		assert_true(f->off + 4 <= sizeof(mu__llm_hp_t));
		assert_true(f->lo < f->hi);
		assert_int_equal(f->flags & MU__HPF_WIRE_NEW, 0); /* the wire's first version */
		if (!(f->flags & MU__HPF_REQUIRED) && f->derive == NULL) {
			assert_true(mu__hpf_in_range(f, f->def));
			assert_true(mu__hpf_in_range(f, f->gguf_def));
		}
		for (size_t j = 0; j < i; j++) {
			g = mu__hpf_at(j);
			assert_string_not_equal(f->name, g->name);
			assert_true(f->off != g->off);
			if (f->wire != NULL && g->wire != NULL)
				assert_string_not_equal(f->wire, g->wire);
			if (f->hf[0] != NULL && g->hf[0] != NULL)
				assert_string_not_equal(f->hf[0], g->hf[0]);
		}
	}
}

/* ---- each architecture's tensors as the loaders see them ---- */

enum { T_REQ, T_OPT, T_UNTIED };
typedef struct {
	const char *name; /* "blk.L." for a layer's */
	int rows, cols, need;
} want_t;

/* dim 16, hidden 20, 4 heads of 6 (q 24), 2 KV heads (kv 12), vocab 10 */
static const want_t model_wants[] = {
	{"token_embd.weight", 10, 16, T_REQ}, {"output_norm.weight", 1, 16, T_REQ},
	{"output.weight", 10, 16, T_UNTIED}, {"rope_freqs.weight", 1, 3, T_OPT},
};
#define CORE_WANTS                                                                        \
	{"attn_norm.weight", 1, 16, T_REQ}, {"attn_q.weight", 24, 16, T_REQ},                 \
	{"attn_k.weight", 12, 16, T_REQ}, {"attn_v.weight", 12, 16, T_REQ},                   \
	{"attn_output.weight", 16, 24, T_REQ}, {"ffn_norm.weight", 1, 16, T_REQ},             \
	{"ffn_gate.weight", 20, 16, T_REQ}, {"ffn_up.weight", 20, 16, T_REQ},                 \
	{"ffn_down.weight", 16, 20, T_REQ}
static const want_t llama_wants[] = {
	CORE_WANTS, {"attn_q.bias", 1, 24, T_OPT}, {"attn_k.bias", 1, 12, T_OPT},
	{"attn_v.bias", 1, 12, T_OPT}, {"attn_output.bias", 1, 16, T_OPT},
};
static const want_t mistral_wants[] = {CORE_WANTS};
static const want_t qwen2_wants[] = {
	CORE_WANTS, {"attn_q.bias", 1, 24, T_REQ}, {"attn_k.bias", 1, 12, T_REQ},
	{"attn_v.bias", 1, 12, T_REQ},
};
/* fused: q 24 + k 12 + v 12 rows; gate and up 2 x 20 */
static const want_t phi3_wants[] = {
	{"attn_norm.weight", 1, 16, T_REQ},   {"attn_qkv.weight", 48, 16, T_REQ},
	{"attn_output.weight", 16, 24, T_REQ}, {"ffn_norm.weight", 1, 16, T_REQ},
	{"ffn_up.weight", 40, 16, T_REQ},     {"ffn_down.weight", 16, 20, T_REQ},
};
static const want_t qwen3_wants[] = {
	CORE_WANTS, {"attn_q_norm.weight", 1, 6, T_REQ}, {"attn_k_norm.weight", 1, 6, T_REQ},
};

static float wbuf[1024], bbuf[32], fbuf[4] = {2, 2, 2, 2};

/* A source of arch in memory (2 layers): every tensor of w and
 * model_wants, the optional ones when opt, none named skip. */
static void mem_src(mu__llm_src_t *s, const char *arch, const want_t *w, size_t n, int opt,
                    const char *skip)
{
	char name[64];
	uint64_t seed = 7;

	for (size_t i = 0; i < sizeof(wbuf) / sizeof(wbuf[0]); i++)
		wbuf[i] = rnd(&seed);
	memset(s, 0, sizeof(*s));
	s->fmt = MU__FMT_GGUF;
	s->hp = (mu__llm_hp_t){.dim = 16, .hidden = 20, .n_layers = 2, .n_heads = 4,
	                       .n_kv_heads = 2, .head_dim = 6, .vocab = 10, .ctx = 32,
	                       .eps = 1e-5f, .theta = 10000, .bos = -1, .eos = -1};
	snprintf(s->hp.arch, sizeof(s->hp.arch), "%s", arch);
	assert_non_null(s->path = mu__strdup("(memory)"));
	for (size_t i = 0; i < sizeof(model_wants) / sizeof(model_wants[0]); i++)
		if ((opt || model_wants[i].need != T_OPT) && strcmp(model_wants[i].name, skip) != 0)
			assert_int_equal(mu__llm_add_tensor(s, model_wants[i].name, MU__WT_F32,
			                                    strcmp(model_wants[i].name,
			                                           "rope_freqs.weight") == 0 ? fbuf : wbuf,
			                                    model_wants[i].rows, model_wants[i].cols), 0);
	for (int l = 0; l < 2; l++)
		for (size_t i = 0; i < n; i++) {
			snprintf(name, sizeof(name), "blk.%d.%s", l, w[i].name);
			if ((opt || w[i].need != T_OPT) && strcmp(name, skip) != 0)
				assert_int_equal(mu__llm_add_tensor(s, name, MU__WT_F32,
				                                    w[i].rows == 1 ? bbuf : wbuf, w[i].rows,
				                                    w[i].cols), 0);
		}
}

/* Logits of the second of two tokens (so RoPE turns) through the whole
 * model of s. */
static void mem_logits(const mu__llm_src_t *s, float *out)
{
	mu__dec_opts_t o = {1, 1, (uint64_t)1 << 20, 4, 0, 0, MU__KV_F32};
	mu__dec_t *d = NULL;
	int32_t tok[2] = {3, 5};

	assert_int_equal(mu__dec_new(s, 0, 2, &o, &d, NULL, 0), 0);
	assert_int_equal(mu__dec_seq_open(d, 0, 1, 8, NULL, 0), 0);
	assert_int_equal(mu__dec_forward(d, 0, 1, 0, 2, tok, NULL, out, 0, NULL, 0), 0);
	mu__dec_free(d);
}

static void check_arch_wants(const char *arch, const want_t *w, size_t n)
{
	char why[256], name[64];
	float a[10], b[10];
	mu__llm_src_t s;

	for (size_t i = 0; i < 32; i++)
		bbuf[i] = 1.0f;
	mem_src(&s, arch, w, n, 0, "");
	assert_int_equal(mu__llm_check(&s, why, sizeof(why)), 0);
	mem_logits(&s, a);
	mu__llm_src_free(&s);
	/* with the optional ones too: the binder uses them (biases of 1, RoPE
	 * factors of 2: each changes the logits) */
	mem_src(&s, arch, w, n, 1, "");
	assert_int_equal(mu__llm_check(&s, why, sizeof(why)), 0);
	mem_logits(&s, b);
	assert_true(memcmp(a, b, sizeof(a)) != 0);
	mu__llm_src_free(&s);
	/* every required tensor is required, by name */
	for (size_t i = 0; i < n + sizeof(model_wants) / sizeof(model_wants[0]); i++) {
		const want_t *x = i < n ? &w[i] : &model_wants[i - n];

		if (x->need == T_OPT)
			continue;
		snprintf(name, sizeof(name), i < n ? "blk.1.%s" : "%s", x->name);
		mem_src(&s, arch, w, n, 0, name);
		assert_int_equal(mu__llm_check(&s, why, sizeof(why)), MU_EPROTO);
		assert_non_null(strstr(why, name));
		mu__llm_src_free(&s);
	}
}

static void test_arch_tensor_lists(void **state)
{
	char why[256];
	mu__llm_src_t s;

	(void)state;
	check_arch_wants("llama", llama_wants, sizeof(llama_wants) / sizeof(llama_wants[0]));
	check_arch_wants("mistral", mistral_wants, sizeof(mistral_wants) / sizeof(mistral_wants[0]));
	check_arch_wants("qwen2", qwen2_wants, sizeof(qwen2_wants) / sizeof(qwen2_wants[0]));
	check_arch_wants("qwen3", qwen3_wants, sizeof(qwen3_wants) / sizeof(qwen3_wants[0]));
	check_arch_wants("phi3", phi3_wants, sizeof(phi3_wants) / sizeof(phi3_wants[0]));
	/* mistral has no biases: one is refused, not ignored */
	mem_src(&s, "mistral", llama_wants, sizeof(llama_wants) / sizeof(llama_wants[0]), 1, "");
	assert_int_equal(mu__llm_check(&s, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "blk.0.attn_q.bias is not part of a mistral model"));
	/* a feature no entry runs is refused by name; a name nobody knows is not */
	mu__llm_src_free(&s);
	mem_src(&s, "qwen2", qwen2_wants, sizeof(qwen2_wants) / sizeof(qwen2_wants[0]), 0, "");
	assert_int_equal(mu__llm_add_tensor(&s, "blk.1.attn_rot_embd", MU__WT_F32, wbuf, 1, 3), 0);
	assert_int_equal(mu__llm_check(&s, why, sizeof(why)), 0);
	assert_int_equal(mu__llm_add_tensor(&s, "blk.1.attn_k_norm.weight", MU__WT_F32, wbuf, 1, 6), 0);
	assert_int_equal(mu__llm_check(&s, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "asks for QK norm"));
	mu__llm_src_free(&s);
	/* an optional tensor of the wrong shape is refused */
	mem_src(&s, "llama", mistral_wants, sizeof(mistral_wants) / sizeof(mistral_wants[0]), 0, "");
	assert_int_equal(mu__llm_add_tensor(&s, "blk.0.attn_k.bias", MU__WT_F32, bbuf, 1, 24), 0);
	assert_int_equal(mu__llm_check(&s, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "blk.0.attn_k.bias is [1, 24]"));
	/* the RoPE factors go to every stage: every layer rotates */
	assert_int_equal(mu__llm_add_tensor(&s, "rope_freqs.weight", MU__WT_F32, bbuf, 1, 3), 0);
	assert_true(mu__llm_tensor_in(&s, s.nt - 1, 0, 1));
	assert_true(mu__llm_tensor_in(&s, s.nt - 1, 1, 2));
	assert_true(mu__llm_tensor_in(&s, 0, 0, 1));  /* token_embd: the first */
	assert_false(mu__llm_tensor_in(&s, 0, 1, 2)); /* untied: not the last */
	mu__llm_src_free(&s);
}

static void test_hf_names(void **state)
{
	const mu__arch_t *q = mu__arch_by_name("qwen2"), *m = mu__arch_by_name("mistral");
	const mu__arch_t *l = mu__arch_by_name("llama");
	char out[64], why[256];

	(void)state;
	assert_int_equal(mu__arch_hf_to_gguf(q, "model.layers.3.self_attn.q_proj.bias", out,
	                                     sizeof(out), "d", why, sizeof(why)), 1);
	assert_string_equal(out, "blk.3.attn_q.bias");
	assert_int_equal(mu__arch_hf_to_gguf(l, "lm_head.weight", out, sizeof(out), "d", why,
	                                     sizeof(why)), 1);
	assert_string_equal(out, "output.weight");
	assert_int_equal(mu__arch_hf_to_gguf(m, "model.layers.3.self_attn.q_proj.bias", out,
	                                     sizeof(out), "d", why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "not part of a mistral model"));
	assert_int_equal(mu__arch_hf_to_gguf(l, "model.layers.0.self_attn.q_norm.weight", out,
	                                     sizeof(out), "d", why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "QK norm"));
	assert_int_equal(mu__arch_hf_to_gguf(l, "model.layers.0.mlp.up_proj.bias", out,
	                                     sizeof(out), "d", why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "feed-forward biases"));
	/* skipped: buffers, names of no layer */
	assert_int_equal(mu__arch_hf_to_gguf(l, "model.layers.0.self_attn.rotary_emb.inv_freq", out,
	                                     sizeof(out), "d", why, sizeof(why)), 0);
	assert_int_equal(mu__arch_hf_to_gguf(l, "model.layers.x.self_attn.q_proj.weight", out,
	                                     sizeof(out), "d", why, sizeof(why)), 0);
	assert_int_equal(mu__arch_hf_to_gguf(l, "model.layers.-1.self_attn.q_proj.weight", out,
	                                     sizeof(out), "d", why, sizeof(why)), 0);
}

/* ---- what is refused, with what is supported ---- */

static char dir[64];

static int open_hf(const char *config, char *why, size_t wl)
{
	char p[128];
	mu__llm_src_t s;
	FILE *f;
	int rc;

	snprintf(p, sizeof(p), "%s/config.json", dir);
	assert_non_null(f = fopen(p, "w"));
	fputs(config, f);
	fclose(f);
	rc = mu__llm_src_open(dir, NULL, &s, why, wl);
	if (rc == 0)
		mu__llm_src_free(&s);
	unlink(p);
	return rc;
}

#define HF_SHAPE "\"hidden_size\": 16, \"intermediate_size\": 20, \"num_hidden_layers\": 2, " \
	"\"num_attention_heads\": 4, \"vocab_size\": 10"

static void test_refused_hf(void **state)
{
	char why[512];

	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/mu_test_arch_XXXXXX");
	assert_non_null(mkdtemp(dir));
	assert_int_equal(open_hf("{\"architectures\": [\"GPTNeoXForCausalLM\"], " HF_SHAPE "}", why,
	                         sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "\"GPTNeoXForCausalLM\" is not supported (muster runs "
	                            "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM and "
	                            "Phi3ForCausalLM)"));
	assert_int_equal(open_hf("{\"model_type\": \"gpt2\", " HF_SHAPE "}", why, sizeof(why)),
	                 MU_EPROTO);
	assert_non_null(strstr(why, "model_type \"gpt2\" is not supported"));
	assert_int_equal(open_hf("{\"architectures\": [\"MistralForCausalLM\"], "
	                         "\"num_local_experts\": 8, " HF_SHAPE "}", why, sizeof(why)),
	                 MU_EPROTO);
	assert_non_null(strstr(why, "num_local_experts asks for a mixture of experts"));
	assert_int_equal(open_hf("{\"architectures\": [\"LlamaForCausalLM\"], "
	                         "\"attn_logit_softcapping\": 50.0, " HF_SHAPE "}", why, sizeof(why)),
	                 MU_EPROTO);
	assert_non_null(strstr(why, "soft-capping"));
	/* Qwen2's window on the layers from max_window_layers on: some is
	 * refused; none or all is a configuration (the weights are what is
	 * missing then) */
	assert_int_equal(open_hf("{\"architectures\": [\"Qwen2ForCausalLM\"], \"use_sliding_window\": "
	                         "true, \"sliding_window\": 8, \"max_window_layers\": 1, " HF_SHAPE "}",
	                         why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "1 of 2 layers slide"));
	assert_int_equal(open_hf("{\"architectures\": [\"Qwen2ForCausalLM\"], \"use_sliding_window\": "
	                         "true, \"sliding_window\": 8, \"max_window_layers\": 2, " HF_SHAPE "}",
	                         why, sizeof(why)), -2 /* ENOENT */);
	assert_non_null(strstr(why, "model.safetensors"));
	assert_int_equal(open_hf("{\"architectures\": [\"LlamaForCausalLM\"], \"layer_types\": "
	                         "[\"full_attention\", \"sliding_attention\"], " HF_SHAPE "}", why,
	                         sizeof(why)), -2);
	assert_int_equal(open_hf("{\"architectures\": [\"MistralForCausalLM\"], \"layer_types\": "
	                         "[\"full_attention\", \"sliding_attention\"], " HF_SHAPE "}", why,
	                         sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "a sliding window on some layers"));
	rmdir(dir);
}

/* A GGUF file of metadata only: general.architecture arch, then u32 keys
 * (up to NULL). */
static void write_gguf(const char *p, const char *arch, const char *const *key,
                       const uint32_t *v)
{
	unsigned char b[1024];
	size_t nk = 0;
	size_t n = 0;
	FILE *f;

#define PUT(x, k) (memcpy(b + n, (x), (k)), n += (k))
#define U32(x) do { uint32_t u_ = (x); PUT(&u_, 4); } while (0)
#define U64(x) do { uint64_t u_ = (x); PUT(&u_, 8); } while (0)
#define STR(s) do { U64(strlen(s)); PUT((s), strlen(s)); } while (0)
	while (key[nk] != NULL)
		nk++;
	PUT("GGUF", 4);
	U32(3);
	U64(0);
	U64(1 + nk);
	STR("general.architecture");
	U32(8); /* string */
	STR(arch);
	for (size_t i = 0; i < nk; i++) {
		STR(key[i]);
		U32(4); /* u32 */
		U32(v[i]);
	}
#undef PUT
#undef U32
#undef U64
#undef STR
	assert_non_null(f = fopen(p, "wb"));
	fwrite(b, 1, n, f);
	fclose(f);
}

static void test_refused_gguf_and_wire(void **state)
{
	static const char *const keys[] = {"llama.embedding_length", "llama.feed_forward_length",
	                                   "llama.block_count", "llama.attention.head_count",
	                                   NULL, "llama.expert_count", NULL};
	static const uint32_t vals[] = {16, 20, 2000, 4, 0, 8};
	char p[64], why[512];
	mu__llm_src_t s;
	mu__llm_hp_t h;
	cJSON *o;
	int fd;

	(void)state;
	snprintf(p, sizeof(p), "/tmp/mu_test_arch_XXXXXX");
	assert_true((fd = mkstemp(p)) >= 0);
	close(fd);
	write_gguf(p, "gpt2", keys + 6, vals);
	assert_int_equal(mu__llm_src_open(p, NULL, &s, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "\"gpt2\" is not supported (muster runs llama, qwen2, qwen3 and phi3)"));
	write_gguf(p, "llama", keys + 5, vals + 5);
	assert_int_equal(mu__llm_src_open(p, NULL, &s, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "llama.expert_count asks for a mixture of experts"));
	write_gguf(p, "qwen2", keys + 6, vals);
	assert_int_equal(mu__llm_src_open(p, NULL, &s, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "GGUF key qwen2.embedding_length is missing"));
	write_gguf(p, "llama", keys, vals); /* the keys read; no tensor */
	assert_int_equal(mu__llm_src_open(p, NULL, &s, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "llama.block_count is 2000; muster takes an integer in [1, 1024]"));
	unlink(p);
	/* a peer's configuration of an architecture this build does not know */
	mem_src(&s, "llama", llama_wants, 1, 0, "");
	o = cJSON_CreateObject();
	mu__llm_hp_to_json(&s.hp, o);
	mu__llm_src_free(&s);
	cJSON_ReplaceItemInObject(o, "arch", cJSON_CreateString("gpt2"));
	assert_int_equal(mu__llm_hp_from_json(o, &h, why, sizeof(why)), 0);
	cJSON_Delete(o);
	assert_int_equal(mu__llm_src_from_files(&h, NULL, 0, 0, 1, &s, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "muster runs llama, mistral, qwen2, qwen3 and phi3"));
}


int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_arch_entries_coherent),
		cmocka_unit_test(test_arch_lists),
		cmocka_unit_test(test_fields_coherent),
		cmocka_unit_test(test_arch_tensor_lists),
		cmocka_unit_test(test_hf_names),
		cmocka_unit_test(test_refused_hf),
		cmocka_unit_test(test_refused_gguf_and_wire),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
