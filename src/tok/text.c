/* SPDX-License-Identifier: MIT */
/*
 * Text steps of a tokenizer before pre-tokenizing: UTF-8 and GPT-2's byte
 * alphabet, regexes (PCRE2), each encode call's scratch, and normalizers
 * (Unicode forms from utf8proc), on bytes that may not be valid UTF-8
 * (invalid bytes pass through every step unchanged). What the steps are
 * comes from tok/hf.c or tok/vocab.c; pre-tokenizers are tok/pre.c, BPE
 * after them is tok/bpe.c.
 */
#include <string.h>

#include <utf8proc.h>

#include "core/alloc_int.h"
#include "core/error_int.h"
#include "muster/common.h"
#include "tok/impl_int.h"

/* GPT-2 maps the 188 printable Latin-1 bytes to themselves and the other 68
 * (0x00-0x20, 0x7F-0xA0, 0xAD), in order, to U+0100.. */
static int printable(unsigned b)
{
	return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

uint32_t mu__tok_byte_cp(unsigned b)
{
	if (printable(b))
		return b;
	if (b <= 0x20)
		return 256 + b;
	if (b <= 0xA0)
		return 256 + 33 + (b - 0x7F);
	return 256 + 67; /* 0xAD */
}

int mu__tok_cp_byte(uint32_t cp)
{
	if (cp < 256)
		return printable(cp) ? (int)cp : -1;
	if (cp < 256 + 33)
		return (int)(cp - 256);
	if (cp < 256 + 67)
		return (int)(cp - 256 - 33 + 0x7F);
	return cp == 256 + 67 ? 0xAD : -1;
}

size_t mu__tok_utf8(const unsigned char *p, size_t len, uint32_t *cp)
{
	uint32_t c;
	size_t n;

	if (len == 0)
		return 0;
	if (p[0] < 0x80) {
		*cp = p[0];
		return 1;
	}
	if (p[0] >= 0xC2 && p[0] <= 0xDF)
		n = 2, c = p[0] & 0x1F;
	else if (p[0] >= 0xE0 && p[0] <= 0xEF)
		n = 3, c = p[0] & 0x0F;
	else if (p[0] >= 0xF0 && p[0] <= 0xF4)
		n = 4, c = p[0] & 0x07;
	else
		return 0;
	if (len < n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xC0) != 0x80)
			return 0;
		c = c << 6 | (p[i] & 0x3F);
	}
	/* overlong forms, surrogates, past U+10FFFF */
	if ((n == 3 && c < 0x800) || (n == 4 && (c < 0x10000 || c > 0x10FFFF)) ||
	    (c >= 0xD800 && c <= 0xDFFF))
		return 0;
	*cp = c;
	return n;
}

size_t mu__tok_utf8_put(uint32_t cp, char *out)
{
	return (size_t)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)out);
}

/* ---- regexes ---- */

static void *re_malloc(PCRE2_SIZE n, void *ud)
{
	(void)ud;
	return mu__malloc(n);
}

static void re_free(void *p, void *ud)
{
	(void)ud;
	mu__free(p);
}

/*
 * Oniguruma (HF's Rust library) and PCRE2 differ on a few escapes even in
 * Unicode mode: Oniguruma's \s is the White_Space property (PCRE2's misses
 * U+0085) and its \w is letters, marks, numbers and connector punctuation.
 * Say what Oniguruma means, in PCRE2's syntax. \W inside a class has no
 * such spelling and stays PCRE2's.
 */
static int rewrite(const char *pat, size_t len, mu__buf_t *out)
{
	int in_class = 0, rc = 0;

	for (size_t i = 0; rc == 0 && i < len; i++) {
		char c = pat[i];

		if (c == '\\' && i + 1 < len) {
			char e = pat[++i];

			if (e == 'Q') { /* literal up to \E */
				const char *end = NULL;

				for (size_t j = i + 1; j + 1 < len && end == NULL; j++)
					if (pat[j] == '\\' && pat[j + 1] == 'E')
						end = pat + j + 2;
				if (end == NULL)
					end = pat + len;
				rc = mu__buf_append(out, pat + i - 1, (size_t)(end - (pat + i - 1)));
				i = (size_t)(end - pat) - 1;
			} else if (e == 's')
				rc = mu__buf_appends(out, "\\p{White_Space}");
			else if (e == 'S')
				rc = mu__buf_appends(out, "\\P{White_Space}");
			else if (e == 'w')
				rc = mu__buf_appends(out, in_class ? "\\p{L}\\p{M}\\p{N}\\p{Pc}"
				                                   : "[\\p{L}\\p{M}\\p{N}\\p{Pc}]");
			else if (e == 'W' && !in_class)
				rc = mu__buf_appends(out, "[^\\p{L}\\p{M}\\p{N}\\p{Pc}]");
			else
				rc = mu__buf_append(out, pat + i - 1, 2);
			continue;
		}
		if (!in_class && c == '[') {
			in_class = 1;
			rc = mu__buf_appendc(out, c);
			/* a ']' right after "[" or "[^" is a literal */
			if (rc == 0 && i + 1 < len && pat[i + 1] == '^')
				rc = mu__buf_appendc(out, pat[++i]);
			if (rc == 0 && i + 1 < len && pat[i + 1] == ']')
				rc = mu__buf_appendc(out, pat[++i]);
			continue;
		}
		if (in_class && c == '[' && i + 1 < len && pat[i + 1] == ':') {
			const char *e = memchr(pat + i + 2, ']', len - i - 2);
			size_t n = e != NULL ? (size_t)(e - (pat + i)) + 1 : 1;

			rc = mu__buf_append(out, pat + i, n); /* [:alpha:] */
			i += n - 1;
			continue;
		}
		if (in_class && c == ']')
			in_class = 0;
		rc = mu__buf_appendc(out, c);
	}
	return rc;
}

int mu__tok_regex(const char *pat, size_t len, int literal, pcre2_code **out, char *why,
                  size_t wl)
{
	pcre2_general_context *g;
	pcre2_compile_context *cc = NULL;
	mu__buf_t b;
	int err = 0, rc = 0;
	PCRE2_SIZE off = 0;
	uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;

	*out = NULL;
	if (len > MU__TOK_MAX_PIECE)
		return mu__why(why, wl, MU_ETOOBIG, "a pattern of %zu bytes is too long", len);
	mu__buf_init(&b, 4 * (size_t)MU__TOK_MAX_PIECE);
	if (literal)
		rc = mu__buf_append(&b, pat, len);
	else
		rc = rewrite(pat, len, &b);
	g = rc == 0 ? pcre2_general_context_create(re_malloc, re_free, NULL) : NULL;
	if (g != NULL)
		cc = pcre2_compile_context_create(g);
	if (rc == 0 && cc == NULL)
		rc = MU_ENOMEM;
	opts |= literal ? PCRE2_LITERAL : PCRE2_UCP;
	if (rc == 0) {
		*out = pcre2_compile((PCRE2_SPTR)(b.data != NULL ? b.data : ""), b.len, opts, &err,
		                     &off, cc);
		if (*out == NULL && err == PCRE2_ERROR_NOMEMORY)
			rc = MU_ENOMEM;
		else if (*out == NULL) {
			PCRE2_UCHAR msg[160];

			pcre2_get_error_message(err, msg, sizeof(msg));
			rc = mu__why(why, wl, MU_EPROTO, "pattern \"%.80s\": %s (at %zu)", pat,
			             (const char *)msg, (size_t)off);
		}
	}
	/* JIT when the platform has it; the interpreter is the fallback. */
	if (*out != NULL)
		(void)pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE);
	pcre2_compile_context_free(cc);
	pcre2_general_context_free(g);
	mu__buf_free(&b);
	return rc;
}

int mu__tok_find(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t len,
                 size_t from, uint32_t opts, size_t *ms, size_t *me)
{
	int rc = pcre2_match(re, (PCRE2_SPTR)s, len, from, opts | PCRE2_NOTEMPTY, md, NULL);
	PCRE2_SIZE *ov;

	if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
		rc = pcre2_match(re, (PCRE2_SPTR)s, len, from, opts | PCRE2_NOTEMPTY | PCRE2_NO_JIT,
		                 md, NULL);
	if (rc < 0)
		return 0;
	ov = pcre2_get_ovector_pointer(md);
	if (ov[0] < from || ov[1] <= ov[0] || ov[1] > len)
		return 0;
	*ms = ov[0];
	*me = ov[1];
	return 1;
}

size_t mu__tok_ws_run(const mu__tok_t *t, mu__tok_work_t *w, const char *p, size_t len,
                      int left)
{
	size_t ms, me, n = 0;

	if (left) {
		while (n < len && mu__tok_find(t->ws, w->md, p, len, n, PCRE2_ANCHORED, &ms, &me))
			n = me;
		return n;
	}
	while (n < len) {
		size_t at = len - n - 1;

		while (at > 0 && len - n - at < 4 && ((unsigned char)p[at] & 0xC0) == 0x80)
			at--;
		if (!mu__tok_find(t->ws, w->md, p, len - n, at, PCRE2_ANCHORED, &ms, &me) ||
		    me != len - n)
			break;
		n = len - at;
	}
	return n;
}

/* ---- scratch ---- */

int mu__tok_work_init(mu__tok_work_t *w)
{
	pcre2_general_context *g = pcre2_general_context_create(re_malloc, re_free, NULL);

	memset(w, 0, sizeof(*w));
	if (g == NULL)
		return MU_ENOMEM;
	w->md = pcre2_match_data_create(1, g);
	pcre2_general_context_free(g);
	if (w->md == NULL)
		return MU_ENOMEM;
	mu__buf_init(&w->a, SIZE_MAX / 4);
	mu__buf_init(&w->b, SIZE_MAX / 4);
	mu__buf_init(&w->c, SIZE_MAX / 4);
	mu__buf_init(&w->ckeys, SIZE_MAX / 4);
	return 0;
}

void mu__tok_work_free(mu__tok_work_t *w)
{
	pcre2_match_data_free(w->md);
	mu__buf_free(&w->a);
	mu__buf_free(&w->b);
	mu__buf_free(&w->c);
	mu__free(w->sp);
	mu__free(w->sp2);
	mu__free(w->cut);
	mu__tok_bpe_free(w);
	mu__free(w->ids);
	memset(w, 0, sizeof(*w));
}

int mu__tok_push3(size_t (**v)[3], size_t *n, size_t *cap, size_t a, size_t b, size_t c)
{
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 64;
		void *p = mu__realloc(*v, nc * sizeof(**v));

		if (p == NULL)
			return MU_ENOMEM;
		*v = p;
		*cap = nc;
	}
	(*v)[*n][0] = a;
	(*v)[*n][1] = b;
	(*v)[*n][2] = c;
	(*n)++;
	return 0;
}

/* ---- normalizers ---- */

/*
 * NFC/NFD/NFKC/NFKD of the valid UTF-8 runs of in; other bytes copied.
 * Every form leaves ASCII as it is, and an ASCII character never combines
 * with what comes before it (canonical class 0, never second in a
 * composition), so text can be cut before any ASCII character: runs of
 * ASCII are copied, and only the stretches from the ASCII character before
 * a non-ASCII one to the next ASCII one go through utf8proc.
 */
static int unorm(const char *in, size_t len, utf8proc_option_t opt, mu__buf_t *out)
{
	size_t i = 0;
	int rc = 0;

	while (rc == 0 && i < len) {
		size_t a = i, s, j, n;
		uint32_t cp;
		utf8proc_ssize_t m, k;
		utf8proc_int32_t *buf;

		while (a < len && (unsigned char)in[a] < 0x80)
			a++;
		s = a > i && a < len ? a - 1 : a; /* keep the one before a with it */
		if ((rc = mu__buf_append(out, in + i, s - i)) != 0 || a == len)
			break;
		for (j = a; j < len && (unsigned char)in[j] >= 0x80 &&
		            (n = mu__tok_utf8((const unsigned char *)in + j, len - j, &cp)) > 0;)
			j += n;
		if (j == a) { /* an invalid byte: as it is */
			rc = mu__buf_append(out, in + s, a + 1 - s);
			i = a + 1;
			continue;
		}
		m = utf8proc_decompose((const utf8proc_uint8_t *)in + s, (utf8proc_ssize_t)(j - s),
		                       NULL, 0, opt);
		buf = m >= 0 ? mu__calloc((size_t)m + 1, sizeof(*buf)) : NULL;
		if (buf == NULL)
			return MU_ENOMEM; /* m < 0 cannot happen on valid UTF-8 */
		m = utf8proc_decompose((const utf8proc_uint8_t *)in + s, (utf8proc_ssize_t)(j - s),
		                       buf, m, opt);
		k = m >= 0 ? utf8proc_reencode(buf, m, opt) : -1;
		rc = k >= 0 ? mu__buf_append(out, buf, (size_t)k) : mu__buf_append(out, in + s, j - s);
		mu__free(buf);
		i = j;
	}
	return rc;
}

/* Lowercase, or drop marks (StripAccents), code point by code point. */
static int per_cp(const char *in, size_t len, int lower, mu__buf_t *out)
{
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < len;) {
		uint32_t cp;
		size_t n = mu__tok_utf8((const unsigned char *)in + i, len - i, &cp);
		char enc[4];

		if (n == 0) {
			rc = mu__buf_appendc(out, in[i++]);
			continue;
		}
		i += n;
		if (lower) {
			cp = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
		} else {
			utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);

			if (c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC ||
			    c == UTF8PROC_CATEGORY_ME)
				continue;
		}
		rc = mu__buf_append(out, enc, mu__tok_utf8_put(cp, enc));
	}
	return rc;
}

static int replace(const mu__tok_norm_t *op, pcre2_match_data *md, const char *in, size_t len,
                   mu__buf_t *out)
{
	size_t pos = 0, ms, me;
	int rc = 0;

	while (rc == 0 && pos < len && mu__tok_find(op->re, md, in, len, pos, 0, &ms, &me)) {
		rc = mu__buf_append(out, in + pos, ms - pos);
		if (rc == 0)
			rc = mu__buf_append(out, op->s, op->slen);
		pos = me;
	}
	return rc != 0 ? rc : mu__buf_append(out, in + pos, len - pos);
}

static int norm_one(const mu__tok_t *t, mu__tok_work_t *w, const mu__tok_norm_t *op,
                    const char *in, size_t len, mu__buf_t *out)
{
	static const utf8proc_option_t form[] = {
		UTF8PROC_STABLE | UTF8PROC_COMPOSE, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE,
		UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
		UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT};
	size_t l, r;
	int rc;

	switch (op->kind) {
	case MU__TOK_N_PREPEND: /* HF prepends to non-empty text only */
		rc = len > 0 ? mu__buf_append(out, op->s, op->slen) : 0;
		return rc != 0 ? rc : mu__buf_append(out, in, len);
	case MU__TOK_N_REPLACE:
		return replace(op, w->md, in, len, out);
	case MU__TOK_N_NFC:
	case MU__TOK_N_NFD:
	case MU__TOK_N_NFKC:
	case MU__TOK_N_NFKD:
		return unorm(in, len, form[op->kind - MU__TOK_N_NFC], out);
	case MU__TOK_N_LOWER:
		return per_cp(in, len, 1, out);
	case MU__TOK_N_STRIP_ACCENTS:
		return per_cp(in, len, 0, out);
	case MU__TOK_N_STRIP:
		l = op->left ? mu__tok_ws_run(t, w, in, len, 1) : 0;
		r = op->right && l < len ? mu__tok_ws_run(t, w, in + l, len - l, 0) : 0;
		return mu__buf_append(out, in + l, len - l - r);
	}
	return 0;
}

int mu__tok_normalize(const mu__tok_t *t, mu__tok_work_t *w, const char *in, size_t len,
                      const char **out, size_t *outlen)
{
	const char *cur = in;
	size_t curlen = len;

	for (size_t i = 0; i < t->nnorm; i++) {
		mu__buf_t *dst = cur == w->a.data && w->a.data != NULL ? &w->b : &w->a;
		int rc;

		mu__buf_reset(dst);
		if ((rc = norm_one(t, w, &t->norm[i], cur, curlen, dst)) != 0)
			return rc;
		cur = dst->data != NULL ? dst->data : "";
		curlen = dst->len;
	}
	*out = cur;
	*outlen = curlen;
	return 0;
}
