/* SPDX-License-Identifier: MIT */
/*
 * safetensors reader and writer; see safetensors_int.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "muster/tensor.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/endian_int.h"
#include "core/error_int.h"
#include "core/json_int.h"
#include "core/proc_int.h"
#include "formats/map_int.h"
#include "formats/safetensors_int.h"

static const struct {
	const char *name;
	mu__dtype_t dt;
	unsigned size;
} dtypes[] = {
	{"F32", MU_DT_F32, 4}, {"F16", MU_DT_F16, 2}, {"BF16", MU_DT_BF16, 2},
	{"F64", MU_DT_F64, 8}, {"I64", MU_DT_I64, 8}, {"I32", MU_DT_I32, 4},
	{"I16", MU_DT_I16, 2}, {"I8", MU_DT_I8, 1}, {"U8", MU_DT_U8, 1},
	{"U16", MU_DT_U16, 2}, {"U32", MU_DT_U32, 4}, {"U64", MU_DT_U64, 8},
	{"BOOL", MU_DT_BOOL, 1}, {"F8_E4M3", MU_DT_F8_E4M3, 1},
	{"F8_E5M2", MU_DT_F8_E5M2, 1},
};

static int cmp_begin(const void *a, const void *b)
{
	const mu__st_entry_t *x = a, *y = b;

	return (x->begin > y->begin) - (x->begin < y->begin);
}

static int parse_entry(const cJSON *o, uint64_t data_len, mu__st_entry_t *e,
                       char *why, size_t wl)
{
	const cJSON *dt = cJSON_GetObjectItemCaseSensitive(o, "dtype");
	const cJSON *shape = cJSON_GetObjectItemCaseSensitive(o, "shape");
	const cJSON *offs = cJSON_GetObjectItemCaseSensitive(o, "data_offsets");
	const cJSON *d;
	unsigned size = 0;
	size_t i;

	if (!cJSON_IsObject(o) || !cJSON_IsString(dt))
		return mu__why(why, wl, MU_EPROTO, "tensor %.200s: no dtype", o->string);
	for (i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++)
		if (strcmp(dt->valuestring, dtypes[i].name) == 0) {
			e->dtype = dtypes[i].dt;
			size = dtypes[i].size;
		}
	if (size == 0)
		return mu__why(why, wl, MU_EPROTO, "tensor %.200s: unknown dtype", o->string);
	if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > MU_TENSOR_MAX_RANK)
		return mu__why(why, wl, MU_EPROTO, "tensor %.200s: shape must be a list of at most 8 dims", o->string);
	e->numel = 1;
	cJSON_ArrayForEach(d, shape) {
		if (!mu__json_is_int(d, 0, 9007199254740991.0))
			return mu__why(why, wl, MU_EPROTO, "tensor %.200s: a dim is not a non-negative integer", o->string);
		e->dims[e->rank++] = (uint64_t)d->valuedouble;
		if (e->dims[e->rank - 1] != 0 && e->numel > UINT64_MAX / size / e->dims[e->rank - 1])
			return mu__why(why, wl, MU_ETOOBIG, "tensor %.200s: too many elements", o->string);
		e->numel *= e->dims[e->rank - 1];
	}
	if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
	    !mu__json_is_int(cJSON_GetArrayItem(offs, 0), 0, 9007199254740991.0) ||
	    !mu__json_is_int(cJSON_GetArrayItem(offs, 1), 0, 9007199254740991.0))
		return mu__why(why, wl, MU_EPROTO, "tensor %.200s: data_offsets must be [begin, end]", o->string);
	e->begin = (uint64_t)cJSON_GetArrayItem(offs, 0)->valuedouble;
	e->end = (uint64_t)cJSON_GetArrayItem(offs, 1)->valuedouble;
	if (e->begin > e->end || e->end > data_len)
		return mu__why(why, wl, MU_EPROTO, "tensor %.200s: offsets outside the data area", o->string);
	if (e->end - e->begin != e->numel * size)
		return mu__why(why, wl, MU_EPROTO, "tensor %.200s: byte count does not match shape and dtype", o->string);
	e->name = mu__strdup(o->string);
	return e->name == NULL ? MU_ENOMEM : 0;
}

static void free_entries(mu__st_file_t *f)
{
	size_t i;

	for (i = 0; i < f->n; i++)
		mu__free(f->e[i].name);
	mu__free(f->e);
	f->e = NULL;
	f->n = 0;
}

int mu__st_parse(const char *json, size_t len, uint64_t data_len,
                 mu__st_file_t *f, char *why, size_t wl)
{
	cJSON *root = NULL;
	const cJSON *it;
	uint64_t end;
	size_t i, n;
	int rc;

	memset(f, 0, sizeof(*f));
	if (len > MU_ST_MAX_HEADER)
		return mu__why(why, wl, MU_ETOOBIG, "header of %.200s bytes is over the 100 MiB cap", "that many");
	rc = mu__json_parse(json, len, &root);
	if (rc != 0 || !cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return mu__why(why, wl, rc == MU_ENOMEM ? rc : MU_EJSON, "%.200s", "header is not a JSON object");
	}
	n = (size_t)cJSON_GetArraySize(root);
	f->e = mu__calloc(n + 1, sizeof(*f->e));
	if (f->e == NULL) {
		cJSON_Delete(root);
		return MU_ENOMEM;
	}
	cJSON_ArrayForEach(it, root) {
		if (strcmp(it->string, "__metadata__") == 0) {
			const cJSON *m;

			if (!cJSON_IsObject(it))
				rc = mu__why(why, wl, MU_EPROTO, "%.200s", "__metadata__ must map strings to strings");
			cJSON_ArrayForEach(m, it)
				if (rc == 0 && !cJSON_IsString(m))
					rc = mu__why(why, wl, MU_EPROTO, "%.200s", "__metadata__ must map strings to strings");
		} else {
			rc = parse_entry(it, data_len, &f->e[f->n], why, wl);
			if (rc == 0)
				f->n++;
		}
		if (rc != 0)
			break;
	}
	cJSON_Delete(root);
	if (rc == 0) { /* no two tensors may share bytes */
		mu__st_entry_t *s = mu__memdup(f->e, f->n * sizeof(*f->e) + 1);

		if (s == NULL)
			rc = MU_ENOMEM;
		else
			qsort(s, f->n, sizeof(*s), cmp_begin);
		/* against the furthest end so far, not just the previous
		 * tensor's: an empty tensor sorted between two others would
		 * hide their overlap */
		for (i = 0, end = 0; rc == 0 && i < f->n; i++) {
			if (s[i].begin == s[i].end)
				continue; /* empty: shares its offset with anything */
			if (s[i].begin < end)
				rc = mu__why(why, wl, MU_EPROTO, "tensor %.200s overlaps another", s[i].name);
			end = s[i].end > end ? s[i].end : end;
		}
		mu__free(s);
	}
	if (rc != 0)
		free_entries(f);
	return rc;
}

int mu__st_open(const char *path, mu__st_file_t *f, char *why, size_t wl)
{
	mu__map_t m;
	uint64_t hlen, len;
	int rc;

	memset(f, 0, sizeof(*f));
	rc = mu__map_open(path, 8, "too short to be safetensors", MU__MAP_NORMAL, &m, why, wl);
	if (rc != 0)
		return rc;
	len = m.len;
	hlen = mu_le64_get(m.p);
	if (hlen > MU_ST_MAX_HEADER || hlen > len - 8) {
		mu__map_close(&m);
		return mu__why(why, wl, hlen > MU_ST_MAX_HEADER ? MU_ETOOBIG : MU_EPROTO,
		           "%.200s: header length is over the cap or past the end", path);
	}
	rc = mu__st_parse((const char *)m.p + 8, (size_t)hlen, len - 8 - hlen, f, why, wl);
	if (rc != 0) {
		mu__map_close(&m);
		return rc;
	}
	f->map = m.p;
	f->map_len = m.len;
	f->data = (const unsigned char *)m.p + 8 + hlen;
	f->data_len = len - 8 - hlen;
	return 0;
}

void mu__st_close(mu__st_file_t *f)
{
	mu__map_t m = {f->map, f->map_len, 0};

	free_entries(f);
	mu__map_close(&m);
	f->map = NULL;
}

const mu__st_entry_t *mu__st_find(const mu__st_file_t *f, const char *name)
{
	size_t i;

	for (i = 0; i < f->n; i++)
		if (strcmp(f->e[i].name, name) == 0)
			return &f->e[i];
	return NULL;
}

static float half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
	float f;

	if (exp == 0) { /* zero or subnormal */
		if (man == 0) {
			bits = sign;
		} else {
			exp = 1;
			while ((man & 0x400) == 0) {
				man <<= 1;
				exp--;
			}
			man &= 0x3FF;
			bits = sign | (exp + 127 - 15) << 23 | man << 13;
		}
	} else if (exp == 0x1F) { /* inf or nan */
		bits = sign | 0x7F800000u | man << 13;
	} else {
		bits = sign | (exp + 127 - 15) << 23 | man << 13;
	}
	memcpy(&f, &bits, 4);
	return f;
}

int mu__st_loaded_dtype(const mu__st_entry_t *e)
{
	if (e->dtype == MU_DT_F16 || e->dtype == MU_DT_BF16)
		return MU_DTYPE_F32;
	return e->dtype == MU_DT_F8_E4M3 || e->dtype == MU_DT_F8_E5M2 ? -1 : (int)e->dtype;
}

uint64_t mu__st_loaded_bytes(const mu__st_entry_t *e)
{
	int dt = mu__st_loaded_dtype(e);

	return dt < 0 ? 0 : e->numel * mu_dtype_size(dt);
}

/* F16 and BF16 into F32, exactly */
static void widen(const mu__st_entry_t *e, const unsigned char *src, float *dst)
{
	for (uint64_t i = 0; i < e->numel; i++) {
		uint16_t h = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
		uint32_t bits = (uint32_t)h << 16;

		if (e->dtype == MU_DT_BF16)
			memcpy(&dst[i], &bits, 4);
		else
			dst[i] = half_to_float(h); /* exact, NaN payloads too */
	}
}

/* little-endian elements of w bytes into host order */
static void copy_le(const unsigned char *src, unsigned char *dst, uint64_t n, size_t w)
{
	for (uint64_t i = 0; i < n; i++)
		for (size_t k = 0; k < w; k++)
			dst[i * w + k] = src[i * w + (MU_BIG_ENDIAN_HOST ? w - 1 - k : k)];
}

static int load(const mu__st_file_t *f, const mu__st_entry_t *e, int resident,
                mu_tensor_t **out)
{
	const unsigned char *src = f->data + e->begin;
	int dt = resident < 0 ? (mu__st_loaded_dtype(e) < 0 ? -1 : (int)e->dtype)
	                      : mu__st_loaded_dtype(e);
	size_t w = dt < 0 ? 0 : mu_dtype_size(dt);
	mu_tensor_t *t;
	int rc;

	*out = NULL;
	if (dt < 0)
		return MU_EPROTO;
	/* a BOOL is a byte that is 0 or 1: ops may rely on it */
	for (uint64_t i = 0; e->dtype == MU_DT_BOOL && i < e->numel; i++)
		if (src[i] > 1)
			return MU_EPROTO;
	if ((int)e->dtype == dt && ((uintptr_t)src & (w - 1)) == 0 && !MU_BIG_ENDIAN_HOST) {
		if (resident > 0)
			mu__pages_touch(src, e->end - e->begin);
		return mu_tensor_wrap_typed(e->name, (mu_dtype_t)dt, e->rank, e->dims,
		                            (void *)(uintptr_t)src, out);
	}
	rc = mu_tensor_new_typed(e->name, (mu_dtype_t)dt, e->rank, e->dims, &t);
	if (rc != 0)
		return rc;
	if ((int)e->dtype == dt)
		copy_le(src, t->raw, e->numel, w);
	else
		widen(e, src, t->data);
	mu__pages_release(src, e->end - e->begin);
	*out = t;
	return 0;
}

int mu__st_load(const mu__st_file_t *f, const mu__st_entry_t *e, mu_tensor_t **out)
{
	return load(f, e, 1, out);
}

/* (resident -1: exact, and not faulted in: the caller copies it) */
int mu__st_load_exact(const mu__st_file_t *f, const mu__st_entry_t *e, mu_tensor_t **out)
{
	return load(f, e, -1, out);
}

int mu__st_view(const mu__st_file_t *f, const mu__st_entry_t *e, mu_tensor_t **out)
{
	return load(f, e, 0, out);
}

void mu__st_drop(const mu__st_file_t *f, const mu__st_entry_t *e)
{
	mu__pages_release(f->data + e->begin, e->end - e->begin);
}
