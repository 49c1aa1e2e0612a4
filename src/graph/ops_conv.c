/* SPDX-License-Identifier: MIT */
/*
 * Convolution over 1 to 3 spatial dims (ONNX Conv and ConvTranspose), and
 * the geometry the pools share (conv_int.h). Shapes are [N, C, spatial]
 * and 1-D and 2-D work as 3-D with leading spatial dims of 1.
 *
 * conv is im2col + one OpenBLAS sgemm per (image, group): the patches of
 * a group become the columns of a [C/g * kernel, out positions] matrix and
 * the group's filters multiply it. A 1x1 convolution with unit strides and
 * no padding reads the input directly. Padding, strides and dilations are
 * in the im2col; auto_pad is resolved into explicit pads by the converter.
 * The result does not depend on where the graph is cut: the same calls
 * with the same shapes run in every process.
 */
#include <math.h>
#include <string.h>


#include "core/alloc_int.h"
#include "graph/conv_int.h"
#include "kern/blas_int.h"

/* An int list attr of length want (absent: every entry dflt); -1 when it
 * is there with another length. */
int mu__conv_ints(const mu__node_t *n, const char *key, int want, int64_t dflt, int64_t *out)
{
	int64_t v[2 * MU_TENSOR_MAX_RANK];
	int got = mu__attr_ints(n, key, v, 2 * MU_TENSOR_MAX_RANK);

	if (got >= 0 && got != want)
		return -1;
	for (int i = 0; i < want; i++)
		out[i] = got < 0 ? dflt : v[i];
	return 0;
}

int mu__conv_check(const mu__node_t *n, char *why, size_t wl)
{
	static const char *const keys[] = {"strides", "pads", "dilations", "kernel_shape",
	                                   "output_padding"};
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(n->attrs, "pads");

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const cJSON *a = cJSON_GetObjectItemCaseSensitive(n->attrs, keys[i]);

		/* pads has two entries per dim: up to 16 */
		if (a != NULL && i == 1 && cJSON_IsArray(a) && cJSON_GetArraySize(a) <= 2 * MU_TENSOR_MAX_RANK)
			continue;
		if (mu__want_int(n, keys[i], 1, why, wl) != 0)
			return MU_EPROTO;
	}
	if (v != NULL) {
		const cJSON *it;

		if (!cJSON_IsArray(v))
			return mu__fail(why, wl, "node %.100s: pads must be a list%.0s", n->name, "");
		cJSON_ArrayForEach(it, v)
			if (!mu__json_is_int(it, 0, 1e9))
				return mu__fail(why, wl, "node %.100s: pads must be integers >= 0%.0s", n->name, "");
	}
	return mu__want_int(n, "group", 0, why, wl) == 0 && mu__want_int(n, "ceil_mode", 0, why, wl) == 0 &&
	               mu__want_int(n, "count_include_pad", 0, why, wl) == 0 &&
	               mu__want_int(n, "storage_order", 0, why, wl) == 0 ? 0 : MU_EPROTO;
}

/*
 * The geometry of node n over input x (and kernel dims kd, from the
 * weights or kernel_shape): strides, pads, dilations, output dims. ceil:
 * pooling's ceil_mode. MU_EPROTO when the attributes do not fit.
 */
int mu__conv_geometry(const mu__node_t *n, const mu__shape_t *x, const uint64_t *kd, int ceil_,
                    mu__geom_t *g)
{
	int64_t st[3], pd[6], dl[3];
	int k = (int)x->rank - 2, off;

	if (k < 1 || k > 3)
		return MU_EPROTO;
	if (mu__conv_ints(n, "strides", k, 1, st) != 0 || mu__conv_ints(n, "pads", 2 * k, 0, pd) != 0 ||
	    mu__conv_ints(n, "dilations", k, 1, dl) != 0)
		return MU_EPROTO;
	memset(g, 0, sizeof(*g));
	g->k = k;
	g->n = x->dims[0];
	g->c = x->dims[1];
	off = 3 - k;
	for (int i = 0; i < 3; i++) {
		int j = i - off;
		int64_t span, room;

		g->in[i] = j < 0 ? 1 : x->dims[2 + j];
		g->ker[i] = j < 0 ? 1 : kd[j];
		g->str[i] = j < 0 ? 1 : st[j];
		g->dil[i] = j < 0 ? 1 : dl[j];
		g->pad[i] = j < 0 ? 0 : pd[j];
		g->pend[i] = j < 0 ? 0 : pd[k + j];
		if (g->str[i] < 1 || g->dil[i] < 1 || g->ker[i] < 1 || g->in[i] > ((uint64_t)1 << 40))
			return MU_EPROTO;
		span = (int64_t)(g->ker[i] - 1) * g->dil[i] + 1;
		room = (int64_t)g->in[i] + g->pad[i] + g->pend[i] - span;
		if (room < 0)
			return MU_EPROTO;
		g->out[i] = (uint64_t)((room + (ceil_ ? g->str[i] - 1 : 0)) / g->str[i] + 1);
	}
	return 0;
}

void mu__conv_out_shape(const mu__geom_t *g, uint64_t channels, mu__shape_t *out)
{
	out->rank = (uint32_t)g->k + 2;
	out->dims[0] = g->n;
	out->dims[1] = channels;
	for (int j = 0; j < g->k; j++)
		out->dims[2 + j] = g->out[3 - g->k + j];
}

/* The kernel offsets k in [*k0, *k1) of a window starting at base (with
 * dilation dil, ker taps) whose positions base + k * dil lie in [lo, hi). */
void mu__krange(int64_t base, int64_t dil, uint64_t ker, int64_t lo, int64_t hi, int64_t *k0,
                   int64_t *k1)
{
	int64_t a = base >= lo ? 0 : (lo - base + dil - 1) / dil;
	int64_t b = hi - 1 - base < 0 ? 0 : (hi - 1 - base) / dil + 1;

	*k0 = a;
	*k1 = b < (int64_t)ker ? b : (int64_t)ker;
	if (*k1 < *k0)
		*k1 = *k0;
}

/* The output positions o in [*o0, *o1) of one kernel tap (offset
 * k * dil - pad) that read inside [0, in): o * str + off in range. */
void mu__orange(int64_t off, int64_t str, uint64_t in, uint64_t out, uint64_t *o0, uint64_t *o1)
{
	int64_t a = off >= 0 ? 0 : (-off + str - 1) / str;
	int64_t b = (int64_t)in - 1 - off < 0 ? 0 : ((int64_t)in - 1 - off) / str + 1;

	*o0 = (uint64_t)(a < (int64_t)out ? a : (int64_t)out);
	*o1 = (uint64_t)(b < (int64_t)out ? b : (int64_t)out);
	if (*o1 < *o0)
		*o1 = *o0;
}

/* ---- conv (x, w[, b]) ---- */

static int conv_geom(const mu__node_t *n, const mu__shape_t *in, mu__geom_t *g)
{
	uint64_t kd[3];
	int64_t ks[3];
	int64_t group = mu__attr_int(n, "group", 1);
	int k = (int)in[0].rank - 2;

	if (k < 1 || k > 3 || in[1].rank != in[0].rank || group < 1)
		return MU_EPROTO;
	for (int i = 0; i < k; i++)
		kd[i] = in[1].dims[2 + i];
	if (mu__conv_ints(n, "kernel_shape", k, 0, ks) != 0)
		return MU_EPROTO;
	for (int i = 0; i < k; i++)
		if (ks[i] != 0 && (uint64_t)ks[i] != kd[i])
			return MU_EPROTO;
	if (mu__conv_geometry(n, &in[0], kd, 0, g) != 0)
		return MU_EPROTO;
	g->group = (uint64_t)group;
	g->m = in[1].dims[0];
	if (g->c % g->group != 0 || g->m % g->group != 0 || in[1].dims[1] != g->c / g->group)
		return MU_EPROTO;
	if (n->nin == 3 && mu__shape_numel(&in[2]) != g->m)
		return MU_EPROTO;
	return 0;
}

static int conv_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                      size_t wl)
{
	mu__geom_t g;

	if (conv_geom(n, in, &g) != 0)
		return mu__fail(why, wl, "node %.100s: the weights, group, strides, pads or dilations do not fit %.100s",
		                n->name, n->in[0]);
	mu__conv_out_shape(&g, g.m, &out[0]);
	return 0;
}

/* Does a [rows, cols] f32 matrix's byte count fit a size_t? (Both come
 * from tensors already allocated, so they are far from overflowing alone;
 * their product is checked before it is allocated.) */
static int cols_fit(uint64_t rows, uint64_t cols)
{
	return rows == 0 || cols <= (SIZE_MAX - 8) / 4 / rows;
}

/* The [cg * kernel, positions] patch matrix of channels c0.. of image x:
 * for each tap, the rows of positions it reads inside the input are
 * copied (contiguously when the stride is 1), the rest are zeros. */
static void im2col(const mu__geom_t *g, const float *x, uint64_t cg, float *cols)
{
	uint64_t pos = mu__prod3(g->out), kk = mu__prod3(g->ker), inpl = mu__prod3(g->in);

	for (uint64_t c = 0; c < cg; c++)
		for (uint64_t ki = 0; ki < kk; ki++) {
			int64_t off[3] = {(int64_t)(ki / (g->ker[1] * g->ker[2])) * g->dil[0] - g->pad[0],
			                  (int64_t)(ki / g->ker[2] % g->ker[1]) * g->dil[1] - g->pad[1],
			                  (int64_t)(ki % g->ker[2]) * g->dil[2] - g->pad[2]};
			uint64_t lo[3], hi[3];
			float *row = cols + (c * kk + ki) * pos;
			const float *src = x + c * inpl;

			for (int d = 0; d < 3; d++)
				mu__orange(off[d], g->str[d], g->in[d], g->out[d], &lo[d], &hi[d]);
			memset(row, 0, (size_t)pos * 4);
			for (uint64_t o0 = lo[0]; o0 < hi[0]; o0++)
				for (uint64_t o1 = lo[1]; o1 < hi[1]; o1++) {
					float *r = row + (o0 * g->out[1] + o1) * g->out[2];
					const float *line = src + ((uint64_t)((int64_t)o0 * g->str[0] + off[0]) * g->in[1] +
					                           (uint64_t)((int64_t)o1 * g->str[1] + off[1])) * g->in[2];

					if (g->str[2] == 1) {
						if (hi[2] > lo[2])
							memcpy(r + lo[2], line + (int64_t)lo[2] + off[2],
							       (size_t)(hi[2] - lo[2]) * 4);
					} else {
						for (uint64_t o2 = lo[2]; o2 < hi[2]; o2++)
							r[o2] = line[(int64_t)o2 * g->str[2] + off[2]];
					}
				}
		}
}

static int direct(const mu__geom_t *g)
{
	for (int i = 0; i < 3; i++)
		if (g->ker[i] != 1 || g->str[i] != 1 || g->pad[i] != 0 || g->in[i] != g->out[i])
			return 0;
	return 1;
}

/*
 * One input channel per group (depthwise convolution, MobileNet's): each
 * output plane is the sum over the taps of a weight times the input
 * shifted by that tap, accumulated tap by tap over the positions that
 * read inside the input. One sgemm per channel with a single row would
 * cost more in calls and im2col than this costs in arithmetic.
 */
static void depthwise(const mu__geom_t *g, const float *restrict x, const float *w,
                      float *restrict y)
{
	uint64_t kk = mu__prod3(g->ker);

	memset(y, 0, (size_t)mu__prod3(g->out) * 4);
	for (uint64_t ki = 0; ki < kk; ki++) {
		int64_t off[3] = {(int64_t)(ki / (g->ker[1] * g->ker[2])) * g->dil[0] - g->pad[0],
		                  (int64_t)(ki / g->ker[2] % g->ker[1]) * g->dil[1] - g->pad[1],
		                  (int64_t)(ki % g->ker[2]) * g->dil[2] - g->pad[2]};
		uint64_t lo[3], hi[3];
		float wk = w[ki];

		for (int d = 0; d < 3; d++)
			mu__orange(off[d], g->str[d], g->in[d], g->out[d], &lo[d], &hi[d]);
		for (uint64_t o0 = lo[0]; o0 < hi[0]; o0++)
			for (uint64_t o1 = lo[1]; o1 < hi[1]; o1++) {
				float *restrict r = y + (o0 * g->out[1] + o1) * g->out[2];
				const float *restrict line = x + ((uint64_t)((int64_t)o0 * g->str[0] + off[0]) * g->in[1] +
				                                  (uint64_t)((int64_t)o1 * g->str[1] + off[1])) * g->in[2];

				if (g->str[2] == 1) {
					const float *restrict src = line + (int64_t)lo[2] + off[2];
					float *restrict dst = r + lo[2];

					for (uint64_t o2 = 0; o2 < hi[2] - lo[2]; o2++)
						dst[o2] += wk * src[o2];
				} else {
					for (uint64_t o2 = lo[2]; o2 < hi[2]; o2++)
						r[o2] += wk * line[(int64_t)o2 * g->str[2] + off[2]];
				}
			}
	}
}

static int conv_run_pool(mu__pool_t *pool, const mu__node_t *n, mu_tensor_t *const *in,
                         mu_tensor_t **out)
{
	mu__shape_t s[3];
	mu__geom_t g;
	uint64_t pos, kk, cg, mg, inpl;
	float *cols = NULL;
	int dir;

	for (int j = 0; j < n->nin; j++)
		mu__shape_of(in[j], &s[j]);
	if (conv_geom(n, s, &g) != 0)
		return MU_EPROTO;
	pos = mu__prod3(g.out);
	kk = mu__prod3(g.ker);
	inpl = mu__prod3(g.in);
	cg = g.c / g.group;
	mg = g.m / g.group;
	dir = direct(&g);
	if (out[0]->numel == 0)
		return 0;
	if (cg == 1 && !dir) { /* depthwise: no im2col, no sgemm */
		for (uint64_t b = 0; b < g.n; b++)
			for (uint64_t m = 0; m < g.m; m++) {
				float *y = out[0]->data + (b * g.m + m) * pos;

				depthwise(&g, in[0]->data + (b * g.c + m / mg) * inpl, in[1]->data + m * kk, y);
				for (uint64_t p = 0; n->nin == 3 && p < pos; p++)
					y[p] += in[2]->data[m];
			}
		return 0;
	}
	if (!dir && !cols_fit(cg * kk, pos))
		return MU_ETOOBIG;
	if (!dir && (cols = mu__malloc((size_t)(cg * kk * pos) * 4 + 4)) == NULL)
		return MU_ENOMEM;
	for (uint64_t b = 0; b < g.n; b++)
		for (uint64_t gr = 0; gr < g.group; gr++) {
			const float *x = in[0]->data + (b * g.c + gr * cg) * inpl;
			float *y = out[0]->data + (b * g.m + gr * mg) * pos;

			if (!dir)
				im2col(&g, x, cg, cols);
			if (cg * kk == 0) {
				memset(y, 0, (size_t)(mg * pos) * 4);
			} else {
				mu__sgemm(pool, 0, 0, (int64_t)mg, (int64_t)pos, (int64_t)(cg * kk), 1.0f,
				          in[1]->data + gr * mg * cg * kk, (int64_t)(cg * kk), dir ? x : cols,
				          (int64_t)pos, 0.0f, y, (int64_t)pos);
			}
			for (uint64_t m = 0; n->nin == 3 && m < mg; m++) {
				float bias = in[2]->data[gr * mg + m];

				for (uint64_t p = 0; p < pos; p++)
					y[m * pos + p] += bias;
			}
		}
	mu__free(cols);
	return 0;
}

static int conv_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	return conv_run_pool(NULL, n, in, out);
}

static double conv_flops(const mu__node_t *n, const mu__shape_t *in, const mu__shape_t *out)
{
	uint64_t w = mu__shape_numel(&in[1]);

	(void)n;
	/* each output element: one multiply-add per weight of its group's filter */
	return 2.0 * (double)mu__shape_numel(&out[0]) * (double)(in[1].dims[0] ? w / in[1].dims[0] : 0);
}

const mu__op_t mu__op_conv = {"conv", 2, 3, 1, mu__conv_check, conv_shape, conv_run, conv_flops, 0, 0,
                              conv_run_pool};

/* ---- conv_transpose (x, w[, b]): w is [C, M/group, K...] ---- */

static int convt_geom(const mu__node_t *n, const mu__shape_t *in, mu__geom_t *g)
{
	int64_t st[3], pd[6], dl[3], op[3];
	int64_t group = mu__attr_int(n, "group", 1);
	int k = (int)in[0].rank - 2, off = 3 - k;

	if (k < 1 || k > 3 || in[1].rank != in[0].rank || group < 1 ||
	    mu__conv_ints(n, "strides", k, 1, st) != 0 || mu__conv_ints(n, "pads", 2 * k, 0, pd) != 0 ||
	    mu__conv_ints(n, "dilations", k, 1, dl) != 0 ||
	    mu__conv_ints(n, "output_padding", k, 0, op) != 0)
		return MU_EPROTO;
	memset(g, 0, sizeof(*g));
	g->k = k;
	g->n = in[0].dims[0];
	g->c = in[0].dims[1];
	g->group = (uint64_t)group;
	g->m = in[1].dims[1] * g->group;
	if (in[1].dims[0] != g->c || g->c % g->group != 0 ||
	    (n->nin == 3 && mu__shape_numel(&in[2]) != g->m))
		return MU_EPROTO;
	for (int i = 0; i < 3; i++) {
		int j = i - off;
		int64_t o;

		g->in[i] = j < 0 ? 1 : in[0].dims[2 + j];
		g->ker[i] = j < 0 ? 1 : in[1].dims[2 + j];
		g->str[i] = j < 0 ? 1 : st[j];
		g->dil[i] = j < 0 ? 1 : dl[j];
		g->pad[i] = j < 0 ? 0 : pd[j];
		g->pend[i] = j < 0 ? 0 : pd[k + j];
		if (g->str[i] < 1 || g->dil[i] < 1 || g->ker[i] < 1 || g->in[i] > ((uint64_t)1 << 40) ||
		    (j >= 0 && (op[j] < 0 || op[j] >= (g->str[i] > g->dil[i] ? g->str[i] : g->dil[i]))))
			return MU_EPROTO;
		o = g->str[i] * ((int64_t)g->in[i] - 1) + (j < 0 ? 0 : op[j]) +
		    (int64_t)(g->ker[i] - 1) * g->dil[i] + 1 - g->pad[i] - g->pend[i];
		if (o < 1 || o > ((int64_t)1 << 40))
			return MU_EPROTO;
		g->out[i] = (uint64_t)o;
	}
	return 0;
}

static int convt_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                       size_t wl)
{
	mu__geom_t g;

	if (convt_geom(n, in, &g) != 0)
		return mu__fail(why, wl, "node %.100s: the weights, group, strides, pads, dilations or "
		                "output_padding do not fit %.100s", n->name, n->in[0]);
	mu__conv_out_shape(&g, g.m, &out[0]);
	return 0;
}

/* Add each [tap, input position] column value to the output position
 * it lands on (the transpose of im2col): taps in order, positions in
 * order, so the sums are the same in every run. */
static void col2im(const mu__geom_t *g, const float *cols, uint64_t mg, float *y)
{
	uint64_t kk = mu__prod3(g->ker), pin = mu__prod3(g->in), pout = mu__prod3(g->out);

	for (uint64_t m = 0; m < mg; m++)
		for (uint64_t ki = 0; ki < kk; ki++) {
			int64_t off[3] = {(int64_t)(ki / (g->ker[1] * g->ker[2])) * g->dil[0] - g->pad[0],
			                  (int64_t)(ki / g->ker[2] % g->ker[1]) * g->dil[1] - g->pad[1],
			                  (int64_t)(ki % g->ker[2]) * g->dil[2] - g->pad[2]};
			uint64_t lo[3], hi[3];
			const float *row = cols + (m * kk + ki) * pin;
			float *dst = y + m * pout;

			/* input positions i whose i * str + off lands inside the output */
			for (int d = 0; d < 3; d++)
				mu__orange(off[d], g->str[d], g->out[d], g->in[d], &lo[d], &hi[d]);
			for (uint64_t i0 = lo[0]; i0 < hi[0]; i0++)
				for (uint64_t i1 = lo[1]; i1 < hi[1]; i1++) {
					uint64_t o01 = ((uint64_t)((int64_t)i0 * g->str[0] + off[0]) * g->out[1] +
					                (uint64_t)((int64_t)i1 * g->str[1] + off[1])) * g->out[2];
					const float *r = row + (i0 * g->in[1] + i1) * g->in[2];

					for (uint64_t i2 = lo[2]; i2 < hi[2]; i2++)
						dst[o01 + (uint64_t)((int64_t)i2 * g->str[2] + off[2])] += r[i2];
				}
		}
}

static int convt_run_pool(mu__pool_t *pool, const mu__node_t *n, mu_tensor_t *const *in,
                          mu_tensor_t **out)
{
	mu__shape_t s[3];
	mu__geom_t g;
	uint64_t pin, pout, kk, cg, mg;
	float *cols;

	for (int j = 0; j < n->nin; j++)
		mu__shape_of(in[j], &s[j]);
	if (convt_geom(n, s, &g) != 0)
		return MU_EPROTO;
	pin = mu__prod3(g.in);
	pout = mu__prod3(g.out);
	kk = mu__prod3(g.ker);
	cg = g.c / g.group;
	mg = g.m / g.group;
	memset(out[0]->data, 0, mu_tensor_nbytes(out[0]));
	if (out[0]->numel == 0 || cg == 0)
		goto bias;
	if (!cols_fit(mg * kk, pin))
		return MU_ETOOBIG;
	if ((cols = mu__malloc((size_t)(mg * kk * pin) * 4 + 4)) == NULL)
		return MU_ENOMEM;
	for (uint64_t b = 0; b < g.n; b++)
		for (uint64_t gr = 0; gr < g.group; gr++) {
			/* cols [mg * kk, pin] = W_g^T [mg * kk, cg] x X_g [cg, pin] */
			mu__sgemm(pool, 1, 0, (int64_t)(mg * kk), (int64_t)pin, (int64_t)cg, 1.0f,
			          in[1]->data + gr * cg * mg * kk, (int64_t)(mg * kk),
			          in[0]->data + (b * g.c + gr * cg) * pin, (int64_t)pin, 0.0f, cols,
			          (int64_t)pin);
			col2im(&g, cols, mg, out[0]->data + (b * g.m + gr * mg) * pout);
		}
	mu__free(cols);
bias:
	for (uint64_t b = 0; n->nin == 3 && b < g.n; b++)
		for (uint64_t m = 0; m < g.m; m++) {
			float *y = out[0]->data + (b * g.m + m) * pout, bias = in[2]->data[m];

			for (uint64_t p = 0; p < pout; p++)
				y[p] += bias;
		}
	return 0;
}

static int convt_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	return convt_run_pool(NULL, n, in, out);
}

static double convt_flops(const mu__node_t *n, const mu__shape_t *in, const mu__shape_t *out)
{
	(void)n;
	(void)out;
	/* each input element meets every weight of its group's filters */
	return 2.0 * (double)mu__shape_numel(&in[0]) *
	       (double)(in[1].dims[0] ? mu__shape_numel(&in[1]) / in[1].dims[0] : 0);
}

const mu__op_t mu__op_conv_transpose = {"conv_transpose", 2, 3, 1, mu__conv_check, convt_shape,
                                        convt_run, convt_flops, 0, 0, convt_run_pool};
