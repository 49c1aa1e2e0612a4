/* SPDX-License-Identifier: MIT */
/*
 * What the metrics endpoint (metrics_http.c) needs of an API server
 * (serve.c): its loop, to serve scrapes there beside the API.
 */
#ifndef MU_SERVE_SERVE_INT_H
#define MU_SERVE_SERVE_INT_H

#include <uv.h>

#include "muster/serve.h"

/* The loop mu_serve_run runs (on its caller's thread). */
uv_loop_t *mu__serve_loop(mu_serve_t *s);

#endif
