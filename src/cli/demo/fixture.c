/* SPDX-License-Identifier: MIT */
/*
 * Generated models and inputs, for `muster model gen|input`, the demo,
 * the benchmarks and the tests: an MLP of gemm + activation layers with
 * seeded pseudo-random weights, written through the public streaming
 * safetensors writer a row at a time, so a model of many GiB is made
 * without holding more than one row; and random inputs. Written on the
 * public API alone (include/muster/model.h), as any program would be.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "muster/model.h"
#include "core/buf_int.h"
#include "cli/demo/fixture.h"

/* The largest model.json a model may have (what mu_model_open reads). */
#define GRAPH_MAX_BYTES (64u << 20)

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

static int check_mlp(int layers, uint64_t batch, const char *act, char *err, size_t el)
{
	static const char *const acts[] = {"relu", "gelu", "tanh", "sigmoid", "silu"};

	if (layers < 1 || layers > 100000 || batch < 1) {
		snprintf(err, el, "an MLP needs 1 to 100000 layers and a batch of at least 1");
		return MU_EARG;
	}
	for (size_t i = 0; i < sizeof(acts) / sizeof(acts[0]); i++)
		if (strcmp(act, acts[i]) == 0)
			return 0;
	snprintf(err, el, "unknown activation %s (relu, gelu, tanh, sigmoid, silu)", act);
	return MU_EARG;
}

/* model.json: x -> fc0 -> act0 -> ... -> fc{layers-1} -> y. */
static int describe_mlp(mu__buf_t *g, const uint64_t *widths, int layers, uint64_t batch,
                        const char *act)
{
	int rc = mu__buf_printf(g, "{\"format\": \"muster-graph\", \"version\": 1,\n"
	                        " \"inputs\": [{\"name\": \"x\", \"shape\": [%llu, %llu]}],\n"
	                        " \"outputs\": [\"y\"],\n \"nodes\": [\n",
	                        (unsigned long long)batch, (unsigned long long)widths[0]);

	for (int i = 0; rc == 0 && i < layers; i++) {
		char in[32], out[32];

		snprintf(in, sizeof(in), i == 0 ? "x" : "a%d", i - 1);
		snprintf(out, sizeof(out), i == layers - 1 ? "y" : "h%d", i);
		rc = mu__buf_printf(g, "  {\"name\": \"fc%d\", \"op\": \"gemm\", \"inputs\": [\"%s\", "
		                    "\"fc%d.weight\", \"fc%d.bias\"], \"outputs\": [\"%s\"], "
		                    "\"attrs\": {\"transB\": 1}},\n", i, in, i, i, out);
		if (rc == 0 && i < layers - 1)
			rc = mu__buf_printf(g, "  {\"name\": \"act%d\", \"op\": \"%s\", \"inputs\": "
			                    "[\"h%d\"], \"outputs\": [\"a%d\"]},\n", i, act, i, i);
	}
	if (rc == 0) {
		g->len -= 2; /* the last ",\n" */
		rc = mu__buf_appends(g, "\n ]}\n");
	}
	return rc;
}

static int write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	int rc;

	if (f == NULL)
		return -errno;
	rc = fwrite(p, 1, n, f) == n ? 0 : -EIO;
	if (fclose(f) != 0 && rc == 0)
		rc = -EIO;
	return rc;
}

static int write_graph(const char *dir, const uint64_t *widths, int layers, uint64_t batch,
                       const char *act, char *err, size_t el)
{
	char path[4096];
	mu__buf_t g;
	int rc;

	mu__buf_init(&g, GRAPH_MAX_BYTES);
	if ((rc = describe_mlp(&g, widths, layers, batch, act)) != 0) {
		snprintf(err, el, "the model is too large to describe");
	} else {
		snprintf(path, sizeof(path), "%s/model.json", dir);
		if ((rc = write_file(path, g.data, g.len)) != 0)
			snprintf(err, el, "cannot write %s: %s", path, mu_strerror(rc));
	}
	mu__buf_free(&g);
	return rc;
}

/* Open the weights file for PyTorch's Linear layout: per layer weight
 * [out, in], then bias [out]. */
static int open_weights(const char *path, const uint64_t *widths, int layers,
                        mu_safetensors_writer_t **w, char *err, size_t el)
{
	mu_safetensors_desc_t *d = calloc((size_t)layers * 2, sizeof(*d));
	uint64_t *dims = calloc((size_t)layers * 3, sizeof(*dims));
	char *names = calloc((size_t)layers * 2, 32);
	int rc = MU_ENOMEM;

	*w = NULL;
	if (d != NULL && dims != NULL && names != NULL) {
		for (int i = 0; i < layers; i++) {
			char *wn = names + (size_t)i * 64, *bn = wn + 32;

			dims[3 * i] = widths[i + 1];
			dims[3 * i + 1] = widths[i];
			dims[3 * i + 2] = widths[i + 1];
			snprintf(wn, 32, "fc%d.weight", i);
			snprintf(bn, 32, "fc%d.bias", i);
			d[2 * i] = (mu_safetensors_desc_t){wn, MU_DTYPE_F32, 2, &dims[3 * i]};
			d[2 * i + 1] = (mu_safetensors_desc_t){bn, MU_DTYPE_F32, 1, &dims[3 * i + 2]};
		}
		rc = mu_safetensors_writer_open(path, d, (size_t)layers * 2, w, NULL, 0);
		if (rc != 0)
			snprintf(err, el, "cannot write %s: %s", path, mu_strerror(rc));
	} else {
		snprintf(err, el, "out of memory");
	}
	free(d);
	free(dims);
	free(names);
	return rc;
}

/* Layer after layer, row after row: the seeded values in the order the
 * file holds them. */
static int put_weights(mu_safetensors_writer_t *w, const uint64_t *widths, int layers,
                       uint64_t seed)
{
	uint64_t s = seed;
	float *row = NULL;
	int rc = 0;

	for (int i = 0; rc == 0 && i < layers; i++) {
		uint64_t in = widths[i], out = widths[i + 1];
		/* scaled so activations keep their size through deep stacks */
		float scale = 1.0f / sqrtf((float)in);

		free(row);
		row = calloc(in > out ? in : out, sizeof(float));
		if (row == NULL) {
			rc = MU_ENOMEM;
			break;
		}
		for (uint64_t r = 0; rc == 0 && r < out; r++) {
			for (uint64_t k = 0; k < in; k++)
				row[k] = uniform(&s, scale);
			rc = mu_safetensors_writer_put(w, row, in);
		}
		for (uint64_t k = 0; rc == 0 && k < out; k++)
			row[k] = uniform(&s, scale);
		if (rc == 0)
			rc = mu_safetensors_writer_put(w, row, out);
	}
	free(row);
	return rc;
}

int cli_gen_mlp(const char *dir, const uint64_t *widths, int layers, uint64_t batch,
                const char *act, uint64_t seed, char *err, size_t el)
{
	char path[4096];
	mu_safetensors_writer_t *w = NULL;
	int rc, crc;

	if (err == NULL)
		el = 0;
	if ((rc = check_mlp(layers, batch, act, err, el)) != 0)
		return rc;
	if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
		rc = -errno;
		snprintf(err, el, "cannot create %s: %s", dir, strerror(errno));
		return rc;
	}
	if ((rc = write_graph(dir, widths, layers, batch, act, err, el)) != 0)
		return rc;
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	if ((rc = open_weights(path, widths, layers, &w, err, el)) != 0)
		return rc;
	rc = put_weights(w, widths, layers, seed);
	crc = mu_safetensors_writer_close(w);
	rc = rc != 0 ? rc : crc;
	if (rc != 0)
		snprintf(err, el, "cannot write %s: %s", path, mu_strerror(rc));
	return rc;
}

int cli_tensor_random(const char *name, uint32_t rank, const uint64_t *dims, uint64_t seed,
                      mu_tensor_t **out)
{
	uint64_t s = seed;
	int rc = mu_tensor_new(name, rank, dims, out);

	for (uint64_t i = 0; rc == 0 && i < (*out)->numel; i++)
		(*out)->data[i] = uniform(&s, 1.0f);
	return rc;
}

int cli_tensor_random_typed(const char *name, mu_dtype_t dtype, uint32_t rank,
                            const uint64_t *dims, uint64_t seed, mu_tensor_t **out)
{
	mu_tensor_t *f = NULL;
	int rc;

	if (dtype == MU_DTYPE_F32)
		return cli_tensor_random(name, rank, dims, seed, out);
	if (dtype != MU_DTYPE_F16 && dtype != MU_DTYPE_BF16 && dtype != MU_DTYPE_F64)
		return mu_tensor_new_typed(name, dtype, rank, dims, out); /* zeros */
	/* the F32 values, rounded to the dtype */
	*out = NULL;
	rc = cli_tensor_random(name, rank, dims, seed, &f);
	if (rc == 0)
		rc = mu_tensor_cast(f, dtype, out);
	mu_tensor_free(f);
	return rc;
}
