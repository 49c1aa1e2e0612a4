/* SPDX-License-Identifier: MIT */
/*
 * String-keyed hash map with chaining and SipHash-1-3; see strmap_int.h.
 */
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/rand_int.h"
#include "core/strmap_int.h"

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                               \
	do {                                                                   \
		v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);      \
		v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                         \
		v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                         \
		v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);      \
	} while (0)

static uint64_t load64(const unsigned char *p)
{
	uint64_t v = 0;
	int i;

	for (i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t siphash13(uint64_t k0, uint64_t k1, const void *data,
                          size_t len)
{
	const unsigned char *p = data;
	uint64_t v0 = 0x736f6d6570736575ULL ^ k0;
	uint64_t v1 = 0x646f72616e646f6dULL ^ k1;
	uint64_t v2 = 0x6c7967656e657261ULL ^ k0;
	uint64_t v3 = 0x7465646279746573ULL ^ k1;
	uint64_t b = (uint64_t)len << 56, m;
	size_t i, tail = len & 7;

	for (i = 0; i + 8 <= len; i += 8) {
		m = load64(p + i);
		v3 ^= m;
		SIPROUND;
		v0 ^= m;
	}
	for (size_t j = 0; j < tail; j++)
		b |= (uint64_t)p[i + j] << (8 * j);
	v3 ^= b;
	SIPROUND;
	v0 ^= b;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

void mu__strmap_init(mu__strmap_t *m)
{
	uint64_t k[2] = {0x0123456789abcdefULL, 0xfedcba9876543210ULL};

	/* Without kernel randomness the map still works, only predictably. */
	(void)mu__random_bytes(k, sizeof(k));
	m->slots = NULL;
	m->nslots = 0;
	m->count = 0;
	m->k0 = k[0];
	m->k1 = k[1];
}

void mu__strmap_free(mu__strmap_t *m, void (*free_value)(void *))
{
	size_t i;

	for (i = 0; i < m->nslots; i++) {
		mu__strmap_entry_t *e = m->slots[i], *next;

		for (; e != NULL; e = next) {
			next = e->next;
			if (free_value != NULL)
				free_value(e->value);
			mu__free(e);
		}
	}
	mu__free(m->slots);
	m->slots = NULL;
	m->nslots = 0;
	m->count = 0;
}

mu__strmap_entry_t *mu__strmap_find(const mu__strmap_t *m, const void *key,
                                    size_t klen)
{
	mu__strmap_entry_t *e;
	uint64_t h;

	if (m->nslots == 0)
		return NULL;
	h = siphash13(m->k0, m->k1, key, klen);
	for (e = m->slots[h & (m->nslots - 1)]; e != NULL; e = e->next)
		if (e->hash == h && e->klen == klen &&
		    memcmp(e->key, key, klen) == 0)
			return e;
	return NULL;
}

void *mu__strmap_get(const mu__strmap_t *m, const void *key, size_t klen)
{
	mu__strmap_entry_t *e = mu__strmap_find(m, key, klen);

	return e != NULL ? e->value : NULL;
}

static int grow(mu__strmap_t *m)
{
	size_t n = m->nslots ? m->nslots * 2 : 16, i;
	mu__strmap_entry_t **slots = mu__calloc(n, sizeof(*slots));

	if (slots == NULL)
		return MU_ENOMEM;
	for (i = 0; i < m->nslots; i++) {
		mu__strmap_entry_t *e = m->slots[i], *next;

		for (; e != NULL; e = next) {
			next = e->next;
			e->next = slots[e->hash & (n - 1)];
			slots[e->hash & (n - 1)] = e;
		}
	}
	mu__free(m->slots);
	m->slots = slots;
	m->nslots = n;
	return 0;
}

int mu__strmap_put(mu__strmap_t *m, const void *key, size_t klen, void *value,
                   void **old)
{
	mu__strmap_entry_t *e = mu__strmap_find(m, key, klen);
	size_t slot;

	if (old != NULL)
		*old = NULL;
	if (e != NULL) {
		if (old != NULL)
			*old = e->value;
		e->value = value;
		return 0;
	}
	if (m->count >= m->nslots && grow(m) != 0)
		return MU_ENOMEM;
	e = mu__malloc(sizeof(*e) + klen + 1);
	if (e == NULL)
		return MU_ENOMEM;
	e->hash = siphash13(m->k0, m->k1, key, klen);
	e->klen = klen;
	e->value = value;
	memcpy(e->key, key, klen);
	e->key[klen] = '\0';
	slot = e->hash & (m->nslots - 1);
	e->next = m->slots[slot];
	m->slots[slot] = e;
	m->count++;
	return 0;
}

void *mu__strmap_remove(mu__strmap_t *m, const void *key, size_t klen)
{
	mu__strmap_entry_t **pp, *e;
	uint64_t h;
	void *v;

	if (m->nslots == 0)
		return NULL;
	h = siphash13(m->k0, m->k1, key, klen);
	for (pp = &m->slots[h & (m->nslots - 1)]; (e = *pp) != NULL;
	     pp = &e->next) {
		if (e->hash == h && e->klen == klen &&
		    memcmp(e->key, key, klen) == 0) {
			*pp = e->next;
			v = e->value;
			mu__free(e);
			m->count--;
			return v;
		}
	}
	return NULL;
}

mu__strmap_entry_t *mu__strmap_next(const mu__strmap_t *m, size_t *slot,
                                    mu__strmap_entry_t *it)
{
	if (it != NULL && it->next != NULL)
		return it->next;
	if (it != NULL)
		(*slot)++;
	for (; *slot < m->nslots; (*slot)++)
		if (m->slots[*slot] != NULL)
			return m->slots[*slot];
	return NULL;
}

int mu__strmap_keys(const mu__strmap_t *m, char ***keys, size_t *n)
{
	mu__strmap_entry_t *e = NULL;
	size_t slot = 0, i = 0;
	char **v = mu__calloc(m->count + 1, sizeof(*v));

	if (v == NULL)
		return MU_ENOMEM;
	while ((e = mu__strmap_next(m, &slot, e)) != NULL) {
		if ((v[i] = mu__strdup(e->key)) == NULL) {
			mu__strv_free(v);
			return MU_ENOMEM;
		}
		i++;
	}
	*keys = v;
	*n = i;
	return 0;
}
