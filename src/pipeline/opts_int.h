/* SPDX-License-Identifier: MIT */
/*
 * The defaults of the coordinator's and the cluster's public options
 * (pipeline/opts.c), whole structs of this build's size: what
 * mu_coord_opts_init and mu_cluster_opts_init fill a caller's with.
 */
#ifndef MU_PIPELINE_OPTS_INT_H
#define MU_PIPELINE_OPTS_INT_H

#include "muster/pipeline.h"

void mu__coord_defaults(mu_coord_opts_t *o);
void mu__cluster_defaults(mu_cluster_opts_t *o);

#endif
