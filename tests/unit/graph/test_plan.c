/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/graph/plan.c: stage boundaries (inputs, outputs,
 * params) for skips that cross several stages and model outputs made
 * early. Where the cuts go is tests/unit/core/test_cut.c's.
 */
#include <stdio.h>

#include "mu_test.h"

#include "core/strmap_int.h"
#include "graph/plan_int.h"

/*
 *   n0 a = relu(x)        n4 e = neg(d)
 *   n1 b = a + P1         n5 f = e + a      (a again: skips 3 stages)
 *   n2 c = b * P1         n6 g = f * P2
 *   n3 d = c + a          n7 y = g + b      (b: a model output, made early)
 */
static const char graph_json[] =
	"{\"format\":\"muster-graph\",\"version\":1,"
	"\"inputs\":[{\"name\":\"x\",\"shape\":[4]}],\"outputs\":[\"y\",\"b\"],\"nodes\":["
	"{\"name\":\"n0\",\"op\":\"relu\",\"inputs\":[\"x\"],\"outputs\":[\"a\"]},"
	"{\"name\":\"n1\",\"op\":\"add\",\"inputs\":[\"a\",\"P1\"],\"outputs\":[\"b\"]},"
	"{\"name\":\"n2\",\"op\":\"mul\",\"inputs\":[\"b\",\"P1\"],\"outputs\":[\"c\"]},"
	"{\"name\":\"n3\",\"op\":\"add\",\"inputs\":[\"c\",\"a\"],\"outputs\":[\"d\"]},"
	"{\"name\":\"n4\",\"op\":\"neg\",\"inputs\":[\"d\"],\"outputs\":[\"e\"]},"
	"{\"name\":\"n5\",\"op\":\"add\",\"inputs\":[\"e\",\"a\"],\"outputs\":[\"f\"]},"
	"{\"name\":\"n6\",\"op\":\"mul\",\"inputs\":[\"f\",\"P2\"],\"outputs\":[\"g\"]},"
	"{\"name\":\"n7\",\"op\":\"add\",\"inputs\":[\"g\",\"b\"],\"outputs\":[\"y\"]}"
	"]}";

static mu__graph_t g;
static mu__strmap_t bytes;
static uint64_t p1 = 16, p2 = 32;
static char why[512];

static int setup(void **state)
{
	(void)state;
	if (mu__graph_parse(graph_json, strlen(graph_json), &g, why, sizeof(why)) != 0)
		return -1;
	mu__strmap_init(&bytes);
	mu__strmap_put(&bytes, "P1", 2, &p1, NULL);
	mu__strmap_put(&bytes, "P2", 2, &p2, NULL);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	mu__graph_free(&g);
	mu__strmap_free(&bytes, NULL);
	return 0;
}

/* "a,b" from a list of names. */
static const char *joined(char **v, int n)
{
	static char s[256];
	size_t off = 0;

	s[0] = '\0';
	for (int i = 0; i < n; i++)
		off += (size_t)snprintf(s + off, sizeof(s) - off, "%s%s", i ? "," : "", v[i]);
	return s;
}

static void stage_is(const mu__stage_t *s, int first, int last, const char *in, const char *out,
                     const char *params, uint64_t pbytes)
{
	assert_int_equal(s->first, first);
	assert_int_equal(s->last, last);
	assert_string_equal(joined(s->inputs, s->ninputs), in);
	assert_string_equal(joined(s->outputs, s->noutputs), out);
	assert_string_equal(joined(s->params, s->nparams), params);
	assert_int_equal(s->param_bytes, pbytes);
}

static void test_from_cuts(void **state)
{
	static const int cuts[] = {0, 2, 4, 6, 8};
	static const double flops[] = {1, 2, 4, 8, 16, 32, 64, 128};
	mu__plan_t p;

	(void)state;
	assert_int_equal(mu__plan_from_cuts(&g, cuts, 4, &bytes, flops, &p), 0);
	assert_int_equal(p.n, 4);
	/* inputs and params sorted; outputs in the order they are made */
	stage_is(&p.s[0], 0, 2, "x", "a,b", "P1", 16);
	stage_is(&p.s[1], 2, 4, "a,b", "d", "P1", 16);   /* P1 loaded again */
	stage_is(&p.s[2], 4, 6, "a,d", "f", "", 0);      /* b passes by, unlisted */
	stage_is(&p.s[3], 6, 8, "b,f", "y", "P2", 32);
	assert_true(p.s[0].flops == 3);
	assert_true(p.s[3].flops == 192);
	mu__plan_free(&p);
	assert_int_equal(p.n, 0);
	assert_null(p.s);

	/* one stage: the model's own boundary */
	{
		static const int one[] = {0, 8};

		assert_int_equal(mu__plan_from_cuts(&g, one, 1, NULL, NULL, &p), 0);
		stage_is(&p.s[0], 0, 8, "x", "b,y", "P1,P2", 0); /* no byte map: 0 */
		assert_true(p.s[0].flops == 0);
		mu__plan_free(&p);
	}
	/* one node per stage */
	{
		static const int each[] = {0, 1, 2, 3, 4, 5, 6, 7, 8};

		assert_int_equal(mu__plan_from_cuts(&g, each, 8, &bytes, NULL, &p), 0);
		stage_is(&p.s[0], 0, 1, "x", "a", "", 0);
		stage_is(&p.s[1], 1, 2, "a", "b", "P1", 16);
		stage_is(&p.s[2], 2, 3, "b", "c", "P1", 16);
		stage_is(&p.s[3], 3, 4, "a,c", "d", "", 0);
		stage_is(&p.s[5], 5, 6, "a,e", "f", "", 0);
		stage_is(&p.s[7], 7, 8, "b,g", "y", "", 0);
		mu__plan_free(&p);
	}
	/* a range that does not start at 0 takes earlier values from outside */
	{
		static const int tail[] = {3, 8};

		assert_int_equal(mu__plan_from_cuts(&g, tail, 1, &bytes, NULL, &p), 0);
		stage_is(&p.s[0], 3, 8, "a,b,c", "y", "P2", 32);
		mu__plan_free(&p);
	}
}

static void test_from_cuts_invalid(void **state)
{
	static const int bad[][3] = {{0, 0, 8}, {0, 9, 9}, {-1, 3, 8}, {0, 5, 3}, {0, 8, 9}};
	mu__plan_t p;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(mu__plan_from_cuts(&g, bad[i], 2, &bytes, NULL, &p), MU_EARG);
		assert_int_equal(p.n, 0);
		assert_null(p.s);
	}
	assert_int_equal(mu__plan_from_cuts(&g, bad[0], 0, &bytes, NULL, &p), 0);
	assert_int_equal(p.n, 0);
	mu__plan_free(&p);
}

static void test_from_cuts_out_of_memory(void **state)
{
	static const int cuts[] = {0, 3, 5, 8};
	mu__plan_t p;
	long n;
	int rc;

	(void)state;
	for (n = 0; n < 1000; n++) {
		mu_test_fail_after(n);
		rc = mu__plan_from_cuts(&g, cuts, 3, &bytes, NULL, &p);
		mu_test_alloc_reset();
		if (rc == 0)
			break;
		assert_int_equal(rc, MU_ENOMEM);
		assert_null(p.s);
	}
	assert_true(n < 1000);
	stage_is(&p.s[1], 3, 5, "a,c", "e", "", 0);
	mu__plan_free(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_from_cuts),
		cmocka_unit_test(test_from_cuts_invalid),
		cmocka_unit_test(test_from_cuts_out_of_memory),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
