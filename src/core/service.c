/* SPDX-License-Identifier: MIT */
/*
 * Loop-on-a-thread glue shared by muster's servers; see service_int.h.
 */
#include "core/list_int.h"
#include "core/service_int.h"

static void wake_cb(uv_async_t *a)
{
	mu__service_shutdown(mu__container_of(a, mu__service_t, wake));
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
	uv_mutex_init(&s->lock);
	s->on_stop = on_stop;
	s->wake_closed = 0;
	s->started = 0;
	s->stopping = 0;
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
