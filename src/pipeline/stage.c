/* SPDX-License-Identifier: MIT */
/*
 * What every stage answers whatever its kind: the public calls that go
 * through the kind's table (mu_stage_free, mu_stage_describe,
 * mu_stage_set_threads), and the list of kinds, from which the errors
 * that say what is supported are made. The kinds themselves are in
 * pipeline/graph and pipeline/llm (pipeline/stage_int.h).
 */
#include <stdio.h>
#include <string.h>

#include "pipeline/stage_int.h"

const mu__stage_kind_t *const mu__stage_kinds[] = {
	&mu__stage_kind_graph, /* first: a model directory is a graph model's */
	&mu__stage_kind_llm,
	NULL,
};

const mu__stage_kind_t *mu__stage_kind_find(const char *name)
{
	for (int i = 0; name != NULL && mu__stage_kinds[i] != NULL; i++)
		if (strcmp(mu__stage_kinds[i]->name, name) == 0)
			return mu__stage_kinds[i];
	return NULL;
}

const mu__stage_kind_t *mu__stage_kind_owning(int type)
{
	if (type <= 0 || type > MU_MSG_TYPE_MAX)
		return NULL;
	for (int i = 0; mu__stage_kinds[i] != NULL; i++)
		if (mu__stage_kinds[i]->msgs & MU__MSG_BIT(type))
			return mu__stage_kinds[i];
	return NULL;
}

/* Append s to t (of n bytes, NUL-terminated), with sep before it unless
 * t is empty. */
static void add(char *t, size_t n, const char *sep, const char *s)
{
	size_t k = strlen(t);

	if (k + 1 < n)
		snprintf(t + k, n - k, "%s%s", k > 0 ? sep : "", s);
}

void mu__stage_kind_names(char *t, size_t n)
{
	if (n == 0)
		return;
	t[0] = '\0';
	for (int i = 0; mu__stage_kinds[i] != NULL; i++)
		add(t, n, ", ", mu__stage_kinds[i]->name);
}

void mu__stage_kind_msgs(const mu__stage_kind_t *k, char *t, size_t n)
{
	if (n == 0)
		return;
	t[0] = '\0';
	add(t, n, ", ", "INFO");
	for (int type = 1; type <= MU_MSG_TYPE_MAX; type++)
		if (k->msgs & MU__MSG_BIT(type) && type != MU_MSG_INFO)
			add(t, n, ", ", mu__msg_type_name(type));
}

void mu_stage_free(mu_stage_t *s)
{
	if (s != NULL)
		s->kind->free(s);
}

const char *mu_stage_describe(const mu_stage_t *s)
{
	return s->desc;
}

int mu_stage_set_threads(mu_stage_t *s, int threads)
{
	if (s == NULL || threads < 1)
		return MU_EARG;
	/* a kind without the call chose its threads when it built the stage */
	return s->kind->set_threads != NULL ? s->kind->set_threads(s, threads) : 0;
}
