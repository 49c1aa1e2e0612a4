/* SPDX-License-Identifier: MIT */
/*
 * Stop sequences over streamed text (OpenAI's `stop`): text comes in
 * pieces as tokens decode; a stop string may span pieces. The scanner
 * passes on at once every byte that cannot be the start of a stop string,
 * holds back the shortest tail that still could be, and reports the first
 * match, with the text before it passed on and the match itself dropped.
 * It never splits a UTF-8 character the input did not split: what it holds
 * back starts where a stop string's first character would.
 */
#ifndef MU_SERVE_STOPSCAN_INT_H
#define MU_SERVE_STOPSCAN_INT_H

#include <stddef.h>

#include "core/buf_int.h"

#define MU__STOPSCAN_MAX 4  /* stop strings, as OpenAI allows */

typedef struct {
	char *stop[MU__STOPSCAN_MAX];  /* owned, non-empty */
	size_t len[MU__STOPSCAN_MAX];
	int n;
	mu__buf_t held;                /* text that may begin a stop string */
	int matched;                   /* a stop string was found: feed no more */
} mu__stopscan_t;

/* Copy stops[0..n) (n <= MU__STOPSCAN_MAX; empty strings are ignored).
 * 0 or MU_ENOMEM (nothing to free then). */
int mu__stopscan_init(mu__stopscan_t *s, const char *const *stops, int n);
void mu__stopscan_free(mu__stopscan_t *s);

/*
 * Feed text[0..len): the bytes that are final are appended to out. 1 when
 * a stop string completed (out then ends just before it; the scanner
 * takes no more), 0 otherwise, or MU_ETOOBIG / MU_ENOMEM from out.
 */
int mu__stopscan_feed(mu__stopscan_t *s, const char *text, size_t len, mu__buf_t *out);
/* The end of the text: what was held back is final after all. */
int mu__stopscan_flush(mu__stopscan_t *s, mu__buf_t *out);

#endif
