/* SPDX-License-Identifier: MIT */
/*
 * The defaults of the public options every stage kind's coordinator and
 * cluster take (mu_coord_opts_t, mu_cluster_opts_t of muster/pipeline.h):
 * the graph coordinator and cluster (pipeline/graph), the LLM ones
 * (pipeline/llm) and the LLM handle all start from these, so they live
 * below both kinds.
 */
#include <string.h>

#include "muster/pipeline.h"
#include "core/opts_int.h"
#include "pipeline/opts_int.h"

void mu__coord_defaults(mu_coord_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->struct_size = sizeof(*o);
	o->connect_timeout_ms = 10000;
	o->io_timeout_ms = 60000;
	o->max_frame_bytes = (uint64_t)1 << 30;
}

void mu_coord_opts_init_size(mu_coord_opts_t *o, size_t size)
{
	mu_coord_opts_t d;

	mu__coord_defaults(&d);
	mu__opts_fill(o, size, &d, sizeof(d));
}

void mu__cluster_defaults(mu_cluster_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->struct_size = sizeof(*o);
	o->tracker_host = "127.0.0.1";
	o->tracker_port = 9190;
	o->devices = 1;
	o->request_timeout_ms = 30000;
	o->weights = MU_WEIGHTS_AUTO;
	o->max_replacements = 3;
	o->coord = NULL;
}

void mu_cluster_opts_init_size(mu_cluster_opts_t *o, size_t size)
{
	mu_cluster_opts_t d;

	mu__cluster_defaults(&d);
	mu__opts_fill(o, size, &d, sizeof(d));
}
