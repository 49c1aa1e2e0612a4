/* SPDX-License-Identifier: MIT */
/*
 * Shape ops on any dtype: reshape, flatten, transpose, concat, slice,
 * expand and tile. Reshape and flatten copy (a tensor owns its storage);
 * the others move elements by index arithmetic.
 */
#include <math.h>
#include <string.h>

#include "graph/ops_int.h"

static int copy_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	(void)n;
	if (out[0]->numel > 0)
		memcpy(out[0]->raw, in[0]->raw, mu_tensor_nbytes(out[0]));
	return 0;
}

double mu__no_flops(const mu__node_t *n, const mu__shape_t *in, const mu__shape_t *out)
{
	(void)n;
	(void)in;
	(void)out;
	return 0;
}

#define no_flops mu__no_flops

static int axis_check(const mu__node_t *n, char *why, size_t wl)
{
	return mu__want_int(n, "axis", 0, why, wl);
}

/* ---- reshape: "shape" with 0 = keep that dim (a 0 when "allowzero" is
 * 1, as ONNX), -1 = whatever is left ---- */

static int reshape_check(const mu__node_t *n, char *why, size_t wl)
{
	int64_t s[MU_TENSOR_MAX_RANK];
	int k = mu__attr_ints(n, "shape", s, MU_TENSOR_MAX_RANK), minus = 0;

	if (k < 0 || mu__want_int(n, "shape", 1, NULL, 0) != 0 || mu__want_int(n, "allowzero", 0, NULL, 0) != 0)
		return mu__fail(why, wl, "node %.100s: reshape needs \"shape\", at most 8 integers%.0s", n->name, "");
	for (int i = 0; i < k; i++)
		if (s[i] < -1 || (s[i] == -1 && minus++))
			return mu__fail(why, wl, "node %.100s: bad reshape target%.0s", n->name, "");
	return 0;
}

static int reshape_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                         char *why, size_t wl)
{
	int64_t s[MU_TENSOR_MAX_RANK];
	int k = mu__attr_ints(n, "shape", s, MU_TENSOR_MAX_RANK), infer = -1;
	int keep0 = mu__attr_int(n, "allowzero", 0) == 0;
	uint64_t known = 1, total = mu__shape_numel(&in[0]);

	out[0].rank = (uint32_t)k;
	for (int i = 0; i < k; i++) {
		if (s[i] == 0 && !keep0) {
			out[0].dims[i] = 0;
			known = 0;
			continue;
		}
		if (s[i] == 0 && (uint32_t)i >= in[0].rank)
			return mu__fail(why, wl, "node %.100s: 0 in the shape of %.100s has no dim to keep", n->name, n->in[0]);
		out[0].dims[i] = s[i] == 0 ? in[0].dims[i] : s[i] == -1 ? 1 : (uint64_t)s[i];
		if (s[i] == -1)
			infer = i;
		else
			known *= out[0].dims[i];
	}
	if (infer >= 0 && known > 0 && total % known == 0)
		out[0].dims[infer] = total / known;
	if (mu__shape_numel(&out[0]) != total)
		return mu__fail(why, wl, "node %.100s: cannot reshape %.100s to that many elements", n->name, n->in[0]);
	out[0].dtype = in[0].dtype;
	return 0;
}

const mu__op_t mu__op_reshape = {"reshape", 1, 1, 1, reshape_check, reshape_shape, copy_run, no_flops, 1, 0, NULL};

/* ---- flatten: [prod(dims < axis), prod(dims >= axis)] ---- */

static int flatten_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                         char *why, size_t wl)
{
	int64_t axis = mu__attr_int(n, "axis", 1);

	if (axis < 0)
		axis += in[0].rank;
	if (axis < 0 || axis > (int64_t)in[0].rank)
		return mu__fail(why, wl, "node %.100s: flatten axis out of range for %.100s", n->name, n->in[0]);
	out[0].rank = 2;
	out[0].dims[0] = 1;
	out[0].dims[1] = 1;
	for (uint32_t i = 0; i < in[0].rank; i++)
		out[0].dims[(int64_t)i < axis ? 0 : 1] *= in[0].dims[i];
	out[0].dtype = in[0].dtype;
	return 0;
}

const mu__op_t mu__op_flatten = {"flatten", 1, 1, 1, axis_check, flatten_shape, copy_run, no_flops, 1, 0, NULL};

/* ---- transpose ---- */

static int perm_of(const mu__node_t *n, uint32_t rank, int *perm)
{
	int64_t p[MU_TENSOR_MAX_RANK];
	int k = mu__attr_ints(n, "perm", p, MU_TENSOR_MAX_RANK), seen[MU_TENSOR_MAX_RANK] = {0};

	if (k == -1) { /* default: reverse the dims */
		for (uint32_t i = 0; i < rank; i++)
			perm[i] = (int)(rank - 1 - i);
		return 0;
	}
	if (k != (int)rank)
		return MU_EPROTO;
	for (int i = 0; i < k; i++) {
		if (p[i] < 0 || p[i] >= (int64_t)rank || seen[p[i]]++)
			return MU_EPROTO;
		perm[i] = (int)p[i];
	}
	return 0;
}

static int transpose_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                           char *why, size_t wl)
{
	int perm[MU_TENSOR_MAX_RANK];

	if (perm_of(n, in[0].rank, perm) != 0)
		return mu__fail(why, wl, "node %.100s: perm is not a permutation of the dims of %.100s", n->name, n->in[0]);
	out[0] = in[0];
	for (uint32_t i = 0; i < in[0].rank; i++)
		out[0].dims[i] = in[0].dims[perm[i]];
	return 0;
}

static int transpose_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	const mu_tensor_t *x = in[0];
	int perm[MU_TENSOR_MAX_RANK];
	uint64_t st[MU_TENSOR_MAX_RANK], pst[MU_TENSOR_MAX_RANK], idx[MU_TENSOR_MAX_RANK] = {0};
	uint64_t s = 1, off = 0;
	size_t es = mu_dtype_size((int)x->dtype);

	if (perm_of(n, x->rank, perm) != 0)
		return MU_EPROTO;
	for (int i = (int)x->rank - 1; i >= 0; i--) {
		st[i] = s;
		s *= x->dims[i];
	}
	for (uint32_t i = 0; i < x->rank; i++)
		pst[i] = st[perm[i]]; /* input stride of output dim i */
	for (uint64_t o = 0; o < out[0]->numel; o++) {
		mu__ecopy(out[0]->raw, o, x->raw, off, es);
		for (int d = (int)x->rank - 1; d >= 0; d--) {
			idx[d]++;
			off += pst[d];
			if (idx[d] < out[0]->dims[d])
				break;
			off -= pst[d] * idx[d];
			idx[d] = 0;
		}
	}
	return 0;
}

static int transpose_check(const mu__node_t *n, char *why, size_t wl)
{
	return mu__want_int(n, "perm", 1, why, wl);
}

const mu__op_t mu__op_transpose = {"transpose", 1, 1, 1, transpose_check, transpose_shape, transpose_run,
                                   no_flops, 1, 0, NULL};

/* ---- concat along one axis ---- */

static int concat_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                        char *why, size_t wl)
{
	int axis = mu__axis(mu__attr_int(n, "axis", 0), in[0].rank);

	if (axis < 0)
		return mu__fail(why, wl, "node %.100s: concat axis out of range for %.100s", n->name, n->in[0]);
	out[0] = in[0];
	for (int j = 1; j < n->nin; j++) {
		if (in[j].rank != in[0].rank || in[j].dtype != in[0].dtype)
			return mu__fail(why, wl, "node %.100s: %.100s has another rank or dtype", n->name, n->in[j]);
		for (uint32_t i = 0; i < in[0].rank; i++)
			if ((int)i != axis && in[j].dims[i] != in[0].dims[i])
				return mu__fail(why, wl, "node %.100s: %.100s differs off the concat axis", n->name, n->in[j]);
		out[0].dims[axis] += in[j].dims[axis];
	}
	return 0;
}

static int concat_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	int axis = mu__axis(mu__attr_int(n, "axis", 0), in[0]->rank);
	uint64_t outer = 1, inner = 1, off = 0;
	size_t es = mu_dtype_size((int)in[0]->dtype);

	for (int i = 0; i < axis; i++)
		outer *= in[0]->dims[i];
	for (uint32_t i = (uint32_t)axis + 1; i < in[0]->rank; i++)
		inner *= in[0]->dims[i];
	for (uint64_t o = 0; o < outer; o++)
		for (int j = 0; j < n->nin; j++) {
			uint64_t chunk = in[j]->dims[axis] * inner * es;

			if (chunk > 0)
				memcpy((char *)out[0]->raw + off, (const char *)in[j]->raw + o * chunk, chunk);
			off += chunk;
		}
	return 0;
}

const mu__op_t mu__op_concat = {"concat", 1, MU_NODE_MAX_IO, 1, axis_check, concat_shape, concat_run,
                                no_flops, 1, 0, NULL};

/* ---- slice: starts, ends[, axes, steps]; ONNX clamping, steps >= 1 ---- */

typedef struct {
	uint64_t start[MU_TENSOR_MAX_RANK], step[MU_TENSOR_MAX_RANK];
} slicing_t;

static int slice_plan(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, slicing_t *sl)
{
	int64_t st[MU_TENSOR_MAX_RANK], en[MU_TENSOR_MAX_RANK], ax[MU_TENSOR_MAX_RANK], sp[MU_TENSOR_MAX_RANK];
	int ns = mu__attr_ints(n, "starts", st, MU_TENSOR_MAX_RANK);
	int ne = mu__attr_ints(n, "ends", en, MU_TENSOR_MAX_RANK);
	int na = mu__attr_ints(n, "axes", ax, MU_TENSOR_MAX_RANK);
	int np = mu__attr_ints(n, "steps", sp, MU_TENSOR_MAX_RANK);

	if (ns < 0 || ne != ns || (na >= 0 && na != ns) || (np >= 0 && np != ns) || na == -2 || np == -2)
		return MU_EPROTO;
	*out = *in;
	for (uint32_t i = 0; i < in->rank; i++) {
		sl->start[i] = 0;
		sl->step[i] = 1;
	}
	for (int i = 0; i < ns; i++) {
		int a = mu__axis(na >= 0 ? ax[i] : i, in->rank);
		int64_t d = (int64_t)in->dims[a < 0 ? 0 : a], b = st[i], e = en[i], s = np >= 0 ? sp[i] : 1;

		if (a < 0 || s < 1)
			return MU_EPROTO;
		b = b < 0 ? b + d : b;
		e = e < 0 ? e + d : e;
		b = b < 0 ? 0 : b > d ? d : b;
		e = e < 0 ? 0 : e > d ? d : e;
		sl->start[a] = (uint64_t)b;
		sl->step[a] = (uint64_t)s;
		out->dims[a] = e > b ? (uint64_t)((e - b - 1) / s + 1) : 0; /* no overflow */
	}
	return 0;
}

static int slice_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                       char *why, size_t wl)
{
	slicing_t sl;

	if (slice_plan(n, &in[0], &out[0], &sl) != 0)
		return mu__fail(why, wl, "node %.100s: bad starts/ends/axes/steps for %.100s", n->name, n->in[0]);
	return 0;
}

static int slice_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	const mu_tensor_t *x = in[0];
	mu__shape_t s, o;
	slicing_t sl;
	uint64_t st[MU_TENSOR_MAX_RANK], idx[MU_TENSOR_MAX_RANK] = {0}, stride = 1, off = 0;
	size_t es = mu_dtype_size((int)x->dtype);

	mu__shape_of(x, &s);
	if (slice_plan(n, &s, &o, &sl) != 0)
		return MU_EPROTO;
	for (int i = (int)x->rank - 1; i >= 0; i--) {
		st[i] = stride;
		stride *= x->dims[i];
		off += sl.start[i] * st[i];
	}
	for (uint64_t k = 0; k < out[0]->numel; k++) {
		uint64_t src = off;

		for (uint32_t d = 0; d < x->rank; d++)
			src += idx[d] * sl.step[d] * st[d];
		mu__ecopy(out[0]->raw, k, x->raw, src, es);
		for (int d = (int)x->rank - 1; d >= 0; d--) {
			if (++idx[d] < o.dims[d])
				break;
			idx[d] = 0;
		}
	}
	return 0;
}

/* starts and ends (required), axes and steps: integer lists of one length;
 * steps >= 1. Whether the axes exist depends on the input's rank. */
static int slice_check(const mu__node_t *n, char *why, size_t wl)
{
	static const char *const keys[] = {"starts", "ends", "axes", "steps"};
	int64_t v[MU_TENSOR_MAX_RANK];
	int k, len = -1;

	for (int i = 0; i < 4; i++) {
		if (mu__want_int(n, keys[i], 1, why, wl) != 0)
			return MU_EPROTO;
		k = mu__attr_ints(n, keys[i], v, MU_TENSOR_MAX_RANK);
		if ((k < 0 && i < 2) || (k >= 0 && len >= 0 && k != len))
			return mu__fail(why, wl, "node %.100s: slice needs starts and ends (and axes, steps) "
			                "of one length%.0s", n->name, "");
		if (k >= 0)
			len = k;
		for (int j = 0; i == 3 && j < k; j++)
			if (v[j] < 1)
				return mu__fail(why, wl, "node %.100s: slice steps must be >= 1%.0s", n->name, "");
	}
	return 0;
}

const mu__op_t mu__op_slice = {"slice", 1, 1, 1, slice_check, slice_shape, slice_run, no_flops, 1, 0, NULL};

/* ---- expand: numpy broadcasting of x to "shape" (both ways, as ONNX) ---- */

static int expand_check(const mu__node_t *n, char *why, size_t wl)
{
	int64_t s[MU_TENSOR_MAX_RANK];
	int k = mu__attr_ints(n, "shape", s, MU_TENSOR_MAX_RANK);

	if (k < 0 || mu__want_int(n, "shape", 1, NULL, 0) != 0)
		return mu__fail(why, wl, "node %.100s: expand needs \"shape\", at most 8 integers%.0s", n->name, "");
	for (int i = 0; i < k; i++)
		if (s[i] < 0)
			return mu__fail(why, wl, "node %.100s: expand to a negative dim%.0s", n->name, "");
	return 0;
}

static int expand_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                        char *why, size_t wl)
{
	int64_t s[MU_TENSOR_MAX_RANK];
	mu__shape_t to = {0};

	to.rank = (uint32_t)mu__attr_ints(n, "shape", s, MU_TENSOR_MAX_RANK);
	for (uint32_t i = 0; i < to.rank; i++)
		to.dims[i] = (uint64_t)s[i];
	if (mu__broadcast(&in[0], &to, &out[0]) != 0)
		return mu__fail(why, wl, "node %.100s: %.100s does not broadcast to that shape", n->name, n->in[0]);
	out[0].dtype = in[0].dtype;
	return 0;
}

static int expand_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	size_t es = mu_dtype_size((int)in[0]->dtype);
	mu__shape_t s, so;
	mu__bwalk_t w;

	(void)n;
	mu__shape_of(in[0], &s);
	mu__shape_of(out[0], &so);
	mu__bwalk_init(&w, &so, &s, 1);
	for (uint64_t r = 0; r < w.rows; r++, mu__bwalk_next(&w))
		for (uint64_t j = 0; j < w.inner; j++)
			mu__ecopy(out[0]->raw, r * w.inner + j, in[0]->raw, w.off[0] + j * w.sin[0], es);
	return 0;
}

const mu__op_t mu__op_expand = {"expand", 1, 1, 1, expand_check, expand_shape, expand_run, no_flops, 1, 0, NULL};

/* ---- tile: each dim repeated "repeats" times ---- */

static int tile_check(const mu__node_t *n, char *why, size_t wl)
{
	int64_t r[MU_TENSOR_MAX_RANK];
	int k = mu__attr_ints(n, "repeats", r, MU_TENSOR_MAX_RANK);

	if (k < 0 || mu__want_int(n, "repeats", 1, NULL, 0) != 0)
		return mu__fail(why, wl, "node %.100s: tile needs \"repeats\", at most 8 integers%.0s", n->name, "");
	for (int i = 0; i < k; i++)
		if (r[i] < 0)
			return mu__fail(why, wl, "node %.100s: a negative repeat%.0s", n->name, "");
	return 0;
}

static int tile_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                      char *why, size_t wl)
{
	int64_t r[MU_TENSOR_MAX_RANK];

	if (mu__attr_ints(n, "repeats", r, MU_TENSOR_MAX_RANK) != (int)in[0].rank)
		return mu__fail(why, wl, "node %.100s: repeats must have one entry per dim of %.100s", n->name,
		                n->in[0]);
	out[0] = in[0];
	for (uint32_t i = 0; i < in[0].rank; i++) {
		if (r[i] != 0 && in[0].dims[i] > ((uint64_t)1 << 50) / (uint64_t)r[i])
			return mu__fail(why, wl, "node %.100s: tiling %.100s makes too many elements", n->name, n->in[0]);
		out[0].dims[i] = in[0].dims[i] * (uint64_t)r[i];
	}
	return 0;
}

static int tile_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	const mu_tensor_t *x = in[0];
	size_t es = mu_dtype_size((int)x->dtype);
	uint64_t idx[MU_TENSOR_MAX_RANK] = {0};

	(void)n;
	for (uint64_t o = 0; o < out[0]->numel; o++) {
		uint64_t src = 0;

		for (uint32_t d = 0; d < x->rank; d++)
			src = src * x->dims[d] + idx[d] % x->dims[d];
		mu__ecopy(out[0]->raw, o, x->raw, src, es);
		for (int d = (int)x->rank - 1; d >= 0; d--) {
			if (++idx[d] < out[0]->dims[d])
				break;
			idx[d] = 0;
		}
	}
	return 0;
}

const mu__op_t mu__op_tile = {"tile", 1, 1, 1, tile_check, tile_shape, tile_run, no_flops, 1, 0, NULL};
