/* SPDX-License-Identifier: MIT */
/*
 * The portable products of the K-quants and IQ4_XS against Q8_K
 * activations: plain C doing exactly what kern/isa_int.h defines for
 * superblocks, one output element at a time. Each type reduces to one
 * unpacking of a superblock into its integer quants, a scale and a min
 * per 16 elements (a scale of 32 elements is given to both its halves,
 * which changes no integer sum) and its two f16 scales; the loop over
 * superblocks is shared. The reference the AVX2 kernels (kern/avx2_k.c) must
 * equal bit for bit. Built with -ffp-contract=off.
 */
#include "kern/isa_int.h"

/* A superblock unpacked: q in element order, the scale and min of each
 * 16 elements (mn all 0 for the types without mins). */
typedef struct {
	int8_t q[256];
	int16_t sc[16], mn[16];
	float d, dmin;
} sblk_t;

typedef void (*unpack_fn)(const unsigned char *b, sblk_t *u);

static void up_q2_k(const unsigned char *b, sblk_t *u)
{
	for (int e = 0; e < 256; e++)
		u->q[e] = (int8_t)((b[16 + (e / 128) * 32 + e % 32] >> (2 * ((e / 32) % 4))) & 3);
	for (int g = 0; g < 16; g++) {
		u->sc[g] = (int16_t)(b[g] & 15);
		u->mn[g] = (int16_t)(b[g] >> 4);
	}
	u->d = mu__h2f(mu__ld16(b + 80));
	u->dmin = mu__h2f(mu__ld16(b + 82));
}

static void up_q3_k(const unsigned char *b, sblk_t *u)
{
	int sc[16];

	for (int e = 0; e < 256; e++) {
		int l = e % 32, sh = (e / 32) % 4, hb = (e / 128) * 4 + sh;

		u->q[e] = (int8_t)(((b[32 + (e / 128) * 32 + l] >> (2 * sh)) & 3) -
		                   ((b[l] >> hb) & 1 ? 0 : 4));
	}
	mu__k3_scales(b + 96, sc);
	for (int g = 0; g < 16; g++) {
		u->sc[g] = (int16_t)sc[g];
		u->mn[g] = 0;
	}
	u->d = mu__h2f(mu__ld16(b + 108));
	u->dmin = 0;
}

/* Q4_K and Q5_K: element 64j + l + 32h is nibble h of qs[32j + l]. */
static void up_k45(const unsigned char *b, sblk_t *u, int q5)
{
	const unsigned char *qs = b + (q5 ? 48 : 16);

	for (int sb = 0; sb < 8; sb++) {
		int sc, mn;

		mu__k4_scale_min(b + 4, sb, &sc, &mn);
		u->sc[2 * sb] = u->sc[2 * sb + 1] = (int16_t)sc;
		u->mn[2 * sb] = u->mn[2 * sb + 1] = (int16_t)mn;
		for (int l = 0; l < 32; l++)
			u->q[32 * sb + l] = (int8_t)(((qs[32 * (sb / 2) + l] >> (4 * (sb % 2))) & 15) +
			                             (q5 && (b[16 + l] >> sb) & 1 ? 16 : 0));
	}
	u->d = mu__h2f(mu__ld16(b));
	u->dmin = mu__h2f(mu__ld16(b + 2));
}

static void up_q4_k(const unsigned char *b, sblk_t *u)
{
	up_k45(b, u, 0);
}

static void up_q5_k(const unsigned char *b, sblk_t *u)
{
	up_k45(b, u, 1);
}

static void up_q6_k(const unsigned char *b, sblk_t *u)
{
	for (int e = 0; e < 256; e++)
		u->q[e] = (int8_t)mu__q6_k_quant(b, e);
	for (int g = 0; g < 16; g++) {
		u->sc[g] = (int8_t)b[192 + g];
		u->mn[g] = 0;
	}
	u->d = mu__h2f(mu__ld16(b + 208));
	u->dmin = 0;
}

static void up_iq4_xs(const unsigned char *b, sblk_t *u)
{
	for (int ib = 0; ib < 8; ib++) {
		u->sc[2 * ib] = u->sc[2 * ib + 1] = (int16_t)mu__iq4xs_scale(b, ib);
		u->mn[2 * ib] = u->mn[2 * ib + 1] = 0;
		for (int j = 0; j < 16; j++) {
			u->q[32 * ib + j] = mu__iq4nl_values[b[8 + 16 * ib + j] & 15];
			u->q[32 * ib + 16 + j] = mu__iq4nl_values[b[8 + 16 * ib + j] >> 4];
		}
	}
	u->d = mu__h2f(mu__ld16(b));
	u->dmin = 0;
}

/* The shared loop: kern/isa_int.h's superblock arithmetic. */
static void mm_kq(const mu__mm_job_t *j, int64_t r0, int64_t r1, unpack_fn up, int mins)
{
	const mu__wmat_t *w = j->w;
	int64_t nb = w->cols / 256;
	size_t rb = mu__wtype_row_bytes(w->type, w->cols), bb = rb / (size_t)nb;

	for (int64_t r = r0; r < r1; r++) {
		const unsigned char *wr = (const unsigned char *)w->data + (size_t)r * rb;

		for (int64_t i = 0; i < j->n; i++) {
			const unsigned char *xb = j->xa + (size_t)i * j->xa_row;
			float acc = 0, accm = 0, s;

			for (int64_t b = 0; b < nb; b++, xb += MU__Q8K_BYTES) {
				const int8_t *xq = (const int8_t *)(xb + 4);
				float dx = mu__ldf(xb);
				int32_t sum = 0, m = 0;
				sblk_t u;

				up(wr + (size_t)b * bb, &u);
				for (int k = 0; k < 256; k++)
					sum += (int32_t)u.sc[k / 16] * u.q[k] * xq[k];
				acc = fmaf(u.d * dx, (float)sum, acc);
				if (!mins)
					continue;
				for (int g = 0; g < 16; g++)
					m += (int32_t)u.mn[g] * (int16_t)mu__ld16(xb + 260 + 2 * g);
				accm = fmaf(u.dmin * dx, (float)-m, accm);
			}
			s = acc + accm;
			j->y[i * w->rows + r] = j->bias ? s + j->bias[r] : s;
		}
	}
}

#define KQ_MM(t, mins)                                                      \
	void mu__mm_##t##_portable(const mu__mm_job_t *j, int64_t r0, int64_t r1) \
	{                                                                          \
		mm_kq(j, r0, r1, up_##t, mins);                                    \
	}
KQ_MM(q2_k, 1)
KQ_MM(q3_k, 0)
KQ_MM(q4_k, 1)
KQ_MM(q5_k, 1)
KQ_MM(q6_k, 0)
KQ_MM(iq4_xs, 0)
