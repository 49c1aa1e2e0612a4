/* SPDX-License-Identifier: MIT */
/* Unit tests for src/core/metrics.c: the registry and its exposition text. */
#include <math.h>
#include <stdio.h>

#include "mu_test.h"

#include "core/metrics_int.h"

static char *render(mu_metrics_t *m)
{
	char *text = NULL;
	size_t len = 0;

	assert_int_equal(mu_metrics_render(m, &text, &len), 0);
	assert_non_null(text);
	assert_int_equal(strlen(text), len);
	return text;
}

static void has(const char *text, const char *line)
{
	if (strstr(text, line) == NULL)
		fail_msg("missing %s in:\n%s", line, text);
}

static void test_counter_and_gauge(void **state)
{
	mu_metrics_t *m;
	mu__metric_t *c, *g, *again;
	char *text;

	(void)state;
	assert_int_equal(mu_metrics_new(&m), 0);
	c = mu__metric_family(m, MU_METRIC_COUNTER, "muster_t_grants_total", "Grants.", "key",
	                      NULL, 0);
	g = mu__metric_family(m, MU_METRIC_GAUGE, "muster_t_open", "Open now.", NULL, NULL, 0);
	again = mu__metric_family(m, MU_METRIC_COUNTER, "muster_t_grants_total", "x", "key",
	                          NULL, 0);
	assert_ptr_equal(c, again);
	for (int i = 0; i < 5; i++)
		mu__metric_add(c, "demo", 1);
	mu__metric_add(c, "other", 2.5);
	mu__metric_set(g, NULL, 7);
	mu__metric_add(g, "ignored: no label", -3);
	text = render(m);
	has(text, "# HELP muster_t_grants_total Grants.\n# TYPE muster_t_grants_total counter\n"
	          "muster_t_grants_total{key=\"demo\"} 5\nmuster_t_grants_total{key=\"other\"} 2.5\n");
	has(text, "# TYPE muster_t_open gauge\nmuster_t_open 4\n");
	has(text, "\nprocess_resident_memory_bytes ");
	has(text, "\nprocess_open_fds ");
	has(text, "\nprocess_cpu_seconds_total ");
	has(text, "muster_build_info{version=\"");
	assert_int_equal(text[strlen(text) - 1], '\n');
	mu_free(text);
	mu_metrics_free(m);
}

static void test_histogram_is_cumulative(void **state)
{
	static const double b[] = {0.1, 1, 10};
	mu_metrics_t *m;
	mu__metric_t *h;
	char *text;

	(void)state;
	assert_int_equal(mu_metrics_new(&m), 0);
	h = mu__metric_family(m, MU_METRIC_HISTOGRAM, "muster_t_seconds", "Waits.", "op", b, 3);
	mu__metric_observe(h, "get", 0.05);
	mu__metric_observe(h, "get", 0.1); /* le is inclusive */
	mu__metric_observe(h, "get", 0.5);
	mu__metric_observe(h, "get", 100);
	text = render(m);
	has(text, "# TYPE muster_t_seconds histogram\n"
	          "muster_t_seconds_bucket{op=\"get\",le=\"0.1\"} 2\n"
	          "muster_t_seconds_bucket{op=\"get\",le=\"1\"} 3\n"
	          "muster_t_seconds_bucket{op=\"get\",le=\"10\"} 3\n"
	          "muster_t_seconds_bucket{op=\"get\",le=\"+Inf\"} 4\n"
	          "muster_t_seconds_sum{op=\"get\"} 100.65\n"
	          "muster_t_seconds_count{op=\"get\"} 4\n");
	mu_free(text);
	mu_metrics_free(m);
}

static void test_label_values_are_escaped_and_bounded(void **state)
{
	mu_metrics_t *m;
	mu__metric_t *c;
	char *text, lv[32];

	(void)state;
	assert_int_equal(mu_metrics_new(&m), 0);
	c = mu__metric_family(m, MU_METRIC_COUNTER, "muster_t_total", "A \\ help\nline.", "key",
	                      NULL, 0);
	mu__metric_add(c, "a\"b\\c\nd", 1);
	text = render(m);
	has(text, "# HELP muster_t_total A \\\\ help\\nline.\n");
	has(text, "muster_t_total{key=\"a\\\"b\\\\c\\nd\"} 1\n");
	mu_free(text);
	/* a peer naming ever new keys: past the bound they share _other */
	for (int i = 0; i < MU_METRIC_MAX_SERIES + 50; i++) {
		snprintf(lv, sizeof(lv), "k%d", i);
		mu__metric_add(c, lv, 1);
	}
	text = render(m);
	has(text, "muster_t_total{key=\"_other\"} 51\n");
	assert_null(strstr(text, "key=\"k999\""));
	has(text, "key=\"k998\"} 1\n");
	mu_free(text);
	mu_metrics_free(m);
}

static void test_null_registry_counts_nothing(void **state)
{
	mu__metric_t *f;

	(void)state;
	f = mu__metric_family(NULL, MU_METRIC_COUNTER, "x_total", "x", NULL, NULL, 0);
	assert_null(f);
	mu__metric_add(f, NULL, 1);
	mu__metric_set(f, NULL, 1);
	mu__metric_observe(f, NULL, 1);
	mu__metric_touch(f, NULL);
	mu_metrics_free(NULL);
}

static void test_special_values_and_touch(void **state)
{
	mu_metrics_t *m;
	mu__metric_t *g, *c;
	char *text;

	(void)state;
	assert_int_equal(mu_metrics_new(&m), 0);
	g = mu__metric_family(m, MU_METRIC_GAUGE, "muster_t_g", "g", "k", NULL, 0);
	c = mu__metric_family(m, MU_METRIC_COUNTER, "muster_t_unseen_total", "c", "k", NULL, 0);
	mu__metric_set(g, "inf", INFINITY);
	mu__metric_set(g, "nan", NAN);
	mu__metric_set(g, "big", 1e300);
	text = render(m);
	has(text, "muster_t_g{k=\"inf\"} +Inf\n");
	has(text, "muster_t_g{k=\"nan\"} NaN\n");
	has(text, "muster_t_g{k=\"big\"} 1e+300\n");
	assert_null(strstr(text, "muster_t_unseen_total")); /* no sample, no family */
	mu_free(text);
	mu__metric_touch(c, "demo");
	text = render(m);
	has(text, "muster_t_unseen_total{k=\"demo\"} 0\n");
	mu_free(text);
	mu_metrics_free(m);
}

static void test_out_of_memory(void **state)
{
	mu_metrics_t *m;
	char *text = (char *)1;
	size_t len;

	(void)state;
	mu_test_fail_after(0);
	assert_int_equal(mu_metrics_new(&m), MU_ENOMEM);
	assert_null(m);
	mu_test_alloc_reset();
	assert_int_equal(mu_metrics_new(&m), 0);
	for (long k = 0; k < 12; k++) {
		mu__metric_t *f;

		mu_test_fail_after(k);
		f = mu__metric_family(m, MU_METRIC_HISTOGRAM, "muster_t_h", "h", "op",
		                      mu__metric_seconds, mu__metric_nseconds);
		mu__metric_observe(f, "x", 1);
		mu_test_alloc_reset();
	}
	mu_test_fail_after(0);
	assert_int_equal(mu_metrics_render(m, &text, &len), MU_ENOMEM);
	assert_null(text);
	mu_test_alloc_reset();
	mu_metrics_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counter_and_gauge),
		cmocka_unit_test(test_histogram_is_cumulative),
		cmocka_unit_test(test_label_values_are_escaped_and_bounded),
		cmocka_unit_test(test_null_registry_counts_nothing),
		cmocka_unit_test(test_special_values_and_touch),
		cmocka_unit_test(test_out_of_memory),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
