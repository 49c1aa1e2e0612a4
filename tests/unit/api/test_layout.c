/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/core/layout.c: the table bindings check their
 * mirrors against. Each struct's fields are listed in order, without a
 * gap a missing field would leave, to its end; every options struct
 * starts with struct_size; lookups of what is not there fail.
 */
#include <errno.h>

#include "mu_test.h"

#include "muster/llm.h"
#include "muster/md.h"
#include "muster/pipeline.h"
#include "muster/serve.h"
#include "muster/tracker.h"
#include "api/layout_int.h"

#define ALIGN 8 /* no field of these structs is aligned more strictly */

static size_t round_up(size_t n)
{
	return (n + ALIGN - 1) / ALIGN * ALIGN;
}

static void test_fields_cover_each_struct(void **state)
{
	int ntypes = 0;

	(void)state;
	for (const mu__layout_t *t = mu__layouts(); t->name != NULL; t++, ntypes++) {
		size_t end = 0;
		int n = 0;

		for (const mu__layout_field_t *f = t->fields; f->name != NULL; f++, n++) {
			size_t off, size;

			/* in order, and no field left out before this one */
			assert_true(f->offset >= end);
			assert_true(f->offset <= round_up(end));
			end = f->offset + f->size;
			assert_int_equal(mu_layout_field(t->name, f->name, &off, &size), 0);
			assert_int_equal(off, f->offset);
			assert_int_equal(size, f->size);
		}
		assert_true(n > 0);
		assert_int_equal(round_up(end), t->size); /* nothing left out at the end */
		assert_int_equal(mu_layout_size(t->name), t->size);
		if (strstr(t->name, "_opts_t") != NULL) {
			assert_string_equal(t->fields[0].name, "struct_size");
			assert_int_equal(t->fields[0].size, sizeof(size_t));
		}
	}
	assert_true(ntypes >= 10);
}

static void test_lookups(void **state)
{
	size_t off = 7, size = 7;

	(void)state;
	assert_int_equal(mu_layout_size("mu_tracker_opts_t"), sizeof(mu_tracker_opts_t));
	assert_int_equal(mu_layout_field("mu_md_event_t", "detail", &off, &size), 0);
	assert_int_equal(off, offsetof(mu_md_event_t, detail));
	assert_int_equal(size, sizeof(((mu_md_event_t *)0)->detail));
	assert_int_equal(mu_layout_size("mu_no_such_t"), 0);
	assert_int_equal(mu_layout_size(NULL), 0);
	assert_int_equal(mu_layout_field("mu_no_such_t", "port", &off, &size), -ENOENT);
	assert_int_equal(mu_layout_field("mu_tracker_opts_t", "no_such", &off, &size), -ENOENT);
	assert_int_equal(mu_layout_field("mu_tracker_opts_t", NULL, &off, &size), -ENOENT);
	/* the serve layer's and the LLM stage's */
	assert_int_equal(mu_layout_size("mu_serve_opts_t"), sizeof(mu_serve_opts_t));
	assert_int_equal(mu_layout_field("mu_serve_opts_t", "chat_template", &off, &size), 0);
	assert_int_equal(off, offsetof(mu_serve_opts_t, chat_template));
	assert_int_equal(mu_layout_size("mu_metrics_server_opts_t"),
	                 sizeof(mu_metrics_server_opts_t));
	assert_int_equal(mu_layout_field("mu_metrics_server_opts_t", "serve", &off, &size), 0);
	assert_int_equal(off, offsetof(mu_metrics_server_opts_t, serve));
	assert_int_equal(mu_layout_size("mu_llm_stage_opts_t"), sizeof(mu_llm_stage_opts_t));
	assert_int_equal(mu_layout_field("mu_llm_stage_opts_t", "max_chunk", &off, &size), 0);
	assert_int_equal(off, offsetof(mu_llm_stage_opts_t, max_chunk));
	assert_int_equal(mu_layout_size("mu_llm_plan_opts_t"), sizeof(mu_llm_plan_opts_t));
	assert_int_equal(mu_layout_size("mu_llm_plan_stage_t"), sizeof(mu_llm_plan_stage_t));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fields_cover_each_struct),
		cmocka_unit_test(test_lookups),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
