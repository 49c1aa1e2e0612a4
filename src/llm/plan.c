/* SPDX-License-Identifier: MIT */
/*
 * Where a decoder's layers go: cut into n stages balanced by weight bytes
 * (a stage server's --stage I --of N, `muster plan --stages`), or placed
 * on devices so each one's share, weights and the KV cache its sequences
 * will need, fits its budget (the LLM cluster, `muster plan --budgets`).
 * This file says what a layer costs; the cutting is core/cut.c's.
 */
#include <stdio.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/cut_int.h"
#include "llm/plan_int.h"

uint64_t mu__llm_kv_bytes(const mu__llm_src_t *src, int a, int b, int32_t ctx, int max_seqs,
                          int kv_type)
{
	const mu__llm_hp_t *h = &src->hp;

	return (uint64_t)(b - a) * 2 * mu__kv_row_bytes(kv_type, (int64_t)h->n_kv_heads * h->head_dim) *
	       (uint64_t)ctx * (uint64_t)max_seqs;
}

/*
 * One item per layer: the bytes of layer l alone (mu__llm_src_bytes),
 * plus kv. The first layer's count the embedding and the last one's the
 * final norm and head; when the head is the embedding (tied), both count
 * it, and `shared` takes it off a stage that holds every layer. So a
 * part [a, b) costs mu__llm_src_bytes(src, a, b) + (b - a) * kv.
 */
static int layer_costs(const mu__llm_src_t *src, uint64_t kv, double **w, mu__cut_items_t *it)
{
	int L = src->hp.n_layers;
	double sum = 0;

	if ((*w = mu__calloc((size_t)L + 1, sizeof(**w))) == NULL)
		return MU_ENOMEM;
	for (int l = 0; l < L; l++) {
		(*w)[l] = (double)(mu__llm_src_bytes(src, l, l + 1) + kv);
		sum += (*w)[l];
	}
	it->w = *w;
	it->n = L;
	it->shared = L > 1 ? sum - (double)(mu__llm_src_bytes(src, 0, L) + kv * (uint64_t)L) : 0;
	return 0;
}

int mu__llm_split(const mu__llm_src_t *src, int n, int *cut)
{
	mu__cut_items_t it;
	double *w;
	int rc;

	if (n < 1 || n > src->hp.n_layers)
		return MU_EARG;
	if ((rc = layer_costs(src, 0, &w, &it)) != 0)
		return rc;
	rc = mu__cut_balanced(&it, n, MU__CUT_HALVE, cut);
	mu__free(w);
	return rc;
}

int mu__llm_plan(const mu__llm_src_t *src, int32_t ctx, int max_seqs, int kv_type,
                 const uint64_t *budget, int nd, int *order, int *cut, char *err, size_t el)
{
	int L = src->hp.n_layers, *cuts, rc;
	mu__cut_items_t it;
	double *w = NULL;

	if ((rc = mu__kv_check(kv_type, &src->hp, err, el)) != 0)
		return rc;
	cuts = mu__calloc((size_t)nd + 1, sizeof(*cuts));
	rc = cuts == NULL ? MU_ENOMEM
	                  : layer_costs(src, mu__llm_kv_bytes(src, 0, 1, ctx, max_seqs, kv_type), &w,
	                                &it);
	if (rc == 0)
		rc = mu__cut_fit_any(&it, budget, nd, MU__CUT_SHARE, NULL, NULL, order, cuts);
	for (int i = 0; rc == 0 && i < nd; i++)
		cut[i] = cuts[i + 1];
	mu__free(cuts);
	mu__free(w);
	if (rc == MU_ETOOBIG)
		snprintf(err, el, "the model (%.1f MiB of weights, %d layers) with a%s %s KV cache for "
		         "%d sequence%s of %d positions (%.1f MiB) does not fit the %d device%s granted",
		         (double)mu__llm_src_bytes(src, 0, L) / 1048576.0, L,
		         mu__kv_name(kv_type)[0] == 'f' ? "n" : "", mu__kv_name(kv_type), max_seqs,
		         max_seqs == 1 ? "" : "s", ctx,
		         (double)mu__llm_kv_bytes(src, 0, L, ctx, max_seqs, kv_type) / 1048576.0, nd,
		         nd == 1 ? "" : "s");
	return rc;
}
