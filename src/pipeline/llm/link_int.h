/* SPDX-License-Identifier: MIT */
/*
 * Links for the engine (pipeline/llm/engine_int.h): a decoder in this process, or a
 * stage of a coordinator (pipeline/llm/coord.c, mu__llm_coord_link).
 */
#ifndef MU_PIPELINE_LLM_LINK_INT_H
#define MU_PIPELINE_LLM_LINK_INT_H

#include "core/time_int.h"
#include "pipeline/llm/engine_int.h"

/* A link over d (which must outlive it); max_seqs: its --max-sequences. */
int mu__link_local(mu__dec_t *d, int32_t max_chunk, int max_seqs, mu__eng_link_t *link);
void mu__link_local_free(mu__eng_link_t *link);

#endif
