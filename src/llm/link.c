/* SPDX-License-Identifier: MIT */
/*
 * A stage in this process as the engine drives it (mu__eng_link_t,
 * llm/engine_int.h): a decoder whose batches compute as they are
 * submitted. A stage over a connection is the coordinator's
 * (pipeline/llm/coord.c, mu__llm_coord_link).
 */
#include <stdio.h>
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/time_int.h"
#include "llm/engine_int.h"

typedef struct {
	mu__dec_t *d;
	float *out;
	int rc;
	double ms;
	char why[512];
} local_t;

static int local_open(void *ud, uint64_t seq, int32_t ctx, char *why, size_t wl)
{
	local_t *l = ud;

	return mu__dec_seq_open(l->d, 0, seq, ctx, why, wl);
}

static int local_close(void *ud, uint64_t seq, char *why, size_t wl)
{
	local_t *l = ud;

	(void)why;
	(void)wl;
	return mu__dec_seq_close(l->d, 0, seq);
}

static int local_submit(void *ud, const mu__dec_item_t *it, int k, int32_t rows,
                        const int32_t *tokens, const float *x, char *why, size_t wl)
{
	local_t *l = ud;
	double t0 = mu__clock_ms();

	(void)rows;
	(void)why;
	(void)wl;
	l->rc = mu__dec_forward_batch(l->d, 0, it, k, tokens, x, l->out, l->why, sizeof(l->why));
	l->ms = mu__clock_ms() - t0;
	return 0;
}

static mu_stream_t *local_stream(void *ud)
{
	(void)ud;
	return NULL; /* computed in submit */
}

static int local_finish(void *ud, const float **out, double *ms, char *why, size_t wl)
{
	local_t *l = ud;

	*out = l->out;
	*ms = l->ms;
	if (l->rc != 0)
		snprintf(why, wl, "%s", l->why);
	return l->rc;
}

int mu__link_local(mu__dec_t *d, int32_t max_chunk, int max_seqs, mu__eng_link_t *link)
{
	const mu__llm_hp_t *h = mu__dec_hp(d);
	int first, last, embeds, head;
	local_t *l = mu__calloc(1, sizeof(*l));

	mu__dec_shape(d, &first, &last, &embeds, &head);
	if (l == NULL ||
	    (l->out = mu__malloc((size_t)max_chunk * (size_t)(head ? h->vocab : h->dim) *
	                         sizeof(float))) == NULL) {
		mu__free(l);
		return MU_ENOMEM;
	}
	l->d = d;
	*link = (mu__eng_link_t){local_open, local_close, local_submit, local_stream, local_finish, NULL,
	                         l, max_chunk, max_seqs, ""};
	snprintf(link->name, sizeof(link->name), "layers %d..%d in this process", first, last - 1);
	return 0;
}

void mu__link_local_free(mu__eng_link_t *link)
{
	local_t *l = link->ud;

	if (l != NULL)
		mu__free(l->out);
	mu__free(l);
	link->ud = NULL;
}
