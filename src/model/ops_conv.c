/* SPDX-License-Identifier: MIT */
/*
 * Convolution and pooling over 1 to 3 spatial dims (ONNX Conv, MaxPool,
 * AveragePool), and nearest-neighbour resize. Shapes are [N, C, spatial]
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

#include <cblas.h>

#include "core/alloc_int.h"
#include "model/ops_int.h"

/* Spatial geometry, always 3-D (unused leading dims are 1 wide). */
typedef struct {
	int k;                        /* spatial dims in the graph: 1..3 */
	uint64_t n, c, m, group;
	uint64_t in[3], ker[3], out[3];
	int64_t str[3], pad[3], pend[3], dil[3];   /* pad: begin, pend: end */
} geom_t;

static uint64_t prod3(const uint64_t *d)
{
	return d[0] * d[1] * d[2];
}

/* An int list attr of length want (absent: every entry dflt); -1 when it
 * is there with another length. */
static int ints_or(const mu__node_t *n, const char *key, int want, int64_t dflt, int64_t *out)
{
	int64_t v[2 * MU_TENSOR_MAX_RANK];
	int got = mu__attr_ints(n, key, v, 2 * MU_TENSOR_MAX_RANK);

	if (got >= 0 && got != want)
		return -1;
	for (int i = 0; i < want; i++)
		out[i] = got < 0 ? dflt : v[i];
	return 0;
}

static int list_check(const mu__node_t *n, char *why, size_t wl)
{
	static const char *const keys[] = {"strides", "pads", "dilations", "kernel_shape"};
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
static int geometry(const mu__node_t *n, const mu__shape_t *x, const uint64_t *kd, int ceil_,
                    geom_t *g)
{
	int64_t st[3], pd[6], dl[3];
	int k = (int)x->rank - 2, off;

	if (k < 1 || k > 3)
		return MU_EPROTO;
	if (ints_or(n, "strides", k, 1, st) != 0 || ints_or(n, "pads", 2 * k, 0, pd) != 0 ||
	    ints_or(n, "dilations", k, 1, dl) != 0)
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

static void out_shape(const geom_t *g, uint64_t channels, mu__shape_t *out)
{
	out->rank = (uint32_t)g->k + 2;
	out->dims[0] = g->n;
	out->dims[1] = channels;
	for (int j = 0; j < g->k; j++)
		out->dims[2 + j] = g->out[3 - g->k + j];
}

/* ---- conv (x, w[, b]) ---- */

static int conv_geom(const mu__node_t *n, const mu__shape_t *in, geom_t *g)
{
	uint64_t kd[3];
	int64_t ks[3];
	int64_t group = mu__attr_int(n, "group", 1);
	int k = (int)in[0].rank - 2;

	if (k < 1 || k > 3 || in[1].rank != in[0].rank || group < 1)
		return MU_EPROTO;
	for (int i = 0; i < k; i++)
		kd[i] = in[1].dims[2 + i];
	if (ints_or(n, "kernel_shape", k, 0, ks) != 0)
		return MU_EPROTO;
	for (int i = 0; i < k; i++)
		if (ks[i] != 0 && (uint64_t)ks[i] != kd[i])
			return MU_EPROTO;
	if (geometry(n, &in[0], kd, 0, g) != 0)
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
	geom_t g;

	if (conv_geom(n, in, &g) != 0)
		return mu__fail(why, wl, "node %.100s: the weights, group, strides, pads or dilations do not fit %.100s",
		                n->name, n->in[0]);
	out_shape(&g, g.m, &out[0]);
	return 0;
}

/* The kernel offsets k in [*k0, *k1) of a window starting at base (with
 * dilation dil, ker taps) whose positions base + k * dil lie in [lo, hi). */
static void krange(int64_t base, int64_t dil, uint64_t ker, int64_t lo, int64_t hi, int64_t *k0,
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
static void orange(int64_t off, int64_t str, uint64_t in, uint64_t out, uint64_t *o0, uint64_t *o1)
{
	int64_t a = off >= 0 ? 0 : (-off + str - 1) / str;
	int64_t b = (int64_t)in - 1 - off < 0 ? 0 : ((int64_t)in - 1 - off) / str + 1;

	*o0 = (uint64_t)(a < (int64_t)out ? a : (int64_t)out);
	*o1 = (uint64_t)(b < (int64_t)out ? b : (int64_t)out);
	if (*o1 < *o0)
		*o1 = *o0;
}

/* The [cg * kernel, positions] patch matrix of channels c0.. of image x:
 * for each tap, the rows of positions it reads inside the input are
 * copied (contiguously when the stride is 1), the rest are zeros. */
static void im2col(const geom_t *g, const float *x, uint64_t cg, float *cols)
{
	uint64_t pos = prod3(g->out), kk = prod3(g->ker), inpl = prod3(g->in);

	for (uint64_t c = 0; c < cg; c++)
		for (uint64_t ki = 0; ki < kk; ki++) {
			int64_t off[3] = {(int64_t)(ki / (g->ker[1] * g->ker[2])) * g->dil[0] - g->pad[0],
			                  (int64_t)(ki / g->ker[2] % g->ker[1]) * g->dil[1] - g->pad[1],
			                  (int64_t)(ki % g->ker[2]) * g->dil[2] - g->pad[2]};
			uint64_t lo[3], hi[3];
			float *row = cols + (c * kk + ki) * pos;
			const float *src = x + c * inpl;

			for (int d = 0; d < 3; d++)
				orange(off[d], g->str[d], g->in[d], g->out[d], &lo[d], &hi[d]);
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

static int direct(const geom_t *g)
{
	for (int i = 0; i < 3; i++)
		if (g->ker[i] != 1 || g->str[i] != 1 || g->pad[i] != 0 || g->in[i] != g->out[i])
			return 0;
	return 1;
}

static int conv_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	mu__shape_t s[3];
	geom_t g;
	uint64_t pos, kk, cg, mg, inpl;
	float *cols = NULL;
	int dir;

	for (int j = 0; j < n->nin; j++)
		mu__shape_of(in[j], &s[j]);
	if (conv_geom(n, s, &g) != 0)
		return MU_EPROTO;
	pos = prod3(g.out);
	kk = prod3(g.ker);
	inpl = prod3(g.in);
	cg = g.c / g.group;
	mg = g.m / g.group;
	dir = direct(&g);
	if (out[0]->numel == 0)
		return 0;
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
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)mg, (blasint)pos,
				            (blasint)(cg * kk), 1.0f, in[1]->data + gr * mg * cg * kk,
				            (blasint)(cg * kk), dir ? x : cols, (blasint)pos, 0.0f, y, (blasint)pos);
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

static double conv_flops(const mu__node_t *n, const mu__shape_t *in, const mu__shape_t *out)
{
	uint64_t w = mu__shape_numel(&in[1]);

	(void)n;
	/* each output element: one multiply-add per weight of its group's filter */
	return 2.0 * (double)mu__shape_numel(&out[0]) * (double)(in[1].dims[0] ? w / in[1].dims[0] : 0);
}

const mu__op_t mu__op_conv = {"conv", 2, 3, 1, list_check, conv_shape, conv_run, conv_flops, 0, 0};

/* ---- maxpool (with optional I64 indices), avgpool ---- */

static int pool_geom(const mu__node_t *n, const mu__shape_t *x, geom_t *g)
{
	int64_t ks[3];
	uint64_t kd[3];
	int k = (int)x->rank - 2;

	if (k < 1 || k > 3 || ints_or(n, "kernel_shape", k, -1, ks) != 0)
		return MU_EPROTO;
	for (int i = 0; i < k; i++) {
		if (ks[i] < 1)
			return MU_EPROTO;
		kd[i] = (uint64_t)ks[i];
	}
	if (geometry(n, x, kd, mu__attr_int(n, "ceil_mode", 0) != 0, g) != 0)
		return MU_EPROTO;
	g->m = g->c;
	return 0;
}

static int pool_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                      size_t wl)
{
	geom_t g;

	if (in[0].dtype != MU_DTYPE_F32) /* maxpool is typed for its indices */
		return mu__fail(why, wl, "node %.100s: %s computes in F32, and %.100s is not", n->name,
		                n->op->name, n->in[0]);
	if (pool_geom(n, &in[0], &g) != 0)
		return mu__fail(why, wl, "node %.100s: kernel_shape, strides, pads or dilations do not fit %.100s",
		                n->name, n->in[0]);
	out_shape(&g, g.c, &out[0]);
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

static span_t *spans(const geom_t *g, int include_pad)
{
	span_t *t = mu__calloc((size_t)(g->out[0] + g->out[1] + g->out[2]) + 1, sizeof(*t)), *p = t;

	for (int d = 0; t != NULL && d < 3; d++)
		for (uint64_t o = 0; o < g->out[d]; o++, p++) {
			int64_t p0, p1;

			p->base = (int64_t)o * g->str[d] - g->pad[d];
			krange(p->base, g->dil[d], g->ker[d], 0, (int64_t)g->in[d], &p->k0, &p->k1);
			krange(p->base, g->dil[d], g->ker[d], -g->pad[d], (int64_t)g->in[d] + g->pend[d], &p0, &p1);
			p->count = include_pad ? p1 - p0 : p->k1 - p->k0;
		}
	return t;
}

/* The row of window taps (a, b) of plane src reads. */
static const float *tap_row(const geom_t *g, const float *src, const span_t *const *sp, int64_t a,
                            int64_t b)
{
	return src + ((uint64_t)(sp[0]->base + a * g->dil[0]) * g->in[1] +
	              (uint64_t)(sp[1]->base + b * g->dil[1])) * g->in[2];
}

/* One window's max: a branch-free maximum, NaN carried on the side (a
 * NaN anywhere makes the max NaN, as numpy's). at: where the max is (only
 * when the caller wants indices; NULL otherwise, the fast path). */
static float window_max(const geom_t *g, const float *src, const span_t *const *sp, uint64_t *at)
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

static float window_avg(const geom_t *g, const float *src, const span_t *const *sp)
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
	geom_t g;

	mu__shape_of(in[0], &s);
	if (pool_geom(n, &s, &g) != 0)
		return MU_EPROTO;
	if ((table = spans(&g, incl)) == NULL)
		return MU_ENOMEM;
	pos = prod3(g.out);
	inpl = prod3(g.in);
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
	ints_or(n, "kernel_shape", (int)out[0].rank - 2, 1, ks);
	for (uint32_t i = 0; i + 2 < out[0].rank && i < 3; i++)
		k *= (double)ks[i];
	return k * (double)mu__shape_numel(&out[0]);
}

const mu__op_t mu__op_maxpool = {"maxpool", 1, 1, 2, list_check, pool_shape, pool_run, pool_flops, 1, 1};
const mu__op_t mu__op_avgpool = {"avgpool", 1, 1, 1, list_check, pool_shape, pool_run, pool_flops, 0, 0};

/* ---- resize, nearest ---- */

static int resize_check(const mu__node_t *n, char *why, size_t wl)
{
	const char *ct = mu__attr_str(n, "coordinate_transformation_mode", "half_pixel");
	const char *nm = mu__attr_str(n, "nearest_mode", "round_prefer_floor");
	const cJSON *sc = cJSON_GetObjectItemCaseSensitive(n->attrs, "scales"), *it;
	static const char *const cts[] = {"half_pixel", "pytorch_half_pixel", "align_corners",
		"asymmetric", "tf_half_pixel_for_nearest"};
	static const char *const nms[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
	int okc = 0, okn = 0;

	for (size_t i = 0; i < 5; i++)
		okc |= strcmp(ct, cts[i]) == 0;
	for (size_t i = 0; i < 4; i++)
		okn |= strcmp(nm, nms[i]) == 0;
	if (!okc || !okn)
		return mu__fail(why, wl, "node %.100s: unknown coordinate_transformation_mode or nearest_mode%.0s",
		                n->name, "");
	if (mu__want_int(n, "sizes", 1, why, wl) != 0)
		return MU_EPROTO;
	if (sc != NULL && (!cJSON_IsArray(sc) || cJSON_GetArraySize(sc) > MU_TENSOR_MAX_RANK))
		return mu__fail(why, wl, "node %.100s: scales must be a list of numbers%.0s", n->name, "");
	cJSON_ArrayForEach(it, sc)
		if (!cJSON_IsNumber(it) || !(it->valuedouble > 0) || !isfinite(it->valuedouble))
			return mu__fail(why, wl, "node %.100s: scales must be positive numbers%.0s", n->name, "");
	return 0;
}

static int resize_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                        size_t wl)
{
	int64_t sz[MU_TENSOR_MAX_RANK];
	const cJSON *sc = cJSON_GetObjectItemCaseSensitive(n->attrs, "scales");

	if (mu__attr_ints(n, "sizes", sz, MU_TENSOR_MAX_RANK) != (int)in[0].rank ||
	    (sc != NULL && cJSON_GetArraySize(sc) != (int)in[0].rank))
		return mu__fail(why, wl, "node %.100s: sizes (and scales) need one entry per dim of %.100s",
		                n->name, n->in[0]);
	out[0] = in[0];
	for (uint32_t i = 0; i < in[0].rank; i++) {
		if (sz[i] < 0 || sz[i] > ((int64_t)1 << 40) || (sz[i] > 0 && in[0].dims[i] == 0))
			return mu__fail(why, wl, "node %.100s: bad size for %.100s", n->name, n->in[0]);
		out[0].dims[i] = (uint64_t)sz[i];
	}
	return 0;
}

/* The input index output index o maps to along one dim. */
static uint64_t nearest(const mu__node_t *n, uint64_t o, uint64_t lin, uint64_t lout, double scale)
{
	const char *ct = mu__attr_str(n, "coordinate_transformation_mode", "half_pixel");
	const char *nm = mu__attr_str(n, "nearest_mode", "round_prefer_floor");
	double x, fl;
	int64_t r;

	if (strcmp(ct, "asymmetric") == 0)
		x = (double)o / scale;
	else if (strcmp(ct, "align_corners") == 0)
		x = lout == 1 ? 0 : (double)o * (double)(lin - 1) / (double)(lout - 1);
	else if (strcmp(ct, "tf_half_pixel_for_nearest") == 0)
		x = ((double)o + 0.5) / scale;
	else if (strcmp(ct, "pytorch_half_pixel") == 0)
		x = lout > 1 ? ((double)o + 0.5) / scale - 0.5 : 0;
	else
		x = ((double)o + 0.5) / scale - 0.5;
	fl = floor(x);
	if (strcmp(nm, "floor") == 0)
		r = (int64_t)fl;
	else if (strcmp(nm, "ceil") == 0)
		r = (int64_t)ceil(x);
	else if (x - fl == 0.5)
		r = (int64_t)(strcmp(nm, "round_prefer_ceil") == 0 ? fl + 1 : fl);
	else
		r = (int64_t)floor(x + 0.5);
	return r < 0 ? 0 : (uint64_t)r >= lin ? lin - 1 : (uint64_t)r;
}

static int resize_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	const mu_tensor_t *x = in[0];
	const cJSON *sc = cJSON_GetObjectItemCaseSensitive(n->attrs, "scales");
	uint64_t *map[MU_TENSOR_MAX_RANK] = {0}, idx[MU_TENSOR_MAX_RANK] = {0}, st[MU_TENSOR_MAX_RANK];
	size_t es = mu_dtype_size((int)x->dtype);
	uint64_t s = 1;
	int rc = 0;

	for (int d = (int)x->rank - 1; d >= 0; d--) {
		double scale = sc != NULL ? cJSON_GetArrayItem(sc, d)->valuedouble
		                          : (double)out[0]->dims[d] / (double)x->dims[d];

		st[d] = s;
		s *= x->dims[d];
		map[d] = mu__calloc(out[0]->dims[d] + 1, sizeof(uint64_t));
		if (map[d] == NULL) {
			rc = MU_ENOMEM;
			goto done;
		}
		for (uint64_t o = 0; o < out[0]->dims[d]; o++)
			map[d][o] = nearest(n, o, x->dims[d], out[0]->dims[d], scale);
	}
	for (uint64_t o = 0; o < out[0]->numel; o++) {
		uint64_t src = 0;

		for (uint32_t d = 0; d < x->rank; d++)
			src += map[d][idx[d]] * st[d];
		mu__ecopy(out[0]->raw, o, x->raw, src, es);
		for (int d = (int)x->rank - 1; d >= 0; d--) {
			if (++idx[d] < out[0]->dims[d])
				break;
			idx[d] = 0;
		}
	}
done:
	for (uint32_t d = 0; d < x->rank; d++)
		mu__free(map[d]);
	return rc;
}

const mu__op_t mu__op_resize = {"resize", 1, 1, 1, resize_check, resize_shape, resize_run,
                                mu__no_flops, 1, 0};
