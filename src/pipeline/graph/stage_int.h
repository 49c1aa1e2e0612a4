/* SPDX-License-Identifier: MIT */
/*
 * Graph stages (pipeline/graph/stage.c), as the kind's device side
 * (pipeline/graph/device.c) builds one over a session: the graph's JSON
 * text, the node range, the input shapes (name -> shape JSON array, may
 * be NULL) and the dtypes of those that are not F32 (name -> "I64" ...,
 * may be NULL); then mu__stage_add_param for each weight and
 * mu__stage_finish. Any other stage of this kind comes from
 * mu_stage_load / mu_stage_load_range (muster/pipeline.h).
 */
#ifndef MU_PIPELINE_GRAPH_STAGE_INT_H
#define MU_PIPELINE_GRAPH_STAGE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "core/json_int.h"
#include "pipeline/stage_int.h"

int mu__stage_new(const char *graph_json, size_t len, int first, int last,
                  int index, int of, uint64_t digest, const cJSON *in_shapes,
                  const cJSON *in_dtypes, mu_stage_t **out, char *err, size_t errlen);
/* Take t as one of the stage's weights (checked: wanted, not seen yet). */
int mu__stage_add_param(mu_stage_t *s, mu_tensor_t *t, char *err, size_t errlen);
/* Every weight is there: record figures, describe. */
int mu__stage_finish(mu_stage_t *s, double load_ms, char *err, size_t errlen);
/* The node range [first, last) of a graph stage. */
void mu__graph_stage_nodes(const mu_stage_t *s, int *first, int *last);

/* The kind's device side (pipeline/graph/device.c), for its table. */
void mu__graph_dev_assign(mu__device_sess_t *ss, const mu__msg_t *m, const struct cJSON *o,
                          mu__reply_t *r);
void mu__graph_dev_weights(mu__device_sess_t *ss, const mu__msg_t *m, const char *body,
                           mu_tensor_list_t *in, mu__reply_t *r);
void mu__graph_dev_load(mu__device_sess_t *ss, const mu__msg_t *m, mu__reply_t *r);
void mu__graph_dev_pending_free(void *pending);
int mu__graph_dev_probe(const char *path, mu__held_t *h, char *err, size_t el);

#endif
