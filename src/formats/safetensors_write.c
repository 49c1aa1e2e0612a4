/* SPDX-License-Identifier: MIT */
/*
 * The one safetensors writer: a header for tensors described up front,
 * then their data streamed in order, so a file larger than memory (a
 * generated model, pipeline/gen.c) is written a row at a time; and
 * mu__st_write, the same for a list of tensors in memory. Reading is
 * safetensors.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "muster/tensor.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/endian_int.h"
#include "core/json_int.h"
#include "formats/safetensors_int.h"

/* {"NAME":{"dtype":"F32","shape":[..],"data_offsets":[b,e]},...} padded
 * with spaces so the data area starts 8-aligned. *total: the data bytes. */
static int header(mu__buf_t *h, const mu__st_desc_t *d, size_t n, uint64_t *total)
{
	uint64_t off = 0;
	int rc = mu__buf_appendc(h, '{');

	for (size_t i = 0; rc == 0 && i < n; i++) {
		uint64_t numel = 1, bytes;

		for (uint32_t k = 0; k < d[i].rank; k++)
			numel *= d[i].dims[k];
		bytes = numel * mu_dtype_size((int)d[i].dtype);
		rc = mu__buf_printf(h, "%s", i ? "," : "");
		if (rc == 0)
			rc = mu__json_dump_string(h, d[i].name);
		if (rc == 0)
			rc = mu__buf_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", mu_dtype_name((int)d[i].dtype));
		for (uint32_t k = 0; rc == 0 && k < d[i].rank; k++)
			rc = mu__buf_printf(h, "%s%llu", k ? "," : "", (unsigned long long)d[i].dims[k]);
		if (rc == 0)
			rc = mu__buf_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
			                    (unsigned long long)(off + bytes));
		off += bytes;
	}
	if (rc == 0)
		rc = mu__buf_appendc(h, '}');
	while (rc == 0 && h->len % 8 != 0)
		rc = mu__buf_appendc(h, ' ');
	*total = off;
	return rc;
}

int mu__st_writer_open(mu__st_writer_t *w, const char *path, const mu__st_desc_t *d, size_t n)
{
	unsigned char len[8];
	mu__buf_t h;
	int rc;

	memset(w, 0, sizeof(*w));
	for (size_t i = 0; i < n; i++)
		if (mu_dtype_size((int)d[i].dtype) == 0 || d[i].rank > MU_TENSOR_MAX_RANK)
			return MU_EARG;
	mu__buf_init(&h, MU_ST_MAX_HEADER);
	rc = header(&h, d, n, &w->left);
	if (rc == 0 && (w->f = fopen(path, "wb")) == NULL)
		rc = -errno;
	if (rc == 0) {
		mu_le64_put(len, h.len);
		if (fwrite(len, 1, 8, w->f) != 8 || fwrite(h.data, 1, h.len, w->f) != h.len)
			rc = -EIO;
	}
	mu__buf_free(&h);
	if (rc != 0 && w->f != NULL) {
		fclose(w->f);
		w->f = NULL;
	}
	return rc;
}

int mu__st_writer_put(mu__st_writer_t *w, const void *p, uint64_t count, size_t width)
{
	const unsigned char *s = p;

	if (w->f == NULL || w->rc != 0)
		return w->f == NULL ? MU_EARG : w->rc;
	if (count > w->left / width) /* more than the header announced */
		return w->rc = MU_EARG;
	w->left -= count * width;
#if MU_BIG_ENDIAN_HOST
	for (uint64_t k = 0; k < count; k++) {
		unsigned char b[8];

		for (size_t j = 0; j < width; j++) /* host order to little-endian */
			b[j] = s[k * width + width - 1 - j];
		if (fwrite(b, 1, width, w->f) != width)
			return w->rc = -EIO;
	}
#else
	if (count > 0 && fwrite(s, width, count, w->f) != count)
		return w->rc = -EIO;
#endif
	return 0;
}

int mu__st_writer_close(mu__st_writer_t *w)
{
	int rc = w->rc;

	if (w->f == NULL)
		return rc != 0 ? rc : MU_EARG;
	if (rc == 0 && w->left != 0) /* short of what the header announced */
		rc = -EIO;
	if (fclose(w->f) != 0 && rc == 0)
		rc = -EIO;
	w->f = NULL;
	return rc;
}

int mu__st_write(const char *path, const mu_tensor_list_t *l)
{
	mu__st_desc_t *d = mu__calloc(l->n + 1, sizeof(*d));
	mu__st_writer_t w;
	int rc;

	if (d == NULL)
		return MU_ENOMEM;
	for (size_t i = 0; i < l->n; i++)
		d[i] = (mu__st_desc_t){l->t[i]->name, l->t[i]->dtype, l->t[i]->rank, l->t[i]->dims};
	rc = mu__st_writer_open(&w, path, d, l->n);
	mu__free(d);
	for (size_t i = 0; rc == 0 && i < l->n; i++)
		rc = mu__st_writer_put(&w, l->t[i]->raw, l->t[i]->numel,
		                       mu_dtype_size((int)l->t[i]->dtype));
	if (w.f != NULL) {
		int crc = mu__st_writer_close(&w);

		rc = rc != 0 ? rc : crc;
	}
	return rc;
}
