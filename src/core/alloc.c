/* SPDX-License-Identifier: MIT */
/*
 * Allocator hooks. The three function pointers are the one piece of global
 * state besides the log sink; they are set once, before anything runs.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef MU_HAVE_MALLOC_TRIM
#include <malloc.h>
#endif
#ifdef __SANITIZE_ADDRESS__
/* compiler-rt's allocator interface (sanitizer/allocator_interface.h,
 * which GCC does not install): the sanitizer's allocator stands in for
 * libc's, and this is its malloc_trim. */
void __sanitizer_purge_allocator(void);
#endif

#include "muster/common.h"
#include "core/alloc_int.h"

static void *(*malloc_fn)(size_t) = malloc;
static void *(*realloc_fn)(void *, size_t) = realloc;
static void (*free_fn)(void *) = free;

/*
 * cJSON's hooks are not set here. libmuster links the system's shared
 * libcjson, whose hooks (cJSON_InitHooks) are one setting for the whole
 * process: a host program that uses cJSON itself, with hooks of its own or
 * none, would have them replaced behind its back, and its cJSON memory
 * freed with our allocator's free. cJSON has no per-call allocator, so
 * its memory stays cJSON's: the library frees it with cJSON_Delete and
 * cJSON_free, and copies into mu__ memory what it hands on. The cost is
 * that fault injection through mu_set_allocator does not reach inside
 * cJSON; the unit tests, being the host program, set cJSON's hooks
 * themselves (tests/unit/mu_test.h).
 */
void mu_set_allocator(void *(*m)(size_t), void *(*r)(void *, size_t),
                      void (*f)(void *))
{
	if (m == NULL || r == NULL || f == NULL) {
		m = malloc;
		r = realloc;
		f = free;
	}
	malloc_fn = m;
	realloc_fn = r;
	free_fn = f;
}

void mu__mem_trim(void)
{
#if defined(__SANITIZE_ADDRESS__)
	__sanitizer_purge_allocator();
#elif defined(MU_HAVE_MALLOC_TRIM)
	/* glibc keeps what is freed in its arenas, and gives back on its own
	 * only the free top of the main heap; malloc_trim returns the free
	 * pages of every arena. Another allocator's memory is its business. */
	if (free_fn == free)
		malloc_trim(0);
#endif
}

void mu_free(void *p)
{
	mu__free(p);
}

void *mu__malloc(size_t n)
{
	return malloc_fn(n ? n : 1);
}

void *mu__calloc(size_t count, size_t size)
{
	void *p;

	if (size != 0 && count > SIZE_MAX / size)
		return NULL;
	p = mu__malloc(count * size);
	if (p != NULL)
		memset(p, 0, count * size);
	return p;
}

void *mu__realloc(void *p, size_t n)
{
	return realloc_fn(p, n ? n : 1);
}

void mu__free(void *p)
{
	if (p != NULL)
		free_fn(p);
}

void *mu__memdup(const void *p, size_t n)
{
	void *q = mu__malloc(n);

	if (q != NULL && n > 0)
		memcpy(q, p, n);
	return q;
}

char *mu__strndup(const char *s, size_t n)
{
	char *q = mu__malloc(n + 1);

	if (q == NULL)
		return NULL;
	memcpy(q, s, n);
	q[n] = '\0';
	return q;
}

char *mu__strdup(const char *s)
{
	return mu__strndup(s, strlen(s));
}

void mu__strv_free(char **v)
{
	if (v == NULL)
		return;
	for (size_t i = 0; v[i] != NULL; i++)
		mu__free(v[i]);
	mu__free(v);
}

int mu__copy_str(char *dst, size_t n, const char *src)
{
	size_t len = src != NULL ? strlen(src) : 0;

	if (len >= n)
		return -1;
	memcpy(dst, src != NULL ? src : "", len + 1);
	return 0;
}
