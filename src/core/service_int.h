/* SPDX-License-Identifier: MIT */
/*
 * A libuv loop running on its own thread, for the servers (tracker, store,
 * stage). The owner embeds mu__service_t, opens its handles on s->loop, and
 * gives an on_stop callback that closes every handle it owns. Stopping can
 * be asked from any thread (mu__service_stop) or from the loop itself
 * (mu__service_shutdown, e.g. on a STOP message); either way on_stop runs
 * once, on the loop thread, and the thread ends when the last handle closes.
 *
 * A graceful stop (mu__service_drain) goes through a drain first: the
 * owner's drain callbacks stop accepting and let queued replies out, and
 * the service calls on_stop once the owner reports nothing left, or at the
 * drain's deadline, or when mu__service_stop comes meanwhile.
 *
 * Lifecycle: init -> [start] -> join -> free. join always leaves the loop
 * closed, whether or not the thread ran; stop() stays safe until free.
 */
#ifndef MU_CORE_SERVICE_INT_H
#define MU_CORE_SERVICE_INT_H

#include <stddef.h>
#include <uv.h>

typedef struct mu__service_s mu__service_t;
typedef void (*mu__service_cb)(mu__service_t *s);

/*
 * The owner's side of a drain, both on the loop thread:
 *   start  stop accepting; finish each connection (mu__conn_finish) so its
 *          queued replies go out and nothing new is read.
 *   tick   called every MU__DRAIN_TICK_MS from then on: close what has
 *          delivered everything (mu__conn_delivered) and return how many
 *          connections are left; 0 ends the drain (on_stop runs).
 * When the deadline passes first, on_stop runs with s->draining set and
 * s->drain_late 1: it closes what is left, dropping unsent replies, and
 * may say so.
 */
typedef struct {
	void (*start)(mu__service_t *s);
	size_t (*tick)(mu__service_t *s);
} mu__service_drain_t;

#define MU__DRAIN_TICK_MS 20

struct mu__service_s {
	uv_loop_t loop;
	uv_async_t wake;  /* carries stop and drain requests from other threads */
	uv_timer_t drain_timer;
	uv_mutex_t lock;  /* guards wake_closed and the asks against a racing stop() */
	uv_thread_t thread;
	mu__service_cb on_stop;
	const mu__service_drain_t *drain; /* NULL: drain() stops at once */
	int wake_closed;  /* under lock: wake is closing, never send again */
	int ask_stop;     /* under lock: stop() was called */
	int ask_drain;    /* under lock: drain() was called ... */
	uint64_t ask_drain_ms; /* ... with this deadline */
	int started;      /* thread was created */
	int stopping;     /* loop thread only: on_stop has run */
	int draining;     /* loop thread only: the drain started */
	int drain_late;   /* loop thread only: the deadline ended it */
	uint64_t drain_end; /* loop time (ms) of the deadline */
};

/* 0 or -errno; on failure nothing is left to free. An owner that drains
 * sets s->drain after this, before start. */
int mu__service_init(mu__service_t *s, mu__service_cb on_stop);

/* Run the loop on a new thread. 0 or -errno. */
int mu__service_start(mu__service_t *s);

/* Any thread: ask the loop to stop. Harmless if it already stopped. */
void mu__service_stop(mu__service_t *s);

/* Any thread: ask for a drain of at most timeout_ms, then a stop. Harmless
 * if it already stopped or is draining. */
void mu__service_drain(mu__service_t *s, uint64_t timeout_ms);

/* Loop thread: stop now (runs on_stop once). */
void mu__service_shutdown(mu__service_t *s);

/* Wait for the loop to end and close it. Call exactly once. */
void mu__service_join(mu__service_t *s);

/* Release what init made; after join, and after the last stop() call. */
void mu__service_free(mu__service_t *s);

#endif
