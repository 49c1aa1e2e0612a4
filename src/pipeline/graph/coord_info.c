/* SPDX-License-Identifier: MIT */
/*
 * The graph coordinator's reading of a stage's description (its READY or
 * INFO JSON: node range, names in and out, digest, figures) and the check
 * that the stages cover the graph in order.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc_int.h"
#include "core/json_int.h"
#include "pipeline/graph/coord_priv_int.h"

void mu__coord_free_names(char **v, int n)
{
	for (int i = 0; i < n; i++)
		mu__free(v[i]);
	mu__free(v);
}

static int names_of(const cJSON *a, const char *field, char ***out, int *n)
{
	const cJSON *it;
	char **v;
	int k = 0;

	if (!cJSON_IsArray(a))
		return MU_EPROTO;
	v = mu__calloc((size_t)cJSON_GetArraySize(a) + 1, sizeof(*v));
	if (v == NULL)
		return MU_ENOMEM;
	cJSON_ArrayForEach(it, a) {
		const cJSON *s = field != NULL ? cJSON_GetObjectItemCaseSensitive(it, field) : it;

		if (!cJSON_IsString(s) || (v[k] = mu__strdup(s->valuestring)) == NULL) {
			mu__coord_free_names(v, k);
			return cJSON_IsString(s) ? MU_ENOMEM : MU_EPROTO;
		}
		k++;
	}
	*out = v;
	*n = k;
	return 0;
}

int mu__coord_parse_info(mu_coord_t *c, int i, const char *json, char *err, size_t el)
{
	cstage_t *s = &c->s[i];
	cJSON *o = NULL;
	const cJSON *d;
	unsigned long long dg = 0;
	int rc, idx, of;

	rc = mu__json_parse(json, strlen(json), &o);
	if (rc == 0) {
		/* a stage's numbers, range-checked before they become ints */
		if (mu__json_int(cJSON_GetObjectItemCaseSensitive(o, "stage"), 0, INT_MAX, &idx) != 0 ||
		    mu__json_int(cJSON_GetObjectItemCaseSensitive(o, "of"), 1, INT_MAX, &of) != 0 ||
		    mu__json_int(cJSON_GetObjectItemCaseSensitive(o, "first"), 0, INT_MAX, &s->first) != 0 ||
		    mu__json_int(cJSON_GetObjectItemCaseSensitive(o, "last"), 0, INT_MAX, &s->last) != 0 ||
		    mu__json_int(cJSON_GetObjectItemCaseSensitive(o, "nodes"), 0, INT_MAX, &s->nodes) != 0 ||
		    mu__json_double(cJSON_GetObjectItemCaseSensitive(o, "load_ms"), 0, 1e300,
		                    &s->t.load_ms) != 0 ||
		    mu__json_u64(cJSON_GetObjectItemCaseSensitive(o, "resident_bytes"), UINT64_MAX,
		                 &s->t.resident_bytes) != 0 ||
		    mu__json_u64(cJSON_GetObjectItemCaseSensitive(o, "rss_bytes"), UINT64_MAX,
		                 &s->t.rss_bytes) != 0)
			rc = MU_EPROTO;
		d = cJSON_GetObjectItemCaseSensitive(o, "digest");
		if (rc == 0 && (!cJSON_IsString(d) || sscanf(d->valuestring, "%llx", &dg) != 1))
			rc = MU_EPROTO;
		if (rc == 0)
			rc = names_of(cJSON_GetObjectItemCaseSensitive(o, "inputs"), "name", &s->in, &s->nin);
		if (rc == 0)
			rc = names_of(cJSON_GetObjectItemCaseSensitive(o, "outputs"), NULL, &s->out, &s->nout);
		if (rc == 0 && c->model_out == NULL)
			rc = names_of(cJSON_GetObjectItemCaseSensitive(o, "model_outputs"), NULL,
			              &c->model_out, &c->nmodel_out);
	}
	cJSON_Delete(o);
	if (rc != 0) {
		snprintf(err, el, "%s: its description is not what a muster stage sends (%s)", s->addr,
		         mu_strerror(rc));
		return rc;
	}
	if (of != c->n || idx != i) {
		snprintf(err, el, "%s serves stage %d/%d but was given as stage %d/%d", s->addr, idx, of,
		         i, c->n);
		return MU_EARG;
	}
	if (c->digest == 0)
		c->digest = dg;
	if (dg != c->digest) {
		snprintf(err, el, "%s serves a different model (digest %016llx) than %s (%016llx)",
		         s->addr, dg, c->s[0].addr, (unsigned long long)c->digest);
		return MU_EARG;
	}
	return 0;
}

/* The stages, in order, cover the graph's nodes exactly once. */
int mu__coord_check_chain(const mu_coord_t *c, char *err, size_t el)
{
	for (int i = 0; i < c->n; i++) {
		const cstage_t *s = &c->s[i];

		if (s->first != (i == 0 ? 0 : c->s[i - 1].last) || (i == c->n - 1 && s->last != s->nodes)) {
			snprintf(err, el, "%s serves nodes %d..%d, which does not continue the stages before "
			         "it (the stages must come from one split of one model)", s->addr, s->first,
			         s->last - 1);
			return MU_EARG;
		}
	}
	return 0;
}

