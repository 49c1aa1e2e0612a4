/* SPDX-License-Identifier: MIT */
/*
 * Tensors and tensor lists.
 */
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "muster/tensor.h"
#include "core/alloc_int.h"

static int shape(mu_tensor_t *t, uint32_t rank, const uint64_t *dims)
{
	uint64_t n = 1;
	uint32_t i;

	if (rank > MU_TENSOR_MAX_RANK)
		return MU_ETOOBIG;
	for (i = 0; i < rank; i++) {
		if (dims[i] != 0 && n > UINT64_MAX / 4 / dims[i])
			return MU_ETOOBIG;
		n *= dims[i];
		t->dims[i] = dims[i];
	}
	t->rank = rank;
	t->numel = n;
	return 0;
}

static mu_tensor_t *named(const char *name)
{
	mu_tensor_t *t = mu__calloc(1, sizeof(*t));

	if (t != NULL && (t->name = mu__strdup(name ? name : "")) == NULL) {
		mu__free(t);
		t = NULL;
	}
	return t;
}

#define HUGE_PAGE ((uintptr_t)2 << 20)
#define HUGE_MIN ((size_t)8 << 20)

/*
 * Ask for transparent huge pages under a large tensor: filling 64 MiB a
 * 4 KiB page at a time costs as much as receiving it over loopback; in
 * 2 MiB pages the faults nearly vanish. Advice only: ignored where THP is
 * off.
 */
static void huge_pages(void *p, size_t n)
{
	uintptr_t b = ((uintptr_t)p + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
	uintptr_t e = ((uintptr_t)p + n) & ~(HUGE_PAGE - 1);

	if (e > b)
		madvise((void *)b, e - b, MADV_HUGEPAGE);
}

int mu_tensor_new(const char *name, uint32_t rank, const uint64_t *dims,
                  mu_tensor_t **out)
{
	mu_tensor_t *t = named(name);
	size_t bytes;
	int rc;

	*out = NULL;
	if (t == NULL)
		return MU_ENOMEM;
	rc = shape(t, rank, dims);
	if (rc == 0 && t->numel * 4 > SIZE_MAX - 64)
		rc = MU_ETOOBIG;
	if (rc == 0) {
		/* 64-byte alignment for the BLAS kernels, from the hooked
		 * allocator (so tests can fail it) */
		bytes = (size_t)t->numel * 4;
		t->mem = mu__calloc(1, bytes + 64);
		if (t->mem == NULL)
			rc = MU_ENOMEM;
		else
			t->data = (float *)(void *)(((uintptr_t)t->mem + 63) & ~(uintptr_t)63);
		if (t->mem != NULL && bytes >= HUGE_MIN)
			huge_pages(t->data, bytes);
	}
	if (rc != 0) {
		mu_tensor_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

int mu_tensor_wrap(const char *name, uint32_t rank, const uint64_t *dims,
                   float *data, mu_tensor_t **out)
{
	mu_tensor_t *t = named(name);
	int rc;

	*out = NULL;
	if (t == NULL)
		return MU_ENOMEM;
	rc = shape(t, rank, dims);
	if (rc != 0) {
		mu_tensor_free(t);
		return rc;
	}
	t->data = data;
	*out = t;
	return 0;
}

void mu_tensor_free(mu_tensor_t *t)
{
	if (t == NULL)
		return;
	mu__free(t->mem);
	mu__free(t->name);
	mu__free(t);
}

void mu_tensor_list_init(mu_tensor_list_t *l)
{
	l->t = NULL;
	l->n = 0;
	l->cap = 0;
}

void mu_tensor_list_free(mu_tensor_list_t *l)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		mu_tensor_free(l->t[i]);
	mu__free(l->t);
	mu_tensor_list_init(l);
}

int mu_tensor_list_push(mu_tensor_list_t *l, mu_tensor_t *t)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 8;
		mu_tensor_t **p = mu__realloc(l->t, cap * sizeof(*p));

		if (p == NULL)
			return MU_ENOMEM;
		l->t = p;
		l->cap = cap;
	}
	l->t[l->n++] = t;
	return 0;
}

mu_tensor_t *mu_tensor_list_find(const mu_tensor_list_t *l, const char *name)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		if (strcmp(l->t[i]->name, name) == 0)
			return l->t[i];
	return NULL;
}
