/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/core/cut.c: balanced cuts (both ways of placing the
 * slack) and fits to budgets (both goals) against brute force over every
 * cut, with and without a cost the two ends share; the device orders
 * tried and how ties go; refusals, bad arguments and failed allocations.
 */
#include <math.h>

#include "mu_test.h"

#include "core/cut_int.h"

static mu__cut_items_t items(const double *w, int n, double shared)
{
	return (mu__cut_items_t){w, n, shared};
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Random costs: integers, fractions under 1, or byte-sized numbers; with
 * a shared cost (no more than either end) one time in three. */
static mu__cut_items_t random_items(double *w, int n, int kind)
{
	double shared = 0;

	for (int i = 0; i < n; i++)
		w[i] = kind == 0 ? (double)(next() % 20)
		     : kind == 1 ? (double)(next() % 1000) / 4096.0
		                 : (double)(next() % 1000000) * 4096.0;
	if (n > 1 && kind != 1 && next() % 3 == 0)
		shared = floor(fmin(w[0], w[n - 1]) * (double)(next() % 101) / 100.0);
	return items(w, n, shared);
}

static void test_cost(void **state)
{
	double w[] = {5, 1, 2, 5};
	mu__cut_items_t it = items(w, 4, 3);

	(void)state;
	assert_true(mu__cut_cost(&it, 0, 4) == 10); /* 13, the shared 3 once */
	assert_true(mu__cut_cost(&it, 0, 3) == 8);
	assert_true(mu__cut_cost(&it, 1, 4) == 8);
	assert_true(mu__cut_cost(&it, 1, 3) == 3);
	assert_true(mu__cut_cost(&it, 2, 2) == 0);
}

/* ---- balanced: the smallest possible largest part ---- */

/* The best largest part over every cut of [at, n) into k parts. */
static double brute(const mu__cut_items_t *it, int at, int k)
{
	double best = INFINITY;

	if (k == 1)
		return mu__cut_cost(it, at, it->n);
	for (int end = at + 1; end <= it->n - k + 1; end++)
		best = fmin(best, fmax(mu__cut_cost(it, at, end), brute(it, end, k - 1)));
	return best;
}

static double largest(const mu__cut_items_t *it, const int *cuts, int k)
{
	double m = 0;

	assert_int_equal(cuts[0], 0);
	assert_int_equal(cuts[k], it->n);
	for (int i = 0; i < k; i++) {
		assert_true(cuts[i] < cuts[i + 1]); /* never an empty part */
		m = fmax(m, mu__cut_cost(it, cuts[i], cuts[i + 1]));
	}
	return m;
}

static void check_balanced(const mu__cut_items_t *it, int k, mu__cut_fill_t how)
{
	int cuts[16];
	double got, best;

	assert_int_equal(mu__cut_balanced(it, k, how, cuts), 0);
	got = largest(it, cuts, k);
	best = brute(it, 0, k);
	if (got > best * (1 + 1e-12)) {
		char s[512];
		size_t off = 0;

		for (int i = 0; i < it->n; i++)
			off += (size_t)snprintf(s + off, sizeof(s) - off, " %g", it->w[i]);
		fail_msg("k=%d fill=%d w=[%s ] shared %g: largest part %.17g, best %.17g", k, how, s,
		         it->shared, got, best);
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
		for (int k = 1; k <= 6; k++) {
			mu__cut_items_t it = items(fixed[f], 6, 0);

			check_balanced(&it, k, MU__CUT_FILL);
			check_balanced(&it, k, MU__CUT_HALVE);
		}
	for (int i = 0; i < 3000; i++) {
		int n = 1 + (int)(next() % 10), k = 1 + (int)(next() % (uint64_t)n);
		mu__cut_items_t it = random_items(w, n, i % 3);

		check_balanced(&it, k, MU__CUT_FILL);
		check_balanced(&it, k, MU__CUT_HALVE);
	}
}

/* Of the best cuts, FILL gives the early parts all they can take and
 * HALVE splits the heaviest part (the first of equals) at its middle. */
static void test_balanced_slack(void **state)
{
	double w[] = {1, 1, 1, 1}, t[] = {4, 1, 1, 1, 1, 4};
	mu__cut_items_t it = items(w, 4, 0), tied = items(t, 6, 4);
	int cuts[7];

	(void)state;
	assert_int_equal(mu__cut_balanced(&it, 3, MU__CUT_FILL, cuts), 0);
	assert_int_equal(cuts[1], 2);
	assert_int_equal(cuts[2], 3);
	assert_int_equal(mu__cut_balanced(&it, 3, MU__CUT_HALVE, cuts), 0);
	assert_int_equal(cuts[1], 1);
	assert_int_equal(cuts[2], 2);
	assert_int_equal(cuts[3], 4);
	/* one part holds both ends, and counts the shared 4 once: 8 */
	assert_int_equal(mu__cut_balanced(&tied, 1, MU__CUT_HALVE, cuts), 0);
	assert_true(mu__cut_cost(&tied, cuts[0], cuts[1]) == 8);
	/* in two, each end counts it: 6 and 6 */
	assert_int_equal(mu__cut_balanced(&tied, 2, MU__CUT_HALVE, cuts), 0);
	assert_int_equal(cuts[1], 3);
}

static void test_balanced_invalid(void **state)
{
	double w[3] = {1, 2, 3};
	mu__cut_items_t it = items(w, 3, 0), none = items(w, 0, 0);
	int cuts[8];

	(void)state;
	assert_int_equal(mu__cut_balanced(&it, 0, MU__CUT_FILL, cuts), MU_EARG);
	assert_int_equal(mu__cut_balanced(&it, 4, MU__CUT_HALVE, cuts), MU_EARG);
	assert_int_equal(mu__cut_balanced(&none, 1, MU__CUT_FILL, cuts), MU_EARG);
	for (int how = MU__CUT_FILL; how <= MU__CUT_HALVE; how++) {
		assert_int_equal(mu__cut_balanced(&it, 3, how, cuts), 0);
		assert_int_equal(cuts[1], 1);
		assert_int_equal(cuts[2], 2);
	}
}

/* ---- fitted to budgets ---- */

/*
 * The lowest level of any cut over [at, n) on devices dev.. (brute
 * force): the largest part (EVEN) or the largest part / budget (SHARE);
 * -1 when none fits.
 */
static double best_fit(const mu__cut_items_t *it, const uint64_t *b, int nb, mu__cut_goal_t goal,
                       int at, int dev, double worst)
{
	double best = -1;

	if (dev == nb)
		return at == it->n ? worst : -1;
	for (int end = at; end <= it->n; end++) {
		double c = mu__cut_cost(it, at, end), r, lv;

		if (c > (double)b[dev])
			break;
		lv = goal == MU__CUT_EVEN ? c : c == 0 ? 0 : c / (double)b[dev];
		r = best_fit(it, b, nb, goal, end, dev + 1, lv > worst ? lv : worst);
		if (r >= 0 && (best < 0 || r < best))
			best = r;
	}
	return best;
}

static void check_fit(const mu__cut_items_t *it, const uint64_t *b, int nb, mu__cut_goal_t goal)
{
	int cuts[6], rc = mu__cut_fit(it, b, nb, goal, cuts, NULL);
	double best = best_fit(it, b, nb, goal, 0, 0, 0), level = 0, got;

	if (best < 0) {
		assert_int_equal(rc, MU_ETOOBIG);
		return;
	}
	assert_int_equal(rc, 0);
	assert_int_equal(mu__cut_fit(it, b, nb, goal, cuts, &level), 0);
	assert_int_equal(cuts[0], 0);
	assert_int_equal(cuts[nb], it->n);
	got = 0;
	for (int k = 0; k < nb; k++) {
		double c = mu__cut_cost(it, cuts[k], cuts[k + 1]);

		assert_true(cuts[k] <= cuts[k + 1]);
		assert_true(c <= (double)b[k]);
		got = fmax(got, goal == MU__CUT_EVEN ? c : c == 0 ? 0 : c / (double)b[k]);
	}
	if (goal == MU__CUT_EVEN) { /* integer costs: within half a unit is exact */
		assert_true(got == best);
		assert_true(level == got);
	} else { /* the level is found to 2^-40, and the cut is under it */
		assert_true(got <= level && level <= best + 0x1p-40);
	}
}

static void test_fit_vs_brute_force(void **state)
{
	uint32_t seed = 3;

	(void)state;
	for (int round = 0; round < 3000; round++) {
		double w[9];
		uint64_t b[4];
		int n = 1 + (int)(seed % 9), nb = 1 + (int)((seed >> 8) % 4);
		mu__cut_items_t it;

		for (int i = 0; i < n; i++) {
			seed = seed * 1664525u + 1013904223u;
			w[i] = (double)((seed >> 16) % 5 == 0 ? 0 : (seed >> 16) % 40);
		}
		for (int k = 0; k < nb; k++) {
			seed = seed * 1664525u + 1013904223u;
			b[k] = (seed >> 16) % 120;
		}
		seed = seed * 1664525u + 1013904223u;
		it = items(w, n, n > 1 && round % 4 == 0 ? fmin(w[0], w[n - 1]) : 0);
		check_fit(&it, b, nb, MU__CUT_EVEN);
		check_fit(&it, b, nb, MU__CUT_SHARE);
	}
}

static void test_fit_cases(void **state)
{
	double w[] = {0, 16, 0, 0, 0, 0, 32, 0}, e[] = {10, 10, 10, 10, 10, 10, 10, 10};
	mu__cut_items_t it = items(w, 8, 0), eight = items(e, 8, 0);
	int cuts[5];

	(void)state;
	/* one roomy device takes everything */
	assert_int_equal(mu__cut_fit(&it, (const uint64_t[]){100}, 1, MU__CUT_EVEN, cuts, NULL), 0);
	assert_int_equal(cuts[1], 8);
	/* two: balanced, 16 and 32 */
	assert_int_equal(mu__cut_fit(&it, (const uint64_t[]){100, 100}, 2, MU__CUT_EVEN, cuts, NULL), 0);
	assert_int_equal(cuts[1], 6);
	/* a device too small for the next node gets nothing */
	assert_int_equal(mu__cut_fit(&it, (const uint64_t[]){16, 8, 32}, 3, MU__CUT_EVEN, cuts, NULL), 0);
	assert_int_equal(cuts[1], 6);
	assert_int_equal(cuts[2], 6);
	assert_int_equal(cuts[3], 8);
	/* too small all together, or for one node */
	assert_int_equal(mu__cut_fit(&it, (const uint64_t[]){47}, 1, MU__CUT_EVEN, cuts, NULL),
	                 MU_ETOOBIG);
	assert_int_equal(mu__cut_fit(&it, (const uint64_t[]){16, 16, 16}, 3, MU__CUT_SHARE, cuts, NULL),
	                 MU_ETOOBIG);
	assert_int_equal(mu__cut_fit(&it, (const uint64_t[]){16}, 0, MU__CUT_EVEN, cuts, NULL), MU_EARG);
	/* nothing to place */
	it.n = 0;
	assert_int_equal(mu__cut_fit(&it, (const uint64_t[]){0}, 1, MU__CUT_EVEN, cuts, NULL), 0);
	assert_int_equal(mu__cut_fit(&it, (const uint64_t[]){0}, 1, MU__CUT_SHARE, cuts, NULL), 0);
	assert_int_equal(cuts[1], 0);
	/* EVEN evens the parts out; SHARE gives a device three times the
	 * budget three times the share */
	assert_int_equal(mu__cut_fit(&eight, (const uint64_t[]){100, 300}, 2, MU__CUT_EVEN, cuts,
	                             NULL), 0);
	assert_int_equal(cuts[1], 4);
	assert_int_equal(mu__cut_fit(&eight, (const uint64_t[]){100, 300}, 2, MU__CUT_SHARE, cuts,
	                             NULL), 0);
	assert_int_equal(cuts[1], 2);
}

/* The devices' order does not decide whether the model fits: an 8 and a
 * 2 (MiB, say) fit budgets of 9 and 3 given either way round. */
static void test_fit_any_either_order(void **state)
{
	double w[] = {8, 0, 2};
	mu__cut_items_t it = items(w, 3, 0);
	int order[2], cuts[3];

	(void)state;
	for (int goal = MU__CUT_EVEN; goal <= MU__CUT_SHARE; goal++) {
		/* packing in the given order cannot: 8 does not go on the 3 */
		assert_int_equal(mu__cut_fit(&it, (const uint64_t[]){3, 9}, 2, goal, cuts, NULL),
		                 MU_ETOOBIG);
		assert_int_equal(mu__cut_fit_any(&it, (const uint64_t[]){9, 3}, 2, goal, NULL, NULL,
		                                 order, cuts), 0);
		assert_int_equal(order[0], 0);
		assert_int_equal(order[1], 1);
		assert_int_equal(cuts[1], 2);
		assert_int_equal(cuts[2], 3);
		assert_int_equal(mu__cut_fit_any(&it, (const uint64_t[]){3, 9}, 2, goal, NULL, NULL,
		                                 order, cuts), 0);
		assert_int_equal(order[0], 1); /* the 9 takes the first part */
		assert_int_equal(order[1], 0);
		assert_int_equal(cuts[1], 2);
		assert_int_equal(cuts[2], 3);
		/* no order fits: 10 in all, but no device takes the 8 */
		assert_int_equal(mu__cut_fit_any(&it, (const uint64_t[]){5, 5, 5}, 3, goal, NULL, NULL,
		                                 order, cuts), MU_ETOOBIG);
		assert_int_equal(mu__cut_fit_any(&it, (const uint64_t[]){9}, 0, goal, NULL, NULL, order,
		                                 cuts), MU_EARG);
	}
}

/* Ties go to the given order; a tie on the level goes to fewer devices. */
static void test_fit_any_ties(void **state)
{
	double w[] = {4, 4}, x[] = {10, 10};
	mu__cut_items_t it = items(w, 2, 0), two = items(x, 2, 0);
	int order[3], cuts[4];

	(void)state;
	assert_int_equal(mu__cut_fit_any(&it, (const uint64_t[]){4, 4, 4}, 3, MU__CUT_EVEN, NULL, NULL,
	                                 order, cuts), 0);
	for (int k = 0; k < 3; k++)
		assert_int_equal(order[k], k);
	/* 8 on one device is worse than 4 and 4, whatever the order */
	assert_int_equal(mu__cut_fit_any(&it, (const uint64_t[]){8, 4, 4}, 3, MU__CUT_EVEN, NULL, NULL,
	                                 order, cuts), 0);
	assert_int_equal(cuts[1] - cuts[0], 1);
	assert_int_equal(cuts[2] - cuts[1], 1);
	assert_int_equal(cuts[3], 2);
	/* SHARE: the 20 alone full, or the two 10s full: one device wins */
	assert_int_equal(mu__cut_fit_any(&two, (const uint64_t[]){10, 10, 20}, 3, MU__CUT_SHARE, NULL,
	                                 NULL, order, cuts), 0);
	assert_int_equal(order[0], 2);
	assert_int_equal(cuts[1], 2);
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
	mu__cut_items_t it = items(w, 3, 0);
	int order[2], cuts[3], calls = 0;

	(void)state;
	assert_int_equal(mu__cut_fit_any(&it, (const uint64_t[]){9, 9}, 2, MU__CUT_EVEN, refuse_first,
	                                 &calls, order, cuts), 0);
	assert_int_equal(calls, 2);
	assert_int_equal(order[0], 1); /* the same cut, on the other order */
	assert_int_equal(cuts[1], 2);
	assert_int_equal(mu__cut_fit_any(&it, (const uint64_t[]){9, 9}, 2, MU__CUT_EVEN, fail_hard,
	                                 NULL, order, cuts), MU_ENOMEM);
}

/* Past MU__CUT_PERMUTE_MAX devices, largest first and smallest first
 * are tried after the given order. */
static void test_fit_any_many_devices(void **state)
{
	double w[] = {8, 2, 2, 2, 2, 2, 2}, s[] = {1, 10, 10, 10, 10, 10, 10, 10};
	uint64_t b[] = {2, 2, 2, 2, 2, 2, 8, 2}, up[] = {10, 10, 10, 10, 10, 10, 10, 1};
	mu__cut_items_t it = items(w, 7, 0), small = items(s, 8, 0);
	int order[8], cuts[9], seen[8];

	(void)state;
	for (int goal = MU__CUT_EVEN; goal <= MU__CUT_SHARE; goal++) {
		assert_int_equal(mu__cut_fit(&it, b, 8, goal, cuts, NULL), MU_ETOOBIG);
		assert_int_equal(mu__cut_fit_any(&it, b, 8, goal, NULL, NULL, order, cuts), 0);
		assert_int_equal(order[0], 6); /* largest first */
		assert_int_equal(cuts[1], 1);
		memset(seen, 0, sizeof(seen));
		for (int k = 0; k < 8; k++)
			seen[order[k]]++;
		for (int k = 0; k < 8; k++)
			assert_int_equal(seen[k], 1); /* a permutation */
		/* the 1 must take the first item, so it must come first */
		assert_int_equal(mu__cut_fit(&small, up, 8, goal, cuts, NULL), MU_ETOOBIG);
		assert_int_equal(mu__cut_fit_any(&small, up, 8, goal, NULL, NULL, order, cuts), 0);
		assert_int_equal(order[0], 7);
		for (int k = 1; k < 8; k++)
			assert_int_equal(order[k], k - 1); /* equals keep the given order */
	}
}

/* Out of memory: MU_ENOMEM, never a half-made answer or a crash. */
static void test_out_of_memory(void **state)
{
	double w[] = {1, 2, 3, 4, 5};
	mu__cut_items_t it = items(w, 5, 0);
	int order[3], cuts[6], rc;
	long n;

	(void)state;
	for (n = 0; n < 100; n++) {
		mu_test_fail_after(n);
		rc = mu__cut_fit_any(&it, (const uint64_t[]){9, 9, 9}, 3, MU__CUT_EVEN, NULL, NULL, order,
		                     cuts);
		if (rc == 0)
			rc = mu__cut_balanced(&it, 3, MU__CUT_HALVE, cuts);
		mu_test_alloc_reset();
		if (rc == 0)
			break;
		assert_int_equal(rc, MU_ENOMEM);
	}
	assert_true(n < 100);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cost),
		cmocka_unit_test(test_balanced_vs_brute_force),
		cmocka_unit_test(test_balanced_slack),
		cmocka_unit_test(test_balanced_invalid),
		cmocka_unit_test(test_fit_vs_brute_force),
		cmocka_unit_test(test_fit_cases),
		cmocka_unit_test(test_fit_any_either_order),
		cmocka_unit_test(test_fit_any_ties),
		cmocka_unit_test(test_fit_any_accept),
		cmocka_unit_test(test_fit_any_many_devices),
		cmocka_unit_test(test_out_of_memory),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
