/* SPDX-License-Identifier: MIT */
/*
 * Tokenizers from arrays (a GGUF file's tokenizer.ggml.*) and from a
 * llama2.c tokenizer file, as the programs that read those formats tokenize:
 *   - GGUF "llama": llama.cpp's SentencePiece-style BPE. Spaces become
 *     U+2581, one is put before each stretch of text, characters merge
 *     highest score first, and characters not in the vocabulary become
 *     <0xNN> pieces. Control and unknown tokens are special. Decoding
 *     drops the first space.
 *   - GGUF "gpt2": byte-level BPE by merge rank. The pre-tokenizer regex
 *     is the one tokenizer.ggml.pre names.
 *   - llama2.c: run.c's encoder, the same as "llama" with " " instead of
 *     U+2581 and bytes at ids 3..258. Decoding drops the space right after
 *     BOS.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc_int.h"
#include "core/endian_int.h"
#include "core/error_int.h"
#include "muster/common.h"
#include "tok/impl_int.h"

#define SPM_SPACE "\xe2\x96\x81" /* U+2581 */

/* llama.cpp's pre-tokenizers (llama-vocab.cpp) that the HF files we read
 * use too, in Oniguruma syntax (mu__tok_regex). */
#define RE_LLAMA3                                                              \
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "   \
	"?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                               \
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "        \
	"?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static const struct {
	const char *name;
	const char *re;
	int ignore_merges, nfc;
} pres[] = {
	{"default", MU__TOK_RE_GPT2, 0, 0},
	{"gpt-2", MU__TOK_RE_GPT2, 0, 0},
	{"gpt2", MU__TOK_RE_GPT2, 0, 0},
	{"llama3", RE_LLAMA3, 1, 0},
	{"llama-v3", RE_LLAMA3, 1, 0},
	{"llama-bpe", RE_LLAMA3, 1, 0},
	/* NFC as Qwen2's tokenizer.json says (llama.cpp leaves it out) */
	{"qwen2", RE_QWEN2, 0, 1},
	{"deepseek-r1-qwen", RE_QWEN2, 0, 1},
};

static int add_norm(mu__tok_t *t, mu__tok_norm_kind_t kind, const char *s, const char *pat)
{
	mu__tok_norm_t *op = &t->norm[t->nnorm++];
	char why[64];

	memset(op, 0, sizeof(*op));
	op->kind = kind;
	if (s != NULL) {
		op->slen = strlen(s);
		if ((op->s = mu__strdup(s)) == NULL)
			return MU_ENOMEM;
	}
	if (pat != NULL && mu__tok_regex(pat, strlen(pat), 1, &op->re, why, sizeof(why)) != 0)
		return MU_ENOMEM; /* our own literal: only memory can fail */
	return 0;
}

static int gpt2_pre(mu__tok_t *t, const char *pre, char *why, size_t wl)
{
	size_t i;
	mu__tok_pre_t *op = &t->pre[t->npre];

	for (i = 0; i < sizeof(pres) / sizeof(pres[0]); i++)
		if (strcmp(pre != NULL ? pre : "default", pres[i].name) == 0)
			break;
	if (i == sizeof(pres) / sizeof(pres[0]))
		return mu__why(why, wl, MU_EPROTO, "tokenizer.ggml.pre \"%.80s\" is not supported", pre);
	memset(op, 0, sizeof(*op));
	op->kind = MU__TOK_P_SPLIT;
	op->behavior = MU__TOK_B_ISOLATED;
	t->npre++;
	t->ignore_merges = pres[i].ignore_merges;
	if (pres[i].nfc && add_norm(t, MU__TOK_N_NFC, NULL, NULL) != 0)
		return MU_ENOMEM;
	return mu__tok_regex(pres[i].re, strlen(pres[i].re), 0, &op->re, why, wl);
}

static int32_t valid_id(const mu__tok_vocab_t *v, int32_t id)
{
	return id >= 0 && (size_t)id < v->n ? id : -1;
}

/* Pieces, scores and types; control / unknown ids special, user-defined
 * ones added (matched in any text), unused ones out of BPE's reach. */
static int vocab_pieces(mu__tok_t *t, const mu__tok_vocab_t *v, char *why, size_t wl)
{
	int rc;

	for (size_t i = 0; i < v->n; i++) {
		const char *p = v->tokens[i];
		size_t len = p == NULL ? 0 : v->token_lens != NULL ? v->token_lens[i] : strlen(p);
		int32_t ty = v->types != NULL ? v->types[i] : 1;

		if (p == NULL || len == 0 || len > MU__TOK_MAX_PIECE)
			return mu__why(why, wl, MU_EPROTO, "tokenizer.ggml.tokens[%zu] is empty or too long",
			               i);
		if ((rc = mu__tok_set_piece(t, (int32_t)i, p, len)) != 0)
			return rc;
		if (t->score != NULL) {
			if (!isfinite(v->scores[i]))
				return mu__why(why, wl, MU_EPROTO, "tokenizer.ggml.scores[%zu] is not finite", i);
			t->score[i] = v->scores[i];
		}
		if (ty == 2 || ty == 3 || ty == 4)
			rc = mu__tok_add_added(t, (int32_t)i, p, len, ty != 4, 0, 0, 0);
		if (ty == 5) /* unused: a placeholder BPE must never produce */
			t->attr[i] |= MU__TOK_A_NOKEY;
		if (rc != 0)
			return rc;
		if (ty == 2 && t->unk < 0)
			t->unk = (int32_t)i;
	}
	return 0;
}

static int gpt2_merges(mu__tok_t *t, const mu__tok_vocab_t *v, char *why, size_t wl)
{
	int rc;

	if (v->merges == NULL || v->nmerges == 0)
		return mu__why(why, wl, MU_EPROTO, "tokenizer.ggml.merges is missing");
	if (v->nmerges > MU__TOK_MAX_MERGES)
		return mu__why(why, wl, MU_ETOOBIG, "tokenizer.ggml.merges: more than %d",
		               MU__TOK_MAX_MERGES);
	for (size_t i = 0; i < v->nmerges; i++) {
		const char *m = v->merges[i], *sp = m != NULL ? strchr(m, ' ') : NULL;
		char inner[200];

		if (sp == NULL || sp == m || sp[1] == '\0' || strchr(sp + 1, ' ') != NULL)
			return mu__why(why, wl, MU_EPROTO, "tokenizer.ggml.merges[%zu] is not \"a b\"", i);
		rc = mu__tok_add_merge(t, m, (size_t)(sp - m), sp + 1, strlen(sp + 1), (uint32_t)i,
		                       inner, sizeof(inner));
		if (rc == MU_EPROTO)
			return mu__why(why, wl, rc, "tokenizer.ggml.merges[%zu]: %s", i, inner);
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* BOS / EOS, the template from add_bos / add_eos, the chat template. */
static int specials(mu__tok_t *t, int32_t bos, int32_t eos, int add_bos, int add_eos,
                    const char *chat)
{
	size_t cap = 0;
	int rc = 0;

	t->bos = bos;
	if (add_bos && bos >= 0)
		rc = mu__tok_push_id(&t->prefix, &t->nprefix, &cap, bos);
	cap = 0;
	if (rc == 0 && add_eos && eos >= 0)
		rc = mu__tok_push_id(&t->suffix, &t->nsuffix, &cap, eos);
	if (rc == 0 && eos >= 0)
		rc = mu__tok_add_eos(t, &eos, 1);
	if (rc == 0 && chat != NULL && (t->chat_template = mu__strdup(chat)) == NULL)
		rc = MU_ENOMEM;
	return rc;
}

static int from_vocab(const mu__tok_vocab_t *v, mu__tok_t *t, int llama, char *why, size_t wl)
{
	mu__tok_dec_t dec;
	int rc;

	memset(&dec, 0, sizeof(dec));
	if (llama) {
		t->byte_fallback = 1;
		if ((!v->no_space_prefix && add_norm(t, MU__TOK_N_PREPEND, SPM_SPACE, NULL) != 0) ||
		    add_norm(t, MU__TOK_N_REPLACE, SPM_SPACE, " ") != 0)
			return MU_ENOMEM;
		memcpy(dec.from, SPM_SPACE, 3);
		dec.fromlen = 3;
		dec.to[0] = ' ';
		dec.tolen = 1;
		dec.byte_fallback = 1;
		dec.strip = v->no_space_prefix ? MU__TOK_STRIP_NONE : MU__TOK_STRIP_START;
		dec.strip_n = 1;
	} else {
		dec.byte_level = 1;
		if ((rc = gpt2_pre(t, v->pre, why, wl)) != 0)
			return rc;
	}
	if ((rc = vocab_pieces(t, v, why, wl)) != 0 || (rc = mu__tok_index(t)) != 0 ||
	    (!llama && (rc = gpt2_merges(t, v, why, wl)) != 0) ||
	    (rc = mu__tok_finish(t, &dec, why, wl)) != 0)
		return rc;
	if (valid_id(v, v->unk) >= 0)
		t->unk = v->unk;
	return specials(t, valid_id(v, v->bos), valid_id(v, v->eos),
	                v->add_bos >= 0 ? v->add_bos : llama, v->add_eos > 0, v->chat_template);
}

int mu__tok_from_vocab(const mu__tok_vocab_t *v, mu__tok_t **out, char *why, size_t wl)
{
	mu__tok_t *t = NULL;
	int llama, rc;

	*out = NULL;
	if (v->model == NULL || (strcmp(v->model, "llama") != 0 && strcmp(v->model, "gpt2") != 0))
		return mu__why(why, wl, MU_EPROTO, "tokenizer.ggml.model \"%.80s\" is not supported",
		               v->model != NULL ? v->model : "(none)");
	llama = strcmp(v->model, "llama") == 0;
	if (v->n == 0 || v->n > MU__TOK_MAX_VOCAB || v->tokens == NULL)
		return mu__why(why, wl, MU_EPROTO, "tokenizer.ggml.tokens: %zu tokens", v->n);
	if (llama && v->scores == NULL)
		return mu__why(why, wl, MU_EPROTO, "tokenizer.ggml.scores is missing");
	rc = mu__tok_new((int32_t)v->n, llama ? MU__TOK_SCORE : MU__TOK_RANK, !llama, &t);
	if (rc == 0)
		rc = from_vocab(v, t, llama, why, wl);
	if (rc == MU_ENOMEM)
		mu__why(why, wl, rc, "out of memory");
	if (rc != 0) {
		mu__tok_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

/* ---- llama2.c ---- */

static int l2c_pieces(mu__tok_t *t, const unsigned char *p, size_t len, char *why, size_t wl)
{
	size_t o = 4;
	int32_t maxlen = (int32_t)mu_le32_get(p);
	int rc;

	if (maxlen <= 0 || maxlen > MU__TOK_MAX_PIECE)
		return mu__why(why, wl, MU_EPROTO, "llama2.c tokenizer: max_token_length %d",
		               (int)maxlen);
	for (int32_t i = 0; i < t->n; i++) {
		uint32_t bits;
		int32_t n;
		float score;

		if (len - o < 8)
			return mu__why(why, wl, MU_EPROTO, "llama2.c tokenizer: ends at token %d of %d",
			               (int)i, (int)t->n);
		bits = mu_le32_get(p + o);
		memcpy(&score, &bits, sizeof(score));
		n = (int32_t)mu_le32_get(p + o + 4);
		o += 8;
		if (n <= 0 || n > maxlen || (size_t)n > len - o)
			return mu__why(why, wl, MU_EPROTO, "llama2.c tokenizer: token %d has length %d",
			               (int)i, (int)n);
		if (!isfinite(score))
			return mu__why(why, wl, MU_EPROTO, "llama2.c tokenizer: token %d has score %g",
			               (int)i, (double)score);
		if ((rc = mu__tok_set_piece(t, i, (const char *)p + o, (size_t)n)) != 0)
			return rc;
		t->score[i] = score;
		o += (size_t)n;
	}
	return 0;
}

int mu__tok_from_llama2c(const void *data, size_t len, int32_t vocab, mu__tok_t **out,
                         char *why, size_t wl)
{
	mu__tok_dec_t dec;
	mu__tok_t *t = NULL;
	int rc;

	*out = NULL;
	if (vocab < 259 || vocab > MU__TOK_MAX_VOCAB) /* unk, BOS, EOS, 256 bytes */
		return mu__why(why, wl, MU_EPROTO, "llama2.c tokenizer: vocabulary size %d", (int)vocab);
	if (len < 4)
		return mu__why(why, wl, MU_EPROTO, "llama2.c tokenizer: %zu bytes", len);
	memset(&dec, 0, sizeof(dec));
	dec.byte_fallback = 1;
	dec.strip = MU__TOK_STRIP_AFTER_BOS;
	rc = mu__tok_new(vocab, MU__TOK_SCORE, 0, &t);
	if (rc == 0)
		rc = l2c_pieces(t, data, len, why, wl);
	if (rc == 0) {
		t->byte_fallback = 1;
		t->unk = 0;
		for (int b = 0; b < 256; b++) /* run.c: byte b is id b + 3 */
			t->byte_id[b] = b + 3;
		for (int i = 0; i < 3; i++)
			t->attr[i] |= MU__TOK_A_SPECIAL;
		rc = add_norm(t, MU__TOK_N_PREPEND, " ", NULL); /* run.c's dummy prefix */
	}
	if (rc == 0 && (rc = mu__tok_index(t)) == 0 && (rc = mu__tok_finish(t, &dec, why, wl)) == 0)
		rc = specials(t, 1, 2, 1, 0, NULL);
	if (rc == MU_ENOMEM)
		mu__why(why, wl, rc, "out of memory");
	if (rc != 0) {
		mu__tok_free(t);
		return rc;
	}
	*out = t;
	return 0;
}
