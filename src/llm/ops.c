/* SPDX-License-Identifier: MIT */
/*
 * A Llama-style layer over a chunk of positions:
 *
 *   h  = x + Wo · attn(RoPE(Wq·rms(x) + bq), RoPE(Wk·rms(x) + bk), Wv·rms(x) + bv)
 *   x' = h + Wdown · (silu(Wgate·rms(h)) ⊙ Wup·rms(h))
 *
 * (Qwen3's QK norm: each head of Wq·rms(x) and of Wk·rms(x) goes through
 * an RMSNorm of its own, one weight vector for all heads, before RoPE.)
 *
 * Every value of token i depends only on token i's inputs and the cache,
 * computed in a fixed order (no reassociation: the build does not contract
 * or reorder floating point), so chunking and splitting never change bits.
 * Attention runs one (token, head) pair per task on the pool, each pool
 * thread with its own row of attention weights from the scratch; RoPE's
 * angles are computed once per forward call (mu__dec_rope_rows) for every
 * layer to use. A layer allocates nothing.
 */
#include <math.h>
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "llm/ops_int.h"

static int64_t qdim(const mu__llm_hp_t *h)
{
	return (int64_t)h->n_heads * h->head_dim;
}

static int64_t kvdim(const mu__llm_hp_t *h)
{
	return (int64_t)h->n_kv_heads * h->head_dim;
}

int mu__dec_scratch_init(mu__dec_scratch_t *s, const mu__llm_hp_t *hp, int chunk, int threads)
{
	size_t c = (size_t)chunk, wide = (size_t)(hp->dim > qdim(hp) ? hp->dim : qdim(hp));
	size_t half = (size_t)(hp->head_dim / 2);

	memset(s, 0, sizeof(*s));
	s->x = mu__malloc(c * (size_t)hp->dim * sizeof(float));
	s->xb = mu__malloc(c * wide * sizeof(float));
	s->q = mu__malloc(c * (size_t)qdim(hp) * sizeof(float));
	s->k = mu__malloc(c * (size_t)kvdim(hp) * sizeof(float));
	s->v = mu__malloc(c * (size_t)kvdim(hp) * sizeof(float));
	s->att = mu__malloc(c * (size_t)qdim(hp) * sizeof(float));
	s->hb = mu__malloc(c * (size_t)hp->hidden * sizeof(float));
	s->hb2 = mu__malloc(c * (size_t)hp->hidden * sizeof(float));
	s->cs = mu__malloc((c * half > 0 ? c * half : 1) * sizeof(float));
	s->sn = mu__malloc((c * half > 0 ? c * half : 1) * sizeof(float));
	s->ctx = hp->ctx > 0 ? hp->ctx : 1;
	s->threads = threads > 0 ? threads : 1;
	s->w = mu__malloc((size_t)s->threads * (size_t)s->ctx * sizeof(float));
	s->kvrow = mu__malloc((size_t)s->threads * (size_t)(hp->head_dim > 0 ? hp->head_dim : 1) *
	                      sizeof(float));
	s->h2f = mu__malloc(65536 * sizeof(float));
	if (!s->x || !s->xb || !s->q || !s->k || !s->v || !s->att || !s->hb || !s->hb2 ||
	    !s->cs || !s->sn || !s->w || !s->kvrow || !s->h2f) {
		mu__dec_scratch_free(s);
		return MU_ENOMEM;
	}
	for (uint32_t h = 0; h < 65536; h++)
		s->h2f[h] = mu__f16_to_f32((uint16_t)h);
	return 0;
}

void mu__dec_scratch_free(mu__dec_scratch_t *s)
{
	mu__free(s->x);
	mu__free(s->xb);
	mu__free(s->q);
	mu__free(s->k);
	mu__free(s->v);
	mu__free(s->att);
	mu__free(s->hb);
	mu__free(s->hb2);
	mu__free(s->cs);
	mu__free(s->sn);
	mu__free(s->w);
	mu__free(s->kvrow);
	mu__free(s->h2f);
	memset(s, 0, sizeof(*s));
}

/* Llama 3's rescaling: long wavelengths slow down by factor, short ones
 * stay, and those between are blended. */
static double llama3(const mu__llm_hp_t *h, double inv)
{
	const double pi = 3.14159265358979323846;
	double wavelen = 2 * pi / inv, lo_wl = h->sc_orig / (double)h->sc_low;
	double hi_wl = h->sc_orig / (double)h->sc_high, smooth;

	if (wavelen < hi_wl)
		return inv;
	if (wavelen > lo_wl)
		return inv / h->sc_factor;
	smooth = (h->sc_orig / wavelen - h->sc_low) / (h->sc_high - h->sc_low);
	return (1 - smooth) * inv / h->sc_factor + smooth * inv;
}

int mu__llm_inv_freq(const mu__llm_hp_t *hp, const mu__llm_src_t *src, float **out)
{
	const mu__llm_tensor_t *ff = mu__llm_src_tensor(src, "rope_freqs.weight");
	int32_t half = hp->head_dim / 2, j;
	float *f = mu__malloc((size_t)half * sizeof(float)), *fac = NULL;

	if (f == NULL)
		return MU_ENOMEM;
	if (ff != NULL && ff->m.cols == half && ff->m.rows == 1) {
		if ((fac = mu__malloc((size_t)half * sizeof(float))) == NULL) {
			mu__free(f);
			return MU_ENOMEM;
		}
		mu__wmat_row(&ff->m, 0, fac);
	}
	for (j = 0; j < half; j++) {
		double inv = 1.0 / pow((double)hp->theta, 2.0 * j / hp->head_dim);

		if (hp->scaling == MU__RS_LINEAR)
			inv /= hp->sc_factor;
		else if (hp->scaling == MU__RS_LLAMA3)
			inv = llama3(hp, inv);
		if (fac != NULL && fac[j] > 0)
			inv /= fac[j];
		f[j] = (float)inv;
	}
	mu__free(fac);
	*out = f;
	return 0;
}

/* out = x / sqrt(mean(x^2) + eps) * g, row by row. */
static void rmsnorm(const float *x, const float *g, float *out, int32_t rows, int32_t dim,
                    float eps)
{
	for (int32_t r = 0; r < rows; r++) {
		const float *xr = x + (size_t)r * (size_t)dim;
		float *o = out + (size_t)r * (size_t)dim, scale;
		double ss = 0;

		for (int32_t j = 0; j < dim; j++)
			ss += (double)xr[j] * xr[j];
		scale = (float)(1.0 / sqrt(ss / dim + eps));
		for (int32_t j = 0; j < dim; j++)
			o[j] = g[j] * (xr[j] * scale);
	}
}

/* Rotate each head of v (nh heads of hd) by position p's angles. */
static void rope(float *v, int32_t nh, int32_t hd, mu__rope_t layout, const float *cs,
                 const float *sn)
{
	int32_t half = hd / 2;

	for (int32_t h = 0; h < nh; h++) {
		float *x = v + (size_t)h * (size_t)hd;

		for (int32_t j = 0; j < half; j++) {
			int32_t a = layout == MU__ROPE_PAIRS ? 2 * j : j;
			int32_t b = layout == MU__ROPE_PAIRS ? 2 * j + 1 : j + half;
			float x0 = x[a], x1 = x[b];

			x[a] = x0 * cs[j] - x1 * sn[j];
			x[b] = x1 * cs[j] + x0 * sn[j];
		}
	}
}

void mu__dec_rope_rows(const mu__dec_step_t *st)
{
	int32_t half = st->hp->head_dim / 2;

	for (int32_t i = 0; i < st->n; i++) {
		float p = (float)st->pos[i], *cs = st->s->cs + (size_t)i * (size_t)half;
		float *sn = st->s->sn + (size_t)i * (size_t)half;

		for (int32_t j = 0; j < half; j++) {
			float a = p * st->inv_freq[j];

			cs[j] = cosf(a);
			sn[j] = sinf(a);
		}
	}
}

static void rope_chunk(const mu__dec_step_t *st)
{
	const mu__llm_hp_t *h = st->hp;
	size_t half = (size_t)(h->head_dim / 2);

	for (int32_t i = 0; i < st->n; i++) {
		const float *cs = st->s->cs + (size_t)i * half, *sn = st->s->sn + (size_t)i * half;

		rope(st->s->q + (size_t)i * (size_t)qdim(h), h->n_heads, h->head_dim, h->rope, cs, sn);
		rope(st->s->k + (size_t)i * (size_t)kvdim(h), h->n_kv_heads, h->head_dim, h->rope, cs, sn);
	}
}

/* Bytes of one cache row (kv_dim elements) of row i's sequence. */
static size_t row_bytes(const mu__dec_step_t *st, int32_t i)
{
	return (size_t)mu__kv_row_bytes(st->kvt[i], kvdim(st->hp));
}

/* Row i's cache of this layer: keys, then values. */
static unsigned char *layer_k(const mu__dec_step_t *st, int32_t i)
{
	return st->kv[i] + (size_t)st->layer * 2 * (size_t)st->ctx[i] * row_bytes(st, i);
}

static unsigned char *layer_v(const mu__dec_step_t *st, int32_t i)
{
	return layer_k(st, i) + (size_t)st->ctx[i] * row_bytes(st, i);
}

/* A dot product in eight fixed lanes, summed in a fixed order. */
static float dot(const float *a, const float *b, int32_t n)
{
	float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
	int32_t k = 0;

	for (; k + 8 <= n; k += 8)
		for (int j = 0; j < 8; j++)
			l[j] += a[k + j] * b[k + j];
	for (; k < n; k++)
		l[k & 7] += a[k] * b[k];
	return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* dot(a, b read back as f32 through tab): the same operations in the same
 * order, without writing the row out first. */
static float dot_f16(const float *a, const uint16_t *b, const float *tab, int32_t n)
{
	float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
	int32_t k = 0;

	for (; k + 8 <= n; k += 8)
		for (int j = 0; j < 8; j++)
			l[j] += a[k + j] * tab[b[k + j]];
	for (; k < n; k++)
		l[k & 7] += a[k] * tab[b[k]];
	return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* dot(a, Q8_0 blocks b read back as f32, d * q): the same operations in
 * the same order (a block is 32 elements, four rounds of the lanes). */
static float dot_q8(const float *a, const unsigned char *b, const float *tab, int32_t n)
{
	float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};

	for (int32_t k = 0; k < n; k += MU__QBLOCK, b += 34) {
		uint16_t dh;
		float d;

		memcpy(&dh, b, 2);
		d = tab[dh];
		for (int32_t c = 0; c < MU__QBLOCK; c += 8)
			for (int j = 0; j < 8; j++)
				l[j] += a[k + c + j] * (d * (float)(int8_t)b[2 + c + j]);
	}
	return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/*
 * One head's key or value at a cache position (at: the position's row;
 * off: the head's first element, a whole number of the type's blocks:
 * mu__kv_check), read back exactly: the stored f32 itself, f16 through
 * the scratch's table, else the type's to_f32 into buf.
 */
typedef struct {
	const mu__wtype_info_t *w;
	const float *tab; /* mu__dec_scratch_t.h2f */
	float *buf;       /* head_dim floats of this thread's */
	int32_t hd;
} head_reader_t;

static const void *head_at(const head_reader_t *r, const unsigned char *at, int64_t off)
{
	return at + (size_t)(off / r->w->block) * r->w->block_bytes;
}

/* q · the head's key. */
static float head_dot(const head_reader_t *r, const float *q, const unsigned char *at,
                      int64_t off)
{
	const void *p = head_at(r, at, off);

	if (r->w == &mu__wtypes[MU__WT_F32])
		return dot(q, p, r->hd);
	if (r->w == &mu__wtypes[MU__WT_F16])
		return dot_f16(q, p, r->tab, r->hd);
	if (r->w == &mu__wtypes[MU__WT_Q8_0])
		return dot_q8(q, p, r->tab, r->hd);
	r->w->to_f32(p, r->hd, r->buf);
	return dot(q, r->buf, r->hd);
}

/* o += pj * the head's value. */
static void head_axpy(const head_reader_t *r, float pj, const unsigned char *at, int64_t off,
                      float *o)
{
	const void *p = head_at(r, at, off);
	const float *v = p;

	if (r->w == &mu__wtypes[MU__WT_F16]) {
		const uint16_t *h = p;

		for (int32_t e = 0; e < r->hd; e++)
			o[e] += pj * r->tab[h[e]];
		return;
	}
	if (r->w == &mu__wtypes[MU__WT_Q8_0]) {
		const unsigned char *b = p;

		for (int32_t k = 0; k < r->hd; k += MU__QBLOCK, b += 34) {
			uint16_t dh;
			float d;

			memcpy(&dh, b, 2);
			d = r->tab[dh];
			for (int j = 0; j < MU__QBLOCK; j++)
				o[k + j] += pj * (d * (float)(int8_t)b[2 + j]);
		}
		return;
	}
	if (r->w != &mu__wtypes[MU__WT_F32]) {
		r->w->to_f32(p, r->hd, r->buf);
		v = r->buf;
	}
	for (int32_t e = 0; e < r->hd; e++)
		o[e] += pj * v[e];
}

/* Tasks [lo, hi) are (token, head) pairs: causal softmax attention over
 * the cache, within the sliding window if the model has one. thread's row
 * of the scratch holds the weights (a position is below the model's ctx). */
static void attend(void *argp, int64_t lo, int64_t hi, int thread)
{
	const mu__dec_step_t *st = argp;
	const mu__llm_hp_t *h = st->hp;
	int32_t hd = h->head_dim, group = h->n_heads / h->n_kv_heads;
	float scale = 1.0f / sqrtf((float)hd);
	float *w = st->s->w + (size_t)thread * (size_t)st->s->ctx;
	head_reader_t r = {NULL, st->s->h2f, st->s->kvrow + (size_t)thread * (size_t)hd, hd};

	for (int64_t t = lo; t < hi; t++) {
		int32_t i = (int32_t)(t / h->n_heads), head = (int32_t)(t % h->n_heads);
		int32_t p = st->pos[i], j0 = h->window > 0 && p + 1 > h->window ? p + 1 - h->window : 0;
		const unsigned char *kc = layer_k(st, i), *vc = layer_v(st, i);
		size_t rb = row_bytes(st, i);
		const float *q = st->s->q + (size_t)i * (size_t)qdim(h) + (size_t)head * (size_t)hd;
		int64_t kvo = (int64_t)(head / group) * hd;
		float *o = st->s->att + (size_t)i * (size_t)qdim(h) + (size_t)head * (size_t)hd;
		float mx = -INFINITY, sum = 0;

		r.w = mu__wtype_info(mu__kv_types[st->kvt[i]].wt);
		for (int32_t j = j0; j <= p; j++) {
			w[j] = head_dot(&r, q, kc + (size_t)j * rb, kvo) * scale;
			mx = w[j] > mx ? w[j] : mx;
		}
		for (int32_t j = j0; j <= p; j++) {
			w[j] = expf(w[j] - mx);
			sum += w[j];
		}
		memset(o, 0, (size_t)hd * sizeof(float));
		for (int32_t j = j0; j <= p; j++)
			head_axpy(&r, w[j] / sum, vc + (size_t)j * rb, kvo, o);
	}
}

static void add_rows(float *x, const float *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] += y[i];
}

static int attention(const mu__dec_step_t *st)
{
	const mu__llm_hp_t *h = st->hp;
	mu__dec_scratch_t *s = st->s;
	const mu__dec_layer_t *L = st->L;
	size_t kvd = (size_t)kvdim(h);

	rmsnorm(s->x, L->attn_norm, s->xb, st->n, h->dim, h->eps);
	if (mu__matmul(st->pool, &L->wq, s->xb, st->n, s->q, L->bq) != 0 ||
	    mu__matmul(st->pool, &L->wk, s->xb, st->n, s->k, L->bk) != 0 ||
	    mu__matmul(st->pool, &L->wv, s->xb, st->n, s->v, L->bv) != 0)
		return MU_ENOMEM;
	if (L->q_norm != NULL) { /* each head of q and k on its own, before RoPE */
		rmsnorm(s->q, L->q_norm, s->q, st->n * h->n_heads, h->head_dim, h->eps);
		rmsnorm(s->k, L->k_norm, s->k, st->n * h->n_kv_heads, h->head_dim, h->eps);
	}
	rope_chunk(st);
	for (int32_t i = 0; i < st->n; i++) {
		const mu__wtype_info_t *wt = mu__wtype_info(mu__kv_types[st->kvt[i]].wt);
		size_t at = (size_t)st->pos[i] * row_bytes(st, i);

		/* stored in the cache's type: what every later position reads */
		wt->from_f32(s->k + (size_t)i * kvd, (int64_t)kvd, layer_k(st, i) + at);
		wt->from_f32(s->v + (size_t)i * kvd, (int64_t)kvd, layer_v(st, i) + at);
	}
	mu__pool_run_indexed(st->pool, attend, (void *)st, (int64_t)st->n * h->n_heads);
	if (mu__matmul(st->pool, &L->wo, s->att, st->n, s->xb, L->bo) != 0)
		return MU_ENOMEM;
	add_rows(s->x, s->xb, (size_t)st->n * (size_t)h->dim);
	return 0;
}

static int mlp(const mu__dec_step_t *st)
{
	const mu__llm_hp_t *h = st->hp;
	mu__dec_scratch_t *s = st->s;
	const mu__dec_layer_t *L = st->L;
	size_t n = (size_t)st->n * (size_t)h->hidden;

	rmsnorm(s->x, L->ffn_norm, s->xb, st->n, h->dim, h->eps);
	if (mu__matmul(st->pool, &L->gate, s->xb, st->n, s->hb, NULL) != 0 ||
	    mu__matmul(st->pool, &L->up, s->xb, st->n, s->hb2, NULL) != 0)
		return MU_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		float g = s->hb[i];

		s->hb[i] = g / (1.0f + expf(-g)) * s->hb2[i];
	}
	if (mu__matmul(st->pool, &L->down, s->hb, st->n, s->xb, NULL) != 0)
		return MU_ENOMEM;
	add_rows(s->x, s->xb, (size_t)st->n * (size_t)h->dim);
	return 0;
}

int mu__dec_layer(const mu__dec_step_t *st)
{
	int rc = attention(st);

	return rc != 0 ? rc : mlp(st);
}

int mu__dec_head(const mu__dec_step_t *st, const float *norm, const mu__wmat_t *head,
                 const float *x, int32_t rows, float *logits)
{
	rmsnorm(x, norm, st->s->xb, rows, st->hp->dim, st->hp->eps);
	return mu__matmul(st->pool, head, st->s->xb, rows, logits, NULL);
}
