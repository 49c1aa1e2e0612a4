/* SPDX-License-Identifier: MIT */
/*
 * GGUF reader: parses a whole file held in memory into its metadata and
 * tensor directory, checking every length against what is left. Knows the
 * layout only; what the keys mean for a decoder is in llm/load_gguf.c.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/endian_int.h"
#include "core/error_int.h"
#include "formats/gguf_int.h"
#include "kern/kern_int.h"

/* A cursor over the buffer; every read checks what is left. */
typedef struct {
	const unsigned char *p;
	size_t left;
} cur_t;

static int take(cur_t *c, size_t n, const unsigned char **out)
{
	if (n > c->left)
		return MU_EPROTO;
	*out = c->p;
	c->p += n;
	c->left -= n;
	return 0;
}

static int get_u32(cur_t *c, uint32_t *v)
{
	const unsigned char *b;

	if (take(c, 4, &b) != 0)
		return MU_EPROTO;
	*v = mu_le32_get(b);
	return 0;
}

static int get_u64(cur_t *c, uint64_t *v)
{
	const unsigned char *b;

	if (take(c, 8, &b) != 0)
		return MU_EPROTO;
	*v = mu_le64_get(b);
	return 0;
}

static int get_str(cur_t *c, const char **s, uint64_t *len)
{
	const unsigned char *b;

	if (get_u64(c, len) != 0 || *len > c->left)
		return MU_EPROTO;
	take(c, (size_t)*len, &b);
	*s = (const char *)b;
	return 0;
}

/* Size of one scalar of a metadata type, 0 for STRING/ARRAY/unknown. */
static size_t scalar_size(uint32_t t)
{
	switch (t) {
	case MU__GGUF_U8: case MU__GGUF_I8: case MU__GGUF_BOOL: return 1;
	case MU__GGUF_U16: case MU__GGUF_I16: return 2;
	case MU__GGUF_U32: case MU__GGUF_I32: case MU__GGUF_F32: return 4;
	case MU__GGUF_U64: case MU__GGUF_I64: case MU__GGUF_F64: return 8;
	default: return 0;
	}
}

/* The scalar at b of type t, into the three widened forms. */
static void scalar_read(uint32_t t, const unsigned char *b, uint64_t *u,
                        int64_t *i, double *f)
{
	uint32_t w;
	uint64_t q;
	float fl;

	switch (t) {
	case MU__GGUF_U8: case MU__GGUF_BOOL: *u = b[0]; *i = (int64_t)*u; *f = (double)*u; return;
	case MU__GGUF_I8: *i = (int8_t)b[0]; break;
	case MU__GGUF_U16: *u = mu_le16_get(b); *i = (int64_t)*u; *f = (double)*u; return;
	case MU__GGUF_I16: *i = (int16_t)mu_le16_get(b); break;
	case MU__GGUF_U32: *u = mu_le32_get(b); *i = (int64_t)*u; *f = (double)*u; return;
	case MU__GGUF_I32: *i = (int32_t)mu_le32_get(b); break;
	case MU__GGUF_U64: *u = mu_le64_get(b); *i = (int64_t)*u; *f = (double)*u; return;
	case MU__GGUF_I64: *i = (int64_t)mu_le64_get(b); break;
	case MU__GGUF_F32:
		w = mu_le32_get(b);
		memcpy(&fl, &w, 4);
		*f = fl;
		*i = 0;
		*u = 0;
		return;
	case MU__GGUF_F64:
		q = mu_le64_get(b);
		memcpy(f, &q, 8);
		*i = 0;
		*u = 0;
		return;
	default: return;
	}
	*u = (uint64_t)*i;
	*f = (double)*i;
}

/* The array's elements: check each string's length, or the whole run of
 * scalars, against the buffer. Arrays of arrays are refused. */
static int read_array(cur_t *c, mu__gguf_kv_t *kv, char *why, size_t wl)
{
	const unsigned char *start;
	uint64_t i, len;
	size_t sz;
	const char *s;

	if (get_u32(c, &kv->arr_type) != 0 || get_u64(c, &kv->arr_n) != 0)
		return mu__why(why, wl, MU_EPROTO, "key %.200s: truncated array", kv->key);
	start = c->p;
	if (kv->arr_type == MU__GGUF_STRING) {
		if (kv->arr_n > c->left / 8)
			return mu__why(why, wl, MU_EPROTO, "key %.200s: %llu strings cannot fit",
			               kv->key, (unsigned long long)kv->arr_n);
		for (i = 0; i < kv->arr_n; i++)
			if (get_str(c, &s, &len) != 0)
				return mu__why(why, wl, MU_EPROTO, "key %.200s: string %llu runs past the end",
				               kv->key, (unsigned long long)i);
	} else {
		sz = scalar_size(kv->arr_type);
		if (sz == 0)
			return mu__why(why, wl, MU_EPROTO, "key %.200s: arrays of type %u are not supported",
			               kv->key, kv->arr_type);
		if (kv->arr_n > c->left / sz)
			return mu__why(why, wl, MU_EPROTO, "key %.200s: %llu elements run past the end",
			               kv->key, (unsigned long long)kv->arr_n);
		take(c, (size_t)(kv->arr_n * sz), &start);
	}
	kv->arr = start;
	kv->arr_bytes = (uint64_t)(c->p - start);
	return 0;
}

static int read_kv(cur_t *c, mu__gguf_kv_t *kv, char *why, size_t wl)
{
	const unsigned char *b;
	const char *key;
	uint64_t klen;
	size_t sz;

	if (get_str(c, &key, &klen) != 0 || klen > MU__GGUF_MAX_NAME)
		return mu__why(why, wl, MU_EPROTO, "a metadata key is truncated or over %d bytes",
		               MU__GGUF_MAX_NAME);
	kv->key = mu__strndup(key, (size_t)klen);
	if (kv->key == NULL)
		return MU_ENOMEM;
	if (get_u32(c, &kv->type) != 0)
		return mu__why(why, wl, MU_EPROTO, "key %.200s: truncated", kv->key);
	if (kv->type == MU__GGUF_STRING) {
		if (get_str(c, &kv->str, &kv->len) != 0)
			return mu__why(why, wl, MU_EPROTO, "key %.200s: string runs past the end", kv->key);
		return 0;
	}
	if (kv->type == MU__GGUF_ARRAY)
		return read_array(c, kv, why, wl);
	sz = scalar_size(kv->type);
	if (sz == 0)
		return mu__why(why, wl, MU_EPROTO, "key %.200s: unknown value type %u", kv->key, kv->type);
	if (take(c, sz, &b) != 0)
		return mu__why(why, wl, MU_EPROTO, "key %.200s: truncated", kv->key);
	scalar_read(kv->type, b, &kv->u, &kv->i, &kv->f);
	return 0;
}

/*
 * {ggml id, elements per block, bytes per block} of every type ggml.h
 * sizes, whether muster computes it or not: a file's layout is checked
 * (each tensor's bytes in the file) before any type is looked at, so a
 * tensor of a type muster refuses is refused by its name, not as garbage.
 */
static const struct {
	uint32_t type, blk, bytes;
} ggml_sizes[] = {
	{0, 1, 4},      {1, 1, 2},      {2, 32, 18},    {3, 32, 20},    {6, 32, 22},
	{7, 32, 24},    {8, 32, 34},    {9, 32, 36},    {10, 256, 84},  {11, 256, 110},
	{12, 256, 144}, {13, 256, 176}, {14, 256, 210}, {15, 256, 292}, {16, 256, 66},
	{17, 256, 74},  {18, 256, 98},  {19, 256, 50},  {20, 32, 18},   {21, 256, 110},
	{22, 256, 82},  {23, 256, 136}, {24, 1, 1},     {25, 1, 2},     {26, 1, 4},
	{27, 1, 8},     {28, 1, 8},     {29, 256, 56},  {30, 1, 2},     {34, 256, 54},
	{35, 256, 66},  {39, 32, 17},
};

uint32_t mu__ggml_block(uint32_t t)
{
	for (size_t i = 0; i < sizeof(ggml_sizes) / sizeof(ggml_sizes[0]); i++)
		if (ggml_sizes[i].type == t)
			return ggml_sizes[i].blk;
	return 0;
}

uint64_t mu__ggml_bytes(uint32_t t, uint64_t n, int *known)
{
	for (size_t i = 0; i < sizeof(ggml_sizes) / sizeof(ggml_sizes[0]); i++) {
		if (ggml_sizes[i].type != t)
			continue;
		*known = n % ggml_sizes[i].blk == 0;
		return *known ? n / ggml_sizes[i].blk * ggml_sizes[i].bytes : 0;
	}
	*known = 0;
	return 0;
}

/* "Q4_K" for a type ggml names, "type 99" for one it does not. */
static const char *type_name(uint32_t t, char buf[16])
{
	const char *name = mu__ggml_type_name(t);

	if (name != NULL)
		return name;
	snprintf(buf, 16, "type %u", t);
	return buf;
}

static int read_tensor(cur_t *c, mu__gguf_tensor_t *t, char *why, size_t wl)
{
	const char *name;
	uint64_t nlen, n = 1;
	uint32_t d, blk;
	char tn[16];
	int known;

	if (get_str(c, &name, &nlen) != 0 || nlen > MU__GGUF_MAX_NAME)
		return mu__why(why, wl, MU_EPROTO, "a tensor name is truncated or over %d bytes",
		               MU__GGUF_MAX_NAME);
	t->name = mu__strndup(name, (size_t)nlen);
	if (t->name == NULL)
		return MU_ENOMEM;
	if (get_u32(c, &t->n_dims) != 0 || t->n_dims < 1 || t->n_dims > 4)
		return mu__why(why, wl, MU_EPROTO, "tensor %.200s: n_dims is not 1..4", t->name);
	for (d = 0; d < 4; d++)
		t->ne[d] = 1;
	for (d = 0; d < t->n_dims; d++) {
		if (get_u64(c, &t->ne[d]) != 0)
			return mu__why(why, wl, MU_EPROTO, "tensor %.200s: truncated dims", t->name);
		if (t->ne[d] == 0 || t->ne[d] > ((uint64_t)1 << 40) || n > ((uint64_t)1 << 50) / t->ne[d])
			return mu__why(why, wl, MU_EPROTO, "tensor %.200s: dimension %u is %llu",
			               t->name, d, (unsigned long long)t->ne[d]);
		n *= t->ne[d];
	}
	if (get_u32(c, &t->type) != 0 || get_u64(c, &t->offset) != 0)
		return mu__why(why, wl, MU_EPROTO, "tensor %.200s: truncated", t->name);
	/* ggml's rule: a row (ne0 elements) is whole blocks */
	blk = mu__ggml_block(t->type);
	t->bytes = mu__ggml_bytes(t->type, n, &known);
	if (blk != 0 && t->ne[0] % blk != 0)
		return mu__why(why, wl, MU_EPROTO, "tensor %.200s (%s): its rows of %llu elements do not "
		               "fill whole blocks of %u", t->name, type_name(t->type, tn),
		               (unsigned long long)t->ne[0], blk);
	return 0;
}

/* general.alignment, which must be a power of two (default 32). */
static int alignment(mu__gguf_t *g, char *why, size_t wl)
{
	int64_t a = 32;
	int rc = mu__gguf_get_int(g, "general.alignment", 1, 1 << 20, &a, why, wl);

	if (rc != 0 && rc != -ENOENT)
		return rc;
	if ((a & (a - 1)) != 0)
		return mu__why(why, wl, MU_EPROTO, "general.alignment %lld is not a power of two",
		               (long long)a);
	g->alignment = (uint64_t)a;
	return 0;
}

static int place_tensors(mu__gguf_t *g, const unsigned char *base,
                         size_t len, size_t hdr, char *why, size_t wl)
{
	uint64_t start = (hdr + g->alignment - 1) / g->alignment * g->alignment;
	char tn[16];
	size_t i;

	if (start > len)
		start = len; /* no data area: only tensor-less files are valid */
	g->data = base + start;
	g->data_len = len - start;
	for (i = 0; i < g->nt; i++) {
		mu__gguf_tensor_t *t = &g->t[i];

		if (t->offset % g->alignment != 0)
			return mu__why(why, wl, MU_EPROTO, "tensor %.200s: offset %llu is not aligned to %llu",
			               t->name, (unsigned long long)t->offset,
			               (unsigned long long)g->alignment);
		if (t->offset > g->data_len || t->bytes > g->data_len - t->offset)
			return mu__why(why, wl, MU_EPROTO, "tensor %.200s (%s): its %llu bytes at %llu run "
			               "past the end of the file (truncated?)", t->name,
			               type_name(t->type, tn), (unsigned long long)t->bytes,
			               (unsigned long long)t->offset);
		t->data = g->data + t->offset;
	}
	return 0;
}

static int parse_body(cur_t *c, mu__gguf_t *g, char *why, size_t wl)
{
	uint64_t nt, nkv, i;
	int rc;

	if (get_u64(c, &nt) != 0 || get_u64(c, &nkv) != 0)
		return mu__why(why, wl, MU_EPROTO, "truncated header");
	if (nt > MU__GGUF_MAX_TENSORS || nkv > MU__GGUF_MAX_KV)
		return mu__why(why, wl, MU_ETOOBIG, "%llu tensors and %llu keys: over the limits "
		               "(%d, %d)", (unsigned long long)nt, (unsigned long long)nkv,
		               MU__GGUF_MAX_TENSORS, MU__GGUF_MAX_KV);
	g->kv = mu__calloc(nkv ? nkv : 1, sizeof(*g->kv));
	g->t = mu__calloc(nt ? nt : 1, sizeof(*g->t));
	if (g->kv == NULL || g->t == NULL)
		return MU_ENOMEM;
	for (i = 0; i < nkv; i++, g->nkv++)
		if ((rc = read_kv(c, &g->kv[i], why, wl)) != 0) {
			g->nkv++; /* free the key it copied */
			return rc;
		}
	for (i = 0; i < nt; i++, g->nt++)
		if ((rc = read_tensor(c, &g->t[i], why, wl)) != 0) {
			g->nt++;
			return rc;
		}
	for (i = 0; i < nt; i++)
		if (mu__gguf_tensor(g, g->t[i].name) != &g->t[i])
			return mu__why(why, wl, MU_EPROTO, "tensor %.200s appears twice", g->t[i].name);
	return alignment(g, why, wl);
}

int mu__gguf_parse(const void *buf, size_t len, mu__gguf_t *g, char *why,
                   size_t wl)
{
	cur_t c = {buf, len};
	const unsigned char *b;
	int rc;

	memset(g, 0, sizeof(*g));
	if (take(&c, 4, &b) != 0 || memcmp(b, "GGUF", 4) != 0)
		return mu__why(why, wl, MU_EBADMAGIC, "not a GGUF file (no \"GGUF\" magic)");
	if (get_u32(&c, &g->version) != 0 || g->version < 2 || g->version > 3)
		return mu__why(why, wl, MU_EPROTO, "GGUF version %u: muster reads versions 2 and 3",
		               g->version);
	rc = parse_body(&c, g, why, wl);
	if (rc == 0)
		rc = place_tensors(g, buf, len, len - c.left, why, wl);
	if (rc != 0)
		mu__gguf_free(g);
	return rc;
}

void mu__gguf_free(mu__gguf_t *g)
{
	size_t i;

	for (i = 0; i < g->nkv; i++)
		mu__free(g->kv[i].key);
	for (i = 0; i < g->nt; i++)
		mu__free(g->t[i].name);
	mu__free(g->kv);
	mu__free(g->t);
	memset(g, 0, sizeof(*g));
}

const mu__gguf_kv_t *mu__gguf_find(const mu__gguf_t *g, const char *key)
{
	size_t i;

	for (i = 0; i < g->nkv; i++)
		if (strcmp(g->kv[i].key, key) == 0)
			return &g->kv[i];
	return NULL;
}

const mu__gguf_tensor_t *mu__gguf_tensor(const mu__gguf_t *g, const char *name)
{
	size_t i;

	for (i = 0; i < g->nt; i++)
		if (g->t[i].name != NULL && strcmp(g->t[i].name, name) == 0)
			return &g->t[i];
	return NULL;
}

static int is_float(uint32_t t)
{
	return t == MU__GGUF_F32 || t == MU__GGUF_F64;
}

int mu__gguf_get_int(const mu__gguf_t *g, const char *key, int64_t lo,
                     int64_t hi, int64_t *out, char *why, size_t wl)
{
	const mu__gguf_kv_t *kv = mu__gguf_find(g, key);

	if (kv == NULL)
		return -ENOENT;
	if (scalar_size(kv->type) == 0 || is_float(kv->type) ||
	    (kv->type == MU__GGUF_U64 && kv->u > (uint64_t)INT64_MAX) || kv->i < lo || kv->i > hi)
		return mu__why(why, wl, MU_EPROTO, "%.200s is not an integer in [%lld, %lld]", key,
		               (long long)lo, (long long)hi);
	*out = kv->i;
	return 0;
}

int mu__gguf_get_f64(const mu__gguf_t *g, const char *key, double *out,
                     char *why, size_t wl)
{
	const mu__gguf_kv_t *kv = mu__gguf_find(g, key);

	if (kv == NULL)
		return -ENOENT;
	if (scalar_size(kv->type) == 0 || kv->type == MU__GGUF_BOOL)
		return mu__why(why, wl, MU_EPROTO, "%.200s is not a number", key);
	*out = kv->f;
	return 0;
}

int mu__gguf_get_str(const mu__gguf_t *g, const char *key, const char **s,
                     uint64_t *len, char *why, size_t wl)
{
	const mu__gguf_kv_t *kv = mu__gguf_find(g, key);

	if (kv == NULL)
		return -ENOENT;
	if (kv->type != MU__GGUF_STRING)
		return mu__why(why, wl, MU_EPROTO, "%.200s is not a string", key);
	*s = kv->str;
	*len = kv->len;
	return 0;
}

int mu__gguf_arr_str(const mu__gguf_kv_t *kv, uint64_t *pos, const char **s,
                     uint64_t *len)
{
	cur_t c;

	if (kv->type != MU__GGUF_ARRAY || kv->arr_type != MU__GGUF_STRING || *pos > kv->arr_bytes)
		return MU_EPROTO;
	c.p = kv->arr + *pos;
	c.left = (size_t)(kv->arr_bytes - *pos);
	if (get_str(&c, s, len) != 0)
		return MU_EPROTO;
	*pos = (uint64_t)(c.p - kv->arr);
	return 0;
}

double mu__gguf_arr_f64(const mu__gguf_kv_t *kv, uint64_t i)
{
	uint64_t u = 0;
	int64_t s = 0;
	double f = 0;
	size_t sz = scalar_size(kv->arr_type);

	scalar_read(kv->arr_type, kv->arr + i * sz, &u, &s, &f);
	return f;
}

int64_t mu__gguf_arr_i64(const mu__gguf_kv_t *kv, uint64_t i)
{
	uint64_t u = 0;
	int64_t s = 0;
	double f = 0;
	size_t sz = scalar_size(kv->arr_type);

	scalar_read(kv->arr_type, kv->arr + i * sz, &u, &s, &f);
	if (!is_float(kv->arr_type))
		return s;
	return f > -9.2e18 && f < 9.2e18 ? (int64_t)f : 0; /* a cast out of range is UB */
}
