/* SPDX-License-Identifier: MIT */
/*
 * `muster generate --parallel S --prompt-file FILE`: every line of FILE is
 * a prompt, S of them in flight at once on one handle (batched on each
 * stage, pipelined over the stages). Each completion prints when it ends
 * (the handle calls back from its one thread, so printing needs no lock);
 * the last lines give the aggregate decode rate and each stage's batches.
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

typedef struct {
	int index;
	mu__buf_t text;
	cJSON *ids;
	int rc;
	char why[512];
	mu_llm_stats_t st;
	int json;
} par_seq_t;

static int par_token(void *ud, int32_t id, const char *text, size_t n)
{
	par_seq_t *p = ud;

	if (id >= 0)
		cJSON_AddItemToArray(p->ids, cJSON_CreateNumber(id));
	return mu__buf_append(&p->text, text, n) != 0;
}

static void par_done(void *ud, int rc, const mu_llm_stats_t *st, const char *why)
{
	par_seq_t *p = ud;

	p->rc = rc;
	p->st = *st;
	snprintf(p->why, sizeof(p->why), "%s", why);
	if (p->json)
		return;
	if (rc != 0)
		printf("--- %d: failed: %s\n", p->index, why);
	else
		printf("--- %d: %d tokens, stop: %s\n%.*s\n", p->index, st->new_tokens,
		       gen_stop_name(st->stop), (int)p->text.len, p->text.data != NULL ? p->text.data : "");
	fflush(stdout);
}

static void report(gen_run_t *r, par_seq_t *p, int n, double wall_ms)
{
	int i, toks = 0;
	cJSON *j = r->json ? cJSON_CreateArray() : NULL;

	for (i = 0; i < n; i++) {
		toks += p[i].st.new_tokens;
		if (j != NULL) {
			cJSON *o = cJSON_CreateObject();
			mu__buf_t t;

			mu__buf_init(&t, (size_t)1 << 30);
			mu__utf8_repair(p[i].text.data != NULL ? p[i].text.data : "", p[i].text.len, &t);
			cJSON_AddStringToObject(o, "text", t.data != NULL ? t.data : "");
			mu__buf_free(&t);
			cJSON_AddItemToObject(o, "tokens", p[i].ids);
			p[i].ids = NULL;
			cJSON_AddStringToObject(o, "stop", p[i].rc != 0 ? "error" : gen_stop_name(p[i].st.stop));
			if (p[i].rc != 0)
				cJSON_AddStringToObject(o, "error", p[i].why);
			cJSON_AddNumberToObject(o, "ttft_ms", p[i].st.ttft_ms);
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
	        "| %s\n", n, r->a.parallel, toks, wall_ms, toks / (wall_ms / 1e3), r->info.where);
	for (i = 0; i < r->info.stages; i++) {
		mu_llm_stage_info_t st;

		mu_llm_stage_info(r->llm, i, &st);
		fprintf(stderr, "  link %d: %llu batches, %.2f rows each, busy %.1f ms (%.0f%%)\n", i,
		        (unsigned long long)st.batches, st.batches ? (double)st.rows / st.batches : 0.0,
		        st.busy_ms, wall_ms > 0 ? 100 * st.busy_ms / wall_ms : 0.0);
	}
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

/* Every prompt to the handle; on a refusal the ones before are
 * cancelled (their callbacks still come: the caller drains). */
static int submit_all(gen_run_t *r, par_seq_t *p, char **prompts, int n)
{
	uint64_t *id = mu__calloc((size_t)n, sizeof(*id));
	mu_llm_gen_opts_t g;
	char why[1024] = "";
	int i, rc = id == NULL ? MU_ENOMEM : 0;

	for (i = 0; rc == 0 && i < n; i++) {
		gen_run_request(r, &g);
		g.seed += (uint64_t)i; /* each line its own stream, reproducibly */
		g.on_token = par_token;
		g.on_done = par_done;
		g.ud = &p[i];
		rc = mu_llm_submit(r->llm, prompts[i], strlen(prompts[i]), &g, &id[i], why, sizeof(why));
		if (rc != 0)
			fprintf(stderr, "muster generate: prompt %d cannot run: %s\n", i,
			        why[0] ? why : mu_strerror(rc));
	}
	for (int k = 0; rc != 0 && id != NULL && k < i - 1; k++)
		mu_llm_cancel(r->llm, id[k]);
	mu__free(id);
	return rc;
}

static int run_all(gen_run_t *r, char **prompts, int n)
{
	par_seq_t *p = mu__calloc((size_t)n, sizeof(*p));
	int i, rc;
	double t0;

	for (i = 0; p != NULL && i < n; i++) {
		p[i].index = i;
		p[i].json = r->json;
		p[i].ids = cJSON_CreateArray();
		mu__buf_init(&p[i].text, (size_t)64 << 20);
	}
	t0 = mu__clock_ms();
	rc = p == NULL ? MU_ENOMEM : submit_all(r, p, prompts, n);
	mu_llm_drain(r->llm); /* the callbacks of what was submitted have run */
	if (rc == 0)
		report(r, p, n, mu__clock_ms() - t0);
	for (i = 0; p != NULL && i < n; i++) {
		rc = rc != 0 ? rc : p[i].rc;
		mu__buf_free(&p[i].text);
		cJSON_Delete(p[i].ids);
	}
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
	rc = run_all(r, prompts, n);
	mu__free(prompts);
	return rc;
}
