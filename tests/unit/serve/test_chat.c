/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/serve/chat.c: recognising chat templates and rendering
 * messages. The expected strings are what HF's Jinja (@huggingface/jinja
 * 0.5.11) renders from the real templates for the same messages (the
 * interop test test_serve.py checks many more cases live), except where
 * that library departs from Python's Jinja, which is what models were
 * trained with: its s.lstrip("\n") strips every kind of whitespace.
 */
#include "mu_test.h"

#include "core/buf_int.h"
#include "serve/chat_int.h"

/* Template snippets: just the markers each family is recognised by. */
#define CHATML "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n'}}"
#define QWEN25 "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a " \
	"helpful assistant.<|im_end|>\\n' }}{{- '<|im_start|>system\\n' + messages[0]['content'] }}"
#define QWEN3 "<|im_start|>{%- set ns = namespace(last_query_index=1) %}reasoning_content <think>"
#define LLAMA3 "{% set content = '<|start_header_id|>' + message['role'] %}"
#define LLAMA31 "<|start_header_id|>{%- set date_string = \"26 Jul 2024\" %}{{- \"Cutting " \
	"Knowledge Date: December 2023\\n\" }}{{- \"Today Date: \" + date_string + \"\\n\\n\" }}"
#define LLAMA2 "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}<<SYS>>"
#define MISTRAL "{{ bos_token }}{{ '[INST] ' + message['content'] + ' [/INST]' }}"

static const mu__chat_msg_t convo[] = {
	{"system", " Sys ", NULL, 0, 0},
	{"user", " q1\n", NULL, 0, 0},
	{"assistant", "<think>\nr\n</think>\n\n a1 ", NULL, 0, 0},
	{"user", "q2", NULL, 0, 0},
};

static void render(const char *tmpl, const char *bos, const char *eos, const mu__chat_msg_t *m,
                   int n, int thinking, const char *want)
{
	mu__chat_opts_t o = {thinking};
	mu__chat_tmpl_t t;
	char why[600] = "";
	mu__buf_t b;

	mu__buf_init(&b, 1 << 20);
	assert_int_equal(mu__chat_detect(tmpl, bos, eos, &t, why, sizeof(why)), 0);
	assert_int_equal(mu__chat_render(&t, m, n, &o, &b, why, sizeof(why)), 0);
	assert_string_equal(b.data, want);
	mu__buf_free(&b);
	mu__chat_free(&t);
}

static void test_render_families(void **state)
{
	(void)state;
	render(LLAMA2, "<s>", "</s>", convo, 4, -1,
	       "<s>[INST] <<SYS>>\n Sys \n<</SYS>>\n\n q1 [/INST] <think>\nr\n</think>\n\n a1 </s>"
	       "<s>[INST] q2 [/INST]");
	render(MISTRAL, "<s>", "</s>", convo + 1, 3, -1,
	       "<s>[INST]  q1\n [/INST]<think>\nr\n</think>\n\n a1 </s>[INST] q2 [/INST]");
	render(QWEN25, "", "<|im_end|>", convo + 1, 3, -1,
	       "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
	       "assistant.<|im_end|>\n<|im_start|>user\n q1\n<|im_end|>\n<|im_start|>assistant\n"
	       "<think>\nr\n</think>\n\n a1 <|im_end|>\n<|im_start|>user\nq2<|im_end|>\n"
	       "<|im_start|>assistant\n");
	render(QWEN3, "", "<|im_end|>", convo, 4, -1,
	       "<|im_start|>system\n Sys <|im_end|>\n<|im_start|>user\n q1\n<|im_end|>\n"
	       /* Python: "\n\n a1 ".lstrip("\n") keeps the space (the JS library
	        * drops it) */
	       "<|im_start|>assistant\n a1 <|im_end|>\n<|im_start|>user\nq2<|im_end|>\n"
	       "<|im_start|>assistant\n");
	render(QWEN3, "", "<|im_end|>", convo + 3, 1, 0,
	       "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
	render(LLAMA31, "<|begin_of_text|>", "<|eot_id|>", convo + 1, 3, -1,
	       "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
	       "December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user"
	       "<|end_header_id|>\n\nq1<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
	       "<think>\nr\n</think>\n\n a1<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nq2"
	       "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
	render(LLAMA3, "<|begin_of_text|>", "<|end_of_text|>", convo, 4, -1,
	       "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nSys<|eot_id|>"
	       "<|start_header_id|>user<|end_header_id|>\n\nq1<|eot_id|><|start_header_id|>assistant"
	       "<|end_header_id|>\n\n<think>\nr\n</think>\n\n a1<|eot_id|><|start_header_id|>user"
	       "<|end_header_id|>\n\nq2<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void test_qwen3_keeps_the_last_turns_thinking(void **state)
{
	static const mu__chat_msg_t m[] = {
		{"user", "q", NULL, 0, 0},
		{"assistant", "<think>\nplan\n</think>\n\nans", NULL, 0, 0},
	};
	static const mu__chat_msg_t given[] = {
		{"user", "q", NULL, 0, 0},
		{"assistant", "ans", "\nwhy\n", 0, 0},
	};

	(void)state;
	render(QWEN3, "", "", m, 2, -1,
	       "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nplan\n</think>\n\nans"
	       "<|im_end|>\n<|im_start|>assistant\n");
	render(QWEN3, "", "", given, 2, -1,
	       "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nwhy\n</think>\n\nans"
	       "<|im_end|>\n<|im_start|>assistant\n");
}

static void test_chatml_default_system(void **state)
{
	mu__chat_tmpl_t t;
	char why[600];

	(void)state;
	assert_int_equal(mu__chat_detect(QWEN25, NULL, NULL, &t, why, sizeof(why)), 0);
	assert_int_equal(t.kind, MU__CHAT_CHATML);
	assert_string_equal(t.default_system, "You are Qwen, created by Alibaba Cloud. You are a "
	                    "helpful assistant.");
	assert_string_equal(mu__chat_end_of_turn(&t), "<|im_end|>");
	mu__chat_free(&t);
	assert_int_equal(mu__chat_detect(CHATML, NULL, NULL, &t, why, sizeof(why)), 0);
	assert_null(t.default_system);
	mu__chat_free(&t);
}

static void refused(const char *tmpl, const char *needle)
{
	mu__chat_tmpl_t t = {0};
	char why[600] = "";

	assert_int_equal(mu__chat_detect(tmpl, "<s>", "</s>", &t, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, needle));
	assert_int_equal(t.kind, 0);
}

static void test_unknown_templates_are_named(void **state)
{
	(void)state;
	refused(NULL, "no chat template");
	refused("", "no chat template");
	refused("{% for m in messages %}<|user|>\n{{ m['content'] }}", "starts \"{% for m in");
	refused("<|im_start|><think>{{ x }}", "ChatML with <think>");
	refused("<|start_header_id|>Cutting Knowledge Date", "Llama 3.1+ with another");
	refused("[INST] [SYSTEM_PROMPT]", "Mistral [INST] variant");
	refused("[INST]\n{{ system_message }}", "\\n");
}

static void bad(const char *tmpl, const mu__chat_msg_t *m, int n, const char *needle)
{
	mu__chat_tmpl_t t;
	char why[600] = "";
	mu__buf_t b;

	mu__buf_init(&b, 1 << 20);
	assert_int_equal(mu__chat_detect(tmpl, "<s>", "</s>", &t, why, sizeof(why)), 0);
	assert_int_equal(mu__chat_render(&t, m, n, NULL, &b, why, sizeof(why)), MU_EARG);
	assert_non_null(strstr(why, needle));
	mu__buf_free(&b);
	mu__chat_free(&t);
}

static void test_messages_a_template_cannot_take(void **state)
{
	static const mu__chat_msg_t two_users[] = {{"user", "a", NULL, 0, 0}, {"user", "b", NULL, 0, 0}};
	static const mu__chat_msg_t tool[] = {{"tool", "a", NULL, 0, 0}};

	(void)state;
	bad(LLAMA2, two_users, 2, "alternate");
	bad(MISTRAL, convo, 1, "alternate");
	bad(MISTRAL, convo, 0, "empty");
	bad(CHATML, tool, 1, "role \"tool\"");
}

static void test_by_name_and_strip(void **state)
{
	mu__chat_tmpl_t t;
	size_t n = strlen(" \t\xc2\xa0x y\xe3\x80\x80\n");
	const char *s = mu__py_strip(" \t\xc2\xa0x y\xe3\x80\x80\n", &n);

	(void)state;
	assert_int_equal(n, 3);
	assert_memory_equal(s, "x y", 3);
	assert_int_equal(mu__chat_by_name("llama3", "<|begin_of_text|>", "", &t), 0);
	assert_int_equal(t.kind, MU__CHAT_LLAMA3);
	assert_string_equal(mu__chat_name(t.kind), "llama3");
	assert_string_equal(mu__chat_end_of_turn(&t), "<|eot_id|>");
	mu__chat_free(&t);
	assert_int_equal(mu__chat_by_name("jinja", "", "", &t), MU_EARG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_render_families),
		cmocka_unit_test(test_qwen3_keeps_the_last_turns_thinking),
		cmocka_unit_test(test_chatml_default_system),
		cmocka_unit_test(test_unknown_templates_are_named),
		cmocka_unit_test(test_messages_a_template_cannot_take),
		cmocka_unit_test(test_by_name_and_strip),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
