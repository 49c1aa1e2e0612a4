/* SPDX-License-Identifier: MIT */
/*
 * Stop sequences over streamed text (stopscan_int.h). The held tail is
 * never longer than the longest stop string minus one, so each feed costs
 * O((held + len) * stops * longest) at worst, which for OpenAI's four
 * stops of a few bytes each is nothing beside a token's forward.
 */
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "serve/stopscan_int.h"

int mu__stopscan_init(mu__stopscan_t *s, const char *const *stops, int n)
{
	memset(s, 0, sizeof(*s));
	mu__buf_init(&s->held, 1 << 20);
	for (int i = 0; i < n && i < MU__STOPSCAN_MAX; i++) {
		if (stops[i] == NULL || stops[i][0] == 0)
			continue;
		if ((s->stop[s->n] = mu__strdup(stops[i])) == NULL) {
			mu__stopscan_free(s);
			return MU_ENOMEM;
		}
		s->len[s->n++] = strlen(stops[i]);
	}
	return 0;
}

void mu__stopscan_free(mu__stopscan_t *s)
{
	for (int i = 0; i < s->n; i++)
		mu__free(s->stop[i]);
	mu__buf_free(&s->held);
	memset(s, 0, sizeof(*s));
}

/* Does t[0..n) (a tail of the text) begin some stop string? */
static int could_start(const mu__stopscan_t *s, const char *t, size_t n)
{
	for (int i = 0; i < s->n; i++)
		if (n < s->len[i] && memcmp(t, s->stop[i], n) == 0)
			return 1;
	return 0;
}

/* The first position where a stop string occurs in t[0..n), or n. */
static size_t first_match(const mu__stopscan_t *s, const char *t, size_t n)
{
	size_t best = n;

	for (int i = 0; i < s->n; i++) {
		const char *p = memmem(t, n, s->stop[i], s->len[i]);

		if (p != NULL && (size_t)(p - t) < best)
			best = (size_t)(p - t);
	}
	return best;
}

int mu__stopscan_feed(mu__stopscan_t *s, const char *text, size_t len, mu__buf_t *out)
{
	size_t at, keep;
	int rc;

	if (s->matched)
		return 1;
	if (s->n == 0)
		return mu__buf_append(out, text, len);
	if ((rc = mu__buf_append(&s->held, text, len)) != 0)
		return rc;
	at = first_match(s, s->held.data, s->held.len);
	if (at < s->held.len) {
		s->matched = 1;
		rc = mu__buf_append(out, s->held.data, at);
		mu__buf_reset(&s->held);
		return rc != 0 ? rc : 1;
	}
	/* Keep the longest tail that could still grow into a stop string. */
	for (keep = s->held.len; keep > 0; keep--)
		if (could_start(s, s->held.data + s->held.len - keep, keep))
			break;
	if ((rc = mu__buf_append(out, s->held.data, s->held.len - keep)) != 0)
		return rc;
	mu__buf_consume(&s->held, s->held.len - keep);
	return 0;
}

int mu__stopscan_flush(mu__stopscan_t *s, mu__buf_t *out)
{
	int rc = s->matched ? 0 : mu__buf_append(out, s->held.data, s->held.len);

	mu__buf_reset(&s->held);
	return rc;
}
