/* SPDX-License-Identifier: MIT */
/*
 * The decoder family: Llama-style decoders (the architectures of the
 * table in llm/arch.c) read from an HF checkpoint directory, a GGUF file or
 * a llama2.c checkpoint into one description, and run a range of their
 * layers with a KV cache per sequence.
 *
 * A source (mu__llm_src_t) is an opened model: its hyperparameters and a
 * directory of its tensors under GGUF's names (token_embd, blk.N.attn_q,
 * ..., output_norm, output), each a view into a memory-mapped file in the
 * type it has on disk. Opening reads headers only. A decoder (mu__dec_t)
 * binds the tensors of layers [first, last) (plus the embedding on the
 * first stage and the final norm and head on the last), so a stage's
 * process touches only its own layers' bytes, and holds the KV caches of
 * its open sequences.
 *
 * Formats differ in how they lay out RoPE pairs (llm-formats.md): we never
 * permute weights, we rotate the pairs the way the file's rows expect.
 */
#ifndef MU_LLM_LLM_INT_H
#define MU_LLM_LLM_INT_H

#include <stddef.h>
#include <stdint.h>

#include "kern/kern_int.h"
#include "tok/tok_int.h"

typedef enum {
	MU__ROPE_PAIRS = 0, /* (x[2j], x[2j+1]): Meta, llama2.c, GGUF llama */
	MU__ROPE_HALVES = 1 /* (x[j], x[j+d/2]): HF rotate_half, GGUF qwen2 */
} mu__rope_t;

typedef enum {
	MU__RS_NONE = 0,
	MU__RS_LINEAR = 1, /* positions divided by factor */
	MU__RS_LLAMA3 = 2  /* frequencies rescaled by wavelength (Llama 3.1) */
} mu__rope_scaling_t;

typedef enum { MU__FMT_HF = 0, MU__FMT_GGUF = 1, MU__FMT_LLAMA2C = 2 } mu__llm_fmt_t;

/* The hyperparameters. Each field is described once, in the table of
 * llm/hparams.c (where each format keeps it, its default, its range, its
 * name on the wire): a new field is a member here and a line there. The
 * numeric members are int32_t or float, as that table reads them. */
typedef struct {
	char arch[16];           /* an entry of the architecture table (llm/arch.c) */
	int32_t dim, hidden, n_layers, n_heads, n_kv_heads, head_dim, vocab;
	int32_t ctx;             /* the model's trained context */
	int32_t window;          /* sliding attention window, 0 for none */
	float eps, theta;
	int32_t rope;            /* a mu__rope_t */
	int32_t scaling;         /* a mu__rope_scaling_t */
	float sc_factor, sc_low, sc_high;
	int32_t sc_orig;         /* original_max_position_embeddings */
	int32_t tied;            /* the head is the token embedding */
	int32_t bos, eos;        /* from the model's config, -1 when absent */
} mu__llm_hp_t;

/* A tensor in the directory: matrices [rows, cols] in their stored type;
 * vectors are rows = 1. */
typedef struct {
	char name[64];
	mu__wmat_t m;
	uint64_t bytes;
} mu__llm_tensor_t;

typedef struct mu__llm_map_s mu__llm_map_t;

typedef struct {
	mu__llm_fmt_t fmt;
	mu__llm_hp_t hp;
	mu__llm_tensor_t *t;
	size_t nt;
	mu__llm_map_t **maps;   /* the files, mapped */
	size_t nmaps;
	char *path;             /* what was opened */
	char *tok_path;         /* llama2.c: the tokenizer file, or NULL */
	void *priv;             /* the format's own parse state */
	void (*priv_free)(void *priv);
	/* Build the tokenizer this source carries (HF tokenizer.json, GGUF
	 * arrays, llama2.c tokenizer file). */
	int (*tokenizer)(const void *src, mu__tok_t **out, char *why, size_t wl);
} mu__llm_src_t;

/*
 * Open path: an HF directory (config.json + safetensors), a GGUF file or a
 * llama2.c checkpoint (its tokenizer: tok_path, else tokenizer.bin or
 * tok<vocab>.bin beside it). Checks the configuration and that every tensor
 * the configuration needs is there with the shape it implies; maps the
 * files and reads no weight. 0, or an error with why naming the file, the
 * field or the tensor (-errno, MU_EPROTO, MU_EBADMAGIC, MU_ETOOBIG,
 * MU_EJSON, MU_ENOMEM). On failure *src holds nothing.
 */
int mu__llm_src_open(const char *path, const char *tok_path,
                     mu__llm_src_t *src, char *why, size_t wl);
void mu__llm_src_free(mu__llm_src_t *src);
const mu__llm_tensor_t *mu__llm_src_tensor(const mu__llm_src_t *src,
                                           const char *name);
/* Bytes of the tensors that layers [first, last) need, plus the embedding
 * when first == 0 and the head (when untied) and final norm when last is
 * the last layer. */
uint64_t mu__llm_src_bytes(const mu__llm_src_t *src, int first, int last);
/* Read one byte of every page of the tensors layers [first, last) need,
 * so they are resident before a run is timed or a stage says it is ready
 * (the first token is not spent on page faults). */
void mu__llm_src_touch(const mu__llm_src_t *src, int first, int last);
/* Is tensor i one that layers [first, last) need (by the same rule)? */
int mu__llm_tensor_in(const mu__llm_src_t *src, size_t i, int first, int last);

/*
 * Cut the layers into n contiguous stages (n <= n_layers) so that the
 * largest stage's bytes (mu__llm_src_bytes) are as small as they can be:
 * stage i is layers [cut[i], cut[i+1]); cut has n + 1 entries.
 */
int mu__llm_split(const mu__llm_src_t *src, int n, int *cut);

/* Format loaders (llm/load_hf.c, llm/load_gguf.c, llm/load_l2c.c), called by open. */
int mu__llm_open_hf(const char *dir, mu__llm_src_t *src, char *why, size_t wl);
int mu__llm_open_gguf(const char *path, mu__llm_src_t *src, char *why,
                      size_t wl);
int mu__llm_open_l2c(const char *path, const char *tok_path,
                     mu__llm_src_t *src, char *why, size_t wl);

/* Each format's tokenizer builder (the src->tokenizer hooks). */
int mu__llm_gguf_tokenizer(const void *src, mu__tok_t **out, char *why, size_t wl);
int mu__llm_hf_tokenizer(const void *src, mu__tok_t **out, char *why, size_t wl);
int mu__llm_l2c_tokenizer(const void *src, mu__tok_t **out, char *why, size_t wl);

/* The files mapped for src: file i's path, size and modification time;
 * returns how many there are. */
size_t mu__llm_src_files(const mu__llm_src_t *src, size_t i, const char **path,
                         uint64_t *size, int64_t *mtime_ns);

/* Shared by the loaders (llm/src.c). */
int mu__llm_map_file(const char *path, mu__llm_src_t *src,
                     const unsigned char **base, size_t *len, char *why,
                     size_t wl);
int mu__llm_add_tensor(mu__llm_src_t *src, const char *name, mu__wtype_t t,
                       const void *data, int64_t rows, int64_t cols);
/* Check hp for sanity and that every tensor its architecture's entry
 * implies is present with its shape and a usable type (and none that
 * another architecture or a feature it does not run has). */
int mu__llm_check(const mu__llm_src_t *src, char *why, size_t wl);
/* The same for the tensors layers [first, last) need (a stage assembled
 * from streamed tensors holds only those). */
int mu__llm_check_range(const mu__llm_src_t *src, int first, int last, char *why,
                        size_t wl);
/* The hyperparameters alone (every field in its range, hp.arch an entry
 * of the architecture table), so a loader can refuse a configuration
 * before it opens the weights. */
int mu__llm_check_hp(const mu__llm_src_t *src, char *why, size_t wl);

/* ---- the description as it travels (llm/wire.c) ---- */

/* FNV-1a 64 of the configuration and every tensor's name, type and shape:
 * stages of one checkpoint agree on it without reading each other's
 * weights. */
uint64_t mu__llm_digest(const mu__llm_src_t *src);

struct cJSON;
/* The configuration as fields of object o, and back (every number
 * range-checked; MU_EPROTO naming the field). */
int mu__llm_hp_to_json(const mu__llm_hp_t *h, struct cJSON *o);
int mu__llm_hp_from_json(const struct cJSON *o, mu__llm_hp_t *h, char *why, size_t wl);

/*
 * The SHA-256 as hex of every tensor layers [first, last) need
 * (mu__llm_tensor_in; first < 0: all of them) into hex[i] for src->t[i]
 * (the others ""), from the cache beside the checkpoint
 * (<file>.muster-sha256.json, or muster-sha256.json in an HF directory)
 * when it matches the files' sizes and times, else those it lacks
 * computed and the cache written (*computed = 1).
 */
int mu__llm_src_hashes(const mu__llm_src_t *src, int first, int last, char (*hex)[65],
                       int *computed, char *why, size_t wl);

/*
 * The weights digest of layers [first, last): SHA-256 (hex into
 * out[65]) over the tensors they need, sorted by name (strcmp), each as
 * its name, a NUL, its SHA-256 in hex (hex[i] for src->t[i]) and "\n".
 * What a stage holds and what a coordinator expects of it, computed on
 * both sides from the per-tensor hashes (docs/protocols/pipeline.md,
 * "weights_sha256"). MU_EARG when one of them was not hashed.
 */
int mu__llm_weights_digest(const mu__llm_src_t *src, const char (*hex)[65], int first,
                           int last, char *out);

/* One tensor in a file of its own (a device's cache of streamed weights). */
typedef struct {
	const char *name, *path;
	mu__wtype_t type;
	int64_t rows, cols;
} mu__llm_file_t;

/* A source from such files and a configuration, holding what layers
 * [first, last) need (checked like a checkpoint's). */
int mu__llm_src_from_files(const mu__llm_hp_t *hp, const mu__llm_file_t *files, size_t n,
                           int first, int last, mu__llm_src_t *src, char *why, size_t wl);

/* ---- KV cache types (llm/kv.c) ---- */

/* The values never change: they are the public mu_llm_kv_type_t's. A new
 * type goes last, with its entry in mu__kv_types. */
typedef enum { MU__KV_F32 = 0, MU__KV_F16 = 1, MU__KV_Q8_0 = 2, MU__KV_COUNT } mu__kv_t;

typedef struct {
	const char *name;  /* the option's spelling: "q8_0" */
	mu__wtype_t wt;    /* the rows are stored as this weight type's */
	const char *what;  /* for --help */
} mu__kv_info_t;

extern const mu__kv_info_t mu__kv_types[MU__KV_COUNT];

/* "f16", or "?" for a number that is not a type. */
const char *mu__kv_name(int t);
/* "f32, f16 or q8_0" into buf (len bytes, truncated); returns buf. */
const char *mu__kv_list(char *buf, size_t len);
/* The type called name: 0 and *t, or MU_EARG listing the choices. */
int mu__kv_by_name(const char *name, int *t, char *why, size_t wl);
/* 0 when a cache of type t can hold the rows of a model of hp (q8_0
 * needs a head dim that is a multiple of 32), else MU_EARG naming it. */
int mu__kv_check(int t, const mu__llm_hp_t *hp, char *why, size_t wl);
/* Bytes of a row of n elements in type t (0 when n is not whole blocks). */
uint64_t mu__kv_row_bytes(int t, int64_t n);

/* ---- the decoder: a range of layers with KV caches ---- */

typedef struct mu__dec_s mu__dec_t;

typedef struct {
	int threads;          /* compute threads (>= 1) */
	int max_seqs;         /* open sequences at once */
	uint64_t kv_bytes;    /* KV memory all sequences may reserve */
	int max_chunk;        /* tokens per forward call (prefill chunk) */
	int max_per_owner;    /* open sequences of one owner; 0: max_seqs */
	int idle_ms;          /* mu__dec_seq_expire closes sequences unused
	                       * this long; 0: never */
	int kv_type;          /* a mu__kv_t: what mu__dec_seq_open keeps a
	                       * sequence's keys and values in (0: f32) */
} mu__dec_opts_t;

/*
 * Bind layers [first, last) of src (0 <= first < last <= n_layers; also
 * first == last == n_layers is allowed for a head-only stage). The first
 * stage (first == 0) embeds tokens; the last (last == n_layers) applies
 * the final norm and the head. Small tensors (norms, biases) are copied to
 * f32; matrices stay views of the map. src must outlive the decoder.
 */
int mu__dec_new(const mu__llm_src_t *src, int first, int last,
                const mu__dec_opts_t *o, mu__dec_t **out, char *why,
                size_t wl);
void mu__dec_free(mu__dec_t *d);

/*
 * Sequences are named by (owner, id): an owner is whoever opened them (a
 * connection of a stage server), so one peer's ids never meet another's
 * and a peer that goes away takes its sequences with it.
 *
 * Reserve a sequence's KV cache for ctx positions. MU_ETOOBIG with why
 * when max_seqs, the owner's share (max_per_owner) or kv_bytes would be
 * passed, or ctx is over the model's
 * trained context; -EEXIST for an id already open.
 */
int mu__dec_seq_open(mu__dec_t *d, uint64_t owner, uint64_t id, int32_t ctx,
                     char *why, size_t wl);
/* The same with a cache of type kv_type (a mu__kv_t) instead of o.kv_type;
 * MU_EARG with why for a type the model's head dim cannot take. */
int mu__dec_seq_open_kv(mu__dec_t *d, uint64_t owner, uint64_t id, int32_t ctx,
                        int kv_type, char *why, size_t wl);
/*
 * Close the sequences not opened or run for o.idle_ms before now_ms (a
 * peer that opened them and went quiet); how many (0 without idle_ms).
 */
int mu__dec_seq_expire(mu__dec_t *d, double now_ms);
/* Free it; -ENOENT when unknown. */
int mu__dec_seq_close(mu__dec_t *d, uint64_t owner, uint64_t id);
/* Free every sequence of owner; how many there were. */
int mu__dec_seq_close_owner(mu__dec_t *d, uint64_t owner);
int mu__dec_seqs(const mu__dec_t *d);
uint64_t mu__dec_kv_reserved(const mu__dec_t *d);
/* KV bytes one sequence of ctx positions takes on this decoder, in its
 * o.kv_type / in type kv_type. */
uint64_t mu__dec_kv_per_seq(const mu__dec_t *d, int32_t ctx);
uint64_t mu__dec_kv_per_seq_type(const mu__dec_t *d, int32_t ctx, int kv_type);

/*
 * Run n tokens at positions [pos, pos + n) of sequence id (pos at most
 * the sequence's length so far: a smaller pos rewinds it). Input: token
 * ids on the first stage, else x[n][dim]. Output: on the last stage the
 * logits [n or 1][vocab] (all positions when all_logits, else the last),
 * else y[n][dim]. n is at most max_chunk. Results are bit-identical for
 * any split of the layers, any chunking of the positions and any thread
 * count (kern/kern_int.h). Errors: MU_EARG / -ENOENT / MU_ETOOBIG with why,
 * MU_ENOMEM.
 */
/*
 * Several sequences in one call (decode steps batched into one product
 * per weight matrix): item i runs positions [pos, pos + n) of sequence
 * id; rows are the items' positions in item order (at most max_chunk in
 * all, at most MU__DEC_MAX_ITEMS items, no sequence twice). The last
 * stage writes each item's logits in item order (n rows when all_logits,
 * else 1); other stages write every row's activations. A row's results
 * are the same bits as when its sequence runs alone.
 */
#define MU__DEC_MAX_ITEMS 256

typedef struct {
	uint64_t id;
	int32_t pos, n;
	int all_logits;
} mu__dec_item_t;

int mu__dec_forward_batch(mu__dec_t *d, uint64_t owner, const mu__dec_item_t *it,
                          int nit, const int32_t *tokens, const float *x, float *out,
                          char *why, size_t wl);

int mu__dec_forward(mu__dec_t *d, uint64_t owner, uint64_t id, int32_t pos,
                    int32_t n,
                    const int32_t *tokens, const float *x, float *out,
                    int all_logits, char *why, size_t wl);

/* What the decoder is: layers held, whether it embeds and has the head,
 * and its input and output widths (what the next stage reads). */
void mu__dec_shape(const mu__dec_t *d, int *first, int *last, int *embeds,
                   int *head);
const mu__llm_hp_t *mu__dec_hp(const mu__dec_t *d);

/* ---- sampling ---- */

typedef struct {
	float temperature;   /* 0: argmax (first maximum wins) */
	int top_k;           /* 0: all */
	float top_p;         /* 1: all */
	uint64_t seed;
} mu__sample_opts_t;

typedef struct {
	float p;
	int32_t id;
} mu__cand_t;

typedef struct {
	mu__sample_opts_t o;
	uint64_t state;      /* the generator's state, from the seed */
	mu__cand_t *cand;    /* scratch, vocab entries */
	int32_t vocab;
} mu__sampler_t;

int mu__sampler_init(mu__sampler_t *s, const mu__sample_opts_t *o,
                     int32_t vocab);
void mu__sampler_free(mu__sampler_t *s);
/* The next token from logits[vocab] (which it may overwrite). */
int32_t mu__sample(mu__sampler_t *s, float *logits);

#endif
