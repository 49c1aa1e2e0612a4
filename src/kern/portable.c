/* SPDX-License-Identifier: MIT */
/*
 * The portable kernels: plain C that performs, for every output element,
 * exactly the operations kern/isa_int.h defines, with fmaf for each
 * fused multiply-add. They are the reference the AVX2 kernels must equal
 * bit for bit, and the path on any CPU without AVX2. Built with
 * -ffp-contract=off so the compiler fuses nothing on its own.
 *
 * Speed matters less here than being obviously the definition, so there is
 * no register blocking: one output element at a time.
 */
#include "kern/isa_int.h"

/* One weight of a float type, exactly as f32. */
typedef float (*elem_fn)(const unsigned char *row, int64_t k);
/* One block of a 32-element type: its 32 integer quants in element order
 * (signed for the types of Q8_0 activations, the unsigned q of x = d*q + m
 * for those of Q8_1), its scale as the return value and, for the Q8_1
 * ones, its m at *m. */
typedef float (*block_fn)(const unsigned char *blk, int8_t q[32], float *m);

static float el_f32(const unsigned char *w, int64_t k)
{
	return mu__ldf(w + 4 * k);
}

static float el_f16(const unsigned char *w, int64_t k)
{
	return mu__h2f(mu__ld16(w + 2 * k));
}

static float el_bf16(const unsigned char *w, int64_t k)
{
	return mu__bf2f(mu__ld16(w + 2 * k));
}

static float blk_q8_0(const unsigned char *b, int8_t q[32], float *m)
{
	(void)m;
	memcpy(q, b + 2, 32);
	return mu__h2f(mu__ld16(b));
}

/* The 32 nibbles at qs (element j low in byte j, j + 16 high), plus off. */
static void nibbles(const unsigned char *qs, int off, int8_t q[32])
{
	for (int e = 0; e < 16; e++) {
		q[e] = (int8_t)((qs[e] & 15) + off);
		q[e + 16] = (int8_t)((qs[e] >> 4) + off);
	}
}

/* Adds the fifth bits (qh, bit j for element j) to q. */
static void fifth_bits(const unsigned char *qh, int8_t q[32])
{
	uint32_t h;

	memcpy(&h, qh, 4);
	for (int e = 0; e < 32; e++)
		q[e] = (int8_t)(q[e] + (int)(h >> e & 1) * 16);
}

static float blk_q4_0(const unsigned char *b, int8_t q[32], float *m)
{
	(void)m;
	nibbles(b + 2, -8, q);
	return mu__h2f(mu__ld16(b));
}

static float blk_q4_1(const unsigned char *b, int8_t q[32], float *m)
{
	nibbles(b + 4, 0, q);
	*m = mu__h2f(mu__ld16(b + 2));
	return mu__h2f(mu__ld16(b));
}

static float blk_q5_0(const unsigned char *b, int8_t q[32], float *m)
{
	(void)m;
	nibbles(b + 6, -16, q);
	fifth_bits(b + 2, q);
	return mu__h2f(mu__ld16(b));
}

static float blk_q5_1(const unsigned char *b, int8_t q[32], float *m)
{
	nibbles(b + 8, 0, q);
	fifth_bits(b + 4, q);
	*m = mu__h2f(mu__ld16(b + 2));
	return mu__h2f(mu__ld16(b));
}

static float blk_iq4_nl(const unsigned char *b, int8_t q[32], float *m)
{
	(void)m;
	for (int e = 0; e < 16; e++) {
		q[e] = mu__iq4nl_values[b[2 + e] & 15];
		q[e + 16] = mu__iq4nl_values[b[2 + e] >> 4];
	}
	return mu__h2f(mu__ld16(b));
}

/* A float type against f32 x: the lanes of kern/isa_int.h, zeros past cols. */
static void mm_float(const mu__mm_job_t *j, int64_t r0, int64_t r1, elem_fn el)
{
	const mu__wmat_t *w = j->w;
	int64_t cols = w->cols;
	size_t rb = mu__wtype_row_bytes(w->type, cols);

	for (int64_t r = r0; r < r1; r++) {
		const unsigned char *wr = (const unsigned char *)w->data + (size_t)r * rb;

		for (int64_t i = 0; i < j->n; i++) {
			const float *x = j->x + i * cols;
			float acc[8] = {0}, s;

			for (int64_t k = 0; k < cols; k += 8)
				for (int l = 0; l < 8; l++) {
					int in = k + l < cols;

					acc[l] = fmaf(in ? el(wr, k + l) : 0.0f, in ? x[k + l] : 0.0f, acc[l]);
				}
			s = mu__hsum8(acc);
			j->y[i * w->rows + r] = j->bias ? s + j->bias[r] : s;
		}
	}
}

/* A type of 32-element blocks against Q8_0 activations, or with mins
 * (mins = 1) against Q8_1 ones: one chain of fmas over the blocks. */
static void mm_q8act(const mu__mm_job_t *j, int64_t r0, int64_t r1, block_fn blk, int mins)
{
	const mu__wmat_t *w = j->w;
	int64_t cols = w->cols, nb = cols / MU__QBLOCK;
	size_t rb = mu__wtype_row_bytes(w->type, cols), bb = rb / (size_t)nb;

	for (int64_t r = r0; r < r1; r++) {
		const unsigned char *wr = (const unsigned char *)w->data + (size_t)r * rb;

		for (int64_t i = 0; i < j->n; i++) {
			const int8_t *xq = mu__xq(j, i);
			const float *xd = mu__xd(j, i), *xs = mins ? mu__xs(j, i) : NULL;
			float acc = 0, accm = 0, s;

			for (int64_t b = 0; b < nb; b++) {
				int8_t q[32];
				float mw = 0, d = blk(wr + (size_t)b * bb, q, &mw) * xd[b];
				int32_t sum = 0;

				for (int k = 0; k < 32; k++)
					sum += (int32_t)q[k] * xq[b * 32 + k];
				acc = fmaf(d, (float)sum, acc);
				if (mins)
					accm = fmaf(mw, xs[b], accm);
			}
			s = mins ? acc + accm : acc;
			j->y[i * w->rows + r] = j->bias ? s + j->bias[r] : s;
		}
	}
}

/* The table's kernels: each type's loader in the shared loop. */
#define FLOAT_MM(name, el) \
	static void name(const mu__mm_job_t *j, int64_t r0, int64_t r1) { mm_float(j, r0, r1, el); }
#define Q8ACT_MM(name, blk, mins) \
	static void name(const mu__mm_job_t *j, int64_t r0, int64_t r1) { mm_q8act(j, r0, r1, blk, mins); }
FLOAT_MM(mm_f32, el_f32)
FLOAT_MM(mm_f16, el_f16)
FLOAT_MM(mm_bf16, el_bf16)
Q8ACT_MM(mm_q8_0, blk_q8_0, 0)
Q8ACT_MM(mm_q4_0, blk_q4_0, 0)
Q8ACT_MM(mm_q4_1, blk_q4_1, 1)
Q8ACT_MM(mm_q5_0, blk_q5_0, 0)
Q8ACT_MM(mm_q5_1, blk_q5_1, 1)
Q8ACT_MM(mm_iq4_nl, blk_iq4_nl, 0)

/* x to Q8_0 activations: cols quants, then the cols/32 scales as f32. */
static void act_q8_0(const float *x, int64_t cols, void *out)
{
	int8_t *q = out;
	unsigned char *d = (unsigned char *)out + cols;

	for (int64_t b = 0; b < cols / MU__QBLOCK; b++) {
		uint16_t dh;
		float f;

		mu__q8_act_block(x + b * MU__QBLOCK, q + b * MU__QBLOCK, &dh);
		f = mu__h2f(dh);
		memcpy(d + 4 * b, &f, 4);
	}
}

/* x to Q8_1 activations: the Q8_0 row form, then the blocks' sums. */
static void act_q8_1(const float *x, int64_t cols, void *out)
{
	act_q8_0(x, cols, out);
	mu__q8_1_sums(x, cols, out);
}

const mu__kern_isa_t mu__kern_portable = {
	"portable",
	{
		[MU__WT_F32] = mm_f32,
		[MU__WT_F16] = mm_f16,
		[MU__WT_BF16] = mm_bf16,
		[MU__WT_Q8_0] = mm_q8_0,
		[MU__WT_Q4_0] = mm_q4_0,
		[MU__WT_Q4_1] = mm_q4_1,
		[MU__WT_Q5_0] = mm_q5_0,
		[MU__WT_Q5_1] = mm_q5_1,
		[MU__WT_IQ4_NL] = mm_iq4_nl,
		[MU__WT_Q2_K] = mu__mm_q2_k_portable,
		[MU__WT_Q3_K] = mu__mm_q3_k_portable,
		[MU__WT_Q4_K] = mu__mm_q4_k_portable,
		[MU__WT_Q5_K] = mu__mm_q5_k_portable,
		[MU__WT_Q6_K] = mu__mm_q6_k_portable,
		[MU__WT_IQ4_XS] = mu__mm_iq4_xs_portable,
	},
	{[MU__ACTFMT_Q8_0] = act_q8_0, [MU__ACTFMT_Q8_1] = act_q8_1, [MU__ACTFMT_Q8_K] = mu__act_q8_k},
};
