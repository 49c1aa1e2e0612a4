/* SPDX-License-Identifier: MIT */
/*
 * Attention's reads of a KV cache (kern/kern_int.h's mu__attn_dot and
 * mu__attn_mix, which define their arithmetic): the front, which picks
 * the instruction set's table (kern/attn_int.h), and the portable reads,
 * plain C with fmaf for each fused multiply-add, one element at a time.
 * They are the definition the AVX2 reads of kern/attn_avx2.c must equal
 * bit for bit, and the path on any CPU without AVX2. Built with
 * -ffp-contract=off, so the compiler fuses nothing on its own. What the
 * scores become (the scale, the softmax) is the decoder's (llm/ops.c).
 */
#include <assert.h>

#include "kern/attn_int.h"

/* Element e of a cache row of type t, exactly as f32. */
static inline float elem(mu__wtype_t t, const unsigned char *r, int32_t e)
{
	const unsigned char *b;

	if (t == MU__WT_F32)
		return mu__ldf(r + 4 * (size_t)e);
	if (t == MU__WT_F16)
		return mu__h2f(mu__ld16(r + 2 * (size_t)e));
	b = r + (size_t)(e / MU__QBLOCK) * 34; /* Q8_0: f16 d, 32 int8 */
	return mu__h2f(mu__ld16(b)) * (float)(int8_t)b[2 + e % MU__QBLOCK];
}

static inline void dot_rows(mu__wtype_t t, const float *q, const unsigned char *kv,
                            size_t stride, int64_t n, int32_t hd, float *s)
{
	for (int64_t j = 0; j < n; j++) {
		const unsigned char *r = kv + (size_t)j * stride;
		float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
		int32_t e = 0;

		for (; e < hd; e++)
			acc[e & 7] = fmaf(q[e], elem(t, r, e), acc[e & 7]);
		for (; e & 7; e++) /* the last group's lanes past hd: 0 * 0 */
			acc[e & 7] = fmaf(0.0f, 0.0f, acc[e & 7]);
		s[j] = mu__hsum8(acc);
	}
}

static inline void mix_rows(mu__wtype_t t, const float *p, const unsigned char *kv,
                            size_t stride, int64_t n, int32_t hd, float *o)
{
	for (int64_t j = 0; j < n; j++) {
		const unsigned char *r = kv + (size_t)j * stride;

		for (int32_t e = 0; e < hd; e++)
			o[e] = fmaf(p[j], elem(t, r, e), o[e]);
	}
}

/* One function per type, so that elem's test of t goes at compile time. */
#define READS(T, t)                                                                        \
	static void dot_##t(const float *q, const unsigned char *kv, size_t stride, int64_t n, \
	                    int32_t hd, float *s)                                             \
	{                                                                                      \
		dot_rows(T, q, kv, stride, n, hd, s);                                              \
	}                                                                                      \
	static void mix_##t(const float *p, const unsigned char *kv, size_t stride, int64_t n, \
	                    int32_t hd, float *o)                                             \
	{                                                                                      \
		mix_rows(T, p, kv, stride, n, hd, o);                                              \
	}
READS(MU__WT_F32, f32)
READS(MU__WT_F16, f16)
READS(MU__WT_Q8_0, q8_0)

const mu__attn_isa_t mu__attn_portable = {
    "portable",
    {[MU__WT_F32] = dot_f32, [MU__WT_F16] = dot_f16, [MU__WT_Q8_0] = dot_q8_0},
    {[MU__WT_F32] = mix_f32, [MU__WT_F16] = mix_f16, [MU__WT_Q8_0] = mix_q8_0},
};

/* ---- the front ---- */

const mu__attn_isa_t *mu__attn_get(void)
{
#if defined(MU_HAVE_KERN_AVX2)
	/* every table but the portable one runs on AVX2+FMA+F16C */
	if (mu__kern_get() != &mu__kern_portable)
		return &mu__attn_avx2;
#endif
	return &mu__attn_portable;
}

int mu__attn_has(mu__wtype_t t)
{
	return (unsigned)t < MU__WT_COUNT && mu__attn_portable.dot[t] != NULL;
}

void mu__attn_dot(mu__wtype_t t, const float *q, const void *kv, size_t stride, int64_t n,
                  int32_t hd, float *s)
{
	assert(mu__attn_has(t) && hd > 0 && (t != MU__WT_Q8_0 || hd % MU__QBLOCK == 0));
	if (n > 0)
		mu__attn_get()->dot[t](q, kv, stride, n, hd, s);
}

void mu__attn_mix(mu__wtype_t t, const float *p, const void *kv, size_t stride, int64_t n,
                  int32_t hd, float *o)
{
	assert(mu__attn_has(t) && hd > 0 && (t != MU__WT_Q8_0 || hd % MU__QBLOCK == 0));
	if (n > 0)
		mu__attn_get()->mix[t](p, kv, stride, n, hd, o);
}
