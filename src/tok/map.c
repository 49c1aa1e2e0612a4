/* SPDX-License-Identifier: MIT */
/*
 * The two lookup tables of a tokenizer: piece bytes -> id, and a pair of
 * ids -> (merge rank, merged id). Both are open addressing with linear
 * probing, built once and then only read, so any number of threads may
 * look up at once. Keys come from a tokenizer file, not from a peer on the
 * network, so a fast non-keyed hash is enough (a hostile file can only make
 * its own load slow).
 */
#include <string.h>

#include "core/alloc_int.h"
#include "muster/common.h"
#include "tok/impl_int.h"

static uint64_t mix(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

static uint64_t hash_bytes(const unsigned char *p, size_t len)
{
	uint64_t h = 0x9e3779b97f4a7c15ULL ^ len, v;

	while (len >= 8) {
		memcpy(&v, p, 8);
		h = (h ^ mix(v)) * 0x100000001b3ULL;
		p += 8;
		len -= 8;
	}
	v = 0;
	memcpy(&v, p, len);
	return mix(h ^ v);
}

uint64_t mu__tok_hash(const void *p, size_t len)
{
	return hash_bytes(p, len);
}

static size_t pow2_at_least(size_t n)
{
	size_t s = 16;

	while (s < n)
		s <<= 1;
	return s;
}

int mu__tok_map_build(mu__tok_map_t *m, const mu__tok_t *t)
{
	size_t cnt = 0, slots;

	for (int32_t i = 0; i < t->n; i++)
		if ((t->attr[i] & (MU__TOK_A_PRESENT | MU__TOK_A_NOKEY)) == MU__TOK_A_PRESENT)
			cnt++;
	slots = pow2_at_least(cnt * 2 + 1);
	m->slot = mu__malloc(slots * sizeof(*m->slot));
	if (m->slot == NULL)
		return MU_ENOMEM;
	memset(m->slot, 0xff, slots * sizeof(*m->slot));
	m->mask = slots - 1;
	for (int32_t i = 0; i < t->n; i++) {
		const mu__tok_span_t *k = &t->key[i];
		uint64_t h;
		size_t s;

		if ((t->attr[i] & (MU__TOK_A_PRESENT | MU__TOK_A_NOKEY)) != MU__TOK_A_PRESENT)
			continue;
		h = hash_bytes((const unsigned char *)t->arena.data + k->off, k->len);
		for (s = h & m->mask;; s = (s + 1) & m->mask) {
			uint64_t o = m->slot[s];
			const mu__tok_span_t *ok;

			if (o == UINT64_MAX) {
				m->slot[s] = (h >> 32) << 32 | (uint32_t)i;
				break;
			}
			ok = &t->key[(uint32_t)o];
			/* the same key twice: the first id keeps it */
			if (o >> 32 == h >> 32 && ok->len == k->len &&
			    memcmp(t->arena.data + ok->off, t->arena.data + k->off, k->len) == 0)
				break;
		}
	}
	return 0;
}

int32_t mu__tok_map_get(const mu__tok_map_t *m, const mu__tok_t *t, const void *key,
                        size_t len)
{
	uint64_t h;

	if (m->slot == NULL)
		return -1;
	h = hash_bytes(key, len);
	for (size_t s = h & m->mask;; s = (s + 1) & m->mask) {
		uint64_t o = m->slot[s];
		const mu__tok_span_t *ok;

		if (o == UINT64_MAX)
			return -1;
		if (o >> 32 != h >> 32)
			continue;
		ok = &t->key[(uint32_t)o];
		if (ok->len == len && memcmp(t->arena.data + ok->off, key, len) == 0)
			return (int32_t)(uint32_t)o;
	}
}

void mu__tok_map_free(mu__tok_map_t *m)
{
	mu__free(m->slot);
	m->slot = NULL;
	m->mask = 0;
}

static int pairs_grow(mu__tok_pairs_t *p)
{
	size_t slots = p->mask == 0 ? 1024 : (p->mask + 1) * 2, old = p->mask + 1;
	mu__tok_pair_t *n = mu__malloc(slots * sizeof(*n));

	if (n == NULL)
		return MU_ENOMEM;
	memset(n, 0xff, slots * sizeof(*n));
	for (size_t i = 0; p->slot != NULL && i < old; i++) {
		size_t h;

		if (p->slot[i].key == UINT64_MAX)
			continue;
		for (h = mix(p->slot[i].key) & (slots - 1); n[h].key != UINT64_MAX;
		     h = (h + 1) & (slots - 1))
			;
		n[h] = p->slot[i];
	}
	mu__free(p->slot);
	p->slot = n;
	p->mask = slots - 1;
	return 0;
}

int mu__tok_pairs_put(mu__tok_pairs_t *p, int32_t a, int32_t b, uint32_t rank, int32_t merged)
{
	uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	size_t h;
	int rc;

	if ((p->count + 1) * 2 > p->mask + 1 && (rc = pairs_grow(p)) != 0)
		return rc;
	for (h = mix(key) & p->mask; p->slot[h].key != UINT64_MAX && p->slot[h].key != key;
	     h = (h + 1) & p->mask)
		;
	if (p->slot[h].key == UINT64_MAX)
		p->count++;
	p->slot[h].key = key;
	p->slot[h].val = (uint64_t)rank << 32 | (uint32_t)merged;
	return 0;
}

int mu__tok_pairs_get(const mu__tok_pairs_t *p, int32_t a, int32_t b, uint32_t *rank,
                      int32_t *merged)
{
	uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;

	if (p->slot == NULL)
		return -1;
	for (size_t h = mix(key) & p->mask; p->slot[h].key != UINT64_MAX; h = (h + 1) & p->mask)
		if (p->slot[h].key == key) {
			*rank = (uint32_t)(p->slot[h].val >> 32);
			*merged = (int32_t)(uint32_t)p->slot[h].val;
			return 0;
		}
	return -1;
}

void mu__tok_pairs_free(mu__tok_pairs_t *p)
{
	mu__free(p->slot);
	memset(p, 0, sizeof(*p));
}
