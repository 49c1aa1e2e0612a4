/* SPDX-License-Identifier: MIT */
/*
 * Decoder LLMs (Llama, Mistral, Qwen2): open a checkpoint in any of its
 * three formats (an HF directory, a GGUF file, a llama2.c checkpoint)
 * with its tokenizer, generate text with it, tokenize and detokenize.
 *
 * A handle (mu_llm_t) is a model ready to generate. What runs its layers
 * is chosen when it is opened (mu_llm_opts_t):
 *   - this process, on `threads` compute threads (the default);
 *   - `muster stage` servers, by address in layer order (`stages`);
 *   - devices found through a tracker (`cluster`, muster/pipeline.h): the layers
 *     are cut to fit each device's memory with its KV cache, and loaded
 *     from the device's own copy or streamed to it; a device lost
 *     mid-generation is replaced and the text goes on unchanged.
 * Whichever it is, a request makes the same tokens bit for bit (the same
 * checkpoint, prompt, sampling options and seed give the same text in one
 * process and over any split). Several requests run on one handle at once
 * (up to max_sequences; more wait their turn), batched on each stage and
 * pipelined over the stages, and what one generates does not depend on
 * what runs beside it.
 *
 * Threads: a handle generates on a thread of its own, and calls every
 * request's callbacks there, one at a time. A callback must not call
 * mu_llm_generate, mu_llm_drain or mu_llm_free on its handle (they wait
 * for that thread). Everything else may be called from any thread.
 *
 * A handle whose device is lost for good (no replacement) stops: what
 * runs ends with the error naming the stage, and later requests fail with
 * MU_ESTOPPED. Free it and open another. A `muster stage` that is lost is
 * down, not gone: the handle reconnects to its address while it is down,
 * rebuilds its KV caches once it serves the same layers again, and what
 * was running goes on with the same text; what waits for it longer than
 * io_timeout_ms fails with -EHOSTDOWN, naming the stage.
 */
#ifndef MUSTER_LLM_H
#define MUSTER_LLM_H

#include <stddef.h>
#include <stdint.h>

#include "muster/common.h"
#include "muster/pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tokenizers ---- */

/*
 * A tokenizer: HF tokenizer.json (byte-level BPE as in GPT-2, Llama 3,
 * Qwen; SentencePiece-style as in Llama 2, Mistral), a GGUF file's
 * vocabulary, or a llama2.c tokenizer file. A model's own comes with its
 * handle (mu_llm_tokenizer); one built from files alone is freed with
 * mu_tokenizer_free. Its calls are thread-safe (it never changes).
 */
typedef struct mu_tokenizer_s mu_tokenizer_t;

/*
 * From the text of an HF tokenizer.json (json, len bytes) and, when it
 * has one, its tokenizer_config.json (config may be NULL), which says
 * whether BOS/EOS are added and names the special tokens and the chat
 * template. MU_EJSON, MU_EPROTO naming the field that is wrong or
 * unsupported, MU_ENOMEM; *out is NULL on failure.
 */
MU_EXTERN int mu_tokenizer_from_hf(const char *json, size_t len, const char *config,
                                   size_t config_len, mu_tokenizer_t **out, char *err,
                                   size_t errlen);
/* From a llama2.c tokenizer file's bytes and the model's vocabulary size
 * (the file does not say it). The same errors. */
MU_EXTERN int mu_tokenizer_from_llama2c(const void *data, size_t len, int32_t vocab,
                                        mu_tokenizer_t **out, char *err, size_t errlen);
/*
 * From a GGUF file's tokenizer metadata as a JSON object keyed by GGUF's
 * names ("tokenizer.ggml.model", "tokenizer.ggml.tokens", ...,
 * "tokenizer.chat_template"), built as the GGUF file's own would be: for
 * testing a vocabulary without its model. The same errors.
 */
MU_EXTERN int mu_tokenizer_from_gguf_meta(const char *json, size_t len, mu_tokenizer_t **out,
                                          char *err, size_t errlen);
/* Free a tokenizer built above (never a handle's). NULL is a no-op. */
MU_EXTERN void mu_tokenizer_free(mu_tokenizer_t *t);

/* Flags of mu_tokenizer_encode. */
#define MU_TOK_BOS 1     /* add BOS (and EOS) where the tokenizer's config does */
#define MU_TOK_SPECIAL 2 /* special tokens' text in the input is those tokens */

/*
 * len bytes of UTF-8 text to token ids (invalid UTF-8 is encoded byte by
 * byte, never refused), in an array the call allocates (*ids, *n; free
 * with mu_free, even when n is 0). What a generation request feeds the
 * model is encoded with MU_TOK_BOS | MU_TOK_SPECIAL. MU_ENOMEM only.
 */
MU_EXTERN int mu_tokenizer_encode(const mu_tokenizer_t *t, const char *text, size_t len,
                                  int flags, int32_t **ids, size_t *n);
/*
 * Ids to the bytes of their text, in a NUL-terminated buffer the call
 * allocates (*text, *len; free with mu_free). Special tokens are left out
 * unless keep_special; a SentencePiece-style tokenizer drops the leading
 * space its prefix added, as HF's decode does. MU_ENOMEM only.
 */
MU_EXTERN int mu_tokenizer_decode(const mu_tokenizer_t *t, const int32_t *ids, size_t n,
                                  int keep_special, char **text, size_t *len);
/* The number of ids; BOS (-1 when it has none). */
MU_EXTERN int32_t mu_tokenizer_vocab(const mu_tokenizer_t *t);
MU_EXTERN int32_t mu_tokenizer_bos(const mu_tokenizer_t *t);

/* ---- KV cache types ---- */

/*
 * What a KV cache keeps keys and values in (--kv-type). f16 rounds each
 * to nearest even; q8_0 stores blocks of 32 as the Q8_0 weight format (an
 * f16 scale and 32 int8, llama.cpp's reference quantizer) and takes only
 * models whose head dim is a multiple of 32. Attention reads what was
 * stored exactly, so results stay bit-identical over any split, chunking
 * and thread count, for each type. The numbers never change.
 */
typedef enum {
	MU_LLM_KV_F32 = 0,
	MU_LLM_KV_F16 = 1,         /* the default, as llama.cpp's -ctk/-ctv */
	MU_LLM_KV_Q8_0 = 2
} mu_llm_kv_type_t;

/* "f32", "f16", "q8_0"; NULL for a number that is not a type. */
MU_EXTERN const char *mu_llm_kv_type_name(int t);
/* The type called name into *t; MU_EARG with err listing the choices
 * ("a KV cache type is f32, f16 or q8_0, not 'x'"), *t untouched. */
MU_EXTERN int mu_llm_kv_type_parse(const char *name, int *t, char *err, size_t errlen);

/* ---- opening a model ---- */

typedef struct mu_llm_s mu_llm_t;

typedef struct {
	size_t struct_size;        /* set by mu_llm_opts_init */
	const char *tokenizer;     /* a llama2.c checkpoint's tokenizer file; NULL:
	                            * tokenizer.bin or tok<vocab>.bin beside it */
	int threads;               /* in this process: compute threads; 0 (default):
	                            * the machine's cores */
	int max_sequences;         /* requests generating at once; more wait their
	                            * turn. Default 1 */
	int32_t ctx;               /* positions (prompt and new tokens) a request
	                            * may use; 0 (default): the model's trained
	                            * context, at most 4096 (and at most the
	                            * stages') */
	int32_t chunk;             /* prompt positions per forward; default 256 */
	int batch;                 /* 1 (default): requests waiting for a stage
	                            * share its batch; 0: one per batch (to
	                            * measure what batching gives) */
	int io_timeout_ms;         /* a stage or device silent this long on a batch
	                            * has failed, and what waits for a lost
	                            * stage to come back waits this long;
	                            * default 60000 */
	int keepalive_ms;          /* ping idle stages and devices this often, so
	                            * they keep the session; default 60000; 0:
	                            * never */
	/* over `muster stage` servers: nstages addresses ("host:port") in
	 * layer order (read during mu_llm_open); NULL: not */
	const char *const *stages;
	int nstages;
	const mu_coord_opts_t *coord; /* toward the stages (connect and I/O
	                            * timeouts, reply bound, TLS or secret);
	                            * NULL: the defaults. Read during open; its
	                            * sec must outlive the handle */
	const mu_cluster_opts_t *cluster; /* over devices from a tracker (the
	                            * tracker, key, devices, weights, lost
	                            * devices replaced, narration; its coord
	                            * toward them): cut to fit their memory, a
	                            * device lost mid-generation replaced. NULL
	                            * (default): not. Not with stages */
	int device_sequences;      /* with cluster: sequences each device keeps a
	                            * KV cache for; 0 (default): max_sequences */
	uint64_t replay_bytes;     /* with stages or cluster: activations kept to
	                            * rebuild a lost stage's or device's KV
	                            * cache; default 256 MiB */
	int kv_type;               /* a mu_llm_kv_type_t: the KV cache's type in
	                            * this process, and what each stage or
	                            * device is asked to keep the handle's
	                            * sequences in (a stage too old to be asked
	                            * is refused unless f32); default
	                            * MU_LLM_KV_F16 */
} mu_llm_opts_t;

MU_EXTERN void mu_llm_opts_init_size(mu_llm_opts_t *o, size_t size);
#define mu_llm_opts_init(o) mu_llm_opts_init_size((o), sizeof(*(o)))

/*
 * Open the checkpoint at path (an HF directory, a GGUF file or a llama2.c
 * checkpoint; the format is found from what is there) with its tokenizer,
 * and make it ready to generate where o says (NULL: in this process, with
 * the defaults). The weights are mapped, not read: in this process they
 * are made resident before this returns; over stages or devices this
 * process holds none. err says which step failed and why ("cannot open
 * the model: ...", "cannot use the stages: stage 1/2 (host:port): ...",
 * "cannot place the model on the devices: ..."). *out is NULL on failure.
 */
MU_EXTERN int mu_llm_open(const char *path, const mu_llm_opts_t *o, mu_llm_t **out,
                          char *err, size_t errlen);
/* The architectures muster runs, from its architecture table, as prose
 * ("llama, mistral and qwen2"; hf: config.json's class names instead):
 * for help texts and messages. Writes at most n bytes, NUL-terminated
 * when n > 0, and returns the length it needed, as snprintf does. */
MU_EXTERN int mu_llm_architectures(int hf, char *out, size_t n);

/* End what runs (each request's on_done says MU_ESTOPPED), close the
 * stages or give the devices back, free. NULL is a no-op. */
MU_EXTERN void mu_llm_free(mu_llm_t *llm);

/* The handle's tokenizer (lives as long as it). */
MU_EXTERN const mu_tokenizer_t *mu_llm_tokenizer(const mu_llm_t *llm);

typedef enum {
	MU_LLM_HF = 0,        /* an HF directory (config.json, safetensors) */
	MU_LLM_GGUF = 1,
	MU_LLM_LLAMA2C = 2
} mu_llm_format_t;

typedef struct {
	const char *arch;          /* "llama", "mistral", "qwen2" */
	mu_llm_format_t format;
	int32_t layers, dim, vocab;
	int32_t trained_ctx;       /* the model's context */
	int32_t ctx;               /* what a request may use here */
	uint64_t weight_bytes;     /* of every layer, embedding and head */
	int stages;                /* what runs the layers: 1 in this process */
	const char *where;         /* for people: "this process, 2 threads, kernels
	                            * avx2", "3 stages", "3 devices from the tracker" */
} mu_llm_info_t;

/* What the handle is; the strings live as long as it. */
MU_EXTERN void mu_llm_info(const mu_llm_t *llm, mu_llm_info_t *out);

typedef struct {
	const char *address;       /* "host:port" of the stage or device; NULL in
	                            * this process */
	int first, last;           /* its layers [first, last) */
	uint64_t batches;          /* batches it ran */
	uint64_t rows;             /* positions in them */
	double busy_ms;            /* its own compute time */
	int replaced;              /* devices: times it moved to a new device */
} mu_llm_stage_info_t;

/*
 * Stage i (0 <= i < info.stages): where it runs and what it did so far.
 * The figures are exact once nothing runs (after mu_llm_drain) or from a
 * callback. MU_EARG for an i out of range.
 */
MU_EXTERN int mu_llm_stage_info(const mu_llm_t *llm, int i, mu_llm_stage_info_t *out);

typedef struct {
	int recoveries;            /* devices lost and replaced, stages lost and
	                            * back */
	double recovery_ms;        /* from each loss to generating again, summed */
	uint64_t replayed;         /* positions replayed to rebuild KV caches */
	uint64_t kept_bytes;       /* activations held for replay now */
} mu_llm_recovery_t;

/* Over devices or stages: what was recovered so far (all zero in this
 * process). */
MU_EXTERN void mu_llm_recovery(const mu_llm_t *llm, mu_llm_recovery_t *out);

/* ---- generating ---- */

typedef enum {
	MU_LLM_STOP_EOS = 0,       /* the model ended its text */
	MU_LLM_STOP_LENGTH = 1,    /* max_tokens new tokens */
	MU_LLM_STOP_CONTEXT = 2,   /* the context is full */
	MU_LLM_STOP_CALLER = 3     /* on_token asked to stop */
} mu_llm_stop_t;

typedef struct {
	int32_t prompt_tokens;     /* the prompt's ids, BOS included */
	int32_t new_tokens;
	int32_t decode_steps;      /* new tokens fed back through the layers */
	mu_llm_stop_t stop;
	double prefill_ms;         /* from its start to the prompt's logits */
	double ttft_ms;            /* from its start to the first new token */
	double decode_ms;          /* from the first new token to the end */
} mu_llm_stats_t;

typedef struct {
	size_t struct_size;        /* set by mu_llm_gen_opts_init */
	int32_t max_tokens;        /* new tokens at most; default 256; 0: the
	                            * prompt is run and nothing generated */
	double temperature;        /* 0: the likeliest token each step (the first
	                            * of equals); default 0.8 */
	int32_t top_k;             /* sample among the k likeliest; default 40; 0:
	                            * all */
	double top_p;              /* then among the fewest whose probability adds
	                            * up to p; default 0.95; 1: all */
	uint64_t seed;             /* of the sampler: the same seed gives the same
	                            * text on every machine; default 0 */
	int no_bos;                /* do not start the prompt with BOS */
	int ignore_eos;            /* go on past the end-of-text token */
	const int32_t *prompt_ids; /* the prompt as ids, used as given (no BOS
	                            * added), instead of the text */
	size_t nprompt_ids;
	int32_t ctx;               /* positions to reserve; 0 (default): the
	                            * handle's ctx */
	/*
	 * Each new token (id) with the text it completes (len bytes, not
	 * NUL-terminated; empty while a UTF-8 character is still partial);
	 * at the end, id -1 with the bytes held back, if any. Return non-zero
	 * to stop (the request ends with rc 0 and MU_LLM_STOP_CALLER). The
	 * pieces of a request, concatenated, are its text. May be NULL.
	 */
	int (*on_token)(void *ud, int32_t id, const char *text, size_t len);
	/* Optional: the logits of every step (vocab floats) before its token
	 * is sampled: the prompt's last position, then each token fed back. */
	void (*on_logits)(void *ud, const float *logits, int32_t vocab);
	/* mu_llm_submit's: the end, rc 0 with st, or an error with its reason
	 * in err (st then holds what was done). Not called by
	 * mu_llm_generate, which returns the same. */
	void (*on_done)(void *ud, int rc, const mu_llm_stats_t *st, const char *err);
	void *ud;
} mu_llm_gen_opts_t;

MU_EXTERN void mu_llm_gen_opts_init_size(mu_llm_gen_opts_t *o, size_t size);
#define mu_llm_gen_opts_init(o) mu_llm_gen_opts_init_size((o), sizeof(*(o)))

/*
 * Generate from prompt (len bytes of UTF-8, encoded with BOS unless
 * no_bos, special tokens' text recognised), or from o->prompt_ids, and
 * wait for the end. 0 with *st (may be NULL) filled, or an error with
 * err: MU_ETOOBIG for a prompt longer than the context (naming both),
 * MU_EARG for an empty prompt with nothing to start from or bad options,
 * MU_ESTOPPED when the handle stopped, a stage's failure naming it.
 * o->on_done is not used.
 */
MU_EXTERN int mu_llm_generate(mu_llm_t *llm, const char *prompt, size_t len,
                              const mu_llm_gen_opts_t *o, mu_llm_stats_t *st, char *err,
                              size_t errlen);
/*
 * The same without waiting: 0 once the request is queued (*id, may be
 * NULL, names it for mu_llm_cancel), and o->on_done is called at its end
 * (which may come before this returns); or an error at once, as
 * mu_llm_generate's, and no callback is called.
 */
MU_EXTERN int mu_llm_submit(mu_llm_t *llm, const char *prompt, size_t len,
                            const mu_llm_gen_opts_t *o, uint64_t *id, char *err,
                            size_t errlen);
/* End request id early: its on_done says MU_ESTOPPED ("cancelled"). An id
 * that has ended already is ignored. */
MU_EXTERN void mu_llm_cancel(mu_llm_t *llm, uint64_t id);
/* Wait until every request submitted so far has ended. */
MU_EXTERN void mu_llm_drain(mu_llm_t *llm);

/* ---- a stage of a decoder LLM, and placement alone (`muster stage`, `muster plan`) ---- */

typedef struct {
	size_t struct_size;   /* set by mu_llm_stage_opts_init */
	const char *tokenizer;/* a llama2.c checkpoint's tokenizer; NULL:
	                       * beside it (a stage never tokenizes, but the
	                       * checkpoint is opened whole) */
	int index, of;        /* stage index (from 0) of the checkpoint's
	                       * layers split into `of` stages balanced by
	                       * weight bytes; default 0 of 1 */
	int first, last;      /* instead, when first >= 0: layers [first,
	                       * last) (first 0 embeds tokens; last the layer
	                       * count has the head); default -1 */
	int threads;          /* compute threads; default 1 */
	int max_seqs;         /* sequences open at once, from all
	                       * coordinators; default 8 */
	uint64_t kv_bytes;    /* KV cache all sequences may reserve; past it
	                       * SEQ_OPEN gets an ERROR. Default 1 GiB */
	int max_chunk;        /* positions per forward at most; default 256 */
	int max_seqs_per_conn;/* of max_seqs, open by one connection at most
	                       * (so one peer cannot take them all); default
	                       * 0: half of max_seqs, at least 1 */
	int seq_idle_ms;      /* a sequence no forward ran this long is
	                       * closed when another is opened; default
	                       * 600000; <= 0 never */
	int kv_type;          /* a mu_llm_kv_type_t: for sequences whose
	                       * SEQ_OPEN names no type (a coordinator of
	                       * before --kv-type); one that names it is kept
	                       * in its type. Default MU_LLM_KV_F16 */
} mu_llm_stage_opts_t;

MU_EXTERN void mu_llm_stage_opts_init_size(mu_llm_stage_opts_t *o, size_t size);
#define mu_llm_stage_opts_init(o) mu_llm_stage_opts_init_size((o), sizeof(*(o)))

/*
 * Load a stage of a decoder LLM checkpoint (an HF directory, a GGUF file
 * or a llama2.c checkpoint) from this machine's copy: only its own
 * layers' weights are read, and made resident. The stage serves
 * sequences with their KV caches (mu_stage_server_start, which counts its
 * KV bytes and open sequences into the server's metrics); its
 * mu_stage_describe has "first", "last", "layers", "embeds", "head",
 * "resident_bytes", "rss_bytes" and "load_ms". err says what failed ("stage
 * 5 of 2", the file's problem); MU_EARG for options out of range.
 */
MU_EXTERN int mu_stage_load_llm(const char *path, const mu_llm_stage_opts_t *o,
                                mu_stage_t **out, char *err, size_t errlen);

/*
 * Placement alone (`muster plan` for a decoder LLM): how a checkpoint's
 * layers cut into stages, either `stages` balanced by weight bytes, or
 * over devices with these memory budgets so each one's share (weights,
 * plus the KV cache for max_seqs sequences of ctx positions) fits.
 */
typedef struct {
	size_t struct_size;       /* set by mu_llm_plan_opts_init */
	int stages;               /* cut into this many (default 1), unless: */
	const uint64_t *budgets;  /* the devices' memory budgets, in bytes */
	int nbudgets;             /* 1 to 64 of them; 0 (default): stages */
	int32_t ctx;              /* positions of each sequence's KV cache;
	                           * default 2048 */
	int max_seqs;             /* sequences each stage keeps; default 1 */
	int kv_type;              /* a mu_llm_kv_type_t: the KV cache's type;
	                           * default MU_LLM_KV_F16 */
} mu_llm_plan_opts_t;

MU_EXTERN void mu_llm_plan_opts_init_size(mu_llm_plan_opts_t *o, size_t size);
#define mu_llm_plan_opts_init(o) mu_llm_plan_opts_init_size((o), sizeof(*(o)))

typedef struct mu_llm_plan_s mu_llm_plan_t;

typedef struct {
	int device;               /* with budgets: which (index into them);
	                           * else -1 */
	int first, last;          /* layers [first, last) */
	int embeds, head;         /* it embeds tokens / applies the head */
	uint64_t weight_bytes;
	uint64_t kv_bytes;        /* for max_seqs x ctx positions */
} mu_llm_plan_stage_t;

/*
 * Open the checkpoint's description (no weights are read) and cut it. A
 * device with nothing to take has no stage. 0 with *out; else err says
 * why: the checkpoint's problem, "N stages of a model of L layers", or
 * with budgets MU_ETOOBIG and the numbers when it does not fit.
 */
MU_EXTERN int mu_llm_plan(const char *path, const mu_llm_plan_opts_t *o,
                          mu_llm_plan_t **out, char *err, size_t errlen);
/* The checkpoint's architecture ("llama", "qwen2", ...) and layer count. */
MU_EXTERN const char *mu_llm_plan_arch(const mu_llm_plan_t *p);
MU_EXTERN int mu_llm_plan_layers(const mu_llm_plan_t *p);
/* Stages with layers, in order; stage i of them into out. */
MU_EXTERN int mu_llm_plan_stages(const mu_llm_plan_t *p);
MU_EXTERN void mu_llm_plan_stage(const mu_llm_plan_t *p, int i,
                                 mu_llm_plan_stage_t *out);
MU_EXTERN void mu_llm_plan_free(mu_llm_plan_t *p);

#ifdef __cplusplus
}
#endif
#endif
