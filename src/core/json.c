/* SPDX-License-Identifier: MIT */
/*
 * cJSON glue: strict length-delimited parsing and a Python-compatible writer.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/json_int.h"

/*
 * The text's shape before cJSON sees it, in one walk that ignores brackets
 * inside strings: 0, MU_EJSON when it nests deeper than MU_JSON_MAX_DEPTH
 * (cJSON recurses once per level; its own cap is 1000), or MU_ETOOBIG when
 * it holds more than max_values values (0: no cap), counted cheaply as
 * commas and opening brackets (cJSON spends a node, 64 bytes, on each).
 */
static int shape_ok(const char *p, size_t len, size_t max_values)
{
	int depth = 0, in_str = 0;
	size_t values = 0;

	for (size_t i = 0; i < len; i++) {
		char c = p[i];

		if (in_str) {
			if (c == '\\')
				i++;
			else if (c == '"')
				in_str = 0;
		} else if (c == '"') {
			in_str = 1;
		} else if (c == '[' || c == '{') {
			if (++depth > MU_JSON_MAX_DEPTH)
				return MU_EJSON;
			values++;
		} else if (c == ']' || c == '}') {
			depth--;
		} else if (c == ',') {
			values++;
		}
		if (max_values != 0 && values > max_values)
			return MU_ETOOBIG;
	}
	return 0;
}

int mu__utf8_valid(const char *p, size_t len)
{
	const unsigned char *s = (const unsigned char *)p, *end = s + len;

	while (s < end) {
		unsigned c = *s;
		size_t n, i;
		uint32_t cp;

		if (c < 0x80) {
			s++;
			continue;
		}
		if (c >= 0xC2 && c <= 0xDF) {
			n = 1;
			cp = c & 0x1F;
		} else if (c >= 0xE0 && c <= 0xEF) {
			n = 2;
			cp = c & 0x0F;
		} else if (c >= 0xF0 && c <= 0xF4) {
			n = 3;
			cp = c & 0x07;
		} else {
			return 0;
		}
		if ((size_t)(end - s) <= n)
			return 0;
		for (i = 1; i <= n; i++) {
			if ((s[i] & 0xC0) != 0x80)
				return 0;
			cp = cp << 6 | (s[i] & 0x3F);
		}
		/* overlong forms, UTF-16 surrogates, past U+10FFFF */
		if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
		    (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
			return 0;
		s += n + 1;
	}
	return 1;
}

/* cJSON over exactly len bytes, nothing but whitespace after the value. */
static int parse_exact(const char *text, size_t len, cJSON **out)
{
	const char *end = NULL;
	cJSON *v = cJSON_ParseWithLengthOpts(text, len, &end, 0);

	if (v == NULL)
		return MU_EJSON;
	/* cJSON stops after the first value; anything but whitespace after it
	 * would be silently ignored, which json.loads() rejects. */
	while (end != NULL && end < text + len &&
	       (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
		end++;
	if (end == NULL || end != text + len) {
		cJSON_Delete(v);
		return MU_EJSON;
	}
	*out = v;
	return 0;
}

int mu__json_parse(const char *text, size_t len, cJSON **out)
{
	*out = NULL;
	if (memchr(text, '\0', len) != NULL || !mu__utf8_valid(text, len) ||
	    shape_ok(text, len, 0) != 0)
		return MU_EJSON;
	return parse_exact(text, len, out);
}

/* Where the first \u0000 escape starts in text, or len. */
static size_t nul_escape(const char *text, size_t len)
{
	for (size_t i = 0; i + 1 < len; i++)
		if (text[i] == '\\') {
			if (text[i + 1] == 'u' && i + 6 <= len && memcmp(text + i + 2, "0000", 4) == 0)
				return i;
			i++; /* the escaped character: "\\u0000" is text */
		}
	return len;
}

int mu__json_parse_nul(const char *text, size_t len, size_t max_values, cJSON **out,
                       int *had_nul)
{
	size_t i = 0, k = 0, at;
	char *copy;
	int rc;

	*out = NULL;
	*had_nul = 0;
	if (memchr(text, '\0', len) != NULL || !mu__utf8_valid(text, len))
		return MU_EJSON;
	if ((rc = shape_ok(text, len, max_values)) != 0)
		return rc;
	if ((at = nul_escape(text, len)) == len)
		return parse_exact(text, len, out);
	/* Each \u0000 becomes the byte 0xFF, which cJSON copies as it is and
	 * which valid UTF-8 (all the text can hold otherwise) never has. */
	if ((copy = mu__malloc(len)) == NULL)
		return MU_ENOMEM;
	while (at < len) {
		memcpy(copy + k, text + i, at - i);
		k += at - i;
		copy[k++] = (char)0xFF;
		i = at + 6;
		at = i + nul_escape(text + i, len - i);
	}
	memcpy(copy + k, text + i, len - i);
	k += len - i;
	*had_nul = 1;
	rc = parse_exact(copy, k, out);
	mu__free(copy);
	return rc;
}

size_t mu__json_nul_back(char *s)
{
	size_t n = strlen(s);
	char *p = s;

	while ((p = memchr(p, 0xFF, n - (size_t)(p - s))) != NULL)
		*p++ = '\0';
	return n;
}

int mu__json_is_int(const cJSON *v, double lo, double hi)
{
	double d;

	if (!cJSON_IsNumber(v))
		return 0;
	d = v->valuedouble;
	return isfinite(d) && d == floor(d) && d >= lo && d <= hi;
}

int mu__utf8_repair(const char *s, size_t len, mu__buf_t *out)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, n;
	int rc = 0;

	while (rc == 0 && i < len) {
		n = p[i] < 0x80 ? 1 : (p[i] & 0xE0) == 0xC0 ? 2 : (p[i] & 0xF0) == 0xE0 ? 3
		  : (p[i] & 0xF8) == 0xF0 ? 4 : 0;
		if (n > 0 && n <= len - i && mu__utf8_valid(s + i, n)) {
			rc = mu__buf_append(out, s + i, n);
			i += n;
		} else {
			rc = mu__buf_append(out, "\xEF\xBF\xBD", 3);
			i++;
		}
	}
	return rc;
}

int mu__json_int64(const cJSON *v, int64_t lo, int64_t hi, int64_t *out)
{
	/* lo and hi are exact as doubles (|x| <= 2^53), so the comparison is
	 * exact, and a value that passes converts without overflow */
	if (lo < -MU_JSON_INT_MAX || hi > MU_JSON_INT_MAX || lo > hi ||
	    !mu__json_is_int(v, (double)lo, (double)hi))
		return MU_EPROTO;
	*out = (int64_t)v->valuedouble;
	return 0;
}

int mu__json_int(const cJSON *v, int lo, int hi, int *out)
{
	int64_t x;
	int rc = mu__json_int64(v, lo, hi, &x);

	if (rc == 0)
		*out = (int)x;
	return rc;
}

int mu__json_u64(const cJSON *v, uint64_t hi, uint64_t *out)
{
	int64_t x;
	int rc = mu__json_int64(v, 0, hi > (uint64_t)MU_JSON_INT_MAX ? MU_JSON_INT_MAX : (int64_t)hi, &x);

	if (rc == 0)
		*out = (uint64_t)x;
	return rc;
}

int mu__json_double(const cJSON *v, double lo, double hi, double *out)
{
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !(v->valuedouble >= lo) ||
	    !(v->valuedouble <= hi))
		return MU_EPROTO;
	*out = v->valuedouble;
	return 0;
}

/* Decode one UTF-8 sequence of the avail bytes at s; returns its length,
 * or 1 with *cp = U+FFFD. */
static size_t utf8_decode(const unsigned char *s, size_t avail, uint32_t *cp)
{
	uint32_t c = s[0];
	size_t n, i;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if ((c & 0xE0) == 0xC0) {
		n = 2;
		c &= 0x1F;
	} else if ((c & 0xF0) == 0xE0) {
		n = 3;
		c &= 0x0F;
	} else if ((c & 0xF8) == 0xF0) {
		n = 4;
		c &= 0x07;
	} else {
		*cp = 0xFFFD;
		return 1;
	}
	for (i = 1; i < n; i++) {
		if (i >= avail || (s[i] & 0xC0) != 0x80) {
			*cp = 0xFFFD;
			return 1;
		}
		c = c << 6 | (s[i] & 0x3F);
	}
	*cp = c;
	return n;
}

/* "\uXXXX" for a code unit, into out (7 bytes). */
static void u_escape(char *out, unsigned u)
{
	static const char hex[] = "0123456789abcdef";

	out[0] = '\\';
	out[1] = 'u';
	for (int i = 0; i < 4; i++)
		out[2 + i] = hex[(u >> (12 - 4 * i)) & 0xF];
	out[6] = 0;
}

int mu__json_dump_string(mu__buf_t *out, const char *s)
{
	return mu__json_dump_stringn(out, s, strlen(s));
}

int mu__json_dump_stringn(mu__buf_t *out, const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + len;
	int rc = mu__buf_reserve(out, len + 2);
	char esc[16];

	rc = rc ? rc : mu__buf_appendc(out, '"');
	while (rc == 0 && p < end) {
		const unsigned char *run = p;
		uint32_t cp;
		size_t n;

		/* plain ASCII goes in runs: one append, not one per byte */
		while (p < end && *p >= 0x20 && *p < 0x7F && *p != '"' && *p != '\\')
			p++;
		if (p > run && (rc = mu__buf_append(out, run, (size_t)(p - run))) != 0)
			break;
		if (p == end)
			break;
		n = utf8_decode(p, (size_t)(end - p), &cp);
		p += n;
		switch (cp) {
		case '"':
			rc = mu__buf_appends(out, "\\\"");
			break;
		case '\\':
			rc = mu__buf_appends(out, "\\\\");
			break;
		case '\n':
			rc = mu__buf_appends(out, "\\n");
			break;
		case '\r':
			rc = mu__buf_appends(out, "\\r");
			break;
		case '\t':
			rc = mu__buf_appends(out, "\\t");
			break;
		case '\b':
			rc = mu__buf_appends(out, "\\b");
			break;
		case '\f':
			rc = mu__buf_appends(out, "\\f");
			break;
		default:
			if (cp >= 0x20 && cp < 0x7F) {
				rc = mu__buf_appendc(out, (char)cp);
			} else if (cp < 0x10000) {
				u_escape(esc, (unsigned)cp);
				rc = mu__buf_append(out, esc, 6);
			} else { /* a surrogate pair, as Python writes it */
				u_escape(esc, (unsigned)(0xD800 + ((cp - 0x10000) >> 10)));
				u_escape(esc + 6, (unsigned)(0xDC00 + ((cp - 0x10000) & 0x3FF)));
				rc = mu__buf_append(out, esc, 12);
			}
		}
	}
	return rc != 0 ? rc : mu__buf_appendc(out, '"');
}

static int dump_number(mu__buf_t *out, double d)
{
	char tmp[32];
	int prec;

	if (!isfinite(d)) /* cJSON never parses these; Python would say NaN */
		return mu__buf_appends(out, "null");
	if (d == floor(d) && fabs(d) < 9007199254740992.0)
		return mu__buf_printf(out, "%.0f", d);
	/* Shortest text that reads back as the same double, like repr(). */
	for (prec = 15; prec <= 17; prec++) {
		snprintf(tmp, sizeof(tmp), "%.*g", prec, d);
		if (strtod(tmp, NULL) == d)
			break;
	}
	return mu__buf_appends(out, tmp);
}

int mu__json_dump(mu__buf_t *out, const cJSON *v)
{
	const cJSON *c;
	int rc = 0;

	if (cJSON_IsNull(v))
		return mu__buf_appends(out, "null");
	if (cJSON_IsTrue(v))
		return mu__buf_appends(out, "true");
	if (cJSON_IsFalse(v))
		return mu__buf_appends(out, "false");
	if (cJSON_IsNumber(v))
		return dump_number(out, v->valuedouble);
	if (cJSON_IsString(v))
		return mu__json_dump_string(out, v->valuestring);
	if (cJSON_IsRaw(v))
		return mu__buf_appends(out, v->valuestring);
	if (cJSON_IsArray(v)) {
		rc = mu__buf_appendc(out, '[');
		for (c = v->child; rc == 0 && c != NULL; c = c->next) {
			if (c != v->child)
				rc = mu__buf_appends(out, ", ");
			if (rc == 0)
				rc = mu__json_dump(out, c);
		}
		return rc != 0 ? rc : mu__buf_appendc(out, ']');
	}
	if (cJSON_IsObject(v)) {
		rc = mu__buf_appendc(out, '{');
		for (c = v->child; rc == 0 && c != NULL; c = c->next) {
			if (c != v->child)
				rc = mu__buf_appends(out, ", ");
			if (rc == 0)
				rc = mu__json_dump_string(out, c->string);
			if (rc == 0)
				rc = mu__buf_appends(out, ": ");
			if (rc == 0)
				rc = mu__json_dump(out, c);
		}
		return rc != 0 ? rc : mu__buf_appendc(out, '}');
	}
	return MU_EARG;
}
