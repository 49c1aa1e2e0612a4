/* SPDX-License-Identifier: MIT */
/*
 * Generated models and inputs, for demos, benchmarks and tests (not part
 * of the public API): an MLP of gemm + activation layers with seeded
 * pseudo-random weights, written to disk a row at a time, so a model of
 * many GiB is made without holding more than one row; and random inputs.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "graph/dtype_int.h"
#include "formats/safetensors_int.h"
#include "cli/demo/fixture.h"
#include "graph/graph_int.h"

static uint64_t next_rand(uint64_t *s)
{
	/* splitmix64: fast, seedable, the same on every host */
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform in [-scale, scale). */
static float uniform(uint64_t *s, float scale)
{
	return ((float)(next_rand(s) >> 40) / (float)(1 << 24) * 2.0f - 1.0f) * scale;
}

int mu__model_generate_mlp(const char *dir, const uint64_t *widths, int layers,
                          uint64_t batch, const char *act, uint64_t seed, char *err, size_t el)
{
	char path[4096], *names = NULL;
	mu__buf_t g;
	FILE *f;
	mu__st_desc_t *d = NULL;
	mu__st_writer_t w = {0};
	uint64_t s = seed, *dims = NULL;
	float *row = NULL;
	int rc = 0;

	if (err == NULL)
		el = 0;
	if (layers < 1 || layers > 100000 || batch < 1) {
		snprintf(err, el, "an MLP needs 1 to 100000 layers and a batch of at least 1");
		return MU_EARG;
	}
	if (strcmp(act, "relu") != 0 && strcmp(act, "gelu") != 0 && strcmp(act, "tanh") != 0 &&
	    strcmp(act, "sigmoid") != 0 && strcmp(act, "silu") != 0) {
		snprintf(err, el, "unknown activation %s (relu, gelu, tanh, sigmoid, silu)", act);
		return MU_EARG;
	}
	if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
		rc = -errno;
		snprintf(err, el, "cannot create %s: %s", dir, strerror(errno));
		return rc;
	}
	/* the graph */
	mu__buf_init(&g, MU_GRAPH_MAX_BYTES);
	rc = mu__buf_printf(&g, "{\"format\": \"muster-graph\", \"version\": 1,\n"
	                    " \"inputs\": [{\"name\": \"x\", \"shape\": [%llu, %llu]}],\n"
	                    " \"outputs\": [\"y\"],\n \"nodes\": [\n",
	                    (unsigned long long)batch, (unsigned long long)widths[0]);
	for (int i = 0; rc == 0 && i < layers; i++) {
		char in[32], out[32];

		snprintf(in, sizeof(in), i == 0 ? "x" : "a%d", i - 1);
		snprintf(out, sizeof(out), i == layers - 1 ? "y" : "h%d", i);
		rc = mu__buf_printf(&g, "  {\"name\": \"fc%d\", \"op\": \"gemm\", \"inputs\": [\"%s\", "
		                    "\"fc%d.weight\", \"fc%d.bias\"], \"outputs\": [\"%s\"], "
		                    "\"attrs\": {\"transB\": 1}},\n", i, in, i, i, out);
		if (rc == 0 && i < layers - 1)
			rc = mu__buf_printf(&g, "  {\"name\": \"act%d\", \"op\": \"%s\", \"inputs\": "
			                    "[\"h%d\"], \"outputs\": [\"a%d\"]},\n", i, act, i, i);
	}
	if (rc == 0) {
		g.len -= 2; /* the last ",\n" */
		rc = mu__buf_appends(&g, "\n ]}\n");
	}
	if (rc != 0) {
		snprintf(err, el, "the model is too large to describe");
		goto out;
	}
	snprintf(path, sizeof(path), "%s/model.json", dir);
	if ((f = fopen(path, "wb")) == NULL) {
		rc = -errno;
	} else {
		rc = fwrite(g.data, 1, g.len, f) == g.len ? 0 : -EIO;
		if (fclose(f) != 0 && rc == 0)
			rc = -EIO;
	}
	if (rc != 0) {
		snprintf(err, el, "cannot write %s: %s", path, mu_strerror(rc));
		goto out;
	}
	/* the weights: PyTorch's Linear layout, weight [out, in], then bias */
	d = mu__calloc((size_t)layers * 2, sizeof(*d));
	dims = mu__calloc((size_t)layers * 3, sizeof(*dims));
	names = mu__calloc((size_t)layers * 2, 32);
	if (d == NULL || dims == NULL || names == NULL) {
		rc = MU_ENOMEM;
		snprintf(err, el, "out of memory");
		goto out;
	}
	for (int i = 0; i < layers; i++) {
		char *wn = names + (size_t)i * 64, *bn = wn + 32;

		dims[3 * i] = widths[i + 1];
		dims[3 * i + 1] = widths[i];
		dims[3 * i + 2] = widths[i + 1];
		snprintf(wn, 32, "fc%d.weight", i);
		snprintf(bn, 32, "fc%d.bias", i);
		d[2 * i] = (mu__st_desc_t){wn, MU_DTYPE_F32, 2, &dims[3 * i]};
		d[2 * i + 1] = (mu__st_desc_t){bn, MU_DTYPE_F32, 1, &dims[3 * i + 2]};
	}
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	rc = mu__st_writer_open(&w, path, d, (size_t)layers * 2);
	for (int i = 0; rc == 0 && i < layers; i++) {
		uint64_t in = widths[i], out = widths[i + 1];
		/* scaled so activations keep their size through deep stacks */
		float scale = 1.0f / sqrtf((float)in);

		mu__free(row);
		row = mu__calloc(in > out ? in : out, sizeof(float));
		if (row == NULL) {
			rc = MU_ENOMEM;
			break;
		}
		for (uint64_t r = 0; rc == 0 && r < out; r++) {
			for (uint64_t k = 0; k < in; k++)
				row[k] = uniform(&s, scale);
			rc = mu__st_writer_put(&w, row, in, sizeof(float));
		}
		for (uint64_t k = 0; rc == 0 && k < out; k++)
			row[k] = uniform(&s, scale);
		if (rc == 0)
			rc = mu__st_writer_put(&w, row, out, sizeof(float));
	}
	if (w.f != NULL) {
		int crc = mu__st_writer_close(&w);

		rc = rc != 0 ? rc : crc;
	}
	if (rc != 0)
		snprintf(err, el, "cannot write %s: %s", path, mu_strerror(rc));
out:
	mu__free(row);
	mu__free(d);
	mu__free(dims);
	mu__free(names);
	mu__buf_free(&g);
	return rc;
}

int mu__tensor_random_typed(const char *name, mu_dtype_t dtype, uint32_t rank,
                           const uint64_t *dims, uint64_t seed, mu_tensor_t **out)
{
	mu_tensor_t *f = NULL;
	int rc;

	if (dtype == MU_DTYPE_F32)
		return mu__tensor_random(name, rank, dims, seed, out);
	rc = mu_tensor_new_typed(name, dtype, rank, dims, out);
	if (rc == 0 && mu__dt_is_float(dtype)) {
		rc = mu__tensor_random(name, rank, dims, seed, &f);
		if (rc == 0)
			mu__convert(MU_DTYPE_F32, f->raw, dtype, (*out)->raw, f->numel);
		mu_tensor_free(f);
		if (rc != 0) {
			mu_tensor_free(*out);
			*out = NULL;
		}
	}
	return rc;
}

int mu__tensor_random(const char *name, uint32_t rank, const uint64_t *dims, uint64_t seed,
                     mu_tensor_t **out)
{
	uint64_t s = seed;
	int rc = mu_tensor_new(name, rank, dims, out);

	for (uint64_t i = 0; rc == 0 && i < (*out)->numel; i++)
		(*out)->data[i] = uniform(&s, 1.0f);
	return rc;
}
