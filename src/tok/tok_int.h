/* SPDX-License-Identifier: MIT */
/*
 * Tokenizers of the decoder family: text to token ids and back, for the
 * vocabularies LLM checkpoints carry:
 *   - HF tokenizer.json with a BPE model, byte-level (GPT-2, Llama 3, Qwen:
 *     a regex pre-tokenizer, run with PCRE2, then bytes mapped to printable
 *     code points) or SentencePiece-style (Llama 2, Mistral, TinyLlama:
 *     spaces become U+2581, a prepended U+2581, <0xNN> byte fallback);
 *   - a GGUF file's tokenizer.ggml.* arrays ("llama" = SentencePiece-style
 *     merged by score, "gpt2" = byte-level BPE merged by rank);
 *   - a llama2.c tokenizer .bin (SentencePiece-style merged by score).
 * Added and special tokens are matched whole before the model runs.
 *
 * A tokenizer is immutable once built and may be used from any number of
 * threads at once. It lives on the coordinator: stages see only ids.
 */
#ifndef MU_TOK_TOK_INT_H
#define MU_TOK_TOK_INT_H

#include <stddef.h>
#include <stdint.h>

typedef struct mu__tok_s mu__tok_t;

/* What a GGUF file (or any caller) hands over to build a tokenizer. The
 * arrays are copied; they need not outlive the call. */
typedef struct {
	const char *model;          /* "llama" or "gpt2" (tokenizer.ggml.model) */
	const char *pre;            /* tokenizer.ggml.pre, or NULL */
	size_t n;                   /* vocabulary size */
	const char *const *tokens;  /* n pieces, NUL-terminated UTF-8 */
	const size_t *token_lens;   /* their lengths (pieces may hold NUL) */
	const float *scores;        /* n scores, or NULL ("gpt2") */
	const int32_t *types;       /* n token types (1 normal, 2 unknown,
	                               3 control, 4 user-defined, 5 unused,
	                               6 byte), or NULL */
	size_t nmerges;
	const char *const *merges;  /* "a b", rank order ("gpt2"), or NULL */
	int32_t bos, eos, unk, pad; /* -1 when absent */
	int add_bos;                /* tokenizer.ggml.add_bos_token (-1 absent) */
	int add_eos;
	const char *chat_template;  /* tokenizer.chat_template, or NULL */
	int no_space_prefix;        /* 1: tokenizer.ggml.add_space_prefix is
	                               false ("llama" puts no U+2581 before the
	                               text); 0, the default, when absent */
} mu__tok_vocab_t;

/*
 * Build from tokenizer.json text (len bytes) and, when given, the text of
 * tokenizer_config.json (for add_bos_token / add_eos_token / the chat
 * template and the special tokens' names). MU_EJSON, MU_EPROTO with the
 * field that is wrong or unsupported in why ("model.type \"Unigram\" is
 * not supported"), MU_ENOMEM.
 */
int mu__tok_from_hf(const char *json, size_t len, const char *config,
                    size_t config_len, mu__tok_t **out, char *why,
                    size_t wl);
/* Build from arrays (GGUF). Same errors. */
int mu__tok_from_vocab(const mu__tok_vocab_t *v, mu__tok_t **out, char *why,
                       size_t wl);
/* Build from a llama2.c tokenizer file's bytes and the model's vocabulary
 * size (the file does not say it). Same errors. */
int mu__tok_from_llama2c(const void *data, size_t len, int32_t vocab,
                         mu__tok_t **out, char *why, size_t wl);
void mu__tok_free(mu__tok_t *t);

/* Flags of mu__tok_encode. */
#define MU__TOK_BOS 1     /* prepend BOS when the tokenizer's config adds it */
#define MU__TOK_SPECIAL 2 /* match special tokens' text in the input */

/*
 * Encode len bytes of UTF-8 (invalid UTF-8 is encoded byte by byte, never
 * refused) to ids, written to a buffer the call allocates (*ids, *n;
 * free with mu__free). MU_ENOMEM only.
 */
int mu__tok_encode(const mu__tok_t *t, const char *text, size_t len,
                   int flags, int32_t **ids, size_t *n);

/*
 * The bytes of ids[0..n) as text, appended to a buffer the call allocates
 * (*text, *len; NUL-terminated; free with mu__free). Special tokens are
 * left out unless keep_special. A SentencePiece-style tokenizer drops the
 * leading space its prefix added, as the HF decoder does.
 */
int mu__tok_decode(const mu__tok_t *t, const int32_t *ids, size_t n,
                   int keep_special, char **text, size_t *len);

/*
 * Streaming decode for printing tokens as they come: feed one id at a
 * time; the bytes that form complete UTF-8 characters so far are written
 * to out (up to cap; *outn set), the rest (the start of a character, at
 * most 3 bytes) are held for the next call. Bytes that cannot become a
 * valid character are passed on as they are. The output of all feeds
 * followed by mu__tok_stream_flush equals mu__tok_decode of all the ids
 * (with keep_special as set; init sets 0). To print only the tokens after
 * a prompt, feed the prompt's ids first and drop their output, so the
 * leading-space rule sees where the text starts.
 * MU_ETOOBIG (nothing consumed) when cap is under mu__tok_stream_cap(t).
 */
typedef struct {
	const mu__tok_t *t;
	size_t nfed;          /* ids fed so far */
	unsigned char pend[8];
	size_t npend;
	int keep_special;     /* decode special tokens too */
	int32_t prev;         /* the last id fed, -1 before any */
	size_t nout;          /* bytes of text so far (held ones included) */
	unsigned nstrip;      /* leading spaces dropped so far */
} mu__tok_stream_t;

void mu__tok_stream_init(mu__tok_stream_t *s, const mu__tok_t *t);
int mu__tok_stream_feed(mu__tok_stream_t *s, int32_t id, char *out,
                        size_t cap, size_t *outn);
/* The held bytes, at the end of the ids (cap >= 8 always suffices). */
int mu__tok_stream_flush(mu__tok_stream_t *s, char *out, size_t cap,
                         size_t *outn);
/* An out capacity with which a feed never fails: the longest piece's
 * decoded bytes plus the held ones. */
size_t mu__tok_stream_cap(const mu__tok_t *t);

int32_t mu__tok_vocab_size(const mu__tok_t *t);
int32_t mu__tok_bos(const mu__tok_t *t); /* -1 when none */
/* EOS ids: the tokenizer's own, plus those a config added (Llama 3 has
 * several). *n set; the array lives as long as t. */
const int32_t *mu__tok_eos(const mu__tok_t *t, size_t *n);
/* The piece of id as stored in the vocabulary (for --verbose and tests);
 * NULL when out of range. */
const char *mu__tok_piece(const mu__tok_t *t, int32_t id, size_t *len);
/* The chat template text from tokenizer_config.json or GGUF metadata, or
 * NULL. */
const char *mu__tok_chat_template(const mu__tok_t *t);
/* Add EOS ids (generation_config.json's eos_token_id). */
int mu__tok_add_eos(mu__tok_t *t, const int32_t *ids, size_t n);

#endif
