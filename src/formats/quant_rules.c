/* SPDX-License-Identifier: MIT */
/*
 * The per-tensor type rules of a quantization (formats/quant_rules_int.h):
 * which tensors are quantized at all, which get more bits than the file
 * type's own (the output and embeddings, attn_v, ffn_down and attn_output
 * by layer), and where a tensor whose rows are not whole blocks goes.
 * They are llama.cpp's llama_model_quantize's for the file types muster
 * writes, with no importance matrix; docs/quantize.md says them in words.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/quant_rules_int.h"
#include "kern/quant_int.h"

#define NEEDS_IMATRIX "it needs an importance matrix, and muster's quantizer does not use one"
#define NO_IQ3 "muster's quantizer does not write IQ3_S"

/* llama.cpp's file type numbers (general.file_type). */
enum {
	FT_F32 = 0, FT_F16 = 1, FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q5_0 = 8,
	FT_Q5_1 = 9, FT_Q2_K = 10, FT_Q3_K_S = 11, FT_Q3_K_M = 12, FT_Q3_K_L = 13,
	FT_Q4_K_S = 14, FT_Q4_K_M = 15, FT_Q5_K_S = 16, FT_Q5_K_M = 17, FT_Q6_K = 18,
	FT_IQ4_NL = 25, FT_IQ4_XS = 30, FT_BF16 = 32
};

static const mu__qftype_t ftypes[] = {
	{"Q2_K", FT_Q2_K, MU__GGML_Q2_K, NULL},
	{"Q3_K_S", FT_Q3_K_S, MU__GGML_Q3_K, NULL},
	{"Q3_K_M", FT_Q3_K_M, MU__GGML_Q3_K, NULL},
	{"Q3_K_L", FT_Q3_K_L, MU__GGML_Q3_K, NULL},
	{"Q4_K_S", FT_Q4_K_S, MU__GGML_Q4_K, NULL},
	{"Q4_K_M", FT_Q4_K_M, MU__GGML_Q4_K, NULL},
	{"Q5_K_S", FT_Q5_K_S, MU__GGML_Q5_K, NULL},
	{"Q5_K_M", FT_Q5_K_M, MU__GGML_Q5_K, NULL},
	{"Q6_K", FT_Q6_K, MU__GGML_Q6_K, NULL},
	{"IQ4_XS", FT_IQ4_XS, MU__GGML_IQ4_XS, NULL},
	{"IQ4_NL", FT_IQ4_NL, MU__GGML_IQ4_NL, NULL},
	{"Q4_0", FT_Q4_0, MU__GGML_Q4_0, NULL},
	{"Q4_1", FT_Q4_1, MU__GGML_Q4_1, NULL},
	{"Q5_0", FT_Q5_0, MU__GGML_Q5_0, NULL},
	{"Q5_1", FT_Q5_1, MU__GGML_Q5_1, NULL},
	{"Q8_0", FT_Q8_0, MU__GGML_Q8_0, NULL},
	{"F16", FT_F16, MU__GGML_F16, NULL},
	{"BF16", FT_BF16, MU__GGML_BF16, NULL},
	{"F32", FT_F32, MU__GGML_F32, NULL},
	/* llama.cpp's others, refused with the reason */
	{"IQ2_XXS", 19, 0, NEEDS_IMATRIX},
	{"IQ2_XS", 20, 0, NEEDS_IMATRIX},
	{"IQ2_S", 28, 0, NEEDS_IMATRIX},
	{"IQ2_M", 29, 0, NEEDS_IMATRIX},
	{"IQ1_S", 24, 0, NEEDS_IMATRIX},
	{"IQ1_M", 31, 0, NEEDS_IMATRIX},
	{"IQ3_XXS", 23, 0, NEEDS_IMATRIX},
	{"Q2_K_S", 21, 0, NEEDS_IMATRIX},
	{"IQ3_XS", 22, 0, NO_IQ3},
	{"IQ3_S", 26, 0, NO_IQ3},
	{"IQ3_M", 27, 0, NO_IQ3},
	{"TQ1_0", 36, 0, "muster's quantizer does not write ternary types"},
	{"TQ2_0", 37, 0, "muster's quantizer does not write ternary types"},
	{"MXFP4_MOE", 38, 0, "muster's quantizer does not write MXFP4"},
};

const mu__qftype_t *mu__qftype(const char *name)
{
	for (size_t i = 0; i < sizeof(ftypes) / sizeof(ftypes[0]); i++)
		if (strcmp(ftypes[i].name, name) == 0)
			return &ftypes[i];
	return NULL;
}

const char *mu__qftype_list(void)
{
	static char buf[256];

	if (buf[0] == '\0') {
		size_t at = 0;

		for (size_t i = 0; i < sizeof(ftypes) / sizeof(ftypes[0]); i++)
			if (ftypes[i].why == NULL)
				at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%s%s", at ? ", " : "",
				                       ftypes[i].name);
	}
	return buf;
}

/* Substrings of the names of 2-D tensors that stay as they are. */
static const char *const keep[] = {
	"_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
	"per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
	"indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight",
	"time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight",
	"time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight",
	"time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
	"time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight",
	".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd",
	".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
};

static int quantizable(const char *name, const uint64_t ne[4])
{
	size_t n = strlen(name);

	if (ne[1] <= 1 && ne[2] <= 1 && ne[3] <= 1) /* one dimension (ggml_n_dims) */
		return 0;
	if (n < 6 || strcmp(name + n - 6, "weight") != 0)
		return 0;
	if (strcmp(name, "position_embd.weight") == 0 || strcmp(name, "token_types.weight") == 0)
		return 0;
	for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
		if (strstr(name, keep[i]) != NULL)
			return 0;
	return 1;
}

typedef enum { C_OTHER, C_OUTPUT, C_EMBD, C_ATTN_V, C_ATTN_K, C_ATTN_OUT, C_DOWN, C_GATE, C_UP } cat_t;

static cat_t category(const char *n)
{
	if (strcmp(n, "output.weight") == 0)
		return C_OUTPUT;
	if (strcmp(n, "token_embd.weight") == 0 || strcmp(n, "per_layer_token_embd.weight") == 0)
		return C_EMBD;
	if (strstr(n, "attn_qkv.weight") || strstr(n, "attn_kv_b.weight") || strstr(n, "attn_v.weight"))
		return C_ATTN_V;
	if (strstr(n, "attn_k.weight"))
		return C_ATTN_K;
	if (strstr(n, "attn_q.weight"))
		return C_OTHER;
	if (strstr(n, "attn_output.weight"))
		return C_ATTN_OUT;
	if (strstr(n, "ffn_up"))
		return C_UP;
	if (strstr(n, "ffn_gate"))
		return C_GATE;
	if (strstr(n, "ffn_down"))
		return C_DOWN;
	return C_OTHER;
}

void mu__quant_plan_names(mu__qplan_t *p, const char *const *names, size_t n)
{
	p->tied = 1;
	p->n_attn_v = 0;
	for (size_t i = 0; i < n; i++) {
		cat_t c = category(names[i]);

		p->n_attn_v += c == C_ATTN_V;
		if (c == C_OUTPUT)
			p->tied = 0;
	}
}

static int more_bits(int i, int n)
{
	return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static int layer_of(const char *name)
{
	int l = -1;

	if (sscanf(name, "blk.%d.", &l) != 1)
		return -1;
	return l;
}

/* The layer llama.cpp takes for a feed-forward tensor: the count so far,
 * or with experts the one in the name; -1 when that is not one. */
static int ffn_layer(const mu__qplan_t *p, int count, const char *name, char *why, size_t wl)
{
	int l = count;

	if (p->n_expert > 1) {
		l = layer_of(name);
		if (l < 0 || l >= p->n_layer) {
			snprintf(why, wl, "tensor %s: no layer of the model's %d in its name", name,
			         p->n_layer);
			return -1;
		}
	}
	return l;
}

static uint32_t ffn_down(const mu__qplan_t *p, uint32_t ft, int i, uint32_t t)
{
	int n = p->n_layer;

	if (ft == FT_Q2_K)
		return MU__GGML_Q3_K;
	if (ft == FT_Q3_K_M)
		return i < n / 16 ? MU__GGML_Q5_K
		       : !p->falcon || more_bits(i, n) ? MU__GGML_Q4_K
		                                       : MU__GGML_Q3_K;
	if (ft == FT_Q3_K_L)
		return p->falcon ? MU__GGML_Q4_K : MU__GGML_Q5_K;
	if (ft == FT_Q4_K_M) {
		if (p->falcon)
			return i < n / 16 ? MU__GGML_Q6_K : more_bits(i, n) ? MU__GGML_Q5_K : MU__GGML_Q4_K;
		return more_bits(i, n) ? MU__GGML_Q6_K : t;
	}
	if (i < n / 8 && (ft == FT_IQ4_NL || ft == FT_IQ4_XS))
		return MU__GGML_Q5_K;
	if (ft == FT_Q5_K_M && more_bits(i, n))
		return MU__GGML_Q6_K;
	if (ft == FT_Q4_K_S && !p->falcon && i < n / 8)
		return MU__GGML_Q5_K;
	return t;
}

static uint32_t attn_v(mu__qplan_t *p, uint32_t ft, uint32_t t)
{
	if (ft == FT_Q2_K)
		t = p->n_gqa >= 4 ? MU__GGML_Q4_K : MU__GGML_Q3_K;
	else if (ft == FT_Q3_K_M)
		t = p->i_attn_v < 2 ? MU__GGML_Q5_K : MU__GGML_Q4_K;
	else if (ft == FT_Q3_K_L)
		t = MU__GGML_Q5_K;
	else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && p->n_gqa >= 4)
		t = MU__GGML_Q5_K;
	else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && more_bits(p->i_attn_v, p->n_attn_v))
		t = MU__GGML_Q6_K;
	else if (ft == FT_Q4_K_S && p->i_attn_v < 4)
		t = MU__GGML_Q5_K;
	if (p->n_expert == 8)
		t = MU__GGML_Q8_0;
	p->i_attn_v++;
	return t;
}

static uint32_t attn_output(const mu__qplan_t *p, uint32_t ft, uint32_t t)
{
	if (p->falcon)
		return ft == FT_Q3_K_L ? MU__GGML_Q4_K : t;
	if (p->n_expert == 8)
		return ft == FT_Q2_K || ft == FT_Q3_K_S || ft == FT_Q3_K_M || ft == FT_IQ4_NL ||
		               ft == FT_Q4_K_S || ft == FT_Q4_K_M || ft == FT_IQ4_XS
		           ? MU__GGML_Q5_K
		           : t;
	if (ft == FT_Q2_K)
		return MU__GGML_Q3_K;
	if (ft == FT_Q3_K_M)
		return MU__GGML_Q4_K;
	if (ft == FT_Q3_K_L)
		return MU__GGML_Q5_K;
	return t;
}

/* A type whose block does not divide the rows: the 32-block type next to
 * it, or F16 when even that does not fit. */
static uint32_t fallback(mu__qplan_t *p, uint64_t ne0, uint32_t t)
{
	uint32_t r = t;

	if (ne0 % (uint64_t)mu__quant(t)->block == 0)
		return t;
	p->fallbacks++;
	if (t == MU__GGML_IQ4_XS)
		r = MU__GGML_IQ4_NL;
	else if (t == MU__GGML_Q2_K || t == MU__GGML_Q3_K)
		r = MU__GGML_Q4_0;
	else if (t == MU__GGML_Q4_K)
		r = MU__GGML_Q5_0;
	else if (t == MU__GGML_Q5_K)
		r = MU__GGML_Q5_1;
	else if (t == MU__GGML_Q6_K)
		r = MU__GGML_Q8_0;
	return ne0 % (uint64_t)mu__quant(r)->block == 0 ? r : MU__GGML_F16;
}

int64_t mu__quant_pick(mu__qplan_t *p, const mu__qftype_t *ft, const char *name,
                       const uint64_t ne[4], uint32_t cur, char *why, size_t wl)
{
	uint32_t t = ft->def, f = ft->ftype;
	cat_t c = category(name);
	int l;

	if (!quantizable(name, ne))
		return cur;
	if (t == MU__GGML_F32 || t == MU__GGML_F16 || t == MU__GGML_BF16)
		return t;
	if (c == C_OUTPUT || (p->tied && c == C_EMBD)) {
		if (p->falcon || ne[0] % (uint64_t)mu__quant(t)->block != 0)
			t = MU__GGML_Q8_0;
		else if (t != MU__GGML_Q8_0)
			t = MU__GGML_Q6_K;
	} else if (c == C_ATTN_V) {
		t = attn_v(p, f, t);
	} else if (c == C_ATTN_K) {
		if (p->n_expert == 8)
			t = MU__GGML_Q8_0;
	} else if (c == C_DOWN) {
		if ((l = ffn_layer(p, p->i_ffn_down, name, why, wl)) < 0)
			return -1;
		t = ffn_down(p, f, l, t);
		p->i_ffn_down++;
	} else if (c == C_ATTN_OUT) {
		t = attn_output(p, f, t);
	} else if (c == C_GATE || c == C_UP) {
		/* only IQ3_XS, which muster does not write, changes these */
		if (ffn_layer(p, c == C_GATE ? p->i_ffn_gate : p->i_ffn_up, name, why, wl) < 0)
			return -1;
		if (c == C_GATE)
			p->i_ffn_gate++;
		else
			p->i_ffn_up++;
	}
	return fallback(p, ne[0], t);
}

int mu__quant_order(const void *a, const void *b)
{
	const char *x = *(const char *const *)a, *y = *(const char *const *)b;
	int lx = layer_of(x), ly = layer_of(y);

	if (lx != ly)
		return lx < ly ? -1 : 1;
	return strcmp(x, y);
}
