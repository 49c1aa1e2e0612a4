/* SPDX-License-Identifier: MIT */
/*
 * The public streaming safetensors writer (include/muster/model.h): the
 * descriptions checked, then formats/safetensors_write.c's writer, with
 * the tensor being filled tracked here so a put counts elements of its
 * dtype and never runs into the next tensor. The bytes on disk are the
 * formats writer's; this file adds only the checks and the bookkeeping.
 */
#include <errno.h>
#include <stdio.h>

#include "muster/model.h"
#include "core/alloc_int.h"
#include "formats/safetensors_int.h"

struct mu_safetensors_writer_s {
	mu__st_writer_t w;
	size_t n, cur;      /* tensors; the one being filled (n: all full) */
	uint64_t *left;     /* elements of tensor i still to come */
	size_t *width;      /* bytes per element of tensor i */
};

/* numel of a description, or MU_ETOOBIG when it (in bytes) overflows. */
static int desc_numel(const mu_safetensors_desc_t *d, uint64_t *numel)
{
	uint64_t n = 1, es = mu_dtype_size((int)d->dtype);

	for (uint32_t k = 0; k < d->rank; k++) {
		if (d->dims[k] != 0 && n > UINT64_MAX / d->dims[k])
			return MU_ETOOBIG;
		n *= d->dims[k];
	}
	if (n > UINT64_MAX / es)
		return MU_ETOOBIG;
	*numel = n;
	return 0;
}

/* Check d[0..n) and fill in what each tensor holds; the total must not
 * overflow either. */
static int describe(mu_safetensors_writer_t *w, const mu_safetensors_desc_t *d, size_t n,
                    size_t *bad)
{
	uint64_t total = 0;

	for (size_t i = 0; i < n; i++) {
		int rc;

		*bad = i;
		if (d[i].name == NULL || mu_dtype_size((int)d[i].dtype) == 0 ||
		    d[i].rank > MU_TENSOR_MAX_RANK || (d[i].rank > 0 && d[i].dims == NULL))
			return MU_EARG;
		if ((rc = desc_numel(&d[i], &w->left[i])) != 0)
			return rc;
		w->width[i] = mu_dtype_size((int)d[i].dtype);
		if (w->left[i] * w->width[i] > UINT64_MAX - total)
			return MU_ETOOBIG;
		total += w->left[i] * w->width[i];
	}
	return 0;
}

/* Move cur past every tensor that is complete (empty ones included). */
static void advance(mu_safetensors_writer_t *w)
{
	while (w->cur < w->n && w->left[w->cur] == 0)
		w->cur++;
}

static void writer_free(mu_safetensors_writer_t *w)
{
	mu__free(w->left);
	mu__free(w->width);
	mu__free(w);
}

int mu_safetensors_writer_open(const char *path, const mu_safetensors_desc_t *d, size_t n,
                               mu_safetensors_writer_t **out, char *err, size_t el)
{
	mu_safetensors_writer_t *w = mu__calloc(1, sizeof(*w));
	mu__st_desc_t *sd = NULL;
	size_t bad = 0;
	int rc = 0;

	if (err == NULL)
		el = 0;
	*out = NULL;
	if (w != NULL) {
		w->left = mu__calloc(n + 1, sizeof(*w->left));
		w->width = mu__calloc(n + 1, sizeof(*w->width));
		sd = mu__calloc(n + 1, sizeof(*sd));
	}
	if (w == NULL || w->left == NULL || w->width == NULL || sd == NULL) {
		rc = MU_ENOMEM;
		snprintf(err, el, "out of memory");
	} else if (path == NULL || (n > 0 && d == NULL)) {
		rc = MU_EARG;
		snprintf(err, el, "no path or no tensor descriptions");
	} else if ((rc = describe(w, d, n, &bad)) != 0) {
		snprintf(err, el, "tensor %zu (%.200s): %s", bad, d[bad].name ? d[bad].name : "no name",
		         rc == MU_EARG ? "no name, not a dtype, or a rank over 8 or without dims"
		                       : "its size overflows");
	}
	for (size_t i = 0; rc == 0 && i < n; i++)
		sd[i] = (mu__st_desc_t){d[i].name, d[i].dtype, d[i].rank, d[i].dims};
	if (rc == 0 && (rc = mu__st_writer_open(&w->w, path, sd, n)) != 0)
		snprintf(err, el, "%.300s: %s", path,
		         rc == MU_ETOOBIG ? "the header would be over 100 MiB" : mu_strerror(rc));
	mu__free(sd);
	if (rc != 0) {
		if (w != NULL)
			writer_free(w);
		return rc;
	}
	w->n = n;
	advance(w);
	*out = w;
	return 0;
}

int mu_safetensors_writer_put(mu_safetensors_writer_t *w, const void *data, uint64_t count)
{
	int rc;

	if (w == NULL)
		return MU_EARG;
	if (w->w.rc != 0)
		return w->w.rc;
	if (count == 0)
		return 0;
	if (w->cur == w->n || count > w->left[w->cur] || data == NULL)
		return MU_EARG; /* past the tensor: refused before anything is written */
	rc = mu__st_writer_put(&w->w, data, count, w->width[w->cur]);
	if (rc != 0)
		return rc;
	w->left[w->cur] -= count;
	advance(w);
	return 0;
}

int mu_safetensors_writer_close(mu_safetensors_writer_t *w)
{
	int rc;

	if (w == NULL)
		return 0;
	rc = mu__st_writer_close(&w->w);
	writer_free(w);
	return rc;
}
