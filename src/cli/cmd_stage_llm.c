/* SPDX-License-Identifier: MIT */
/*
 * `muster stage` for a decoder LLM: load layers of a GGUF, HF or llama2.c
 * checkpoint from this machine's copy and serve them to `muster generate
 * --stages` (sequences with their KV caches; docs/protocols/pipeline.md).
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "muster/pipeline.h"
#include "cli/cli_int.h"
#include "pipeline/pipeline_int.h"

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

static void stop_stage(void *srv)
{
	mu_stage_server_stop(srv);
}

static int parse_layers(const char *s, int *first, int *last)
{
	char tail;

	return sscanf(s, "%d:%d%c", first, last, &tail) == 2 && *first >= 0 && *last > *first ? 0 : -1;
}

static void announce(mu_stage_t *s, int index, int of)
{
	cJSON *d = cJSON_Parse(mu_stage_describe(s));
	char rb[32], rss[32];

	cli_bytes(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(d, "resident_bytes")), rb,
	          sizeof(rb));
	cli_bytes(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(d, "rss_bytes")), rss,
	          sizeof(rss));
	fprintf(stderr, "muster stage %d/%d: layers %d..%d of %d%s%s, %s of weights, RSS %s, "
	        "loaded in %.0f ms\n", index, of,
	        (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(d, "first")),
	        (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(d, "last")) - 1,
	        (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(d, "layers")),
	        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "embeds")) ? " + embedding" : "",
	        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "head")) ? " + head" : "", rb, rss,
	        cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(d, "load_ms")));
	cJSON_Delete(d);
}

int cmd_stage_llm(int argc, char **argv)
{
	const char *path = NULL, *layers = NULL, *kv = "1G", *tok = NULL, *max_frame = "1G";
	int index = -1, of = 0, first = -1, last = -1, npos, rc, io_timeout = 60;
	int silent_timeout = 30, max_conns = 64;
	mu__llm_stage_opts_t lo;
	mu_stage_server_opts_t o;
	mu_stage_server_t *srv;
	mu_stage_t *s;
	char err[1024], name[64];
	uint64_t mf;

	mu__llm_stage_opts_init(&lo);
	lo.threads = (int)sysconf(_SC_NPROCESSORS_ONLN) > 0 ? (int)sysconf(_SC_NPROCESSORS_ONLN) : 1;
	mu_stage_server_opts_init(&o);
	cli_opt_t opts[] = {
		{"model", OPT_STR, &path, "PATH", "the checkpoint: a GGUF file, an HF directory or a llama2.c .bin"},
		{"stage", OPT_INT, &index, "I", "which stage to serve, counting from 0"},
		{"of", OPT_INT, &of, "N", "the layers are split into N stages balanced by weight bytes"},
		{"layers", OPT_STR, &layers, "A:B", "instead of --of: serve layers A to B-1 (A = 0 embeds tokens; B = the layer count has the head)"},
		{"threads", OPT_INT, &lo.threads, "N", "compute threads (default: the machine's cores)"},
		{"max-sequences", OPT_INT, &lo.max_seqs, "N", "sequences open at once, from all coordinators (default 8)"},
		{"kv-mem", OPT_STR, &kv, "SIZE", "KV cache all sequences may reserve (default 1G); past it SEQ_OPEN gets an ERROR"},
		{"chunk", OPT_INT, &lo.max_chunk, "N", "positions per forward at most (default 256)"},
		{"tokenizer", OPT_STR, &tok, "FILE", "ignored by a stage (the coordinator tokenizes); accepted for symmetry"},
		{"host", OPT_STR, &o.host, "HOST", "address to listen on (default 127.0.0.1; 0.0.0.0 for all)"},
		{"port", OPT_INT, &o.port, "PORT", "port (default 0: any free port, printed when ready)"},
		{"io-timeout", OPT_INT, &io_timeout, "SECONDS", "close a peer that stalls mid-message this long (default 60)"},
		{"silent-timeout", OPT_INT, &silent_timeout, "SECONDS", "close a connection that sends nothing this long after connecting (default 30; 0: never)"},
		{"max-conns", OPT_INT, &max_conns, "N", "serve at most N connections (default 64)"},
		{"max-frame-bytes", OPT_STR, &max_frame, "SIZE", "largest tensor data accepted in one message (default 1G)"},
	};
	cli_cmd_t cmd = {
		"muster stage --model CHECKPOINT --stage I (--of N | --layers A:B) [options]",
		"Serve layers of a decoder LLM (Llama, Mistral, Qwen2) from this machine's copy of\n"
		"the checkpoint. Only the stage's own weights are read (made resident at start);\n"
		"each coordinator's sequences keep their KV cache here until closed or until the\n"
		"coordinator goes away. Prints one line when ready:\n"
		"\n"
		"    muster stage I/N: serving on HOST:PORT",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 0, 0};

	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if (layers != NULL && parse_layers(layers, &first, &last) != 0) {
		fprintf(stderr, "muster stage: --layers takes A:B with 0 <= A < B\n");
		return 2;
	}
	if (path == NULL || (index < 0 && layers == NULL) || (of < 1 && layers == NULL) ||
	    lo.threads < 1 || lo.max_seqs < 1 || lo.max_chunk < 1 || io_timeout < 1 ||
	    silent_timeout < 0 || max_conns < 1 || cli_parse_size(kv, &lo.kv_bytes) != 0 ||
	    cli_parse_size(max_frame, &mf) != 0) {
		fprintf(stderr, "muster stage: needs --model PATH and --stage I with --of N, or "
		                "--layers A:B; sizes like 512M (see --help)\n");
		return 2;
	}
	if (index < 0)
		index = 0;
	if (of < 1)
		of = 1;
	mu_log_set_sink(mu_log_stderr_sink, NULL, MU_LOG_INFO);
	cli_block_signals();
	rc = mu__stage_open_llm(path, tok, index, of, first, last, &lo, &s, err, sizeof(err));
	if (rc != 0) {
		fprintf(stderr, "muster stage: cannot load stage %d/%d of %s: %s\n", index, of, path, err);
		return 1;
	}
	snprintf(name, sizeof(name), "stage %d/%d", index, of);
	o.name = name;
	o.io_timeout_ms = io_timeout * 1000;
	o.silent_timeout_ms = silent_timeout * 1000;
	o.max_conns = max_conns;
	o.max_frame_bytes = mf;
	rc = mu_stage_server_start(s, &o, &srv);
	if (rc != 0) {
		fprintf(stderr, "muster stage: cannot listen on %s port %d: %s\n", o.host, o.port,
		        rc == MU_EBIND ? "address in use" : mu_strerror(rc));
		mu_stage_free(s);
		return 1;
	}
	announce(s, index, of);
	printf("muster stage %d/%d: serving on %s:%d\n", index, of, o.host, mu_stage_server_port(srv));
	fflush(stdout);
	cli_on_signal(stop_stage, srv);
	mu_stage_server_wait(srv);
	cli_signal_disarm();
	mu_stage_server_free(srv);
	mu_stage_free(s);
	return 0;
}
