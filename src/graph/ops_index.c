/* SPDX-License-Identifier: MIT */
/*
 * Ops that move elements by index: embedding (a row lookup), gather and
 * gather_elements (ONNX's, indices from a tensor), trilu (a triangle of
 * the last two dims) and pad. All take any dtype; indices are I32 or I64
 * (embedding's may also be F32 holding integers). An index outside its
 * dim fails the run with the node named: nothing is clamped.
 */
#include <math.h>
#include <string.h>

#include "graph/dtype_int.h"
#include "graph/ops_int.h"

/* ---- embedding: table [V, D] gathered by ids ---- */

static int embedding_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                           char *why, size_t wl)
{
	if (in[0].rank != 2 || in[1].rank >= MU_TENSOR_MAX_RANK)
		return mu__fail(why, wl, "node %.100s: embedding needs a 2-D table %.100s", n->name, n->in[0]);
	if (in[1].dtype != MU_DTYPE_F32 && !mu__is_index(in[1].dtype))
		return mu__fail(why, wl, "node %.100s: ids %.100s must be I64, I32 or F32", n->name, n->in[1]);
	out[0] = in[1];
	out[0].dims[out[0].rank++] = in[0].dims[1];
	out[0].dtype = in[0].dtype;
	return 0;
}

static int embedding_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	uint64_t vocab = in[0]->dims[0], row = in[0]->dims[1] * mu_dtype_size((int)in[0]->dtype);

	(void)n;
	for (uint64_t i = 0; i < in[1]->numel; i++) {
		uint64_t k;

		if (in[1]->dtype == MU_DTYPE_F32) {
			float id = in[1]->data[i];

			/* compared as doubles first: casting 1e30 or inf is undefined */
			if (!(id >= 0) || id != floorf(id) || (double)id >= (double)vocab)
				return MU_EPROTO; /* an id outside the table */
			k = (uint64_t)id;
		} else {
			int64_t id = mu__index_at(in[1], i);

			if (id < 0 || (uint64_t)id >= vocab)
				return MU_EPROTO;
			k = (uint64_t)id;
		}
		memcpy((char *)out[0]->raw + i * row, (const char *)in[0]->raw + k * row, row);
	}
	return 0;
}

const mu__op_t mu__op_embedding = {"embedding", 2, 2, 1, NULL, embedding_shape, embedding_run,
                                   mu__no_flops, 1, 0, NULL};

/* ---- gather: data[..., indices[...], ...] along axis; negatives count
 * from the end (ONNX Gather) ---- */

static int axis_check(const mu__node_t *n, char *why, size_t wl)
{
	return mu__want_int(n, "axis", 0, why, wl);
}

static int gather_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out,
                        char *why, size_t wl)
{
	int axis = mu__axis(mu__attr_int(n, "axis", 0), in[0].rank);
	uint32_t r = 0;

	if (axis < 0)
		return mu__fail(why, wl, "node %.100s: axis out of range for %.100s", n->name, n->in[0]);
	if (!mu__is_index(in[1].dtype))
		return mu__fail(why, wl, "node %.100s: indices %.100s must be I64 or I32", n->name, n->in[1]);
	if (in[0].rank - 1 + in[1].rank > MU_TENSOR_MAX_RANK)
		return mu__fail(why, wl, "node %.100s: the result would have over 8 dims%.0s", n->name, "");
	for (int i = 0; i < axis; i++)
		out[0].dims[r++] = in[0].dims[i];
	for (uint32_t i = 0; i < in[1].rank; i++)
		out[0].dims[r++] = in[1].dims[i];
	for (uint32_t i = (uint32_t)axis + 1; i < in[0].rank; i++)
		out[0].dims[r++] = in[0].dims[i];
	out[0].rank = r;
	out[0].dtype = in[0].dtype;
	return 0;
}

static int gather_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	const mu_tensor_t *x = in[0], *ix = in[1];
	int axis = mu__axis(mu__attr_int(n, "axis", 0), x->rank);
	uint64_t outer = 1, inner = 1, d = x->dims[axis];
	size_t es = mu_dtype_size((int)x->dtype);
	char *o = out[0]->raw;

	for (int i = 0; i < axis; i++)
		outer *= x->dims[i];
	for (uint32_t i = (uint32_t)axis + 1; i < x->rank; i++)
		inner *= x->dims[i];
	for (uint64_t k = 0; k < ix->numel; k++) {
		int64_t v = mu__index_at(ix, k);

		if (v < 0)
			v += (int64_t)d;
		if (v < 0 || (uint64_t)v >= d)
			return MU_EPROTO;
	}
	for (uint64_t a = 0; a < outer; a++)
		for (uint64_t k = 0; k < ix->numel; k++) {
			int64_t v = mu__index_at(ix, k);
			uint64_t src = (a * d + (uint64_t)(v < 0 ? v + (int64_t)d : v)) * inner;

			memcpy(o, (const char *)x->raw + src * es, inner * es);
			o += inner * es;
		}
	return 0;
}

const mu__op_t mu__op_gather = {"gather", 2, 2, 1, axis_check, gather_shape, gather_run, mu__no_flops, 1, 0, NULL};

/* ---- gather_elements: out[i] = data[i with i[axis] = indices[i]] ---- */

static int gel_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                     size_t wl)
{
	int axis = mu__axis(mu__attr_int(n, "axis", 0), in[0].rank);

	if (axis < 0 || in[1].rank != in[0].rank)
		return mu__fail(why, wl, "node %.100s: indices %.100s need the data's rank, and axis in it",
		                n->name, n->in[1]);
	if (!mu__is_index(in[1].dtype))
		return mu__fail(why, wl, "node %.100s: indices %.100s must be I64 or I32", n->name, n->in[1]);
	for (uint32_t i = 0; i < in[0].rank; i++)
		if ((int)i != axis && in[1].dims[i] > in[0].dims[i])
			return mu__fail(why, wl, "node %.100s: indices %.100s reach past the data", n->name, n->in[1]);
	out[0] = in[1];
	out[0].dtype = in[0].dtype;
	return 0;
}

static int gel_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	const mu_tensor_t *x = in[0], *ix = in[1];
	int axis = mu__axis(mu__attr_int(n, "axis", 0), x->rank);
	uint64_t st[MU_TENSOR_MAX_RANK], idx[MU_TENSOR_MAX_RANK] = {0}, s = 1;
	size_t es = mu_dtype_size((int)x->dtype);

	for (int d = (int)x->rank - 1; d >= 0; d--) {
		st[d] = s;
		s *= x->dims[d];
	}
	for (uint64_t k = 0; k < ix->numel; k++) {
		int64_t v = mu__index_at(ix, k);
		uint64_t src = 0;

		if (v < 0)
			v += (int64_t)x->dims[axis];
		if (v < 0 || (uint64_t)v >= x->dims[axis])
			return MU_EPROTO;
		for (uint32_t d = 0; d < x->rank; d++)
			src += ((int)d == axis ? (uint64_t)v : idx[d]) * st[d];
		mu__ecopy(out[0]->raw, k, x->raw, src, es);
		for (int d = (int)x->rank - 1; d >= 0; d--) {
			if (++idx[d] < ix->dims[d])
				break;
			idx[d] = 0;
		}
	}
	return 0;
}

const mu__op_t mu__op_gather_elements = {"gather_elements", 2, 2, 1, axis_check, gel_shape, gel_run,
                                         mu__no_flops, 1, 0, NULL};

/* ---- trilu: keep the upper (j - i >= k) or lower (j - i <= k) triangle
 * of the last two dims, zero the rest ---- */

static int trilu_check(const mu__node_t *n, char *why, size_t wl)
{
	int rc = mu__want_int(n, "upper", 0, why, wl);

	return rc == 0 ? mu__want_int(n, "k", 0, why, wl) : rc;
}

static int trilu_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                       size_t wl)
{
	if (in[0].rank < 2)
		return mu__fail(why, wl, "node %.100s: trilu needs at least 2 dims in %.100s", n->name, n->in[0]);
	out[0] = in[0];
	return 0;
}

static int trilu_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	const mu_tensor_t *x = in[0];
	int upper = mu__attr_int(n, "upper", 1) != 0;
	int64_t k = mu__attr_int(n, "k", 0);
	uint64_t rows = x->dims[x->rank - 2], cols = x->dims[x->rank - 1];
	size_t es = mu_dtype_size((int)x->dtype);

	memset(out[0]->raw, 0, mu_tensor_nbytes(out[0]));
	for (uint64_t e = 0; e < x->numel; e++) {
		int64_t i = (int64_t)(e / cols % rows), j = (int64_t)(e % cols);

		if (upper ? j - i >= k : j - i <= k)
			mu__ecopy(out[0]->raw, e, x->raw, e, es);
	}
	return 0;
}

const mu__op_t mu__op_trilu = {"trilu", 1, 1, 1, trilu_check, trilu_shape, trilu_run, mu__no_flops, 1, 0, NULL};

/* ---- pad: "pads" = [begin_0 .. begin_r-1, end_0 .. end_r-1] (negative
 * crops); mode constant ("value", 0 by default), reflect or edge ---- */

typedef enum { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE } pad_mode_t;

static int pad_mode(const mu__node_t *n)
{
	const char *m = mu__attr_str(n, "mode", "constant");

	return strcmp(m, "constant") == 0 ? PAD_CONSTANT : strcmp(m, "reflect") == 0 ? PAD_REFLECT
	       : strcmp(m, "edge") == 0 ? PAD_EDGE : -1;
}

static int pad_check(const mu__node_t *n, char *why, size_t wl)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(n->attrs, "value");
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(n->attrs, "pads"), *it;

	if (pad_mode(n) < 0)
		return mu__fail(why, wl, "node %.100s: pad mode is constant, reflect or edge%.0s", n->name, "");
	if (v != NULL && !cJSON_IsNumber(v))
		return mu__fail(why, wl, "node %.100s: pad value must be a number%.0s", n->name, "");
	if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) > 2 * MU_TENSOR_MAX_RANK)
		return mu__fail(why, wl, "node %.100s: pad needs \"pads\", 2 integers per dim%.0s", n->name, "");
	cJSON_ArrayForEach(it, p)
		if (!mu__json_is_int(it, -1e15, 1e15))
			return mu__fail(why, wl, "node %.100s: pads must be integers%.0s", n->name, "");
	return 0;
}

static void pads_of(const mu__node_t *n, uint32_t rank, int64_t *b, int64_t *e)
{
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(n->attrs, "pads");

	for (uint32_t i = 0; i < rank; i++) {
		b[i] = (int64_t)cJSON_GetArrayItem(p, (int)i)->valuedouble;
		e[i] = (int64_t)cJSON_GetArrayItem(p, (int)(i + rank))->valuedouble;
	}
}

static int pad_shape(const mu__node_t *n, const mu__shape_t *in, mu__shape_t *out, char *why,
                     size_t wl)
{
	int64_t b[MU_TENSOR_MAX_RANK], e[MU_TENSOR_MAX_RANK];
	int mode = pad_mode(n);

	if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(n->attrs, "pads")) != 2 * (int)in[0].rank)
		return mu__fail(why, wl, "node %.100s: pads must have 2 entries per dim of %.100s", n->name,
		                n->in[0]);
	pads_of(n, in[0].rank, b, e);
	out[0] = in[0];
	for (uint32_t i = 0; i < in[0].rank; i++) {
		int64_t d = (int64_t)in[0].dims[i] + b[i] + e[i];

		/* reflect mirrors without repeating the edge: a pad < the dim */
		if (d < 0 || (mode != PAD_CONSTANT && (b[i] > 0 || e[i] > 0) && in[0].dims[i] == 0) ||
		    (mode == PAD_REFLECT && (b[i] >= (int64_t)in[0].dims[i] || e[i] >= (int64_t)in[0].dims[i]) &&
		     (b[i] > 0 || e[i] > 0)) || d > ((int64_t)1 << 50))
			return mu__fail(why, wl, "node %.100s: those pads do not fit %.100s", n->name, n->in[0]);
		out[0].dims[i] = (uint64_t)d;
	}
	return 0;
}

/* Source coordinate of output coordinate o along a dim of size d with
 * begin pad b, or -1 for the constant. */
static int64_t pad_src(int mode, int64_t o, int64_t b, int64_t d)
{
	int64_t s = o - b;

	if (s >= 0 && s < d)
		return s;
	if (mode == PAD_CONSTANT)
		return -1;
	if (mode == PAD_EDGE)
		return s < 0 ? 0 : d - 1;
	while (s < 0 || s >= d) /* reflect: at most one bounce, the pad < d */
		s = s < 0 ? -s : 2 * (d - 1) - s;
	return s;
}

static int pad_run(const mu__node_t *n, mu_tensor_t *const *in, mu_tensor_t **out)
{
	const mu_tensor_t *x = in[0];
	int64_t b[MU_TENSOR_MAX_RANK], e[MU_TENSOR_MAX_RANK];
	uint64_t idx[MU_TENSOR_MAX_RANK] = {0};
	int mode = pad_mode(n);
	size_t es = mu_dtype_size((int)x->dtype);
	unsigned char fill[8];

	pads_of(n, x->rank, b, e);
	mu__put_f(x->dtype, fill, 0, mu__attr_num(n, "value", 0));
	for (uint64_t o = 0; o < out[0]->numel; o++) {
		uint64_t src = 0;
		int hole = 0;

		for (uint32_t d = 0; d < x->rank && !hole; d++) {
			int64_t s = pad_src(mode, (int64_t)idx[d], b[d], (int64_t)x->dims[d]);

			hole = s < 0;
			src = src * x->dims[d] + (uint64_t)(s < 0 ? 0 : s);
		}
		if (hole)
			memcpy((char *)out[0]->raw + o * es, fill, es);
		else
			mu__ecopy(out[0]->raw, o, x->raw, src, es);
		for (int d = (int)x->rank - 1; d >= 0; d--) {
			if (++idx[d] < out[0]->dims[d])
				break;
			idx[d] = 0;
		}
	}
	return 0;
}

const mu__op_t mu__op_pad = {"pad", 1, 1, 1, pad_check, pad_shape, pad_run, mu__no_flops, 1, 0, NULL};
