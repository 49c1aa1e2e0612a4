/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/graph/plan.c: stage boundaries (inputs, outputs,
 * params) for skips that cross several stages and model outputs made
 * early; balanced cuts against brute force; packing into memory budgets.
 */
#include <math.h>
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

/* ---- balanced cuts: the smallest possible largest stage ---- */

/* The best largest-part sum over every way to cut w[0..n) into k parts. */
static double brute(const double *w, int n, int k)
{
	double best = INFINITY;

	if (k == 1) {
		double s = 0;

		for (int i = 0; i < n; i++)
			s += w[i];
		return s;
	}
	for (int first = 1; first <= n - k + 1; first++) {
		double s = 0, rest;

		for (int i = 0; i < first; i++)
			s += w[i];
		rest = brute(w + first, n - first, k - 1);
		best = fmin(best, fmax(s, rest));
	}
	return best;
}

static double largest(const double *w, const int *cuts, int n, int k)
{
	double m = 0;

	assert_int_equal(cuts[0], 0);
	assert_int_equal(cuts[k], n);
	for (int i = 0; i < k; i++) {
		double s = 0;

		assert_true(cuts[i] < cuts[i + 1]); /* never an empty stage */
		for (int j = cuts[i]; j < cuts[i + 1]; j++)
			s += w[j];
		m = fmax(m, s);
	}
	return m;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void check_balanced(const double *w, int n, int k)
{
	int cuts[16];
	double got, best;

	assert_int_equal(mu__plan_balanced(w, n, k, cuts), 0);
	got = largest(w, cuts, n, k);
	best = brute(w, n, k);
	if (got > best * (1 + 1e-12)) {
		char s[512];
		size_t off = 0;

		for (int i = 0; i < n; i++)
			off += (size_t)snprintf(s + off, sizeof(s) - off, " %g", w[i]);
		fail_msg("k=%d w=[%s ]: largest stage %.17g, best %.17g", k, s, got, best);
	}
}

static void test_balanced_vs_brute_force(void **state)
{
	static const double fixed[][6] = {
		{1, 1, 1, 1, 1, 1}, {6, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 6}, {0, 0, 0, 0, 0, 0},
		{3, 0, 0, 0, 0, 3}, {1, 2, 3, 4, 5, 6}, {5, 5, 1, 1, 1, 1},
	};
	double w[10];

	(void)state;
	for (size_t f = 0; f < sizeof(fixed) / sizeof(fixed[0]); f++)
		for (int k = 1; k <= 6; k++)
			check_balanced(fixed[f], 6, k);
	/* integers, fractions under 1, and byte-sized numbers */
	for (int it = 0; it < 3000; it++) {
		int n = 1 + (int)(next() % 10), k = 1 + (int)(next() % (uint64_t)n), kind = it % 3;

		for (int i = 0; i < n; i++)
			w[i] = kind == 0 ? (double)(next() % 20)
			     : kind == 1 ? (double)(next() % 1000) / 4096.0
			                 : (double)(next() % 1000000) * 4096.0;
		check_balanced(w, n, k);
	}
}

static void test_balanced_invalid(void **state)
{
	double w[3] = {1, 2, 3};
	int cuts[8];

	(void)state;
	assert_int_equal(mu__plan_balanced(w, 3, 0, cuts), MU_EARG);
	assert_int_equal(mu__plan_balanced(w, 3, 4, cuts), MU_EARG);
	assert_int_equal(mu__plan_balanced(w, 0, 1, cuts), MU_EARG);
	assert_int_equal(mu__plan_balanced(w, 3, 3, cuts), 0);
	assert_int_equal(cuts[1], 1);
	assert_int_equal(cuts[2], 2);
}

/* ---- fitting into budgets ---- */

/* The smallest largest stage any cut over the budgets allows (brute
 * force), or -1 when none fits. */
static double best_fit(const double *w, int n, const uint64_t *b, int nb, int at, int dev,
                       double worst)
{
	double best = -1;

	if (dev == nb)
		return at == n ? worst : -1;
	for (int end = at; end <= n; end++) {
		double sum = 0, r;

		for (int i = at; i < end; i++)
			sum += w[i];
		if (sum > (double)b[dev])
			break;
		r = best_fit(w, n, b, nb, end, dev + 1, sum > worst ? sum : worst);
		if (r >= 0 && (best < 0 || r < best))
			best = r;
	}
	return best;
}

static void test_fit_vs_brute_force(void **state)
{
	uint32_t seed = 3;

	(void)state;
	for (int round = 0; round < 3000; round++) {
		double w[9], largest = 0;
		uint64_t b[4];
		int cuts[5], n = 1 + (int)(seed % 9), nb = 1 + (int)((seed >> 8) % 4), rc;

		for (int i = 0; i < n; i++) {
			seed = seed * 1664525u + 1013904223u;
			w[i] = (double)((seed >> 16) % 5 == 0 ? 0 : (seed >> 16) % 40);
		}
		for (int k = 0; k < nb; k++) {
			seed = seed * 1664525u + 1013904223u;
			b[k] = (seed >> 16) % 120;
		}
		seed = seed * 1664525u + 1013904223u;
		rc = mu__plan_fit(w, n, b, nb, cuts);
		if (best_fit(w, n, b, nb, 0, 0, 0) < 0) {
			assert_int_equal(rc, MU_ETOOBIG);
			continue;
		}
		assert_int_equal(rc, 0);
		assert_int_equal(cuts[0], 0);
		assert_int_equal(cuts[nb], n);
		for (int k = 0; k < nb; k++) {
			double sum = 0;

			assert_true(cuts[k] <= cuts[k + 1]);
			for (int i = cuts[k]; i < cuts[k + 1]; i++)
				sum += w[i];
			assert_true(sum <= (double)b[k]);
			largest = sum > largest ? sum : largest;
		}
		/* integer weights: within half a unit is exact */
		assert_true(largest == best_fit(w, n, b, nb, 0, 0, 0));
	}
}

static void test_fit_cases(void **state)
{
	double w[] = {0, 16, 0, 0, 0, 0, 32, 0};
	int cuts[5];

	(void)state;
	/* one roomy device takes everything */
	assert_int_equal(mu__plan_fit(w, 8, (const uint64_t[]){100}, 1, cuts), 0);
	assert_int_equal(cuts[1], 8);
	/* two: balanced, 16 and 32 */
	assert_int_equal(mu__plan_fit(w, 8, (const uint64_t[]){100, 100}, 2, cuts), 0);
	assert_int_equal(cuts[1], 6);
	/* a device too small for the next node gets nothing */
	assert_int_equal(mu__plan_fit(w, 8, (const uint64_t[]){16, 8, 32}, 3, cuts), 0);
	assert_int_equal(cuts[1], 6);
	assert_int_equal(cuts[2], 6);
	assert_int_equal(cuts[3], 8);
	/* too small all together, or for one node */
	assert_int_equal(mu__plan_fit(w, 8, (const uint64_t[]){47}, 1, cuts), MU_ETOOBIG);
	assert_int_equal(mu__plan_fit(w, 8, (const uint64_t[]){16, 16, 16}, 3, cuts), MU_ETOOBIG);
	assert_int_equal(mu__plan_fit(w, 8, (const uint64_t[]){16}, 0, cuts), MU_EARG);
	/* nothing to place */
	assert_int_equal(mu__plan_fit(w, 0, (const uint64_t[]){0}, 1, cuts), 0);
}

/* The devices' order does not decide whether the model fits: an 8 and a
 * 2 (MiB, say) fit budgets of 9 and 3 given either way round. */
static void test_fit_any_either_order(void **state)
{
	double w[] = {8, 0, 2};
	int order[2], cuts[3];

	(void)state;
	/* packing in the given order cannot: 8 does not go on the 3 */
	assert_int_equal(mu__plan_fit(w, 3, (const uint64_t[]){3, 9}, 2, cuts), MU_ETOOBIG);
	assert_int_equal(mu__plan_fit_any(w, 3, (const uint64_t[]){9, 3}, 2, NULL, NULL, order, cuts), 0);
	assert_int_equal(order[0], 0);
	assert_int_equal(order[1], 1);
	assert_int_equal(cuts[1], 2);
	assert_int_equal(cuts[2], 3);
	assert_int_equal(mu__plan_fit_any(w, 3, (const uint64_t[]){3, 9}, 2, NULL, NULL, order, cuts), 0);
	assert_int_equal(order[0], 1); /* the 9 takes the first stage */
	assert_int_equal(order[1], 0);
	assert_int_equal(cuts[1], 2);
	assert_int_equal(cuts[2], 3);
	/* no order fits: 10 in all, but no device takes the 8 */
	assert_int_equal(mu__plan_fit_any(w, 3, (const uint64_t[]){5, 5, 5}, 3, NULL, NULL, order, cuts),
	                 MU_ETOOBIG);
	assert_int_equal(mu__plan_fit_any(w, 3, (const uint64_t[]){9}, 0, NULL, NULL, order, cuts), MU_EARG);
}

/* Ties go to the given order; a tie on the largest stage goes to fewer devices. */
static void test_fit_any_ties(void **state)
{
	double w[] = {4, 4};
	int order[3], cuts[4];

	(void)state;
	assert_int_equal(mu__plan_fit_any(w, 2, (const uint64_t[]){4, 4, 4}, 3, NULL, NULL, order, cuts), 0);
	for (int k = 0; k < 3; k++)
		assert_int_equal(order[k], k);
	/* 8 on one device is worse than 4 and 4, whatever the order */
	assert_int_equal(mu__plan_fit_any(w, 2, (const uint64_t[]){8, 4, 4}, 3, NULL, NULL, order, cuts), 0);
	assert_int_equal(cuts[1] - cuts[0], 1);
	assert_int_equal(cuts[2] - cuts[1], 1);
	assert_int_equal(cuts[3], 2);
}

static int refuse_first(const int *order, const int *cuts, int nb, void *ud)
{
	int *calls = ud;

	(void)order, (void)cuts, (void)nb;
	return (*calls)++ == 0 ? MU_ETOOBIG : 0;
}

static int fail_hard(const int *order, const int *cuts, int nb, void *ud)
{
	(void)order, (void)cuts, (void)nb, (void)ud;
	return MU_ENOMEM;
}

/* A fit accept refuses is passed over for the next; its errors stop the search. */
static void test_fit_any_accept(void **state)
{
	double w[] = {8, 0, 2};
	int order[2], cuts[3], calls = 0;

	(void)state;
	assert_int_equal(mu__plan_fit_any(w, 3, (const uint64_t[]){9, 9}, 2, refuse_first, &calls,
	                                  order, cuts), 0);
	assert_int_equal(calls, 2);
	assert_int_equal(order[0], 1); /* the same cut, on the other order */
	assert_int_equal(cuts[1], 2);
	assert_int_equal(mu__plan_fit_any(w, 3, (const uint64_t[]){9, 9}, 2, fail_hard, NULL, order,
	                                  cuts), MU_ENOMEM);
}

/* Past MU_PLAN_PERMUTE_MAX devices, largest first still finds the fit. */
static void test_fit_any_many_devices(void **state)
{
	double w[] = {8, 2, 2, 2, 2, 2, 2};
	uint64_t b[] = {2, 2, 2, 2, 2, 2, 8, 2};
	int order[8], cuts[9], seen[8] = {0};

	(void)state;
	assert_int_equal(mu__plan_fit(w, 7, b, 8, cuts), MU_ETOOBIG);
	assert_int_equal(mu__plan_fit_any(w, 7, b, 8, NULL, NULL, order, cuts), 0);
	assert_int_equal(order[0], 6);
	assert_int_equal(cuts[1], 1);
	for (int k = 0; k < 8; k++)
		seen[order[k]]++;
	for (int k = 0; k < 8; k++)
		assert_int_equal(seen[k], 1); /* a permutation */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_from_cuts),
		cmocka_unit_test(test_from_cuts_invalid),
		cmocka_unit_test(test_from_cuts_out_of_memory),
		cmocka_unit_test(test_balanced_vs_brute_force),
		cmocka_unit_test(test_balanced_invalid),
		cmocka_unit_test(test_fit_vs_brute_force),
		cmocka_unit_test(test_fit_cases),
		cmocka_unit_test(test_fit_any_either_order),
		cmocka_unit_test(test_fit_any_ties),
		cmocka_unit_test(test_fit_any_accept),
		cmocka_unit_test(test_fit_any_many_devices),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
