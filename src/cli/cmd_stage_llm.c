/* SPDX-License-Identifier: MIT */
/*
 * `muster stage` for a decoder LLM: load layers of a GGUF, HF or llama2.c
 * checkpoint from this machine's copy and serve them to `muster generate
 * --stages` (sequences with their KV caches; docs/protocols/pipeline.md),
 * and `muster plan` for such a checkpoint: both over muster/pipeline.h
 * (mu_stage_load_llm, mu_llm_plan).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "muster/llm.h"
#include "muster/pipeline.h"
#include "cli/cli_int.h"
#include "core/log_int.h"
#include "cli/stage_serve_int.h"

int cli_is_llm(const char *path)
{
	char p[4096];
	struct stat st;

	if (path == NULL || stat(path, &st) != 0)
		return 0;
	if (!S_ISDIR(st.st_mode))
		return 1;
	snprintf(p, sizeof(p), "%s/model.json", path);
	if (access(p, F_OK) == 0)
		return 0;
	snprintf(p, sizeof(p), "%s/config.json", path);
	return access(p, F_OK) == 0;
}

static int parse_layers(const char *s, int *first, int *last)
{
	char tail;

	return sscanf(s, "%d:%d%c", first, last, &tail) == 2 && *first >= 0 && *last > *first ? 0 : -1;
}

static void announce(mu_stage_t *s, int index, int of)
{
	cJSON *d = cJSON_Parse(mu_stage_describe(s));
	const cJSON *w = cJSON_GetObjectItemCaseSensitive(d, "weights_sha256");
	char rb[32], rss[32];

	cli_bytes(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(d, "resident_bytes")), rb,
	          sizeof(rb));
	cli_bytes(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(d, "rss_bytes")), rss,
	          sizeof(rss));
	mu__log(MU_LOG_INFO, "stage", "muster stage %d/%d: layers %d..%d of %d%s%s, %s of weights, RSS %s, "
	        "loaded in %.0f ms; weights digest %.16s", index, of,
	        (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(d, "first")),
	        (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(d, "last")) - 1,
	        (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(d, "layers")),
	        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "embeds")) ? " + embedding" : "",
	        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "head")) ? " + head" : "", rb, rss,
	        cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(d, "load_ms")),
	        cJSON_IsString(w) ? w->valuestring : "?");
	cJSON_Delete(d);
}

int cmd_stage_llm(int argc, char **argv)
{
	const char *path = NULL, *layers = NULL, *kv = "1G", *tok = NULL, *kvt = NULL;
	int index = -1, of = 0, first = -1, last = -1, npos, rc;
	mu_llm_stage_opts_t lo;
	cli_stage_args_t sa;
	mu_stage_t *s;
	char err[1024], archs[160], about[640];
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int seq_idle = 600;
	cli_opt_t opts[12 + CLI_STAGE_NOPTS] = {
		{"model", OPT_STR, &path, "PATH", "the checkpoint: a GGUF file, an HF directory or a llama2.c .bin"},
		{"stage", OPT_INT, &index, "I", "which stage to serve, counting from 0"},
		{"of", OPT_INT, &of, "N", "the layers are split into N stages balanced by weight bytes"},
		{"layers", OPT_STR, &layers, "A:B", "instead of --of: serve layers A to B-1 (A = 0 embeds tokens; B = the layer count has the head)"},
		{"threads", OPT_INT, &lo.threads, "N", "compute threads (default: the machine's cores)"},
		{"max-sequences", OPT_INT, &lo.max_seqs, "N", "sequences open at once, from all coordinators (default 8)"},
		{"max-sequences-per-connection", OPT_INT, &lo.max_seqs_per_conn, "N", "of them, open by one connection at most, so one coordinator cannot take them all (default: half of --max-sequences, at least 1)"},
		{"sequence-idle-timeout", OPT_INT, &seq_idle, "SECONDS", "close a sequence no forward ran for this long, when another is opened (default 600; 0: never)"},
		{"kv-mem", OPT_STR, &kv, "SIZE", "KV cache all sequences may reserve (default 1G); past it SEQ_OPEN gets an ERROR"},
		{"chunk", OPT_INT, &lo.max_chunk, "N", "positions per forward at most (default 256)"},
		{"kv-type", OPT_STR, &kvt, cli_kv_choices(), "the KV cache's type for a coordinator that names none (one of before --kv-type); each coordinator's --kv-type rules for its own sequences (default f16)"},
		{"tokenizer", OPT_STR, &tok, "FILE", "ignored by a stage (the coordinator tokenizes); accepted for symmetry"},
	};
	cli_cmd_t cmd = {
		"muster stage --model CHECKPOINT --stage I (--of N | --layers A:B) [options]",
		about, opts, 12, 0, 0};

	/* the architectures from the library's table, not a list of our own */
	mu_llm_architectures(0, archs, sizeof(archs));
	snprintf(about, sizeof(about),
	         "Serve layers of a decoder LLM from this machine's copy of the checkpoint\n"
	         "(architectures: %s). Only the stage's own weights are read\n"
	         "(made resident at start); each coordinator's sequences keep their KV cache\n"
	         "here until closed or until the coordinator goes away. Prints one line when\n"
	         "ready:\n"
	         "\n"
	         "    muster stage I/N: serving on HOST:PORT", archs);

	mu_llm_stage_opts_init(&lo);
	lo.threads = cpus > 0 ? (int)cpus : 1;
	cli_stage_args_init(&sa, 60);
	cmd.nopts += cli_stage_args_opts(&sa, opts + 12);
	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if ((rc = cli_stage_args_apply(&sa, "muster stage")) != 0)
		return rc;
	if (layers != NULL && parse_layers(layers, &first, &last) != 0) {
		fprintf(stderr, "muster stage: --layers takes A:B with 0 <= A < B\n");
		return 2;
	}
	if (path == NULL || (index < 0 && layers == NULL) || (of < 1 && layers == NULL) ||
	    lo.threads < 1 || lo.max_seqs < 1 || lo.max_chunk < 1 || lo.max_seqs_per_conn < 0 ||
	    seq_idle < 0 || seq_idle > 2000000 ||
	    cli_parse_size(kv, &lo.kv_bytes) != 0) {
		fprintf(stderr, "muster stage: needs --model PATH and --stage I with --of N, or "
		                "--layers A:B; sizes like 512M (see --help)\n");
		return 2;
	}
	if (kvt != NULL && mu_llm_kv_type_parse(kvt, &lo.kv_type, err, sizeof(err)) != 0) {
		fprintf(stderr, "muster stage: --kv-type: %s\n", err);
		return 2;
	}
	if (index < 0)
		index = 0;
	if (of < 1)
		of = 1;
	cli_block_signals();
	lo.seq_idle_ms = seq_idle * 1000;
	lo.tokenizer = tok;
	lo.index = index;
	lo.of = of;
	lo.first = first;
	lo.last = last;
	rc = mu_stage_load_llm(path, &lo, &s, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "muster stage: cannot load stage %d/%d of %s: %s\n", index, of, path, err);
		return 1;
	}
	return cli_stage_serve(s, &sa, index, of, announce);
}

/* ---- muster plan for an LLM ---- */

static int parse_budgets(const char *s, uint64_t *b, int max)
{
	char *copy = strdup(s), *save = NULL;
	int n = 0;

	if (copy == NULL)
		return -1;
	for (char *t = strtok_r(copy, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save))
		if (n == max || cli_parse_size(t, &b[n++]) != 0) {
			free(copy);
			return -1;
		}
	free(copy);
	return n;
}

static void plan_row(const mu_llm_plan_t *p, const mu_llm_plan_stage_t *st, int k,
                     const uint64_t *budgets, int json)
{
	uint64_t w = st->weight_bytes, kv = st->kv_bytes;
	char wb[32], kb[32], tb[32], dev[64];

	if (budgets != NULL) {
		cli_bytes((double)budgets[st->device], wb, sizeof(wb));
		snprintf(dev, sizeof(dev), json ? "%d" : "#%d (%s)", st->device, wb);
	} else {
		snprintf(dev, sizeof(dev), json ? "null" : "-");
	}
	if (json) {
		printf("    {\"stage\": %d, \"device\": %s, \"first\": %d, \"last\": %d, "
		       "\"embeds\": %s, \"head\": %s, \"weight_bytes\": %llu, \"kv_bytes\": %llu}%s\n",
		       k, dev, st->first, st->last, st->embeds ? "true" : "false",
		       st->head ? "true" : "false", (unsigned long long)w, (unsigned long long)kv,
		       st->last == mu_llm_plan_layers(p) ? "" : ",");
		return;
	}
	cli_bytes((double)w, wb, sizeof(wb));
	cli_bytes((double)kv, kb, sizeof(kb));
	cli_bytes((double)(w + kv), tb, sizeof(tb));
	printf("%5d  %-12s %6d..%-4d %-9s %10s %10s %10s\n", k, dev, st->first, st->last - 1,
	       st->embeds && st->head ? "emb+head" : st->embeds ? "embed" : st->head ? "head" : "",
	       wb, kb, tb);
}

/* `muster plan --model CHECKPOINT (--of N | --budgets ...)`. */
int cli_plan_llm(const char *path, int stages, const char *budgets, int32_t ctx, int seqs,
                 const char *kv_type, int json)
{
	mu_llm_plan_opts_t o;
	mu_llm_plan_stage_t st;
	mu_llm_plan_t *p;
	uint64_t b[64];
	char err[1024];
	int i, n;

	mu_llm_plan_opts_init(&o);
	o.ctx = ctx;
	o.max_seqs = seqs;
	if (kv_type != NULL && mu_llm_kv_type_parse(kv_type, &o.kv_type, err, sizeof(err)) != 0) {
		fprintf(stderr, "muster plan: --kv-type: %s\n", err);
		return 2;
	}
	if (budgets != NULL) {
		if ((n = parse_budgets(budgets, b, 64)) < 1) {
			fprintf(stderr, "muster plan: --budgets takes 1 to 64 sizes like 512M,1G\n");
			return 1;
		}
		o.budgets = b;
		o.nbudgets = n;
	} else {
		o.stages = stages;
	}
	if (mu_llm_plan(path, &o, &p, err, sizeof(err)) != 0) {
		fprintf(stderr, "muster plan: %s\n", err);
		return 1;
	}
	if (json)
		printf("{\"model\": \"%s\", \"layers\": %d, \"ctx\": %d, \"max_sequences\": %d, "
		       "\"kv_type\": \"%s\", \"stages\": [\n", mu_llm_plan_arch(p),
		       mu_llm_plan_layers(p), ctx, seqs, mu_llm_kv_type_name(o.kv_type));
	else
		printf("%s: %d layers, %s KV cache for %d sequence%s of %d positions\n%5s  %-12s "
		       "%12s %-9s %10s %10s %10s\n", path, mu_llm_plan_layers(p),
		       mu_llm_kv_type_name(o.kv_type), seqs, seqs == 1 ? "" : "s", ctx, "stage", "device",
		       "layers", "", "weights", "KV", "total");
	for (i = 0; i < mu_llm_plan_stages(p); i++) {
		mu_llm_plan_stage(p, i, &st);
		plan_row(p, &st, i, budgets != NULL ? b : NULL, json);
	}
	if (json)
		printf("  ]}\n");
	mu_llm_plan_free(p);
	return 0;
}
