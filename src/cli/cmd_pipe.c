/* SPDX-License-Identifier: MIT */
/*
 * `muster plan` and `muster stage`: see how a model splits, and serve one
 * stage of it (`muster run`, which drives forwards through the stages, is
 * in cmd_run.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "muster/pipeline.h"
#include "cli/cli_int.h"
#include "core/log_int.h"
#include "cli/stage_serve_int.h"
#include "core/json_int.h"
#include "core/net_int.h"
#include "core/time_int.h"

/* ---- plan ---- */

static int parse_split(const char *by, mu_split_t *out)
{
	if (strcmp(by, "params") == 0)
		*out = MU_SPLIT_PARAMS;
	else if (strcmp(by, "flops") == 0)
		*out = MU_SPLIT_FLOPS;
	else
		return -1;
	return 0;
}

static void print_names(const char *const *v, int n, int max)
{
	for (int i = 0; i < n && i < max; i++)
		printf("%s%s", i ? "," : "", v[i]);
	if (n > max)
		printf(",+%d", n - max);
	if (n == 0)
		printf("-");
}

static cJSON *names_json(const char *const *v, int n)
{
	cJSON *a = cJSON_CreateArray();

	for (int i = 0; i < n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(v[i]));
	return a;
}

/* dev/budget: the device and its budget of each stage (NULL: no budgets). */
void cli_print_json(cJSON *o)
{
	char *text = cJSON_Print(o);

	printf("%s\n", text != NULL ? text : "null");
	cJSON_free(text);
	cJSON_Delete(o);
}

static void print_plan(const char *dir, const mu_model_t *m, const mu_plan_t *p, int json,
                       const int *dev, const uint64_t *budget)
{
	char b[32], total[32];

	if (json) {
		cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "stages");
		char hex[20];

		snprintf(hex, sizeof(hex), "%016" PRIx64, mu_model_digest(m));
		cJSON_AddStringToObject(o, "model", dir);
		cJSON_AddStringToObject(o, "digest", hex);
		cJSON_AddNumberToObject(o, "nodes", mu_model_nodes(m));
		cJSON_AddNumberToObject(o, "param_bytes", (double)mu_model_param_bytes(m));
		for (int i = 0; i < mu_plan_stages(p); i++) {
			mu_stage_info_t s;
			cJSON *x = cJSON_CreateObject();

			mu_plan_stage(p, i, &s);
			cJSON_AddNumberToObject(x, "index", i);
			if (dev != NULL) {
				cJSON_AddNumberToObject(x, "device", dev[i]);
				cJSON_AddNumberToObject(x, "budget", (double)budget[dev[i]]);
			}
			cJSON_AddNumberToObject(x, "first", s.first);
			cJSON_AddNumberToObject(x, "last", s.last);
			cJSON_AddItemToObject(x, "inputs", names_json(s.inputs, s.ninputs));
			cJSON_AddItemToObject(x, "outputs", names_json(s.outputs, s.noutputs));
			cJSON_AddItemToObject(x, "params", names_json(s.params, s.nparams));
			cJSON_AddNumberToObject(x, "param_bytes", (double)s.param_bytes);
			cJSON_AddNumberToObject(x, "flops", s.flops);
			cJSON_AddItemToArray(a, x);
		}
		cli_print_json(o);
		return;
	}
	cli_bytes((double)mu_model_param_bytes(m), total, sizeof(total));
	printf("model %s: %d nodes, %s of weights, %d stages\n\n", dir, mu_model_nodes(m), total,
	       mu_plan_stages(p));
	if (dev != NULL)
		printf("devices are numbered as --budgets lists them (0 first)\n\n");
	printf("%-6s ", "stage");
	if (dev != NULL)
		printf("%-18s ", "device (budget)");
	printf("%-11s %-12s %-7s %-10s %s\n", "nodes", "weights", "share", "MFLOP",
	       "takes -> hands on");
	for (int i = 0; i < mu_plan_stages(p); i++) {
		mu_stage_info_t s;
		char nodes[32];

		mu_plan_stage(p, i, &s);
		cli_bytes((double)s.param_bytes, b, sizeof(b));
		snprintf(nodes, sizeof(nodes), "%d..%d", s.first, s.last - 1);
		printf("%-6d ", i);
		if (dev != NULL) {
			char bb[32], d[48];

			cli_bytes((double)budget[dev[i]], bb, sizeof(bb));
			snprintf(d, sizeof(d), "%d (%s)", dev[i], bb);
			printf("%-18s ", d);
		}
		printf("%-11s %-12s %5.1f%%  %-10.3f ", nodes, b,
		       mu_model_param_bytes(m) ? 100.0 * (double)s.param_bytes / (double)mu_model_param_bytes(m) : 0,
		       s.flops / 1e6);
		print_names(s.inputs, s.ninputs, 4);
		printf(" -> ");
		print_names(s.outputs, s.noutputs, 4);
		printf("\n");
	}
}

int cmd_plan(int argc, char **argv)
{
	const char *dir = NULL, *by = "params", *budgets = NULL, *kvt = NULL;
	uint64_t b[256];
	int dev[256], nb = 0;
	int stages = 0, json = 0, npos, rc, ctx = 2048, seqs = 1;
	char err[1024] = "";
	mu_model_t *m;
	mu_plan_t *p = NULL;
	mu_split_t split;
	cli_opt_t opts[] = {
		{"model", OPT_STR, &dir, "PATH", "a graph model's directory (model.json, model.safetensors) or a decoder LLM checkpoint (a GGUF file, an HF directory or a llama2.c .bin)"},
		{"of", OPT_INT, &stages, "N", "cut into N stages"},
		{"by", OPT_STR, &by, "params|flops", "balance weight bytes (default) or estimated compute"},
		{"budgets", OPT_STR, &budgets, "SIZE,...", "instead of --of: fit devices of these memory budgets, in whichever order fits best (e.g. 512M,1G,1G)"},
		{"json", OPT_FLAG, &json, NULL, "print the plan as JSON (what `muster stage --plan` reads)"},
		{"ctx", OPT_INT, &ctx, "N", "an LLM: positions of each sequence's KV cache (default 2048)"},
		{"max-sequences", OPT_INT, &seqs, "N", "an LLM: sequences each stage keeps a KV cache for (default 1)"},
		{"kv-type", OPT_STR, &kvt, cli_kv_choices(), "an LLM: the KV cache's type, as `muster generate --kv-type` (default f16)"},
		CLI_ALIAS("stages", "of"), /* --stages is addresses everywhere else */
	};
	cli_cmd_t cmd = {
		"muster plan --model PATH (--of N | --budgets SIZE,...) [--by params|flops] [--json]",
		"Show how a model's graph is cut into contiguous stages: each stage's nodes,\n"
		"the weights it alone holds, and the named tensors it takes from earlier\n"
		"stages (or the input) and hands on. Stages never depend on later ones.\n"
		"\n"
		"For a decoder LLM checkpoint (GGUF, HF directory, llama2.c) it shows the\n"
		"layers each stage or device takes, with its weights and the KV cache of\n"
		"--max-sequences sequences of --ctx positions, as `muster generate --tracker`\n"
		"places them.",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 0, 0};

	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if (dir != NULL && cli_is_llm(dir) && (stages >= 1 || budgets != NULL) && ctx > 0 && seqs > 0)
		return cli_plan_llm(dir, stages, budgets, ctx, seqs, kvt, json);
	if (dir == NULL || (stages < 1 && budgets == NULL) || parse_split(by, &split) != 0) {
		fprintf(stderr, "muster plan: needs --model PATH and --of N >= 1 (or --budgets); "
		                "--by is params or flops\n");
		return 2;
	}
	rc = mu_model_open(dir, &m, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "muster plan: %s\n", err[0] != '\0' ? err : mu_strerror(rc));
		return 1;
	}
	if (budgets != NULL) {
		char *copy = strdup(budgets), *save = NULL;

		for (char *t = strtok_r(copy, ",", &save); t != NULL && nb < 256;
		     t = strtok_r(NULL, ",", &save))
			if (cli_parse_size(t, &b[nb++]) != 0) {
				fprintf(stderr, "muster plan: \"%s\" is not a size (try 512M or 2G)\n", t);
				free(copy);
				mu_model_close(m);
				return 2;
			}
		free(copy);
		rc = mu_plan_budgets(m, b, nb, &p, dev, err, sizeof(err));
	} else {
		rc = mu_plan_balanced(m, stages, split, &p, err, sizeof(err));
	}
	if (rc != 0)
		fprintf(stderr, "muster plan: %s\n", err[0] != '\0' ? err : mu_strerror(rc));
	else
		print_plan(dir, m, p, json, budgets != NULL ? dev : NULL, b);
	mu_plan_free(p);
	mu_model_close(m);
	return rc == 0 ? 0 : 1;
}

/* ---- stage ---- */

/* Stage i's node range from a `muster plan --json` file; *n gets the count. */
static int plan_range(const char *path, int i, int *n, int *first, int *last)
{
	FILE *f = fopen(path, "rb");
	char *text;
	long len;
	cJSON *o, *st, *x;
	int rc = -1;

	if (f == NULL)
		return -1;
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	text = len >= 0 && len < (64L << 20) ? malloc((size_t)len + 1) : NULL;
	if (text == NULL || fread(text, 1, (size_t)len, f) != (size_t)len) {
		free(text);
		fclose(f);
		return -1;
	}
	fclose(f);
	text[len] = '\0';
	o = cJSON_Parse(text);
	free(text);
	st = cJSON_GetObjectItemCaseSensitive(o, "stages");
	if (cJSON_IsArray(st) && i < cJSON_GetArraySize(st)) {
		*n = cJSON_GetArraySize(st);
		x = cJSON_GetArrayItem(st, i);
		if (mu__json_int(cJSON_GetObjectItemCaseSensitive(x, "first"), 0, INT_MAX, first) == 0 &&
		    mu__json_int(cJSON_GetObjectItemCaseSensitive(x, "last"), 0, INT_MAX, last) == 0)
			rc = 0;
	}
	cJSON_Delete(o);
	return rc;
}

/* The graph stage as it is served (stderr). */
static void announce_graph(mu_stage_t *s, int index, int of)
{
	cJSON *d = cJSON_Parse(mu_stage_describe(s));
	int nfirst = 0, nlast = 0;
	double res = 0, load_ms = 0;
	char rb[32];

	/* our own description: each number is there, in range */
	mu__json_int(cJSON_GetObjectItemCaseSensitive(d, "first"), 0, INT_MAX, &nfirst);
	mu__json_int(cJSON_GetObjectItemCaseSensitive(d, "last"), 0, INT_MAX, &nlast);
	mu__json_double(cJSON_GetObjectItemCaseSensitive(d, "resident_bytes"), 0, 1e300, &res);
	mu__json_double(cJSON_GetObjectItemCaseSensitive(d, "load_ms"), 0, 1e300, &load_ms);
	cli_bytes(res, rb, sizeof(rb));
	mu__log(MU_LOG_INFO, "stage", "muster stage %d/%d: nodes %d..%lld, %s of weights resident, loaded in %.0f ms",
	        index, of, nfirst, (long long)nlast - 1, rb, load_ms);
	cJSON_Delete(d);
}

int cmd_stage(int argc, char **argv)
{
	const char *dir = NULL, *plan = NULL;
	int index = -1, of = 0, npos, rc, first = -1, last = -1;
	cli_stage_args_t sa;
	mu_stage_t *s;
	char err[1024] = "";
	cli_opt_t opts[4 + CLI_STAGE_NOPTS] = {
		{"model", OPT_STR, &dir, "PATH", "a graph model's directory (model.json, model.safetensors) or a decoder LLM checkpoint (a GGUF file, an HF directory or a llama2.c .bin)"},
		{"stage", OPT_INT, &index, "I", "which stage to serve, counting from 0"},
		{"of", OPT_INT, &of, "N", "the model is split into N stages balanced by weight bytes"},
		{"plan", OPT_STR, &plan, "FILE", "instead of --of: the split in FILE (`muster plan --json`)"},
	};
	cli_cmd_t cmd = {
		"muster stage --model PATH --stage I (--of N | --plan FILE) [--host H] [--port P] [--requests N]",
		"Serve one stage of a split model. The stage loads its own weights, and only\n"
		"those, from the model's files (the rest of the file is never read), then\n"
		"prints one line when it is ready:\n"
		"\n"
		"    muster stage I/N: serving on HOST:PORT\n"
		"\n"
		"and answers forwards from `muster run --stages ...` until stopped (Ctrl-C or\n"
		"SIGTERM) or until --requests forwards were served.\n"
		"\n"
		"With --model naming a decoder LLM checkpoint (a GGUF file, an HF directory or a\n"
		"llama2.c .bin) it serves layers of it to `muster generate --stages`; see\n"
		"`muster stage --model CHECKPOINT --help` for those options.",
		opts, 4, 0, 0};

	for (int i = 1; i + 1 < argc; i++) /* a decoder LLM has its own options */
		if (strcmp(argv[i], "--model") == 0 && cli_is_llm(argv[i + 1]))
			return cmd_stage_llm(argc, argv);
	for (int i = 1; i < argc; i++)
		if (strncmp(argv[i], "--model=", 8) == 0 && cli_is_llm(argv[i] + 8))
			return cmd_stage_llm(argc, argv);
	cli_stage_args_init(&sa, 30);
	cmd.nopts += cli_stage_args_opts(&sa, opts + 4);
	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if ((rc = cli_stage_args_apply(&sa, "muster stage")) != 0)
		return rc;
	if (dir == NULL || index < 0 || (of < 1 && plan == NULL)) {
		fprintf(stderr, "muster stage: needs --model PATH, --stage I >= 0 and --of N or --plan "
		                "FILE (see --help)\n");
		return 2;
	}
	if (plan != NULL && access(plan, R_OK) != 0) {
		fprintf(stderr, "muster stage: cannot read --plan %s: %s\n", plan, strerror(errno));
		return 2;
	}
	if (plan != NULL && plan_range(plan, index, &of, &first, &last) != 0) {
		fprintf(stderr, "muster stage: %s has no stage %d (is it `muster plan --json` output?)\n",
		        plan, index);
		return 2;
	}
	cli_block_signals();
	rc = first >= 0 ? mu_stage_load_range(dir, index, of, first, last, &s, err, sizeof(err))
	                : mu_stage_load(dir, index, of, &s, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "muster stage: cannot load stage %d/%d: %s\n", index, of,
		        err[0] != '\0' ? err : mu_strerror(rc));
		return 1;
	}
	return cli_stage_serve(s, &sa, index, of, announce_graph);
}
