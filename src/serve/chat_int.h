/* SPDX-License-Identifier: MIT */
/*
 * Chat templates: turning OpenAI-style messages into the prompt text a
 * chat model was trained on.
 *
 * Models ship their convention as a Jinja template (tokenizer_config.json's
 * chat_template, GGUF's tokenizer.chat_template). We do not run Jinja: we
 * recognise the common families from markers in the template's text, as
 * llama.cpp does, and render each family here in C with the exact
 * conventions its templates produce (checked against the real templates
 * rendered by HF's Jinja in tests/interop/test_serve.py):
 *
 *   chatml   <|im_start|>role\n...<|im_end|>\n; Qwen 2 / 2.5 templates add
 *            their own default system prompt, which is read from the
 *            template's text
 *   qwen3    ChatML plus Qwen 3's <think> rules for assistant turns
 *   llama3   <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>,
 *            BOS first, contents trimmed (Llama 3.0's template)
 *   llama3.1 Llama 3's turns after a system header that always comes,
 *            "Cutting Knowledge Date: December 2023\nToday Date: D\n\n"
 *            then the system message (Llama 3.1, 3.2, 3.3); D is the
 *            template's own date, or today's where the template asks
 *            strftime_now (as HF's transformers answers it)
 *   llama2   Llama 2 chat: BOS [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST]
 *   mistral  Mistral 7B Instruct v0.1: BOS [INST] ... [/INST]...EOS, no
 *            system role
 *
 * Anything else (or no template) is refused with an error that names what
 * was found, never rendered by guess. The rendered text holds special
 * tokens as text (BOS included): tokenize it with MU__TOK_SPECIAL and
 * without MU__TOK_BOS, as HF's apply_chat_template does.
 */
#ifndef MU_SERVE_CHAT_INT_H
#define MU_SERVE_CHAT_INT_H

#include <stddef.h>

#include "core/buf_int.h"

typedef enum {
	MU__CHAT_CHATML = 1,
	MU__CHAT_QWEN3,
	MU__CHAT_LLAMA3,
	MU__CHAT_LLAMA31,
	MU__CHAT_LLAMA2,
	MU__CHAT_MISTRAL
} mu__chat_kind_t;

/* A message as the client sent it: UTF-8 whose content and reasoning may
 * hold NULs, with their lengths (0: strlen's, for literals). */
typedef struct {
	const char *role;       /* "system", "user", "assistant" */
	const char *content;
	const char *reasoning;  /* reasoning_content (Qwen 3), or NULL */
	size_t content_len, reasoning_len;
} mu__chat_msg_t;

/* A recognised template. Strings are owned (mu__chat_free). */
typedef struct {
	mu__chat_kind_t kind;
	char *default_system;   /* chatml: the template's own system prompt, or NULL */
	char *bos, *eos;        /* the tokenizer's BOS and EOS text ("" when none) */
	char date[32];          /* llama3.1: "26 Jul 2024"; "" for today's */
} mu__chat_tmpl_t;

/*
 * Recognise tmpl (NULL: the model has none). bos/eos: the tokenizer's
 * token texts, or NULL. 0; MU_EPROTO with why saying what is wrong (no
 * template, or which one was found and is not supported, quoting its
 * start); MU_ENOMEM. t is untouched on failure.
 */
int mu__chat_detect(const char *tmpl, const char *bos, const char *eos, mu__chat_tmpl_t *t,
                    char *why, size_t wl);
/* The family named name ("chatml", "qwen3", "llama3", "llama3.1",
 * "llama2", "mistral"), for a model whose template is not recognised. MU_EARG for
 * another name. */
int mu__chat_by_name(const char *name, const char *bos, const char *eos, mu__chat_tmpl_t *t);
void mu__chat_free(mu__chat_tmpl_t *t);
const char *mu__chat_name(mu__chat_kind_t k);

typedef struct {
	int enable_thinking;    /* qwen3: 0 adds an empty <think></think> block */
} mu__chat_opts_t;

/*
 * Append the prompt for msgs[0..n), ending with the assistant's turn
 * opened (the generation prompt), to out. 0; MU_EARG with why for
 * messages the family cannot express (a role it does not know, roles that
 * do not alternate where it requires it, no messages); MU_ETOOBIG or
 * MU_ENOMEM from out.
 */
int mu__chat_render(const mu__chat_tmpl_t *t, const mu__chat_msg_t *msgs, int n,
                    const mu__chat_opts_t *o, mu__buf_t *out, char *why, size_t wl);

/* The text of the token that ends the assistant's turn ("<|im_end|>",
 * "<|eot_id|>", or EOS), so generation stops there. */
const char *mu__chat_end_of_turn(const mu__chat_tmpl_t *t);

/* Python's str.strip() of s[0..*len): the start and *len of what is left
 * (Unicode whitespace, as Jinja's trim and .strip() see it). */
const char *mu__py_strip(const char *s, size_t *len);

#endif
