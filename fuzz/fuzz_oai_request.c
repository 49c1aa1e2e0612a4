/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer driver: an OpenAI API request body as `muster serve` takes it
 * in (both endpoints), then what the server does with a decoded one: the
 * chat rendered by every template family, the stop strings run over the
 * rendered text, and the reply encoders over arbitrary bytes.
 */
#include <stdint.h>
#include <string.h>

#include "core/buf_int.h"
#include "serve/chat_int.h"
#include "serve/oai_int.h"
#include "serve/stopscan_int.h"

static void use(const mu__oai_req_t *r, const uint8_t *data, size_t size)
{
	static const char *fam[] = {"chatml", "qwen3", "llama3", "llama2", "mistral"};
	mu__oai_head_t h = {r->kind, "id", 0, "m"};
	mu__oai_usage_t u = {1, 2};
	mu__chat_opts_t o = {r->enable_thinking};
	mu__stopscan_t s;
	mu__chat_tmpl_t t;
	mu__buf_t b, out;
	char why[600];

	mu__buf_init(&b, 1 << 24);
	mu__buf_init(&out, 1 << 24);
	for (size_t i = 0; r->nmsgs > 0 && i < sizeof(fam) / sizeof(fam[0]); i++) {
		if (mu__chat_by_name(fam[i], "<s>", "</s>", &t) != 0)
			continue;
		mu__buf_reset(&b);
		mu__chat_render(&t, r->msgs, r->nmsgs, &o, &b, why, sizeof(why));
		mu__chat_free(&t);
	}
	if (mu__stopscan_init(&s, r->stop, r->nstop) == 0) {
		for (size_t i = 0; i < b.len; i += 7)
			if (mu__stopscan_feed(&s, b.data + i, b.len - i < 7 ? b.len - i : 7, &out) != 0)
				break;
		mu__stopscan_flush(&s, &out);
		mu__stopscan_free(&s);
	}
	mu__oai_chunk(&h, (const char *)data, size, 1, NULL, 1, &out);
	mu__oai_result(&h, (const char *)data, size, "stop", &u, &out);
	mu__buf_free(&b);
	mu__buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	mu__oai_req_t r;
	mu__oai_err_t e;

	if (size > 1 << 20)
		return 0;
	for (int k = 0; k < 2; k++) {
		if (mu__oai_decode(k ? MU__OAI_CHAT : MU__OAI_COMPLETIONS, (const char *)data, size, 512,
		                   &r, &e) == 0)
			use(&r, data, size);
		mu__oai_req_free(&r);
	}
	return 0;
}
