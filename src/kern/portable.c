/* SPDX-License-Identifier: MIT */
/*
 * The portable kernels: plain C that performs, for every output element,
 * exactly the operations kern/isa_int.h defines, with fmaf for each lane's
 * fused multiply-add. They are the reference the AVX2 kernels must equal
 * bit for bit, and the path on any CPU without AVX2. Built with
 * -ffp-contract=off so the compiler fuses nothing on its own.
 *
 * Speed matters less here than being obviously the definition, so there is
 * no register blocking: one output element at a time.
 */
#include "kern/isa_int.h"

/* One weight row's k-th group of eight, as f32 (zeros past cols). */
static void load8(mu__wtype_t t, const unsigned char *w, int64_t k, int64_t cols, float v[8])
{
	for (int l = 0; l < 8; l++) {
		int64_t kk = k + l;

		if (kk >= cols)
			v[l] = 0.0f;
		else if (t == MU__WT_F32)
			v[l] = mu__ldf(w + 4 * kk);
		else if (t == MU__WT_F16)
			v[l] = mu__h2f(mu__ld16(w + 2 * kk));
		else
			v[l] = mu__bf2f(mu__ld16(w + 2 * kk));
	}
}

static void mm_float(const mu__mm_job_t *j, int64_t r0, int64_t r1)
{
	const mu__wmat_t *w = j->w;
	int64_t cols = w->cols;
	size_t rb = mu__wtype_row_bytes(w->type, cols);

	for (int64_t r = r0; r < r1; r++) {
		const unsigned char *wr = (const unsigned char *)w->data + (size_t)r * rb;

		for (int64_t i = 0; i < j->n; i++) {
			const float *x = j->x + i * cols;
			float acc[8] = {0}, wv[8], s;

			for (int64_t k = 0; k < cols; k += 8) {
				load8(w->type, wr, k, cols, wv);
				for (int l = 0; l < 8; l++)
					acc[l] = fmaf(wv[l], k + l < cols ? x[k + l] : 0.0f, acc[l]);
			}
			s = mu__hsum8(acc);
			j->y[i * w->rows + r] = j->bias ? s + j->bias[r] : s;
		}
	}
}

/* The 32 quants of one weight block, in element order. */
static float wblock(mu__wtype_t t, const unsigned char *b, int8_t q[32])
{
	if (t == MU__WT_Q8_0) {
		memcpy(q, b + 2, 32);
	} else {
		for (int e = 0; e < 16; e++) {
			q[e] = (int8_t)((b[2 + e] & 15) - 8);
			q[e + 16] = (int8_t)((b[2 + e] >> 4) - 8);
		}
	}
	return mu__h2f(mu__ld16(b));
}

static void mm_quant(const mu__mm_job_t *j, int64_t r0, int64_t r1)
{
	const mu__wmat_t *w = j->w;
	int64_t cols = w->cols, nb = cols / MU__QBLOCK;
	size_t rb = mu__wtype_row_bytes(w->type, cols), bb = rb / (size_t)nb;

	for (int64_t r = r0; r < r1; r++) {
		const unsigned char *wr = (const unsigned char *)w->data + (size_t)r * rb;

		for (int64_t i = 0; i < j->n; i++) {
			const int8_t *xq = j->xq + i * cols;
			const float *xd = j->xd + i * nb;
			float acc[8] = {0}, s;

			for (int64_t b = 0; b < nb; b++) {
				int8_t q[32];
				float d = wblock(w->type, wr + (size_t)b * bb, q) * xd[b];

				for (int l = 0; l < 8; l++) {
					int32_t sum = 0;

					for (int m = 0; m < 4; m++)
						sum += (int32_t)q[4 * l + m] * xq[b * 32 + 4 * l + m];
					acc[l] = fmaf(d, (float)sum, acc[l]);
				}
			}
			s = mu__hsum8(acc);
			j->y[i * w->rows + r] = j->bias ? s + j->bias[r] : s;
		}
	}
}

static void quant_row(const float *x, int64_t cols, int8_t *q, float *d)
{
	for (int64_t b = 0; b < cols / MU__QBLOCK; b++) {
		uint16_t dh;

		mu__q8_block(x + b * MU__QBLOCK, q + b * MU__QBLOCK, &dh);
		d[b] = mu__h2f(dh);
	}
}

const mu__kern_isa_t mu__kern_portable = {
	"portable",
	{mm_float, mm_float, mm_float, mm_quant, mm_quant},
	quant_row,
};
