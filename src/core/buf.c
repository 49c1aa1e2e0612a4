/* SPDX-License-Identifier: MIT */
/*
 * Bounded growable buffer; see buf_int.h for the contract.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/error_int.h"

void mu__buf_init(mu__buf_t *b, size_t max)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->skip = 0;
	b->max = max;
}

void mu__buf_free(mu__buf_t *b)
{
	if (b->data != NULL)
		mu__free(b->data - b->skip);
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->skip = 0;
}

size_t mu__buf_footprint(const mu__buf_t *b)
{
	return b->data != NULL ? b->skip + b->cap + 1 : 0;
}

/* Move the content back to the start of the allocation. */
static void compact(mu__buf_t *b)
{
	if (b->skip == 0)
		return;
	memmove(b->data - b->skip, b->data, b->len + 1);
	b->data -= b->skip;
	b->cap += b->skip;
	b->skip = 0;
}

void mu__buf_reset(mu__buf_t *b)
{
	if (b->data != NULL) {
		b->data -= b->skip;
		b->cap += b->skip;
		b->skip = 0;
	}
	b->len = 0;
	if (b->data != NULL)
		b->data[0] = '\0';
}

int mu__buf_reserve(mu__buf_t *b, size_t extra)
{
	size_t need, ncap;
	char *p;

	if (extra > b->max || b->len > b->max - extra)
		return MU_ETOOBIG;
	need = b->len + extra;
	if (need <= b->cap && b->data != NULL)
		return 0;
	/* the room that consumed bytes left at the front comes first */
	compact(b);
	if (need <= b->cap && b->data != NULL)
		return 0;
	/* Double, but never past max: the limit is what a peer may cost us. */
	ncap = b->cap < 64 ? 64 : b->cap;
	while (ncap < need)
		ncap = ncap > b->max / 2 ? b->max : ncap * 2;
	if (ncap > b->max)
		ncap = b->max;
	p = mu__realloc(b->data, ncap + 1);
	if (p == NULL)
		return MU_ENOMEM;
	b->data = p;
	b->cap = ncap;
	b->data[b->len] = '\0';
	return 0;
}

int mu__buf_append(mu__buf_t *b, const void *p, size_t n)
{
	int rc = mu__buf_reserve(b, n);

	if (rc != 0)
		return rc;
	if (n > 0)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

int mu__buf_appendc(mu__buf_t *b, char c)
{
	return mu__buf_append(b, &c, 1);
}

int mu__buf_appends(mu__buf_t *b, const char *s)
{
	return mu__buf_append(b, s, strlen(s));
}

int mu__buf_vprintf(mu__buf_t *b, const char *fmt, va_list ap)
{
	va_list ap2;
	int n, rc;

	va_copy(ap2, ap);
	n = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	if (n < 0)
		return MU_EARG;
	rc = mu__buf_reserve(b, (size_t)n);
	if (rc != 0)
		return rc;
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	b->len += (size_t)n;
	return 0;
}

int mu__buf_printf(mu__buf_t *b, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = mu__buf_vprintf(b, fmt, ap);
	va_end(ap);
	return rc;
}

void mu__buf_consume(mu__buf_t *b, size_t n)
{
	if (n >= b->len) {
		mu__buf_reset(b);
		return;
	}
	/* O(1): a peer's many small messages in one read are consumed one
	 * by one, and moving the rest each time would be quadratic */
	b->data += n;
	b->skip += n;
	b->cap -= n;
	b->len -= n;
}

char *mu__buf_take(mu__buf_t *b, size_t *plen)
{
	char *p;

	compact(b);
	p = b->data;

	if (plen != NULL)
		*plen = b->len;
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	return p;
}

int mu__buf_read_file(mu__buf_t *b, const char *path, size_t max, char *why,
                      size_t wl)
{
	char tmp[65536];
	size_t n;
	FILE *f;
	int rc = 0;

	mu__buf_init(b, max);
	f = fopen(path, "rb");
	if (f == NULL)
		return mu__why(why, wl, -errno, "cannot open %.300s: %s", path, strerror(errno));
	while (rc == 0 && (n = fread(tmp, 1, sizeof(tmp), f)) > 0)
		rc = mu__buf_append(b, tmp, n);
	if (rc == 0 && ferror(f))
		rc = mu__why(why, wl, -EIO, "cannot read %.300s", path);
	fclose(f);
	if (rc == MU_ETOOBIG)
		mu__why(why, wl, rc, "%.300s is larger than %zu bytes, the limit for it", path, max);
	if (rc != 0)
		mu__buf_free(b);
	return rc;
}
