/* SPDX-License-Identifier: MIT */
/*
 * The text of new tokens as they come (llm/gen_int.h): a streaming
 * decoder over a buffer that holds any one token's text.
 */
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "llm/gen_int.h"

int mu__textout_init(mu__textout_t *o, const mu__tok_t *t, const int32_t *prompt, size_t n)
{
	const char *s;
	size_t len, i;

	mu__tok_stream_init(&o->ts, t);
	o->cap = mu__tok_stream_cap(t);
	if ((o->buf = mu__malloc(o->cap)) == NULL)
		return MU_ENOMEM;
	for (i = 0; i < n; i++)
		mu__textout_feed(o, prompt[i], &s, &len);
	return 0;
}

void mu__textout_feed(mu__textout_t *o, int32_t id, const char **text, size_t *len)
{
	*len = 0;
	*text = o->buf;
	mu__tok_stream_feed(&o->ts, id, o->buf, o->cap, len);
}

void mu__textout_flush(mu__textout_t *o, const char **text, size_t *len)
{
	*len = 0;
	*text = o->buf;
	mu__tok_stream_flush(&o->ts, o->buf, o->cap, len);
}

void mu__textout_free(mu__textout_t *o)
{
	mu__free(o->buf);
	o->buf = NULL;
}
