/* SPDX-License-Identifier: MIT */
/*
 * The partitioner (core/cut.c): a row of items with costs cut into
 * contiguous parts, balanced into k parts or fitted to devices' budgets
 * in whichever order of the devices fits best. Pure arithmetic, no I/O:
 * what an item costs is the caller's to say (graph/model.c: a node's
 * weight bytes or flops; llm/plan.c: a layer's weights, and its KV cache
 * when placing on devices).
 */
#ifndef MU_CORE_CUT_INT_H
#define MU_CORE_CUT_INT_H

#include <stdint.h>

/*
 * The items. A part costs the sum of its items' costs, added in item
 * order, less `shared` when the part holds both the first item and the
 * last: what both ends count but one part holding both needs once (a
 * decoder's embedding when its head is tied to it). 0 <= shared <= w[0]
 * and w[n-1]; 0 when n == 1. Sums are exact while they are integers below
 * 2^53 (byte counts), so integer costs cut the same in any order of
 * addition.
 */
typedef struct {
	const double *w;   /* w[0..n): each item's cost, >= 0 */
	int n;
	double shared;
} mu__cut_items_t;

/* What part [a, b) costs (0 when a == b). */
double mu__cut_cost(const mu__cut_items_t *it, int a, int b);

/* Of the cuts into k parts whose largest part is smallest, which one. */
typedef enum {
	MU__CUT_FILL,  /* each part takes all it can, leaving an item for each part to come */
	MU__CUT_HALVE  /* the fewest parts that can, then the heaviest part of two or more
	                * items halved (at its middle item) until there are k */
} mu__cut_fill_t;

/*
 * Cut into k non-empty parts, the largest as small as it can be: part i
 * is [cuts[i], cuts[i+1]) (k + 1 entries, cuts[0] = 0, cuts[k] = n).
 * MU_EARG unless 1 <= k <= n; MU_ENOMEM.
 */
int mu__cut_balanced(const mu__cut_items_t *it, int k, mu__cut_fill_t fill, int *cuts);

/* What fitting to budgets keeps small: the level of a fit. */
typedef enum {
	MU__CUT_EVEN,  /* the largest part's cost, found to half a unit */
	MU__CUT_SHARE  /* the fullest device's fill, cost over budget: found to 2^-40 (a
	                * larger device takes a larger part) */
} mu__cut_goal_t;

/*
 * Fit to devices in the order given: device k takes [cuts[k], cuts[k+1])
 * (nb + 1 entries; a device may take none) costing at most budget[k],
 * and the goal's level is as small as it can be. *level (may be NULL) is
 * that level: the largest part (EVEN), or the fill no device passes
 * (SHARE). MU_ETOOBIG when no cut fits, MU_EARG when nb < 1.
 */
int mu__cut_fit(const mu__cut_items_t *it, const uint64_t *budget, int nb, mu__cut_goal_t goal,
                int *cuts, double *level);

/* Devices up to this many are tried in every order (6! = 720). */
#define MU__CUT_PERMUTE_MAX 6

/*
 * Judges a fit mu__cut_fit_any found: order[k] is the budget index of the
 * k-th device in pipeline order, which takes [cuts[k], cuts[k+1]). 0
 * takes it, MU_ETOOBIG refuses it (the search goes on), any other error
 * stops the search and is returned.
 */
typedef int (*mu__cut_accept_cb)(const int *order, const int *cuts, int nb, void *ud);

/*
 * mu__cut_fit over the devices in whichever order fits best, so that the
 * fit does not depend on the order the budgets come in (the order a
 * tracker granted the devices): every order when nb <=
 * MU__CUT_PERMUTE_MAX, else the given order, largest budget first and
 * smallest first (equal budgets keep their given order). Of the fits
 * accept takes (NULL: all), the lowest level wins, then the one using
 * fewest devices, then the earliest order tried (the given one first).
 * order gets nb entries (the budget index of each device in pipeline
 * order), cuts nb + 1 as for mu__cut_fit. MU_ETOOBIG when no order fits
 * (order and cuts then unspecified), MU_EARG when nb < 1, MU_ENOMEM.
 */
int mu__cut_fit_any(const mu__cut_items_t *it, const uint64_t *budget, int nb,
                    mu__cut_goal_t goal, mu__cut_accept_cb accept, void *ud, int *order,
                    int *cuts);

#endif
