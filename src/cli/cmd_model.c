/* SPDX-License-Identifier: MIT */
/*
 * `muster model gen` writes a generated MLP to try splits with;
 * `muster model input` writes random inputs of the right shapes for any
 * model, so `muster run` has something to run on; `muster model quantize`
 * writes a GGUF checkpoint in another type (mu_gguf_quantize).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "muster/formats.h"
#include "muster/model.h"
#include "cli/cli_int.h"
#include "cli/demo/fixture.h"
#include "cli/progress_int.h"

static int parse_widths(const char *s, uint64_t *w, int max)
{
	char *copy = strdup(s), *save = NULL, *end;
	int n = 0;

	if (copy == NULL)
		return -1;
	for (char *t = strtok_r(copy, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
		long long v = strtoll(t, &end, 10);

		if (n == max || *end != '\0' || v < 1 || v > (1LL << 24)) {
			free(copy);
			return -1;
		}
		w[n++] = (uint64_t)v;
	}
	free(copy);
	return n;
}

static int model_gen(int argc, char **argv)
{
	const char *out = NULL, *widths = NULL, *size = NULL, *act = "relu";
	int layers = 8, batch = 1, seed = 1, npos, rc, n;
	uint64_t w[1025], bytes;
	char err[512] = "", b[32];
	cli_opt_t opts[] = {
		{"out", OPT_STR, &out, "DIR", "where to write model.json and model.safetensors"},
		{"widths", OPT_STR, &widths, "W0,W1,...", "layer widths from input to output (e.g. 784,512,512,10)"},
		{"size", OPT_STR, &size, "SIZE", "instead of --widths: square layers adding up to about SIZE of weights (e.g. 1G)"},
		{"layers", OPT_INT, &layers, "N", "with --size: how many layers (default 8)"},
		{"batch", OPT_INT, &batch, "B", "rows of the input x (default 1)"},
		{"act", OPT_STR, &act, "NAME", "activation between layers: relu (default), gelu, tanh, sigmoid, silu"},
		{"seed", OPT_INT, &seed, "S", "seed of the weights (default 1)"},
	};
	cli_cmd_t cmd = {
		"muster model gen --out DIR (--widths W0,W1,... | --size SIZE [--layers N]) [--batch B]",
		"Write a generated multi-layer perceptron with seeded random weights: a model\n"
		"to split, run and measure without downloading one. Weights are streamed to\n"
		"disk, so models far larger than memory can be made.",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 0, 0};

	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if (out == NULL || (widths == NULL) == (size == NULL) || batch < 1 || layers < 1 ||
	    layers > 1024) {
		fprintf(stderr, "muster model gen: needs --out DIR and one of --widths or --size (see --help)\n");
		return 2;
	}
	if (widths != NULL) {
		n = parse_widths(widths, w, 1025);
		if (n < 2) {
			fprintf(stderr, "muster model gen: --widths needs at least two widths from 1 to 2^24\n");
			return 2;
		}
		layers = n - 1;
	} else {
		uint64_t side;

		if (cli_parse_size(size, &bytes) != 0 || bytes < 64) {
			fprintf(stderr, "muster model gen: \"%s\" is not a size (try 256M or 1G)\n", size);
			return 2;
		}
		side = (uint64_t)sqrt((double)bytes / 4.0 / layers);
		for (int i = 0; i <= layers; i++)
			w[i] = side > 0 ? side : 1;
	}
	rc = cli_gen_mlp(out, w, layers, (uint64_t)batch, act, (uint64_t)seed, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "muster model gen: %s\n", err[0] != '\0' ? err : mu_strerror(rc));
		return 1;
	}
	bytes = 0;
	for (int i = 0; i < layers; i++)
		bytes += (w[i] * w[i + 1] + w[i + 1]) * 4;
	cli_bytes((double)bytes, b, sizeof(b));
	printf("wrote %s: %d layers, %s of weights, input x [%d, %" PRIu64 "], output y [%d, %" PRIu64 "]\n",
	       out, layers, b, batch, w[0], batch, w[layers]);
	return 0;
}

/* The model's inputs and their shapes, from its model.json. */
static int model_input(int argc, char **argv)
{
	const char *dir = NULL, *out = NULL;
	int seed = 1, npos, rc;
	char err[512] = "";
	mu_model_t *m = NULL;
	mu_tensor_list_t l;
	cli_opt_t opts[] = {
		{"model", OPT_STR, &dir, "DIR", "the model directory"},
		{"out", OPT_STR, &out, "FILE", "the safetensors file to write"},
		{"seed", OPT_INT, &seed, "S", "seed of the values (default 1)"},
	};
	cli_cmd_t cmd = {
		"muster model input --model DIR --out FILE [--seed S]",
		"Write random values in [-1, 1) for every input the model declares, with its\n"
		"declared shape and dtype (integer and BOOL inputs, token ids and masks, are\n"
		"zeros): an input file for `muster run --input FILE`.",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 0, 0};

	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if (dir == NULL || out == NULL) {
		fprintf(stderr, "muster model input: needs --model DIR and --out FILE\n");
		return 2;
	}
	rc = mu_model_open(dir, &m, err, sizeof(err));
	mu_tensor_list_init(&l);
	for (int i = 0; rc == 0 && i < mu_model_inputs(m); i++) {
		const char *name;
		uint32_t rank;
		uint64_t dims[MU_TENSOR_MAX_RANK];
		mu_tensor_t *t;

		mu_model_input(m, i, &name, &rank, dims);
		rc = cli_tensor_random_typed(name, mu_model_input_dtype(m, i), rank, dims,
		                             (uint64_t)seed + (uint64_t)i, &t);
		if (rc == 0 && (rc = mu_tensor_list_push(&l, t)) != 0)
			mu_tensor_free(t);
		if (rc != 0)
			snprintf(err, sizeof(err), "input %s: %s", name, mu_strerror(rc));
	}
	if (rc == 0 && (rc = mu_safetensors_write(out, &l)) != 0)
		snprintf(err, sizeof(err), "cannot write %s: %s", out, mu_strerror(rc));
	if (rc != 0)
		fprintf(stderr, "muster model input: %s\n", err[0] != '\0' ? err : mu_strerror(rc));
	else
		printf("wrote %s: %zu input%s\n", out, l.n, l.n == 1 ? "" : "s");
	mu_tensor_list_free(&l);
	mu_model_close(m);
	return rc == 0 ? 0 : 1;
}

static void print_summary(const char *out, const char *type, const mu_quant_summary_t *s)
{
	char a[32], b[32];

	cli_bytes((double)s->in_bytes, a, sizeof(a));
	cli_bytes((double)s->out_bytes, b, sizeof(b));
	printf("wrote %s (%s): %" PRIu64 " tensors, %s of tensor data from %s, %.2f bits per weight\n",
	       out, type, s->tensors, b, a,
	       s->elements ? 8.0 * (double)s->out_bytes / (double)s->elements : 0.0);
	for (int i = 0; i < s->ntypes; i++) {
		cli_bytes((double)s->type[i].bytes, b, sizeof(b));
		printf("  %-7s %5" PRIu64 " tensors %14" PRIu64 " weights %10s %6.2f bits per weight\n",
		       s->type[i].name, s->type[i].tensors, s->type[i].elements, b,
		       s->type[i].elements ? 8.0 * (double)s->type[i].bytes / (double)s->type[i].elements
		                           : 0.0);
	}
	if (s->fallbacks > 0)
		printf("  %d tensor%s with rows not a multiple of the type's block took another type\n",
		       s->fallbacks, s->fallbacks == 1 ? "" : "s");
}

static int model_quantize(int argc, char **argv)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int quiet = 0, threads = cpus > 0 ? (int)cpus : 1, npos, rc;
	char err[1024] = "", about[1200];
	mu_quant_summary_t sum;
	struct stat st;
	cli_opt_t opts[] = {
		{"threads", OPT_INT, &threads, "N", "quantizing threads (default: the machine's cores; "
		 "the file is the same for any N)"},
		{"quiet", OPT_FLAG, &quiet, NULL, "no progress line and no summary"},
	};
	cli_cmd_t cmd = {"muster model quantize IN OUT TYPE [--threads N] [--quiet]", about, opts,
	                 (int)(sizeof(opts) / sizeof(opts[0])), 3, 3};

	snprintf(about, sizeof(about),
	         "Write the GGUF checkpoint IN as OUT in file type TYPE, with llama.cpp's\n"
	         "per-tensor rules (attn_v, ffn_down, output... get more bits) and bytes\n"
	         "equal to llama.cpp's own quantizer's without an importance matrix. All\n"
	         "metadata and the tokenizer are kept. IN may be an HF directory\n"
	         "(LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,\n"
	         "Qwen3ForCausalLM, Phi3ForCausalLM; safetensors in\n"
	         "F32, F16 or BF16, one file or shards): OUT is then the file the GGUF\n"
	         "tools/llm_convert.py hf-to-gguf would make of it gives, with no file\n"
	         "between. OUT is written under a temporary name and renamed when\n"
	         "complete. docs/quantize.md has the rules.\n\n"
	         "TYPE: %s.",
	         mu_quant_types());
	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if (quiet)
		cli_progress_enable(0);
	if (stat(argv[0], &st) == 0 && S_ISDIR(st.st_mode))
		rc = mu_hf_quantize(argv[0], argv[1], argv[2], threads, &sum, err, sizeof(err));
	else
		rc = mu_gguf_quantize(argv[0], argv[1], argv[2], threads, &sum, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "muster model quantize: %s\n", err[0] != '\0' ? err : mu_strerror(rc));
		return rc == MU_EARG ? 2 : 1;
	}
	if (!quiet)
		print_summary(argv[1], argv[2], &sum);
	return 0;
}

int cmd_model(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "gen") == 0)
		return model_gen(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "input") == 0)
		return model_input(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "quantize") == 0)
		return model_quantize(argc - 1, argv + 1);
	fprintf(argc >= 2 && strcmp(argv[1], "--help") == 0 ? stdout : stderr,
	        "usage: muster model gen|input|quantize [options]   (muster model gen --help for more)\n\n"
	        "  gen       write a generated MLP with seeded random weights\n"
	        "  input     write random inputs of the right shapes for a model\n"
	        "  quantize  write a GGUF checkpoint in another type (Q4_K_M, Q8_0, ...)\n");
	return argc >= 2 && strcmp(argv[1], "--help") == 0 ? 0 : 2;
}
