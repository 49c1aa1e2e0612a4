/* SPDX-License-Identifier: MIT */
/*
 * mu__buf_t: a growable byte buffer with a hard upper bound, the one place
 * where bytes from a peer are accumulated. Growing past `max` fails with
 * MU_ETOOBIG and leaves the buffer unchanged, so a peer can never make us
 * allocate more than the limit its protocol allows.
 *
 * Invariants: len <= cap <= max (cap may exceed max by the NUL slot only);
 * data is NULL exactly when nothing is allocated; when data is non-NULL,
 * data[len] is a NUL byte, so text protocols can hand the bytes to C string
 * functions. Consuming from the front is O(1): data moves forward over the
 * allocation (by skip bytes, which cap no longer counts) until room is
 * needed at the end, when the content moves back to the start.
 */
#ifndef MU_CORE_BUF_INT_H
#define MU_CORE_BUF_INT_H

#include <stdarg.h>
#include <stddef.h>

typedef struct {
	char *data;
	size_t len;
	size_t cap;  /* bytes usable for content from data (allocation is
	              * skip + cap + 1, starting at data - skip) */
	size_t skip; /* consumed bytes before data */
	size_t max;
} mu__buf_t;

void mu__buf_init(mu__buf_t *b, size_t max);
void mu__buf_free(mu__buf_t *b); /* releases memory; b may be reused */
void mu__buf_reset(mu__buf_t *b); /* len = 0, memory kept */

/* Make room for `extra` more bytes. 0, MU_ETOOBIG or MU_ENOMEM. */
int mu__buf_reserve(mu__buf_t *b, size_t extra);
int mu__buf_append(mu__buf_t *b, const void *p, size_t n);
int mu__buf_appendc(mu__buf_t *b, char c);
int mu__buf_appends(mu__buf_t *b, const char *s);
int mu__buf_printf(mu__buf_t *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int mu__buf_vprintf(mu__buf_t *b, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));

/* Drop the first n bytes (n <= len), keeping the rest in order. O(1). */
void mu__buf_consume(mu__buf_t *b, size_t n);

/* Bytes allocated for the buffer (0 when none): what it costs to hold. */
size_t mu__buf_footprint(const mu__buf_t *b);

/*
 * Hand the bytes to the caller, who frees them with mu__free(). The buffer is
 * left empty (but keeps its max). *plen may be NULL. Returns NULL when the
 * buffer is empty and never allocated.
 */
char *mu__buf_take(mu__buf_t *b, size_t *plen);

/*
 * Read the whole file at path into b (initialised here with max bytes).
 * 0; -errno with why naming the file; MU_ETOOBIG with why naming the file
 * and the limit; MU_ENOMEM. b holds nothing on failure.
 */
int mu__buf_read_file(mu__buf_t *b, const char *path, size_t max, char *why,
                      size_t wl);

#endif
