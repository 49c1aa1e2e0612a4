/* SPDX-License-Identifier: MIT */
/*
 * `muster tokenize`: text to token ids and back with a model's tokenizer
 * (an HF tokenizer.json, or a llama2.c tokenizer .bin), for people checking
 * what a model sees and for the interop tests, which compare the ids with
 * HF's own tokenizer. --batch takes JSON Lines so a test can send many
 * texts (with any characters in them) through one process.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "muster/common.h"
#include "muster/llm.h"
#include "cli/cli_int.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/json_int.h"

#define MAX_FILE (1ULL << 30)

/* The whole of a file (path "-": stdin) as a NUL-terminated buffer. */
static char *slurp(const char *path, size_t *len)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	mu__buf_t b;
	char chunk[65536];
	size_t n;

	*len = 0;
	if (f == NULL)
		return NULL;
	mu__buf_init(&b, MAX_FILE);
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		if (mu__buf_append(&b, chunk, n) != 0)
			break;
	if (ferror(f) || !feof(f) || mu__buf_reserve(&b, 1) != 0) {
		mu__buf_free(&b);
		b.data = NULL;
	}
	if (f != stdin)
		fclose(f);
	return b.data != NULL ? mu__buf_take(&b, len) : NULL;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* --tokenizer FILE|DIR (tokenizer_config.json beside it when there),
 * --llama2c FILE --vocab N, or --gguf-meta FILE (vocab < 0). */
static int load(const char *hf, const char *config, const char *l2c, int vocab,
                mu_tokenizer_t **t)
{
	char why[512] = "", path[4096], *json = NULL, *cfg = NULL;
	const char *what = hf != NULL ? hf : l2c;
	struct stat st;
	size_t jl = 0, cl = 0;
	int rc;

	if (hf != NULL && stat(hf, &st) == 0 && S_ISDIR(st.st_mode)) {
		snprintf(path, sizeof(path), "%s/tokenizer.json", hf);
		json = slurp(path, &jl);
		if (config == NULL) {
			snprintf(path, sizeof(path), "%s/tokenizer_config.json", hf);
			cfg = stat(path, &st) == 0 ? slurp(path, &cl) : NULL;
		}
	} else {
		json = slurp(what, &jl);
	}
	if (json == NULL) {
		fprintf(stderr, "muster tokenize: cannot read %s: %s\n", what, strerror(errno));
		return 1;
	}
	if (config != NULL && (cfg = slurp(config, &cl)) == NULL) {
		fprintf(stderr, "muster tokenize: cannot read %s: %s\n", config, strerror(errno));
		mu__free(json);
		return 1;
	}
	if (hf != NULL)
		rc = mu_tokenizer_from_hf(json, jl, cfg, cl, t, why, sizeof(why));
	else if (vocab < 0)
		rc = mu_tokenizer_from_gguf_meta(json, jl, t, why, sizeof(why));
	else
		rc = mu_tokenizer_from_llama2c(json, jl, vocab, t, why, sizeof(why));
	mu__free(json);
	mu__free(cfg);
	if (rc != 0) {
		fprintf(stderr, "muster tokenize: %s: %s\n", what, why[0] ? why : mu_strerror(rc));
		return 1;
	}
	return 0;
}

static int print_ids(mu__buf_t *o, const int32_t *ids, size_t n, int json)
{
	int rc = mu__buf_appends(o, json ? "[" : "");

	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = mu__buf_printf(o, "%s%d", i == 0 ? "" : json ? ", " : " ", (int)ids[i]);
	return rc != 0 ? rc : mu__buf_appends(o, json ? "]" : "");
}

/* A JSON string literal of any bytes: the project's writer between NULs
 * (which it cannot see), invalid UTF-8 as U+FFFD. */
static int print_text(mu__buf_t *o, const char *s, size_t len)
{
	mu__buf_t tmp;
	int rc = mu__buf_appendc(o, '"');

	mu__buf_init(&tmp, MAX_FILE * 8);
	for (size_t i = 0; rc == 0 && i <= len;) {
		size_t n = strnlen(s + i, len - i);

		mu__buf_reset(&tmp);
		if ((rc = mu__json_dump_string(&tmp, s + i)) == 0) /* s[i + n] is a NUL */
			rc = mu__buf_append(o, tmp.data + 1, tmp.len - 2);
		i += n + 1;
		if (rc == 0 && i <= len)
			rc = mu__buf_appends(o, "\\u0000");
	}
	mu__buf_free(&tmp);
	return rc != 0 ? rc : mu__buf_appendc(o, '"');
}

/* Ids from text: integers separated by spaces, commas or brackets. */
static int parse_ids(const char *s, int32_t **ids, size_t *n)
{
	size_t cap = 0;

	*ids = NULL;
	*n = 0;
	while (*s != '\0') {
		char *end;
		long v;

		if (strchr(" \t\r\n,[]", *s) != NULL) {
			s++;
			continue;
		}
		errno = 0;
		v = strtol(s, &end, 10);
		if (end == s || errno != 0 || v < 0 || v > INT32_MAX) {
			mu__free(*ids);
			*ids = NULL;
			return -1;
		}
		if (*n == cap) {
			int32_t *p = mu__realloc(*ids, (cap = cap ? cap * 2 : 64) * sizeof(*p));

			if (p == NULL) {
				mu__free(*ids);
				*ids = NULL;
				return -1;
			}
			*ids = p;
		}
		(*ids)[(*n)++] = (int32_t)v;
		s = end;
	}
	return 0;
}

typedef struct {
	const mu_tokenizer_t *t;
	int flags, json, keep_special, repeat;
	double enc_ms;
	size_t bytes, tokens;
} job_t;

/* One text (or one list of ids with --decode) to its output line. */
static int one(job_t *j, int decode, const char *in, size_t len, mu__buf_t *o)
{
	int32_t *ids = NULL;
	char *text = NULL;
	size_t n = 0, tl = 0;
	int rc = 0;

	if (decode) {
		if (parse_ids(in, &ids, &n) != 0) {
			fprintf(stderr, "muster tokenize --decode: the input is not a list of ids\n");
			return 2;
		}
		rc = mu_tokenizer_decode(j->t, ids, n, j->keep_special, &text, &tl);
		if (rc == 0)
			rc = j->json ? print_text(o, text, tl) : mu__buf_append(o, text, tl);
	} else {
		double t0 = now_ms();

		for (int r = 0; rc == 0 && r < j->repeat; r++) {
			mu__free(ids);
			rc = mu_tokenizer_encode(j->t, in, len, j->flags, &ids, &n);
		}
		j->enc_ms += now_ms() - t0;
		j->bytes += len * (size_t)j->repeat;
		j->tokens += n * (size_t)j->repeat;
		if (rc == 0)
			rc = print_ids(o, ids, n, j->json);
	}
	mu__free(ids);
	mu__free(text);
	return rc;
}

/* --batch: each stdin line a JSON string (or, decoding, an array of ids);
 * each output line a JSON array of ids (or a JSON string). */
static int batch(job_t *j, int decode, char *in, size_t len, mu__buf_t *o)
{
	char *line = in, *end = in + len;
	int rc = 0;

	while (rc == 0 && line < end) {
		char *nl = memchr(line, '\n', (size_t)(end - line));
		size_t ll = nl != NULL ? (size_t)(nl - line) : (size_t)(end - line);
		cJSON *v = NULL;

		if (ll > 0 && mu__json_parse(line, ll, &v) == 0 &&
		    (decode ? cJSON_IsArray(v) : cJSON_IsString(v))) {
			if (decode) {
				line[ll] = '\0'; /* the array's text is the list of ids */
				rc = one(j, 1, line, ll, o);
			} else {
				rc = one(j, 0, v->valuestring, strlen(v->valuestring), o);
			}
		} else if (ll > 0) {
			fprintf(stderr, "muster tokenize --batch: a line is not a JSON %s\n",
			        decode ? "array" : "string");
			rc = 2;
		}
		cJSON_Delete(v);
		if (rc == 0 && ll > 0)
			rc = mu__buf_appendc(o, '\n');
		line += ll + 1;
	}
	return rc;
}

/* The input to its output on stdout; the exit status. */
static int convert(job_t *j, int decode, int bat, int json, char *in, size_t len)
{
	mu__buf_t o;
	int rc;

	mu__buf_init(&o, SIZE_MAX / 4);
	if (bat) {
		rc = batch(j, decode, in, len, &o);
	} else {
		rc = json ? mu__buf_appends(&o, decode ? "{\"text\": " : "{\"ids\": ") : 0;
		if (rc == 0)
			rc = one(j, decode, in, len, &o);
		if (rc == 0 && json)
			rc = mu__buf_appendc(&o, '}');
		if (rc == 0 && (json || !decode))
			rc = mu__buf_appendc(&o, '\n');
	}
	if (rc == 0 && o.len > 0 && fwrite(o.data, 1, o.len, stdout) != o.len)
		rc = 1;
	if (rc != 0 && rc != 1 && rc != 2)
		fprintf(stderr, "muster tokenize: %s\n", mu_strerror(rc));
	mu__buf_free(&o);
	return rc == 0 ? 0 : rc == 2 ? 2 : 1;
}

int cmd_tokenize(int argc, char **argv)
{
	const char *hf = NULL, *config = NULL, *l2c = NULL, *text = NULL, *gmeta = NULL;
	int vocab = 0, decode = 0, json = 0, no_bos = 0, no_special = 0, keep = 0, bat = 0;
	int stats = 0, repeat = 1, npos, rc;
	cli_opt_t opts[] = {
		{"tokenizer", OPT_STR, &hf, "FILE|DIR", "an HF tokenizer.json (or the directory holding it)"},
		{"config", OPT_STR, &config, "FILE", "its tokenizer_config.json (default: the one beside it)"},
		{"llama2c", OPT_STR, &l2c, "FILE", "instead: a llama2.c tokenizer (tokenizer.bin, tok512.bin)"},
		{"vocab", OPT_INT, &vocab, "N", "with --llama2c: the model's vocabulary size"},
		{"gguf-meta", OPT_STR, &gmeta, "FILE", "instead: a GGUF's tokenizer.* metadata as a JSON object"},
		{"text", OPT_STR, &text, "TEXT", "the text (or ids) to convert (default: stdin)"},
		{"decode", OPT_FLAG, &decode, NULL, "ids to text instead"},
		{"json", OPT_FLAG, &json, NULL, "print {\"ids\": [...]} or {\"text\": \"...\"}"},
		{"no-bos", OPT_FLAG, &no_bos, NULL, "add no BOS/EOS even where the tokenizer's config does"},
		{"no-special", OPT_FLAG, &no_special, NULL, "special tokens' text is ordinary text"},
		{"keep-special", OPT_FLAG, &keep, NULL, "with --decode: print special tokens' text"},
		{"batch", OPT_FLAG, &bat, NULL, "JSON Lines in and out: one text (or id list) per line"},
		{"stats", OPT_FLAG, &stats, NULL, "print load and encode times to stderr"},
		{"repeat", OPT_INT, &repeat, "N", "encode each text N times (for --stats)"},
	};
	cli_cmd_t cmd = {
		"muster tokenize (--tokenizer FILE|DIR | --llama2c FILE --vocab N | --gguf-meta FILE)\n"
		"                [--text TEXT] [--decode]",
		"Turn text into a model's token ids (one line, space-separated) or, with\n"
		"--decode, ids back into text, with the tokenizer an LLM checkpoint carries:\n"
		"an HF tokenizer.json (byte-level BPE as in GPT-2, Llama 3, Qwen, or\n"
		"SentencePiece-style as in Llama 2, Mistral) or a llama2.c tokenizer.\n"
		"BOS is added and special tokens' text is recognised as the tokenizer's\n"
		"config says, as HF's encode() does by default.",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 0, 0};
	job_t j;
	mu_tokenizer_t *t = NULL;
	char *in;
	size_t len = 0;
	double t0;

	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if ((hf != NULL) + (l2c != NULL) + (gmeta != NULL) != 1 || (l2c != NULL && vocab <= 0) ||
	    repeat < 1 || (bat && text != NULL)) {
		fprintf(stderr, "muster tokenize: needs one of --tokenizer, --llama2c with --vocab, "
		                "--gguf-meta (see --help)\n");
		return 2;
	}
	t0 = now_ms();
	if ((rc = load(hf, config, gmeta != NULL ? gmeta : l2c, gmeta != NULL ? -1 : vocab, &t)) != 0)
		return rc;
	memset(&j, 0, sizeof(j));
	j.t = t;
	j.flags = (no_bos ? 0 : MU_TOK_BOS) | (no_special ? 0 : MU_TOK_SPECIAL);
	j.json = json || bat;
	j.keep_special = keep;
	j.repeat = repeat;
	if (stats)
		fprintf(stderr, "tokenize: loaded in %.1f ms (%d ids)\n", now_ms() - t0,
		        (int)mu_tokenizer_vocab(t));
	in = text != NULL ? mu__strdup(text) : slurp("-", &len);
	if (text != NULL)
		len = strlen(text);
	if (in == NULL) {
		fprintf(stderr, "muster tokenize: cannot read the input\n");
		mu_tokenizer_free(t);
		return 1;
	}
	rc = convert(&j, decode, bat, json, in, len);
	if (stats && !decode)
		fprintf(stderr, "tokenize: %zu bytes -> %zu tokens in %.1f ms (%.2f MB/s)\n", j.bytes,
		        j.tokens, j.enc_ms, j.enc_ms > 0 ? (double)j.bytes / 1e3 / j.enc_ms : 0.0);
	mu__free(in);
	mu_tokenizer_free(t);
	return rc;
}
