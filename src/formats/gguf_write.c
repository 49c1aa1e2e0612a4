/* SPDX-License-Identifier: MIT */
/*
 * GGUF writer (formats/gguf_write_int.h): the bytes of a v3 file whose
 * metadata is copied from a parsed one, value by value with its type, and
 * whose tensors the caller streams in. Buffered stdio; every write's
 * failure is kept and reported once, at close.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/endian_int.h"
#include "formats/gguf_write_int.h"

static int put(mu__gguf_out_t *o, const void *p, size_t n)
{
	if (n > 0 && fwrite(p, 1, n, o->f) != n)
		return errno ? -errno : -EIO;
	o->pos += n;
	return 0;
}

static int put32(mu__gguf_out_t *o, uint32_t v)
{
	unsigned char b[4];

	mu_le32_put(b, v);
	return put(o, b, 4);
}

static int put64(mu__gguf_out_t *o, uint64_t v)
{
	unsigned char b[8];

	mu_le64_put(b, v);
	return put(o, b, 8);
}

static int put_str(mu__gguf_out_t *o, const char *s, uint64_t len)
{
	int rc = put64(o, len);

	return rc != 0 ? rc : put(o, s, (size_t)len);
}

/* The value of kv as it was read (scalars from their widened form). */
static int put_value(mu__gguf_out_t *o, const mu__gguf_kv_t *kv)
{
	unsigned char b[8];
	float f = (float)kv->f;
	int rc;

	switch (kv->type) {
	case MU__GGUF_U8: case MU__GGUF_I8: case MU__GGUF_BOOL:
		b[0] = (unsigned char)kv->u;
		return put(o, b, 1);
	case MU__GGUF_U16: case MU__GGUF_I16:
		b[0] = (unsigned char)kv->u;
		b[1] = (unsigned char)(kv->u >> 8);
		return put(o, b, 2);
	case MU__GGUF_U32: case MU__GGUF_I32: return put32(o, (uint32_t)kv->u);
	case MU__GGUF_U64: case MU__GGUF_I64: return put64(o, kv->u);
	case MU__GGUF_F32:
		memcpy(b, &f, 4);
		return put(o, b, 4);
	case MU__GGUF_F64:
		memcpy(b, &kv->f, 8);
		return put(o, b, 8);
	case MU__GGUF_STRING: return put_str(o, kv->str, kv->len);
	default:
		if ((rc = put32(o, kv->arr_type)) == 0 && (rc = put64(o, kv->arr_n)) == 0)
			rc = put(o, kv->arr, (size_t)kv->arr_bytes);
		return rc;
	}
}

/* Keys the output does not copy: set again at the end, or split's. */
static int dropped(const char *k)
{
	return strcmp(k, "general.quantization_version") == 0 ||
	       strcmp(k, "general.file_type") == 0 || strcmp(k, "split.no") == 0 ||
	       strcmp(k, "split.count") == 0 || strcmp(k, "split.tensors.count") == 0;
}

static int put_u32_kv(mu__gguf_out_t *o, const char *key, uint32_t v)
{
	int rc = put_str(o, key, strlen(key));

	if (rc == 0)
		rc = put32(o, MU__GGUF_U32);
	return rc != 0 ? rc : put32(o, v);
}

static int put_head(mu__gguf_out_t *o, const mu__gguf_t *g, uint32_t ftype)
{
	uint64_t nkv = 2;
	int rc;

	for (size_t i = 0; i < g->nkv; i++)
		nkv += !dropped(g->kv[i].key);
	rc = put(o, "GGUF", 4);
	if (rc == 0 && (rc = put32(o, 3)) == 0 && (rc = put64(o, g->nt)) == 0)
		rc = put64(o, nkv);
	for (size_t i = 0; rc == 0 && i < g->nkv; i++) {
		const mu__gguf_kv_t *kv = &g->kv[i];

		if (dropped(kv->key))
			continue;
		if ((rc = put_str(o, kv->key, strlen(kv->key))) == 0 && (rc = put32(o, kv->type)) == 0)
			rc = put_value(o, kv);
	}
	if (rc == 0)
		rc = put_u32_kv(o, "general.quantization_version", 2);
	return rc != 0 ? rc : put_u32_kv(o, "general.file_type", ftype);
}

int mu__gguf_out_open(mu__gguf_out_t *o, const char *path, const mu__gguf_t *g,
                      uint32_t ftype, char *err, size_t el)
{
	int fd, rc;

	memset(o, 0, sizeof(*o));
	o->align = g->alignment ? g->alignment : 32;
	if ((o->path = mu__malloc(strlen(path) + 1)) == NULL)
		return MU_ENOMEM;
	memcpy(o->path, path, strlen(path) + 1);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (fd < 0 || (o->f = fdopen(fd, "wb")) == NULL) {
		rc = -errno;
		snprintf(err, el, "cannot create %s: %s", path, strerror(errno));
		if (fd >= 0) {
			close(fd);
			unlink(path);
		}
		mu__free(o->path);
		memset(o, 0, sizeof(*o));
		return rc;
	}
	if ((rc = put_head(o, g, ftype)) != 0)
		return mu__gguf_out_close(o, rc, err, el);
	return 0;
}

int mu__gguf_out_tensor(mu__gguf_out_t *o, const mu__gguf_tensor_t *t, uint32_t type,
                        uint64_t bytes)
{
	int rc = put_str(o, t->name, strlen(t->name));

	if (rc == 0)
		rc = put32(o, t->n_dims);
	for (uint32_t d = 0; rc == 0 && d < t->n_dims; d++)
		rc = put64(o, t->ne[d]);
	if (rc == 0 && (rc = put32(o, type)) == 0)
		rc = put64(o, o->off);
	o->off += (bytes + o->align - 1) / o->align * o->align;
	return rc;
}

int mu__gguf_out_pad(mu__gguf_out_t *o)
{
	static const unsigned char zero[256];
	uint64_t n = (o->align - o->pos % o->align) % o->align;
	int rc = 0;

	while (rc == 0 && n > 0) {
		size_t k = n < sizeof(zero) ? (size_t)n : sizeof(zero);

		rc = put(o, zero, k);
		n -= k;
	}
	return rc;
}

int mu__gguf_out_begin_data(mu__gguf_out_t *o)
{
	return mu__gguf_out_pad(o);
}

int mu__gguf_out_data(mu__gguf_out_t *o, const void *p, size_t n)
{
	return put(o, p, n);
}

int mu__gguf_out_close(mu__gguf_out_t *o, int rc, char *err, size_t el)
{
	if (o->f == NULL)
		return rc;
	if (fflush(o->f) != 0 && rc == 0)
		rc = errno ? -errno : -EIO;
	if (fclose(o->f) != 0 && rc == 0)
		rc = errno ? -errno : -EIO;
	if (rc != 0) {
		if (err[0] == '\0')
			snprintf(err, el, "cannot write %s: %s", o->path, mu_strerror(rc));
		unlink(o->path);
	}
	mu__free(o->path);
	memset(o, 0, sizeof(*o));
	return rc;
}
