/* SPDX-License-Identifier: MIT */
/*
 * GGUF (llama.cpp's model file, versions 2 and 3), read in place:
 *
 *   "GGUF", u32 version, u64 tensor count, u64 metadata count,
 *   metadata: { string key, u32 type, value }...,
 *   tensor infos: { string name, u32 n_dims, u64 ne[n_dims] (innermost
 *                   first), u32 ggml type, u64 offset }...,
 *   padding to general.alignment (32 by default), then the data area;
 *   tensor offsets are relative to its start.
 *
 * Strings are u64 length + bytes (not NUL-terminated); all integers are
 * little-endian. Everything is checked before it is used: every count and
 * length against what is left of the buffer, dims against overflow, each
 * tensor's bytes inside the data area. Values stay in the buffer (an
 * mmapped file); keys and names are copied so callers get C strings.
 */
#ifndef MU_FORMATS_GGUF_INT_H
#define MU_FORMATS_GGUF_INT_H

#include <stddef.h>
#include <stdint.h>

/* Metadata value types. */
enum {
	MU__GGUF_U8 = 0, MU__GGUF_I8 = 1, MU__GGUF_U16 = 2, MU__GGUF_I16 = 3,
	MU__GGUF_U32 = 4, MU__GGUF_I32 = 5, MU__GGUF_F32 = 6, MU__GGUF_BOOL = 7,
	MU__GGUF_STRING = 8, MU__GGUF_ARRAY = 9, MU__GGUF_U64 = 10,
	MU__GGUF_I64 = 11, MU__GGUF_F64 = 12
};

#define MU__GGUF_MAX_TENSORS 65536
#define MU__GGUF_MAX_KV 65536
#define MU__GGUF_MAX_NAME 4096

typedef struct {
	char *key;
	uint32_t type;
	/* Scalars: the value widened (bool and unsigned in u, signed in i,
	 * floats in f; every scalar is also in the other two as a cast). */
	uint64_t u;
	int64_t i;
	double f;
	/* STRING: the bytes in the buffer. ARRAY: the element type, count,
	 * and the elements' bytes (strings: each u64 length + bytes). */
	const char *str;
	uint64_t len;
	uint32_t arr_type;
	uint64_t arr_n;
	const unsigned char *arr;
	uint64_t arr_bytes;
} mu__gguf_kv_t;

typedef struct {
	char *name;
	uint32_t type;      /* ggml type (kern/kern_int.h's table maps the
	                       ones muster computes; others are read but
	                       refused by whoever tries to use them) */
	uint32_t n_dims;
	uint64_t ne[4];     /* innermost first; unused dims are 1 */
	uint64_t offset;    /* within the data area */
	uint64_t bytes;     /* 0 when the type is one muster does not know */
	const unsigned char *data;
} mu__gguf_tensor_t;

typedef struct {
	uint32_t version;
	mu__gguf_kv_t *kv;
	size_t nkv;
	mu__gguf_tensor_t *t;
	size_t nt;
	uint64_t alignment;
	const unsigned char *data; /* the data area */
	uint64_t data_len;
} mu__gguf_t;

/*
 * Parse len bytes (the whole file). Pure: fuzzers call it. 0, or MU_EPROTO
 * / MU_EBADMAGIC / MU_ETOOBIG with why naming the field or tensor, or
 * MU_ENOMEM. On failure g holds nothing.
 */
int mu__gguf_parse(const void *buf, size_t len, mu__gguf_t *g, char *why,
                   size_t wl);
void mu__gguf_free(mu__gguf_t *g);

const mu__gguf_kv_t *mu__gguf_find(const mu__gguf_t *g, const char *key);
const mu__gguf_tensor_t *mu__gguf_tensor(const mu__gguf_t *g,
                                         const char *name);

/*
 * Typed getters: 0 when the key is there with a numeric type whose value
 * is an integer in [lo, hi] (resp. any number; a string), -ENOENT when
 * absent, MU_EPROTO (why names the key) otherwise.
 */
int mu__gguf_get_int(const mu__gguf_t *g, const char *key, int64_t lo,
                     int64_t hi, int64_t *out, char *why, size_t wl);
int mu__gguf_get_f64(const mu__gguf_t *g, const char *key, double *out,
                     char *why, size_t wl);
int mu__gguf_get_str(const mu__gguf_t *g, const char *key, const char **s,
                     uint64_t *len, char *why, size_t wl);

/*
 * Walk an array of strings: *pos starts at 0 (a byte offset into
 * kv->arr); each call yields the next string. 0, or MU_EPROTO past the
 * end (parse checked every length, so that means a caller bug).
 */
int mu__gguf_arr_str(const mu__gguf_kv_t *kv, uint64_t *pos, const char **s,
                     uint64_t *len);
/* Element i of a numeric array as double / int64 (i < kv->arr_n). */
double mu__gguf_arr_f64(const mu__gguf_kv_t *kv, uint64_t i);
int64_t mu__gguf_arr_i64(const mu__gguf_kv_t *kv, uint64_t i);

/* Bytes of n elements of ggml type t (n a multiple of its block; *known
 * says whether it is), or 0 for a type ggml.h does not size. Every type
 * ggml sizes is known, whether muster computes it or not. */
uint64_t mu__ggml_bytes(uint32_t t, uint64_t n, int *known);
/* Elements per block of ggml type t, or 0 for one ggml.h does not size. */
uint32_t mu__ggml_block(uint32_t t);

#endif
