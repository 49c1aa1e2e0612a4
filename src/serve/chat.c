/* SPDX-License-Identifier: MIT */
/*
 * Chat templates (chat_int.h): recognising a family from a template's
 * text, and rendering messages the way that family's templates do. The
 * rules of each renderer restate what its Jinja template does with plain
 * messages (no tools); where a template behaves in a surprising way
 * (Llama 2 strips contents, Mistral v0.1 does not), so do we.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/error_int.h"
#include "serve/chat_int.h"

/* ---- Python's whitespace ---- */

/* Bytes of the whitespace character (str.isspace) at s, or 0. */
static size_t ws_at(const unsigned char *s, size_t n)
{
	if (n >= 1 && ((s[0] >= 0x09 && s[0] <= 0x0d) || (s[0] >= 0x1c && s[0] <= 0x20)))
		return 1;
	if (n >= 2 && s[0] == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0))
		return 2;
	if (n < 3)
		return 0;
	if ((s[0] == 0xe1 && s[1] == 0x9a && s[2] == 0x80) ||
	    (s[0] == 0xe2 && s[1] == 0x80 && (s[2] <= 0x8a || s[2] == 0xa8 || s[2] == 0xa9 ||
	                                      s[2] == 0xaf) && s[2] >= 0x80) ||
	    (s[0] == 0xe2 && s[1] == 0x81 && s[2] == 0x9f) ||
	    (s[0] == 0xe3 && s[1] == 0x80 && s[2] == 0x80))
		return 3;
	return 0;
}

/* Bytes of the whitespace character that ends s[0..n), or 0. */
static size_t ws_before(const unsigned char *s, size_t n)
{
	for (size_t k = 1; k <= 3 && k <= n; k++)
		if (ws_at(s + n - k, k) == k)
			return k;
	return 0;
}

const char *mu__py_strip(const char *s, size_t *len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = *len, k;

	while ((k = ws_at(p, n)) > 0) {
		p += k;
		n -= k;
	}
	while ((k = ws_before(p, n)) > 0)
		n -= k;
	*len = n;
	return (const char *)p;
}

/* s.lstrip(c) / s.rstrip(c) for one character c. */
static const char *lstrip_c(const char *s, size_t *n, char c)
{
	while (*n > 0 && *s == c) {
		s++;
		(*n)--;
	}
	return s;
}

static void rstrip_c(const char *s, size_t *n, char c)
{
	while (*n > 0 && s[*n - 1] == c)
		(*n)--;
}

/* ---- recognising ---- */

static int has(const char *t, const char *s)
{
	return strstr(t, s) != NULL;
}

/* Append the Jinja string literal text s[0..n) unescaped. */
static int unescape(mu__buf_t *b, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (c == '\\' && i + 1 < n) {
			c = s[++i];
			c = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
		}
		if (mu__buf_appendc(b, c) != 0)
			return MU_ENOMEM;
	}
	return 0;
}

/*
 * The system prompt a ChatML template adds when the messages have none
 * (Qwen 2 and 2.5): a string literal that opens the system turn and holds
 * text up to <|im_end|>. *out is NULL when the template has none.
 */
static int default_system(const char *tmpl, char **out)
{
	static const char open[] = "<|im_start|>system";
	const char *p = tmpl;

	*out = NULL;
	while ((p = strstr(p, open)) != NULL) {
		const char *s = p + sizeof(open) - 1, *end;
		char q = p > tmpl ? p[-1] : 0;
		mu__buf_t b;

		p = s;
		if (q != '\'' && q != '"')
			continue;
		if (strncmp(s, "\\n", 2) == 0)
			s += 2;
		else if (*s == '\n')
			s++;
		else
			continue;
		end = strstr(s, "<|im_end|>");
		if (*s == q || end == NULL || memchr(s, q, (size_t)(end - s)) != NULL)
			continue;
		mu__buf_init(&b, 1 << 16);
		if (unescape(&b, s, (size_t)(end - s)) != 0 || (*out = mu__buf_take(&b, NULL)) == NULL) {
			mu__buf_free(&b);
			return MU_ENOMEM;
		}
		return 0;
	}
	return 0;
}

/* Llama 3.1+'s date: "" (today's) when the template asks strftime_now,
 * else its `set date_string = "..."`, else Llama 3.1's. */
static void template_date(const char *tmpl, char *out, size_t n)
{
	static const char set[] = "set date_string = \"";
	const char *p = strstr(tmpl, set), *e;

	out[0] = 0;
	if (has(tmpl, "strftime_now"))
		return;
	p = p != NULL ? p + sizeof(set) - 1 : NULL;
	e = p != NULL ? strchr(p, '"') : NULL;
	if (e != NULL && (size_t)(e - p) < n)
		snprintf(out, n, "%.*s", (int)(e - p), p);
	else
		snprintf(out, n, "26 Jul 2024");
}

static const char *names[] = {"?", "chatml", "qwen3", "llama3", "llama3.1", "llama2", "mistral"};

const char *mu__chat_name(mu__chat_kind_t k)
{
	return k >= MU__CHAT_CHATML && k <= MU__CHAT_MISTRAL ? names[k] : names[0];
}

static int set(mu__chat_tmpl_t *t, mu__chat_kind_t k, const char *bos, const char *eos,
               char *sys)
{
	t->kind = k;
	t->default_system = sys;
	t->bos = mu__strdup(bos != NULL ? bos : "");
	t->eos = mu__strdup(eos != NULL ? eos : "");
	if (t->bos == NULL || t->eos == NULL) {
		mu__chat_free(t);
		return MU_ENOMEM;
	}
	return 0;
}

int mu__chat_by_name(const char *name, const char *bos, const char *eos, mu__chat_tmpl_t *t)
{
	for (int k = MU__CHAT_CHATML; k <= MU__CHAT_MISTRAL; k++)
		if (strcmp(name, names[k]) == 0) {
			int rc = set(t, (mu__chat_kind_t)k, bos, eos, NULL);

			if (rc == 0 && k == MU__CHAT_LLAMA31)
				snprintf(t->date, sizeof(t->date), "26 Jul 2024");
			return rc;
		}
	return MU_EARG;
}

/* What a template we do not render is, for the error. */
static int refuse(const char *tmpl, const char *what, char *why, size_t wl)
{
	char start[81];
	size_t i, j;

	for (i = j = 0; tmpl[i] && j + 2 < sizeof(start); i++) {
		if (tmpl[i] == '\n') {
			start[j++] = '\\';
			start[j++] = 'n';
		} else {
			start[j++] = tmpl[i];
		}
	}
	start[j] = 0;
	return mu__why(why, wl, MU_EPROTO, "the model's chat template is %s, which muster does not "
	               "render (it starts \"%s%s\"); known: chatml, qwen3, llama3, llama3.1, llama2, "
	               "mistral (muster serve --chat-template NAME forces one)", what, start,
	               tmpl[i] ? "..." : "");
}

int mu__chat_detect(const char *tmpl, const char *bos, const char *eos, mu__chat_tmpl_t *t,
                    char *why, size_t wl)
{
	mu__chat_tmpl_t r = {0};
	char *sys = NULL;
	int rc;

	if (tmpl == NULL || tmpl[0] == 0)
		return mu__why(why, wl, MU_EPROTO, "the model has no chat template (no chat_template in "
		               "tokenizer_config.json, no tokenizer.chat_template in the GGUF): use "
		               "/v1/completions, or muster serve --chat-template NAME");
	if (has(tmpl, "<|im_start|>")) {
		if (has(tmpl, "reasoning_content") && has(tmpl, "last_query_index"))
			rc = set(&r, MU__CHAT_QWEN3, bos, eos, NULL);
		else if (has(tmpl, "<think>"))
			return refuse(tmpl, "ChatML with <think> rules other than Qwen 3's", why, wl);
		else if ((rc = default_system(tmpl, &sys)) == 0)
			rc = set(&r, MU__CHAT_CHATML, bos, eos, sys);
	} else if (has(tmpl, "<|start_header_id|>")) {
		if (!has(tmpl, "Cutting Knowledge Date")) {
			rc = set(&r, MU__CHAT_LLAMA3, bos, eos, NULL);
		} else if (!has(tmpl, "Cutting Knowledge Date: December 2023\\n") ||
		           !has(tmpl, "\"Today Date: \" + date_string")) {
			return refuse(tmpl, "Llama 3.1+ with another system header", why, wl);
		} else {
			rc = set(&r, MU__CHAT_LLAMA31, bos, eos, NULL);
			if (rc == 0)
				template_date(tmpl, r.date, sizeof(r.date));
		}
	} else if (has(tmpl, "[INST]")) {
		if (has(tmpl, "<<SYS>>"))
			rc = set(&r, MU__CHAT_LLAMA2, bos, eos, NULL);
		else if (has(tmpl, "[SYSTEM_PROMPT]") || has(tmpl, "[AVAILABLE_TOOLS]") ||
		         has(tmpl, "system_message") || has(tmpl, "[TOOL_CALLS]"))
			return refuse(tmpl, "a Mistral [INST] variant with system prompts or tools", why,
			              wl);
		else
			rc = set(&r, MU__CHAT_MISTRAL, bos, eos, NULL);
	} else {
		return refuse(tmpl, "not of a known family", why, wl);
	}
	if (rc != 0) {
		mu__free(sys);
		return rc;
	}
	*t = r;
	return 0;
}

void mu__chat_free(mu__chat_tmpl_t *t)
{
	mu__free(t->default_system);
	mu__free(t->bos);
	mu__free(t->eos);
	memset(t, 0, sizeof(*t));
}

const char *mu__chat_end_of_turn(const mu__chat_tmpl_t *t)
{
	switch (t->kind) {
	case MU__CHAT_CHATML:
	case MU__CHAT_QWEN3:
		return "<|im_end|>";
	case MU__CHAT_LLAMA3:
	case MU__CHAT_LLAMA31:
		return "<|eot_id|>";
	default:
		return t->eos;
	}
}

/* ---- rendering ---- */

/* Append strings up to a NULL; MU_ENOMEM / MU_ETOOBIG. */
static int cat(mu__buf_t *b, ...)
{
	va_list ap;
	const char *s;
	int rc = 0;

	va_start(ap, b);
	while (rc == 0 && (s = va_arg(ap, const char *)) != NULL)
		rc = mu__buf_appends(b, s);
	va_end(ap);
	return rc;
}

static int addn(mu__buf_t *b, const char *s, size_t n)
{
	return mu__buf_append(b, s, n);
}

/* A message's content and reasoning lengths (literals give 0: strlen's). */
static size_t clen(const mu__chat_msg_t *m)
{
	return m->content_len > 0 ? m->content_len : strlen(m->content);
}

static size_t rlen(const mu__chat_msg_t *m)
{
	return m->reasoning_len > 0 ? m->reasoning_len : strlen(m->reasoning);
}

/* One whole turn: open, the content, close. */
static int turn(mu__buf_t *b, const char *open, const mu__chat_msg_t *m, const char *close)
{
	int rc = mu__buf_appends(b, open);

	rc = rc ? rc : addn(b, m->content, clen(m));
	return rc ? rc : mu__buf_appends(b, close);
}

static int is_role(const mu__chat_msg_t *m, const char *r)
{
	return strcmp(m->role, r) == 0;
}

static int roles_plain(const mu__chat_msg_t *m, int n, char *why, size_t wl)
{
	for (int i = 0; i < n; i++)
		if (!is_role(&m[i], "system") && !is_role(&m[i], "user") && !is_role(&m[i], "assistant"))
			return mu__why(why, wl, MU_EARG, "messages[%d]: role \"%s\" is not supported "
			               "(system, user, assistant)", i, m[i].role);
	return 0;
}

static int render_chatml(const mu__chat_tmpl_t *t, const mu__chat_msg_t *m, int n, mu__buf_t *b)
{
	int rc = 0;

	if (t->default_system != NULL && !is_role(&m[0], "system"))
		rc = cat(b, "<|im_start|>system\n", t->default_system, "<|im_end|>\n", NULL);
	for (int i = 0; rc == 0 && i < n; i++) {
		rc = cat(b, "<|im_start|>", m[i].role, "\n", NULL);
		rc = rc ? rc : turn(b, "", &m[i], "<|im_end|>\n");
	}
	return rc != 0 ? rc : cat(b, "<|im_start|>assistant\n", NULL);
}

static int starts(const char *s, size_t a, const char *p)
{
	size_t b = strlen(p);

	return a >= b && memcmp(s, p, b) == 0;
}

static int ends(const char *s, size_t a, const char *p)
{
	size_t b = strlen(p);

	return a >= b && memcmp(s + a - b, p, b) == 0;
}

/* One assistant turn of Qwen 3: its reasoning split from its content. */
static int qwen3_assistant(const mu__chat_msg_t *m, int after_query, int last, mu__buf_t *b)
{
	const char *c = m->content, *r = "", *close, *cend;
	size_t cn = clen(m), rn = 0;
	int rc;

	cend = c + cn;
	close = memmem(c, cn, "</think>", 8);
	if (m->reasoning != NULL) {
		r = m->reasoning;
		rn = rlen(m);
	} else if (close != NULL) {
		const char *lastc = close, *p, *open;

		while ((p = memmem(lastc + 8, (size_t)(cend - lastc - 8), "</think>", 8)) != NULL)
			lastc = p;
		r = c;
		rn = (size_t)(close - c);
		rstrip_c(r, &rn, '\n');
		for (open = r; (p = memmem(open, rn - (size_t)(open - r), "<think>", 7)) != NULL;)
			open = p + 7;
		rn -= (size_t)(open - r);
		r = lstrip_c(open, &rn, '\n');
		c = lastc + 8;
		cn = (size_t)(cend - c);
		c = lstrip_c(c, &cn, '\n');
	}
	if ((rc = cat(b, "<|im_start|>assistant\n", NULL)) != 0)
		return rc;
	if (after_query && (last || rn > 0)) {
		r = lstrip_c(r, &rn, '\n');
		rstrip_c(r, &rn, '\n');
		c = lstrip_c(c, &cn, '\n');
		if ((rc = cat(b, "<think>\n", NULL)) != 0 || (rc = addn(b, r, rn)) != 0 ||
		    (rc = cat(b, "\n</think>\n\n", NULL)) != 0)
			return rc;
	}
	if ((rc = addn(b, c, cn)) != 0)
		return rc;
	return cat(b, "<|im_end|>\n", NULL);
}

static int render_qwen3(const mu__chat_msg_t *m, int n, const mu__chat_opts_t *o, mu__buf_t *b)
{
	int i, rc = 0, last_query = n - 1;

	/* The last user turn that is not a tool's answer. */
	for (i = n - 1; i >= 0; i--)
		if (is_role(&m[i], "user") && !(starts(m[i].content, clen(&m[i]), "<tool_response>") &&
		                                ends(m[i].content, clen(&m[i]), "</tool_response>"))) {
			last_query = i;
			break;
		}
	if (is_role(&m[0], "system"))
		rc = turn(b, "<|im_start|>system\n", &m[0], "<|im_end|>\n");
	for (i = 0; rc == 0 && i < n; i++) {
		if (is_role(&m[i], "user") || (is_role(&m[i], "system") && i > 0)) {
			rc = cat(b, "<|im_start|>", m[i].role, "\n", NULL);
			rc = rc ? rc : turn(b, "", &m[i], "<|im_end|>\n");
		}
		else if (is_role(&m[i], "assistant"))
			rc = qwen3_assistant(&m[i], i > last_query, i == n - 1, b);
	}
	if (rc == 0)
		rc = cat(b, "<|im_start|>assistant\n", NULL);
	if (rc == 0 && o != NULL && o->enable_thinking == 0)
		rc = cat(b, "<think>\n\n</think>\n\n", NULL);
	return rc;
}

static int render_llama3(const mu__chat_tmpl_t *t, const mu__chat_msg_t *m, int n, mu__buf_t *b)
{
	int rc = cat(b, t->bos, NULL), i = 0;

	if (t->kind == MU__CHAT_LLAMA31) {
		/* The system turn always comes, with the dates, then the system
		 * message (trimmed) if the chat opens with one. */
		char today[32];
		time_t now = time(NULL);
		struct tm tm;
		size_t len = 0;
		const char *sys = "";

		if (t->date[0] == 0 && localtime_r(&now, &tm) != NULL)
			strftime(today, sizeof(today), "%d %b %Y", &tm);
		if (n > 0 && is_role(&m[0], "system")) {
			len = clen(&m[0]);
			sys = mu__py_strip(m[0].content, &len);
			i = 1;
		}
		if (rc == 0)
			rc = cat(b, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
			         "December 2023\nToday Date: ", t->date[0] ? t->date : today, "\n\n", NULL);
		if (rc == 0 && (rc = addn(b, sys, len)) == 0)
			rc = cat(b, "<|eot_id|>", NULL);
	}
	for (; rc == 0 && i < n; i++) {
		size_t len = clen(&m[i]);
		const char *c = mu__py_strip(m[i].content, &len);

		rc = cat(b, "<|start_header_id|>", m[i].role, "<|end_header_id|>\n\n", NULL);
		if (rc == 0 && (rc = addn(b, c, len)) == 0)
			rc = cat(b, "<|eot_id|>", NULL);
	}
	return rc != 0 ? rc : cat(b, "<|start_header_id|>assistant<|end_header_id|>\n\n", NULL);
}

/* The [INST] templates' check, as they make it: a user turn exactly at
 * the even places (after the system message Llama 2 takes out). */
static int alternate(const mu__chat_msg_t *m, int n, int first, char *why, size_t wl)
{
	for (int i = first; i < n; i++)
		if (is_role(&m[i], "user") != ((i - first) % 2 == 0))
			return mu__why(why, wl, MU_EARG, "messages[%d]: this model's template needs roles "
			               "that alternate user/assistant/user/...%s, got \"%s\"", i,
			               first ? " after one system message" : "", m[i].role);
	return 0;
}

static int render_llama2(const mu__chat_tmpl_t *t, const mu__chat_msg_t *m, int n, mu__buf_t *b,
                         char *why, size_t wl)
{
	int first = is_role(&m[0], "system"), rc = alternate(m, n, first, why, wl);

	for (int i = first; rc == 0 && i < n; i++) {
		mu__buf_t c;
		size_t len;
		const char *s;

		/* A system message past the first passes the template's check at
		 * an odd place, and the template writes nothing for it. */
		if (!is_role(&m[i], "user") && !is_role(&m[i], "assistant"))
			continue;
		mu__buf_init(&c, b->max);
		if (i == first && first)
			rc = turn(&c, "<<SYS>>\n", &m[0], "\n<</SYS>>\n\n");
		if (rc == 0)
			rc = addn(&c, m[i].content, clen(&m[i]));
		len = c.len;
		s = mu__py_strip(c.data != NULL ? c.data : "", &len);
		if (rc == 0 && is_role(&m[i], "user"))
			rc = cat(b, t->bos, "[INST] ", NULL);
		else if (rc == 0)
			rc = cat(b, " ", NULL);
		if (rc == 0)
			rc = addn(b, s, len);
		if (rc == 0)
			rc = is_role(&m[i], "user") ? cat(b, " [/INST]", NULL) : cat(b, " ", t->eos, NULL);
		mu__buf_free(&c);
	}
	return rc;
}

static int render_mistral(const mu__chat_tmpl_t *t, const mu__chat_msg_t *m, int n, mu__buf_t *b,
                          char *why, size_t wl)
{
	int rc = alternate(m, n, 0, why, wl);

	for (int i = 0; rc == 0 && i < n; i++)
		if (!is_role(&m[i], "user") && !is_role(&m[i], "assistant"))
			rc = mu__why(why, wl, MU_EARG, "messages[%d]: this model's template takes only "
			             "user and assistant roles", i);
	if (rc == 0)
		rc = cat(b, t->bos, NULL);
	for (int i = 0; rc == 0 && i < n; i++)
		rc = is_role(&m[i], "user") ? turn(b, "[INST] ", &m[i], " [/INST]")
		                            : turn(b, "", &m[i], t->eos);
	return rc;
}

int mu__chat_render(const mu__chat_tmpl_t *t, const mu__chat_msg_t *msgs, int n,
                    const mu__chat_opts_t *o, mu__buf_t *out, char *why, size_t wl)
{
	int rc;

	if (n < 1)
		return mu__why(why, wl, MU_EARG, "messages is empty");
	if ((rc = roles_plain(msgs, n, why, wl)) != 0)
		return rc;
	switch (t->kind) {
	case MU__CHAT_CHATML:
		rc = render_chatml(t, msgs, n, out);
		break;
	case MU__CHAT_QWEN3:
		rc = render_qwen3(msgs, n, o, out);
		break;
	case MU__CHAT_LLAMA3:
	case MU__CHAT_LLAMA31:
		rc = render_llama3(t, msgs, n, out);
		break;
	case MU__CHAT_LLAMA2:
		return render_llama2(t, msgs, n, out, why, wl);
	case MU__CHAT_MISTRAL:
		return render_mistral(t, msgs, n, out, why, wl);
	default:
		return MU_EARG;
	}
	if (rc != 0)
		mu__why(why, wl, rc, "the prompt is too long");
	return rc;
}
