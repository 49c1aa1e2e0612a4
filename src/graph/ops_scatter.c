/* SPDX-License-Identifier: MIT */
/*
 * Ops that write by index or move index tuples: scatter_elements
 * (gather_elements' inverse), gather_nd and scatter_nd (ONNX GatherND and
 * ScatterND), and reverse_sequence. All take any dtype (the reductions
 * add and mul any numeric one); indices are I32 or I64, negative ones
 * count from the end, and one outside its dim fails the run. Indices are
 * applied in order, so with duplicates the last write wins.
 */
#include <string.h>

#include "graph/dtype_int.h"
#include "graph/ops_int.h"

/* ---- scatter_elements (data, indices, updates): gather_elements'
 * inverse; reduction none (the last write wins), add or mul ---- */

typedef enum { RED_NONE, RED_ADD, RED_MUL } red_t;

static int red_of(const mu__node_t *n)
{
	const char *r = mu__attr_str(n, "reduction", "none");

	return strcmp(r, "none") == 0 ? RED_NONE : strcmp(r, "add") == 0 ? RED_ADD
	       : strcmp(r, "mul") == 0 ? RED_MUL : -1;
}

static int scatter_check(const mu__node_t *n, char *why, size_t wl)
{
	if (red_of(n) < 0)
		return mu__fail(why, wl, "node %.100s: reduction is none, add or mul%.0s", n->name, "");
	return mu__want_int(n, "axis", 0, why, wl);
}

/* out[o] = u (none), += u, *= u: element ui of upd into element o */
static void put_red(red_t red, mu_tensor_t *out, uint64_t o, const mu_tensor_t *upd, uint64_t ui)
{
	mu_dtype_t dt = out->dtype;

	if (red == RED_NONE)
		mu__ecopy(out->raw, o, upd->raw, ui, mu_dtype_size((int)dt));
	else if (mu__dt_is_float(dt))
		mu__put_f(dt, out->raw, o, red == RED_ADD
		          ? mu__get_f(dt, out->raw, o) + mu__get_f(dt, upd->raw, ui)
		          : mu__get_f(dt, out->raw, o) * mu__get_f(dt, upd->raw, ui));
	else
		mu__put_i(dt, out->raw, o, red == RED_ADD
		          ? (int64_t)((uint64_t)mu__get_i(dt, out->raw, o) + (uint64_t)mu__get_i(dt, upd->raw, ui))
		          : (int64_t)((uint64_t)mu__get_i(dt, out->raw, o) * (uint64_t)mu__get_i(dt, upd->raw, ui)), 0);
}

static int sel_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                     size_t wl)
{
	int axis = mu__axis(mu__attr_int(n, "axis", 0), in[0].rank);

	if (axis < 0 || in[1].rank != in[0].rank || !mu__is_index(in[1].dtype) ||
	    in[2].rank != in[1].rank || memcmp(in[1].dims, in[2].dims, sizeof(uint64_t) * in[1].rank) != 0 ||
	    in[2].dtype != in[0].dtype)
		return mu__fail(why, wl, "node %.100s: indices (I64 or I32) and updates (the data's dtype) need "
		                "the data's rank and one shape, axis in range of %.100s", n->name, n->in[0]);
	for (uint32_t i = 0; i < in[0].rank; i++)
		if ((int)i != axis && in[1].dims[i] > in[0].dims[i])
			return mu__fail(why, wl, "node %.100s: indices %.100s reach past the data", n->name, n->in[1]);
	if ((in[0].dtype == MU_DTYPE_BOOL) && red_of(n) != RED_NONE)
		return mu__fail(why, wl, "node %.100s: %.100s is BOOL", n->name, n->in[0]);
	out[0] = in[0];
	return 0;
}

static int sel_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	const mu_tensor_t *x = in[0], *ix = in[1];
	int axis = mu__axis(mu__attr_int(n, "axis", 0), x->rank);
	red_t red = (red_t)red_of(n);
	uint64_t st[MU_TENSOR_MAX_RANK], idx[MU_TENSOR_MAX_RANK] = {0}, s = 1;

	for (int d = (int)x->rank - 1; d >= 0; d--) {
		st[d] = s;
		s *= x->dims[d];
	}
	if (out[0]->numel > 0)
		memcpy(out[0]->raw, x->raw, mu_tensor_nbytes(x));
	for (uint64_t k = 0; k < ix->numel; k++) {
		int64_t v = mu__index_at(ix, k);
		uint64_t dst = 0;

		if (v < 0)
			v += (int64_t)x->dims[axis];
		if (v < 0 || (uint64_t)v >= x->dims[axis])
			return MU_EPROTO;
		for (uint32_t d = 0; d < x->rank; d++)
			dst += ((int)d == axis ? (uint64_t)v : idx[d]) * st[d];
		put_red(red, out[0], dst, in[2], k);
		for (int d = (int)x->rank - 1; d >= 0; d--) {
			if (++idx[d] < ix->dims[d])
				break;
			idx[d] = 0;
		}
	}
	return 0;
}

const mu__op_t mu__op_scatter_elements = {"scatter_elements", 3, 3, 1, scatter_check, sel_shape,
                                          sel_run, mu__no_flops, 1, 0, NULL};

/* ---- gather_nd (data, indices [..., k]; batch_dims b) and scatter_nd
 * (data, indices [..., k], updates): ONNX GatherND / ScatterND ---- */

/* The slice an index tuple names: its offset in data, and the slice's
 * element count (the data dims past the tuple). */
static int nd_offset(const mu_tensor_t *x, const mu_tensor_t *ix, uint64_t row, uint32_t b,
                     uint64_t batch, uint64_t *off)
{
	uint32_t k = (uint32_t)ix->dims[ix->rank - 1];
	uint64_t o = batch;

	for (uint32_t j = 0; j < k; j++) {
		int64_t v = mu__index_at(ix, row * k + j);
		uint64_t d = x->dims[b + j];

		if (v < 0)
			v += (int64_t)d;
		if (v < 0 || (uint64_t)v >= d)
			return MU_EPROTO;
		o = o * d + (uint64_t)v;
	}
	*off = o;
	return 0;
}

static int gnd_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                     size_t wl)
{
	int64_t b = mu__attr_int(n, "batch_dims", 0);
	uint64_t k = in[1].rank ? in[1].dims[in[1].rank - 1] : 0;
	uint32_t r = 0;

	if (!mu__is_index(in[1].dtype) || in[1].rank < 1 || b < 0 || (uint64_t)b + k > in[0].rank ||
	    (uint32_t)b >= in[1].rank || in[1].rank - 1 + in[0].rank - (uint32_t)b - k > MU_TENSOR_MAX_RANK)
		return mu__fail(why, wl, "node %.100s: indices %.100s (I64 or I32, [..., k]) do not fit the data",
		                n->name, n->in[1]);
	for (uint32_t i = 0; i < (uint32_t)b; i++)
		if (in[0].dims[i] != in[1].dims[i])
			return mu__fail(why, wl, "node %.100s: the batch dims of %.100s differ", n->name, n->in[1]);
	for (uint32_t i = 0; i + 1 < in[1].rank; i++)
		out[0].dims[r++] = in[1].dims[i];
	for (uint32_t i = (uint32_t)(b + (int64_t)k); i < in[0].rank; i++)
		out[0].dims[r++] = in[0].dims[i];
	out[0].rank = r;
	out[0].dtype = in[0].dtype;
	return 0;
}

static int gnd_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	const mu_tensor_t *x = in[0], *ix = in[1];
	uint32_t b = (uint32_t)mu__attr_int(n, "batch_dims", 0), k = (uint32_t)ix->dims[ix->rank - 1];
	uint64_t slice = 1, rows = 1, per_batch = 1, nb = 1;
	size_t es = mu_dtype_size((int)x->dtype);

	for (uint32_t i = 0; i + 1 < ix->rank; i++) /* one index tuple per row */
		rows *= ix->dims[i];
	for (uint32_t i = b + k; i < x->rank; i++)
		slice *= x->dims[i];
	for (uint32_t i = 0; i < b; i++)
		nb *= x->dims[i];
	per_batch = nb ? rows / nb : 0;
	for (uint64_t r = 0; r < rows; r++) {
		uint64_t off;

		if (nd_offset(x, ix, r, b, per_batch ? r / per_batch : 0, &off) != 0)
			return MU_EPROTO;
		memcpy((char *)out[0]->raw + r * slice * es, (const char *)x->raw + off * slice * es, slice * es);
	}
	return 0;
}

static int bd_check(const mu__node_t *n, char *why, size_t wl)
{
	return mu__want_int(n, "batch_dims", 0, why, wl);
}

const mu__op_t mu__op_gather_nd = {"gather_nd", 2, 2, 1, bd_check, gnd_shape, gnd_run, mu__no_flops, 1, 0, NULL};

static int snd_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                     size_t wl)
{
	uint64_t k = in[1].rank ? in[1].dims[in[1].rank - 1] : 0;
	mu__shape_t want = {0};

	if (!mu__is_index(in[1].dtype) || in[1].rank < 1 || k > in[0].rank || in[2].dtype != in[0].dtype)
		return mu__fail(why, wl, "node %.100s: indices %.100s (I64 or I32, [..., k]) or updates do not "
		                "fit the data", n->name, n->in[1]);
	for (uint32_t i = 0; i + 1 < in[1].rank; i++)
		want.dims[want.rank++] = in[1].dims[i];
	for (uint32_t i = (uint32_t)k; i < in[0].rank && want.rank < MU_TENSOR_MAX_RANK; i++)
		want.dims[want.rank++] = in[0].dims[i];
	if (want.rank != in[2].rank || memcmp(want.dims, in[2].dims, sizeof(uint64_t) * want.rank) != 0)
		return mu__fail(why, wl, "node %.100s: updates %.100s have the wrong shape", n->name, n->in[2]);
	if (in[0].dtype == MU_DTYPE_BOOL && red_of(n) != RED_NONE)
		return mu__fail(why, wl, "node %.100s: %.100s is BOOL", n->name, n->in[0]);
	out[0] = in[0];
	return 0;
}

static int snd_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	const mu_tensor_t *x = in[0], *ix = in[1];
	uint32_t k = (uint32_t)ix->dims[ix->rank - 1];
	uint64_t slice = 1, rows = 1;
	red_t red = (red_t)red_of(n);

	for (uint32_t i = 0; i + 1 < ix->rank; i++)
		rows *= ix->dims[i];

	for (uint32_t i = k; i < x->rank; i++)
		slice *= x->dims[i];
	if (out[0]->numel > 0)
		memcpy(out[0]->raw, x->raw, mu_tensor_nbytes(x));
	for (uint64_t r = 0; r < rows; r++) {
		uint64_t off;

		if (nd_offset(x, ix, r, 0, 0, &off) != 0)
			return MU_EPROTO;
		for (uint64_t j = 0; j < slice; j++)
			put_red(red, out[0], off * slice + j, in[2], r * slice + j);
	}
	return 0;
}

const mu__op_t mu__op_scatter_nd = {"scatter_nd", 3, 3, 1, scatter_check, snd_shape, snd_run,
                                    mu__no_flops, 1, 0, NULL};

/* ---- reverse_sequence (x, lens): along time_axis (0), each entry of
 * batch_axis (1) reversed over its first lens[b] steps ---- */

static int rs_check(const mu__node_t *n, char *why, size_t wl)
{
	int rc = mu__want_int(n, "batch_axis", 0, why, wl);

	return rc == 0 ? mu__want_int(n, "time_axis", 0, why, wl) : rc;
}

static int rs_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                    size_t wl)
{
	int b = mu__axis(mu__attr_int(n, "batch_axis", 1), in[0].rank);
	int t = mu__axis(mu__attr_int(n, "time_axis", 0), in[0].rank);

	if (b < 0 || t < 0 || b == t || !mu__is_index(in[1].dtype) || in[1].rank != 1 ||
	    in[1].dims[0] != in[0].dims[b])
		return mu__fail(why, wl, "node %.100s: batch_axis, time_axis or the lengths %.100s do not fit",
		                n->name, n->in[1]);
	out[0] = in[0];
	return 0;
}

static int rs_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	const mu_tensor_t *x = in[0];
	int b = mu__axis(mu__attr_int(n, "batch_axis", 1), x->rank);
	int t = mu__axis(mu__attr_int(n, "time_axis", 0), x->rank);
	uint64_t idx[MU_TENSOR_MAX_RANK] = {0}, st[MU_TENSOR_MAX_RANK], s = 1;
	size_t es = mu_dtype_size((int)x->dtype);

	for (int d = (int)x->rank - 1; d >= 0; d--) {
		st[d] = s;
		s *= x->dims[d];
	}
	for (uint64_t i = 0; i < in[1]->numel; i++) {
		int64_t len = mu__index_at(in[1], i);

		if (len < 0 || (uint64_t)len > x->dims[t])
			return MU_EPROTO;
	}
	for (uint64_t o = 0; o < out[0]->numel; o++) {
		int64_t len = mu__index_at(in[1], idx[b]);
		uint64_t src = o;

		if ((int64_t)idx[t] < len) /* mirrored inside the first len steps */
			src = o - idx[t] * st[t] + (uint64_t)(len - 1 - (int64_t)idx[t]) * st[t];
		mu__ecopy(out[0]->raw, o, x->raw, src, es);
		for (int d = (int)x->rank - 1; d >= 0; d--) {
			if (++idx[d] < x->dims[d])
				break;
			idx[d] = 0;
		}
	}
	return 0;
}

const mu__op_t mu__op_reverse_sequence = {"reverse_sequence", 2, 2, 1, rs_check, rs_shape, rs_run,
                                          mu__no_flops, 1, 0, NULL};
