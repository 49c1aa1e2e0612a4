/* SPDX-License-Identifier: MIT */
/*
 * Shape ops (reshape, flatten, transpose, concat, slice) and embedding
 * lookup. Reshape and flatten copy (a tensor owns its storage); the others
 * move elements by index arithmetic.
 */
#include <math.h>
#include <string.h>

#include "model/ops_int.h"

static int copy_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	(void)n;
	if (out[0]->numel > 0)
		memcpy(out[0]->data, in[0]->data, out[0]->numel * 4);
	return 0;
}

static double no_flops(const mu__node_t *n, const mu__shape_t *in, const mu__shape_t *out)
{
	(void)n;
	(void)in;
	(void)out;
	return 0;
}

static int axis_check(const mu__node_t *n, char *why, size_t wl)
{
	return mu__want_int(n, "axis", 0, why, wl);
}

/* ---- reshape: "shape" with 0 = keep that dim, -1 = whatever is left ---- */

static int reshape_check(const mu__node_t *n, char *why, size_t wl)
{
	int64_t s[MU_TENSOR_MAX_RANK];
	int k = mu__attr_ints(n, "shape", s, MU_TENSOR_MAX_RANK), minus = 0;

	if (k < 0 || mu__want_int(n, "shape", 1, NULL, 0) != 0)
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
	uint64_t known = 1, total = mu__shape_numel(&in[0]);

	out[0].rank = (uint32_t)k;
	for (int i = 0; i < k; i++) {
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
	return 0;
}

const mu__op_t mu__op_reshape = {"reshape", 1, 1, 1, reshape_check, reshape_shape, copy_run, no_flops};

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
	return 0;
}

const mu__op_t mu__op_flatten = {"flatten", 1, 1, 1, axis_check, flatten_shape, copy_run, no_flops};

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
	out[0].rank = in[0].rank;
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

	if (perm_of(n, x->rank, perm) != 0)
		return MU_EPROTO;
	for (int i = (int)x->rank - 1; i >= 0; i--) {
		st[i] = s;
		s *= x->dims[i];
	}
	for (uint32_t i = 0; i < x->rank; i++)
		pst[i] = st[perm[i]]; /* input stride of output dim i */
	for (uint64_t o = 0; o < out[0]->numel; o++) {
		out[0]->data[o] = x->data[off];
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

const mu__op_t mu__op_transpose = {"transpose", 1, 1, 1, transpose_check, transpose_shape, transpose_run, no_flops};

/* ---- concat along one axis ---- */

static int concat_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                        char *why, size_t wl)
{
	int axis = mu__axis(mu__attr_int(n, "axis", 0), in[0].rank);

	if (axis < 0)
		return mu__fail(why, wl, "node %.100s: concat axis out of range for %.100s", n->name, n->in[0]);
	out[0] = in[0];
	for (int j = 1; j < n->nin; j++) {
		if (in[j].rank != in[0].rank)
			return mu__fail(why, wl, "node %.100s: %.100s has another rank", n->name, n->in[j]);
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

	for (int i = 0; i < axis; i++)
		outer *= in[0]->dims[i];
	for (uint32_t i = (uint32_t)axis + 1; i < in[0]->rank; i++)
		inner *= in[0]->dims[i];
	for (uint64_t o = 0; o < outer; o++)
		for (int j = 0; j < n->nin; j++) {
			uint64_t chunk = in[j]->dims[axis] * inner;

			memcpy(out[0]->data + off, in[j]->data + o * chunk, chunk * 4);
			off += chunk;
		}
	return 0;
}

const mu__op_t mu__op_concat = {"concat", 1, MU_NODE_MAX_IO, 1, axis_check, concat_shape, concat_run, no_flops};

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
		out[0]->data[k] = x->data[src];
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

const mu__op_t mu__op_slice = {"slice", 1, 1, 1, slice_check, slice_shape, slice_run, no_flops};

/* ---- embedding: table [V, D] gathered by ids (f32 holding integers) ---- */

static int embedding_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                           char *why, size_t wl)
{
	if (in[0].rank != 2 || in[1].rank >= MU_TENSOR_MAX_RANK)
		return mu__fail(why, wl, "node %.100s: embedding needs a 2-D table %.100s", n->name, n->in[0]);
	out[0] = in[1];
	out[0].dims[out[0].rank++] = in[0].dims[1];
	return 0;
}

static int embedding_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	uint64_t vocab = in[0]->dims[0], dim = in[0]->dims[1];

	(void)n;
	for (uint64_t i = 0; i < in[1]->numel; i++) {
		float id = in[1]->data[i];

		/* compared as doubles first: casting 1e30 or inf is undefined */
		if (!(id >= 0) || id != floorf(id) || (double)id >= (double)vocab)
			return MU_EPROTO; /* an id outside the table */
		memcpy(out[0]->data + i * dim, in[0]->data + (uint64_t)id * dim, dim * 4);
	}
	return 0;
}

const mu__op_t mu__op_embedding = {"embedding", 2, 2, 1, NULL, embedding_shape, embedding_run, no_flops};
