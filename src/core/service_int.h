/* SPDX-License-Identifier: MIT */
/*
 * A libuv loop running on its own thread, for the servers (tracker, store,
 * stage). The owner embeds mu__service_t, opens its handles on s->loop, and
 * gives an on_stop callback that closes every handle it owns. Stopping can
 * be asked from any thread (mu__service_stop) or from the loop itself
 * (mu__service_shutdown, e.g. on a STOP message); either way on_stop runs
 * once, on the loop thread, and the thread ends when the last handle closes.
 *
 * Lifecycle: init -> [start] -> join -> free. join always leaves the loop
 * closed, whether or not the thread ran; stop() stays safe until free.
 */
#ifndef MU_CORE_SERVICE_INT_H
#define MU_CORE_SERVICE_INT_H

#include <uv.h>

typedef struct mu__service_s mu__service_t;
typedef void (*mu__service_cb)(mu__service_t *s);

struct mu__service_s {
	uv_loop_t loop;
	uv_async_t wake;  /* carries stop requests from other threads */
	uv_mutex_t lock;  /* guards wake_closed against a racing stop() */
	uv_thread_t thread;
	mu__service_cb on_stop;
	int wake_closed;  /* under lock: wake is closing, never send again */
	int started;      /* thread was created */
	int stopping;     /* loop thread only: on_stop has run */
};

/* 0 or -errno; on failure nothing is left to free. */
int mu__service_init(mu__service_t *s, mu__service_cb on_stop);

/* Run the loop on a new thread. 0 or -errno. */
int mu__service_start(mu__service_t *s);

/* Any thread: ask the loop to stop. Harmless if it already stopped. */
void mu__service_stop(mu__service_t *s);

/* Loop thread: stop now (runs on_stop once). */
void mu__service_shutdown(mu__service_t *s);

/* Wait for the loop to end and close it. Call exactly once. */
void mu__service_join(mu__service_t *s);

/* Release what init made; after join, and after the last stop() call. */
void mu__service_free(mu__service_t *s);

#endif
