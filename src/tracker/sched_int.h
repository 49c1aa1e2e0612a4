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
 *
 * What one owner can fill is bounded: free resources, waiting requests,
 * and the distinct device keys it holds either on (each key is a queue in
 * a table shared by everyone), so no one connection can take the key
 * table from the others. A refused put or request changes nothing and
 * says which limit it met (mu__sched_refusal).
 */
#ifndef MU_TRACKER_SCHED_INT_H
#define MU_TRACKER_SCHED_INT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/list_int.h"
#include "core/strmap_int.h"

typedef struct mu__sched_queue_s mu__sched_queue_t;

/* One connection's holdings. Embedded in the connection; init before use,
 * and release before it is dropped, even when empty (its key map keeps
 * its table). */
typedef struct {
	mu__list_t resources; /* mu__sched_res_t.owner_node, free ones only */
	mu__list_t requests;  /* mu__sched_req_t.owner_node, queued ones only */
	size_t nresources;
	size_t nrequests;
	mu__strmap_t keys;    /* queue pointer -> how many of the above are
	                       * in that queue (as uintptr_t); keys.count is
	                       * the number of device keys held */
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

/* The limit a refused put or request met. */
typedef enum {
	MU_SCHED_REFUSED_NONE,
	MU_SCHED_REFUSED_RESOURCES, /* the owner holds max_per_owner resources */
	MU_SCHED_REFUSED_REQUESTS,  /* ... or max_per_owner waiting requests */
	MU_SCHED_REFUSED_OWNER_KEYS, /* ... or holds on max_keys_per_owner keys */
	MU_SCHED_REFUSED_QUEUES     /* max_queues keys, none of them empty */
} mu__sched_refused_t;

typedef struct {
	mu__strmap_t queues;  /* key -> mu__sched_queue_t */
	mu__list_t order;     /* queues in creation order, for SUMMARY */
	mu__list_t empty;     /* queues with nothing free and nobody waiting,
	                       * oldest emptied first: pruned at max_queues */
	size_t max_queues;
	size_t max_per_owner; /* resources, and separately requests */
	size_t max_keys_per_owner; /* distinct keys one owner holds on */
	mu__sched_refused_t refused; /* why the last MU_ETOOBIG */
	mu__sched_deliver_cb deliver;
	void *ud;
	/* Optional (metrics): called with ud whenever a queue's counts of
	 * free resources or waiting requests may have changed. Must not call
	 * back into the scheduler. */
	void (*observe)(void *ud, const char *key, size_t nfree, size_t nwaiting);
	double waited_ms; /* in deliver: how long the granted request waited */
} mu__sched_t;

/* Defaults (muster tracker --help shows them). */
#define MU_SCHED_MAX_QUEUES 10000
#define MU_SCHED_MAX_PER_OWNER 1024
#define MU_SCHED_MAX_KEYS_PER_OWNER 64

void mu__sched_init(mu__sched_t *s, mu__sched_deliver_cb deliver, void *ud);
void mu__sched_free(mu__sched_t *s); /* owners must have been released */

void mu__sched_owner_init(mu__sched_owner_t *o);
/* Withdraw o's free resources and drop its queued requests; o is then
 * empty and may be used again. */
void mu__sched_owner_release(mu__sched_t *s, mu__sched_owner_t *o);

/*
 * Add a free resource and run the matching. port_json is the port's JSON
 * text. 0, MU_ETOOBIG (a limit; nothing changed, s->refused says which)
 * or MU_ENOMEM.
 */
int mu__sched_put(mu__sched_t *s, mu__sched_owner_t *o, const char *key,
                  const char *addr, const char *port_json,
                  const char *matchkey);

/* Queue a request and run the matching. 0, MU_ETOOBIG or MU_ENOMEM. */
int mu__sched_request(mu__sched_t *s, mu__sched_owner_t *o, const char *key,
                      double priority);

/* The device key of a resource's queue (valid while the resource is). */
const char *mu__sched_res_key(const mu__sched_res_t *r);

/* Into buf, in words: the limit the last MU_ETOOBIG met, with its value. */
void mu__sched_refusal(const mu__sched_t *s, char *buf, size_t len);

/*
 * Append o's not-yet-granted matchkeys to arr (JSON strings, each distinct,
 * in PUT order). 0 or MU_ENOMEM.
 */
int mu__sched_pending(const mu__sched_owner_t *o, cJSON *arr);

/* Fill obj with {key: {"free": n, "pending": m}} for every queue. */
int mu__sched_queue_info(const mu__sched_t *s, cJSON *obj);

#endif
