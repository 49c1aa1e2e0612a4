/* SPDX-License-Identifier: MIT */
/*
 * The kernels' front: the choice of instruction set, and mu__matmul,
 * which checks shapes, puts x in the weight type's activation format
 * (kern/types.c's tables say which, and how big) and splits the output
 * rows over the pool. The products themselves are in kern/portable.c,
 * kern/avx2.c and kern/vnni.c, which kern/isa_int.h ties to one definition
 * of the arithmetic.
 */
#include <assert.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(MU_HAVE_KERN_AVX2)
#include <cpuid.h>
#endif

#include "muster/common.h"
#include "core/alloc_int.h"
#include "kern/isa_int.h"

/* Output rows per unit of work handed to the pool: a multiple of every
 * register block, and 64 bytes of y, so threads never share a cache line
 * of a row of y. */
#define MU__ROW_UNIT 16

/* ---- the instruction set ---- */

#if defined(MU_HAVE_KERN_AVX2)
extern const mu__kern_isa_t mu__kern_avx2_table, mu__kern_vnni_table;
#endif

/* What this CPU runs, bit n for ISA_* n; -1 until looked at. CPUID traps
 * to the hypervisor in a VM (tens of microseconds), so it is kept. */
enum { ISA_PORTABLE, ISA_AVX2, ISA_VNNI, ISA_N };
static atomic_int isa_mask = -1;

/* __builtin_cpu_supports checks that the OS saves the YMM (and for AVX-512
 * the ZMM and mask) registers too; F16C is a CPUID bit (clang's builtin
 * does not know its name). */
static int cpu_isas(void)
{
	int m = atomic_load_explicit(&isa_mask, memory_order_relaxed);

	if (m < 0) {
		m = 1 << ISA_PORTABLE;
#if defined(MU_HAVE_KERN_AVX2)
		unsigned a, b, c, d;

		__builtin_cpu_init();
		if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
		    __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C)) {
			m |= 1 << ISA_AVX2;
			if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl"))
				m |= 1 << ISA_VNNI;
		}
#endif
		atomic_store_explicit(&isa_mask, m, memory_order_relaxed);
	}
	return m;
}

static const mu__kern_isa_t *isa_table(int i)
{
#if defined(MU_HAVE_KERN_AVX2)
	if (i == ISA_AVX2)
		return &mu__kern_avx2_table;
	if (i == ISA_VNNI)
		return &mu__kern_vnni_table;
#endif
	return &mu__kern_portable;
}

const mu__kern_isa_t *mu__kern_avx2(void)
{
	return cpu_isas() & 1 << ISA_AVX2 ? isa_table(ISA_AVX2) : NULL;
}

const mu__kern_isa_t *mu__kern_isa_built(int i)
{
	if (i < 0 || i >= ISA_N)
		return NULL;
#if !defined(MU_HAVE_KERN_AVX2)
	if (i > ISA_PORTABLE)
		return NULL;
#endif
	return isa_table(i);
}

const mu__kern_isa_t *mu__kern_isa_by_name(const char *name)
{
	for (int i = 0; i < ISA_N; i++)
		if (cpu_isas() & 1 << i && strcmp(isa_table(i)->name, name) == 0)
			return isa_table(i);
	return NULL;
}

/* The ISA_* in use, -1 until chosen. Set once by the first use (or by the
 * test hook), read by every call after: a cached fact about the machine,
 * not state anything changes while running. */
static atomic_int isa_choice = -1;

/* MUSTER_KERNELS names one this CPU runs, else the best it runs. */
static int isa_detect(void)
{
	const char *env = getenv("MUSTER_KERNELS");
	int m = cpu_isas(), best = ISA_PORTABLE;

	for (int i = 0; i < ISA_N; i++) {
		if (!(m & 1 << i))
			continue;
		if (env != NULL && strcmp(env, isa_table(i)->name) == 0)
			return i;
		best = i;
	}
	return best;
}

const mu__kern_isa_t *mu__kern_get(void)
{
	int c = atomic_load_explicit(&isa_choice, memory_order_relaxed);

	if (c < 0) {
		c = isa_detect();
		atomic_store_explicit(&isa_choice, c, memory_order_relaxed);
	}
	return isa_table(c);
}

const char *mu__kern_isa(void)
{
	return mu__kern_get()->name;
}

int mu__kern_force_isa(const char *isa)
{
	if (isa == NULL) {
		atomic_store(&isa_choice, isa_detect());
		return 0;
	}
	for (int i = 0; i < ISA_N; i++)
		if (cpu_isas() & 1 << i && strcmp(isa_table(i)->name, isa) == 0) {
			atomic_store(&isa_choice, i);
			return 0;
		}
	return MU_EARG;
}

/* ---- mu__matmul ---- */

typedef struct {
	const mu__kern_isa_t *isa;
	mu__mm_job_t job;
	mu__actfmt_fn act; /* x to the activation format, or NULL */
	unsigned char *xa; /* where it goes (job.xa, writable) */
} mm_ctx_t;

static void act_rows(void *arg, int64_t lo, int64_t hi)
{
	mm_ctx_t *c = arg;
	int64_t cols = c->job.w->cols;

	for (int64_t i = lo; i < hi; i++)
		c->act(c->job.x + i * cols, cols, c->xa + (size_t)i * c->job.xa_row);
}

static void mm_units(void *arg, int64_t lo, int64_t hi)
{
	mm_ctx_t *c = arg;
	int64_t rows = c->job.w->rows, r1 = hi * MU__ROW_UNIT;

	c->isa->mm[c->job.w->type](&c->job, lo * MU__ROW_UNIT, r1 < rows ? r1 : rows);
}

int mu__matmul(mu__pool_t *pool, const mu__wmat_t *w, const float *x,
               int64_t n, float *y, const float *bias)
{
	const mu__wtype_info_t *ti = mu__wtype_info((int)w->type);
	size_t rb = mu__wtype_row_bytes(w->type, w->cols);
	mm_ctx_t c;

	assert(n >= 0 && w->rows >= 0 && rb != 0);
	if (n <= 0 || w->rows <= 0)
		return 0;
	if (rb == 0)
		return MU_EARG;
	memset(&c, 0, sizeof(c));
	c.isa = mu__kern_get();
	c.job = (mu__mm_job_t){w, x, (const unsigned char *)x, (size_t)w->cols * sizeof(float),
	                       n, y, bias};
	assert(c.isa->mm[w->type] != NULL);
	if (ti->act != MU__ACTFMT_F32) {
		/* the weight type's block is a multiple of its format's, so a row
		 * that fits one fits the other (the tests check the table) */
		size_t xr = mu__actfmt_row_bytes(ti->act, w->cols);

		assert(xr != 0 && c.isa->act[ti->act] != NULL);
		if ((uint64_t)n > SIZE_MAX / 2 / xr)
			return MU_ENOMEM;
		c.xa = mu__malloc((size_t)n * xr);
		if (c.xa == NULL)
			return MU_ENOMEM;
		c.act = c.isa->act[ti->act];
		c.job.xa = c.xa;
		c.job.xa_row = xr;
		if (n > 1)
			mu__pool_run(pool, act_rows, &c, n);
		else
			act_rows(&c, 0, n);
	}
	mu__pool_run(pool, mm_units, &c, (w->rows + MU__ROW_UNIT - 1) / MU__ROW_UNIT);
	mu__free(c.xa);
	return 0;
}

void mu__wmat_row(const mu__wmat_t *w, int64_t r, float *out)
{
	size_t rb = mu__wtype_row_bytes(w->type, w->cols);

	assert(r >= 0 && r < w->rows && rb != 0);
	mu__wtypes[w->type].to_f32((const unsigned char *)w->data + (size_t)r * rb, w->cols, out);
}
