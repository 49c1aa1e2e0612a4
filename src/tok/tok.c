/* SPDX-License-Identifier: MIT */
/*
 * A tokenizer's life: the helpers every builder (tok/hf.c, tok/vocab.c)
 * calls to fill one in, the encode driver (added tokens, then normalizers,
 * pre-tokenizers and BPE per section, then the template), and the
 * accessors. The text steps are tok/text.c, BPE is tok/bpe.c, decoding is
 * tok/dec.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc_int.h"
#include "core/error_int.h"
#include "muster/common.h"
#include "tok/impl_int.h"

int mu__tok_push_id(int32_t **v, size_t *n, size_t *cap, int32_t id)
{
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 256;
		int32_t *p = mu__realloc(*v, nc * sizeof(*p));

		if (p == NULL)
			return MU_ENOMEM;
		*v = p;
		*cap = nc;
	}
	(*v)[(*n)++] = id;
	return 0;
}

int mu__tok_new(int32_t n, int algo, int byte_level, mu__tok_t **out)
{
	mu__tok_t *t;
	char why[64];
	int rc = 0;

	*out = NULL;
	if (n <= 0 || n > MU__TOK_MAX_VOCAB)
		return MU_ETOOBIG;
	t = mu__calloc(1, sizeof(*t));
	if (t == NULL)
		return MU_ENOMEM;
	t->n = n;
	t->algo = algo;
	t->byte_level = byte_level;
	t->unk = t->bos = -1;
	memset(t->byte_id, 0xff, sizeof(t->byte_id));
	mu__buf_init(&t->arena, MU__TOK_MAX_ARENA);
	t->piece = mu__calloc((size_t)n, sizeof(*t->piece));
	t->key = mu__calloc((size_t)n, sizeof(*t->key));
	t->out = mu__calloc((size_t)n, sizeof(*t->out));
	t->attr = mu__calloc((size_t)n, 1);
	if (algo == MU__TOK_SCORE)
		t->score = mu__calloc((size_t)n, sizeof(*t->score));
	if (t->piece == NULL || t->key == NULL || t->out == NULL || t->attr == NULL ||
	    (algo == MU__TOK_SCORE && t->score == NULL))
		rc = MU_ENOMEM;
	if (rc == 0)
		rc = mu__tok_regex("\\p{White_Space}", 15, 0, &t->ws, why, sizeof(why));
	if (rc != 0) {
		mu__tok_free(t);
		return rc == MU_EPROTO ? MU_ENOMEM : rc;
	}
	*out = t;
	return 0;
}

void mu__tok_free(mu__tok_t *t)
{
	if (t == NULL)
		return;
	for (size_t i = 0; i < t->nnorm; i++) {
		pcre2_code_free(t->norm[i].re);
		mu__free(t->norm[i].s);
	}
	for (size_t i = 0; i < t->npre; i++)
		pcre2_code_free(t->pre[i].re);
	pcre2_code_free(t->ws);
	mu__tok_map_free(&t->keys);
	mu__tok_pairs_free(&t->merges);
	mu__buf_free(&t->arena);
	mu__free(t->piece);
	mu__free(t->key);
	mu__free(t->out);
	mu__free(t->attr);
	mu__free(t->score);
	mu__free(t->added);
	mu__free(t->raw_m.idx);
	mu__free(t->norm_m.idx);
	mu__free(t->prefix);
	mu__free(t->suffix);
	mu__free(t->eos);
	mu__free(t->chat_template);
	mu__free(t);
}

int mu__tok_store(mu__tok_t *t, const void *p, size_t len, mu__tok_span_t *span)
{
	size_t off = t->arena.len;
	int rc;

	if (len > MU__TOK_MAX_PIECE)
		return MU_ETOOBIG;
	/* a NUL after each, so pieces can be handed out as C strings */
	if ((rc = mu__buf_reserve(&t->arena, len + 1)) != 0)
		return rc;
	if ((rc = mu__buf_append(&t->arena, p, len)) != 0 ||
	    (rc = mu__buf_appendc(&t->arena, '\0')) != 0)
		return rc;
	span->off = (uint32_t)off;
	span->len = (uint32_t)len;
	return 0;
}

/* The bytes GPT-2's alphabet text p stands for, appended to out; -1 (and
 * out as it was) when a character is outside the alphabet. */
static int alphabet_bytes(const char *p, size_t len, mu__buf_t *out)
{
	size_t start = out->len;

	for (size_t i = 0; i < len;) {
		uint32_t cp;
		size_t n = mu__tok_utf8((const unsigned char *)p + i, len - i, &cp);
		int b = n > 0 ? mu__tok_cp_byte(cp) : -1;

		if (b < 0 || mu__buf_appendc(out, (char)b) != 0) {
			out->len = start;
			return -1;
		}
		i += n;
	}
	return 0;
}

int mu__tok_set_piece(mu__tok_t *t, int32_t id, const char *p, size_t len)
{
	size_t off;
	int rc;

	if ((rc = mu__tok_store(t, p, len, &t->piece[id])) != 0)
		return rc;
	t->attr[id] |= MU__TOK_A_PRESENT;
	t->key[id] = t->piece[id];
	if (!t->byte_level)
		return 0;
	/* the piece is in the arena: reserve before reading it back */
	if ((rc = mu__buf_reserve(&t->arena, len + 1)) != 0)
		return rc;
	off = t->arena.len;
	if (alphabet_bytes(t->arena.data + t->piece[id].off, len, &t->arena) != 0) {
		t->attr[id] |= MU__TOK_A_NOKEY;
		return 0;
	}
	t->key[id].off = (uint32_t)off;
	t->key[id].len = (uint32_t)(t->arena.len - off);
	return mu__buf_appendc(&t->arena, '\0');
}

int mu__tok_index(mu__tok_t *t)
{
	mu__tok_map_free(&t->keys);
	return mu__tok_map_build(&t->keys, t);
}

int32_t mu__tok_lookup(const mu__tok_t *t, const void *key, size_t len)
{
	return mu__tok_map_get(&t->keys, t, key, len);
}

/* The id of a merge part as stored (in the alphabet when byte-level). */
static int32_t part_id(const mu__tok_t *t, const char *p, size_t len, mu__buf_t *tmp)
{
	if (!t->byte_level)
		return mu__tok_lookup(t, p, len);
	mu__buf_reset(tmp);
	if (alphabet_bytes(p, len, tmp) != 0)
		return -1;
	return mu__tok_lookup(t, tmp->data != NULL ? tmp->data : "", tmp->len);
}

int mu__tok_add_merge(mu__tok_t *t, const char *a, size_t alen, const char *b, size_t blen,
                      uint32_t rank, char *why, size_t wl)
{
	mu__buf_t tmp;
	int32_t la, lb, m;
	int rc = 0;

	mu__buf_init(&tmp, 2 * (size_t)MU__TOK_MAX_PIECE + 2);
	la = part_id(t, a, alen, &tmp);
	lb = part_id(t, b, blen, &tmp);
	if (la < 0 || lb < 0) {
		rc = mu__why(why, wl, MU_EPROTO, "\"%.*s\" is not in the vocabulary",
		             (int)(la < 0 ? alen : blen), la < 0 ? a : b);
		goto out;
	}
	mu__buf_reset(&tmp);
	if ((rc = mu__buf_append(&tmp, t->arena.data + t->key[la].off, t->key[la].len)) != 0 ||
	    (rc = mu__buf_append(&tmp, t->arena.data + t->key[lb].off, t->key[lb].len)) != 0)
		goto out;
	m = mu__tok_lookup(t, tmp.data, tmp.len);
	if (m < 0)
		rc = mu__why(why, wl, MU_EPROTO, "\"%.*s%.*s\" is not in the vocabulary",
		             (int)alen, a, (int)blen, b);
	else
		rc = mu__tok_pairs_put(&t->merges, la, lb, rank, m);
out:
	mu__buf_free(&tmp);
	return rc;
}

int mu__tok_add_added(mu__tok_t *t, int32_t id, const char *s, size_t len, int special,
                      int lstrip, int rstrip, int normalized)
{
	mu__tok_added_t *a;
	int rc;

	if (len == 0 || id < 0 || id >= t->n)
		return MU_EARG;
	if (t->nadded == t->capadded) {
		size_t nc = t->capadded ? t->capadded * 2 : 16;
		void *p = mu__realloc(t->added, nc * sizeof(*t->added));

		if (p == NULL)
			return MU_ENOMEM;
		t->added = p;
		t->capadded = nc;
	}
	a = &t->added[t->nadded];
	memset(a, 0, sizeof(*a));
	if ((rc = mu__tok_store(t, s, len, &a->text)) != 0)
		return rc;
	a->id = id;
	a->special = (uint8_t)(special != 0);
	a->lstrip = (uint8_t)(lstrip != 0);
	a->rstrip = (uint8_t)(rstrip != 0);
	a->normalized = (uint8_t)(normalized != 0);
	if (!(t->attr[id] & MU__TOK_A_PRESENT)) {
		t->piece[id] = t->key[id] = a->text;
		t->attr[id] |= MU__TOK_A_PRESENT | MU__TOK_A_NOKEY;
	}
	t->attr[id] |= MU__TOK_A_ADDED | (special ? MU__TOK_A_SPECIAL : 0);
	t->nadded++;
	return 0;
}

/* ---- finishing ---- */

/* "<0xNN>" (either case of hex digits, as HF's ByteFallback reads it). */
static int byte_piece(const char *p, size_t len, unsigned *b)
{
	char hex[3];
	char *end;

	if (len != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>')
		return 0;
	memcpy(hex, p + 3, 2);
	hex[2] = '\0';
	*b = (unsigned)strtoul(hex, &end, 16);
	return end == hex + 2 && hex[0] != '+' && hex[0] != '-' && hex[0] != ' ';
}

/* What decoding id gives, per the decoder chain (tmp: scratch). */
static int make_out(mu__tok_t *t, int32_t id, const mu__tok_dec_t *d, mu__buf_t *tmp)
{
	const char *p = t->arena.data + t->piece[id].off;
	size_t len = t->piece[id].len, a = 0, z;
	unsigned b;
	int rc = 0;

	mu__buf_reset(tmp);
	if (d->byte_level) { /* a piece outside the alphabet is its bytes (HF) */
		if (alphabet_bytes(p, len, tmp) != 0)
			rc = mu__buf_append(tmp, p, len);
	} else if (d->byte_fallback && byte_piece(p, len, &b)) {
		rc = mu__buf_appendc(tmp, (char)b);
		t->attr[id] |= MU__TOK_A_BYTE;
	} else {
		for (size_t i = 0; rc == 0 && i < len;) {
			if (d->fromlen > 0 && len - i >= d->fromlen &&
			    memcmp(p + i, d->from, d->fromlen) == 0) {
				rc = mu__buf_append(tmp, d->to, d->tolen);
				i += d->fromlen;
			} else {
				rc = mu__buf_appendc(tmp, p[i++]);
			}
		}
		z = tmp->len;
		while (a < (size_t)d->strip_start && a < z && tmp->data[a] == ' ')
			a++;
		while (z > a && tmp->len - z < (size_t)d->strip_stop && tmp->data[z - 1] == ' ')
			z--;
		if (rc == 0)
			return mu__tok_store(t, tmp->data != NULL ? tmp->data + a : "", z - a,
			                     &t->out[id]);
	}
	return rc != 0 ? rc : mu__tok_store(t, tmp->data != NULL ? tmp->data : "", tmp->len,
	                                    &t->out[id]);
}

typedef struct {
	unsigned first;
	uint32_t len, idx;
} mkey_t;

static int mkey_cmp(const void *x, const void *y)
{
	const mkey_t *a = x, *b = y;

	if (a->first != b->first)
		return a->first < b->first ? -1 : 1;
	if (a->len != b->len) /* longest first: the longest match wins */
		return a->len > b->len ? -1 : 1;
	return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static int build_matcher(mu__tok_t *t, mu__tok_matcher_t *m, int normalized)
{
	mkey_t *k = mu__calloc(t->nadded + 1, sizeof(*k));
	size_t n = 0;

	if (k == NULL)
		return MU_ENOMEM;
	for (size_t i = 0; i < t->nadded; i++) {
		const mu__tok_added_t *a = &t->added[i];

		if ((a->normalized && t->nnorm > 0) != normalized || a->text.len == 0)
			continue;
		k[n].first = (unsigned char)t->arena.data[a->text.off];
		k[n].len = a->text.len;
		k[n].idx = (uint32_t)i;
		n++;
	}
	qsort(k, n, sizeof(*k), mkey_cmp);
	m->idx = mu__calloc(n + 1, sizeof(*m->idx));
	if (m->idx == NULL) {
		mu__free(k);
		return MU_ENOMEM;
	}
	m->n = n;
	for (size_t i = 0, c = 0; c <= 256; c++) {
		m->first[c] = (uint32_t)i;
		while (i < n && k[i].first == c)
			m->idx[i] = k[i].idx, i++;
	}
	mu__free(k);
	return 0;
}

/* Added tokens marked normalized are matched in normalized text: store
 * their normalized form. */
static int normalize_added(mu__tok_t *t)
{
	mu__tok_work_t w;
	int rc;

	if (t->nnorm == 0)
		return 0;
	if ((rc = mu__tok_work_init(&w)) != 0)
		return rc;
	for (size_t i = 0; rc == 0 && i < t->nadded; i++) {
		mu__tok_added_t *a = &t->added[i];
		const char *s;
		size_t len;

		if (!a->normalized)
			continue;
		rc = mu__tok_normalize(t, &w, t->arena.data + a->text.off, a->text.len, &s, &len);
		if (rc == 0)
			rc = mu__tok_store(t, s, len, &a->text);
	}
	mu__tok_work_free(&w);
	return rc;
}

/* Does some piece have c after a character other than c? */
static int crosses(const mu__tok_t *t, const char *c, size_t clen, int *starts)
{
	*starts = 0;
	for (int32_t i = 0; i < t->n; i++) {
		const char *k = t->arena.data + t->key[i].off;
		size_t len = t->key[i].len;

		if ((t->attr[i] & (MU__TOK_A_PRESENT | MU__TOK_A_NOKEY)) != MU__TOK_A_PRESENT)
			continue;
		*starts |= len >= clen && memcmp(k, c, clen) == 0;
		for (size_t p = 1; p + clen <= len; p++)
			if (memcmp(k + p, c, clen) == 0 && (p < clen || memcmp(k + p - clen, c, clen) != 0))
				return 1;
	}
	return 0;
}

static void find_seg(mu__tok_t *t)
{
	static const char *const cands[] = {"\xe2\x96\x81", " "};
	int starts;

	if (t->byte_level)
		return;
	for (int i = 0; i < 2; i++)
		if (!crosses(t, cands[i], strlen(cands[i]), &starts) && starts) {
			t->seglen = strlen(cands[i]);
			memcpy(t->seg, cands[i], t->seglen);
			return;
		}
}

int mu__tok_finish(mu__tok_t *t, const mu__tok_dec_t *dec, char *why, size_t wl)
{
	mu__buf_t tmp;
	int rc = 0, any = 0;

	for (unsigned b = 0; b < 256; b++)
		any |= t->byte_id[b] >= 0;
	for (unsigned b = 0; !any && b < 256; b++) {
		char s[8];
		unsigned char c = (unsigned char)b;

		if (t->byte_level)
			t->byte_id[b] = mu__tok_lookup(t, &c, 1);
		else
			t->byte_id[b] = mu__tok_lookup(t, s, (size_t)snprintf(s, sizeof(s), "<0x%02X>", b));
	}
	mu__buf_init(&tmp, 8 * (size_t)MU__TOK_MAX_PIECE);
	for (int32_t i = 0; rc == 0 && i < t->n; i++)
		if (t->attr[i] & MU__TOK_A_PRESENT)
			rc = make_out(t, i, dec, &tmp);
	mu__buf_free(&tmp);
	/* an added token decodes as its content, whatever the vocabulary says */
	for (size_t i = 0; rc == 0 && i < t->nadded; i++)
		t->out[t->added[i].id] = t->added[i].text;
	if (rc == 0)
		rc = normalize_added(t);
	if (rc == 0)
		rc = build_matcher(t, &t->raw_m, 0);
	if (rc == 0)
		rc = build_matcher(t, &t->norm_m, 1);
	for (int32_t i = 0; i < t->n; i++)
		if (t->out[i].len > t->max_out)
			t->max_out = t->out[i].len;
	t->strip = dec->strip;
	t->strip_n = dec->strip_n;
	find_seg(t);
	if (rc == MU_ETOOBIG)
		return mu__why(why, wl, rc, "the vocabulary is larger than %u bytes",
		               (unsigned)MU__TOK_MAX_ARENA);
	return rc;
}

/* ---- encoding ---- */

/* The leftmost longest added token at or after from: 1, *ms and *hit. */
static int find_added(const mu__tok_t *t, const mu__tok_matcher_t *m, const char *p,
                      size_t len, size_t from, int special, size_t *ms,
                      const mu__tok_added_t **hit)
{
	if (m->n == 0)
		return 0;
	for (size_t i = from; i < len; i++) {
		unsigned c = (unsigned char)p[i];

		for (uint32_t k = m->first[c]; k < m->first[c + 1]; k++) {
			const mu__tok_added_t *a = &t->added[m->idx[k]];

			if ((a->special && !special) || a->text.len > len - i ||
			    memcmp(t->arena.data + a->text.off, p + i, a->text.len) != 0)
				continue;
			*ms = i;
			*hit = a;
			return 1;
		}
	}
	return 0;
}

static int split_added(const mu__tok_t *t, mu__tok_work_t *w, int level, const char *p,
                       size_t len, int origin, int flags);

/* BPE on a pre-token, cut where t->seg allows (see there). */
static int words(const mu__tok_t *t, mu__tok_work_t *w, const char *p, size_t len)
{
	size_t start = 0, k = t->seglen;
	int rc = 0;

	for (size_t i = 1; k > 0 && rc == 0 && i + k <= len; i++)
		if (memcmp(p + i, t->seg, k) == 0 && (i < k || memcmp(p + i - k, t->seg, k) != 0) &&
		    i > start) {
			rc = mu__tok_bpe(t, w, p + start, i - start);
			start = i;
		}
	return rc != 0 ? rc : mu__tok_bpe(t, w, p + start, len - start);
}

/* Text between added tokens: level 0 is raw (normalize it, then look for
 * normalized added tokens), level 1 is normalized (pre-tokenize, BPE). */
static int section(const mu__tok_t *t, mu__tok_work_t *w, int level, const char *p,
                   size_t len, int origin, int flags)
{
	int rc;

	if (level == 0) {
		if ((rc = mu__tok_normalize(t, w, p, len, &p, &len)) != 0)
			return rc;
		if (t->norm_m.n > 0)
			return split_added(t, w, 1, p, len, origin, flags);
	}
	if ((rc = mu__tok_pretokenize(t, w, p, len, origin)) != 0)
		return rc;
	for (size_t i = 0; rc == 0 && i < w->nsp; i++)
		rc = words(t, w, w->c.data + w->sp[i][0], w->sp[i][1]);
	return rc;
}

static int split_added(const mu__tok_t *t, mu__tok_work_t *w, int level, const char *p,
                       size_t len, int origin, int flags)
{
	const mu__tok_matcher_t *m = level == 0 ? &t->raw_m : &t->norm_m;
	size_t pos = 0;
	int rc = 0;

	while (rc == 0) {
		const mu__tok_added_t *a = NULL;
		size_t ms = len, end;
		int found = find_added(t, m, p, len, pos, (flags & MU__TOK_SPECIAL) != 0, &ms, &a);

		end = ms;
		if (found && a->lstrip) /* the token takes the spaces before it */
			end -= mu__tok_ws_run(t, w, p + pos, end - pos, 0);
		if (end > pos)
			rc = section(t, w, level, p + pos, end - pos, origin && pos == 0, flags);
		if (!found || rc != 0)
			break;
		rc = mu__tok_push_id(&w->ids, &w->nids, &w->capids, a->id);
		pos = ms + a->text.len;
		if (a->rstrip) /* and those after it */
			pos += mu__tok_ws_run(t, w, p + pos, len - pos, 1);
	}
	return rc;
}

int mu__tok_encode(const mu__tok_t *t, const char *text, size_t len, int flags,
                   int32_t **ids, size_t *n)
{
	mu__tok_work_t w;
	int rc;

	*ids = NULL;
	*n = 0;
	if ((rc = mu__tok_work_init(&w)) != 0)
		return rc;
	for (size_t i = 0; rc == 0 && (flags & MU__TOK_BOS) && i < t->nprefix; i++)
		rc = mu__tok_push_id(&w.ids, &w.nids, &w.capids, t->prefix[i]);
	if (rc == 0 && len > 0)
		rc = split_added(t, &w, 0, text, len, 1, flags);
	for (size_t i = 0; rc == 0 && (flags & MU__TOK_BOS) && i < t->nsuffix; i++)
		rc = mu__tok_push_id(&w.ids, &w.nids, &w.capids, t->suffix[i]);
	if (rc == 0 && w.ids == NULL) /* an empty result is still a buffer */
		w.ids = mu__malloc(sizeof(int32_t));
	if (rc == 0 && w.ids == NULL)
		rc = MU_ENOMEM;
	if (rc == 0) {
		*ids = w.ids;
		*n = w.nids;
		w.ids = NULL;
	}
	mu__tok_work_free(&w);
	return rc;
}

/* ---- accessors ---- */

int32_t mu__tok_vocab_size(const mu__tok_t *t)
{
	return t->n;
}

int32_t mu__tok_bos(const mu__tok_t *t)
{
	return t->bos;
}

const int32_t *mu__tok_eos(const mu__tok_t *t, size_t *n)
{
	*n = t->neos;
	return t->eos;
}

const char *mu__tok_piece(const mu__tok_t *t, int32_t id, size_t *len)
{
	if (id < 0 || id >= t->n || !(t->attr[id] & MU__TOK_A_PRESENT))
		return NULL;
	if (len != NULL)
		*len = t->piece[id].len;
	return t->arena.data + t->piece[id].off;
}

const char *mu__tok_chat_template(const mu__tok_t *t)
{
	return t->chat_template;
}

int mu__tok_add_eos(mu__tok_t *t, const int32_t *ids, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		size_t k = 0, cap = t->neos;
		int rc;

		if (ids[i] < 0 || ids[i] >= t->n)
			return MU_EARG;
		while (k < t->neos && t->eos[k] != ids[i])
			k++;
		if (k < t->neos)
			continue;
		if ((rc = mu__tok_push_id(&t->eos, &t->neos, &cap, ids[i])) != 0)
			return rc;
	}
	return 0;
}
