/* SPDX-License-Identifier: MIT */
/*
 * Intrusive circular doubly-linked list (the libuv queue.h idea): the node
 * lives inside the element, so linking never allocates and unlinking is O(1).
 * An empty list is a head pointing at itself. A node that is not on any list
 * should be kept self-linked (mu__list_init / mu__list_remove do that), so
 * removing it twice is harmless.
 */
#ifndef MU_CORE_LIST_INT_H
#define MU_CORE_LIST_INT_H

#include <stddef.h>

typedef struct mu__list_s {
	struct mu__list_s *next;
	struct mu__list_s *prev;
} mu__list_t;

#define mu__container_of(ptr, type, member)                                    \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

static inline void mu__list_init(mu__list_t *h)
{
	h->next = h;
	h->prev = h;
}

static inline int mu__list_empty(const mu__list_t *h)
{
	return h->next == h;
}

static inline void mu__list_insert_tail(mu__list_t *h, mu__list_t *n)
{
	n->prev = h->prev;
	n->next = h;
	h->prev->next = n;
	h->prev = n;
}

static inline void mu__list_remove(mu__list_t *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n;
	n->prev = n;
}

static inline mu__list_t *mu__list_head(const mu__list_t *h)
{
	return h->next == h ? NULL : h->next;
}

#define mu__list_foreach(it, h) for ((it) = (h)->next; (it) != (h); (it) = (it)->next)

/* Safe against removal of `it` inside the body. */
#define mu__list_foreach_safe(it, tmp, h)                                      \
	for ((it) = (h)->next, (tmp) = (it)->next; (it) != (h);                  \
	     (it) = (tmp), (tmp) = (it)->next)

#endif
