/* SPDX-License-Identifier: MIT */
/*
 * Pooling over 1 to 3 spatial dims (ONNX MaxPool, with its Indices, and
 * AveragePool): per output position, the window's taps inside the input
 * (computed once per run for each dim) are read directly; padding never
 * wins a max and counts toward an average only with count_include_pad.
 */
#include <math.h>
#include <string.h>

#include "core/alloc_int.h"
#include "graph/conv_int.h"

/* ---- maxpool (with optional I64 indices), avgpool ---- */

static int pool_geom(const mu__node_t *n, const mu__shape_t *x, mu__geom_t *g)
{
	int64_t ks[3];
	uint64_t kd[3];
	int k = (int)x->rank - 2;

	if (k < 1 || k > 3 || mu__conv_ints(n, "kernel_shape", k, -1, ks) != 0)
		return MU_EPROTO;
	for (int i = 0; i < k; i++) {
		if (ks[i] < 1)
			return MU_EPROTO;
		kd[i] = (uint64_t)ks[i];
	}
	if (mu__conv_geometry(n, x, kd, mu__attr_int(n, "ceil_mode", 0) != 0, g) != 0)
		return MU_EPROTO;
	g->m = g->c;
	return 0;
}

static int pool_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                      size_t wl)
{
	mu__geom_t g;

	if (in[0].dtype != MU_DTYPE_F32) /* maxpool is typed for its indices */
		return mu__fail(why, wl, "node %.100s: %s computes in F32, and %.100s is not", n->name,
		                n->op->name, n->in[0]);
	if (pool_geom(n, &in[0], &g) != 0)
		return mu__fail(why, wl, "node %.100s: kernel_shape, strides, pads or dilations do not fit %.100s",
		                n->name, n->in[0]);
	mu__conv_out_shape(&g, g.c, &out[0]);
	if (n->nout == 2) {
		out[1] = out[0];
		out[1].dtype = MU_DTYPE_I64;
	}
	return 0;
}

/*
 * Per spatial dim and output index: the window's first and last kernel tap
 * inside the input, its first tap (for the position), and how many taps
 * the average divides by (inside the input, or, with include_pad, inside
 * the padded extent). Computed once per run, not per window.
 */
typedef struct {
	int64_t k0, k1, base, count;
} span_t;

static span_t *spans(const mu__geom_t *g, int include_pad)
{
	span_t *t = mu__calloc((size_t)(g->out[0] + g->out[1] + g->out[2]) + 1, sizeof(*t)), *p = t;

	for (int d = 0; t != NULL && d < 3; d++)
		for (uint64_t o = 0; o < g->out[d]; o++, p++) {
			int64_t p0, p1;

			p->base = (int64_t)o * g->str[d] - g->pad[d];
			mu__krange(p->base, g->dil[d], g->ker[d], 0, (int64_t)g->in[d], &p->k0, &p->k1);
			mu__krange(p->base, g->dil[d], g->ker[d], -g->pad[d], (int64_t)g->in[d] + g->pend[d], &p0, &p1);
			p->count = include_pad ? p1 - p0 : p->k1 - p->k0;
		}
	return t;
}

/* The row of window taps (a, b) of plane src reads. */
static const float *tap_row(const mu__geom_t *g, const float *src, const span_t *const *sp, int64_t a,
                            int64_t b)
{
	return src + ((uint64_t)(sp[0]->base + a * g->dil[0]) * g->in[1] +
	              (uint64_t)(sp[1]->base + b * g->dil[1])) * g->in[2];
}

/* One window's max: a branch-free maximum, NaN carried on the side (a
 * NaN anywhere makes the max NaN, as numpy's). at: where the max is (only
 * when the caller wants indices; NULL otherwise, the fast path). */
static float window_max(const mu__geom_t *g, const float *src, const span_t *const *sp, uint64_t *at)
{
	float acc = -INFINITY;
	int nan = 0;

	for (int64_t a = sp[0]->k0; a < sp[0]->k1; a++)
		for (int64_t b = sp[1]->k0; b < sp[1]->k1; b++) {
			const float *line = tap_row(g, src, sp, a, b);

			for (int64_t c = sp[2]->k0; c < sp[2]->k1; c++) {
				uint64_t i2 = (uint64_t)(sp[2]->base + c * g->dil[2]);
				float v = line[i2];

				if (at != NULL && !nan && (v > acc || v != v)) /* the first NaN stays */
					*at = (uint64_t)(line - src) + i2;
				nan |= v != v;
				acc = v > acc ? v : acc;
			}
		}
	return nan ? NAN : acc;
}

static float window_avg(const mu__geom_t *g, const float *src, const span_t *const *sp)
{
	float acc = 0.0f;

	for (int64_t a = sp[0]->k0; a < sp[0]->k1; a++)
		for (int64_t b = sp[1]->k0; b < sp[1]->k1; b++) {
			const float *line = tap_row(g, src, sp, a, b);

			for (int64_t c = sp[2]->k0; c < sp[2]->k1; c++)
				acc += line[sp[2]->base + c * g->dil[2]];
		}
	return acc / (float)(sp[0]->count * sp[1]->count * sp[2]->count);
}

static int pool_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	int maxp = strcmp(n->op->name, "maxpool") == 0;
	int incl = mu__attr_int(n, "count_include_pad", 0) != 0, colmajor = mu__attr_int(n, "storage_order", 0) != 0;
	uint64_t pos, inpl;
	span_t *table;
	mu__shape_t s;
	mu__geom_t g;

	mu__shape_of(in[0], &s);
	if (pool_geom(n, &s, &g) != 0)
		return MU_EPROTO;
	if ((table = spans(&g, incl)) == NULL)
		return MU_ENOMEM;
	pos = mu__prod3(g.out);
	inpl = mu__prod3(g.in);
	for (uint64_t p = 0; p < g.n * g.c; p++) {
		const float *src = in[0]->data + p * inpl;
		uint64_t q = 0;

		for (uint64_t o0 = 0; o0 < g.out[0]; o0++)
			for (uint64_t o1 = 0; o1 < g.out[1]; o1++)
				for (uint64_t o2 = 0; o2 < g.out[2]; o2++, q++) {
					const span_t *sp[3] = {table + o0, table + g.out[0] + o1,
					                       table + g.out[0] + g.out[1] + o2};
					uint64_t at = 0;

					out[0]->data[p * pos + q] = !maxp ? window_avg(&g, src, sp)
					                            : window_max(&g, src, sp, n->nout == 2 ? &at : NULL);
					if (n->nout == 2) { /* index in the whole input, row or column major */
						uint64_t h = at / (g.in[1] * g.in[2]), r = at / g.in[2] % g.in[1];
						uint64_t c = at % g.in[2];

						if (colmajor) /* spatial dims reversed: the last varies slowest */
							at = (c * g.in[1] + r) * g.in[0] + h;
						((int64_t *)out[1]->raw)[p * pos + q] = (int64_t)(p * inpl + at);
					}
				}
	}
	mu__free(table);
	return 0;
}

static double pool_flops(const mu__node_t *n, const mu__shape_t *in, const mu__shape_t *out)
{
	int64_t ks[3] = {1, 1, 1};
	double k = 1;

	(void)in;
	mu__conv_ints(n, "kernel_shape", (int)out[0].rank - 2, 1, ks);
	for (uint32_t i = 0; i + 2 < out[0].rank && i < 3; i++)
		k *= (double)ks[i];
	return k * (double)mu__shape_numel(&out[0]);
}

const mu__op_t mu__op_maxpool = {"maxpool", 1, 1, 2, mu__conv_check, pool_shape, pool_run, pool_flops, 1, 1, NULL};
const mu__op_t mu__op_avgpool = {"avgpool", 1, 1, 1, mu__conv_check, pool_shape, pool_run, pool_flops, 0, 0, NULL};
