/* SPDX-License-Identifier: MIT */
/*
 * Resize (ONNX Resize and Upsample): nearest neighbour on any dtype, and
 * linear and cubic interpolation on the float dtypes, over every dim.
 *
 * Each output index of each dim maps to a coordinate in the input
 * through ONNX's coordinate transformations; nearest rounds it as
 * nearest_mode says, linear and cubic weigh the 2 or 4 input indices
 * around it (clamped to the edge, as ONNX's reference pads with the edge
 * value), with exclude_outside renormalizing without the clamped ones.
 * tf_crop_and_resize maps into the region `roi` gives (start fractions,
 * then end fractions, per dim) and writes extrapolation_value where the
 * coordinate falls outside the input.
 * The per-dim tables (indices and weights) are built once per run; an
 * output element is the sum over the product of its dims' taps, in a
 * fixed order, computed in double and rounded to the dtype.
 */
#include <math.h>
#include <string.h>

#include "core/alloc_int.h"
#include "graph/dtype_int.h"
#include "graph/ops_int.h"

typedef enum { M_NEAREST, M_LINEAR, M_CUBIC } rmode_t;

static int mode_of(const mu__node_t *n)
{
	const char *m = mu__attr_str(n, "mode", "nearest");

	return strcmp(m, "nearest") == 0 ? M_NEAREST : strcmp(m, "linear") == 0 ? M_LINEAR
	       : strcmp(m, "cubic") == 0 ? M_CUBIC : -1;
}

static int one_of(const char *s, const char *const *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(s, v[i]) == 0)
			return 1;
	return 0;
}

static int resize_check(const mu__node_t *n, char *why, size_t wl)
{
	static const char *const cts[] = {"half_pixel", "pytorch_half_pixel", "align_corners",
		"asymmetric", "tf_half_pixel_for_nearest", "tf_crop_and_resize"};
	static const char *const nms[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
	const cJSON *sc = cJSON_GetObjectItemCaseSensitive(n->attrs, "scales"), *it;
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(n->attrs, "cubic_coeff_a");

	const cJSON *roi = cJSON_GetObjectItemCaseSensitive(n->attrs, "roi");
	const cJSON *ev = cJSON_GetObjectItemCaseSensitive(n->attrs, "extrapolation_value");

	if (!one_of(mu__attr_str(n, "coordinate_transformation_mode", "half_pixel"), cts, 6) ||
	    !one_of(mu__attr_str(n, "nearest_mode", "round_prefer_floor"), nms, 4) || mode_of(n) < 0)
		return mu__fail(why, wl, "node %.100s: unknown mode, coordinate_transformation_mode or "
		                "nearest_mode%.0s", n->name, "");
	if (mu__want_int(n, "sizes", 1, why, wl) != 0 || mu__want_int(n, "exclude_outside", 0, why, wl) != 0)
		return MU_EPROTO;
	if ((a != NULL && (!cJSON_IsNumber(a) || !isfinite(a->valuedouble))) ||
	    (ev != NULL && !cJSON_IsNumber(ev)))
		return mu__fail(why, wl, "node %.100s: cubic_coeff_a and extrapolation_value must be "
		                "numbers%.0s", n->name, "");
	if (roi != NULL && (!cJSON_IsArray(roi) || cJSON_GetArraySize(roi) > 2 * MU_TENSOR_MAX_RANK))
		return mu__fail(why, wl, "node %.100s: roi must be a list of numbers%.0s", n->name, "");
	cJSON_ArrayForEach(it, roi)
		if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
			return mu__fail(why, wl, "node %.100s: roi must be a list of numbers%.0s", n->name, "");
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

	const cJSON *roi = cJSON_GetObjectItemCaseSensitive(n->attrs, "roi");

	if (mu__attr_ints(n, "sizes", sz, MU_TENSOR_MAX_RANK) != (int)in[0].rank ||
	    (sc != NULL && cJSON_GetArraySize(sc) != (int)in[0].rank) ||
	    (roi != NULL && cJSON_GetArraySize(roi) != 2 * (int)in[0].rank))
		return mu__fail(why, wl, "node %.100s: sizes (and scales, roi) need one entry per dim of %.100s",
		                n->name, n->in[0]);
	if (mode_of(n) != M_NEAREST && !mu__dt_is_float(in[0].dtype))
		return mu__fail(why, wl, "node %.100s: %s interpolation of %.100s, which is not a float",
		                n->name, mu__attr_str(n, "mode", ""), n->in[0]);
	out[0] = in[0];
	for (uint32_t i = 0; i < in[0].rank; i++) {
		if (sz[i] < 0 || sz[i] > ((int64_t)1 << 40) || (sz[i] > 0 && in[0].dims[i] == 0))
			return mu__fail(why, wl, "node %.100s: bad size for %.100s", n->name, n->in[0]);
		out[0].dims[i] = (uint64_t)sz[i];
	}
	return 0;
}

/* Output index o's coordinate in the input, along dim d of lin input
 * elements scaled by scale (ONNX: the output width is scale * lin). */
static double coordinate(const mu__node_t *n, int d, int rank, uint64_t o, uint64_t lin, double scale)
{
	const char *ct = mu__attr_str(n, "coordinate_transformation_mode", "half_pixel");
	double wout = scale * (double)lin, x = (double)o;

	if (strcmp(ct, "tf_crop_and_resize") == 0) {
		const cJSON *roi = cJSON_GetObjectItemCaseSensitive(n->attrs, "roi");
		double a = roi != NULL ? cJSON_GetArrayItem(roi, d)->valuedouble : 0;
		double b = roi != NULL ? cJSON_GetArrayItem(roi, d + rank)->valuedouble : 1;

		return wout > 1 ? a * (double)(lin - 1) + x * (b - a) * (double)(lin - 1) / (wout - 1)
		                : 0.5 * (a + b) * (double)(lin - 1);
	}
	if (strcmp(ct, "asymmetric") == 0)
		return x / scale;
	if (strcmp(ct, "align_corners") == 0)
		return wout == 1 ? 0 : x * (double)(lin - 1) / (wout - 1);
	if (strcmp(ct, "tf_half_pixel_for_nearest") == 0)
		return (x + 0.5) / scale;
	if (strcmp(ct, "pytorch_half_pixel") == 0)
		return wout > 1 ? (x + 0.5) / scale - 0.5 : -0.5;
	return (x + 0.5) / scale - 0.5;
}

static int64_t clamp(int64_t i, uint64_t lin)
{
	return i < 0 ? 0 : (uint64_t)i >= lin ? (int64_t)lin - 1 : i;
}

/* One output index's taps along a dim: up to 4 (input index, weight);
 * none when the coordinate is outside the input (tf_crop_and_resize:
 * the element is then the extrapolation value). */
typedef struct {
	int n;
	int64_t at[4];
	double w[4];
} taps_t;

static void nearest_tap(const mu__node_t *n, double x, uint64_t lin, taps_t *t)
{
	const char *nm = mu__attr_str(n, "nearest_mode", "round_prefer_floor");
	double fl = floor(x);
	int64_t r;

	if (strcmp(nm, "floor") == 0)
		r = (int64_t)fl;
	else if (strcmp(nm, "ceil") == 0)
		r = (int64_t)ceil(x);
	else if (x - fl == 0.5)
		r = (int64_t)(strcmp(nm, "round_prefer_ceil") == 0 ? fl + 1 : fl);
	else
		r = (int64_t)floor(x + 0.5);
	t->n = 1;
	t->at[0] = clamp(r, lin);
	t->w[0] = 1;
}

/* Linear or cubic: ratio r in (0, 1] past the tap left of x (at x itself
 * when x is whole, which then gets all the weight), as ONNX's reference. */
static void interp_taps(const mu__node_t *n, rmode_t mode, double x, uint64_t lin, taps_t *t)
{
	double a = mu__attr_num(n, "cubic_coeff_a", -0.75), base = ceil(x) - 1, r = x - base, q = 1 - r;
	int excl = mu__attr_int(n, "exclude_outside", 0) != 0;
	double sum = 0;

	if (mode == M_LINEAR) {
		t->n = 2;
		t->w[0] = 1 - r;
		t->w[1] = r;
	} else {
		t->n = 4;
		t->w[0] = ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a;
		t->w[1] = ((a + 2) * r - (a + 3)) * r * r + 1;
		t->w[2] = ((a + 2) * q - (a + 3)) * q * q + 1;
		t->w[3] = ((a * (q + 1) - 5 * a) * (q + 1) + 8 * a) * (q + 1) - 4 * a;
	}
	for (int i = 0; i < t->n; i++) {
		int64_t at = (int64_t)base + i - (mode == M_CUBIC);

		if (excl && (at < 0 || (uint64_t)at >= lin))
			t->w[i] = 0;
		t->at[i] = clamp(at, lin);
		sum += t->w[i];
	}
	for (int i = 0; excl && sum != 0 && i < t->n; i++)
		t->w[i] /= sum;
}

/* The taps of every output index of every dim, in one allocation. */
static taps_t *tables(const mu__node_t *n, const mu_tensor_t *x, const mu_tensor_t *y, taps_t **by_dim)
{
	const cJSON *sc = cJSON_GetObjectItemCaseSensitive(n->attrs, "scales");
	uint64_t total = 0;
	rmode_t mode = (rmode_t)mode_of(n);
	int crop = strcmp(mu__attr_str(n, "coordinate_transformation_mode", ""), "tf_crop_and_resize") == 0;
	taps_t *all;

	for (uint32_t d = 0; d < x->rank; d++)
		total += y->dims[d];
	if ((all = mu__calloc((size_t)total + 1, sizeof(*all))) == NULL)
		return NULL;
	total = 0;
	for (uint32_t d = 0; d < x->rank; d++) {
		double scale = sc != NULL ? cJSON_GetArrayItem(sc, (int)d)->valuedouble
		                          : (double)y->dims[d] / (double)x->dims[d];

		by_dim[d] = all + total;
		for (uint64_t o = 0; o < y->dims[d]; o++) {
			double c = coordinate(n, (int)d, (int)x->rank, o, x->dims[d], scale);

			if (crop && (c < 0 || c > (double)(x->dims[d] - 1)))
				by_dim[d][o].n = 0; /* outside: extrapolated */
			else if (mode == M_NEAREST || (x->dims[d] == y->dims[d] && c == (double)o))
				nearest_tap(n, c, x->dims[d], &by_dim[d][o]); /* (an identity dim: one tap) */
			else
				interp_taps(n, mode, c, x->dims[d], &by_dim[d][o]);
		}
		total += y->dims[d];
	}
	return all;
}

/* Output element o (its index idx): the weighted sum over the product of
 * its dims' taps, the last dim's taps varying fastest. */
static double blend(const mu_tensor_t *x, taps_t *const *t, const uint64_t *idx, const uint64_t *st)
{
	int pick[MU_TENSOR_MAX_RANK] = {0};
	double acc = 0;

	for (;;) {
		double w = 1;
		uint64_t src = 0;
		int d;

		for (d = 0; d < (int)x->rank; d++) {
			const taps_t *tp = &t[d][idx[d]];

			w *= tp->w[pick[d]];
			src += (uint64_t)tp->at[pick[d]] * st[d];
		}
		if (w != 0)
			acc += w * mu__get_f(x->dtype, x->raw, src);
		for (d = (int)x->rank - 1; d >= 0; d--) {
			if (++pick[d] < t[d][idx[d]].n)
				break;
			pick[d] = 0;
		}
		if (d < 0)
			return acc;
	}
}

static int resize_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	const mu_tensor_t *x = in[0];
	taps_t *t[MU_TENSOR_MAX_RANK], *all;
	uint64_t idx[MU_TENSOR_MAX_RANK] = {0}, st[MU_TENSOR_MAX_RANK], s = 1;
	size_t es = mu_dtype_size((int)x->dtype);
	int nearest = mode_of(n) == M_NEAREST;

	if (out[0]->numel == 0)
		return 0;
	if ((all = tables(n, x, out[0], t)) == NULL)
		return MU_ENOMEM;
	for (int d = (int)x->rank - 1; d >= 0; d--) {
		st[d] = s;
		s *= x->dims[d];
	}
	for (uint64_t o = 0; o < out[0]->numel; o++) {
		int outside = 0;

		for (uint32_t d = 0; d < x->rank; d++)
			outside |= t[d][idx[d]].n == 0;
		if (outside) {
			mu__put_f(x->dtype, out[0]->raw, o, mu__attr_num(n, "extrapolation_value", 0));
		} else if (nearest) { /* a copy: any dtype, bit for bit */
			uint64_t src = 0;

			for (uint32_t d = 0; d < x->rank; d++)
				src += (uint64_t)t[d][idx[d]].at[0] * st[d];
			mu__ecopy(out[0]->raw, o, x->raw, src, es);
		} else {
			mu__put_f(x->dtype, out[0]->raw, o, blend(x, t, idx, st));
		}
		for (int d = (int)x->rank - 1; d >= 0; d--) {
			if (++idx[d] < out[0]->dims[d])
				break;
			idx[d] = 0;
		}
	}
	mu__free(all);
	return 0;
}

const mu__op_t mu__op_resize = {"resize", 1, 1, 1, resize_check, resize_shape, resize_run,
                                mu__no_flops, 1, 0, NULL};
