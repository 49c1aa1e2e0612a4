/* SPDX-License-Identifier: MIT */
/*
 * The OpenAI API's JSON (oai_int.h). Decoding checks every field it uses
 * for type and range and names the field in the error, as the API does.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/json_int.h"
#include "serve/oai_int.h"

int mu__oai_fail(mu__oai_err_t *e, int status, const char *type, const char *param,
                 const char *code, const char *fmt, ...)
{
	va_list ap;

	e->status = status;
	e->type = type;
	e->param = NULL;
	if (param != NULL) {
		snprintf(e->pbuf, sizeof(e->pbuf), "%s", param);
		e->param = e->pbuf;
	}
	e->code = code;
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	return -1;
}

#define BAD(e, param, ...) mu__oai_fail(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

/* A string that carries NULs (\\u0000, mu__json_parse_nul): its bytes
 * back in place, and their number. */
static const char *text_of(const cJSON *v, size_t *len)
{
	*len = mu__json_nul_back(v->valuestring);
	return v->valuestring;
}

/* A string that cannot carry a NUL (a C string further on): refused. */
static int no_nul(const cJSON *v, const char *param, mu__oai_err_t *e)
{
	if (strchr(v->valuestring, 0xFF) == NULL)
		return 0;
	return BAD(e, param, "'%s' cannot hold a NUL (\\u0000): only prompts and message "
	           "contents can", param);
}

/* ---- decoding ---- */

static const cJSON *field(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsNull(v) ? NULL : v;
}

static int get_bool(const cJSON *o, const char *name, int *out, mu__oai_err_t *e)
{
	const cJSON *v = field(o, name);

	if (v == NULL)
		return 0;
	if (!cJSON_IsBool(v))
		return BAD(e, name, "'%s' must be a boolean", name);
	*out = cJSON_IsTrue(v);
	return 0;
}

static int get_num(const cJSON *o, const char *name, double lo, double hi, int *has, double *out,
                   mu__oai_err_t *e)
{
	const cJSON *v = field(o, name);

	if (v == NULL)
		return 0;
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
		return BAD(e, name, "'%s' must be a number", name);
	if (v->valuedouble < lo || v->valuedouble > hi)
		return BAD(e, name, "'%s' must be between %g and %g, got %g", name, lo, hi,
		           v->valuedouble);
	*has = 1;
	*out = v->valuedouble;
	return 0;
}

static int get_int(const cJSON *o, const char *name, double lo, double hi, int *has, int64_t *out,
                   mu__oai_err_t *e)
{
	const cJSON *v = field(o, name);

	if (v == NULL)
		return 0;
	if (!mu__json_is_int(v, -9.2e18, 9.2e18))
		return BAD(e, name, "'%s' must be an integer", name);
	if (v->valuedouble < lo || v->valuedouble > hi)
		return BAD(e, name, "'%s' must be between %.0f and %.0f, got %.0f", name, lo, hi,
		           v->valuedouble);
	*has = 1;
	*out = (int64_t)v->valuedouble;
	return 0;
}

/*
 * Every field a request may hold, and what becomes of it. HONOURED: read
 * by the decoder. IGNORED: does not change the text. NEUTRAL: we cannot
 * honour it, so it is refused unless set to the value that asks for
 * nothing (num, for a number; false; or an empty string, array or
 * object). CHECKED: not honoured, judged by unsupported() below. A field
 * that is not here is refused as unknown.
 */
enum { HONOURED, IGNORED, NEUTRAL, CHECKED };
#define BOTH 3
#define COMPL 1
#define CHAT 2

static const struct {
	const char *name;
	int kinds, what;
	double num;   /* NEUTRAL: the neutral number (NAN: takes no number) */
} fields[] = {
	{"model", BOTH, HONOURED, 0}, {"prompt", COMPL, HONOURED, 0},
	{"messages", CHAT, HONOURED, 0}, {"max_tokens", BOTH, HONOURED, 0},
	{"max_completion_tokens", BOTH, HONOURED, 0}, {"temperature", BOTH, HONOURED, 0},
	{"top_p", BOTH, HONOURED, 0}, {"top_k", BOTH, HONOURED, 0}, {"seed", BOTH, HONOURED, 0},
	{"stop", BOTH, HONOURED, 0}, {"stream", BOTH, HONOURED, 0},
	{"stream_options", BOTH, HONOURED, 0}, {"chat_template_kwargs", CHAT, HONOURED, 0},
	{"user", BOTH, IGNORED, 0}, {"metadata", BOTH, IGNORED, 0}, {"store", BOTH, IGNORED, 0},
	{"service_tier", BOTH, IGNORED, 0}, {"parallel_tool_calls", CHAT, IGNORED, 0},
	{"n", BOTH, CHECKED, 0}, {"best_of", BOTH, CHECKED, 0}, {"echo", BOTH, CHECKED, 0},
	{"logprobs", BOTH, CHECKED, 0}, {"top_logprobs", BOTH, CHECKED, 0},
	{"tools", BOTH, CHECKED, 0}, {"functions", BOTH, CHECKED, 0},
	{"tool_choice", BOTH, CHECKED, 0}, {"logit_bias", BOTH, CHECKED, 0},
	{"suffix", BOTH, CHECKED, 0}, {"response_format", BOTH, CHECKED, 0},
	{"presence_penalty", BOTH, CHECKED, 0}, {"frequency_penalty", BOTH, CHECKED, 0},
	/* other servers' extensions (vLLM, llama.cpp), not implemented */
	{"min_p", BOTH, NEUTRAL, 0}, {"repetition_penalty", BOTH, NEUTRAL, 1},
	{"repeat_penalty", BOTH, NEUTRAL, 1}, {"typical_p", BOTH, NEUTRAL, 1},
	{"tfs_z", BOTH, NEUTRAL, 1}, {"mirostat", BOTH, NEUTRAL, 0},
	{"mirostat_tau", BOTH, NEUTRAL, NAN}, {"mirostat_eta", BOTH, NEUTRAL, NAN},
	{"min_tokens", BOTH, NEUTRAL, 0}, {"ignore_eos", BOTH, NEUTRAL, NAN},
	{"stop_token_ids", BOTH, NEUTRAL, NAN}, {"grammar", BOTH, NEUTRAL, NAN},
	{"json_schema", BOTH, NEUTRAL, NAN}, {"guided_json", BOTH, NEUTRAL, NAN},
	{"guided_regex", BOTH, NEUTRAL, NAN}, {"guided_choice", BOTH, NEUTRAL, NAN},
	{"guided_grammar", BOTH, NEUTRAL, NAN}, {"length_penalty", BOTH, NEUTRAL, 1},
	{"use_beam_search", BOTH, NEUTRAL, NAN}, {"n_predict", BOTH, NEUTRAL, NAN},
	{"dry_multiplier", BOTH, NEUTRAL, 0}, {"xtc_probability", BOTH, NEUTRAL, 0},
	{"penalty_last_n", BOTH, NEUTRAL, NAN}, {"n_probs", BOTH, NEUTRAL, 0},
	{"prompt_logprobs", BOTH, NEUTRAL, NAN}, {"skip_special_tokens", BOTH, NEUTRAL, NAN},
	{"include_stop_str_in_output", BOTH, NEUTRAL, NAN},
	{"add_generation_prompt", CHAT, NEUTRAL, NAN}, {"continue_final_message", CHAT, NEUTRAL, NAN},
	{"chat_template", CHAT, NEUTRAL, NAN},
};

static int neutral(const cJSON *v, double num)
{
	if (cJSON_IsNumber(v))
		return !isnan(num) && v->valuedouble == num;
	if (cJSON_IsFalse(v))
		return 1;
	if (cJSON_IsString(v))
		return v->valuestring[0] == 0;
	return (cJSON_IsArray(v) || cJSON_IsObject(v)) && cJSON_GetArraySize(v) == 0;
}

/* Each member of the request object against the table. */
static int known_fields(const cJSON *o, mu__oai_kind_t kind, mu__oai_err_t *e)
{
	int k = kind == MU__OAI_CHAT ? CHAT : COMPL;
	const cJSON *v;

	cJSON_ArrayForEach(v, o) {
		size_t i;

		for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
			if (strcmp(fields[i].name, v->string) == 0)
				break;
		if (i == sizeof(fields) / sizeof(fields[0]) || !(fields[i].kinds & k))
			return BAD(e, v->string, "'%.60s' is not a field of %s that this server knows "
			           "(an unknown field is refused, not ignored)", v->string,
			           kind == MU__OAI_CHAT ? "/v1/chat/completions" : "/v1/completions");
		if (fields[i].what == NEUTRAL && !cJSON_IsNull(v) && !neutral(v, fields[i].num))
			return BAD(e, v->string, "'%s' is not supported by this server (a request that "
			           "sets it would not get what it asks for)", v->string);
	}
	return 0;
}

/* The members of an object inside a request (where) other than names
 * (NULL-terminated) are refused, as unknown top-level fields are. */
static int only(const cJSON *o, const char *const *names, const char *param, const char *where,
                mu__oai_err_t *e)
{
	const cJSON *v;

	cJSON_ArrayForEach(v, o) {
		size_t i;

		for (i = 0; names[i] != NULL && strcmp(names[i], v->string) != 0; i++)
			;
		if (names[i] == NULL)
			return BAD(e, param, "%s: '%.60s' is not supported by this server (an unknown "
			           "field is refused, not ignored)", where, v->string);
	}
	return 0;
}

/* The CHECKED fields: refused when set to anything but their neutral
 * value. */
static int unsupported(const cJSON *o, mu__oai_kind_t kind, mu__oai_err_t *e)
{
	static const char *nonempty[] = {"tools", "functions", "logit_bias", "suffix"};
	static const char *zero[] = {"presence_penalty", "frequency_penalty"};
	const cJSON *v;
	size_t i;

	if ((v = field(o, "n")) != NULL && !(mu__json_is_int(v, 1, 1)))
		return BAD(e, "n", "only n=1 is supported (one choice per request)");
	if ((v = field(o, "best_of")) != NULL && !(mu__json_is_int(v, 1, 1)))
		return BAD(e, "best_of", "only best_of=1 is supported");
	if ((v = field(o, "echo")) != NULL && !cJSON_IsFalse(v))
		return BAD(e, "echo", "echo is not supported");
	if ((v = field(o, "logprobs")) != NULL && !cJSON_IsFalse(v))
		return BAD(e, "logprobs", "logprobs are not supported");
	if ((v = field(o, "top_logprobs")) != NULL)
		return BAD(e, "top_logprobs", "logprobs are not supported");
	for (i = 0; i < sizeof(nonempty) / sizeof(nonempty[0]); i++) {
		v = field(o, nonempty[i]);
		if (v != NULL && !(cJSON_IsString(v) && v->valuestring[0] == 0) &&
		    !((cJSON_IsArray(v) || cJSON_IsObject(v)) && cJSON_GetArraySize(v) == 0))
			return BAD(e, nonempty[i], "'%s' is not supported", nonempty[i]);
	}
	for (i = 0; i < sizeof(zero) / sizeof(zero[0]); i++)
		if ((v = field(o, zero[i])) != NULL && !(cJSON_IsNumber(v) && v->valuedouble == 0))
			return BAD(e, zero[i], "'%s' is not supported (only 0)", zero[i]);
	if ((v = field(o, "tool_choice")) != NULL &&
	    !(cJSON_IsString(v) && (strcmp(v->valuestring, "none") == 0 ||
	                            strcmp(v->valuestring, "auto") == 0)))
		return BAD(e, "tool_choice", "tools are not supported");
	if ((v = field(o, "response_format")) != NULL) {
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");

		if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") != 0)
			return BAD(e, "response_format", "only response_format {\"type\": \"text\"} is "
			           "supported");
	}
	(void)kind;
	return 0;
}

static int get_stop(const cJSON *o, mu__oai_req_t *r, mu__oai_err_t *e)
{
	const cJSON *v = field(o, "stop"), *it;

	if (v == NULL)
		return 0;
	if (cJSON_IsString(v)) {
		r->stop[r->nstop++] = v->valuestring;
		return no_nul(v, "stop", e);
	}
	if (!cJSON_IsArray(v))
		return BAD(e, "stop", "'stop' must be a string or an array of strings");
	if (cJSON_GetArraySize(v) > MU__STOPSCAN_MAX)
		return BAD(e, "stop", "'stop' holds at most %d strings", MU__STOPSCAN_MAX);
	cJSON_ArrayForEach(it, v) {
		if (!cJSON_IsString(it))
			return BAD(e, "stop", "'stop' must be a string or an array of strings");
		if (no_nul(it, "stop", e))
			return -1;
		r->stop[r->nstop++] = it->valuestring;
	}
	return 0;
}

static int get_sampling(const cJSON *o, mu__oai_req_t *r, mu__oai_err_t *e)
{
	int has = 0, has_max = 0;
	int64_t k = 0, mt = -1, mct = -1, seed = 0;
	const cJSON *so;

	if (get_num(o, "temperature", 0, 2, &r->has_temperature, &r->temperature, e) ||
	    get_num(o, "top_p", 0, 1, &r->has_top_p, &r->top_p, e) ||
	    get_int(o, "top_k", -1, 1e9, &r->has_top_k, &k, e) ||
	    get_int(o, "seed", -9.2e18, 9.2e18, &r->has_seed, &seed, e) ||
	    get_int(o, "max_tokens", 1, 1e9, &has_max, &mt, e) ||
	    get_int(o, "max_completion_tokens", 1, 1e9, &has, &mct, e) ||
	    get_bool(o, "stream", &r->stream, e) || get_stop(o, r, e) || unsupported(o, r->kind, e))
		return -1;
	r->top_k = k < 0 ? 0 : (int)k;
	r->seed = (uint64_t)seed;
	r->max_tokens = mct >= 0 ? mct : mt;
	if ((so = field(o, "stream_options")) != NULL) {
		if (!r->stream)
			return BAD(e, "stream_options", "'stream_options' is only allowed when 'stream' "
			           "is true");
		if (!cJSON_IsObject(so))
			return BAD(e, "stream_options", "'stream_options' must be an object");
		if (get_bool(so, "include_usage", &r->include_usage, e) ||
		    only(so, (const char *const[]){"include_usage", NULL}, "stream_options",
		         "stream_options", e))
			return -1;
	}
	return 0;
}

/* A token id array (the API's "array of tokens" prompt). */
static int get_ids(const cJSON *v, int32_t vocab, mu__oai_req_t *r, mu__oai_err_t *e)
{
	int n = cJSON_GetArraySize(v), i = 0;
	const cJSON *it;

	if (n < 1 || n > 1 << 20)
		return BAD(e, "prompt", "a prompt of token ids holds 1 to 1048576 of them");
	if ((r->prompt_ids = mu__calloc((size_t)n, sizeof(int32_t))) == NULL)
		return mu__oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
	cJSON_ArrayForEach(it, v) {
		if (!mu__json_is_int(it, 0, vocab - 1))
			return BAD(e, "prompt", "prompt[%d] is not a token id of this model (0 to %d)", i,
			           vocab - 1);
		r->prompt_ids[i++] = (int32_t)it->valuedouble;
	}
	r->nprompt_ids = (size_t)n;
	return 0;
}

static int get_prompt(const cJSON *o, int32_t vocab, mu__oai_req_t *r, mu__oai_err_t *e)
{
	const cJSON *v = field(o, "prompt"), *a;

	if (v == NULL)
		return BAD(e, "prompt", "'prompt' is required");
	if (cJSON_IsString(v)) {
		r->prompt = text_of(v, &r->prompt_len);
		return 0;
	}
	if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 1)
		return BAD(e, "prompt", "'prompt' must be a string, an array of one string, or an "
		           "array of token ids");
	a = v->child;
	if (cJSON_IsNumber(a))
		return get_ids(v, vocab, r, e);
	if (cJSON_GetArraySize(v) > 1)
		return BAD(e, "prompt", "one prompt per request is supported (n=1)");
	if (cJSON_IsString(a)) {
		r->prompt = text_of(a, &r->prompt_len);
		return 0;
	}
	if (cJSON_IsArray(a))
		return get_ids(a, vocab, r, e);
	return BAD(e, "prompt", "'prompt' must be a string, an array of one string, or an array of "
	           "token ids");
}

/* A message's content: a string, null, or text parts (joined with "\n",
 * as vLLM does for models whose template takes a string). */
static int get_content(const cJSON *c, int i, mu__oai_req_t *r, const char **out,
                       size_t *len, mu__oai_err_t *e)
{
	const cJSON *p;
	mu__buf_t b;

	*len = 0;
	if (c == NULL) {
		*out = "";
		return 0;
	}
	if (cJSON_IsString(c)) {
		*out = text_of(c, len);
		return 0;
	}
	if (!cJSON_IsArray(c))
		return BAD(e, "messages", "messages[%d].content must be a string or an array of text "
		           "parts", i);
	mu__buf_init(&b, (size_t)64 << 20);
	cJSON_ArrayForEach(p, c) {
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "type");
		const cJSON *x = cJSON_GetObjectItemCaseSensitive(p, "text");

		if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") != 0 || !cJSON_IsString(x)) {
			mu__buf_free(&b);
			return BAD(e, "messages", "messages[%d].content: only parts of type \"text\" are "
			           "supported", i);
		}
		if ((b.len > 0 && mu__buf_appendc(&b, '\n') != 0) ||
		    mu__buf_append(&b, x->valuestring, mu__json_nul_back(x->valuestring)) != 0) {
			mu__buf_free(&b);
			return mu__oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
		}
	}
	*out = r->joined[i] = b.data != NULL ? mu__buf_take(&b, len) : mu__strdup("");
	return *out != NULL ? 0 : mu__oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
}

static int get_messages(const cJSON *o, mu__oai_req_t *r, mu__oai_err_t *e)
{
	const cJSON *v = field(o, "messages"), *m;
	char where[32];
	int n, i = 0;

	if (v == NULL)
		return BAD(e, "messages", "'messages' is required");
	if (!cJSON_IsArray(v) || (n = cJSON_GetArraySize(v)) < 1)
		return BAD(e, "messages", "'messages' must be a non-empty array");
	if (n > MU__OAI_MAX_MESSAGES)
		return BAD(e, "messages", "at most %d messages", MU__OAI_MAX_MESSAGES);
	r->msgs = mu__calloc((size_t)n, sizeof(*r->msgs));
	r->joined = mu__calloc((size_t)n, sizeof(*r->joined));
	if (r->msgs == NULL || r->joined == NULL)
		return mu__oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
	r->nmsgs = n;
	cJSON_ArrayForEach(m, v) {
		const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
		const cJSON *rc = field(m, "reasoning_content");

		if (!cJSON_IsObject(m) || !cJSON_IsString(role))
			return BAD(e, "messages", "messages[%d] must be an object with a string 'role'", i);
		if (no_nul(role, "messages", e))
			return -1;
		/* OpenAI's newer name for the system role. */
		r->msgs[i].role = strcmp(role->valuestring, "developer") == 0 ? "system"
		                                                               : role->valuestring;
		if (rc != NULL && !cJSON_IsString(rc))
			return BAD(e, "messages", "messages[%d].reasoning_content must be a string", i);
		r->msgs[i].reasoning = rc != NULL ? text_of(rc, &r->msgs[i].reasoning_len) : NULL;
		if (field(m, "tool_calls") != NULL)
			return BAD(e, "messages", "messages[%d]: tool calls are not supported", i);
		snprintf(where, sizeof(where), "messages[%d]", i);
		/* name: our families' templates write nothing for it */
		if (only(m, (const char *const[]){"role", "content", "reasoning_content", "name",
		                                   "tool_calls", NULL}, "messages", where, e))
			return -1;
		if (get_content(field(m, "content"), i, r, &r->msgs[i].content,
		                &r->msgs[i].content_len, e))
			return -1;
		i++;
	}
	return 0;
}

int mu__oai_decode(mu__oai_kind_t kind, const char *body, size_t len, int32_t vocab,
                   mu__oai_req_t *r, mu__oai_err_t *e)
{
	const cJSON *v, *kw;
	int rc, had_nul;

	memset(r, 0, sizeof(*r));
	r->kind = kind;
	r->max_tokens = -1;
	r->enable_thinking = -1;
	rc = mu__json_parse_nul(body, len, MU__OAI_MAX_VALUES, &r->root, &had_nul);
	if (rc == MU_ETOOBIG)
		return BAD(e, NULL, "the body holds more than %d JSON values (a prompt of token ids "
		           "holds at most 1048576)", MU__OAI_MAX_VALUES);
	if (rc == MU_ENOMEM)
		return mu__oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
	if (rc != 0 || !cJSON_IsObject(r->root))
		return BAD(e, NULL, "the body is not a JSON object (or not UTF-8, or nested deeper "
		           "than %d)", MU_JSON_MAX_DEPTH);
	if ((v = field(r->root, "model")) != NULL && !cJSON_IsString(v))
		return BAD(e, "model", "'model' must be a string");
	if (v != NULL && no_nul(v, "model", e))
		return -1;
	r->model = v != NULL ? v->valuestring : NULL;
	if (get_sampling(r->root, r, e))
		return -1;
	if ((kw = field(r->root, "chat_template_kwargs")) != NULL) {
		if (!cJSON_IsObject(kw))
			return BAD(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
		if (get_bool(kw, "enable_thinking", &r->enable_thinking, e) ||
		    only(kw, (const char *const[]){"enable_thinking", NULL}, "chat_template_kwargs",
		         "chat_template_kwargs", e))
			return -1;
	}
	if (kind == MU__OAI_CHAT ? get_messages(r->root, r, e) : get_prompt(r->root, vocab, r, e))
		return -1;
	/* last: a missing 'messages' is named before a stray 'prompt' */
	return known_fields(r->root, kind, e);
}

void mu__oai_req_free(mu__oai_req_t *r)
{
	for (int i = 0; r->joined != NULL && i < r->nmsgs; i++)
		mu__free(r->joined[i]);
	mu__free(r->joined);
	mu__free(r->msgs);
	mu__free(r->prompt_ids);
	cJSON_Delete(r->root);
	memset(r, 0, sizeof(*r));
}

/* ---- encoding ---- */

/* s[0..n) as a JSON string member: bytes that are not UTF-8, and NULs
 * (which cJSON's C strings cannot hold), become U+FFFD. */
static int add_text(cJSON *o, const char *name, const char *s, size_t n)
{
	mu__buf_t b;
	size_t i = 0, k;
	int rc = 0;

	mu__buf_init(&b, (size_t)1 << 30);
	while (rc == 0 && i < n) {
		const char *z = memchr(s + i, 0, n - i);

		k = z != NULL ? (size_t)(z - s) - i : n - i;
		rc = mu__utf8_repair(s + i, k, &b);
		i += k;
		if (rc == 0 && i < n) {
			rc = mu__buf_append(&b, "\xEF\xBF\xBD", 3);
			i++;
		}
	}
	if (rc == 0 && cJSON_AddStringToObject(o, name, b.data != NULL ? b.data : "") == NULL)
		rc = MU_ENOMEM;
	mu__buf_free(&b);
	return rc;
}

static cJSON *head(const mu__oai_head_t *h, const char *object)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "id", h->id);
	cJSON_AddStringToObject(o, "object", object);
	cJSON_AddNumberToObject(o, "created", (double)h->created);
	cJSON_AddStringToObject(o, "model", h->model);
	return o;
}

static void add_usage(cJSON *o, const mu__oai_usage_t *u)
{
	cJSON *j = cJSON_AddObjectToObject(o, "usage");

	cJSON_AddNumberToObject(j, "prompt_tokens", u->prompt);
	cJSON_AddNumberToObject(j, "completion_tokens", u->completion);
	cJSON_AddNumberToObject(j, "total_tokens", (double)u->prompt + u->completion);
}

/* Print o (freed here) into out, between pre and post. */
static int emit(cJSON *o, const char *pre, const char *post, mu__buf_t *out)
{
	char *s = o != NULL ? cJSON_PrintUnformatted(o) : NULL;
	int rc = s == NULL ? MU_ENOMEM : mu__buf_appends(out, pre);

	if (rc == 0)
		rc = mu__buf_appends(out, s);
	if (rc == 0)
		rc = mu__buf_appends(out, post);
	cJSON_free(s);
	cJSON_Delete(o);
	return rc;
}

int mu__oai_result(const mu__oai_head_t *h, const char *text, size_t len, const char *finish,
                   const mu__oai_usage_t *u, mu__buf_t *out)
{
	int chat = h->kind == MU__OAI_CHAT;
	cJSON *o = head(h, chat ? "chat.completion" : "text_completion");
	cJSON *c = cJSON_CreateObject(), *m = c;
	int rc;

	cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), c);
	cJSON_AddNumberToObject(c, "index", 0);
	if (chat) {
		m = cJSON_AddObjectToObject(c, "message");
		cJSON_AddStringToObject(m, "role", "assistant");
	}
	rc = add_text(m, chat ? "content" : "text", text, len);
	cJSON_AddNullToObject(c, "logprobs");
	cJSON_AddStringToObject(c, "finish_reason", finish);
	add_usage(o, u);
	if (rc != 0) {
		cJSON_Delete(o);
		return rc;
	}
	return emit(o, "", "", out);
}

int mu__oai_chunk(const mu__oai_head_t *h, const char *text, size_t len, int first,
                  const char *finish, int usage_null, mu__buf_t *out)
{
	int chat = h->kind == MU__OAI_CHAT, rc = 0;
	cJSON *o = head(h, chat ? "chat.completion.chunk" : "text_completion");
	cJSON *c = cJSON_CreateObject(), *d = c;

	cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), c);
	cJSON_AddNumberToObject(c, "index", 0);
	if (chat) {
		d = cJSON_AddObjectToObject(c, "delta");
		if (first)
			cJSON_AddStringToObject(d, "role", "assistant");
		if (finish == NULL)
			rc = add_text(d, "content", text, len);
	} else {
		rc = add_text(c, "text", text, len);
	}
	cJSON_AddNullToObject(c, "logprobs");
	if (finish != NULL)
		cJSON_AddStringToObject(c, "finish_reason", finish);
	else
		cJSON_AddNullToObject(c, "finish_reason");
	if (usage_null)
		cJSON_AddNullToObject(o, "usage");
	if (rc != 0) {
		cJSON_Delete(o);
		return rc;
	}
	return emit(o, "data: ", "\n\n", out);
}

int mu__oai_usage_chunk(const mu__oai_head_t *h, const mu__oai_usage_t *u, mu__buf_t *out)
{
	cJSON *o = head(h, h->kind == MU__OAI_CHAT ? "chat.completion.chunk" : "text_completion");

	cJSON_AddArrayToObject(o, "choices");
	add_usage(o, u);
	return emit(o, "data: ", "\n\n", out);
}

int mu__oai_error_json(const mu__oai_err_t *e, mu__buf_t *out)
{
	cJSON *o = cJSON_CreateObject(), *j = cJSON_AddObjectToObject(o, "error");

	/* the message may quote a client's bytes (a field's name) */
	add_text(j, "message", e->message, strlen(e->message));
	cJSON_AddStringToObject(j, "type", e->type != NULL ? e->type : "invalid_request_error");
	if (e->param != NULL)
		cJSON_AddStringToObject(j, "param", e->param);
	else
		cJSON_AddNullToObject(j, "param");
	if (e->code != NULL)
		cJSON_AddStringToObject(j, "code", e->code);
	else
		cJSON_AddNullToObject(j, "code");
	return emit(o, "", "", out);
}

int mu__oai_models(const char *model, int64_t created, int32_t ctx, mu__buf_t *out)
{
	cJSON *o = cJSON_CreateObject(), *m = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "object", "list");
	cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), m);
	cJSON_AddStringToObject(m, "id", model);
	cJSON_AddStringToObject(m, "object", "model");
	cJSON_AddNumberToObject(m, "created", (double)created);
	cJSON_AddStringToObject(m, "owned_by", "muster");
	cJSON_AddNumberToObject(cJSON_AddObjectToObject(m, "meta"), "n_ctx", ctx);
	return emit(o, "", "", out);
}
