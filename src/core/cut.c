/* SPDX-License-Identifier: MIT */
/*
 * The partitioner: contiguous cuts of a row of item costs, balanced into
 * k parts, or fitted to devices' budgets over the orders of the devices
 * (the contract is in cut_int.h). Both search a level by bisection, the
 * largest cost a part may have (or fraction of its budget a device may
 * fill), with a greedy pass deciding whether a level can be met. Callers
 * turn their model into costs; nothing here knows what an item is.
 */
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/cut_int.h"

/* The cost of part [a, i + 1), given sum, the cost of [a, i). */
static double grow(const mu__cut_items_t *it, int a, int i, double sum)
{
	sum += it->w[i];
	if (a == 0 && i == it->n - 1)
		sum -= it->shared;
	return sum;
}

double mu__cut_cost(const mu__cut_items_t *it, int a, int b)
{
	double sum = 0;

	for (int i = a; i < b; i++)
		sum = grow(it, a, i, sum);
	return sum;
}

/* The costliest part of one item: no level can be below it. */
static double largest_item(const mu__cut_items_t *it)
{
	double lo = 0;

	for (int i = 0; i < it->n; i++) {
		double c = grow(it, i, i, 0);

		lo = c > lo ? c : lo;
	}
	return lo;
}

/* ---- balanced into k parts ---- */

/*
 * FILL: k non-empty parts of at most cap, each starting the next one when
 * cap would be passed or when the items left (i..n-1) are just enough
 * for one per part still to come. 1 when it can.
 */
static int fill(const mu__cut_items_t *it, int k, double cap, int *cuts)
{
	int part = 0, n = it->n;
	double sum = 0;

	cuts[0] = 0;
	for (int i = 0; i < n; i++) {
		double next = grow(it, cuts[part], i, sum);

		if (i > cuts[part] && part < k - 1 && (next > cap || n - i == k - part - 1)) {
			cuts[++part] = i;
			next = grow(it, i, i, 0);
		}
		sum = next;
		if (sum > cap)
			return 0;
	}
	cuts[k] = n;
	return part == k - 1;
}

/* The fewest parts of at most cap (cuts: n + 1 entries): how many, or 0
 * when an item alone costs more. */
static int fewest(const mu__cut_items_t *it, double cap, int *cuts)
{
	int a = 0, m = 0;

	cuts[0] = 0;
	while (a < it->n) {
		int b = a;
		double sum = 0, next;

		while (b < it->n && (next = grow(it, a, b, sum)) <= cap) {
			sum = next;
			b++;
		}
		if (b == a)
			return 0;
		cuts[++m] = a = b;
	}
	return m;
}

static int meets(const mu__cut_items_t *it, int k, mu__cut_fill_t how, double cap, int *cuts)
{
	int m;

	if (how == MU__CUT_FILL)
		return fill(it, k, cap, cuts);
	m = fewest(it, cap, cuts);
	return m > 0 && m <= k;
}

/* m parts in cuts to k: halve the heaviest of two or more items (the
 * first of equals) at its middle, until there are k. */
static void halve(const mu__cut_items_t *it, int m, int k, int *cuts)
{
	while (m < k) {
		int best = -1;

		for (int i = 0; i < m; i++)
			if (cuts[i + 1] - cuts[i] > 1 &&
			    (best < 0 || mu__cut_cost(it, cuts[i], cuts[i + 1]) >
			                     mu__cut_cost(it, cuts[best], cuts[best + 1])))
				best = i;
		memmove(cuts + best + 2, cuts + best + 1, sizeof(*cuts) * (size_t)(m - best));
		cuts[best + 1] = cuts[best] + (cuts[best + 2] - cuts[best]) / 2;
		m++;
	}
}

int mu__cut_balanced(const mu__cut_items_t *it, int k, mu__cut_fill_t how, int *cuts)
{
	double lo, hi;
	int *try;

	if (k < 1 || it->n < k)
		return MU_EARG;
	try = mu__calloc((size_t)it->n + 1, sizeof(*try));
	if (try == NULL)
		return MU_ENOMEM;
	hi = mu__cut_cost(it, 0, it->n);
	lo = largest_item(it);
	if (!meets(it, k, how, hi, try)) {
		mu__free(try);
		return MU_EARG;
	}
	/* the best cap is in [lo, hi]: lo itself first, then bisect until lo
	 * and hi are adjacent doubles (a fixed tolerance would be too coarse
	 * for costs below 1, such as flops in GFLOP) */
	if (meets(it, k, how, lo, try))
		hi = lo;
	while (hi > lo) {
		double mid = lo + (hi - lo) / 2;

		if (mid <= lo || mid >= hi)
			break;
		if (meets(it, k, how, mid, try))
			hi = mid;
		else
			lo = mid;
	}
	if (how == MU__CUT_FILL) {
		fill(it, k, hi, cuts);
	} else {
		int m = fewest(it, hi, try);

		memcpy(cuts, try, sizeof(*cuts) * ((size_t)m + 1));
		halve(it, m, k, cuts);
	}
	mu__free(try);
	return 0;
}

/* ---- fitted to budgets ---- */

/* What a device of this budget may take at level x. */
static double room(uint64_t budget, mu__cut_goal_t goal, double x)
{
	double b = (double)budget;

	if (goal == MU__CUT_SHARE)
		return b * x;
	return b < x ? b : x;
}

/* Fill the devices in order, each with all it may take at level x
 * (filling greedily is the best a level can do: a device that takes less
 * only leaves more for the later ones). 1 when every item found a place. */
static int pack(const mu__cut_items_t *it, const uint64_t *budget, int nb, mu__cut_goal_t goal,
                double x, int *cuts)
{
	int i = 0;

	for (int k = 0; k < nb; k++) {
		double sum = 0, lim = room(budget[k], goal, x), next;

		cuts[k] = i;
		while (i < it->n && (next = grow(it, cuts[k], i, sum)) <= lim) {
			sum = next;
			i++;
		}
	}
	cuts[nb] = i;
	return i == it->n;
}

int mu__cut_fit(const mu__cut_items_t *it, const uint64_t *budget, int nb, mu__cut_goal_t goal,
                int *cuts, double *level)
{
	double lo = 0, hi = 1, tol = 0x1p-40;

	if (nb < 1 || it->n < 0)
		return MU_EARG;
	if (goal == MU__CUT_EVEN) {
		hi = mu__cut_cost(it, 0, it->n);
		lo = largest_item(it);
		tol = 0.5;
	}
	if (!pack(it, budget, nb, goal, hi, cuts))
		return MU_ETOOBIG;
	/* the smallest level that still places every item, by bisection (the
	 * halvings of [0, 1] are exact, so SHARE's levels are multiples of
	 * 2^-40 and compare equal for equal fits) */
	if (pack(it, budget, nb, goal, lo, cuts))
		hi = lo;
	while (hi - lo > tol) {
		double mid = lo + (hi - lo) / 2;

		if (pack(it, budget, nb, goal, mid, cuts))
			hi = mid;
		else
			lo = mid;
	}
	pack(it, budget, nb, goal, hi, cuts);
	if (level != NULL && goal == MU__CUT_EVEN) {
		*level = 0;
		for (int k = 0; k < nb; k++) {
			double c = mu__cut_cost(it, cuts[k], cuts[k + 1]);

			*level = c > *level ? c : *level;
		}
	} else if (level != NULL) {
		*level = hi;
	}
	return 0;
}

/* The next permutation of v[0..n) in lexicographic order; 0 after the last. */
static int next_order(int *v, int n)
{
	int i = n - 2, j = n - 1, t;

	while (i >= 0 && v[i] >= v[i + 1])
		i--;
	if (i < 0)
		return 0;
	while (v[j] <= v[i])
		j--;
	t = v[i], v[i] = v[j], v[j] = t;
	for (int a = i + 1, b = n - 1; a < b; a++, b--)
		t = v[a], v[a] = v[b], v[b] = t;
	return 1;
}

/* The orders tried past MU__CUT_PERMUTE_MAX devices: 0 given, 1 largest
 * budget first, 2 smallest first (stable: equals keep the given order). */
static void heuristic_order(const uint64_t *budget, int nb, int which, int *v)
{
	for (int i = 0; i < nb; i++)
		v[i] = i;
	for (int i = 1; which != 0 && i < nb; i++) { /* insertion sort */
		int x = v[i], j = i;

		while (j > 0 && (which == 1 ? budget[v[j - 1]] < budget[x] : budget[v[j - 1]] > budget[x])) {
			v[j] = v[j - 1];
			j--;
		}
		v[j] = x;
	}
}

/* The fit of one order, against the best so far: taken (and accepted) or not. */
typedef struct {
	int found, used;
	double level;
} best_t;

int mu__cut_fit_any(const mu__cut_items_t *it, const uint64_t *budget, int nb,
                    mu__cut_goal_t goal, mu__cut_accept_cb accept, void *ud, int *order,
                    int *cuts)
{
	uint64_t *pb;
	int *v, *c, tries = 0, rc = 0;
	best_t best = {0, 0, 0};

	if (nb < 1 || it->n < 0)
		return MU_EARG;
	pb = mu__calloc((size_t)nb, sizeof(*pb));
	v = mu__calloc((size_t)nb, sizeof(*v));
	c = mu__calloc((size_t)nb + 1, sizeof(*c));
	if (pb == NULL || v == NULL || c == NULL)
		rc = MU_ENOMEM;
	for (int i = 0; rc == 0 && i < nb; i++)
		v[i] = i; /* the given order first: it wins ties */
	while (rc == 0) {
		double level;
		int used = 0, r;

		for (int k = 0; k < nb; k++)
			pb[k] = budget[v[k]];
		r = mu__cut_fit(it, pb, nb, goal, c, &level);
		for (int k = 0; r == 0 && k < nb; k++)
			used += c[k + 1] > c[k];
		if (r == 0 && (!best.found || level < best.level ||
		               (level == best.level && used < best.used)) &&
		    (accept == NULL || (r = accept(v, c, nb, ud)) == 0)) {
			best = (best_t){1, used, level};
			memcpy(order, v, sizeof(int) * (size_t)nb);
			memcpy(cuts, c, sizeof(int) * ((size_t)nb + 1));
		} else if (r != 0 && r != MU_ETOOBIG) {
			rc = r;
		}
		if (nb <= MU__CUT_PERMUTE_MAX ? !next_order(v, nb) : ++tries == 3)
			break;
		if (nb > MU__CUT_PERMUTE_MAX)
			heuristic_order(budget, nb, tries, v);
	}
	mu__free(pb);
	mu__free(v);
	mu__free(c);
	if (rc == 0 && !best.found)
		rc = MU_ETOOBIG;
	return rc;
}
