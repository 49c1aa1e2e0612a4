/* SPDX-License-Identifier: MIT */
/*
 * Loop-on-a-thread glue shared by muster's servers; see service_int.h.
 */
#include "core/list_int.h"
#include "core/service_int.h"

static void drain_tick_cb(uv_timer_t *t)
{
	mu__service_t *s = mu__container_of(t, mu__service_t, drain_timer);
	size_t left = s->drain->tick(s);

	if (left == 0) {
		mu__service_shutdown(s);
	} else if (uv_now(&s->loop) >= s->drain_end) {
		s->drain_late = 1;
		mu__service_shutdown(s);
	}
}

/* Loop thread: begin the drain asked for (once). */
static void drain_begin(mu__service_t *s, uint64_t timeout_ms)
{
	if (s->drain == NULL) {
		mu__service_shutdown(s);
		return;
	}
	s->draining = 1;
	s->drain_end = uv_now(&s->loop) + timeout_ms;
	s->drain->start(s);
	/* the first tick at once: with nothing queued the drain ends there */
	uv_timer_start(&s->drain_timer, drain_tick_cb, 0, MU__DRAIN_TICK_MS);
}

static void wake_cb(uv_async_t *a)
{
	mu__service_t *s = mu__container_of(a, mu__service_t, wake);
	int stop, drain;
	uint64_t ms;

	uv_mutex_lock(&s->lock);
	stop = s->ask_stop;
	drain = s->ask_drain;
	ms = s->ask_drain_ms;
	uv_mutex_unlock(&s->lock);
	if (stop)
		mu__service_shutdown(s);
	else if (drain && !s->draining && !s->stopping)
		drain_begin(s, ms);
}

int mu__service_init(mu__service_t *s, mu__service_cb on_stop)
{
	int rc = uv_loop_init(&s->loop);

	if (rc != 0)
		return rc;
	rc = uv_async_init(&s->loop, &s->wake, wake_cb);
	if (rc != 0) {
		uv_loop_close(&s->loop);
		return rc;
	}
	uv_timer_init(&s->loop, &s->drain_timer); /* cannot fail */
	uv_mutex_init(&s->lock);
	s->on_stop = on_stop;
	s->drain = NULL;
	s->wake_closed = 0;
	s->ask_stop = 0;
	s->ask_drain = 0;
	s->ask_drain_ms = 0;
	s->started = 0;
	s->stopping = 0;
	s->draining = 0;
	s->drain_late = 0;
	s->drain_end = 0;
	return 0;
}

static void thread_main(void *arg)
{
	mu__service_t *s = arg;

	uv_run(&s->loop, UV_RUN_DEFAULT);
}

int mu__service_start(mu__service_t *s)
{
	int rc = uv_thread_create(&s->thread, thread_main, s);

	if (rc == 0)
		s->started = 1;
	return rc;
}

void mu__service_stop(mu__service_t *s)
{
	uv_mutex_lock(&s->lock);
	s->ask_stop = 1;
	if (!s->wake_closed)
		uv_async_send(&s->wake);
	uv_mutex_unlock(&s->lock);
}

void mu__service_drain(mu__service_t *s, uint64_t timeout_ms)
{
	uv_mutex_lock(&s->lock);
	if (!s->ask_drain) {
		s->ask_drain = 1;
		s->ask_drain_ms = timeout_ms;
	}
	if (!s->wake_closed)
		uv_async_send(&s->wake);
	uv_mutex_unlock(&s->lock);
}

void mu__service_shutdown(mu__service_t *s)
{
	if (s->stopping)
		return;
	s->stopping = 1;
	uv_mutex_lock(&s->lock);
	s->wake_closed = 1;
	uv_close((uv_handle_t *)&s->wake, NULL);
	uv_mutex_unlock(&s->lock);
	uv_close((uv_handle_t *)&s->drain_timer, NULL);
	s->on_stop(s);
}

void mu__service_join(mu__service_t *s)
{
	if (s->started) {
		uv_thread_join(&s->thread);
	} else {
		mu__service_shutdown(s);
		uv_run(&s->loop, UV_RUN_DEFAULT);
	}
	uv_loop_close(&s->loop);
}

void mu__service_free(mu__service_t *s)
{
	uv_mutex_destroy(&s->lock);
}
