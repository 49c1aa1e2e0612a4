/* SPDX-License-Identifier: MIT */
/*
 * Tensors, their dtypes, and tensor lists.
 */
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "muster/tensor.h"
#include "core/alloc_int.h"

static const struct {
	const char *name;
	size_t size;
} dtypes[MU_DTYPE_COUNT] = {
	[MU_DTYPE_F32] = {"F32", 4}, [MU_DTYPE_F16] = {"F16", 2},
	[MU_DTYPE_BF16] = {"BF16", 2}, [MU_DTYPE_F64] = {"F64", 8},
	[MU_DTYPE_I8] = {"I8", 1}, [MU_DTYPE_I16] = {"I16", 2},
	[MU_DTYPE_I32] = {"I32", 4}, [MU_DTYPE_I64] = {"I64", 8},
	[MU_DTYPE_U8] = {"U8", 1}, [MU_DTYPE_U16] = {"U16", 2},
	[MU_DTYPE_U32] = {"U32", 4}, [MU_DTYPE_U64] = {"U64", 8},
	[MU_DTYPE_BOOL] = {"BOOL", 1},
};

size_t mu_dtype_size(int dtype)
{
	return dtype >= 0 && dtype < MU_DTYPE_COUNT ? dtypes[dtype].size : 0;
}

const char *mu_dtype_name(int dtype)
{
	return dtype >= 0 && dtype < MU_DTYPE_COUNT ? dtypes[dtype].name : "?";
}

int mu_dtype_from_name(const char *name)
{
	for (int i = 0; name != NULL && i < MU_DTYPE_COUNT; i++)
		if (strcmp(dtypes[i].name, name) == 0)
			return i;
	return -1;
}

/* Every element count is capped so that its bytes, in the widest dtype,
 * fit a uint64_t: numel * 8 never overflows anywhere. */
static int shape(mu_tensor_t *t, uint32_t rank, const uint64_t *dims)
{
	uint64_t n = 1;
	uint32_t i;

	if (rank > MU_TENSOR_MAX_RANK)
		return MU_ETOOBIG;
	for (i = 0; i < rank; i++) {
		if (dims[i] != 0 && n > UINT64_MAX / 8 / dims[i])
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

int mu_tensor_new_typed(const char *name, mu_dtype_t dtype, uint32_t rank,
                        const uint64_t *dims, mu_tensor_t **out)
{
	mu_tensor_t *t;
	size_t bytes;
	int rc;

	*out = NULL;
	if (mu_dtype_size((int)dtype) == 0)
		return MU_EARG;
	if ((t = named(name)) == NULL)
		return MU_ENOMEM;
	t->dtype = dtype;
	rc = shape(t, rank, dims);
	if (rc == 0 && mu_tensor_nbytes(t) > SIZE_MAX - 64)
		rc = MU_ETOOBIG;
	if (rc == 0) {
		/* 64-byte alignment for the BLAS kernels, from the hooked
		 * allocator (so tests can fail it) */
		bytes = (size_t)mu_tensor_nbytes(t);
		t->mem = mu__calloc(1, bytes + 64);
		if (t->mem == NULL)
			rc = MU_ENOMEM;
		else
			t->raw = (void *)(((uintptr_t)t->mem + 63) & ~(uintptr_t)63);
		if (t->mem != NULL && bytes >= HUGE_MIN)
			huge_pages(t->raw, bytes);
	}
	if (rc != 0) {
		mu_tensor_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

int mu_tensor_new(const char *name, uint32_t rank, const uint64_t *dims,
                  mu_tensor_t **out)
{
	return mu_tensor_new_typed(name, MU_DTYPE_F32, rank, dims, out);
}

int mu_tensor_wrap_typed(const char *name, mu_dtype_t dtype, uint32_t rank,
                         const uint64_t *dims, void *data, mu_tensor_t **out)
{
	mu_tensor_t *t;
	int rc;

	*out = NULL;
	if (mu_dtype_size((int)dtype) == 0)
		return MU_EARG;
	if ((t = named(name)) == NULL)
		return MU_ENOMEM;
	t->dtype = dtype;
	rc = shape(t, rank, dims);
	if (rc != 0) {
		mu_tensor_free(t);
		return rc;
	}
	t->raw = data;
	*out = t;
	return 0;
}

int mu_tensor_wrap(const char *name, uint32_t rank, const uint64_t *dims,
                   float *data, mu_tensor_t **out)
{
	return mu_tensor_wrap_typed(name, MU_DTYPE_F32, rank, dims, data, out);
}

uint64_t mu_tensor_nbytes(const mu_tensor_t *t)
{
	return t->numel * mu_dtype_size((int)t->dtype);
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
