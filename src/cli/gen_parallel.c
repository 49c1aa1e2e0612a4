/* SPDX-License-Identifier: MIT */
/*
 * `muster generate --parallel S --prompt-file FILE`: every line of FILE is
 * a prompt, S of them in flight at once through the engine (batched on
 * each stage, pipelined over the stages). Each completion prints when it
 * ends (the engine calls back from its one thread, so printing needs no
 * lock); the last line gives the aggregate decode rate.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "muster/common.h"
#include "cli/gen_int.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/json_int.h"
#include "core/time_int.h"
#include "pipeline/llm/cluster_int.h"
#include "pipeline/llm/coord_int.h"
#include "pipeline/llm/link_int.h"

typedef struct {
	int index;
	int stream;           /* print the text as it comes (one prompt) */
	const mu__tok_t *tok;
	mu__textout_t to;
	mu__buf_t text;
	cJSON *ids;
	int rc, stop;
	char why[512];
	mu__gen_stats_t st;
	int json;
} par_seq_t;

static int par_token(void *ud, int32_t id)
{
	par_seq_t *p = ud;
	const char *text;
	size_t n;

	mu__textout_feed(&p->to, id, &text, &n);
	cJSON_AddItemToArray(p->ids, cJSON_CreateNumber(id));
	if (p->stream) {
		if (n > 0 && fwrite(text, 1, n, stdout) == n)
			fflush(stdout);
		return 0;
	}
	return mu__buf_append(&p->text, text, n) != 0;
}

static const char *stop_name(int s)
{
	return s == MU__STOP_EOS ? "eos" : s == MU__STOP_LENGTH ? "length" : "context";
}

static void par_done(void *ud, int rc, const char *why, int stop, const mu__gen_stats_t *st)
{
	par_seq_t *p = ud;
	const char *text;
	size_t n;

	mu__textout_flush(&p->to, &text, &n);
	if (p->stream)
		fwrite(text, 1, n, stdout);
	else
		mu__buf_append(&p->text, text, n);
	p->rc = rc;
	p->stop = stop;
	p->st = *st;
	snprintf(p->why, sizeof(p->why), "%s", why);
	if (p->json || p->stream)
		return;
	if (rc != 0)
		printf("--- %d: failed: %s\n", p->index, why);
	else
		printf("--- %d: %d tokens, stop: %s\n%.*s\n", p->index, st->new_tokens, stop_name(stop),
		       (int)p->text.len, p->text.data != NULL ? p->text.data : "");
	fflush(stdout);
}

static void report(gen_run_t *r, par_seq_t *p, int n, double wall_ms, mu__eng_t *e, int nl)
{
	int i, toks = 0, failed = 0;
	cJSON *j = r->json ? cJSON_CreateArray() : NULL;

	for (i = 0; i < n; i++) {
		toks += p[i].st.new_tokens;
		failed += p[i].rc != 0;
		if (j != NULL) {
			cJSON *o = cJSON_CreateObject();
			mu__buf_t t;

			mu__buf_init(&t, (size_t)1 << 30);
			mu__utf8_repair(p[i].text.data != NULL ? p[i].text.data : "", p[i].text.len, &t);
			cJSON_AddStringToObject(o, "text", t.data != NULL ? t.data : "");
			mu__buf_free(&t);
			cJSON_AddItemToObject(o, "tokens", p[i].ids);
			p[i].ids = NULL;
			cJSON_AddStringToObject(o, "stop", p[i].rc != 0 ? "error" : stop_name(p[i].stop));
			if (p[i].rc != 0)
				cJSON_AddStringToObject(o, "error", p[i].why);
			cJSON_AddNumberToObject(o, "ttft_ms", p[i].st.ttft_s * 1e3);
			cJSON_AddItemToArray(j, o);
		}
	}
	if (j != NULL) {
		char *s = cJSON_PrintUnformatted(j);

		printf("%s\n", s != NULL ? s : "[]");
		cJSON_free(s);
		cJSON_Delete(j);
	}
	fprintf(stderr, "%d sequences (%d in flight), %d new tokens in %.1f ms: %.2f tok/s in all "
	        "| %s\n", n, r->a.parallel, toks, wall_ms, toks / (wall_ms / 1e3), r->where);
	for (i = 0; i < nl; i++) {
		mu__eng_stage_stats_t st;

		mu__eng_stage_stats(e, i, &st);
		fprintf(stderr, "  link %d: %llu batches, %.2f rows each, busy %.1f ms (%.0f%%)\n", i,
		        (unsigned long long)st.batches, st.batches ? (double)st.rows / st.batches : 0.0,
		        st.busy_ms, wall_ms > 0 ? 100 * st.busy_ms / wall_ms : 0.0);
	}
	(void)failed;
}

/* Split text into its non-empty lines (in place). */
static int lines(char *text, char ***out)
{
	int n = 0, cap = 16;
	char **v = mu__malloc((size_t)cap * sizeof(*v)), *save = NULL;

	for (char *t = strtok_r(text, "\n", &save); v != NULL && t != NULL;
	     t = strtok_r(NULL, "\n", &save)) {
		if (n == cap && (v = mu__realloc(v, (size_t)(cap *= 2) * sizeof(*v))) == NULL)
			break;
		v[n++] = t;
	}
	*out = v;
	return v != NULL ? n : -1;
}

static int submit_all(gen_run_t *r, mu__eng_t *e, par_seq_t *p, char **prompts,
                      const int32_t *given, int32_t ngiven, int n)
{
	mu__eng_req_t q;
	size_t neos;
	int i, rc;

	for (i = 0; i < n; i++) {
		int32_t *ids = NULL;
		size_t nid = 0;

		memset(&q, 0, sizeof(q));
		if (given != NULL) {
			ids = mu__memdup(given, (size_t)ngiven * sizeof(int32_t));
			nid = (size_t)ngiven;
			rc = ids == NULL ? MU_ENOMEM : 0;
		} else {
			rc = mu__tok_encode(r->tok, prompts[i], strlen(prompts[i]),
			                    (r->a.no_bos ? 0 : MU__TOK_BOS) | MU__TOK_SPECIAL, &ids, &nid);
		}
		if (rc != 0 || mu__textout_init(&p[i].to, r->tok, ids, nid) != 0) {
			mu__free(ids);
			return MU_ENOMEM;
		}
		q.prompt = ids;
		q.nprompt = (int32_t)nid;
		q.ctx = r->g.ctx;
		q.max_tokens = r->g.max_tokens;
		q.sample = r->g.sample;
		q.sample.seed += (uint64_t)i; /* each line its own stream, reproducibly */
		q.eos = mu__tok_eos(r->tok, &neos);
		q.neos = neos;
		q.ignore_eos = r->g.ignore_eos;
		q.on_token = par_token;
		q.on_done = par_done;
		q.ud = &p[i];
		rc = mu__eng_submit(e, &q, NULL);
		mu__free(ids);
		if (rc != 0) {
			fprintf(stderr, "muster generate: prompt %d (%zu tokens) cannot run: %s\n", i, nid,
			        rc == MU_EARG ? "empty, or longer than --ctx" : mu_strerror(rc));
			return rc;
		}
	}
	return 0;
}

/* The one prompt's figures (and the recoveries), as the plain run gives
 * them. */
static void report_one(gen_run_t *r, par_seq_t *p, mu__eng_t *e)
{
	mu__eng_stats_t es;
	const mu__gen_stats_t *st = &p->st;

	mu__eng_stats(e, &es);
	if (r->json) {
		cJSON *j = cJSON_CreateObject();
		mu__buf_t t;
		char *s;

		mu__buf_init(&t, (size_t)1 << 30);
		mu__utf8_repair(p->text.data != NULL ? p->text.data : "", p->text.len, &t);
		cJSON_AddStringToObject(j, "text", t.data != NULL ? t.data : "");
		mu__buf_free(&t);
		cJSON_AddItemToObject(j, "tokens", p->ids);
		p->ids = NULL;
		cJSON_AddNumberToObject(j, "prompt_tokens", st->prompt_tokens);
		cJSON_AddNumberToObject(j, "new_tokens", st->new_tokens);
		cJSON_AddNumberToObject(j, "ttft_ms", st->ttft_s * 1e3);
		cJSON_AddNumberToObject(j, "decode_tok_s", st->decode_s > 0 ? st->decode_steps / st->decode_s : 0);
		cJSON_AddStringToObject(j, "stop", stop_name(p->stop));
		cJSON_AddNumberToObject(j, "recoveries", es.recoveries);
		cJSON_AddNumberToObject(j, "recovery_ms", es.recovery_ms);
		cJSON_AddNumberToObject(j, "replayed_positions", (double)es.replayed);
		gen_run_json(r, j);
		s = cJSON_PrintUnformatted(j);
		printf("%s\n", s != NULL ? s : "{}");
		cJSON_free(s);
		cJSON_Delete(j);
		return;
	}
	fprintf(stderr, "\nprompt %d tokens, first token after %.1f ms | decode %d tokens in %.1f ms "
	        "(%.2f tok/s) | stop: %s | %s\n", st->prompt_tokens, st->ttft_s * 1e3,
	        st->decode_steps, st->decode_s * 1e3,
	        st->decode_s > 0 ? st->decode_steps / st->decode_s : 0.0, stop_name(p->stop),
	        r->where);
	if (es.recoveries > 0)
		fprintf(stderr, "recovered %d lost device%s in %.0f ms, replaying %llu positions; the "
		        "text went on where it was\n", es.recoveries, es.recoveries == 1 ? "" : "s",
		        es.recovery_ms, (unsigned long long)es.replayed);
}

static int run_engine(gen_run_t *r, char **prompts, const int32_t *ids, int32_t nids, int n,
                      int stream)
{
	mu__eng_t *e = NULL;
	par_seq_t *p = mu__calloc((size_t)n, sizeof(*p));
	int i, rc, s = stream ? 1 : r->a.parallel;
	double t0;

	rc = p == NULL ? MU_ENOMEM : gen_run_engine(r, s, &e);
	for (i = 0; rc == 0 && i < n; i++) {
		p[i].index = i;
		p[i].stream = stream && !r->json;
		p[i].tok = r->tok;
		p[i].json = r->json;
		p[i].ids = cJSON_CreateArray();
		mu__buf_init(&p[i].text, (size_t)64 << 20);
	}
	t0 = mu__clock_ms();
	if (rc == 0 && (rc = submit_all(r, e, p, prompts, ids, nids, n)) == 0)
		mu__eng_drain(e);
	if (rc == 0 && stream && p[0].rc != 0)
		fprintf(stderr, "\nmuster generate: %s\n", p[0].why);
	else if (rc == 0 && stream)
		report_one(r, &p[0], e);
	else if (rc == 0)
		report(r, p, n, mu__clock_ms() - t0, e, r->nlinks);
	for (i = 0; p != NULL && i < n; i++) {
		rc = rc != 0 ? rc : p[i].rc;
		mu__buf_free(&p[i].text);
		mu__textout_free(&p[i].to);
		cJSON_Delete(p[i].ids);
	}
	mu__eng_free(e);
	mu__free(p);
	if (rc == MU_ENOMEM)
		fprintf(stderr, "muster generate: out of memory\n");
	return rc != 0;
}

int gen_run_parallel(gen_run_t *r, char *text)
{
	char **prompts = NULL;
	int n = lines(text, &prompts), rc;

	if (n <= 0) {
		fprintf(stderr, "muster generate: --parallel needs --prompt-file with one prompt a line\n");
		mu__free(prompts);
		return 2;
	}
	rc = run_engine(r, prompts, NULL, 0, n, 0);
	mu__free(prompts);
	return rc;
}

int gen_run_engine_one(gen_run_t *r, const char *text, size_t len, const int32_t *ids,
                       int32_t nids)
{
	char *copy = mu__strndup(text, len);
	int rc;

	if (copy == NULL)
		return 1;
	rc = run_engine(r, &copy, ids, nids, 1, 1);
	mu__free(copy);
	return rc;
}
