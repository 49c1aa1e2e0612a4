/* SPDX-License-Identifier: MIT */
/*
 * A device's sessions (pipeline/device.c): what a session is doing, and
 * what a stage kind's device-side steps (mu__stage_kind_t's assign,
 * receive, load) may ask of the device.
 */
#ifndef MU_PIPELINE_DEVICE_INT_H
#define MU_PIPELINE_DEVICE_INT_H

#include <stdint.h>

#include "muster/pipeline.h"
#include "pipeline/serve_int.h"
#include "pipeline/stage_int.h"

/* What one device session is doing. */
struct mu__device_sess_s {
	mu_device_t *d;
	mu__serve_ctx_t *ctx;           /* the session's; ctx->stage once ready */
	const mu__stage_kind_t *kind;   /* of pending */
	void *pending;          /* the kind's stage being assembled, its weights streaming */
	double t0;              /* when ASSIGN came (mu__clock_ms) */
};

/* Set ctx up to serve a session as device d (ss: the session's state);
 * _done frees whatever stage the session built. */
void mu__device_ctx(mu__serve_ctx_t *ctx, mu__device_sess_t *ss, mu_device_t *d);
void mu__device_ctx_done(mu__serve_ctx_t *ctx);

/* The session's stage is s (taken): READY to id with its description. */
void mu__device_ready(mu__device_sess_t *ss, uint64_t id, mu_stage_t *s, mu__reply_t *r);
/* The directory or file of the model of this kind and digest the device
 * holds, or NULL. */
const char *mu__device_held(const mu_device_t *d, const mu__stage_kind_t *k, uint64_t digest);
/* The device's cache directory for streamed weights (NULL: none), its
 * memory budget for weights, its compute threads. */
const char *mu__device_cache_dir(const mu_device_t *d);
uint64_t mu__device_mem(const mu_device_t *d);
int mu__device_threads(const mu_device_t *d);

#endif
