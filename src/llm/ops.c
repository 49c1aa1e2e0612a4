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
 * thread with its own row of attention weights from the scratch; its reads
 * of the cache, the scores q . k and the sum of p * v, are kern's
 * (mu__attn_dot, mu__attn_mix: one arithmetic on every path); RoPE's
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
	if (!s->x || !s->xb || !s->q || !s->k || !s->v || !s->att || !s->hb || !s->hb2 ||
	    !s->cs || !s->sn || !s->w) {
		mu__dec_scratch_free(s);
		return MU_ENOMEM;
	}
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

	for (int64_t t = lo; t < hi; t++) {
		int32_t i = (int32_t)(t / h->n_heads), head = (int32_t)(t % h->n_heads);
		int32_t p = st->pos[i], j0 = h->window > 0 && p + 1 > h->window ? p + 1 - h->window : 0;
		mu__wtype_t wt = mu__kv_types[st->kvt[i]].wt;
		size_t rb = row_bytes(st, i);
		/* the head's elements start a whole number of the type's blocks
		 * into a row (mu__kv_check) */
		size_t at = (size_t)j0 * rb + (size_t)(head / group) * (size_t)hd /
		            (size_t)mu__wtypes[wt].block * mu__wtypes[wt].block_bytes;
		const float *q = st->s->q + (size_t)i * (size_t)qdim(h) + (size_t)head * (size_t)hd;
		float *o = st->s->att + (size_t)i * (size_t)qdim(h) + (size_t)head * (size_t)hd;
		float mx = -INFINITY, sum = 0;

		mu__attn_dot(wt, q, layer_k(st, i) + at, rb, p + 1 - j0, hd, w + j0);
		for (int32_t j = j0; j <= p; j++) {
			w[j] *= scale;
			mx = w[j] > mx ? w[j] : mx;
		}
		for (int32_t j = j0; j <= p; j++) {
			w[j] = expf(w[j] - mx);
			sum += w[j];
		}
		for (int32_t j = j0; j <= p; j++)
			w[j] /= sum;
		memset(o, 0, (size_t)hd * sizeof(float));
		mu__attn_mix(wt, w + j0, layer_v(st, i) + at, rb, p + 1 - j0, hd, o);
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
