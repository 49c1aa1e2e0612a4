/* SPDX-License-Identifier: MIT */
/* TEMPORARY: a naive implementation of kern_int.h until the real kernels
 * land. Serial pool; 8-lane fmaf dots. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "model/kern_int.h"

struct mu__pool_s { int threads; };

int mu__pool_new(int threads, mu__pool_t **out)
{
	*out = mu__calloc(1, sizeof(**out));
	if (*out == NULL)
		return MU_ENOMEM;
	(*out)->threads = threads;
	return 0;
}
void mu__pool_free(mu__pool_t *p) { mu__free(p); }
int mu__pool_threads(const mu__pool_t *p) { return p ? p->threads : 1; }
void mu__pool_run(mu__pool_t *p, mu__pool_fn fn, void *arg, int64_t n)
{
	(void)p;
	if (n > 0)
		fn(arg, 0, n);
}

size_t mu__wtype_row_bytes(mu__wtype_t t, int64_t cols)
{
	if (cols <= 0)
		return 0;
	switch (t) {
	case MU__WT_F32: return (size_t)cols * 4;
	case MU__WT_F16: case MU__WT_BF16: return (size_t)cols * 2;
	case MU__WT_Q8_0: return cols % 32 ? 0 : (size_t)cols / 32 * 34;
	case MU__WT_Q4_0: return cols % 32 ? 0 : (size_t)cols / 32 * 18;
	}
	return 0;
}
const char *mu__wtype_name(mu__wtype_t t)
{
	static const char *n[] = {"F32", "F16", "BF16", "Q8_0", "Q4_0"};
	return (unsigned)t < 5 ? n[t] : "?";
}

float mu__f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
	float f;
	if (exp == 0) {
		if (man == 0) bits = sign;
		else { exp = 1; while ((man & 0x400) == 0) { man <<= 1; exp--; } man &= 0x3FF;
		       bits = sign | (exp + 127 - 15) << 23 | man << 13; }
	} else if (exp == 0x1F) bits = sign | 0x7F800000u | man << 13;
	else bits = sign | (exp + 127 - 15) << 23 | man << 13;
	memcpy(&f, &bits, 4);
	return f;
}
uint16_t mu__f32_to_f16(float f)
{
	/* crude; tests only */
	uint32_t x; memcpy(&x, &f, 4);
	uint32_t sign = (x >> 16) & 0x8000; int e = (int)((x >> 23) & 0xff) - 127 + 15; uint32_t m = x & 0x7fffff;
	if (e <= 0) return (uint16_t)sign;
	if (e >= 31) return (uint16_t)(sign | 0x7c00);
	return (uint16_t)(sign | (uint32_t)e << 10 | ((m + 0x1000) >> 13));
}
float mu__bf16_to_f32(uint16_t h) { uint32_t b = (uint32_t)h << 16; float f; memcpy(&f, &b, 4); return f; }
uint16_t mu__f32_to_bf16(float f) { uint32_t b; memcpy(&b, &f, 4); return (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16); }

static void dequant_row(const mu__wmat_t *w, int64_t r, float *out)
{
	const unsigned char *p = (const unsigned char *)w->data + (size_t)r * mu__wtype_row_bytes(w->type, w->cols);
	int64_t k;
	switch (w->type) {
	case MU__WT_F32: memcpy(out, p, (size_t)w->cols * 4); break;
	case MU__WT_F16: for (k = 0; k < w->cols; k++) out[k] = mu__f16_to_f32((uint16_t)(p[2*k] | p[2*k+1] << 8)); break;
	case MU__WT_BF16: for (k = 0; k < w->cols; k++) out[k] = mu__bf16_to_f32((uint16_t)(p[2*k] | p[2*k+1] << 8)); break;
	case MU__WT_Q8_0:
		for (k = 0; k < w->cols; k += 32, p += 34) {
			float d = mu__f16_to_f32((uint16_t)(p[0] | p[1] << 8));
			for (int j = 0; j < 32; j++) out[k + j] = d * (float)(int8_t)p[2 + j];
		}
		break;
	case MU__WT_Q4_0:
		for (k = 0; k < w->cols; k += 32, p += 18) {
			float d = mu__f16_to_f32((uint16_t)(p[0] | p[1] << 8));
			for (int j = 0; j < 16; j++) { out[k + j] = d * (float)((p[2 + j] & 15) - 8); out[k + j + 16] = d * (float)((p[2 + j] >> 4) - 8); }
		}
		break;
	}
}

void mu__wmat_row(const mu__wmat_t *w, int64_t r, float *out) { dequant_row(w, r, out); }

int mu__matmul(mu__pool_t *pool, const mu__wmat_t *w, const float *x, int64_t n, float *y, const float *bias)
{
	float *row = mu__malloc((size_t)w->cols * sizeof(float));
	(void)pool;
	if (row == NULL)
		return MU_ENOMEM;
	for (int64_t r = 0; r < w->rows; r++) {
		dequant_row(w, r, row);
		for (int64_t i = 0; i < n; i++) {
			const float *xi = x + i * w->cols;
			float l[8] = {0};
			int64_t k;
			for (k = 0; k + 8 <= w->cols; k += 8)
				for (int j = 0; j < 8; j++) l[j] = fmaf(row[k + j], xi[k + j], l[j]);
			for (; k < w->cols; k++) l[k & 7] = fmaf(row[k], xi[k], l[k & 7]);
			float s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
			y[i * w->rows + r] = bias ? s + bias[r] : s;
		}
	}
	mu__free(row);
	return 0;
}

void mu__quantize_q8_0(const float *x, int64_t n, void *out) { (void)x; (void)n; (void)out; abort(); }
void mu__quantize_q4_0(const float *x, int64_t n, void *out) { (void)x; (void)n; (void)out; abort(); }
const char *mu__kern_isa(void) { return "stub"; }
