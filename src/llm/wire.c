/* SPDX-License-Identifier: MIT */
/*
 * A decoder's description as it travels to a device that streams its
 * weights: the configuration as JSON (every number range-checked on the
 * way in), each tensor's SHA-256 (computed once per checkpoint and kept
 * beside it), the checkpoint's digest, and a source assembled from tensor
 * files (a device's cache) instead of a checkpoint.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/error_int.h"
#include "core/json_int.h"
#include "core/proc_int.h"
#include "core/progress_int.h"
#include "core/sha256_int.h"
#include "llm/arch_int.h"
#include "llm/llm_int.h"

#define HASHES_VERSION 1

int mu__hpf_travels(const mu__hpf_t *f, const mu__llm_hp_t *h)
{
	return f->wire != NULL &&
	       (!(f->flags & MU__HPF_WIRE_NEW) || mu__hpf_get(f, h) != f->def);
}

uint64_t mu__llm_digest(const mu__llm_src_t *src)
{
	const mu__llm_hp_t *h = &src->hp;
	uint64_t d = 0xcbf29ce484222325ULL;
	const unsigned char *p;
	const mu__hpf_t *f;
	size_t i, k;
	int pass;

	/* FNV-1a over the configuration (the architecture's name, then every
	 * integer field that travels as an int32, then every number as a
	 * float, each in the table's order), then every tensor's name, type
	 * and shape: what a stage can tell without reading another's weights */
#define MIX(ptr, n)                                                     \
	for (p = (const unsigned char *)(ptr), k = 0; k < (n); k++)         \
		d = (d ^ p[k]) * 0x100000001b3ULL
	MIX(h->arch, strlen(h->arch));
	for (pass = 0; pass < 2; pass++)
		for (i = 0; (f = mu__hpf_at(i)) != NULL; i++) {
			int32_t iv = (int32_t)mu__hpf_get(f, h);
			float fv = (float)mu__hpf_get(f, h);

			if (!mu__hpf_travels(f, h) || (f->kind == MU__HPK_NUM) != pass)
				continue;
			if (pass == 0)
				MIX(&iv, sizeof(iv));
			else
				MIX(&fv, sizeof(fv));
		}
	for (i = 0; i < src->nt; i++) {
		int64_t shape[3] = {src->t[i].m.type, src->t[i].m.rows, src->t[i].m.cols};

		MIX(src->t[i].name, strlen(src->t[i].name));
		MIX(shape, sizeof(shape));
	}
#undef MIX
	return d;
}

void mu__hpf_to_json(const mu__hpf_t *f, const mu__llm_hp_t *h, cJSON *o)
{
	if (!mu__hpf_travels(f, h))
		return;
	if (f->kind == MU__HPK_BOOL)
		cJSON_AddBoolToObject(o, f->wire, mu__hpf_get(f, h) != 0);
	else
		cJSON_AddNumberToObject(o, f->wire, mu__hpf_get(f, h));
}

int mu__llm_hp_to_json(const mu__llm_hp_t *h, cJSON *o)
{
	size_t i;

	cJSON_AddStringToObject(o, "arch", h->arch);
	for (i = 0; mu__hpf_at(i) != NULL; i++)
		mu__hpf_to_json(mu__hpf_at(i), h, o);
	return 0;
}

int mu__hpf_from_json(const mu__hpf_t *f, const cJSON *o, mu__llm_hp_t *h, char *why,
                      size_t wl)
{
	const cJSON *v;
	double x;

	if (f->wire == NULL) { /* bos, eos: the tokenizer's business */
		mu__hpf_set(f, h, f->def);
		return 0;
	}
	v = cJSON_GetObjectItemCaseSensitive(o, f->wire);
	if (f->kind == MU__HPK_BOOL) {
		mu__hpf_set(f, h, v == NULL && (f->flags & MU__HPF_WIRE_NEW) ? f->def
		                                                             : cJSON_IsTrue(v));
		return 0;
	}
	if (v == NULL && (f->flags & MU__HPF_WIRE_NEW)) {
		mu__hpf_set(f, h, f->def);
		return 0;
	}
	if (mu__json_double(v, -1e30, 1e30, &x) != 0 || !mu__hpf_in_range(f, x) ||
	    (f->kind != MU__HPK_NUM && x != (double)(int32_t)x))
		return mu__why(why, wl, MU_EPROTO, "config.%s is missing or out of range", f->wire);
	mu__hpf_set(f, h, x);
	return 0;
}

int mu__llm_hp_from_json(const cJSON *o, mu__llm_hp_t *h, char *why, size_t wl)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "arch");
	const mu__hpf_t *f;
	size_t i;
	int rc;

	memset(h, 0, sizeof(*h));
	if (!cJSON_IsString(a) || strlen(a->valuestring) >= sizeof(h->arch))
		return mu__why(why, wl, MU_EPROTO, "config.arch is missing");
	memcpy(h->arch, a->valuestring, strlen(a->valuestring) + 1);
	for (i = 0; (f = mu__hpf_at(i)) != NULL; i++)
		if ((rc = mu__hpf_from_json(f, o, h, why, wl)) != 0)
			return rc;
	return 0;
}

/* Where a checkpoint's hashes are kept: beside the file, or in the HF
 * directory. */
static void hashes_path(const mu__llm_src_t *src, char *out, size_t n)
{
	if (src->fmt == MU__FMT_HF)
		snprintf(out, n, "%s/muster-sha256.json", src->path);
	else
		snprintf(out, n, "%s.muster-sha256.json", src->path);
}

/* The files as they are now: a cache of hashes is valid only for them. */
static cJSON *files_json(const mu__llm_src_t *src)
{
	cJSON *a = cJSON_CreateArray();
	const char *p;
	uint64_t size;
	int64_t mt;
	size_t i, n = mu__llm_src_files(src, 0, &p, &size, &mt);

	for (i = 0; a != NULL && i < n; i++) {
		cJSON *f = cJSON_CreateObject();

		mu__llm_src_files(src, i, &p, &size, &mt);
		cJSON_AddNumberToObject(f, "size", (double)size);
		cJSON_AddNumberToObject(f, "mtime_ns", (double)mt);
		cJSON_AddItemToArray(a, f);
	}
	return a;
}

/* Is tensor i one the caller asked hashes of (first < 0: all)? */
static int wanted(const mu__llm_src_t *src, size_t i, int first, int last)
{
	return first < 0 || mu__llm_tensor_in(src, i, first, last);
}

/* Take what the cache holds when it matches the files (hex[i] stays ""
 * for a tensor it lacks); 1 when it held every wanted one. */
static int read_cached(const mu__llm_src_t *src, const char *path, int first, int last,
                       char (*hex)[MU_SHA256_HEX])
{
	cJSON *c = NULL, *now = files_json(src);
	const cJSON *t;
	mu__buf_t b;
	size_t i;
	int all = 0;

	if (mu__buf_read_file(&b, path, (size_t)64 << 20, NULL, 0) != 0) {
		cJSON_Delete(now);
		return 0;
	}
	if (mu__json_parse(b.data != NULL ? b.data : "", b.len, &c) == 0 &&
	    mu__json_is_int(cJSON_GetObjectItemCaseSensitive(c, "version"), HASHES_VERSION,
	                    HASHES_VERSION) &&
	    cJSON_Compare(cJSON_GetObjectItemCaseSensitive(c, "files"), now, 1)) {
		t = cJSON_GetObjectItemCaseSensitive(c, "tensors");
		for (all = 1, i = 0; i < src->nt; i++) {
			const cJSON *h = cJSON_GetObjectItemCaseSensitive(t, src->t[i].name);

			if (cJSON_IsString(h) && strlen(h->valuestring) == MU_SHA256_HEX - 1 &&
			    strspn(h->valuestring, "0123456789abcdef") == MU_SHA256_HEX - 1)
				memcpy(hex[i], h->valuestring, MU_SHA256_HEX);
			else if (wanted(src, i, first, last))
				all = 0;
		}
	}
	mu__buf_free(&b);
	cJSON_Delete(c);
	cJSON_Delete(now);
	return all;
}

/* Keep the hashes for next time; a checkpoint on read-only storage is
 * hashed each run instead. */
static void write_cache(const mu__llm_src_t *src, const char *path,
                        const char (*hex)[MU_SHA256_HEX])
{
	cJSON *c = cJSON_CreateObject(), *t;
	char tmp[4300], *text;
	FILE *f;
	size_t i;

	cJSON_AddNumberToObject(c, "version", HASHES_VERSION);
	cJSON_AddItemToObject(c, "files", files_json(src));
	t = cJSON_AddObjectToObject(c, "tensors");
	for (i = 0; t != NULL && i < src->nt; i++)
		if (hex[i][0] != '\0') /* a stage hashes only its own tensors */
			cJSON_AddStringToObject(t, src->t[i].name, hex[i]);
	text = cJSON_PrintUnformatted(c);
	cJSON_Delete(c);
	snprintf(tmp, sizeof(tmp), "%.4200s.%ld.tmp", path, (long)getpid());
	if (text != NULL && (f = fopen(tmp, "wb")) != NULL) {
		int ok = fputs(text, f) >= 0;

		if (fclose(f) == 0 && ok && rename(tmp, path) == 0)
			tmp[0] = '\0';
		if (tmp[0] != '\0')
			unlink(tmp);
	}
	cJSON_free(text);
}

/* Tensor t's SHA-256, its mapped pages let go of piece by piece: hashing
 * a checkpoint reads all of it, and must not leave it all resident (a
 * coordinator holds no weights). */
static int hash_tensor(const mu__llm_tensor_t *t, char *hex)
{
	const size_t piece = (size_t)16 << 20;
	const unsigned char *p = t->m.data;
	mu__sha256_t *h = NULL;
	uint64_t off;
	int rc = mu__sha256_new(&h);

	for (off = 0; rc == 0 && off < t->bytes; off += piece) {
		size_t n = t->bytes - off < piece ? (size_t)(t->bytes - off) : piece;

		rc = mu__sha256_update(h, p + off, n);
		mu__pages_release(p + off, n);
	}
	if (rc != 0) {
		mu__sha256_free(h);
		return rc;
	}
	return mu__sha256_final(h, hex);
}

int mu__llm_src_hashes(const mu__llm_src_t *src, int first, int last,
                       char (*hex)[MU_SHA256_HEX], int *computed, char *why, size_t wl)
{
	char path[4200];
	const char *base;
	uint64_t total = 0, done = 0;
	mu__progress_t pr;
	size_t i;
	int rc = 0;

	hashes_path(src, path, sizeof(path));
	*computed = 0;
	for (i = 0; i < src->nt; i++)
		hex[i][0] = '\0';
	if (read_cached(src, path, first, last, hex))
		return 0;
	/* reading a large checkpoint from disk is the slow part: show it */
	for (i = 0; i < src->nt; i++)
		if (wanted(src, i, first, last) && hex[i][0] == '\0')
			total += src->t[i].bytes;
	base = strrchr(src->path, '/');
	mu__progress_start(&pr, total, "hashing %s", base != NULL ? base + 1 : src->path);
	for (i = 0; rc == 0 && i < src->nt; i++) {
		if (!wanted(src, i, first, last) || hex[i][0] != '\0')
			continue;
		if ((rc = hash_tensor(&src->t[i], hex[i])) != 0)
			rc = mu__why(why, wl, rc, "cannot hash tensor %s", src->t[i].name);
		done += src->t[i].bytes;
		mu__progress_bytes(&pr, done);
	}
	mu__progress_end(&pr);
	if (rc != 0)
		return rc;
	*computed = 1;
	write_cache(src, path, hex);
	return 0;
}

/* A tensor's name and hash, sorted by name for the weights digest. */
typedef struct {
	const char *name, *hex;
} named_hash_t;

static int by_name(const void *a, const void *b)
{
	return strcmp(((const named_hash_t *)a)->name, ((const named_hash_t *)b)->name);
}

int mu__llm_weights_digest(const mu__llm_src_t *src, const char (*hex)[MU_SHA256_HEX],
                           int first, int last, char *out)
{
	mu__sha256_t *h = NULL;
	named_hash_t *v;
	size_t n = 0, i;
	int rc;

	out[0] = '\0';
	if ((v = mu__calloc(src->nt + 1, sizeof(*v))) == NULL)
		return MU_ENOMEM;
	for (i = 0; i < src->nt; i++)
		if (mu__llm_tensor_in(src, i, first, last))
			v[n++] = (named_hash_t){src->t[i].name, hex[i]};
	/* by name: the same tensors give the same digest in any file's order */
	qsort(v, n, sizeof(*v), by_name);
	rc = mu__sha256_new(&h);
	for (i = 0; rc == 0 && i < n; i++) {
		if (strlen(v[i].hex) != MU_SHA256_HEX - 1)
			rc = MU_EARG; /* a tensor that was not hashed */
		else if ((rc = mu__sha256_update(h, v[i].name, strlen(v[i].name) + 1)) == 0 &&
		         (rc = mu__sha256_update(h, v[i].hex, MU_SHA256_HEX - 1)) == 0)
			rc = mu__sha256_update(h, "\n", 1);
	}
	if (rc == 0) {
		rc = mu__sha256_final(h, out);
		h = NULL;
	}
	mu__sha256_free(h);
	mu__free(v);
	return rc;
}

int mu__llm_src_from_files(const mu__llm_hp_t *hp, const mu__llm_file_t *files, size_t n,
                           int first, int last, mu__llm_src_t *src, char *why, size_t wl)
{
	const unsigned char *base;
	size_t i, len;
	int rc = 0;

	memset(src, 0, sizeof(*src));
	src->fmt = MU__FMT_GGUF; /* nothing format-specific is asked of it */
	src->hp = *hp;
	if ((src->path = mu__strdup("(streamed)")) == NULL)
		return MU_ENOMEM;
	for (i = 0; rc == 0 && i < n; i++) {
		const mu__llm_file_t *f = &files[i];
		uint64_t want = (uint64_t)f->rows * mu__wtype_row_bytes(f->type, f->cols);

		if (want == 0)
			rc = mu__why(why, wl, MU_EPROTO, "tensor %.100s: a shape its type cannot hold",
			             f->name);
		else if ((rc = mu__llm_map_file(f->path, src, &base, &len, why, wl)) == 0 &&
		         len != want)
			rc = mu__why(why, wl, MU_EPROTO, "tensor %.100s: %zu bytes in %.200s, its shape "
			             "needs %llu", f->name, len, f->path, (unsigned long long)want);
		if (rc == 0 && (rc = mu__llm_add_tensor(src, f->name, f->type, base, f->rows,
		                                        f->cols)) == MU_EARG)
			rc = mu__why(why, wl, MU_EPROTO, "tensor name %.100s is too long", f->name);
	}
	if (rc == 0)
		rc = mu__llm_check_range(src, first, last, why, wl);
	if (rc != 0)
		mu__llm_src_free(src);
	return rc;
}
