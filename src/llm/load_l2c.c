/* SPDX-License-Identifier: MIT */
/*
 * A decoder from a llama2.c checkpoint (the legacy, version 0 layout that
 * karpathy's run.c reads): seven int32 (dim, hidden_dim, n_layers,
 * n_heads, n_kv_heads, vocab_size, seq_len; a negative vocab_size means an
 * untied classifier at the end), then F32 arrays layer-major within each
 * kind: token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1 (gate),
 * w2 (down), w3 (up), rms_final, two legacy freq_cis tables, [wcls]: the
 * llama entry's l2c places (llm/arch.c). Q/K rows are in Meta's
 * interleaved RoPE order. The tokenizer is a
 * separate file (tok_path, else tokenizer.bin or tok<vocab>.bin beside
 * the checkpoint).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/endian_int.h"
#include "core/error_int.h"
#include "llm/arch_int.h"
#include "llm/llm_int.h"

#define L2C_HEADER 28

/* The legacy freq_cis tables' place in the file; no tensor is there. */
#define L2C_FREQ_CIS 11

/* The spec at place pos of the llama entry (model or layer), or NULL. */
static const mu__tspec_t *at_place(const mu__arch_t *a, int pos, int *per_layer)
{
	size_t i;

	for (i = 0; i < a->nmodel; i++)
		if (a->model[i].l2c == pos) {
			*per_layer = 0;
			return &a->model[i];
		}
	for (i = 0; i < a->nlayer; i++)
		if (a->layer[i].l2c == pos) {
			*per_layer = 1;
			return &a->layer[i];
		}
	return NULL;
}

/*
 * Walk the arrays in file order (the entry's l2c places): each spec holds
 * one slice per layer, or one for the whole model; the classifier only
 * when untied. With src NULL, count the floats instead; with it, add the
 * tensors from p. The floats the header implies.
 */
static uint64_t walk(mu__llm_src_t *src, const mu__llm_hp_t *h, const unsigned char *p,
                     int shared, int *rc)
{
	const mu__arch_t *a = mu__arch_by_name("llama");
	const mu__tspec_t *t;
	uint64_t n = 0, each;
	char name[64];
	int pos, l, per_layer;

	*rc = 0;
	for (pos = 0; pos <= L2C_FREQ_CIS + 1 && *rc == 0; pos++) {
		if (pos == L2C_FREQ_CIS) { /* seq_len x head_dim/2, twice */
			n += (uint64_t)h->ctx * (uint64_t)h->head_dim;
			continue;
		}
		if ((t = at_place(a, pos, &per_layer)) == NULL ||
		    (t->need == MU__NEED_UNTIED && shared))
			continue;
		each = (uint64_t)mu__arch_size(h, t->rows) * (uint64_t)mu__arch_size(h, t->cols);
		for (l = 0; l < (per_layer ? h->n_layers : 1) && *rc == 0; l++) {
			if (src != NULL) {
				if (per_layer)
					snprintf(name, sizeof(name), "blk.%d.%s", l, t->gguf);
				else
					snprintf(name, sizeof(name), "%s", t->gguf);
				*rc = mu__llm_add_tensor(src, name, MU__WT_F32, p + n * 4,
				                         mu__arch_size(h, t->rows), mu__arch_size(h, t->cols));
			}
			n += each;
		}
	}
	return n;
}

static int read_header(const unsigned char *p, size_t len, const char *path,
                       mu__llm_hp_t *h, int *shared, char *why, size_t wl)
{
	int32_t v[7];
	int i;

	if (len < L2C_HEADER)
		return mu__why(why, wl, MU_EPROTO, "%.300s is neither GGUF nor a llama2.c checkpoint "
		               "(too short)", path);
	if (mu_le32_get(p) == 0x616b3432u)
		return mu__why(why, wl, MU_EPROTO, "%.300s is a llama2.c checkpoint of a newer export "
		               "version (\"ak42\"); muster reads the legacy layout of run.c", path);
	for (i = 0; i < 7; i++)
		v[i] = (int32_t)mu_le32_get(p + 4 * i);
	*shared = v[5] > 0;
	h->dim = v[0];
	h->hidden = v[1];
	h->n_layers = v[2];
	h->n_heads = v[3];
	h->n_kv_heads = v[4];
	h->vocab = v[5] == INT32_MIN ? 0 : (v[5] < 0 ? -v[5] : v[5]);
	h->ctx = v[6];
	for (i = 0; i < 7; i++)
		if (v[i] == 0 || (i != 5 && v[i] < 0) || v[i] > (1 << 24))
			return mu__why(why, wl, MU_EPROTO, "%.300s is neither GGUF nor a llama2.c "
			               "checkpoint (header field %d is %d)", path, i, v[i]);
	if (h->dim % h->n_heads != 0)
		return mu__why(why, wl, MU_EPROTO, "%.300s: dim %d is not a multiple of n_heads %d",
		               path, h->dim, h->n_heads);
	h->head_dim = h->dim / h->n_heads;
	return 0;
}

/* tok_path, else tokenizer.bin, else tok<vocab>.bin in the checkpoint's
 * directory. */
static int find_tokenizer(mu__llm_src_t *src, const char *path, const char *tok_path)
{
	const char *slash = strrchr(path, '/');
	int dl = slash == NULL ? 0 : (int)(slash - path + 1);
	char cand[2][4096];
	int i;

	if (tok_path != NULL)
		return (src->tok_path = mu__strdup(tok_path)) == NULL ? MU_ENOMEM : 0;
	snprintf(cand[0], sizeof(cand[0]), "%.*stokenizer.bin", dl, path);
	snprintf(cand[1], sizeof(cand[1]), "%.*stok%d.bin", dl, path, src->hp.vocab);
	for (i = 0; i < 2; i++)
		if (access(cand[i], R_OK) == 0)
			return (src->tok_path = mu__strdup(cand[i])) == NULL ? MU_ENOMEM : 0;
	return 0; /* none: refused when the tokenizer is asked for */
}

int mu__llm_open_l2c(const char *path, const char *tok_path,
                     mu__llm_src_t *src, char *why, size_t wl)
{
	const unsigned char *base;
	uint64_t floats;
	size_t len;
	int shared = 0, rc;

	src->fmt = MU__FMT_LLAMA2C;
	if ((rc = mu__llm_map_file(path, src, &base, &len, why, wl)) != 0)
		return rc;
	if ((rc = read_header(base, len, path, &src->hp, &shared, why, wl)) != 0)
		return rc;
	/* what run.c assumes: a llama in Meta's pair order */
	memcpy(src->hp.arch, "llama", 6);
	src->hp.eps = 1e-5f;
	src->hp.theta = 10000.0f;
	src->hp.rope = MU__ROPE_PAIRS;
	src->hp.tied = shared;
	src->hp.bos = 1;
	src->hp.eos = 2;
	/* the sizes in range before they are multiplied */
	if ((rc = mu__llm_check_hp(src, why, wl)) != 0)
		return rc;
	floats = walk(NULL, &src->hp, NULL, shared, &rc);
	if (floats * 4 != len - L2C_HEADER)
		return mu__why(why, wl, MU_EPROTO, "%.300s: %zu bytes of weights; a llama2.c checkpoint "
		               "with this header holds %llu", path, len - L2C_HEADER,
		               (unsigned long long)(floats * 4));
	walk(src, &src->hp, base + L2C_HEADER, shared, &rc);
	if (rc != 0)
		return rc;
	src->tokenizer = mu__llm_l2c_tokenizer;
	return find_tokenizer(src, path, tok_path);
}

int mu__llm_l2c_tokenizer(const void *srcp, mu__tok_t **out, char *why, size_t wl)
{
	const mu__llm_src_t *src = srcp;
	mu__llm_src_t tmp;
	const unsigned char *p;
	size_t len;
	int rc;

	if (src->tok_path == NULL)
		return mu__why(why, wl, -ENOENT, "%.300s: no tokenizer found beside it (tokenizer.bin "
		               "or tok%d.bin); give one with --tokenizer", src->path, src->hp.vocab);
	memset(&tmp, 0, sizeof(tmp));
	tmp.path = src->tok_path;
	rc = mu__llm_map_file(src->tok_path, &tmp, &p, &len, why, wl);
	if (rc == 0)
		rc = mu__tok_from_llama2c(p, len, src->hp.vocab, out, why, wl);
	tmp.path = NULL;
	mu__llm_src_free(&tmp);
	return rc;
}
