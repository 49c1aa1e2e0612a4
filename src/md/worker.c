/* SPDX-License-Identifier: MIT */
/*
 * The agent's worker thread: runs queued exchanges in order, one at a
 * time, on the backend the call was routed to, and between them drives
 * the store backend's own activity (watches, lease keep-alive, re-probes
 * of fetches still waiting). Callers never block on the network.
 */
#include <string.h>

#include "muster/md.h"
#include "core/alloc_int.h"
#include "md/md_int.h"

/* How long the worker waits for work when the store has nothing to drive. */
#define IDLE_MS 200

static void run(mu_md_agent_t *a, mu__md_op_t *op)
{
	const mu__md_backend_t *b = op->p2p ? a->p2p : a->store;
	void *st = op->p2p ? a->p2p_st : a->store_st;
	char why[256] = "";
	int rc;

	switch (op->kind) {
	case MU_MD_SENT:
		rc = b->send(st, op, why, sizeof(why));
		break;
	case MU_MD_FETCHED:
		rc = b->fetch(st, op, why, sizeof(why));
		break;
	default:
		rc = b->invalidate(st, op, why, sizeof(why));
		break;
	}
	if (rc != 1) /* 1: the backend completes it later */
		mu__md_complete(a, op, rc, NULL, why);
}

static void worker_main(void *arg)
{
	mu_md_agent_t *a = arg;

	for (;;) {
		mu__list_t *head;
		int stop;

		uv_mutex_lock(&a->lock);
		head = mu__list_head(&a->queue);
		if (head != NULL)
			mu__list_remove(head);
		stop = a->stopping;
		if (head == NULL && !stop && (a->store == NULL || a->store->poll == NULL))
			uv_cond_timedwait(&a->work_cond, &a->lock, (uint64_t)IDLE_MS * 1000000);
		uv_mutex_unlock(&a->lock);
		if (head != NULL) {
			run(a, mu__container_of(head, mu__md_op_t, node));
			if (a->store != NULL && a->store->poll != NULL)
				a->store->poll(a->store_st, 0);
			continue;
		}
		if (stop)
			break; /* the queue is drained */
		if (a->store != NULL && a->store->poll != NULL)
			a->store->poll(a->store_st, IDLE_MS);
	}
}

int mu__md_worker_start(mu_md_agent_t *a)
{
	int rc = uv_thread_create(&a->worker, worker_main, a);

	a->worker_started = rc == 0;
	return rc;
}

void mu__md_submit(mu_md_agent_t *a, mu__md_op_t *op)
{
	uv_mutex_lock(&a->lock);
	mu__list_insert_tail(&a->queue, &op->node);
	uv_cond_signal(&a->work_cond);
	uv_mutex_unlock(&a->lock);
	if (a->store != NULL && a->store->wakeup != NULL)
		a->store->wakeup(a->store_st);
}

void mu__md_worker_stop(mu_md_agent_t *a)
{
	uv_mutex_lock(&a->lock);
	a->stopping = 1;
	uv_cond_signal(&a->work_cond);
	uv_mutex_unlock(&a->lock);
	if (a->store != NULL && a->store->wakeup != NULL)
		a->store->wakeup(a->store_st);
	if (a->worker_started)
		uv_thread_join(&a->worker);
	/* pending waits are failed by the backends' close */
	if (a->store != NULL)
		a->store->close(a->store_st);
	a->p2p->close(a->p2p_st);
}
