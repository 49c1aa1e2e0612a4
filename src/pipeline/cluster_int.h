/* SPDX-License-Identifier: MIT */
/*
 * The main job's lifecycle, coordinator side, whatever kind of stage it
 * runs (pipeline/cluster.c): devices from the tracker and their metadata
 * (devices.c), the work cut to their budgets, each stage assigned and its
 * weights loaded on its device or streamed to it, and a lost device
 * replaced with only its stage set up again. What differs by kind (how
 * the work is cut, what a stage's ASSIGN says, how its weights are sent,
 * the coordinator that takes the sessions, how a stage is described) is
 * behind mu__cluster_kind_t, filled by pipeline/graph/cluster.c and
 * pipeline/llm/cluster.c. One caller at a time.
 */
#ifndef MU_PIPELINE_CLUSTER_INT_H
#define MU_PIPELINE_CLUSTER_INT_H

#include <stdint.h>

#include "muster/pipeline.h"
#include "pipeline/msg_int.h"
#include "pipeline/pipeline_int.h"

/*
 * A stage kind's side of the lifecycle. ud is the kind's cluster; i a
 * stage (0 <= i < the stages its plan made). Methods that fail say why
 * in err.
 */
typedef struct {
	const char *noun;   /* what a device's own copy is of: "model", "checkpoint" */
	/*
	 * Cut the work over the nd devices granted (budget[j]: device j's):
	 * *n stages, stage i onto device device[i] (device has nd entries).
	 * Makes what holds the stages (the coordinator) and says what it
	 * cut. MU_ETOOBIG with the numbers in err when it does not fit.
	 */
	int (*plan)(void *ud, const uint64_t *budget, int nd, int *device, int *n, char *err,
	            size_t el);
	/* The budget a device needs for stage i (a replacement is held to it). */
	uint64_t (*need)(void *ud, int i);
	/* Stage i's range, for narration: "nodes 3..5", "layers 0..2". */
	void (*range)(void *ud, int i, char *buf, size_t n);
	/* ASSIGN's body for stage i, weights streamed or the device's own
	 * (NUL-terminated, mu__free'd by the caller). */
	int (*assign)(void *ud, int i, int stream, char **body, char *err, size_t el);
	/* Streamed: send stage i's weights on ch, once the device is READY
	 * (ready: that reply's body). addr names the device in errors. */
	int (*stream)(void *ud, int i, mu__chan_t *ch, const char *ready, const char *addr,
	              char *err, size_t el);
	/* Stage i is loaded: the coordinator takes the session (on success
	 * only) with desc, the device's last READY. Again for the same i
	 * replaces the stage's device. */
	int (*set)(void *ud, int i, mu_session_t *sess, const char *addr, const char *desc,
	           char *err, size_t el);
	/* Every stage is set (or one was replaced): they form one model. */
	int (*check)(void *ud, char *err, size_t el);
	/* Narrate stage i, loaded on addr in ms (streamed or from its copy). */
	void (*placed)(void *ud, int i, const char *addr, int streamed, double ms);
} mu__cluster_kind_t;

typedef struct {
	mu__devpool_opts_t pool;   /* tracker, key, priority, timeouts, narration */
	int devices;               /* to request */
	mu_weights_t weights;      /* from a device's own copy, or streamed */
	uint64_t digest;           /* what a device's own copy must be */
	int max_replacements;      /* lost devices replaced, in all */
} mu__cluster_opts_t;

/* Where stage i is. */
typedef struct {
	char addr[300];
	uint64_t budget;
	int streamed;              /* weights streamed, else its own copy */
	int replaced;              /* times it moved to another device */
} mu__placed_t;

/* Embedded in a kind's cluster; zeroed, it is safe to free. */
typedef struct {
	const mu__cluster_kind_t *kind;
	void *ud;
	mu__cluster_opts_t o;
	mu__devpool_t pool;
	mu__placed_t *placed;      /* n of them */
	int n;
	int replacements;
} mu__cluster_t;

/*
 * Request o->devices devices, plan the work to their budgets, give each
 * stage its device (unused devices are released), and check the stages.
 * On failure, err says why; free c either way (its kind's state is the
 * caller's).
 */
int mu__cluster_start(mu__cluster_t *c, const mu__cluster_kind_t *kind, void *ud,
                      const mu__cluster_opts_t *o, char *err, size_t el);
/* The pool and stage records (not the kind's coordinator). */
void mu__cluster_free(mu__cluster_t *c);
/*
 * Stage k's device is lost: ask the tracker for another (up to 3, each
 * held to the stage's need), set the stage up there alone, and check.
 * MU_ETOOBIG once max_replacements devices were replaced.
 */
int mu__cluster_replace(mu__cluster_t *c, int k, char *err, size_t el);
/* (Narration goes through mu__devpool_say(&c->pool, ...).) */

#endif
