/* SPDX-License-Identifier: MIT */
/*
 * Ids back to text, whole (mu__tok_decode) or one id at a time for
 * printing as tokens come (mu__tok_stream_*). Each id's bytes were worked
 * out when the tokenizer was built (tok.c, from the decoder chain); what is
 * left here is leaving special tokens out and the leading-space rule:
 *   - MU__TOK_STRIP_START: HF's Strip / Metaspace decoders drop the space
 *     the SentencePiece prefix put at the start of the text;
 *   - MU__TOK_STRIP_AFTER_BOS: llama2.c's run.c drops a piece's leading
 *     space when the id before it is BOS.
 * Bytes are given as they are: a decode of ids that split a character
 * (or of invalid UTF-8 encoded byte by byte) is not repaired.
 */
#include <string.h>

#include "core/alloc_int.h"
#include "muster/common.h"
#include "tok/impl_int.h"

typedef struct {
	int32_t prev;
	size_t nout;
	unsigned nstrip;
} dstate_t;

/* The bytes id adds to the text, given what came before (st, updated). */
static void piece_of(const mu__tok_t *t, int32_t id, int keep_special, dstate_t *st,
                     const char **p, size_t *len)
{
	*p = "";
	*len = 0;
	if (id >= 0 && id < t->n && (t->attr[id] & MU__TOK_A_PRESENT) &&
	    (keep_special || !(t->attr[id] & MU__TOK_A_SPECIAL))) {
		*p = t->arena.data + t->out[id].off;
		*len = t->out[id].len;
		if (t->strip == MU__TOK_STRIP_START) {
			while (st->nout == 0 && st->nstrip < t->strip_n && *len > 0 && **p == ' ') {
				(*p)++;
				(*len)--;
				st->nstrip++;
			}
		} else if (t->strip == MU__TOK_STRIP_AFTER_BOS && st->prev >= 0 &&
		           st->prev == t->bos && *len > 0 && **p == ' ') {
			(*p)++;
			(*len)--;
		}
	}
	st->nout += *len;
	st->prev = id;
}

int mu__tok_decode(const mu__tok_t *t, const int32_t *ids, size_t n, int keep_special,
                   char **text, size_t *len)
{
	dstate_t st = {-1, 0, 0};
	mu__buf_t b;
	int rc = 0;

	*text = NULL;
	*len = 0;
	mu__buf_init(&b, SIZE_MAX / 4);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const char *p;
		size_t l;

		piece_of(t, ids[i], keep_special, &st, &p, &l);
		rc = mu__buf_append(&b, p, l);
	}
	if (rc == 0)
		rc = mu__buf_reserve(&b, 1); /* a buffer even for no text */
	if (rc != 0) {
		mu__buf_free(&b);
		return rc;
	}
	*text = mu__buf_take(&b, len);
	return 0;
}

/* Bytes at the end of b[0..n) that start a UTF-8 character the next bytes
 * may complete (0 when there are none). */
static size_t incomplete_tail(const unsigned char *b, size_t n)
{
	for (size_t k = 1; k <= 3 && k <= n; k++) {
		unsigned c = b[n - k];
		size_t need;

		if ((c & 0xC0) == 0x80)
			continue;
		if (c >= 0xC2 && c <= 0xDF)
			need = 2;
		else if (c >= 0xE0 && c <= 0xEF)
			need = 3;
		else if (c >= 0xF0 && c <= 0xF4)
			need = 4;
		else
			return 0;
		if (k >= need)
			return 0;
		/* the second byte's narrower ranges (no overlongs, surrogates) */
		if (k >= 2) {
			unsigned d = b[n - k + 1];

			if ((c == 0xE0 && d < 0xA0) || (c == 0xED && d > 0x9F) ||
			    (c == 0xF0 && d < 0x90) || (c == 0xF4 && d > 0x8F))
				return 0;
		}
		return k;
	}
	return 0;
}

void mu__tok_stream_init(mu__tok_stream_t *s, const mu__tok_t *t)
{
	memset(s, 0, sizeof(*s));
	s->t = t;
	s->prev = -1;
}

int mu__tok_stream_feed(mu__tok_stream_t *s, int32_t id, char *out, size_t cap,
                        size_t *outn)
{
	dstate_t st = {s->prev, s->nout, s->nstrip};
	const char *p;
	size_t len, total, hold;

	*outn = 0;
	piece_of(s->t, id, s->keep_special, &st, &p, &len);
	total = s->npend + len;
	if (total > cap)
		return MU_ETOOBIG;
	if (total == 0)
		goto done;
	memcpy(out, s->pend, s->npend);
	memcpy(out + s->npend, p, len);
	hold = incomplete_tail((const unsigned char *)out, total);
	memcpy(s->pend, out + total - hold, hold);
	s->npend = hold;
	*outn = total - hold;
done:
	s->prev = st.prev;
	s->nout = st.nout;
	s->nstrip = st.nstrip;
	s->nfed++;
	return 0;
}

int mu__tok_stream_flush(mu__tok_stream_t *s, char *out, size_t cap, size_t *outn)
{
	*outn = 0;
	if (s->npend > cap)
		return MU_ETOOBIG;
	if (s->npend > 0)
		memcpy(out, s->pend, s->npend);
	*outn = s->npend;
	s->npend = 0;
	return 0;
}

size_t mu__tok_stream_cap(const mu__tok_t *t)
{
	return t->max_out + sizeof(((mu__tok_stream_t *)0)->pend);
}
