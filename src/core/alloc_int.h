/* SPDX-License-Identifier: MIT */
/*
 * The allocator every file of libmuster goes through, so that
 * mu_set_allocator() reaches all of it and tests can fail the Nth
 * allocation. Nothing here ever aborts: callers check for NULL. What cJSON
 * allocates is cJSON's (see alloc.c): freed with cJSON_Delete/cJSON_free,
 * and copied into memory of ours before it is handed on.
 */
#ifndef MU_CORE_ALLOC_INT_H
#define MU_CORE_ALLOC_INT_H

#include <stddef.h>

void *mu__malloc(size_t n);
void *mu__calloc(size_t count, size_t size); /* NULL on overflow too */
void *mu__realloc(void *p, size_t n);
void mu__free(void *p);
char *mu__strdup(const char *s);
char *mu__strndup(const char *s, size_t n); /* always NUL-terminates */
void *mu__memdup(const void *p, size_t n);
/* Free a NULL-terminated array of strings and the strings (NULL is fine). */
void mu__strv_free(char **v);
/* Copy src (NULL copies as "") into the fixed buffer dst[n]; -1, and dst
 * untouched, when it does not fit. For options kept in fixed fields. */
int mu__copy_str(char *dst, size_t n, const char *src);
/*
 * Hand freed memory back to the system where the C library can (glibc's
 * malloc_trim), e.g. after a peer that held megabytes is gone. It walks
 * the heap: call it rarely. A no-op elsewhere and with mu_set_allocator.
 */
void mu__mem_trim(void);

#endif
