/* SPDX-License-Identifier: MIT */
/*
 * Between tok/hf.c (the model, vocabulary, added tokens and config of an HF
 * tokenizer.json) and tok/hf_pipe.c (its normalizer, pre_tokenizer,
 * decoder and post_processor). Each returns 0, or MU_EPROTO / MU_ETOOBIG /
 * MU_ENOMEM with the field and value named in why; path is where v is in
 * the file ("pre_tokenizer.pretokenizers[1]").
 */
#ifndef MU_TOK_HF_INT_H
#define MU_TOK_HF_INT_H

#include <cjson/cJSON.h>

#include "core/json_int.h"
#include "tok/impl_int.h"

int mu__tok_hf_normalizer(mu__tok_t *t, const cJSON *v, const char *path, int depth,
                          char *why, size_t wl);
/* Sets t->byte_level when a ByteLevel step is there (it must come last). */
int mu__tok_hf_pretokenizer(mu__tok_t *t, const cJSON *v, const char *path, int depth,
                            char *why, size_t wl);
int mu__tok_hf_decoder(const cJSON *v, mu__tok_dec_t *d, char *why, size_t wl);
/* The template's ids before and after the text (t->prefix, t->suffix). */
int mu__tok_hf_post(mu__tok_t *t, const cJSON *v, char *why, size_t wl);

/* "path.field VALUE is not supported" (or "is missing" when v is NULL):
 * MU_EPROTO. */
int mu__tok_hf_bad(char *why, size_t wl, const char *path, const char *field,
                   const cJSON *v);
/* A boolean member, dflt when absent or null; -1 (why set) when not a
 * boolean. */
int mu__tok_hf_bool(const cJSON *o, const char *name, int dflt, const char *path,
                    char *why, size_t wl);

#endif
