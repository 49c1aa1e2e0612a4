/* SPDX-License-Identifier: MIT */
/*
 * The types a KV cache keeps its keys and values in (--kv-type), one
 * entry each: a weight type of kern/ whose quantizer stores a row (f16
 * rounds to nearest even, q8_0 is llama.cpp's reference quantizer over
 * blocks of 32) and whose to_f32 reads it back exactly. The decoder
 * (llm/dec.c, llm/ops.c), the planner and the CLI's messages all read
 * this table.
 */
#include <stdio.h>
#include <string.h>

#include "muster/common.h"
#include "core/error_int.h"
#include "llm/llm_int.h"

const mu__kv_info_t mu__kv_types[MU__KV_COUNT] = {
	/* name, storage, what it is for a person */
	[MU__KV_F32] = {"f32", MU__WT_F32, "4 bytes an element, as computed"},
	[MU__KV_F16] = {"f16", MU__WT_F16, "2 bytes an element, rounded to nearest even"},
	[MU__KV_Q8_0] = {"q8_0", MU__WT_Q8_0, "34 bytes a block of 32 (f16 scale, 32 int8)"},
};

const char *mu__kv_name(int t)
{
	return (unsigned)t < MU__KV_COUNT ? mu__kv_types[t].name : "?";
}

const char *mu__kv_list(char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = '\0';
	for (int t = 0; t < MU__KV_COUNT && at < len; t++) {
		const char *sep = t == 0 ? "" : t == MU__KV_COUNT - 1 ? " or " : ", ";
		int n = snprintf(buf + at, len - at, "%s%s", sep, mu__kv_types[t].name);

		at += n > 0 ? (size_t)n : 0;
	}
	return buf;
}

int mu__kv_by_name(const char *name, int *t, char *why, size_t wl)
{
	char list[64];

	for (int i = 0; name != NULL && i < MU__KV_COUNT; i++)
		if (strcmp(name, mu__kv_types[i].name) == 0) {
			*t = i;
			return 0;
		}
	return mu__why(why, wl, MU_EARG, "a KV cache type is %s, not '%.40s'",
	               mu__kv_list(list, sizeof(list)), name != NULL ? name : "");
}

int mu__kv_check(int t, const mu__llm_hp_t *hp, char *why, size_t wl)
{
	const mu__wtype_info_t *w;

	if ((unsigned)t >= MU__KV_COUNT)
		return mu__why(why, wl, MU_EARG, "KV cache type %d is not one", t);
	w = mu__wtype_info(mu__kv_types[t].wt);
	if (hp->head_dim % w->block != 0)
		return mu__why(why, wl, MU_EARG, "a %s KV cache stores blocks of %d elements a head: "
		               "the model's head dim %d is not a multiple of %d (use --kv-type f16 "
		               "or f32)", mu__kv_types[t].name, w->block, hp->head_dim, w->block);
	return 0;
}

uint64_t mu__kv_row_bytes(int t, int64_t n)
{
	return (uint64_t)mu__wtype_row_bytes(mu__kv_types[t].wt, n);
}
