/* SPDX-License-Identifier: MIT */
/*
 * The coordinator of graph stages (pipeline/graph/coord.c) over sessions
 * already open (the main job, pipeline/graph/cluster.c): n empty stages,
 * then each set from its session (taken on success) and its READY/INFO
 * description; setting a stage again replaces its device (the node range
 * must be the same). mu__coord_check: the stages cover the graph.
 * mu__coord_failed_stage: whose connection broke in the last forward call
 * (-1: none; a stage's own ERROR is not a broken connection).
 */
#ifndef MU_PIPELINE_GRAPH_COORD_INT_H
#define MU_PIPELINE_GRAPH_COORD_INT_H

#include <stddef.h>

#include "muster/pipeline.h"

int mu__coord_new(int n, const mu_coord_opts_t *o, mu_coord_t **out);
/* Fill o with this build's coordinator defaults (full size). */
int mu__coord_set(mu_coord_t *c, int i, mu_session_t *sess, const char *addr,
                  const char *desc, char *err, size_t el);
int mu__coord_check(const mu_coord_t *c, char *err, size_t el);
int mu__coord_failed_stage(const mu_coord_t *c);

#endif
