/* SPDX-License-Identifier: MIT */
/* Unit tests for src/serve/oai.c: the OpenAI API's requests and replies. */
#include "mu_test.h"

#include <cjson/cJSON.h>

#include "core/buf_int.h"
#include "serve/oai_int.h"

static int decode(mu__oai_kind_t k, const char *body, mu__oai_req_t *r, mu__oai_err_t *e)
{
	return mu__oai_decode(k, body, strlen(body), 1000, r, e);
}

static void refuse(mu__oai_kind_t k, const char *body, const char *param, const char *needle)
{
	mu__oai_req_t r;
	mu__oai_err_t e = {0};

	assert_int_equal(decode(k, body, &r, &e), -1);
	assert_int_equal(e.status, 400);
	assert_string_equal(e.type, "invalid_request_error");
	if (param == NULL)
		assert_null(e.param);
	else
		assert_string_equal(e.param, param);
	assert_non_null(strstr(e.message, needle));
	mu__oai_req_free(&r);
}

static void test_completion_fields(void **state)
{
	mu__oai_req_t r;
	mu__oai_err_t e;

	(void)state;
	assert_int_equal(decode(MU__OAI_COMPLETIONS, "{\"model\": \"m\", \"prompt\": [\"hi\"], "
	                        "\"max_tokens\": 7, \"temperature\": 0.5, \"top_p\": 0.9, \"top_k\": "
	                        "-1, \"seed\": -3, \"stop\": \"\\n\", \"stream\": true, "
	                        "\"stream_options\": {\"include_usage\": true}, \"user\": \"u\", "
	                        "\"n\": 1, \"logprobs\": null, \"metadata\": {\"a\": \"b\"}, "
	                        "\"min_p\": 0, \"ignore_eos\": false}", &r, &e), 0);
	assert_string_equal(r.model, "m");
	assert_string_equal(r.prompt, "hi");
	assert_int_equal(r.max_tokens, 7);
	assert_true(r.has_temperature && r.temperature == 0.5 && r.has_top_p && r.top_p == 0.9);
	assert_true(r.has_top_k && r.top_k == 0 && r.has_seed && r.seed == (uint64_t)-3);
	assert_int_equal(r.nstop, 1);
	assert_string_equal(r.stop[0], "\n");
	assert_true(r.stream && r.include_usage);
	mu__oai_req_free(&r);
	assert_int_equal(decode(MU__OAI_COMPLETIONS, "{\"prompt\": [1, 2, 999], "
	                        "\"max_completion_tokens\": 3, \"max_tokens\": 9}", &r, &e), 0);
	assert_int_equal(r.nprompt_ids, 3);
	assert_int_equal(r.prompt_ids[2], 999);
	assert_int_equal(r.max_tokens, 3);
	assert_false(r.has_temperature);
	mu__oai_req_free(&r);
}

/* \u0000 is kept in prompts and contents, with their lengths. */
static void test_nul_is_kept(void **state)
{
	mu__oai_req_t r;
	mu__oai_err_t e;

	(void)state;
	assert_int_equal(decode(MU__OAI_COMPLETIONS, "{\"prompt\": \"a\\u0000b\\\\u0000\"}", &r,
	                        &e), 0);
	assert_int_equal(r.prompt_len, 9);
	assert_memory_equal(r.prompt, "a\0b\\u0000", 9);
	mu__oai_req_free(&r);
	assert_int_equal(decode(MU__OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": "
	                        "[{\"type\": \"text\", \"text\": \"\\u0000\"}, {\"type\": \"text\", "
	                        "\"text\": \"x\"}]}]}", &r, &e), 0);
	assert_int_equal(r.msgs[0].content_len, 3);
	assert_memory_equal(r.msgs[0].content, "\0\nx", 3);
	mu__oai_req_free(&r);
}

static void test_chat_messages(void **state)
{
	mu__oai_req_t r;
	mu__oai_err_t e;

	(void)state;
	assert_int_equal(decode(MU__OAI_CHAT, "{\"messages\": [{\"role\": \"developer\", \"content\": "
	                        "\"s\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", "
	                        "\"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": "
	                        "\"assistant\", \"content\": null, \"reasoning_content\": \"r\"}], "
	                        "\"chat_template_kwargs\": {\"enable_thinking\": false}}", &r, &e), 0);
	assert_int_equal(r.nmsgs, 3);
	assert_string_equal(r.msgs[0].role, "system");
	assert_string_equal(r.msgs[1].content, "a\nb");
	assert_string_equal(r.msgs[2].content, "");
	assert_string_equal(r.msgs[2].reasoning, "r");
	assert_int_equal(r.enable_thinking, 0);
	mu__oai_req_free(&r);
}

static void test_bad_requests_name_the_field(void **state)
{
	(void)state;
	refuse(MU__OAI_COMPLETIONS, "{", NULL, "not a JSON object");
	refuse(MU__OAI_COMPLETIONS, "{\"prompt\": \"x\", \"extra\": [1]}", "extra", "unknown");
	refuse(MU__OAI_COMPLETIONS, "{\"prompt\": \"x\", \"min_p\": 0.1}", "min_p", "not supported");
	refuse(MU__OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
	       "\"grammar\": \"g\"}", "grammar", "not supported");
	refuse(MU__OAI_COMPLETIONS, "{\"prompt\": \"x\", \"stop\": \"a\\u0000\"}", "stop", "NUL");
	refuse(MU__OAI_COMPLETIONS, "[0,0,0]", NULL, "not a JSON object");
	refuse(MU__OAI_COMPLETIONS, "[]", NULL, "not a JSON object");
	refuse(MU__OAI_COMPLETIONS, "{}", "prompt", "required");
	refuse(MU__OAI_COMPLETIONS, "{\"prompt\": 3}", "prompt", "must be a string");
	refuse(MU__OAI_COMPLETIONS, "{\"prompt\": [1, 1000]}", "prompt", "prompt[1]");
	refuse(MU__OAI_COMPLETIONS, "{\"prompt\": [\"a\", \"b\"]}", "prompt", "one prompt");
	refuse(MU__OAI_COMPLETIONS, "{\"prompt\": \"x\", \"model\": 1}", "model", "string");
	refuse(MU__OAI_COMPLETIONS, "{\"prompt\": \"x\", \"max_tokens\": 0}", "max_tokens", "between");
	refuse(MU__OAI_COMPLETIONS, "{\"prompt\": \"x\", \"top_p\": 1.5}", "top_p", "between");
	refuse(MU__OAI_COMPLETIONS, "{\"prompt\": \"x\", \"seed\": 1.5}", "seed", "integer");
	refuse(MU__OAI_COMPLETIONS, "{\"prompt\": \"x\", \"stream\": 1}", "stream", "boolean");
	refuse(MU__OAI_COMPLETIONS, "{\"prompt\": \"x\", \"n\": 2}", "n", "n=1");
	refuse(MU__OAI_COMPLETIONS, "{\"prompt\": \"x\", \"echo\": true}", "echo", "echo");
	refuse(MU__OAI_COMPLETIONS, "{\"prompt\": \"x\", \"logit_bias\": {\"1\": 5}}", "logit_bias",
	       "not supported");
	refuse(MU__OAI_COMPLETIONS, "{\"prompt\": \"x\", \"frequency_penalty\": 0.5}",
	       "frequency_penalty", "only 0");
	refuse(MU__OAI_CHAT, "{\"messages\": {}}", "messages", "non-empty array");
	refuse(MU__OAI_CHAT, "{\"messages\": [1]}", "messages", "messages[0]");
	refuse(MU__OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
	       "\"image_url\"}]}]}", "messages", "\"text\"");
	refuse(MU__OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": "
	       "[{}]}", "tools", "not supported");
	refuse(MU__OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
	       "\"response_format\": {\"type\": \"json_object\"}}", "response_format", "text");
}

static cJSON *parse(mu__buf_t *b, const char *pre)
{
	assert_true(b->len > strlen(pre));
	assert_memory_equal(b->data, pre, strlen(pre));
	return cJSON_Parse(b->data + strlen(pre));
}

static void test_replies(void **state)
{
	mu__oai_head_t h = {MU__OAI_CHAT, "chatcmpl-1", 1700000000, "m"};
	mu__oai_usage_t u = {3, 2};
	mu__oai_err_t e;
	mu__buf_t b;
	cJSON *j;

	(void)state;
	mu__buf_init(&b, 1 << 20);
	/* Not UTF-8, and a NUL: U+FFFD each. */
	assert_int_equal(mu__oai_result(&h, "a\xff" "b\0c", 5, "stop", &u, &b), 0);
	j = parse(&b, "{");
	cJSON_Delete(j);
	j = cJSON_Parse(b.data);
	assert_string_equal(cJSON_GetObjectItem(j, "object")->valuestring, "chat.completion");
	assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0)->child
	                    ->next->child->next->valuestring, "a\xef\xbf\xbd" "b\xef\xbf\xbd" "c");
	assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "total_tokens")
	                 ->valueint, 5);
	cJSON_Delete(j);
	mu__buf_reset(&b);
	assert_int_equal(mu__oai_chunk(&h, "", 0, 1, NULL, 1, &b), 0);
	assert_int_equal(b.data[b.len - 1], '\n');
	assert_int_equal(b.data[b.len - 2], '\n');
	assert_non_null(strstr(b.data, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}"));
	assert_non_null(strstr(b.data, "\"usage\":null"));
	mu__buf_reset(&b);
	assert_int_equal(mu__oai_usage_chunk(&h, &u, &b), 0);
	assert_non_null(strstr(b.data, "\"choices\":[]"));
	mu__buf_reset(&b);
	mu__oai_fail(&e, 404, "invalid_request_error", "model", "model_not_found", "no %s", "x");
	assert_int_equal(mu__oai_error_json(&e, &b), 0);
	assert_string_equal(b.data, "{\"error\":{\"message\":\"no x\",\"type\":"
	                    "\"invalid_request_error\",\"param\":\"model\",\"code\":"
	                    "\"model_not_found\"}}");
	mu__buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_completion_fields),
		cmocka_unit_test(test_chat_messages),
		cmocka_unit_test(test_nul_is_kept),
		cmocka_unit_test(test_bad_requests_name_the_field),
		cmocka_unit_test(test_replies),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
