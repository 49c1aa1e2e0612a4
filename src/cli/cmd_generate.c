/* SPDX-License-Identifier: MIT */
/*
 * `muster generate`: text from a decoder LLM (HF directory, GGUF file or
 * llama2.c checkpoint), in this process or over `muster stage` servers
 * (--stages). The text streams to stdout as tokens come, byte for byte
 * what the model produced (a newline is added only on a terminal); the
 * figures go to stderr in one line, or with --json everything comes as one
 * object on stdout at the end.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "muster/common.h"
#include "cli/cli_int.h"
#include "cli/gen_int.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/json_int.h"
#include "core/proc_int.h"

typedef struct {
	int json, tty, ends_nl;
	mu__buf_t text;     /* --json: the text so far */
	cJSON *ids;         /* --json: the new token ids */
	FILE *logits;       /* --dump-logits */
	int failed_write;
} out_t;

static int on_token(void *ud, int32_t id, const char *text, size_t len)
{
	out_t *o = ud;

	if (o->json) {
		if (mu__buf_append(&o->text, text, len) != 0)
			o->failed_write = 1;
		if (id >= 0)
			cJSON_AddItemToArray(o->ids, cJSON_CreateNumber(id));
		return 0;
	}
	if (len > 0) {
		if (fwrite(text, 1, len, stdout) != len)
			o->failed_write = 1;
		o->ends_nl = text[len - 1] == '\n';
		fflush(stdout);
	}
	return 0;
}

static void on_logits(void *ud, const float *logits, int32_t vocab)
{
	out_t *o = ud;

	if (fwrite(logits, sizeof(float), (size_t)vocab, o->logits) != (size_t)vocab)
		o->failed_write = 1;
}

static double rate(int32_t n, double ms)
{
	return ms > 0 ? n / (ms / 1e3) : 0;
}

static void print_stats(const gen_run_t *r, const mu_llm_stats_t *st)
{
	mu_llm_recovery_t rec;
	char rss[32];

	cli_bytes((double)mu__proc_status_kib(0, "VmHWM") * 1024, rss, sizeof(rss));
	fprintf(stderr, "prefill %d tokens in %.1f ms (%.1f tok/s) | decode %d tokens in %.1f ms "
	        "(%.2f tok/s) | first token after %.1f ms | stop: %s | %s | coordinator peak RSS %s\n",
	        st->prompt_tokens, st->prefill_ms, rate(st->prompt_tokens, st->prefill_ms),
	        st->decode_steps, st->decode_ms, rate(st->decode_steps, st->decode_ms),
	        st->ttft_ms, gen_stop_name(st->stop), r->info.where, rss);
	mu_llm_recovery(r->llm, &rec);
	if (rec.recoveries > 0) /* --stages: a stage that came back */
		fprintf(stderr, "reconnected to %d lost stage%s in %.0f ms, replaying %llu positions; "
		        "the text went on where it was\n", rec.recoveries, rec.recoveries == 1 ? "" : "s",
		        rec.recovery_ms, (unsigned long long)rec.replayed);
}

/* Over devices from the tracker: the figures, and what was recovered. */
static void print_tracker_stats(const gen_run_t *r, const mu_llm_stats_t *st)
{
	mu_llm_recovery_t rec;

	mu_llm_recovery(r->llm, &rec);
	fprintf(stderr, "\nprompt %d tokens, first token after %.1f ms | decode %d tokens in %.1f ms "
	        "(%.2f tok/s) | stop: %s | %s\n", st->prompt_tokens, st->ttft_ms, st->decode_steps,
	        st->decode_ms, rate(st->decode_steps, st->decode_ms), gen_stop_name(st->stop),
	        r->info.where);
	if (rec.recoveries > 0)
		fprintf(stderr, "recovered %d lost device%s in %.0f ms, replaying %llu positions; the "
		        "text went on where it was\n", rec.recoveries, rec.recoveries == 1 ? "" : "s",
		        rec.recovery_ms, (unsigned long long)rec.replayed);
}

/* The report's text: a model may emit bytes that are not UTF-8 (byte
 * tokens); JSON carries text, so those become U+FFFD. */
static void add_text(cJSON *j, out_t *o)
{
	mu__buf_t text;

	mu__buf_init(&text, (size_t)1 << 30);
	if (mu__utf8_repair(o->text.data != NULL ? o->text.data : "", o->text.len, &text) != 0)
		mu__buf_reset(&text);
	cJSON_AddStringToObject(j, "text", text.data != NULL ? text.data : "");
	mu__buf_free(&text);
	cJSON_AddItemToObject(j, "tokens", o->ids);
	o->ids = NULL;
}

static void add_figures(const gen_run_t *r, cJSON *j, const mu_llm_stats_t *st)
{
	mu_llm_recovery_t rec;

	cJSON_AddNumberToObject(j, "prompt_tokens", st->prompt_tokens);
	cJSON_AddNumberToObject(j, "new_tokens", st->new_tokens);
	if (r->tracker) { /* the figures of a run that may have lost a device */
		mu_llm_recovery(r->llm, &rec);
		cJSON_AddNumberToObject(j, "ttft_ms", st->ttft_ms);
		cJSON_AddNumberToObject(j, "decode_tok_s", rate(st->decode_steps, st->decode_ms));
		cJSON_AddStringToObject(j, "stop", gen_stop_name(st->stop));
		cJSON_AddNumberToObject(j, "recoveries", rec.recoveries);
		cJSON_AddNumberToObject(j, "recovery_ms", rec.recovery_ms);
		cJSON_AddNumberToObject(j, "replayed_positions", (double)rec.replayed);
		return;
	}
	cJSON_AddNumberToObject(j, "prefill_ms", st->prefill_ms);
	cJSON_AddNumberToObject(j, "prefill_tok_s", rate(st->prompt_tokens, st->prefill_ms));
	cJSON_AddNumberToObject(j, "decode_ms", st->decode_ms);
	cJSON_AddNumberToObject(j, "decode_steps", st->decode_steps);
	cJSON_AddNumberToObject(j, "decode_tok_s", rate(st->decode_steps, st->decode_ms));
	cJSON_AddNumberToObject(j, "ttft_ms", st->ttft_ms);
	cJSON_AddStringToObject(j, "stop", gen_stop_name(st->stop));
	cJSON_AddNumberToObject(j, "seed", (double)r->seed);
	cJSON_AddNumberToObject(j, "peak_rss_kib", (double)mu__proc_status_kib(0, "VmHWM"));
}

static void print_json(const gen_run_t *r, out_t *o, const mu_llm_stats_t *st)
{
	cJSON *j = cJSON_CreateObject();
	char *s;

	add_text(j, o);
	add_figures(r, j, st);
	gen_run_json(r, j);
	s = cJSON_PrintUnformatted(j);
	if (s != NULL)
		printf("%s\n", s);
	cJSON_free(s);
	cJSON_Delete(j);
}

static int read_prompt(const char *file, char **text, size_t *len)
{
	mu__buf_t b;
	char why[512];
	int rc = mu__buf_read_file(&b, file, (size_t)64 << 20, why, sizeof(why));

	if (rc != 0) {
		fprintf(stderr, "muster generate: %s\n", why);
		return 1;
	}
	*text = mu__buf_take(&b, len);
	if (*text == NULL)
		*text = mu__strdup("");
	return 0;
}

/* One prompt (text, or ids when given), its text streamed as it comes
 * (or, with --json, in one object at the end). The exit status. */
static int run(gen_run_t *r, const char *prompt, size_t plen, const int32_t *ids, int32_t nids,
               const char *dump)
{
	out_t o = {.json = r->json, .tty = isatty(1), .ends_nl = 1};
	mu_llm_gen_opts_t g;
	mu_llm_stats_t st;
	char why[1024] = "";
	int rc;

	mu__buf_init(&o.text, (size_t)256 << 20);
	o.ids = cJSON_CreateArray();
	gen_run_request(r, &g);
	g.prompt_ids = ids;
	g.nprompt_ids = (size_t)nids;
	g.on_token = on_token;
	g.ud = &o;
	if (dump != NULL) {
		if ((o.logits = fopen(dump, "wb")) == NULL) {
			fprintf(stderr, "muster generate: cannot write %s: %s\n", dump, strerror(errno));
			cJSON_Delete(o.ids);
			mu__buf_free(&o.text);
			return 1;
		}
		g.on_logits = on_logits;
	}
	rc = mu_llm_generate(r->llm, prompt, plen, &g, &st, why, sizeof(why));
	if (!o.json && o.tty && !o.ends_nl && !r->tracker)
		putchar('\n');
	fflush(stdout);
	if (o.logits != NULL && fclose(o.logits) != 0)
		o.failed_write = 1;
	if (rc != 0)
		fprintf(stderr, "%smuster generate: %s\n", r->tracker ? "\n" : "",
		        why[0] ? why : mu_strerror(rc));
	else if (o.json)
		print_json(r, &o, &st);
	else if (r->tracker)
		print_tracker_stats(r, &st);
	else
		print_stats(r, &st);
	if (rc == 0 && o.failed_write) {
		fprintf(stderr, "muster generate: could not write the output\n");
		rc = MU_EFAIL;
	}
	cJSON_Delete(o.ids);
	mu__buf_free(&o.text);
	return rc != 0;
}

/* "1,2,3" -> ids in [0, vocab). */
static int parse_ids(const char *s, int32_t vocab, int32_t **out, int32_t *n)
{
	int32_t *v = mu__malloc(65536 * sizeof(int32_t));
	char *end;
	long x;

	*n = 0;
	if (v == NULL)
		return -1;
	for (;;) {
		x = strtol(s, &end, 10);
		if (end == s || x < 0 || x >= vocab || *n == 65536 || (*end != ',' && *end != '\0')) {
			mu__free(v);
			return -1;
		}
		v[(*n)++] = (int32_t)x;
		if (*end == '\0')
			break;
		s = end + 1;
	}
	*out = v;
	return 0;
}

int cmd_generate(int argc, char **argv)
{
	const char *prompt = NULL, *prompt_file = NULL, *dump = NULL, *prompt_ids = NULL;
	int32_t *ids = NULL, nids = 0;
	char *text = NULL;
	gen_args_t a;
	gen_run_t r;
	size_t len;
	int npos, rc;
	char archs[160], about[640];
	cli_opt_t opts[GEN_MAX_OPTS + 4] = {
		{"prompt", OPT_STR, &prompt, "TEXT", "the prompt (default: empty, so the model starts "
		 "from BOS)"},
		{"prompt-file", OPT_STR, &prompt_file, "FILE", "read the prompt from FILE"},
		{"prompt-ids", OPT_STR, &prompt_ids, "ID,ID,...", "the prompt as token ids, used as "
		 "given (no BOS added; tests and benchmarks)"},
		{"dump-logits", OPT_STR, &dump, "FILE", "write every step's logits to FILE as "
		 "little-endian f32 rows (tests)"},
	};
	cli_cmd_t cmd = {
		"muster generate --model DIR|FILE.gguf|FILE.bin [--prompt TEXT] [options]",
		about, opts, 4, 0, 0};

	/* the architectures from the library's table, not a list of our own */
	mu_llm_architectures(0, archs, sizeof(archs));
	snprintf(about, sizeof(about),
	         "Generate text with a decoder LLM from an HF checkpoint directory, a GGUF\n"
	         "file or a llama2.c checkpoint: in this process, or split over `muster stage`\n"
	         "servers with --stages. Tokens print as they come; a last line on stderr gives\n"
	         "prefill and decode speed and the time to the first token.\n"
	         "Architectures: %s.", archs);

	gen_args_default(&a);
	cmd.nopts += gen_args_opts(&a, opts + 4);
	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if ((prompt != NULL) + (prompt_file != NULL) + (prompt_ids != NULL) > 1) {
		fprintf(stderr, "muster generate: give one of --prompt, --prompt-file and --prompt-ids\n");
		return 2;
	}
	if ((rc = gen_run_open(&a, &r)) != 0)
		return rc;
	if (prompt_ids != NULL && parse_ids(prompt_ids, r.info.vocab, &ids, &nids) != 0) {
		fprintf(stderr, "muster generate: --prompt-ids takes 1 to 65536 token ids of the "
		        "vocabulary (0 to %d), comma-separated\n", r.info.vocab - 1);
		gen_run_close(&r);
		return 2;
	}
	if (prompt_file != NULL && read_prompt(prompt_file, &text, &len) != 0) {
		gen_run_close(&r);
		return 1;
	}
	if (prompt_file == NULL) {
		text = mu__strdup(prompt != NULL ? prompt : "");
		len = strlen(text);
	}
	if (a.parallel > 0 && prompt_file == NULL) {
		fprintf(stderr, "muster generate: --parallel takes its prompts from --prompt-file\n");
		rc = 2;
	} else {
		rc = a.parallel > 0 ? gen_run_parallel(&r, text) : run(&r, text, len, ids, nids, dump);
	}
	mu__free(text);
	mu__free(ids);
	gen_run_close(&r);
	return rc;
}
