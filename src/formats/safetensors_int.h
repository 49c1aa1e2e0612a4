/* SPDX-License-Identifier: MIT */
/*
 * safetensors, read and written:
 *
 *   u64 LE header_len, header_len bytes of JSON
 *     {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...,
 *      "__metadata__": {"k": "v", ...}}
 *   then the data area; offsets are relative to its start.
 *
 * The header is validated whole before any tensor is used: its size
 * (capped), known dtypes, shapes, offsets inside the data area, byte counts
 * equal to numel * dtype size, and no two tensors overlapping. The file is
 * memory-mapped; loading a tensor touches only its own bytes, so what a
 * process holds resident is the tensors it loaded.
 */
#ifndef MU_FORMATS_SAFETENSORS_INT_H
#define MU_FORMATS_SAFETENSORS_INT_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "muster/tensor.h"

#define MU_ST_MAX_HEADER ((uint64_t)100 << 20)

/* A file's dtypes: every tensor dtype (same values as mu_dtype_t), and
 * the two 8-bit float kinds a file may hold but nothing loads. */
typedef enum {
	MU_DT_F32 = MU_DTYPE_F32, MU_DT_F16 = MU_DTYPE_F16, MU_DT_BF16 = MU_DTYPE_BF16,
	MU_DT_F64 = MU_DTYPE_F64, MU_DT_I64 = MU_DTYPE_I64, MU_DT_I32 = MU_DTYPE_I32,
	MU_DT_I16 = MU_DTYPE_I16, MU_DT_I8 = MU_DTYPE_I8, MU_DT_U8 = MU_DTYPE_U8,
	MU_DT_U16 = MU_DTYPE_U16, MU_DT_U32 = MU_DTYPE_U32, MU_DT_U64 = MU_DTYPE_U64,
	MU_DT_BOOL = MU_DTYPE_BOOL, MU_DT_F8_E4M3 = 64, MU_DT_F8_E5M2 = 65
} mu__dtype_t;

typedef struct {
	char *name;
	mu__dtype_t dtype;
	uint32_t rank;
	uint64_t dims[MU_TENSOR_MAX_RANK];
	uint64_t numel;
	uint64_t begin, end; /* within the data area */
} mu__st_entry_t;

typedef struct {
	mu__st_entry_t *e;
	size_t n;
	void *map;           /* the whole file */
	size_t map_len;
	const unsigned char *data; /* start of the data area */
	uint64_t data_len;
} mu__st_file_t;

/*
 * Parse and validate a header (its JSON text) against a data area of
 * data_len bytes. Pure: fuzzers call it. 0, MU_EJSON, MU_EPROTO (with
 * why: the tensor and the rule), MU_ETOOBIG, MU_ENOMEM.
 */
int mu__st_parse(const char *json, size_t len, uint64_t data_len,
                 mu__st_file_t *f, char *why, size_t wl);

/* Map and validate a file. */
int mu__st_open(const char *path, mu__st_file_t *f, char *why, size_t wl);
void mu__st_close(mu__st_file_t *f);

const mu__st_entry_t *mu__st_find(const mu__st_file_t *f, const char *name);

/*
 * A tensor with e's contents. F16 and BF16 become F32, converted exactly
 * (a weight is computed with in F32); every other dtype but the F8 kinds
 * stays what it is. Aligned data in a dtype that stays is used in place
 * (a borrowed view of the map, made resident); the rest is converted or
 * copied into new storage, and the mapped source pages are released.
 * MU_EPROTO for the F8 kinds and for a BOOL byte other than 0 or 1.
 */
int mu__st_load(const mu__st_file_t *f, const mu__st_entry_t *e,
                mu_tensor_t **out);

/* As mu__st_load, but every dtype stays what it is (F16 and BF16 too):
 * for tensors that are data, not weights (a run's inputs). */
int mu__st_load_exact(const mu__st_file_t *f, const mu__st_entry_t *e, mu_tensor_t **out);

/* The dtype mu__st_load makes of e (-1: it refuses e), and its bytes. */
int mu__st_loaded_dtype(const mu__st_entry_t *e);
uint64_t mu__st_loaded_bytes(const mu__st_entry_t *e);

/*
 * As mu__st_load, but a borrowed F32 view is not faulted in: for sending a
 * tensor on (its pages are read as they are sent). mu__st_drop then takes
 * e's pages out of this process's resident set; the file stays cached.
 */
int mu__st_view(const mu__st_file_t *f, const mu__st_entry_t *e, mu_tensor_t **out);
void mu__st_drop(const mu__st_file_t *f, const mu__st_entry_t *e);

/* ---- writing (safetensors_write.c) ---- */

/* A tensor to come: what the header says of it. */
typedef struct {
	const char *name;
	mu_dtype_t dtype;
	uint32_t rank;
	const uint64_t *dims;
} mu__st_desc_t;

typedef struct {
	FILE *f;
	uint64_t left;  /* data bytes the header announced and not yet put */
	int rc;         /* the first failure of a put */
} mu__st_writer_t;

/*
 * Create path and write the header of the n tensors d describes; their
 * data follows through mu__st_writer_put, in the same order. 0, MU_EARG
 * (a dtype that is not one, rank > 8), MU_ETOOBIG (a header over
 * MU_ST_MAX_HEADER), MU_ENOMEM, -errno. On failure nothing is open.
 */
int mu__st_writer_open(mu__st_writer_t *w, const char *path, const mu__st_desc_t *d, size_t n);
/* count elements of width bytes, in host order (stored little-endian).
 * MU_EARG past what the header announced; -EIO. */
int mu__st_writer_put(mu__st_writer_t *w, const void *p, uint64_t count, size_t width);
/* Close: -EIO when a write failed or the data falls short of the header. */
int mu__st_writer_close(mu__st_writer_t *w);

/* Write tensors of any dtype as a safetensors file (through the above). */
int mu__st_write(const char *path, const mu_tensor_list_t *l);

#endif
