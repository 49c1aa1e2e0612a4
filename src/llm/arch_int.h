/* SPDX-License-Identifier: MIT */
/*
 * What muster knows about decoder architectures, in two tables that every
 * reader of a model reads (the shape of llama.cpp's llama-arch.cpp, not its
 * code):
 *
 * - the architectures (llm/arch.c): for each, the names the formats give
 *   it (config.json "architectures" and "model_type", GGUF
 *   general.architecture), the RoPE layout of its GGUF rows, its
 *   activation and norm, the features it needs beyond the Llama block, and
 *   its tensors: per layer and for the whole model, each with its GGUF
 *   name, the HF name it maps from, its place in a llama2.c checkpoint, its
 *   shape in terms of the hyperparameters and whether it must be there;
 * - the hyperparameters (llm/hparams.c): for each field of mu__llm_hp_t,
 *   its GGUF key, its config.json key and default, its name on the wire
 *   and its range.
 *
 * The loaders (llm/load_*.c), the checker and the HF-to-GGUF name mapping
 * (llm/src.c, llm/arch.c), the binder (llm/dec.c) and the wire form and
 * digest (llm/wire.c) read them; docs/internals/llm.md says how to add an
 * architecture or a field.
 */
#ifndef MU_LLM_ARCH_INT_H
#define MU_LLM_ARCH_INT_H

#include <stddef.h>
#include <stdint.h>

#include "llm/llm_int.h"

/* ---- tensors ---- */

/* What a tensor is to the decoder: the binder puts each role in its place
 * (llm/dec.c). Roles up to MU__R_ROPE_FREQS belong to the whole model,
 * the rest to a layer. */
typedef enum {
	MU__R_TOKEN_EMBD = 0,
	MU__R_OUTPUT_NORM,
	MU__R_OUTPUT,
	MU__R_ROPE_FREQS, /* llama3 frequency factors (GGUF), head_dim / 2 */
	MU__R_ATTN_NORM,
	MU__R_Q,
	MU__R_K,
	MU__R_V,
	MU__R_O,
	MU__R_Q_BIAS,
	MU__R_K_BIAS,
	MU__R_V_BIAS,
	MU__R_O_BIAS,
	MU__R_FFN_NORM,
	MU__R_GATE,
	MU__R_UP,
	MU__R_DOWN,
	MU__R_Q_NORM, /* RMSNorm weights of each head of q (MU__AF_QK_NORM) */
	MU__R_K_NORM, /* ... and of k */
	MU__R_QKV,    /* q, k and v in one matrix, row views (MU__AF_FUSED_QKV) */
	MU__R_GATE_UP, /* gate then up in one matrix, row views (Phi-3) */
	MU__R_COUNT
} mu__role_t;

#define MU__R_FIRST_LAYER MU__R_ATTN_NORM

/* A tensor's size along one axis, in terms of the hyperparameters. */
typedef enum {
	MU__SZ_1 = 0,   /* rows of a vector (norm, bias, factors) */
	MU__SZ_DIM,     /* dim */
	MU__SZ_QDIM,    /* n_heads * head_dim */
	MU__SZ_KVDIM,   /* n_kv_heads * head_dim */
	MU__SZ_HIDDEN,  /* hidden */
	MU__SZ_VOCAB,   /* vocab */
	MU__SZ_HALF_HEAD, /* head_dim / 2 */
	MU__SZ_HEAD,      /* head_dim */
	MU__SZ_QKVDIM,    /* q_dim + 2 kv_dim: q, k and v fused */
	MU__SZ_HIDDEN2    /* 2 hidden: gate and up fused */
} mu__sz_t;

typedef enum {
	MU__NEED_REQUIRED = 0,
	MU__NEED_OPTIONAL,  /* used when the file has it */
	MU__NEED_UNTIED     /* the head: required unless it is the embedding (hp.tied) */
} mu__need_t;

/* Which stages hold a tensor of the whole model. */
typedef enum {
	MU__AT_FIRST = 0, /* the first (and the last when tied: the embedding is the head) */
	MU__AT_LAST,      /* the last */
	MU__AT_EVERY      /* every stage (RoPE factors: every layer rotates) */
} mu__at_t;

typedef struct {
	mu__role_t role;
	const char *gguf; /* its GGUF name; a layer's after "blk.N." */
	const char *hf;   /* the HF name it maps from, a layer's after the arch's
	                   * hf_layers prefix and "N."; NULL: HF files have none */
	mu__sz_t rows, cols; /* rows MU__SZ_1: a vector, copied to f32 when bound */
	mu__need_t need;
	mu__at_t at;      /* the whole model's tensors only */
	int l2c;          /* its array's place in a llama2.c checkpoint; -1: none */
} mu__tspec_t;

/* ---- architectures ---- */

/* The feed-forward's activation: down(act(gate(x)) * up(x)). */
typedef enum { MU__ACT_SILU = 0 } mu__act_t;
typedef enum { MU__NORM_RMS = 0 } mu__norm_t;

/* How config.json gives the sliding attention window. */
typedef enum {
	MU__WIN_NONE = 0, /* the architecture has none: its keys are ignored */
	MU__WIN_ALWAYS,   /* sliding_window on every layer, 4096 when omitted, none
	                   * when null (transformers' MistralConfig) */
	MU__WIN_OPT_IN,   /* only with use_sliding_window, on layers from
	                   * max_window_layers on (or as layer_types says) */
	MU__WIN_IF_SET    /* sliding_window on every layer when it is a number,
	                   * none when omitted or null (transformers' Phi3Config) */
} mu__win_t;

/*
 * Features beyond the Llama block. An entry sets the ones its code runs;
 * a file that asks for one its architecture does not set (a config.json
 * key, a GGUF key or a tensor, listed in the feature table of llm/arch.c)
 * is refused by name, never run without it.
 */
enum {
	MU__AF_QK_NORM = 1u << 0,     /* RMSNorm of q and k per head */
	MU__AF_SOFTCAP = 1u << 1,     /* tanh soft-capping of scores or logits */
	MU__AF_FUSED_QKV = 1u << 2,   /* one matrix for q, k and v */
	MU__AF_MOE = 1u << 3,         /* mixture of experts */
	MU__AF_SWA_LAYERS = 1u << 4,  /* a sliding window on some layers only */
	MU__AF_MLP_BIAS = 1u << 5,    /* biases on the feed-forward */
	MU__AF_LONGROPE = 1u << 6     /* Phi-3's LongRoPE: long and short factors */
};

#define MU__ARCH_NAMES 2 /* names per format an entry may have */

typedef struct mu__arch_s {
	const char *name;                   /* ours: hp.arch, the wire, the digest */
	const char *hf_class[MU__ARCH_NAMES]; /* config.json "architectures" */
	const char *model_type;             /* config.json "model_type" */
	const char *gguf[MU__ARCH_NAMES];   /* general.architecture; none: NULL */
	mu__rope_t rope_hf, rope_gguf;      /* how its HF and GGUF Q/K rows rotate */
	mu__act_t act;
	mu__norm_t norm;
	unsigned features;                  /* MU__AF_* its code runs */
	mu__win_t window;
	const char *hf_layers;              /* "model.layers.": a layer's HF prefix */
	const mu__tspec_t *model, *layer;   /* the whole model's; each layer's */
	size_t nmodel, nlayer;
} mu__arch_t;

/* Every architecture, in table order; NULL past the last. */
const mu__arch_t *mu__arch_at(size_t i);
/* By our name (hp.arch), by config.json's class or model_type, by GGUF's
 * name (len bytes, not NUL-terminated); NULL when none has it. */
const mu__arch_t *mu__arch_by_name(const char *name);
const mu__arch_t *mu__arch_by_hf(const char *cls);
const mu__arch_t *mu__arch_by_model_type(const char *type);
const mu__arch_t *mu__arch_by_gguf(const char *s, size_t len);

typedef enum { MU__ARCH_LIST_NAME, MU__ARCH_LIST_HF, MU__ARCH_LIST_GGUF } mu__arch_list_t;
/* The supported names as prose ("a, b and c"), for errors, --help and the
 * docs; what snprintf would return. */
int mu__arch_list(mu__arch_list_t which, char *out, size_t n);

/* A size of the hyperparameters h. */
int64_t mu__arch_size(const mu__llm_hp_t *h, mu__sz_t s);
/* The GGUF name of a whole-model role (NULL when a has none). */
const char *mu__arch_model_name(const mu__arch_t *a, mu__role_t r);
/* The spec of a directory name (GGUF names); *layer is its layer or -1. NULL
 * when a has no such tensor. */
const mu__tspec_t *mu__arch_spec(const mu__arch_t *a, const char *name, int *layer);

/*
 * A layer tensor a does not have but muster knows (another architecture's,
 * or one of a feature a does not run) is refused, MU_EPROTO with why
 * naming where (the file), the tensor and whose it is; a name nobody
 * knows is 0 (skipped: HF's rotary_emb.inv_freq, old GGUFs'
 * attn_rot_embd). name is a directory (GGUF) name.
 */
int mu__arch_check_foreign(const mu__arch_t *a, const char *name, const char *where,
                           char *why, size_t wl);

/*
 * HF's name for a tensor, as GGUF names it (model.layers.3.self_attn.q_proj.weight
 * is blk.3.attn_q.weight): 1 with out filled; 0 for a name to skip; or
 * refused as mu__arch_check_foreign refuses.
 */
int mu__arch_hf_to_gguf(const mu__arch_t *a, const char *hf, char *out, size_t n,
                        const char *where, char *why, size_t wl);

/* The features a file can ask for (the MU__AF_* bits), and what asks. */
typedef struct {
	unsigned flag;
	const char *what;          /* "QK norm" */
	const char *hf_keys[3];    /* config.json keys that ask when set (not null,
	                            * false or 0) */
	const char *gguf_keys[2];  /* GGUF keys ("%s." is the architecture) */
	const char *gguf_tensors[3]; /* layer tensors only it has, after "blk.N." */
	const char *hf_tensors[3];   /* ... as HF names them, after "model.layers.N." */
} mu__feature_t;

const mu__feature_t *mu__arch_feature_at(size_t i);
/* The name of an activation as config.json's hidden_act gives it. */
const char *mu__arch_act_name(mu__act_t act);

/* ---- hyperparameters (llm/hparams.c) ---- */

typedef enum {
	MU__HPK_INT = 0, /* int32_t */
	MU__HPK_NUM,     /* float */
	MU__HPK_BOOL,    /* int32_t, 0 or 1; a JSON bool */
	MU__HPK_TOKEN    /* int32_t token id, -1 for none; an id or a list (the first) */
} mu__hpk_t;

enum {
	MU__HPF_REQUIRED = 1u << 0, /* no default: a file must give it */
	/* Added after the wire form's first version: written and mixed into
	 * the digest only when it is not def, read as def when absent, so
	 * peers of the version before agree on every model that leaves it
	 * at def. Every field added from now on that travels sets it. */
	MU__HPF_WIRE_NEW = 1u << 1
};

typedef struct {
	const char *name;     /* the member of mu__llm_hp_t */
	size_t off;           /* its offset */
	mu__hpk_t kind;
	unsigned flags;
	double lo, hi;        /* its range: ints inclusive, numbers exclusive */
	double def;           /* when config.json (and the wire) leaves it out */
	double gguf_def;      /* when GGUF leaves it out */
	/* A default derived from fields before it (NULL: def). */
	int32_t (*derive)(const mu__llm_hp_t *h);
	const char *gguf;     /* its GGUF key, "%s." the architecture; NULL: the
	                       * GGUF loader's own code sets it */
	const char *hf[2];    /* config.json keys, the first present wins; none:
	                       * the HF loader's own code sets it */
	const char *wire;     /* its name on the wire; NULL: it does not travel */
} mu__hpf_t;

/* Every field, in the wire form's order; NULL past the last. */
const mu__hpf_t *mu__hpf_at(size_t i);

/* A field's value as a double, and set from one (ints are truncated; the
 * caller checked the range). */
double mu__hpf_get(const mu__hpf_t *f, const mu__llm_hp_t *h);
void mu__hpf_set(const mu__hpf_t *f, mu__llm_hp_t *h, double v);
/* Is v in the field's range? */
int mu__hpf_in_range(const mu__hpf_t *f, double v);
/* The field's default for a format that leaves it out (gguf: GGUF's). */
double mu__hpf_default(const mu__hpf_t *f, const mu__llm_hp_t *h, int gguf);
/* The range as text: "1 to 1024", "0 < x < 1". */
void mu__hpf_range_text(const mu__hpf_t *f, char *out, size_t n);
/* A GGUF key pattern for architecture arch (a leading "%s" is replaced). */
void mu__hpf_gguf_key(const char *pattern, const char *arch, char *out, size_t n);

/* ---- a field on the wire (llm/wire.c) ---- */

struct cJSON;
/* Does f travel for h (a wire name, and not a MU__HPF_WIRE_NEW field at
 * its default)? What the JSON carries and the digest mixes. */
int mu__hpf_travels(const mu__hpf_t *f, const mu__llm_hp_t *h);
/* f into object o when it travels. */
void mu__hpf_to_json(const mu__hpf_t *f, const mu__llm_hp_t *h, struct cJSON *o);
/* f from object o: in its range, MU_EPROTO naming it when not; absent is
 * an error unless f is MU__HPF_WIRE_NEW (then def); a field that does not
 * travel is def. */
int mu__hpf_from_json(const mu__hpf_t *f, const struct cJSON *o, mu__llm_hp_t *h, char *why,
                      size_t wl);

#endif
