/* SPDX-License-Identifier: MIT */
/*
 * One layer of a Llama-style decoder over a chunk of positions, and the
 * final norm and head; used by llm/dec.c. Scratch sized for the decoder's
 * largest chunk and its pool's threads is allocated once.
 */
#ifndef MU_LLM_OPS_INT_H
#define MU_LLM_OPS_INT_H

#include "llm/llm_int.h"

typedef struct mu__dec_layer_s mu__dec_layer_t;

struct mu__dec_layer_s {
	mu__wmat_t wq, wk, wv, wo, gate, up, down;
	float *bq, *bk, *bv, *bo; /* NULL when the model has none */
	float *attn_norm, *ffn_norm;
	float *q_norm, *k_norm;   /* [head_dim] each, or NULL (MU__AF_QK_NORM) */
};

typedef struct {
	float *x;   /* [chunk][dim]: the residual stream */
	float *xb;  /* [chunk][max(dim, q_dim)] */
	float *q;   /* [chunk][q_dim] */
	float *k, *v; /* [chunk][kv_dim] */
	float *att; /* [chunk][q_dim] */
	float *hb, *hb2; /* [chunk][hidden] */
	float *cs, *sn; /* [chunk][head_dim / 2]: each row's RoPE angles, set
	                   once per forward call (mu__dec_rope_rows) */
	float *w;       /* [threads][ctx]: attention weights, a row per pool
	                   thread (the pool's thread index picks it) */
	int32_t ctx;    /* the model's context: no position reaches it */
	int threads;    /* the pool's threads the rows of w are for */
} mu__dec_scratch_t;

/*
 * One call's rows: n positions, each of some sequence. Row i is at
 * position pos[i] of the sequence whose cache starts at kv[i] (ctx[i]
 * positions reserved, each a row of kv_dim elements in type kvt[i], a
 * mu__kv_t, of R = mu__kv_row_bytes bytes; layer l of the stage at kv[i] +
 * l * 2 * ctx[i] * R, keys then values). Rows of one sequence come in order of
 * position; a row attends to its sequence's positions up to its own,
 * including rows of this call before it.
 */
typedef struct {
	const mu__llm_hp_t *hp;
	mu__pool_t *pool;
	mu__dec_scratch_t *s;
	const float *inv_freq;
	const mu__dec_layer_t *L;
	int layer;              /* index of L among the stage's layers */
	int32_t n;
	const int32_t *pos, *ctx;
	unsigned char *const *kv;
	const int *kvt;
} mu__dec_step_t;

/* Scratch for chunks of up to chunk rows, run on a pool of threads
 * threads: everything a layer needs, so the forward allocates nothing
 * more. 0 or MU_ENOMEM (then s holds nothing). */
int mu__dec_scratch_init(mu__dec_scratch_t *s, const mu__llm_hp_t *hp, int chunk,
                         int threads);
void mu__dec_scratch_free(mu__dec_scratch_t *s);

/* RoPE inverse frequencies for head_dim/2 pairs, with the model's scaling
 * (and a GGUF file's rope_freqs.weight factors when src has them). */
int mu__llm_inv_freq(const mu__llm_hp_t *hp, const mu__llm_src_t *src,
                     float **out);

/* RoPE's cos and sin of each of the call's rows (st->pos) into st->s:
 * once per forward call, before its first layer (all layers share them). */
void mu__dec_rope_rows(const mu__dec_step_t *st);

/* st->s->x (n rows) through one layer, in place, with the angles of
 * mu__dec_rope_rows. 0 or MU_ENOMEM. */
int mu__dec_layer(const mu__dec_step_t *st);
/* logits[rows][vocab] = head(rms(x rows)). 0 or MU_ENOMEM. */
int mu__dec_head(const mu__dec_step_t *st, const float *norm,
                 const mu__wmat_t *head, const float *x, int32_t rows,
                 float *logits);

#endif
