/* SPDX-License-Identifier: MIT */
/*
 * include/muster/kern.h: the kernels for programs outside the library.
 * Each call checks what a caller can get wrong (codes, shapes, NULLs) and
 * returns MU_EARG for it, then runs the library's own mu__ call, so a
 * program gets the bits the decoder gets. The internals (kern/kern_int.h)
 * assert instead: their callers have checked.
 */
#include <errno.h>
#include <stddef.h>

#include "muster/common.h"
#include "muster/kern.h"
#include "kern/kern_int.h"

int mu_wtype_count(void)
{
	return MU__WT_COUNT;
}

int mu_wtype_from_name(const char *name)
{
	mu__wtype_t t;

	return mu__wtype_by_name(name, &t) == 0 ? (int)t : MU_EARG;
}

const char *mu_wtype_name(int type)
{
	const mu__wtype_info_t *ti = mu__wtype_info(type);

	return ti ? ti->name : NULL;
}

int mu_wtype_block(int type)
{
	const mu__wtype_info_t *ti = mu__wtype_info(type);

	return ti ? ti->block : 0;
}

size_t mu_wtype_row_bytes(int type, int64_t cols)
{
	return mu__wtype_info(type) ? mu__wtype_row_bytes((mu__wtype_t)type, cols) : 0;
}

int mu_wtype_to_f32(int type, const void *row, int64_t cols, float *out)
{
	if (mu_wtype_row_bytes(type, cols) == 0 || row == NULL || out == NULL)
		return MU_EARG;
	mu__wtypes[type].to_f32(row, cols, out);
	return 0;
}

int mu_wtype_from_f32(int type, const float *x, int64_t cols, void *out)
{
	if (mu_wtype_row_bytes(type, cols) == 0 || x == NULL || out == NULL)
		return MU_EARG;
	if (mu__wtypes[type].from_f32 == NULL)
		return -ENOTSUP;
	mu__wtypes[type].from_f32(x, cols, out);
	return 0;
}

int mu_pool_new(int threads, mu_pool_t **out)
{
	if (out == NULL)
		return MU_EARG;
	return mu__pool_new(threads, out);
}

void mu_pool_free(mu_pool_t *p)
{
	mu__pool_free(p);
}

int mu_pool_threads(const mu_pool_t *p)
{
	return mu__pool_threads(p);
}

void mu_pool_run(mu_pool_t *p, mu_pool_fn fn, void *arg, int64_t n)
{
	if (fn != NULL)
		mu__pool_run(p, fn, arg, n);
}

int mu_matmul(mu_pool_t *pool, const mu_wmat_t *w, const float *x, int64_t n, float *y,
              const float *bias)
{
	mu__wmat_t m;

	if (w == NULL || n < 0 || w->rows < 0 || mu_wtype_row_bytes(w->type, w->cols) == 0)
		return MU_EARG;
	if (n == 0 || w->rows == 0)
		return 0;
	if (w->data == NULL || x == NULL || y == NULL)
		return MU_EARG;
	m = (mu__wmat_t){(mu__wtype_t)w->type, w->data, w->rows, w->cols};
	return mu__matmul(pool, &m, x, n, y, bias);
}

const char *mu_kern_isa(void)
{
	return mu__kern_isa();
}
