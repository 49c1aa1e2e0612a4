/* SPDX-License-Identifier: MIT */
/*
 * JSON glue over cJSON: strict parsing of a length-delimited text, and a
 * writer that produces exactly what Python's json.dumps() produces with its
 * defaults (", " and ": " separators, non-ASCII escaped as \uXXXX), so our
 * replies are byte-identical to those of TVM's Python peers.
 */
#ifndef MU_CORE_JSON_INT_H
#define MU_CORE_JSON_INT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/buf_int.h"

/* The deepest nesting we parse; deeper text is rejected as MU_EJSON. */
#define MU_JSON_MAX_DEPTH 64

/*
 * Parse exactly `len` bytes as one JSON value (whitespace around it allowed,
 * nothing else). *out is the caller's, freed with cJSON_Delete. 0, MU_EJSON
 * or MU_ENOMEM. Text that is not UTF-8 (RFC 8259 §8.1: as Python's decode
 * refuses it) or that contains a NUL byte is rejected.
 */
int mu__json_parse(const char *text, size_t len, cJSON **out);
/*
 * As mu__json_parse, for text whose strings may hold U+0000, which a cJSON
 * string (NUL-terminated) cannot: every \u0000 escape comes back as the
 * byte 0xFF, which no string holds otherwise (the text is valid UTF-8),
 * and *had_nul says whether there was one. The caller turns 0xFF back
 * into NUL where it keeps lengths (mu__json_nul_back), and refuses it
 * where it cannot. Text of more than max_values values (0: no cap;
 * commas and opening brackets, counted before cJSON spends 64 bytes on
 * each) is refused with MU_ETOOBIG, other bad text with MU_EJSON.
 */
int mu__json_parse_nul(const char *text, size_t len, size_t max_values, cJSON **out,
                       int *had_nul);
/* s's 0xFF bytes (from mu__json_parse_nul) back into NULs, in place; its
 * length, as strlen(s) was before. */
size_t mu__json_nul_back(char *s);

/* True when the len bytes are well-formed UTF-8 (no overlongs, no surrogates). */
int mu__utf8_valid(const char *p, size_t len);

/* Append len bytes to out with every byte that does not start a valid
 * UTF-8 sequence replaced by U+FFFD (as Python's errors="replace" does
 * per byte). 0, MU_ETOOBIG or MU_ENOMEM. */
int mu__utf8_repair(const char *s, size_t len, mu__buf_t *out);

/* Append the Python-style text of v. 0, MU_ETOOBIG or MU_ENOMEM. */
int mu__json_dump(mu__buf_t *out, const cJSON *v);

/* Append s as a JSON string literal (Python escaping). */
int mu__json_dump_string(mu__buf_t *out, const char *s);
/* The same for s[0..len), which may hold NULs (written \u0000); bytes
 * that are not UTF-8 become U+FFFD. */
int mu__json_dump_stringn(mu__buf_t *out, const char *s, size_t len);

/* True when v is a number with an integral value in [lo, hi]. */
int mu__json_is_int(const cJSON *v, double lo, double hi);

/*
 * Every JSON number a peer sends becomes a C number through these, once and
 * with its range checked: casting a double that does not fit the target
 * type is undefined behaviour, and so is the arithmetic that follows on a
 * wrapped value (an ASSIGN's "last" of 2^40 became INT_MIN, then last - 1).
 *
 * The integer forms take v when it is a number, finite, whole and within
 * [lo, hi]. Bounds lie within +-MU_JSON_INT_MAX (2^53 - 1), the integers
 * a double holds exactly: mu__json_int64 refuses wider ones (a caller's
 * error, MU_EPROTO), mu__json_u64 reads a larger hi as 2^53 - 1. 0 with
 * *out set, or MU_EPROTO (v NULL, not a number, fractional, not finite, or
 * out of range) with *out untouched. A missing member (v NULL) is an
 * error: callers with a default test for it first.
 */
#define MU_JSON_INT_MAX 9007199254740991LL
int mu__json_int64(const cJSON *v, int64_t lo, int64_t hi, int64_t *out);
int mu__json_int(const cJSON *v, int lo, int hi, int *out);
int mu__json_u64(const cJSON *v, uint64_t hi, uint64_t *out);
/* A finite number in [lo, hi], fractions allowed. 0 or MU_EPROTO. */
int mu__json_double(const cJSON *v, double lo, double hi, double *out);

#endif
