/* SPDX-License-Identifier: MIT */
/*
 * The kernels' front: type sizes and names, the f16/bf16 conversions, the
 * Q8_0/Q4_0 quantizers, the choice of instruction set, and mu__matmul,
 * which checks shapes, quantizes x when the weights are quantized and
 * splits the output rows over the pool. The products themselves are in
 * kern/portable.c, kern/avx2.c and kern/vnni.c, which kern/isa_int.h ties
 * to one definition of the arithmetic.
 */
#include <assert.h>
#include <float.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(MU_HAVE_KERN_AVX2)
#include <cpuid.h>
#endif

#include "muster/common.h"
#include "core/alloc_int.h"
#include "kern/isa_int.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the kernels read little-endian weights in place"
#endif

/* Output rows per unit of work handed to the pool: a multiple of every
 * register block, and 64 bytes of y, so threads never share a cache line
 * of a row of y. */
#define MU__ROW_UNIT 16

size_t mu__wtype_row_bytes(mu__wtype_t t, int64_t cols)
{
	if (cols <= 0 || cols > (int64_t)(SIZE_MAX / 8))
		return 0;
	switch (t) {
	case MU__WT_F32:
		return (size_t)cols * 4;
	case MU__WT_F16:
	case MU__WT_BF16:
		return (size_t)cols * 2;
	case MU__WT_Q8_0:
		return cols % MU__QBLOCK ? 0 : (size_t)(cols / MU__QBLOCK) * 34;
	case MU__WT_Q4_0:
		return cols % MU__QBLOCK ? 0 : (size_t)(cols / MU__QBLOCK) * 18;
	}
	return 0;
}

const char *mu__wtype_name(mu__wtype_t t)
{
	static const char *const names[] = {"F32", "F16", "BF16", "Q8_0", "Q4_0"};

	return (unsigned)t < 5 ? names[t] : "?";
}

/* ---- conversions ---- */

float mu__f16_to_f32(uint16_t h)
{
	return mu__h2f(h);
}

/* Round to nearest even; overflow to inf; a NaN stays a NaN, quiet, with
 * the top of its payload (what F16C's vcvtps2ph does). */
uint16_t mu__f32_to_f16(float f)
{
	uint32_t u = mu__f32_bits(f), a = u & 0x7fffffffu;
	uint16_t s = (uint16_t)((u >> 16) & 0x8000u);

	if (a > 0x7f800000u)
		return (uint16_t)(s | 0x7e00u | ((a >> 13) & 0x3ffu));
	if (a >= 0x477ff000u) /* 65520 and up: past half an ulp above 65504 */
		return (uint16_t)(s | 0x7c00u);
	if (a >= 0x38800000u) { /* 2^-14 and up: a normal f16 */
		uint32_t r = a - (112u << 23);

		return (uint16_t)(s | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
	}
	if (a < 0x33000000u) /* at most 2^-25, half the smallest subnormal */
		return s;
	{ /* a subnormal f16: round m * 2^(e-150) to a multiple of 2^-24 */
		uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, sh = 126 - e;
		uint32_t q = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);

		if (rem > half || (rem == half && (q & 1u)))
			q++;
		return (uint16_t)(s | q);
	}
}

float mu__bf16_to_f32(uint16_t h)
{
	return mu__bf2f(h);
}

/* Round to nearest even (subnormals kept); a NaN stays a quiet NaN. */
uint16_t mu__f32_to_bf16(float f)
{
	uint32_t u = mu__f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40u);
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* ---- quantizers ---- */

void mu__q8_block(const float *x, int8_t *q, uint16_t *dh)
{
	float amax = 0, d, id;
	int bad = 0;

	for (int j = 0; j < MU__QBLOCK; j++) {
		float a = fabsf(x[j]);

		bad |= !(a <= FLT_MAX);
		amax = a > amax ? a : amax;
	}
	if (bad) {
		*dh = 0x7e00;
		memset(q, 0, MU__QBLOCK);
		return;
	}
	d = amax / 127.0f;
	id = d != 0 ? 1.0f / d : 0.0f;
	*dh = mu__f32_to_f16(d);
	for (int j = 0; j < MU__QBLOCK; j++) {
		float v = x[j] * id;

		v = v != v ? 0.0f : v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
		q[j] = (int8_t)roundf(v);
	}
}

void mu__quantize_q8_0(const float *x, int64_t n, void *out)
{
	unsigned char *o = out;

	assert(n % MU__QBLOCK == 0);
	for (int64_t b = 0; b < n / MU__QBLOCK; b++, o += 34) {
		uint16_t dh;

		mu__q8_block(x + b * MU__QBLOCK, (int8_t *)(o + 2), &dh);
		memcpy(o, &dh, 2);
	}
}

/*
 * llama.cpp's reference Q4_0: the element of largest magnitude, with its
 * sign, maps to -8; d = max / -8, q = min(15, trunc(x / d + 8.5)) computed
 * with x * (1/d). As in mu__q8_block, a block holding a NaN or an infinity
 * gets d = NaN and every q = 8 (zero), and q is clamped to [0, 15].
 */
void mu__quantize_q4_0(const float *x, int64_t n, void *out)
{
	unsigned char *o = out;

	assert(n % MU__QBLOCK == 0);
	for (int64_t b = 0; b < n / MU__QBLOCK; b++, x += MU__QBLOCK, o += 18) {
		float amax = 0, max = 0, d, id;
		uint16_t dh;
		int bad = 0;

		for (int j = 0; j < MU__QBLOCK; j++) {
			bad |= !(fabsf(x[j]) <= FLT_MAX);
			if (amax < fabsf(x[j])) {
				amax = fabsf(x[j]);
				max = x[j];
			}
		}
		d = max / -8.0f;
		id = d != 0 ? 1.0f / d : 0.0f;
		dh = bad ? 0x7e00 : mu__f32_to_f16(d);
		memcpy(o, &dh, 2);
		for (int j = 0; j < MU__QBLOCK / 2; j++) {
			float v0 = x[j] * id + 8.5f, v1 = x[j + 16] * id + 8.5f;
			int q0, q1;

			/* !(v >= 0) also catches the NaN of 0 * inf */
			q0 = bad ? 8 : !(v0 >= 0.0f) ? 0 : v0 >= 15.0f ? 15 : (int)v0;
			q1 = bad ? 8 : !(v1 >= 0.0f) ? 0 : v1 >= 15.0f ? 15 : (int)v1;
			o[2 + j] = (unsigned char)(q0 | q1 << 4);
		}
	}
}

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
	const float *x;
	int8_t *xq;
	float *xd;
} mm_ctx_t;

static void quant_rows(void *arg, int64_t lo, int64_t hi)
{
	mm_ctx_t *c = arg;
	int64_t cols = c->job.w->cols;

	for (int64_t i = lo; i < hi; i++)
		c->isa->quant_row(c->x + i * cols, cols, c->xq + i * cols,
		                  c->xd + i * (cols / MU__QBLOCK));
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
	mm_ctx_t c;
	int quant = w->type == MU__WT_Q8_0 || w->type == MU__WT_Q4_0;
	void *buf = NULL;

	assert(n >= 0 && w->rows >= 0 && mu__wtype_row_bytes(w->type, w->cols) != 0);
	if (n <= 0 || w->rows <= 0)
		return 0;
	if ((unsigned)w->type > MU__WT_Q4_0 || mu__wtype_row_bytes(w->type, w->cols) == 0)
		return MU_EARG;
	memset(&c, 0, sizeof(c));
	c.isa = mu__kern_get();
	c.x = x;
	c.job = (mu__mm_job_t){w, x, NULL, NULL, n, y, bias};
	if (quant) {
		/* n * cols quants and n * cols / 32 scales, in one allocation */
		size_t nq, nd;

		if ((uint64_t)n > SIZE_MAX / 2 / (uint64_t)w->cols)
			return MU_ENOMEM;
		nq = (size_t)n * (size_t)w->cols;
		nd = nq / MU__QBLOCK;
		buf = mu__malloc(nd * sizeof(float) + nq);
		if (buf == NULL)
			return MU_ENOMEM;
		c.xd = buf;
		c.xq = (int8_t *)(c.xd + nd);
		c.job.xq = c.xq;
		c.job.xd = c.xd;
		if (n > 1)
			mu__pool_run(pool, quant_rows, &c, n);
		else
			quant_rows(&c, 0, n);
	}
	mu__pool_run(pool, mm_units, &c, (w->rows + MU__ROW_UNIT - 1) / MU__ROW_UNIT);
	mu__free(buf);
	return 0;
}

void mu__wmat_row(const mu__wmat_t *w, int64_t r, float *out)
{
	size_t rb = mu__wtype_row_bytes(w->type, w->cols);
	const unsigned char *p = (const unsigned char *)w->data + (size_t)r * rb;
	int64_t k;

	assert(r >= 0 && r < w->rows && rb != 0);
	switch (w->type) {
	case MU__WT_F32:
		memcpy(out, p, rb);
		break;
	case MU__WT_F16:
		for (k = 0; k < w->cols; k++)
			out[k] = mu__h2f(mu__ld16(p + 2 * k));
		break;
	case MU__WT_BF16:
		for (k = 0; k < w->cols; k++)
			out[k] = mu__bf2f(mu__ld16(p + 2 * k));
		break;
	case MU__WT_Q8_0:
		for (k = 0; k < w->cols; k += MU__QBLOCK, p += 34) {
			float d = mu__h2f(mu__ld16(p));

			for (int j = 0; j < MU__QBLOCK; j++)
				out[k + j] = d * (float)(int8_t)p[2 + j];
		}
		break;
	case MU__WT_Q4_0:
		for (k = 0; k < w->cols; k += MU__QBLOCK, p += 18) {
			float d = mu__h2f(mu__ld16(p));

			for (int j = 0; j < MU__QBLOCK / 2; j++) {
				out[k + j] = d * (float)((p[2 + j] & 15) - 8);
				out[k + j + 16] = d * (float)((p[2 + j] >> 4) - 8);
			}
		}
		break;
	}
}
