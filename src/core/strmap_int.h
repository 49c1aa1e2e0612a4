/* SPDX-License-Identifier: MIT */
/*
 * mu__strmap_t: a hash map from byte-string keys (any bytes, NUL included) to
 * void * values. Keys are copied in; values are the caller's. The hash is
 * SipHash-1-3 with a per-map random key, so peers who choose the keys (store
 * clients, tracker peers) cannot force every key into one chain.
 *
 * Invariants: count == number of entries; nslots is 0 or a power of two, and
 * count <= nslots (the table doubles before that would break).
 */
#ifndef MU_CORE_STRMAP_INT_H
#define MU_CORE_STRMAP_INT_H

#include <stddef.h>
#include <stdint.h>

typedef struct mu__strmap_entry_s {
	struct mu__strmap_entry_s *next;
	void *value;
	uint64_t hash;
	size_t klen;
	char key[]; /* klen bytes plus a NUL, so text keys are C strings */
} mu__strmap_entry_t;

typedef struct {
	mu__strmap_entry_t **slots;
	size_t nslots;
	size_t count;
	uint64_t k0, k1; /* SipHash key */
} mu__strmap_t;

void mu__strmap_init(mu__strmap_t *m);
/* Frees every entry; free_value (may be NULL) is called on each value. */
void mu__strmap_free(mu__strmap_t *m, void (*free_value)(void *));

mu__strmap_entry_t *mu__strmap_find(const mu__strmap_t *m, const void *key,
                                    size_t klen);
void *mu__strmap_get(const mu__strmap_t *m, const void *key, size_t klen);

/*
 * Insert, or replace the value of an existing key. *old (if not NULL) gets
 * the replaced value or NULL. 0 or MU_ENOMEM (map unchanged).
 */
int mu__strmap_put(mu__strmap_t *m, const void *key, size_t klen, void *value,
                   void **old);

/* Remove a key; returns its value, or NULL when it was absent. */
void *mu__strmap_remove(mu__strmap_t *m, const void *key, size_t klen);

/* Iteration: start with it = NULL and slot = 0; not safe against changes. */
mu__strmap_entry_t *mu__strmap_next(const mu__strmap_t *m, size_t *slot,
                                    mu__strmap_entry_t *it);

/*
 * Every key, copied, as a NULL-terminated array (free it with
 * mu__strv_free), keys being text; *n gets the count. 0 or MU_ENOMEM
 * (nothing returned: never a partial list).
 */
int mu__strmap_keys(const mu__strmap_t *m, char ***keys, size_t *n);

#endif
