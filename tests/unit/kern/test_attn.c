/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for attention's reads of a KV cache (src/kern/attn.c,
 * kern/attn_avx2.c), for each type a cache is kept in (F32, F16, Q8_0):
 *   - the tables: every instruction set's fills the same entries, and
 *     mu__attn_has says which;
 *   - the definition (kern/kern_int.h): the portable dot equals the eight
 *     fma lanes and their fixed reduction written out here, and the mix
 *     the fma chain position by position; both are near a double sum;
 *   - the determinism contract: every instruction set (AVX2, and AVX2
 *     with VNNI, which runs the same reads, where the CPU has them) gives
 *     the portable bits, over head dims 3 to 256 and 1 to 1000 positions,
 *     with NaNs, infinities, subnormals and negative zeros among the
 *     elements and the scales; and a call over positions [0, n) equals
 *     calls over [0, a) and [a, n), so a prefill equals its tokens
 *     decoded one by one. Each chain holds one NaN at most: when two meet
 *     in one operation, which comes out is the instruction's choice.
 */
#include <math.h>
#include <stdio.h>

#include "mu_test.h"

#include "kern/attn_int.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

/* uniform in [-1, 1) */
static float rndf(void)
{
	return (float)((double)rnd32() / 2147483648.0 - 1.0);
}

static const mu__wtype_t kv_types[] = {MU__WT_F32, MU__WT_F16, MU__WT_Q8_0};

/* The instruction sets this build and CPU run, portable first; their count. */
static int isas_here(const char *out[3])
{
	static const char *const all[] = {"portable", "avx2", "avx2-vnni"};
	int n = 0;

	for (int i = 0; i < 3; i++)
		if (mu__kern_isa_by_name(all[i]) != NULL)
			out[n++] = all[i];
	return n;
}

/* ---- a cache ---- */

/* n positions of one head of hd elements in type t, each in a row of
 * stride bytes at byte `skew` (so rows start unaligned), with the f32
 * values they stand for (what every read must see) in val[n][hd]. */
typedef struct {
	mu__wtype_t t;
	int64_t n;
	int32_t hd;
	size_t stride;
	unsigned char *mem, *kv;
	float *val;
} cache_t;

/* Special values in rows 3, 8, 13 and 18, one a row (see the file
 * comment): a subnormal or -0, a NaN, an infinity (for Q8_0 a block of
 * them: its q are made nonzero, for no inf * 0), a subnormal or -0. */
static void specials(cache_t *c)
{
	for (int64_t j = 3; j < c->n && j < 20; j += 5) {
		unsigned char *r = c->kv + (size_t)j * c->stride;
		int32_t e = (int32_t)(rnd32() % (uint32_t)c->hd);
		uint16_t h;

		if (c->t == MU__WT_F32) {
			float v = j % 4 == 0 ? NAN : j % 4 == 1 ? INFINITY : j % 4 == 2 ? -0.0f : 1e-41f;

			memcpy(r + 4 * e, &v, 4);
		} else if (c->t == MU__WT_F16) {
			/* a NaN with a payload, -inf, a subnormal, -0 */
			h = j % 4 == 0 ? 0x7e15 : j % 4 == 1 ? 0xfc00 : j % 4 == 2 ? 0x0003 : 0x8000;
			memcpy(r + 2 * e, &h, 2);
		} else {
			/* a block's scale: NaN, inf, subnormal, or an element -0's q */
			unsigned char *b = r + (size_t)(e / 32) * 34;

			h = j % 4 == 0 ? 0xfe01 : j % 4 == 1 ? 0x7c00 : j % 4 == 2 ? 0x0201 : 0;
			if (h != 0)
				memcpy(b, &h, 2);
			else
				b[2 + e % 32] = 0;
			for (int k = 0; h == 0x7c00 && k < 32; k++)
				b[2 + k] = b[2 + k] ? b[2 + k] : 1;
		}
	}
}

static void cache_make(cache_t *c, mu__wtype_t t, int64_t n, int32_t hd, int with_specials)
{
	size_t rb = mu__wtype_row_bytes(t, hd), skew = 2 + rnd32() % 3 * 34;
	float *x = malloc(sizeof(float) * (size_t)hd);

	assert_true(rb != 0);
	c->t = t;
	c->n = n;
	c->hd = hd;
	c->stride = rb + skew + 34 * (rnd32() % 3); /* other heads' bytes between */
	c->mem = malloc(c->stride * (size_t)n + skew);
	c->kv = c->mem + skew;
	c->val = malloc(sizeof(float) * (size_t)(n * hd));
	assert_non_null(x);
	assert_non_null(c->mem);
	assert_non_null(c->val);
	memset(c->mem, 0xa5, c->stride * (size_t)n + skew);
	for (int64_t j = 0; j < n; j++) {
		float scale = ldexpf(1.0f, (int)(rnd32() % 12) - 6);

		for (int32_t e = 0; e < hd; e++)
			x[e] = rndf() * scale;
		mu__wtypes[t].from_f32(x, hd, c->kv + (size_t)j * c->stride);
	}
	if (with_specials)
		specials(c);
	for (int64_t j = 0; j < n; j++)
		mu__wtypes[t].to_f32(c->kv + (size_t)j * c->stride, hd, c->val + j * hd);
	free(x);
}

static void cache_free(cache_t *c)
{
	free(c->mem);
	free(c->val);
}

/* ---- the definition, written out ---- */

static float def_dot(const float *q, const float *k, int32_t hd)
{
	float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};

	for (int32_t g = 0; g < (hd + 7) / 8; g++)
		for (int l = 0; l < 8; l++) {
			int32_t e = 8 * g + l;

			acc[l] = fmaf(e < hd ? q[e] : 0.0f, e < hd ? k[e] : 0.0f, acc[l]);
		}
	return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

static int same(const float *a, const float *b, int64_t n)
{
	return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

static void test_tables(void **state)
{
	const char *isas[3];
	int nisa = isas_here(isas);

	(void)state;
	for (int t = 0; t < MU__WT_COUNT; t++) {
		int want = t == MU__WT_F32 || t == MU__WT_F16 || t == MU__WT_Q8_0;

		assert_int_equal(mu__attn_has((mu__wtype_t)t), want);
		assert_int_equal(mu__attn_portable.dot[t] != NULL, want);
		assert_int_equal(mu__attn_portable.mix[t] != NULL, want);
	}
	assert_int_equal(mu__attn_has(MU__WT_COUNT), 0);
	for (int is = 0; is < nisa; is++) {
		const mu__attn_isa_t *a;

		assert_int_equal(mu__kern_force_isa(isas[is]), 0);
		a = mu__attn_get();
		assert_string_equal(a->name, is == 0 ? "portable" : "avx2");
		for (int t = 0; t < MU__WT_COUNT; t++) {
			assert_int_equal(a->dot[t] != NULL, mu__attn_portable.dot[t] != NULL);
			assert_int_equal(a->mix[t] != NULL, mu__attn_portable.mix[t] != NULL);
		}
	}
	assert_int_equal(mu__kern_force_isa(NULL), 0);
}

/* The portable reads against the definition (bit for bit) and a double
 * sum (near), on finite values. */
static void test_definition(void **state)
{
	static const int32_t hds[] = {1, 3, 8, 12, 32, 64, 80, 128};

	(void)state;
	assert_int_equal(mu__kern_force_isa("portable"), 0);
	for (size_t ti = 0; ti < 3; ti++)
		for (size_t hi = 0; hi < sizeof(hds) / sizeof(hds[0]); hi++) {
			mu__wtype_t t = kv_types[ti];
			int32_t hd = hds[hi];
			int64_t n = 37;
			cache_t c;
			float q[128], s[37], o[128], want[128], p[37];

			if (hd % mu__wtypes[t].block != 0)
				continue;
			cache_make(&c, t, n, hd, 0);
			for (int32_t e = 0; e < hd; e++)
				q[e] = rndf() * 3;
			for (int64_t j = 0; j < n; j++)
				p[j] = fabsf(rndf()) / (float)n;
			mu__attn_dot(t, q, c.kv, c.stride, n, hd, s);
			for (int64_t j = 0; j < n; j++) {
				double ref = 0, mag = 0;

				if (s[j] != def_dot(q, c.val + j * hd, hd))
					fail_msg("%s hd %d position %lld: %.9g, the definition gives %.9g",
					         mu__wtype_name(t), hd, (long long)j, s[j],
					         def_dot(q, c.val + j * hd, hd));
				for (int32_t e = 0; e < hd; e++) {
					ref += (double)q[e] * c.val[j * hd + e];
					mag += fabs((double)q[e] * c.val[j * hd + e]);
				}
				assert_true(fabs(s[j] - ref) <= 1.2e-7 * (hd / 8.0 + 4) * mag + 1e-30);
			}
			for (int32_t e = 0; e < hd; e++)
				o[e] = want[e] = rndf();
			mu__attn_mix(t, p, c.kv, c.stride, n, hd, o);
			for (int32_t e = 0; e < hd; e++) {
				double ref = want[e], mag = fabs(want[e]);

				for (int64_t j = 0; j < n; j++) {
					want[e] = fmaf(p[j], c.val[j * hd + e], want[e]);
					ref += (double)p[j] * c.val[j * hd + e];
					mag += fabs((double)p[j] * c.val[j * hd + e]);
				}
				assert_true(fabs(o[e] - ref) <= 1.2e-7 * (double)(n + 1) * mag + 1e-30);
			}
			if (!same(o, want, hd))
				fail_msg("%s hd %d: the mix is not the definition's fma chain",
				         mu__wtype_name(t), hd);
			cache_free(&c);
		}
	assert_int_equal(mu__kern_force_isa(NULL), 0);
}

/* One (type, hd, n): every instruction set's bits against the portable
 * ones, whole and in two calls split at a. */
static void check_isas(mu__wtype_t t, int32_t hd, int64_t n, const char *const *isas, int nisa)
{
	cache_t c;
	float *q = malloc(sizeof(float) * (size_t)hd), *p = malloc(sizeof(float) * (size_t)n);
	float *s0 = malloc(sizeof(float) * (size_t)n), *s = malloc(sizeof(float) * (size_t)n);
	float *o0 = malloc(sizeof(float) * (size_t)hd), *o = malloc(sizeof(float) * (size_t)hd);
	float *init = malloc(sizeof(float) * (size_t)hd);
	int64_t a = n > 1 ? (int64_t)(rnd32() % (uint32_t)n) : 0;

	assert_true(q && p && s0 && s && o0 && o && init);
	cache_make(&c, t, n, hd, 1);
	for (int32_t e = 0; e < hd; e++) {
		q[e] = rndf() * 2;
		init[e] = e % 7 == 0 ? -0.0f : rndf();
	}
	for (int64_t j = 0; j < n; j++)
		p[j] = j % 9 == 4 ? 0.0f : rndf() / (float)n; /* negative ones too */
	assert_int_equal(mu__kern_force_isa("portable"), 0);
	mu__attn_dot(t, q, c.kv, c.stride, n, hd, s0);
	memcpy(o0, init, sizeof(float) * (size_t)hd);
	mu__attn_mix(t, p, c.kv, c.stride, n, hd, o0);
	for (int is = 0; is < nisa; is++) {
		assert_int_equal(mu__kern_force_isa(isas[is]), 0);
		memset(s, 0xff, sizeof(float) * (size_t)n);
		mu__attn_dot(t, q, c.kv, c.stride, n, hd, s);
		if (!same(s, s0, n))
			fail_msg("%s hd %d, %lld positions: the %s dot differs from the portable one",
			         mu__wtype_name(t), hd, (long long)n, isas[is]);
		memcpy(o, init, sizeof(float) * (size_t)hd);
		mu__attn_mix(t, p, c.kv, c.stride, n, hd, o);
		if (!same(o, o0, hd))
			fail_msg("%s hd %d, %lld positions: the %s mix differs from the portable one",
			         mu__wtype_name(t), hd, (long long)n, isas[is]);
		/* the same positions in two calls */
		memset(s, 0xff, sizeof(float) * (size_t)n);
		mu__attn_dot(t, q, c.kv, c.stride, a, hd, s);
		mu__attn_dot(t, q, c.kv + (size_t)a * c.stride, c.stride, n - a, hd, s + a);
		memcpy(o, init, sizeof(float) * (size_t)hd);
		mu__attn_mix(t, p, c.kv, c.stride, a, hd, o);
		mu__attn_mix(t, p + a, c.kv + (size_t)a * c.stride, c.stride, n - a, hd, o);
		if (!same(s, s0, n) || !same(o, o0, hd))
			fail_msg("%s hd %d, %lld positions split at %lld (%s): not the whole call's bits",
			         mu__wtype_name(t), hd, (long long)n, (long long)a, isas[is]);
	}
	cache_free(&c);
	free(q);
	free(p);
	free(s0);
	free(s);
	free(o0);
	free(o);
	free(init);
}

static void test_isas(void **state)
{
	static const int32_t hds[] = {3, 8, 12, 32, 64, 80, 96, 128, 136, 256};
	static const int64_t ns[] = {1, 2, 7, 8, 9, 15, 16, 17, 33, 100, 1000};
	const char *isas[3];
	int nisa = isas_here(isas);

	(void)state;
	if (nisa == 1)
		print_message("no AVX2 kernels here (CPU or build): portable against itself\n");
	for (size_t ti = 0; ti < 3; ti++)
		for (size_t hi = 0; hi < sizeof(hds) / sizeof(hds[0]); hi++)
			for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++)
				if (hds[hi] % mu__wtypes[kv_types[ti]].block == 0)
					check_isas(kv_types[ti], hds[hi], ns[ni], isas, nisa);
	assert_int_equal(mu__kern_force_isa(NULL), 0);
}

/* A NaN or an infinity in a key makes that position's score one, and
 * reaches the mix's elements it is in. */
static void test_specials(void **state)
{
	const char *isas[3];
	int nisa = isas_here(isas);

	(void)state;
	for (int is = 0; is < nisa; is++)
		for (size_t ti = 0; ti < 3; ti++) {
			mu__wtype_t t = kv_types[ti];
			cache_t c;
			float q[96], s[4], o[96], p[4] = {0.25f, 0.25f, 0.25f, 0.25f};

			assert_int_equal(mu__kern_force_isa(isas[is]), 0);
			cache_make(&c, t, 4, 96, 0);
			if (t == MU__WT_F32) {
				float nan = NAN, inf = INFINITY;

				memcpy(c.kv + 1 * c.stride + 4 * 5, &nan, 4);
				memcpy(c.kv + 2 * c.stride + 4 * 40, &inf, 4);
			} else if (t == MU__WT_F16) {
				uint16_t nan = 0x7e00, inf = 0x7c00;

				memcpy(c.kv + 1 * c.stride + 2 * 5, &nan, 2);
				memcpy(c.kv + 2 * c.stride + 2 * 40, &inf, 2);
			} else {
				uint16_t nan = 0x7e00, inf = 0x7c00; /* block 0's, block 1's d */

				memcpy(c.kv + 1 * c.stride, &nan, 2);
				memcpy(c.kv + 2 * c.stride + 34, &inf, 2);
				for (int k = 0; k < 32; k++) /* d * q = inf or -inf */
					c.kv[2 * c.stride + 34 + 2 + k] |= 1;
			}
			for (int e = 0; e < 96; e++)
				q[e] = 1.0f + (float)e / 96;
			mu__attn_dot(t, q, c.kv, c.stride, 4, 96, s);
			assert_true(isfinite(s[0]) && isnan(s[1]) && isfinite(s[3]));
			assert_true(t == MU__WT_Q8_0 ? !isfinite(s[2]) : isinf(s[2]) && s[2] > 0);
			memset(o, 0, sizeof(o));
			mu__attn_mix(t, p, c.kv, c.stride, 4, 96, o);
			assert_true(isnan(o[5]) && isfinite(o[70]));
			assert_true(!isfinite(o[40]));
			cache_free(&c);
		}
	assert_int_equal(mu__kern_force_isa(NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tables),
		cmocka_unit_test(test_definition),
		cmocka_unit_test(test_isas),
		cmocka_unit_test(test_specials),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
