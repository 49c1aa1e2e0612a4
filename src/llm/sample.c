/* SPDX-License-Identifier: MIT */
/*
 * Choosing the next token: argmax at temperature 0 (the first maximum
 * wins), else softmax at the temperature, top-k, then top-p over the
 * sorted probabilities, and a draw from a seeded generator (splitmix64),
 * so a seed gives the same text every run on every machine. We do not
 * promise to match another implementation's random stream.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "llm/llm_int.h"

int mu__sampler_init(mu__sampler_t *s, const mu__sample_opts_t *o, int32_t vocab)
{
	memset(s, 0, sizeof(*s));
	s->o = *o;
	s->state = o->seed;
	s->vocab = vocab;
	if (o->temperature > 0) {
		s->cand = mu__malloc((size_t)vocab * sizeof(*s->cand));
		if (s->cand == NULL)
			return MU_ENOMEM;
	}
	return 0;
}

void mu__sampler_free(mu__sampler_t *s)
{
	mu__free(s->cand);
	s->cand = NULL;
}

static uint64_t next_u64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 24 bits. */
static float next_f32(uint64_t *x)
{
	return (float)(next_u64(x) >> 40) / 16777216.0f;
}

static int32_t argmax(const float *v, int32_t n)
{
	int32_t best = 0;

	for (int32_t i = 1; i < n; i++)
		if (v[i] > v[best])
			best = i;
	return best;
}

/* Descending probability; ties by id so the order is total. */
static int by_prob(const void *a, const void *b)
{
	const mu__cand_t *x = a, *y = b;

	if (x->p != y->p)
		return x->p > y->p ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

int32_t mu__sample(mu__sampler_t *s, float *logits)
{
	int32_t n = s->vocab, keep, i;
	mu__cand_t *c = s->cand;
	float mx, sum = 0, cum = 0, u;

	if (s->o.temperature <= 0)
		return argmax(logits, n);
	mx = logits[argmax(logits, n)];
	for (i = 0; i < n; i++) {
		c[i].p = expf((logits[i] - mx) / s->o.temperature);
		c[i].id = i;
		sum += c[i].p;
	}
	for (i = 0; i < n; i++)
		c[i].p /= sum;
	qsort(c, (size_t)n, sizeof(*c), by_prob);
	keep = s->o.top_k > 0 && s->o.top_k < n ? s->o.top_k : n;
	if (s->o.top_p > 0 && s->o.top_p < 1) {
		for (i = 0; i < keep; i++) {
			cum += c[i].p;
			if (cum >= s->o.top_p) {
				keep = i + 1;
				break;
			}
		}
	}
	for (cum = 0, i = 0; i < keep; i++)
		cum += c[i].p;
	u = next_f32(&s->state) * cum;
	for (i = 0; i < keep - 1; i++) {
		u -= c[i].p;
		if (u < 0)
			break;
	}
	return c[i].id;
}
