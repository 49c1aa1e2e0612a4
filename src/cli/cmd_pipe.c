/* SPDX-License-Identifier: MIT */
/*
 * `muster plan`, `muster stage` and `muster run`: see how a model splits,
 * serve one stage of it, and drive forwards through the stages (or run it
 * whole in this process, the reference a split run matches bit for bit).
 */
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "muster/pipeline.h"
#include "cli/cli_int.h"
#include "core/log_int.h"
#include "cli/stage_serve_int.h"
#include "core/json_int.h"
#include "core/net_int.h"
#include "core/progress_int.h"
#include "core/time_int.h"
#include "pipeline/pipeline_int.h"

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
/* Print the report o, then free it. */
static void print_json(cJSON *o)
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
		print_json(o);
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
	const char *dir = NULL, *by = "params", *budgets = NULL;
	uint64_t b[256];
	int dev[256], nb = 0;
	int stages = 0, json = 0, npos, rc, ctx = 2048, seqs = 1;
	char err[1024];
	mu_model_t *m;
	mu_plan_t *p = NULL;
	mu_split_t split;
	cli_opt_t opts[] = {
		{"model", OPT_STR, &dir, "DIR", "the model: DIR/model.json and DIR/model.safetensors"},
		{"stages", OPT_INT, &stages, "N", "cut into N stages"},
		{"by", OPT_STR, &by, "params|flops", "balance weight bytes (default) or estimated compute"},
		{"budgets", OPT_STR, &budgets, "SIZE,...", "instead of --stages: fit devices of these memory budgets, in whichever order fits best (e.g. 512M,1G,1G)"},
		{"json", OPT_FLAG, &json, NULL, "print the plan as JSON (what `muster stage --plan` reads)"},
		{"ctx", OPT_INT, &ctx, "N", "an LLM: positions of each sequence's KV cache (default 2048)"},
		{"max-sequences", OPT_INT, &seqs, "N", "an LLM: sequences each stage keeps a KV cache for (default 1)"},
	};
	cli_cmd_t cmd = {
		"muster plan --model DIR (--stages N | --budgets SIZE,...) [--by params|flops] [--json]",
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
		return cli_plan_llm(dir, stages, budgets, ctx, seqs, json);
	if (dir == NULL || (stages < 1 && budgets == NULL) || parse_split(by, &split) != 0) {
		fprintf(stderr, "muster plan: needs --model DIR and --stages N >= 1 (or --budgets); "
		                "--by is params or flops\n");
		return 2;
	}
	rc = mu_model_open(dir, &m, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "muster plan: %s\n", err);
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
		fprintf(stderr, "muster plan: %s\n", err);
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
	char err[1024];
	cli_opt_t opts[4 + CLI_STAGE_NOPTS] = {
		{"model", OPT_STR, &dir, "DIR", "the model directory (model.json, model.safetensors)"},
		{"stage", OPT_INT, &index, "I", "which stage to serve, counting from 0"},
		{"of", OPT_INT, &of, "N", "the model is split into N stages balanced by weight bytes"},
		{"plan", OPT_STR, &plan, "FILE", "instead of --of: the split in FILE (`muster plan --json`)"},
	};
	cli_cmd_t cmd = {
		"muster stage --model DIR --stage I (--of N | --plan FILE) [--host H] [--port P] [--requests N]",
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
		fprintf(stderr, "muster stage: needs --model DIR, --stage I >= 0 and --of N or --plan "
		                "FILE (see --help)\n");
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
		fprintf(stderr, "muster stage: cannot load stage %d/%d: %s\n", index, of, err);
		return 1;
	}
	return cli_stage_serve(s, &sa, index, of, announce_graph);
}

/* ---- run ---- */

static int same_outputs(const mu_tensor_list_t *a, const mu_tensor_list_t *b)
{
	if (a->n != b->n)
		return 0;
	for (size_t i = 0; i < a->n; i++)
		if (a->t[i]->numel != b->t[i]->numel || a->t[i]->dtype != b->t[i]->dtype ||
		    strcmp(a->t[i]->name, b->t[i]->name) != 0 ||
		    (a->t[i]->numel > 0 &&
		     memcmp(a->t[i]->raw, b->t[i]->raw, mu_tensor_nbytes(a->t[i])) != 0))
			return 0;
	return 1;
}

/* Element k of t, as printed: floats to 7 digits, integers exactly. */
static void print_elem(const mu_tensor_t *t, uint64_t k)
{
	const void *p = (const char *)t->raw + k * mu_dtype_size((int)t->dtype);
	union { int8_t i8; int16_t i16; int32_t i32; int64_t i64; uint8_t u8; uint16_t u16;
		uint32_t u32; uint64_t u64; double f64; } v;

	memcpy(&v, p, mu_dtype_size((int)t->dtype));
	switch (t->dtype) {
	case MU_DTYPE_F32: printf(" %.7g", (double)t->data[k]); break;
	case MU_DTYPE_F64: printf(" %.7g", v.f64); break;
	case MU_DTYPE_I8: printf(" %d", v.i8); break;
	case MU_DTYPE_I16: printf(" %d", v.i16); break;
	case MU_DTYPE_I32: printf(" %" PRId32, v.i32); break;
	case MU_DTYPE_I64: printf(" %" PRId64, v.i64); break;
	case MU_DTYPE_U8: case MU_DTYPE_BOOL: printf(" %u", v.u8); break;
	case MU_DTYPE_U16: printf(" %u", v.u16); break;
	case MU_DTYPE_U32: printf(" %" PRIu32, v.u32); break;
	case MU_DTYPE_U64: printf(" %" PRIu64, v.u64); break;
	default: printf(" 0x%04x", v.u16); break; /* F16, BF16: the bits */
	}
}

static void print_outputs(const mu_tensor_list_t *out)
{
	for (size_t i = 0; i < out->n; i++) {
		const mu_tensor_t *t = out->t[i];

		printf("output %s [", t->name);
		for (uint32_t d = 0; d < t->rank; d++)
			printf("%s%" PRIu64, d ? ", " : "", t->dims[d]);
		printf("]%s%s =", t->dtype != MU_DTYPE_F32 ? " " : "",
		       t->dtype != MU_DTYPE_F32 ? mu_dtype_name((int)t->dtype) : "");
		for (uint64_t k = 0; k < t->numel && k < 8; k++)
			print_elem(t, k);
		printf("%s\n", t->numel > 8 ? " ..." : "");
	}
}

static int split_addrs(char *list, const char **addrs, int max)
{
	int n = 0;
	char *save = NULL;

	for (char *t = strtok_r(list, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
		if (n == max)
			return -1;
		addrs[n++] = t;
	}
	return n;
}

static void add_timing(cJSON *x, const mu_stage_timing_t *t)
{
	cJSON_AddNumberToObject(x, "load_ms", t->load_ms);
	cJSON_AddNumberToObject(x, "resident_bytes", (double)t->resident_bytes);
	cJSON_AddNumberToObject(x, "rss_bytes", (double)t->rss_bytes);
	cJSON_AddNumberToObject(x, "forward_ms", t->forward_ms);
	cJSON_AddNumberToObject(x, "compute_ms", t->compute_ms);
	cJSON_AddNumberToObject(x, "bytes_in", (double)t->bytes_in);
	cJSON_AddNumberToObject(x, "bytes_out", (double)t->bytes_out);
	cJSON_AddNumberToObject(x, "forwards", (double)t->forwards);
}

/* What this process (the coordinator, which holds no stage) needed at most. */
static void print_peak(void)
{
	char b[32];

	cli_bytes((double)mu__self_peak_rss(), b, sizeof(b));
	printf("the coordinator's own peak memory: %s\n", b);
}

static void add_totals(cJSON *o, double wall_ms, int forwards, double first_ms)
{
	cJSON_AddNumberToObject(o, "forwards", forwards);
	cJSON_AddNumberToObject(o, "wall_ms", wall_ms);
	cJSON_AddNumberToObject(o, "first_output_ms", first_ms);
	cJSON_AddNumberToObject(o, "forwards_per_s", wall_ms > 0 ? forwards * 1000.0 / wall_ms : 0);
	cJSON_AddNumberToObject(o, "coordinator_peak_rss_bytes", (double)mu__self_peak_rss());
}

static void print_table(mu_coord_t *c, int json, double wall_ms, int forwards, double first_ms)
{
	int n = c != NULL ? mu_coord_stages(c) : 0;

	if (json) {
		cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "stages");

		for (int i = 0; i < n; i++) {
			mu_stage_timing_t t;
			cJSON *x = cJSON_CreateObject();

			mu_coord_timing(c, i, &t);
			cJSON_AddNumberToObject(x, "index", i);
			cJSON_AddStringToObject(x, "address", mu_coord_addr(c, i));
			add_timing(x, &t);
			cJSON_AddItemToArray(a, x);
		}
		add_totals(o, wall_ms, forwards, first_ms);
		print_json(o);
		return;
	}
	if (n > 0) {
		printf("\n%-6s %-22s %9s %11s %11s %11s %11s %11s\n", "stage", "address", "load ms",
		       "resident", "forward ms", "compute ms", "sent", "received");
		for (int i = 0; i < n; i++) {
			mu_stage_timing_t t;
			char r[32], in[32], out[32];

			mu_coord_timing(c, i, &t);
			cli_bytes((double)t.resident_bytes, r, sizeof(r));
			cli_bytes((double)t.bytes_in, in, sizeof(in));
			cli_bytes((double)t.bytes_out, out, sizeof(out));
			printf("%-6d %-22s %9.1f %11s %11.2f %11.2f %11s %11s\n", i, mu_coord_addr(c, i),
			       t.load_ms, r, t.forwards ? t.forward_ms / (double)t.forwards : 0,
			       t.forwards ? t.compute_ms / (double)t.forwards : 0, in, out);
		}
		printf("(forward and compute ms are per forward; sent/received are tensor bytes in all)\n");
	}
	printf("%d forward%s in %.1f ms (%.1f/s); first output after %.1f ms\n", forwards,
	       forwards == 1 ? "" : "s", wall_ms, wall_ms > 0 ? forwards * 1000.0 / wall_ms : 0,
	       first_ms);
}

/* The cluster's table: where each stage ran and what it cost. */
void cli_print_cluster(mu_cluster_t *c, int json, double wall_ms, int forwards, double first_ms)
{
	int n = mu_cluster_stages(c);

	if (json) {
		cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "stages");

		for (int i = 0; i < n; i++) {
			mu_cluster_stage_t s;
			cJSON *x = cJSON_CreateObject();

			mu_cluster_stage(c, i, &s);
			cJSON_AddNumberToObject(x, "index", i);
			cJSON_AddStringToObject(x, "device", s.address);
			cJSON_AddNumberToObject(x, "budget", (double)s.budget);
			cJSON_AddStringToObject(x, "weights", s.streamed ? "streamed" : "local");
			cJSON_AddNumberToObject(x, "replaced", s.replaced);
			cJSON_AddNumberToObject(x, "first", s.first);
			cJSON_AddNumberToObject(x, "last", s.last);
			add_timing(x, &s.timing);
			cJSON_AddItemToArray(a, x);
		}
		cJSON_AddNumberToObject(o, "replacements", mu_cluster_replacements(c));
		add_totals(o, wall_ms, forwards, first_ms);
		print_json(o);
		return;
	}
	printf("\n%-5s %-21s %-9s %-8s %9s %10s %10s %10s %10s\n", "stage", "device", "weights",
	       "nodes", "load ms", "resident", "forward ms", "sent", "received");
	for (int i = 0; i < n; i++) {
		mu_cluster_stage_t s;
		char r[32], in[32], out[32], nodes[24];

		mu_cluster_stage(c, i, &s);
		cli_bytes((double)s.timing.resident_bytes, r, sizeof(r));
		cli_bytes((double)s.timing.bytes_in, in, sizeof(in));
		cli_bytes((double)s.timing.bytes_out, out, sizeof(out));
		snprintf(nodes, sizeof(nodes), "%d..%d", s.first, s.last - 1);
		printf("%-5d %-21s %-9s %-8s %9.1f %10s %10.2f %10s %10s%s\n", i, s.address,
		       s.streamed ? "streamed" : "local", nodes, s.timing.load_ms, r,
		       s.timing.forwards ? s.timing.forward_ms / (double)s.timing.forwards : 0, in, out,
		       s.replaced ? "  (replacement)" : "");
	}
	printf("(load ms: the device's own load of its stage; resident: its weights in memory;\n"
	       " forward ms: per forward, as seen from here; sent/received: tensor bytes in all)\n");
	printf("%d forward%s in %.1f ms (%.1f/s); first output %.1f ms after the start%s\n", forwards,
	       forwards == 1 ? "" : "s", wall_ms, wall_ms > 0 ? forwards * 1000.0 / wall_ms : 0,
	       first_ms, mu_cluster_replacements(c) ? "; a lost device was replaced" : "");
	print_peak();
}

static void say_stderr(void *ud, const char *line)
{
	(void)ud;
	mu__progress_clear();
	fprintf(stderr, "%s\n", line);
}

int cmd_run(int argc, char **argv)
{
	const char *dir = NULL, *input = NULL, *output = NULL, *stages = NULL, *tracker = NULL,
	           *key = NULL, *weights = "auto";
	int npos, rc, repeat = 1, micro = 1, json = 0, done = 0, connect_timeout = 10,
	    io_timeout = 60, devices = 1, request_timeout = 30, quiet = 0;
	double t_start = mu__clock_ms(), t0, priority = 0;
	double first_ms = 0;
	char err[2048], thost[256];
	mu_tensor_list_t in, first, *outs = NULL, *ins = NULL;
	mu_model_t *m = NULL;
	mu_coord_t *c = NULL;
	mu_cluster_t *cl = NULL;
	mu_cluster_opts_t clo;
	cli_opt_t opts[] = {
		{"model", OPT_STR, &dir, "DIR", "the model directory (required without --stages; with them, checked against what they serve)"},
		{"input", OPT_STR, &input, "FILE", "the model's inputs, by name, in a safetensors file (`muster model input` makes one)"},
		{"stages", OPT_STR, &stages, "H:P,...", "stage servers in stage order (`muster stage`)"},
		{"tracker", OPT_STR, &tracker, "HOST:PORT", "instead of --stages: get devices from this tracker (`muster server` on each)"},
		{"key", OPT_STR, &key, "KEY", "with --tracker: the device key to request"},
		{"devices", OPT_INT, &devices, "N", "with --tracker: how many devices to request (default 1)"},
		{"priority", OPT_DOUBLE, &priority, "P", "with --tracker: priority of the requests (higher first; default 0)"},
		{"weights", OPT_STR, &weights, "auto|local|stream", "with --tracker: load stages from the devices' copies (local), stream them from here, or local where a device has a copy (auto, default)"},
		{"request-timeout", OPT_INT, &request_timeout, "SECONDS", "with --tracker: wait this long for each device (default 30)"},
		{"output", OPT_STR, &output, "FILE", "write the outputs to FILE (safetensors, each in its dtype)"},
		{"repeat", OPT_INT, &repeat, "R", "run R forwards of the input (default 1)"},
		{"micro-batches", OPT_INT, &micro, "M", "keep up to M forwards in flight, pipelined over the stages (default 1)"},
		{"connect-timeout", OPT_INT, &connect_timeout, "SECONDS", "keep trying to reach each stage this long (default 10)"},
		{"io-timeout", OPT_INT, &io_timeout, "SECONDS", "give up on a stage that makes no progress this long (default 60)"},
		{"json", OPT_FLAG, &json, NULL, "print the figures as JSON instead of a table"},
		{"quiet", OPT_FLAG, &quiet, NULL, "with --tracker: do not narrate the steps, nor show progress, on stderr"},
	};
	cli_cmd_t cmd = {
		"muster run --input FILE (--model DIR | --stages H:P,... | --tracker H:P --key K --devices N --model DIR)",
		"Run a model's forward pass, and print its outputs and a per-stage table.\n"
		"\n"
		"  --model DIR alone     in this process (the reference every split matches\n"
		"                        bit for bit);\n"
		"  --stages H:P,...      through `muster stage` servers, one per stage;\n"
		"  --tracker H:P         through devices found by the tracker: N devices of KEY\n"
		"                        are requested, their capabilities fetched, the model\n"
		"                        cut so each stage fits its device's memory, each device\n"
		"                        given its stage (from its own copy, or streamed from\n"
		"                        here), and a device lost mid-run replaced.\n"
		"\n"
		"The coordinator (this process) holds no weights: it relays the named tensors\n"
		"each stage needs.",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 0, 0};

	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if (input == NULL || (stages == NULL && dir == NULL) || repeat < 1 || micro < 1 ||
	    connect_timeout < 0 || io_timeout < 1 || (stages != NULL && tracker != NULL)) {
		fprintf(stderr, "muster run: needs --input FILE and one of --model, --stages, --tracker "
		                "(see --help)\n");
		return 2;
	}
	mu_cluster_opts_init(&clo);
	if (tracker != NULL) {
		if (mu__split_hostport(tracker, thost, sizeof(thost), &clo.tracker_port) != 0 ||
		    key == NULL || dir == NULL || devices < 1 || request_timeout < 1) {
			fprintf(stderr, "muster run: --tracker HOST:PORT needs --key, --model and --devices >= 1\n");
			return 2;
		}
		clo.tracker_host = thost;
		clo.key = key;
		clo.devices = devices;
		clo.priority = priority;
		clo.request_timeout_ms = request_timeout * 1000;
		clo.coord.io_timeout_ms = io_timeout * 1000;
		clo.say = quiet ? NULL : say_stderr;
		if (quiet)
			mu__progress_enable(0);
		if (strcmp(weights, "auto") == 0)
			clo.weights = MU_WEIGHTS_AUTO;
		else if (strcmp(weights, "local") == 0)
			clo.weights = MU_WEIGHTS_LOCAL;
		else if (strcmp(weights, "stream") == 0)
			clo.weights = MU_WEIGHTS_STREAM;
		else {
			fprintf(stderr, "muster run: --weights is auto, local or stream\n");
			return 2;
		}
	}
	mu_tensor_list_init(&in);
	mu_tensor_list_init(&first);
	signal(SIGPIPE, SIG_IGN);
	rc = mu_safetensors_read(input, &in, err, sizeof(err));
	if (rc == 0 && dir != NULL)
		rc = mu_model_open(dir, &m, err, sizeof(err));
	if (rc == 0 && tracker != NULL)
		rc = mu_cluster_start(m, &clo, &cl, err, sizeof(err));
	if (rc == 0 && stages != NULL) {
		const char *addrs[256];
		char *list = strdup(stages);
		int n = split_addrs(list, addrs, 256);
		mu_coord_opts_t co;

		mu_coord_opts_init(&co);
		co.connect_timeout_ms = connect_timeout * 1000;
		co.io_timeout_ms = io_timeout * 1000;
		if (n < 1) {
			snprintf(err, sizeof(err), "--stages needs 1 to 256 HOST:PORT addresses");
			rc = MU_EARG;
		} else {
			rc = mu_coord_connect(addrs, n, &co, &c, err, sizeof(err));
		}
		free(list);
		if (rc == 0 && m != NULL && mu_coord_digest(c) != mu_model_digest(m)) {
			snprintf(err, sizeof(err), "the stages serve a different model than %s "
			         "(digest %016" PRIx64 " vs %016" PRIx64 ")", dir, mu_coord_digest(c),
			         mu_model_digest(m));
			rc = MU_EARG;
		}
	}
	outs = calloc((size_t)micro, sizeof(*outs));
	ins = calloc((size_t)micro, sizeof(*ins));
	if (rc == 0 && (outs == NULL || ins == NULL)) {
		snprintf(err, sizeof(err), "out of memory");
		rc = MU_ENOMEM;
	}
	t0 = mu__clock_ms();
	while (rc == 0 && done < repeat) {
		int b = repeat - done < micro ? repeat - done : micro;

		if (c == NULL && cl == NULL)
			b = 1;
		for (int j = 0; j < b; j++) {
			mu_tensor_list_init(&outs[j]);
			ins[j] = in; /* the same inputs, borrowed */
		}
		if (cl != NULL)
			rc = mu_cluster_forward_many(cl, ins, b, outs, err, sizeof(err));
		else if (c == NULL)
			rc = mu_model_run(m, &in, &outs[0], err, sizeof(err));
		else if (b == 1)
			rc = mu_coord_forward(c, &in, &outs[0], err, sizeof(err));
		else
			rc = mu_coord_forward_many(c, ins, b, outs, err, sizeof(err));
		for (int j = 0; j < b; j++) {
			if (rc == 0 && done == 0 && j == 0) {
				first = outs[0];
				mu_tensor_list_init(&outs[0]);
				first_ms = mu__clock_ms() - t_start;
			} else if (rc == 0 && !same_outputs(&first, &outs[j])) {
				snprintf(err, sizeof(err), "forward %d gave different outputs than the first", done + j);
				rc = MU_EPROTO;
			}
			mu_tensor_list_free(&outs[j]);
		}
		done += b;
	}
	if (rc == 0) {
		double wall = mu__clock_ms() - t0;

		if (!json)
			print_outputs(&first);
		if (output != NULL && (rc = mu_safetensors_write(output, &first)) != 0)
			snprintf(err, sizeof(err), "cannot write %s: %s", output, mu_strerror(rc));
		if (rc == 0 && cl != NULL)
			cli_print_cluster(cl, json, wall, done, first_ms);
		else if (rc == 0)
			print_table(c, json, wall, done, first_ms);
	}
	if (rc != 0)
		fprintf(stderr, "muster run: %s\n", err);
	mu_tensor_list_free(&first);
	mu_tensor_list_free(&in);
	free(outs);
	free(ins);
	mu_cluster_close(cl);
	mu_coord_close(c);
	mu_model_close(m);
	return rc == 0 ? 0 : 1;
}
