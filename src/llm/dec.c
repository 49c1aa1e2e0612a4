/* SPDX-License-Identifier: MIT */
/*
 * The decoder: layers [first, last) of a source bound for compute, the KV
 * caches of open sequences, and the forward pass over a chunk of
 * positions. The per-token maths that is not a matrix product (norms,
 * RoPE, attention, SiLU) is in llm/ops.c; products go through kern/kern_int.h.
 *
 * Bit-for-bit: every step computes each token's values with a fixed order
 * of operations that depends on neither the chunk it came in, the layers
 * held, nor the threads, so any split and any chunking agree exactly.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/error_int.h"
#include "core/time_int.h"
#include "llm/arch_int.h"
#include "llm/llm_int.h"
#include "llm/ops_int.h"

typedef struct {
	uint64_t owner, id;
	int32_t ctx, len;
	int kvt;              /* a mu__kv_t: the type of kv's rows */
	unsigned char *kv;    /* [layers held][2][ctx] rows of kv_dim in kvt */
	double used;          /* opened or last run (mu__clock_ms) */
} seq_t;

struct mu__dec_s {
	mu__llm_hp_t hp;
	int first, last, embeds, head;
	mu__dec_layer_t *L;   /* last - first entries */
	mu__wmat_t embd, out;
	float *out_norm;
	float *inv_freq;      /* head_dim / 2 */
	mu__pool_t *pool;
	mu__dec_opts_t o;
	seq_t *seqs;
	int nseqs;
	uint64_t kv_used;
	mu__dec_scratch_t s;
	int32_t *rpos, *rctx;  /* per row of a call: position, its sequence's ctx */
	unsigned char **rkv;   /* ... and its sequence's cache */
	int *rkvt;             /* ... and that cache's type */
};

/* An f32 copy of a vector tensor (norm or bias), NULL when absent. */
static int vec_copy(const mu__llm_src_t *src, const char *name, int required,
                    float **out)
{
	const mu__llm_tensor_t *t = mu__llm_src_tensor(src, name);

	*out = NULL;
	if (t == NULL)
		return required ? MU_EPROTO : 0;
	*out = mu__malloc((size_t)t->m.cols * sizeof(float));
	if (*out == NULL)
		return MU_ENOMEM;
	mu__wmat_row(&t->m, 0, *out);
	return 0;
}

static int mat(const mu__llm_src_t *src, const char *name, mu__wmat_t *m)
{
	const mu__llm_tensor_t *t = mu__llm_src_tensor(src, name);

	if (t == NULL)
		return MU_EPROTO;
	*m = t->m;
	return 0;
}

/* Where the binder puts each layer role in ops_int.h's layer (vectors are
 * float *, matrices mu__wmat_t); set: the role has a place. */
#define SLOT(r, m) [r] = {offsetof(mu__dec_layer_t, m), 1}
static const struct {
	size_t off;
	int set;
} slots[MU__R_COUNT] = {
	SLOT(MU__R_ATTN_NORM, attn_norm), SLOT(MU__R_Q, wq), SLOT(MU__R_K, wk),
	SLOT(MU__R_V, wv), SLOT(MU__R_O, wo), SLOT(MU__R_Q_BIAS, bq), SLOT(MU__R_K_BIAS, bk),
	SLOT(MU__R_V_BIAS, bv), SLOT(MU__R_O_BIAS, bo), SLOT(MU__R_FFN_NORM, ffn_norm),
	SLOT(MU__R_GATE, gate), SLOT(MU__R_UP, up), SLOT(MU__R_DOWN, down),
	SLOT(MU__R_Q_NORM, q_norm), SLOT(MU__R_K_NORM, k_norm),
};
#undef SLOT

/* Rows [r0, r0 + rows) of m, in place: a row of a matrix is whole blocks,
 * so any range of rows is a matrix of its own. */
static mu__wmat_t row_view(const mu__wmat_t *m, int64_t r0, int64_t rows)
{
	mu__wmat_t v = *m;

	v.data = (const unsigned char *)m->data + (size_t)r0 * mu__wtype_row_bytes(m->type, m->cols);
	v.rows = rows;
	return v;
}

/* A fused matrix's parts: q, k, v (MU__R_QKV) or gate, up (MU__R_GATE_UP). */
static int bind_fused(const mu__llm_src_t *src, const char *name, mu__role_t role,
                      mu__dec_layer_t *L)
{
	const mu__llm_hp_t *h = &src->hp;
	int64_t q = (int64_t)h->n_heads * h->head_dim, kv = (int64_t)h->n_kv_heads * h->head_dim;
	mu__wmat_t m;
	int rc = mat(src, name, &m);

	if (rc != 0)
		return rc;
	if (role == MU__R_QKV) {
		L->wq = row_view(&m, 0, q);
		L->wk = row_view(&m, q, kv);
		L->wv = row_view(&m, q + kv, kv);
	} else {
		L->gate = row_view(&m, 0, h->hidden);
		L->up = row_view(&m, h->hidden, h->hidden);
	}
	return 0;
}

/* Layer l's tensors by the architecture's specs (mu__llm_check_range has
 * checked their shapes). */
static int bind_layer(const mu__llm_src_t *src, const mu__arch_t *a, int l, mu__dec_layer_t *L)
{
	unsigned char *base = (unsigned char *)L;
	char name[64];
	size_t i;
	int rc;

	for (i = 0; i < a->nlayer; i++) {
		const mu__tspec_t *t = &a->layer[i];

		snprintf(name, sizeof(name), "blk.%d.%s", l, t->gguf);
		if (t->role == MU__R_QKV || t->role == MU__R_GATE_UP)
			rc = bind_fused(src, name, t->role, L);
		else if (!slots[t->role].set)
			return MU_EPROTO; /* a role the decoder has no place for */
		else if (t->rows == MU__SZ_1)
			rc = vec_copy(src, name, t->need == MU__NEED_REQUIRED,
			              (float **)(void *)(base + slots[t->role].off));
		else if (t->need == MU__NEED_OPTIONAL && mu__llm_src_tensor(src, name) == NULL)
			rc = 0;
		else
			rc = mat(src, name, (mu__wmat_t *)(void *)(base + slots[t->role].off));
		if (rc != 0)
			return rc;
	}
	return 0;
}

static void free_layer(mu__dec_layer_t *L)
{
	mu__free(L->bq);
	mu__free(L->bk);
	mu__free(L->bv);
	mu__free(L->bo);
	mu__free(L->attn_norm);
	mu__free(L->ffn_norm);
	mu__free(L->q_norm);
	mu__free(L->k_norm);
}

static int bind(mu__dec_t *d, const mu__llm_src_t *src)
{
	const mu__arch_t *a = mu__arch_by_name(src->hp.arch);
	const char *embd, *out;
	int l, rc;

	if (a == NULL)
		return MU_EPROTO;
	embd = mu__arch_model_name(a, MU__R_TOKEN_EMBD);
	out = mu__arch_model_name(a, d->hp.tied ? MU__R_TOKEN_EMBD : MU__R_OUTPUT);
	d->L = mu__calloc((size_t)(d->last - d->first) + 1, sizeof(*d->L));
	if (d->L == NULL)
		return MU_ENOMEM;
	for (l = d->first; l < d->last; l++)
		if ((rc = bind_layer(src, a, l, &d->L[l - d->first])) != 0)
			return rc;
	if (d->embeds && (rc = mat(src, embd, &d->embd)) != 0)
		return rc;
	if (d->head) {
		rc = mat(src, out, &d->out);
		if (rc == 0)
			rc = vec_copy(src, mu__arch_model_name(a, MU__R_OUTPUT_NORM), 1, &d->out_norm);
		if (rc != 0)
			return rc;
	}
	return mu__llm_inv_freq(&d->hp, src, &d->inv_freq);
}

int mu__dec_new(const mu__llm_src_t *src, int first, int last,
                const mu__dec_opts_t *o, mu__dec_t **out, char *why, size_t wl)
{
	const mu__llm_hp_t *h = &src->hp;
	mu__dec_t *d;
	int rc;

	*out = NULL;
	if (first < 0 || last > h->n_layers || first > last || (first == last && last != h->n_layers))
		return mu__why(why, wl, MU_EARG, "layers [%d, %d) are not a range of the model's %d",
		               first, last, h->n_layers);
	if (o->threads < 1 || o->max_seqs < 1 || o->max_chunk < 1 || o->max_chunk > 65536)
		return mu__why(why, wl, MU_EARG, "threads, max_seqs and max_chunk must be positive");
	if ((rc = mu__kv_check(o->kv_type, h, why, wl)) != 0)
		return rc;
	if ((d = mu__calloc(1, sizeof(*d))) == NULL)
		return MU_ENOMEM;
	d->hp = *h;
	d->first = first;
	d->last = last;
	d->embeds = first == 0;
	d->head = last == h->n_layers;
	d->o = *o;
	rc = bind(d, src);
	if (rc == MU_EPROTO)
		mu__why(why, wl, rc, "%.300s: a tensor of layers [%d, %d) is missing", src->path,
		        first, last);
	if (rc == 0 && (d->seqs = mu__calloc((size_t)o->max_seqs, sizeof(*d->seqs))) == NULL)
		rc = MU_ENOMEM;
	if (rc == 0)
		rc = mu__dec_scratch_init(&d->s, h, o->max_chunk, o->threads);
	if (rc == 0 && ((d->rpos = mu__calloc((size_t)o->max_chunk, sizeof(int32_t))) == NULL ||
	                (d->rctx = mu__calloc((size_t)o->max_chunk, sizeof(int32_t))) == NULL ||
	                (d->rkv = mu__calloc((size_t)o->max_chunk, sizeof(*d->rkv))) == NULL ||
	                (d->rkvt = mu__calloc((size_t)o->max_chunk, sizeof(int))) == NULL))
		rc = MU_ENOMEM;
	if (rc == 0 && (rc = mu__pool_new(o->threads, &d->pool)) != 0)
		mu__why(why, wl, rc, "cannot start %d compute threads", o->threads);
	if (rc != 0) {
		mu__dec_free(d);
		return rc;
	}
	*out = d;
	return 0;
}

void mu__dec_free(mu__dec_t *d)
{
	int i;

	if (d == NULL)
		return;
	for (i = 0; d->L != NULL && i < d->last - d->first; i++)
		free_layer(&d->L[i]);
	for (i = 0; i < d->nseqs; i++)
		mu__free(d->seqs[i].kv);
	mu__free(d->L);
	mu__free(d->seqs);
	mu__free(d->out_norm);
	mu__free(d->inv_freq);
	mu__dec_scratch_free(&d->s);
	mu__free(d->rpos);
	mu__free(d->rctx);
	mu__free(d->rkv);
	mu__free(d->rkvt);
	mu__pool_free(d->pool);
	mu__free(d);
}

uint64_t mu__dec_kv_per_seq_type(const mu__dec_t *d, int32_t ctx, int kv_type)
{
	return (uint64_t)(d->last - d->first) * 2 * (uint64_t)ctx *
	       mu__kv_row_bytes(kv_type, (int64_t)d->hp.n_kv_heads * d->hp.head_dim);
}

uint64_t mu__dec_kv_per_seq(const mu__dec_t *d, int32_t ctx)
{
	return mu__dec_kv_per_seq_type(d, ctx, d->o.kv_type);
}

static seq_t *find_seq(const mu__dec_t *d, uint64_t owner, uint64_t id)
{
	int i;

	for (i = 0; i < d->nseqs; i++)
		if (d->seqs[i].owner == owner && d->seqs[i].id == id)
			return &d->seqs[i];
	return NULL;
}

static int owned(const mu__dec_t *d, uint64_t owner)
{
	int i, n = 0;

	for (i = 0; i < d->nseqs; i++)
		n += d->seqs[i].owner == owner;
	return n;
}

int mu__dec_seq_open(mu__dec_t *d, uint64_t owner, uint64_t id, int32_t ctx, char *why,
                     size_t wl)
{
	return mu__dec_seq_open_kv(d, owner, id, ctx, d->o.kv_type, why, wl);
}

int mu__dec_seq_open_kv(mu__dec_t *d, uint64_t owner, uint64_t id, int32_t ctx, int kv_type,
                        char *why, size_t wl)
{
	uint64_t need;
	seq_t *s;
	int rc;

	if ((rc = mu__kv_check(kv_type, &d->hp, why, wl)) != 0)
		return rc;
	if (find_seq(d, owner, id) != NULL)
		return mu__why(why, wl, -EEXIST, "sequence %llu is already open",
		               (unsigned long long)id);
	if (ctx < 1 || ctx > d->hp.ctx)
		return mu__why(why, wl, MU_ETOOBIG, "a context of %d positions: the model takes 1 to %d",
		               ctx, d->hp.ctx);
	if (d->nseqs >= d->o.max_seqs)
		return mu__why(why, wl, MU_ETOOBIG, "%d sequences are open, the most this stage keeps "
		               "(--max-sequences)", d->nseqs);
	if (d->o.max_per_owner > 0 && owned(d, owner) >= d->o.max_per_owner)
		return mu__why(why, wl, MU_ETOOBIG, "this connection has %d sequences open, its share "
		               "of the %d this stage keeps (--max-sequences-per-connection)",
		               owned(d, owner), d->o.max_seqs);
	need = mu__dec_kv_per_seq_type(d, ctx, kv_type);
	if (need > d->o.kv_bytes - d->kv_used || d->kv_used > d->o.kv_bytes)
		return mu__why(why, wl, MU_ETOOBIG, "a KV cache of %llu bytes for %d positions does not "
		               "fit: %llu of %llu bytes are reserved (--kv-mem)",
		               (unsigned long long)need, ctx, (unsigned long long)d->kv_used,
		               (unsigned long long)d->o.kv_bytes);
	s = &d->seqs[d->nseqs];
	/* Large blocks come from mmap: pages are committed as positions fill. */
	s->kv = need > 0 ? mu__malloc((size_t)need) : NULL;
	if (need > 0 && s->kv == NULL)
		return mu__why(why, wl, MU_ENOMEM, "cannot allocate a KV cache of %llu bytes",
		               (unsigned long long)need);
	s->owner = owner;
	s->id = id;
	s->ctx = ctx;
	s->kvt = kv_type;
	s->len = 0;
	s->used = mu__clock_ms();
	d->nseqs++;
	d->kv_used += need;
	return 0;
}

static void drop_seq(mu__dec_t *d, seq_t *s)
{
	d->kv_used -= mu__dec_kv_per_seq_type(d, s->ctx, s->kvt);
	mu__free(s->kv);
	*s = d->seqs[--d->nseqs];
}

int mu__dec_seq_close(mu__dec_t *d, uint64_t owner, uint64_t id)
{
	seq_t *s = find_seq(d, owner, id);

	if (s == NULL)
		return -ENOENT;
	drop_seq(d, s);
	return 0;
}

int mu__dec_seq_expire(mu__dec_t *d, double now_ms)
{
	int i = 0, n = 0;

	while (d->o.idle_ms > 0 && i < d->nseqs) {
		if (now_ms - d->seqs[i].used >= d->o.idle_ms) {
			drop_seq(d, &d->seqs[i]);
			n++;
		} else {
			i++;
		}
	}
	return n;
}

int mu__dec_seq_close_owner(mu__dec_t *d, uint64_t owner)
{
	int i = 0, n = 0;

	while (i < d->nseqs) {
		if (d->seqs[i].owner == owner) {
			drop_seq(d, &d->seqs[i]);
			n++;
		} else {
			i++;
		}
	}
	return n;
}

int mu__dec_seqs(const mu__dec_t *d)
{
	return d->nseqs;
}

uint64_t mu__dec_kv_reserved(const mu__dec_t *d)
{
	return d->kv_used;
}

void mu__dec_shape(const mu__dec_t *d, int *first, int *last, int *embeds, int *head)
{
	*first = d->first;
	*last = d->last;
	*embeds = d->embeds;
	*head = d->head;
}

const mu__llm_hp_t *mu__dec_hp(const mu__dec_t *d)
{
	return &d->hp;
}

static int check_item(const mu__dec_t *d, const seq_t *s, const mu__dec_item_t *it,
                      char *why, size_t wl)
{
	if (s == NULL)
		return mu__why(why, wl, -ENOENT, "sequence %llu is not open here",
		               (unsigned long long)it->id);
	if (it->n < 1)
		return mu__why(why, wl, MU_EARG, "%d positions of sequence %llu", it->n,
		               (unsigned long long)it->id);
	if (it->pos < 0 || it->pos > s->len)
		return mu__why(why, wl, MU_EARG, "position %d of sequence %llu: it holds %d so far",
		               it->pos, (unsigned long long)it->id, s->len);
	if (it->n > s->ctx - it->pos)
		return mu__why(why, wl, MU_ETOOBIG, "positions up to %d do not fit the sequence's "
		               "context of %d", it->pos + it->n, s->ctx);
	return 0;
}

/* Check the call and lay its rows out: positions, caches. Rows in all. */
static int32_t plan_rows(mu__dec_t *d, uint64_t owner, const mu__dec_item_t *it, int nit,
                         const int32_t *tokens, const float *x, seq_t **seqs, char *why,
                         size_t wl)
{
	int32_t rows = 0, r;
	int i, j, rc;

	if (nit < 1 || nit > d->o.max_chunk || (d->embeds ? tokens == NULL : x == NULL))
		return mu__why(why, wl, MU_EARG, "a call takes 1 to %d items and %s", d->o.max_chunk,
		               d->embeds ? "token ids" : "activations");
	for (i = 0; i < nit; i++) {
		seqs[i] = find_seq(d, owner, it[i].id);
		if ((rc = check_item(d, seqs[i], &it[i], why, wl)) != 0)
			return rc;
		seqs[i]->used = mu__clock_ms();
		for (j = 0; j < i; j++)
			if (seqs[j] == seqs[i])
				return mu__why(why, wl, MU_EARG, "sequence %llu appears twice in one call",
				               (unsigned long long)it[i].id);
		if (it[i].n > d->o.max_chunk - rows)
			return mu__why(why, wl, MU_EARG, "more than %d positions in one call",
			               d->o.max_chunk);
		for (r = 0; r < it[i].n; r++, rows++) {
			d->rpos[rows] = it[i].pos + r;
			d->rctx[rows] = seqs[i]->ctx;
			d->rkv[rows] = seqs[i]->kv;
			d->rkvt[rows] = seqs[i]->kvt;
			if (d->embeds && (tokens[rows] < 0 || tokens[rows] >= d->hp.vocab))
				return mu__why(why, wl, MU_EARG, "token id %d is outside the vocabulary of %d",
				               tokens[rows], d->hp.vocab);
		}
	}
	return rows;
}

/* The head over each item's last row (or all its rows). */
static int head(mu__dec_t *d, mu__dec_step_t *st, const mu__dec_item_t *it, int nit,
                float *out)
{
	size_t dim = (size_t)d->hp.dim, v = (size_t)d->hp.vocab;
	int32_t row = 0, k;
	int i, rc;

	for (i = 0; i < nit; i++) {
		k = it[i].all_logits ? it[i].n : 1;
		rc = mu__dec_head(st, d->out_norm, &d->out, d->s.x + (size_t)(row + it[i].n - k) * dim,
		                  k, out);
		if (rc != 0)
			return rc;
		out += (size_t)k * v;
		row += it[i].n;
	}
	return 0;
}

int mu__dec_forward_batch(mu__dec_t *d, uint64_t owner, const mu__dec_item_t *it, int nit,
                          const int32_t *tokens, const float *x, float *out, char *why,
                          size_t wl)
{
	seq_t *seqs[MU__DEC_MAX_ITEMS];
	mu__dec_step_t st;
	int32_t rows, r;
	int l, i, rc;

	if (nit > MU__DEC_MAX_ITEMS)
		return mu__why(why, wl, MU_EARG, "more than %d sequences in one call",
		               MU__DEC_MAX_ITEMS);
	rows = plan_rows(d, owner, it, nit, tokens, x, seqs, why, wl);
	if (rows < 0)
		return rows;
	for (r = 0; d->embeds && r < rows; r++)
		mu__wmat_row(&d->embd, tokens[r], d->s.x + (size_t)r * (size_t)d->hp.dim);
	if (!d->embeds)
		memcpy(d->s.x, x, (size_t)rows * (size_t)d->hp.dim * sizeof(float));
	st = (mu__dec_step_t){&d->hp, d->pool, &d->s, d->inv_freq, NULL, 0, rows,
	                      d->rpos, d->rctx, d->rkv, d->rkvt};
	if (d->first < d->last)
		mu__dec_rope_rows(&st); /* the same angles in every layer */
	for (l = d->first; l < d->last; l++) {
		st.L = &d->L[l - d->first];
		st.layer = l - d->first;
		if ((rc = mu__dec_layer(&st)) != 0)
			return mu__why(why, wl, rc, "out of memory in layer %d", l);
	}
	for (i = 0; i < nit; i++)
		seqs[i]->len = it[i].pos + it[i].n;
	if (!d->head) {
		memcpy(out, d->s.x, (size_t)rows * (size_t)d->hp.dim * sizeof(float));
		return 0;
	}
	rc = head(d, &st, it, nit, out);
	return rc != 0 ? mu__why(why, wl, rc, "out of memory in the head") : 0;
}

int mu__dec_forward(mu__dec_t *d, uint64_t owner, uint64_t id, int32_t pos, int32_t n,
                    const int32_t *tokens, const float *x, float *out,
                    int all_logits, char *why, size_t wl)
{
	mu__dec_item_t it = {id, pos, n, all_logits};

	return mu__dec_forward_batch(d, owner, &it, 1, tokens, x, out, why, wl);
}
