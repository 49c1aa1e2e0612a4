/* SPDX-License-Identifier: MIT */
/*
 * The inside of a tokenizer, shared by the files that build one (tok/hf.c,
 * tok/vocab.c), run one (tok.c, tok/text.c, tok/bpe.c) and decode with one
 * (tok/dec.c). tok/tok_int.h is the interface everything else uses.
 *
 * Every format is reduced to one program:
 *   added-token split -> normalizers -> pre-tokenizers -> BPE -> template
 * and, for decoding, one output byte string per id plus a rule for the
 * leading space a SentencePiece prefix adds.
 *
 * The BPE model works on raw bytes: for a byte-level vocabulary the pieces
 * are mapped back from GPT-2's printable alphabet once, at build time (their
 * "keys"), so encoding never maps bytes to code points and back.
 */
#ifndef MU_TOK_IMPL_INT_H
#define MU_TOK_IMPL_INT_H

#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/buf_int.h"
#include "tok/tok_int.h"

/* Bounds on what a tokenizer file may make us allocate. */
#define MU__TOK_MAX_VOCAB (1 << 22)    /* ids are below this */
#define MU__TOK_MAX_MERGES (1 << 23)
#define MU__TOK_MAX_PIECE 65536        /* bytes in one piece or added token */
#define MU__TOK_MAX_ARENA (1u << 30)   /* all pieces' bytes together */
#define MU__TOK_MAX_OPS 64             /* normalizer / pre-tokenizer steps */

/* GPT-2's pre-tokenizer pattern (HF's ByteLevel with use_regex, GGUF's
 * "default" / "gpt-2"), in Oniguruma syntax for mu__tok_regex. */
#define MU__TOK_RE_GPT2                                                        \
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* attr bits of an id */
#define MU__TOK_A_PRESENT 1  /* the id has a piece */
#define MU__TOK_A_SPECIAL 2  /* special / control: not decoded unless asked */
#define MU__TOK_A_ADDED 4    /* an added token: decoded as its content */
#define MU__TOK_A_BYTE 8     /* <0xNN>: stands for one byte */
#define MU__TOK_A_NOKEY 16   /* not reachable by BPE (kept out of the map) */

typedef struct {
	uint32_t off, len; /* into the tokenizer's arena */
} mu__tok_span_t;

/* Byte string -> id, open addressing over spans of one arena. A slot
 * holds the key's hash (high 32 bits) beside the id, so a probe that does
 * not match rarely reads the key's bytes. */
typedef struct {
	uint64_t *slot; /* hash << 32 | id; UINT64_MAX for an empty slot */
	size_t mask;    /* slots - 1 (a power of two minus one), 0 when empty */
} mu__tok_map_t;

/* (left id, right id) -> (rank, merged id), open addressing; key and value
 * side by side, so a probe is one cache line. */
typedef struct {
	uint64_t key; /* left << 32 | right; UINT64_MAX for empty */
	uint64_t val; /* rank << 32 | merged id */
} mu__tok_pair_t;

typedef struct {
	mu__tok_pair_t *slot;
	size_t mask, count;
} mu__tok_pairs_t;

typedef enum {
	MU__TOK_N_PREPEND,
	MU__TOK_N_REPLACE,
	MU__TOK_N_NFC,
	MU__TOK_N_NFD,
	MU__TOK_N_NFKC,
	MU__TOK_N_NFKD,
	MU__TOK_N_LOWER,
	MU__TOK_N_STRIP,
	MU__TOK_N_STRIP_ACCENTS
} mu__tok_norm_kind_t;

typedef struct {
	mu__tok_norm_kind_t kind;
	pcre2_code *re;   /* REPLACE: what to replace */
	char *s;          /* PREPEND: the text; REPLACE: the replacement */
	size_t slen;
	int left, right;  /* STRIP */
} mu__tok_norm_t;

/* How a Split keeps the pieces around its matches (HF's behaviours). */
typedef enum {
	MU__TOK_B_REMOVED,
	MU__TOK_B_ISOLATED,
	MU__TOK_B_PREVIOUS,
	MU__TOK_B_NEXT,
	MU__TOK_B_CONTIGUOUS
} mu__tok_behavior_t;

typedef enum {
	MU__TOK_P_SPLIT,     /* re, behavior, invert */
	MU__TOK_P_PREFIX,    /* ByteLevel's add_prefix_space: " " before each */
	MU__TOK_P_METASPACE  /* rep, prepend, split */
} mu__tok_pre_kind_t;

enum { MU__TOK_PREPEND_NEVER, MU__TOK_PREPEND_FIRST, MU__TOK_PREPEND_ALWAYS };

typedef struct {
	mu__tok_pre_kind_t kind;
	pcre2_code *re;
	mu__tok_behavior_t behavior;
	int invert;
	char rep[8];  /* METASPACE: the replacement character */
	size_t replen;
	int prepend;  /* METASPACE: MU__TOK_PREPEND_* */
	int split;    /* METASPACE: split before each replacement */
} mu__tok_pre_t;

typedef struct {
	mu__tok_span_t text; /* matched as is (normalized when normalized) */
	int32_t id;
	uint8_t special, lstrip, rstrip, normalized;
} mu__tok_added_t;

/* Added tokens of one kind, by first byte, longest first. */
typedef struct {
	uint32_t *idx;      /* into mu__tok_s.added */
	uint32_t first[257];
	size_t n;
} mu__tok_matcher_t;

enum { MU__TOK_RANK, MU__TOK_SCORE }; /* BPE merge order */
enum {
	MU__TOK_STRIP_NONE,
	MU__TOK_STRIP_START,    /* strip_n spaces at the start of the text */
	MU__TOK_STRIP_AFTER_BOS /* one space of the piece right after BOS */
};

/* What decoding does to each id's piece; turned into out spans once. */
typedef struct {
	int byte_level;     /* map GPT-2's alphabet back to bytes */
	int byte_fallback;  /* <0xNN> -> the byte */
	char from[8], to[8];/* one literal replacement (U+2581 -> " "), or "" */
	size_t fromlen, tolen;
	int strip_start, strip_stop; /* per-token Strip before any Fuse */
	int strip;          /* MU__TOK_STRIP_* for the whole text */
	unsigned strip_n;
} mu__tok_dec_t;

struct mu__tok_s {
	int32_t n;              /* ids are 0..n-1 */
	mu__buf_t arena;        /* bytes of pieces, keys, outputs, contents */
	mu__tok_span_t *piece;  /* as stored in the vocabulary */
	mu__tok_span_t *key;    /* bytes BPE sees (byte-level: decoded) */
	mu__tok_span_t *out;    /* bytes decoding gives */
	uint8_t *attr;          /* MU__TOK_A_* */
	float *score;           /* MU__TOK_SCORE: merge priority, else NULL */
	mu__tok_map_t keys;     /* key -> id for ids without NOKEY */
	mu__tok_pairs_t merges; /* MU__TOK_RANK */

	int algo;               /* MU__TOK_RANK or MU__TOK_SCORE */
	int byte_level;         /* the first symbols are single bytes */
	int32_t byte_id[256];   /* byte-level: each byte's symbol; else the
	                           <0xNN> fallback id; -1 when none */
	int byte_fallback, fuse_unk, ignore_merges;
	int32_t unk;

	mu__tok_added_t *added;
	size_t nadded, capadded;
	mu__tok_matcher_t raw_m, norm_m; /* matched before / after normalizing */

	mu__tok_norm_t norm[MU__TOK_MAX_OPS];
	size_t nnorm;
	mu__tok_pre_t pre[MU__TOK_MAX_OPS];
	size_t npre;

	int32_t *prefix, *suffix; /* template ids around the text (BOS...) */
	size_t nprefix, nsuffix;
	int32_t bos;
	int32_t *eos;
	size_t neos;

	/* Where a word may be cut before BPE without changing the result:
	 * before each seg[] (U+2581 or " ") that follows another character,
	 * when no piece has one after another character (so no merge can
	 * cross the cut). seglen 0: never. A SentencePiece-style text is one
	 * word; cut into words, BPE's heap stays small. */
	char seg[4];
	size_t seglen;

	int strip;
	unsigned strip_n;
	size_t max_out; /* longest out span */
	char *chat_template;
	pcre2_code *ws; /* one White_Space character, anchored */
};

/* ---- building (tok.c) ---- */

/* A tokenizer with n ids, none present yet. MU_ENOMEM, MU_ETOOBIG. */
int mu__tok_new(int32_t n, int algo, int byte_level, mu__tok_t **out);
/* Store id's piece (and its key: decoded from GPT-2's alphabet when
 * byte-level; a piece outside it gets NOKEY). 0, MU_ENOMEM, MU_ETOOBIG. */
int mu__tok_set_piece(mu__tok_t *t, int32_t id, const char *p, size_t len);
/* Index the keys (after every piece is set). Duplicate keys: the lower id
 * wins. 0 or MU_ENOMEM. */
int mu__tok_index(mu__tok_t *t);
/* The id of key bytes, or -1. */
int32_t mu__tok_lookup(const mu__tok_t *t, const void *key, size_t len);
/* Merge `a b` at rank (pieces as stored). A later duplicate replaces an
 * earlier one, as HF's loader does. MU_EPROTO (why) when a part or the
 * result is not in the vocabulary, MU_ENOMEM. */
int mu__tok_add_merge(mu__tok_t *t, const char *a, size_t alen, const char *b,
                      size_t blen, uint32_t rank, char *why, size_t wl);
/* An added token whose content is matched whole in the input. */
int mu__tok_add_added(mu__tok_t *t, int32_t id, const char *s, size_t len,
                      int special, int lstrip, int rstrip, int normalized);
/* Copy bytes into the arena: *span set. */
int mu__tok_store(mu__tok_t *t, const void *p, size_t len, mu__tok_span_t *span);
/* Compute outputs, byte ids, matchers; after this t is immutable. */
int mu__tok_finish(mu__tok_t *t, const mu__tok_dec_t *dec, char *why, size_t wl);
/* Append id to a growable array. 0 or MU_ENOMEM. */
int mu__tok_push_id(int32_t **v, size_t *n, size_t *cap, int32_t id);

/* ---- text (tok/text.c) ---- */

/* GPT-2's byte alphabet: the code point of byte b, and the byte of code
 * point cp (-1 when cp is not in it). */
uint32_t mu__tok_byte_cp(unsigned b);
int mu__tok_cp_byte(uint32_t cp);
/* Length of the valid UTF-8 character at p (1..4), or 0 when the bytes
 * there do not start one; *cp gets its code point. */
size_t mu__tok_utf8(const unsigned char *p, size_t len, uint32_t *cp);
size_t mu__tok_utf8_put(uint32_t cp, char *out);

/*
 * Compile a pattern from a tokenizer file (Oniguruma syntax, as HF's Rust
 * library uses) for PCRE2, with UTF and UCP, matching invalid UTF-8 too.
 * literal: the text itself. MU_EPROTO with PCRE2's message in why.
 */
int mu__tok_regex(const char *pat, size_t len, int literal, pcre2_code **out,
                  char *why, size_t wl);

/* First match of re in s[from..len) that is not empty: 1 and [*ms, *me),
 * or 0. A match that hits a resource limit under JIT is retried by the
 * interpreter; one that still fails ends the matches (the rest is a gap).
 * opts: PCRE2_ANCHORED or 0. */
int mu__tok_find(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t len,
                 size_t from, uint32_t opts, size_t *ms, size_t *me);
/* Append a triple to a growable array of them. 0 or MU_ENOMEM. */
int mu__tok_push3(size_t (**v)[3], size_t *n, size_t *cap, size_t a, size_t b, size_t c);

/* One encode call's scratch. */
typedef struct {
	pcre2_match_data *md;
	mu__buf_t a, b, c;            /* normalizer ping-pong, pre-token bytes */
	size_t (*sp)[3], nsp, capsp;  /* pre-tokens: off, len, at-origin flag */
	size_t (*sp2)[3], nsp2, capsp2;
	size_t (*cut)[3], ncut, capcut; /* a Split's pieces: start, end, match */
	void *sym;                    /* BPE symbols (tok/bpe.c) */
	size_t capsym;
	void *heap;
	size_t capheap;
	int32_t *ids;
	size_t nids, capids;
	/* Words seen in this call and their ids (tok/bpe.c): text repeats its
	 * words, and BPE of a word depends on nothing else. */
	struct mu__tok_cached_s *cache;
	size_t cmask, ccount;
	mu__buf_t ckeys;
	int32_t *cids;
	size_t ncids, capcids;
} mu__tok_work_t;

int mu__tok_work_init(mu__tok_work_t *w);
void mu__tok_work_free(mu__tok_work_t *w);

/* Apply the normalizers to in[0..len): *out points into w's buffers or at
 * in. 0 or MU_ENOMEM. */
int mu__tok_normalize(const mu__tok_t *t, mu__tok_work_t *w, const char *in,
                      size_t len, const char **out, size_t *outlen);
/* Pre-tokenize p[0..len) into w->c / w->sp (tok/pre.c). origin: p starts
 * the input. */
int mu__tok_pretokenize(const mu__tok_t *t, mu__tok_work_t *w, const char *p,
                        size_t len, int origin);
/* Bytes of White_Space at the start (left) or end (!left) of p. */
size_t mu__tok_ws_run(const mu__tok_t *t, mu__tok_work_t *w, const char *p,
                      size_t len, int left);

/* ---- BPE (tok/bpe.c) ---- */

/* Encode one pre-token; ids appended to w->ids. 0 or MU_ENOMEM. */
int mu__tok_bpe(const mu__tok_t *t, mu__tok_work_t *w, const char *p, size_t len);
void mu__tok_bpe_free(mu__tok_work_t *w);

/* ---- maps (tok/map.c) ---- */
uint64_t mu__tok_hash(const void *p, size_t len);
int mu__tok_map_build(mu__tok_map_t *m, const mu__tok_t *t);
void mu__tok_map_free(mu__tok_map_t *m);
int32_t mu__tok_map_get(const mu__tok_map_t *m, const mu__tok_t *t,
                        const void *key, size_t len);
int mu__tok_pairs_put(mu__tok_pairs_t *p, int32_t a, int32_t b, uint32_t rank,
                      int32_t merged);
/* 0 and *rank, *merged set when (a, b) merges; -1 otherwise. */
int mu__tok_pairs_get(const mu__tok_pairs_t *p, int32_t a, int32_t b,
                      uint32_t *rank, int32_t *merged);
void mu__tok_pairs_free(mu__tok_pairs_t *p);

#endif
