/* SPDX-License-Identifier: MIT */
/* TEMPORARY stand-in for the tokenizers (llama2.c decode only). */
#include <stdio.h>
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/endian_int.h"
#include "core/error_int.h"
#include "model/tok_int.h"

struct mu__tok_s {
	int32_t n;
	char **piece;
	size_t *len;
	int32_t eos[16];
	size_t neos;
};

int mu__tok_from_hf(const char *json, size_t len, const char *config, size_t config_len,
                    mu__tok_t **out, char *why, size_t wl)
{
	(void)json; (void)len; (void)config; (void)config_len; *out = NULL;
	return mu__why(why, wl, MU_EPROTO, "HF tokenizers are not in this build yet");
}

static int from_pieces(const char *const *p, const size_t *l, size_t n, mu__tok_t **out)
{
	mu__tok_t *t = mu__calloc(1, sizeof(*t));
	if (t == NULL) return MU_ENOMEM;
	t->n = (int32_t)n;
	t->piece = mu__calloc(n + 1, sizeof(char *));
	t->len = mu__calloc(n + 1, sizeof(size_t));
	for (size_t i = 0; i < n; i++) { t->piece[i] = mu__strndup(p[i], l[i]); t->len[i] = l[i]; }
	t->eos[0] = 2; t->neos = 1;
	*out = t;
	return 0;
}

int mu__tok_from_vocab(const mu__tok_vocab_t *v, mu__tok_t **out, char *why, size_t wl)
{
	(void)why; (void)wl;
	return from_pieces(v->tokens, v->token_lens, v->n, out);
}

int mu__tok_from_llama2c(const void *data, size_t len, int32_t vocab, mu__tok_t **out,
                         char *why, size_t wl)
{
	const unsigned char *p = data;
	size_t off = 4;
	char **pc = mu__calloc((size_t)vocab + 1, sizeof(char *));
	size_t *ln = mu__calloc((size_t)vocab + 1, sizeof(size_t));
	int rc;
	for (int32_t i = 0; i < vocab; i++) {
		uint32_t n;
		if (off + 8 > len) return mu__why(why, wl, MU_EPROTO, "short tokenizer");
		n = mu_le32_get(p + off + 4); off += 8;
		if (n > len - off) return mu__why(why, wl, MU_EPROTO, "short tokenizer");
		pc[i] = (char *)p + off; ln[i] = n; off += n;
	}
	rc = from_pieces((const char *const *)pc, ln, (size_t)vocab, out);
	mu__free(pc); mu__free(ln);
	return rc;
}

void mu__tok_free(mu__tok_t *t)
{
	if (t == NULL) return;
	for (int32_t i = 0; i < t->n; i++) mu__free(t->piece[i]);
	mu__free(t->piece); mu__free(t->len); mu__free(t);
}

int mu__tok_encode(const mu__tok_t *t, const char *text, size_t len, int flags, int32_t **ids, size_t *n)
{
	(void)t; (void)text;
	*ids = mu__malloc(sizeof(int32_t)); *n = 0;
	if (len == 0 && (flags & MU__TOK_BOS)) (*ids)[(*n)++] = 1;
	return 0;
}

static size_t piece_bytes(const mu__tok_t *t, int32_t prev, int32_t id, char *out)
{
	const char *p = t->piece[id];
	size_t l = t->len[id];
	unsigned b;
	if (prev == 1 && l > 0 && p[0] == ' ') { p++; l--; }
	if (l == 6 && sscanf(p, "<0x%02X>", &b) == 1) { out[0] = (char)b; return 1; }
	memcpy(out, p, l);
	return l;
}

int mu__tok_decode(const mu__tok_t *t, const int32_t *ids, size_t n, int keep_special, char **text, size_t *len)
{
	(void)t; (void)ids; (void)n; (void)keep_special; *text = NULL; *len = 0;
	return MU_EPROTO;
}

void mu__tok_stream_init(mu__tok_stream_t *s, const mu__tok_t *t)
{
	memset(s, 0, sizeof(*s)); s->t = t;
}

int mu__tok_stream_feed(mu__tok_stream_t *s, int32_t id, char *out, size_t cap, size_t *outn)
{
	int32_t prev = s->nfed == 0 ? 1 : (int32_t)s->npend;
	(void)cap;
	*outn = piece_bytes(s->t, prev, id, out);
	s->nfed++; s->npend = (size_t)id;
	return 0;
}

int32_t mu__tok_vocab_size(const mu__tok_t *t) { return t->n; }
int32_t mu__tok_bos(const mu__tok_t *t) { (void)t; return 1; }
const int32_t *mu__tok_eos(const mu__tok_t *t, size_t *n) { *n = t->neos; return t->eos; }
const char *mu__tok_piece(const mu__tok_t *t, int32_t id, size_t *len) { *len = t->len[id]; return t->piece[id]; }
const char *mu__tok_chat_template(const mu__tok_t *t) { (void)t; return NULL; }
int mu__tok_add_eos(mu__tok_t *t, const int32_t *ids, size_t n) { (void)t; (void)ids; (void)n; return 0; }
