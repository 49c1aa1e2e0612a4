/* SPDX-License-Identifier: MIT */
/*
 * What the graph coordinator (pipeline/graph/coord.c) keeps of each stage,
 * shared with the reading of the stages' descriptions (coord_info.c).
 */
#ifndef MU_PIPELINE_GRAPH_COORD_PRIV_INT_H
#define MU_PIPELINE_GRAPH_COORD_PRIV_INT_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "muster/pipeline.h"
#include "pipeline/msg_int.h"

typedef struct {
	char addr[300];
	mu_stream_t *fd;
	mu_session_t *sess;    /* a tracker session (owned), or NULL: fd is ours */
	mu__chan_t c;
	char *desc;
	int first, last, nodes;
	char **in, **out;      /* names (NULL-terminated) */
	int nin, nout;
	mu_stage_timing_t t;
} cstage_t;

struct mu_coord_s {
	cstage_t *s;
	int n;
	mu_coord_opts_t o;
	uint64_t digest;
	char **model_out;
	int nmodel_out;
	uint64_t next_id;
	int failed_stage;      /* whose connection broke in the last call; -1 */
	uv_mutex_t lock;  /* ids, timings and pools while pipelining */
};

/* Free a NULL-terminated name list of n names. */
void mu__coord_free_names(char **v, int n);
/* Stage i's fields from its READY/INFO description json. */
int mu__coord_parse_info(mu_coord_t *c, int i, const char *json, char *err, size_t el);
/* The stages cover the graph's nodes in order, with one digest. */
int mu__coord_check_chain(const mu_coord_t *c, char *err, size_t el);

#endif
