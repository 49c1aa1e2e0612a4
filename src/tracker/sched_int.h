/* SPDX-License-Identifier: MIT */
/*
 * The tracker's matching: one queue per device key holding free resources
 * (FIFO, oldest PUT first) and waiting requests (a heap on (-priority,
 * arrival)). Pure bookkeeping, no I/O: granting goes through the deliver
 * callback, which the server implements by writing the reply.
 *
 * Every resource and request also hangs off its connection's owner record,
 * so a closing connection withdraws its free resources and its queued
 * requests in time proportional to what it owns (spec §14.6, better than
 * TVM's Python tracker, which leaks both in some cases).
 */
#ifndef MU_TRACKER_SCHED_INT_H
#define MU_TRACKER_SCHED_INT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/list_int.h"
#include "core/strmap_int.h"

typedef struct mu__sched_queue_s mu__sched_queue_t;

/* One connection's holdings. Embedded in the connection; init before use. */
typedef struct {
	mu__list_t resources; /* mu__sched_res_t.owner_node, free ones only */
	mu__list_t requests;  /* mu__sched_req_t.owner_node, queued ones only */
	size_t nresources;
	size_t nrequests;
} mu__sched_owner_t;

/* A free resource: "a server of KEY is idle at addr:port, use matchkey". */
typedef struct {
	mu__list_t queue_node; /* in queue->free, FIFO */
	mu__list_t owner_node;
	mu__sched_owner_t *owner;
	mu__sched_queue_t *queue;
	char *addr;     /* custom address or the connection's peer IP */
	char *port;     /* the port's JSON text exactly as the server sent it */
	char *matchkey;
} mu__sched_res_t;

/*
 * Grant `res` to `requester`. Return 0 when the grant reached the requester
 * (the resource is then consumed) or non-zero when it could not (the request
 * is dropped and the resource goes back to the tail of the free list).
 * Must not call back into the scheduler.
 */
typedef int (*mu__sched_deliver_cb)(void *ud, mu__sched_owner_t *requester,
                                    const mu__sched_res_t *res);

typedef struct {
	mu__strmap_t queues;  /* key -> mu__sched_queue_t */
	mu__list_t order;     /* queues in creation order, for SUMMARY */
	size_t max_queues;
	size_t max_per_owner; /* resources, and separately requests */
	mu__sched_deliver_cb deliver;
	void *ud;
} mu__sched_t;

void mu__sched_init(mu__sched_t *s, mu__sched_deliver_cb deliver, void *ud);
void mu__sched_free(mu__sched_t *s); /* owners must have been released */

void mu__sched_owner_init(mu__sched_owner_t *o);
/* Withdraw o's free resources and drop its queued requests. */
void mu__sched_owner_release(mu__sched_t *s, mu__sched_owner_t *o);

/*
 * Add a free resource and run the matching. port_json is the port's JSON
 * text. 0, MU_ETOOBIG (owner or queue limit) or MU_ENOMEM.
 */
int mu__sched_put(mu__sched_t *s, mu__sched_owner_t *o, const char *key,
                  const char *addr, const char *port_json,
                  const char *matchkey);

/* Queue a request and run the matching. 0, MU_ETOOBIG or MU_ENOMEM. */
int mu__sched_request(mu__sched_t *s, mu__sched_owner_t *o, const char *key,
                      double priority);

/*
 * Append o's not-yet-granted matchkeys to arr (JSON strings, each distinct,
 * in PUT order). 0 or MU_ENOMEM.
 */
int mu__sched_pending(const mu__sched_owner_t *o, cJSON *arr);

/* Fill obj with {key: {"free": n, "pending": m}} for every queue. */
int mu__sched_queue_info(const mu__sched_t *s, cJSON *obj);

#endif
