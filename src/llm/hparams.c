/* SPDX-License-Identifier: MIT */
/*
 * The hyperparameter table: each field of mu__llm_hp_t once, with where
 * each format keeps it, its default, its name on the wire and its range
 * (arch_int.h). The GGUF and HF loaders read fields through it, the
 * checker checks every range from it, and the wire form and the digest
 * (llm/wire.c) walk it in its order, so that order is part of the wire:
 * never reorder it, and append new fields with MU__HPF_WIRE_NEW.
 *
 * A field whose key is NULL for a format is set by that loader's own code
 * (the RoPE layout from the architecture, the scaling group from its
 * nested object, GGUF's vocabulary and tying from its tensors, HF's window
 * by the architecture's rule).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "llm/arch_int.h"

#define OFF(m) offsetof(mu__llm_hp_t, m)
#define BIG 1e30

static int32_t same_as_heads(const mu__llm_hp_t *h)
{
	return h->n_heads;
}

static int32_t dim_per_head(const mu__llm_hp_t *h)
{
	return h->n_heads > 0 ? h->dim / h->n_heads : 0;
}

/* name, offset, kind, flags, lo, hi, default, GGUF's default, derived
 * default, GGUF key, config.json keys, wire name */
static const mu__hpf_t fields[] = {
	{"dim", OFF(dim), MU__HPK_INT, MU__HPF_REQUIRED, 1, 1 << 16, 0, 0, NULL,
	 "%s.embedding_length", {"hidden_size"}, "dim"},
	{"hidden", OFF(hidden), MU__HPK_INT, MU__HPF_REQUIRED, 1, 1 << 18, 0, 0, NULL,
	 "%s.feed_forward_length", {"intermediate_size"}, "hidden"},
	{"n_layers", OFF(n_layers), MU__HPK_INT, MU__HPF_REQUIRED, 1, 1024, 0, 0, NULL,
	 "%s.block_count", {"num_hidden_layers"}, "layers"},
	{"n_heads", OFF(n_heads), MU__HPK_INT, MU__HPF_REQUIRED, 1, 1024, 0, 0, NULL,
	 "%s.attention.head_count", {"num_attention_heads"}, "heads"},
	{"n_kv_heads", OFF(n_kv_heads), MU__HPK_INT, 0, 1, 1024, 0, 0, same_as_heads,
	 "%s.attention.head_count_kv", {"num_key_value_heads"}, "kv_heads"},
	{"head_dim", OFF(head_dim), MU__HPK_INT, 0, 2, 1024, 0, 0, dim_per_head,
	 "%s.attention.key_length", {"head_dim"}, "head_dim"},
	{"vocab", OFF(vocab), MU__HPK_INT, MU__HPF_REQUIRED, 1, 1 << 22, 0, 0, NULL,
	 NULL /* token_embd's rows */, {"vocab_size"}, "vocab"},
	{"ctx", OFF(ctx), MU__HPK_INT, 0, 1, 1 << 24, 2048, 2048, NULL,
	 "%s.context_length", {"max_position_embeddings"}, "ctx"},
	{"window", OFF(window), MU__HPK_INT, 0, 0, 1 << 30, 0, 0, NULL,
	 NULL, {NULL} /* the architecture's rule */, "window"},
	{"eps", OFF(eps), MU__HPK_NUM, 0, 0, 1, 1e-6, 1e-5, NULL,
	 "%s.attention.layer_norm_rms_epsilon", {"rms_norm_eps"}, "eps"},
	{"theta", OFF(theta), MU__HPK_NUM, 0, 1, BIG, 10000, 10000, NULL,
	 "%s.rope.freq_base", {"rope_theta"}, "theta"},
	{"rope", OFF(rope), MU__HPK_INT, 0, 0, 1, 0, 0, NULL,
	 NULL, {NULL} /* the architecture's */, "rope"},
	{"scaling", OFF(scaling), MU__HPK_INT, 0, 0, 2, 0, 0, NULL,
	 NULL, {NULL} /* rope_scaling, rope.scaling.type */, "scaling"},
	{"sc_factor", OFF(sc_factor), MU__HPK_NUM, 0, -BIG, BIG, 0, 0, NULL,
	 NULL, {NULL}, "sc_factor"},
	{"sc_low", OFF(sc_low), MU__HPK_NUM, 0, -BIG, BIG, 0, 0, NULL, NULL, {NULL}, "sc_low"},
	{"sc_high", OFF(sc_high), MU__HPK_NUM, 0, -BIG, BIG, 0, 0, NULL, NULL, {NULL}, "sc_high"},
	{"sc_orig", OFF(sc_orig), MU__HPK_INT, 0, 0, 1 << 30, 0, 0, NULL, NULL, {NULL}, "sc_orig"},
	{"tied", OFF(tied), MU__HPK_BOOL, 0, 0, 1, 0, 0, NULL,
	 NULL /* output.weight absent */, {"tie_word_embeddings"}, "tied"},
	{"bos", OFF(bos), MU__HPK_TOKEN, 0, -1, INT32_MAX, -1, -1, NULL,
	 "tokenizer.ggml.bos_token_id", {"bos_token_id"}, NULL},
	{"eos", OFF(eos), MU__HPK_TOKEN, 0, -1, INT32_MAX, -1, -1, NULL,
	 "tokenizer.ggml.eos_token_id", {"eos_token_id"}, NULL},
};

const mu__hpf_t *mu__hpf_at(size_t i)
{
	return i < sizeof(fields) / sizeof(fields[0]) ? &fields[i] : NULL;
}

double mu__hpf_get(const mu__hpf_t *f, const mu__llm_hp_t *h)
{
	const unsigned char *p = (const unsigned char *)h + f->off;
	int32_t i;
	float x;

	if (f->kind == MU__HPK_NUM) {
		memcpy(&x, p, sizeof(x));
		return x;
	}
	memcpy(&i, p, sizeof(i));
	return i;
}

void mu__hpf_set(const mu__hpf_t *f, mu__llm_hp_t *h, double v)
{
	unsigned char *p = (unsigned char *)h + f->off;
	int32_t i = (int32_t)v;
	float x = (float)v;

	if (f->kind == MU__HPK_NUM)
		memcpy(p, &x, sizeof(x));
	else
		memcpy(p, &i, sizeof(i));
}

int mu__hpf_in_range(const mu__hpf_t *f, double v)
{
	if (f->kind == MU__HPK_NUM)
		return v > f->lo && v < f->hi;
	return v >= f->lo && v <= f->hi;
}

double mu__hpf_default(const mu__hpf_t *f, const mu__llm_hp_t *h, int gguf)
{
	if (f->derive != NULL)
		return f->derive(h);
	return gguf ? f->gguf_def : f->def;
}

void mu__hpf_range_text(const mu__hpf_t *f, char *out, size_t n)
{
	if (f->kind == MU__HPK_NUM)
		snprintf(out, n, "a number in (%g, %g)", f->lo, f->hi);
	else
		snprintf(out, n, "an integer in [%.0f, %.0f]", f->lo, f->hi);
}

void mu__hpf_gguf_key(const char *pattern, const char *arch, char *out, size_t n)
{
	if (strncmp(pattern, "%s", 2) == 0)
		snprintf(out, n, "%s%s", arch, pattern + 2);
	else
		snprintf(out, n, "%s", pattern);
}
