/* SPDX-License-Identifier: MIT */
/*
 * BPE on one pre-token: split it into first symbols (bytes for a byte-level
 * vocabulary, UTF-8 characters otherwise, with <0xNN> byte fallback or the
 * unknown token for what the vocabulary lacks), then merge adjacent pairs
 * best first until no pair merges:
 *   - MU__TOK_RANK (HF BPE, GGUF "gpt2"): the pair of ids with the lowest
 *     merge rank, the leftmost on ties (HF's order);
 *   - MU__TOK_SCORE (GGUF "llama", llama2.c): the pair whose concatenated
 *     text is a piece with the highest score, the leftmost on ties (run.c's
 *     and llama.cpp's order); byte-fallback symbols never merge (run.c).
 * A heap keeps the candidates, so a pre-token of n bytes costs O(n log n)
 * (a SentencePiece-style text is one pre-token, whole).
 */
#include <string.h>

#include "core/alloc_int.h"
#include "muster/common.h"
#include "tok/impl_int.h"

typedef struct {
	int32_t id;
	int32_t prev, next; /* -1 at the ends */
	uint32_t start, len; /* len 0: merged into its left neighbour */
	uint8_t raw;         /* byte fallback or unknown: not merged by text */
} sym_t;

typedef struct {
	double pri; /* lower first: the rank, or minus the score */
	uint32_t pos; /* the left symbol */
	uint32_t llen, rlen;
	int32_t lid, rid, merged;
} cand_t;

static int grow(void **v, size_t *cap, size_t need, size_t size)
{
	size_t nc = *cap ? *cap : 64;
	void *p;

	if (need <= *cap)
		return 0;
	while (nc < need)
		nc *= 2;
	p = mu__realloc(*v, nc * size);
	if (p == NULL)
		return MU_ENOMEM;
	*v = p;
	*cap = nc;
	return 0;
}

static int better(const cand_t *a, const cand_t *b)
{
	return a->pri < b->pri || (a->pri == b->pri && a->pos < b->pos);
}

static void heap_push(cand_t *h, size_t *n, const cand_t *c)
{
	size_t i = (*n)++;

	while (i > 0 && better(c, &h[(i - 1) / 2])) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = *c;
}

static cand_t heap_pop(cand_t *h, size_t *n)
{
	cand_t top = h[0], last = h[--(*n)];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= *n)
			break;
		if (c + 1 < *n && better(&h[c + 1], &h[c]))
			c++;
		if (!better(&h[c], &last))
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n > 0)
		h[i] = last;
	return top;
}

/* The candidate for merging symbol l with its right neighbour: 1 when the
 * pair merges. */
static int candidate(const mu__tok_t *t, const sym_t *s, const char *p, int32_t l, cand_t *c)
{
	int32_t r = s[l].next;
	uint32_t rank;

	if (r < 0)
		return 0;
	c->pos = (uint32_t)l;
	c->llen = s[l].len;
	c->rlen = s[r].len;
	c->lid = s[l].id;
	c->rid = s[r].id;
	if (t->algo == MU__TOK_RANK) {
		if (mu__tok_pairs_get(&t->merges, s[l].id, s[r].id, &rank, &c->merged) != 0)
			return 0;
		c->pri = rank;
		return 1;
	}
	if (s[l].raw || s[r].raw)
		return 0;
	c->merged = mu__tok_lookup(t, p + s[l].start, s[l].len + s[r].len);
	if (c->merged < 0)
		return 0;
	c->pri = -(double)t->score[c->merged];
	return 1;
}

/* Append a first symbol; consecutive unknowns fuse when fuse_unk. */
static void add_sym(const mu__tok_t *t, sym_t *s, size_t *n, int32_t id, size_t start,
                    size_t len, int raw)
{
	if (id == t->unk && raw && t->fuse_unk && *n > 0 && s[*n - 1].id == t->unk &&
	    s[*n - 1].raw) {
		s[*n - 1].len += (uint32_t)len;
		return;
	}
	s[*n].id = id;
	s[*n].start = (uint32_t)start;
	s[*n].len = (uint32_t)len;
	s[*n].raw = (uint8_t)raw;
	s[*n].prev = (int32_t)*n - 1;
	s[*n].next = (int32_t)*n + 1;
	(*n)++;
}

/* Bytes at p[i..i+n) the vocabulary lacks: their <0xNN> pieces, else the
 * unknown token, else nothing (HF drops them when there is no unk). */
static void unknown(const mu__tok_t *t, sym_t *s, size_t *ns, size_t i, size_t n,
                    const char *p)
{
	int all = t->byte_fallback;

	for (size_t k = 0; all && k < n; k++)
		all = t->byte_id[(unsigned char)p[i + k]] >= 0;
	if (all) {
		for (size_t k = 0; k < n; k++)
			add_sym(t, s, ns, t->byte_id[(unsigned char)p[i + k]], i + k, 1, 1);
	} else if (t->unk >= 0) {
		add_sym(t, s, ns, t->unk, i, n, 1);
	}
}

static size_t symbolize(const mu__tok_t *t, sym_t *s, const char *p, size_t len)
{
	size_t ns = 0;

	for (size_t i = 0; i < len;) {
		uint32_t cp;
		size_t n;
		int32_t id;

		if (t->byte_level) {
			id = t->byte_id[(unsigned char)p[i]];
			if (id >= 0)
				add_sym(t, s, &ns, id, i, 1, 0);
			else if (t->unk >= 0)
				add_sym(t, s, &ns, t->unk, i, 1, 1);
			i++;
			continue;
		}
		n = mu__tok_utf8((const unsigned char *)p + i, len - i, &cp);
		if (n == 0)
			n = 1; /* an invalid byte stands alone */
		id = mu__tok_lookup(t, p + i, n);
		if (id >= 0)
			add_sym(t, s, &ns, id, i, n, 0);
		else
			unknown(t, s, &ns, i, n, p);
		i += n;
	}
	if (ns > 0)
		s[ns - 1].next = -1;
	return ns;
}

static int bpe_word(const mu__tok_t *t, mu__tok_work_t *w, const char *p, size_t len)
{
	sym_t *s;
	cand_t *h, c;
	size_t ns, nh = 0;
	int32_t id;
	int rc;

	if (len == 0)
		return 0;
	if (len > UINT32_MAX / 2)
		return MU_ENOMEM; /* symbol offsets are 32-bit */
	if (t->ignore_merges && (id = mu__tok_lookup(t, p, len)) >= 0)
		return mu__tok_push_id(&w->ids, &w->nids, &w->capids, id);
	if ((rc = grow(&w->sym, &w->capsym, len, sizeof(sym_t))) != 0 ||
	    (rc = grow(&w->heap, &w->capheap, 2 * len, sizeof(cand_t))) != 0)
		return rc;
	s = w->sym;
	h = w->heap;
	ns = symbolize(t, s, p, len);
	for (size_t i = 0; i + 1 < ns; i++)
		if (candidate(t, s, p, (int32_t)i, &c))
			heap_push(h, &nh, &c);
	while (nh > 0) {
		int32_t l, r;

		c = heap_pop(h, &nh);
		l = (int32_t)c.pos;
		r = s[l].next;
		/* stale: either side changed since the candidate was made */
		if (s[l].len != c.llen || s[l].id != c.lid || r < 0 || s[r].len != c.rlen ||
		    s[r].id != c.rid)
			continue;
		s[l].id = c.merged;
		s[l].len += s[r].len;
		s[l].raw = 0;
		s[l].next = s[r].next;
		if (s[r].next >= 0)
			s[s[r].next].prev = l;
		s[r].len = 0;
		s[r].id = -1;
		/* each merge pops one candidate and pushes at most two, and there
		 * are fewer merges than symbols: the heap stays under 2 len */
		if (s[l].prev >= 0 && candidate(t, s, p, s[l].prev, &c))
			heap_push(h, &nh, &c);
		if (candidate(t, s, p, l, &c))
			heap_push(h, &nh, &c);
	}
	for (int32_t i = ns > 0 ? 0 : -1; i >= 0; i = s[i].next)
		if ((rc = mu__tok_push_id(&w->ids, &w->nids, &w->capids, s[i].id)) != 0)
			return rc;
	return 0;
}

/* ---- the word cache of one encode call ---- */

#define CACHE_WORD 48        /* longer words are not kept */
#define CACHE_MAX (1u << 16) /* words kept, at most */

struct mu__tok_cached_s {
	uint64_t hash;
	uint32_t koff, klen; /* the word, in w->ckeys */
	uint32_t ioff, nids; /* its ids, in w->cids */
};

static struct mu__tok_cached_s *cache_find(const mu__tok_work_t *w, uint64_t h, const char *p,
                                           size_t len)
{
	for (size_t s = h & w->cmask;; s = (s + 1) & w->cmask) {
		struct mu__tok_cached_s *e = &w->cache[s];

		if (e->klen == 0 || (e->hash == h && e->klen == len &&
		                     memcmp(w->ckeys.data + e->koff, p, len) == 0))
			return e;
	}
}

/* Keep word p -> ids[from..nids) (quietly not, when memory is short). */
static void cache_put(mu__tok_work_t *w, uint64_t h, const char *p, size_t len, size_t from)
{
	struct mu__tok_cached_s *e;
	size_t n = w->nids - from;

	if (w->ccount >= CACHE_MAX)
		return;
	if ((w->ccount + 1) * 2 > w->cmask + 1) { /* grow: rehash every word */
		size_t slots = w->cache == NULL ? 512 : (w->cmask + 1) * 2;
		struct mu__tok_cached_s *old = w->cache;
		size_t oldn = w->cache == NULL ? 0 : w->cmask + 1;

		w->cache = mu__calloc(slots, sizeof(*w->cache));
		if (w->cache == NULL) {
			w->cache = old;
			return;
		}
		w->cmask = slots - 1;
		for (size_t i = 0; i < oldn; i++)
			if (old[i].klen > 0)
				*cache_find(w, old[i].hash, "", 0) = old[i];
		mu__free(old);
	}
	if (mu__buf_append(&w->ckeys, p, len) != 0)
		return;
	for (size_t i = 0; i < n; i++)
		if (mu__tok_push_id(&w->cids, &w->ncids, &w->capcids, w->ids[from + i]) != 0) {
			w->ncids -= i;
			w->ckeys.len -= len;
			return;
		}
	e = cache_find(w, h, p, len);
	e->hash = h;
	e->koff = (uint32_t)(w->ckeys.len - len);
	e->klen = (uint32_t)len;
	e->ioff = (uint32_t)(w->ncids - n);
	e->nids = (uint32_t)n;
	w->ccount++;
}

int mu__tok_bpe(const mu__tok_t *t, mu__tok_work_t *w, const char *p, size_t len)
{
	size_t from = w->nids;
	uint64_t h = 0;
	int rc;

	if (len > CACHE_WORD || len == 0)
		return bpe_word(t, w, p, len);
	h = mu__tok_hash(p, len);
	if (w->cache != NULL) {
		const struct mu__tok_cached_s *e = cache_find(w, h, p, len);

		for (uint32_t i = 0; e->klen > 0 && i < e->nids; i++)
			if ((rc = mu__tok_push_id(&w->ids, &w->nids, &w->capids, w->cids[e->ioff + i])) != 0)
				return rc;
		if (e->klen > 0)
			return 0;
	}
	if ((rc = bpe_word(t, w, p, len)) == 0)
		cache_put(w, h, p, len, from);
	return rc;
}

void mu__tok_bpe_free(mu__tok_work_t *w)
{
	mu__free(w->sym);
	mu__free(w->heap);
	mu__free(w->cache);
	mu__free(w->cids);
	mu__buf_free(&w->ckeys);
	w->sym = w->heap = NULL;
	w->cache = NULL;
	w->cids = NULL;
	w->capsym = w->capheap = w->cmask = w->ccount = w->ncids = w->capcids = 0;
}
