/* SPDX-License-Identifier: MIT */
/*
 * Priority matching of tracker requests to free resources (spec §7).
 *
 * Order: among waiting requests the highest priority wins, ties go to the
 * earliest (a per-queue arrival counter, as TVM does since #7389); among free
 * resources the oldest PUT wins. A failed delivery drops the request and puts
 * the resource at the tail, and matching goes on, so one dead requester never
 * blocks a key.
 *
 * Limits (sched_int.h): each owner's resources, requests and distinct keys,
 * checked before anything changes; and the key table, where the queue
 * that has been empty longest is dropped to make room for a new key.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/time_int.h"
#include "tracker/sched_int.h"

typedef struct {
	mu__list_t owner_node;
	mu__sched_owner_t *owner;
	mu__sched_queue_t *queue;
	double priority;
	uint64_t seq;
	size_t heap_idx;
	double since;      /* mu__clock_ms() when queued */
} mu__sched_req_t;

struct mu__sched_queue_s {
	mu__list_t order_node;
	mu__list_t empty_node; /* in sched->empty while nothing is in it */
	mu__sched_t *sched;
	char *key;
	size_t keylen;
	mu__list_t free; /* mu__sched_res_t.queue_node */
	size_t nfree;
	mu__sched_req_t **heap;
	size_t nheap, capheap;
	uint64_t next_seq;
};

void mu__sched_init(mu__sched_t *s, mu__sched_deliver_cb deliver, void *ud)
{
	mu__strmap_init(&s->queues);
	mu__list_init(&s->order);
	mu__list_init(&s->empty);
	s->max_queues = MU_SCHED_MAX_QUEUES;
	s->max_per_owner = MU_SCHED_MAX_PER_OWNER;
	s->max_keys_per_owner = MU_SCHED_MAX_KEYS_PER_OWNER;
	s->refused = MU_SCHED_REFUSED_NONE;
	s->deliver = deliver;
	s->ud = ud;
	s->observe = NULL;
	s->waited_ms = 0;
}

/* q's counts may have changed: tell the observer. */
static void notify(const mu__sched_queue_t *q)
{
	if (q->sched->observe != NULL)
		q->sched->observe(q->sched->ud, q->key, q->nfree, q->nheap);
}

const char *mu__sched_res_key(const mu__sched_res_t *r)
{
	return r->queue->key;
}

static void queue_destroy(mu__sched_t *s, mu__sched_queue_t *q)
{
	mu__strmap_remove(&s->queues, q->key, q->keylen);
	mu__list_remove(&q->order_node);
	if (q->nfree == 0 && q->nheap == 0)
		mu__list_remove(&q->empty_node);
	mu__free(q->heap);
	mu__free(q->key);
	mu__free(q);
}

void mu__sched_free(mu__sched_t *s)
{
	mu__list_t *it, *tmp;

	mu__list_foreach_safe(it, tmp, &s->order)
		queue_destroy(s, mu__container_of(it, mu__sched_queue_t, order_node));
	mu__strmap_free(&s->queues, NULL);
}

void mu__sched_owner_init(mu__sched_owner_t *o)
{
	mu__list_init(&o->resources);
	mu__list_init(&o->requests);
	o->nresources = 0;
	o->nrequests = 0;
	mu__strmap_init(&o->keys);
}

/* ---- what each owner holds where, and empty queues ---- */

/* How many of o's resources and requests are in q. */
static uintptr_t owner_count(const mu__sched_owner_t *o, const mu__sched_queue_t *q)
{
	return (uintptr_t)mu__strmap_get(&o->keys, &q, sizeof(q));
}

/* One more of o's in q. 0 or MU_ENOMEM (nothing changed). */
static int owner_ref(mu__sched_owner_t *o, mu__sched_queue_t *q)
{
	mu__strmap_entry_t *e = mu__strmap_find(&o->keys, &q, sizeof(q));

	if (e != NULL) {
		e->value = (void *)((uintptr_t)e->value + 1);
		return 0;
	}
	return mu__strmap_put(&o->keys, &q, sizeof(q), (void *)(uintptr_t)1, NULL);
}

static void owner_unref(mu__sched_owner_t *o, mu__sched_queue_t *q)
{
	mu__strmap_entry_t *e = mu__strmap_find(&o->keys, &q, sizeof(q));

	if (e == NULL)
		return;
	if ((uintptr_t)e->value > 1)
		e->value = (void *)((uintptr_t)e->value - 1);
	else
		mu__strmap_remove(&o->keys, &q, sizeof(q));
}

/* q lost an item: once empty it joins the prune list, newest last. */
static void queue_lost(mu__sched_queue_t *q)
{
	if (q->nfree == 0 && q->nheap == 0)
		mu__list_insert_tail(&q->sched->empty, &q->empty_node);
}

/* q is about to gain an item: off the prune list if it was empty. */
static void queue_gains(mu__sched_queue_t *q)
{
	if (q->nfree == 0 && q->nheap == 0)
		mu__list_remove(&q->empty_node);
}

/* ---- the request heap ---- */

static int before(const mu__sched_req_t *a, const mu__sched_req_t *b)
{
	if (a->priority != b->priority)
		return a->priority > b->priority;
	return a->seq < b->seq;
}

static void heap_set(mu__sched_queue_t *q, size_t i, mu__sched_req_t *r)
{
	q->heap[i] = r;
	r->heap_idx = i;
}

static void sift_up(mu__sched_queue_t *q, size_t i)
{
	mu__sched_req_t *r = q->heap[i];

	while (i > 0 && before(r, q->heap[(i - 1) / 2])) {
		heap_set(q, i, q->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	heap_set(q, i, r);
}

static void sift_down(mu__sched_queue_t *q, size_t i)
{
	mu__sched_req_t *r = q->heap[i];

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= q->nheap)
			break;
		if (c + 1 < q->nheap && before(q->heap[c + 1], q->heap[c]))
			c++;
		if (!before(q->heap[c], r))
			break;
		heap_set(q, i, q->heap[c]);
		i = c;
	}
	heap_set(q, i, r);
}

/* Take r out of the heap (any position) and off its owner's list. */
static void req_unlink(mu__sched_req_t *r)
{
	mu__sched_queue_t *q = r->queue;
	size_t i = r->heap_idx;

	q->nheap--;
	if (i != q->nheap) {
		mu__sched_req_t *moved = q->heap[q->nheap];

		/* The last element fills the hole, then finds its place. */
		heap_set(q, i, moved);
		sift_up(q, i);
		sift_down(q, moved->heap_idx);
	}
	mu__list_remove(&r->owner_node);
	r->owner->nrequests--;
	owner_unref(r->owner, q);
	queue_lost(q);
	notify(q);
}

/* ---- resources ---- */

static void res_destroy(mu__sched_res_t *r)
{
	mu__list_remove(&r->queue_node);
	mu__list_remove(&r->owner_node);
	r->queue->nfree--;
	r->owner->nresources--;
	owner_unref(r->owner, r->queue);
	queue_lost(r->queue);
	notify(r->queue);
	mu__free(r->addr);
	mu__free(r->port);
	mu__free(r->matchkey);
	mu__free(r);
}

static void match(mu__sched_t *s, mu__sched_queue_t *q)
{
	while (q->nfree > 0 && q->nheap > 0) {
		mu__sched_res_t *res = mu__container_of(mu__list_head(&q->free),
		                                        mu__sched_res_t, queue_node);
		mu__sched_req_t *req = q->heap[0];
		mu__sched_owner_t *requester = req->owner;

		s->waited_ms = mu__clock_ms() - req->since;
		req_unlink(req);
		mu__free(req);
		if (s->deliver(s->ud, requester, res) == 0) {
			res_destroy(res);
		} else {
			mu__list_remove(&res->queue_node);
			mu__list_insert_tail(&q->free, &res->queue_node);
		}
	}
}

/* Drop the queue that has been empty (nothing free, nobody waiting)
 * longest. 0 when every queue holds something. */
static int prune_one(mu__sched_t *s)
{
	mu__list_t *it = mu__list_head(&s->empty);

	if (it == NULL)
		return 0;
	queue_destroy(s, mu__container_of(it, mu__sched_queue_t, empty_node));
	return 1;
}

/*
 * Find or create KEY's queue. Queues live forever, as in TVM (they show in
 * SUMMARY with zero counts), until the queue limit is reached; then empty
 * ones are dropped to make room. A new queue starts on the empty list.
 */
static int get_queue(mu__sched_t *s, const char *key, mu__sched_queue_t **out)
{
	size_t klen = strlen(key);
	mu__sched_queue_t *q = mu__strmap_get(&s->queues, key, klen);

	if (q != NULL) {
		*out = q;
		return 0;
	}
	if (s->queues.count >= s->max_queues && !prune_one(s)) {
		s->refused = MU_SCHED_REFUSED_QUEUES;
		return MU_ETOOBIG;
	}
	q = mu__calloc(1, sizeof(*q));
	if (q == NULL)
		return MU_ENOMEM;
	q->key = mu__strndup(key, klen);
	q->keylen = klen;
	q->sched = s;
	mu__list_init(&q->free);
	if (q->key == NULL || mu__strmap_put(&s->queues, key, klen, q, NULL)) {
		mu__free(q->key);
		mu__free(q);
		return MU_ENOMEM;
	}
	mu__list_insert_tail(&s->order, &q->order_node);
	mu__list_insert_tail(&s->empty, &q->empty_node);
	*out = q;
	return 0;
}

/*
 * May o add one more item (held: how many of that kind it has) under
 * key? Every limit is checked before anything changes; on success *out is
 * the queue, and o is counted in it.
 */
static int admit(mu__sched_t *s, mu__sched_owner_t *o, const char *key, size_t held,
                 mu__sched_refused_t kind, mu__sched_queue_t **out)
{
	mu__sched_queue_t *q = mu__strmap_get(&s->queues, key, strlen(key));
	int rc;

	if (held >= s->max_per_owner) {
		s->refused = kind;
		return MU_ETOOBIG;
	}
	if ((q == NULL || owner_count(o, q) == 0) && o->keys.count >= s->max_keys_per_owner) {
		s->refused = MU_SCHED_REFUSED_OWNER_KEYS;
		return MU_ETOOBIG;
	}
	rc = q != NULL ? 0 : get_queue(s, key, &q);
	if (rc == 0)
		rc = owner_ref(o, q); /* a queue just made stays, empty: prunable */
	if (rc == 0)
		*out = q;
	return rc;
}

int mu__sched_put(mu__sched_t *s, mu__sched_owner_t *o, const char *key,
                  const char *addr, const char *port_json,
                  const char *matchkey)
{
	mu__sched_queue_t *q;
	mu__sched_res_t *r = mu__calloc(1, sizeof(*r));
	int rc = r != NULL ? 0 : MU_ENOMEM;

	if (rc == 0) {
		r->addr = mu__strdup(addr);
		r->port = mu__strdup(port_json);
		r->matchkey = mu__strdup(matchkey);
		if (r->addr == NULL || r->port == NULL || r->matchkey == NULL)
			rc = MU_ENOMEM;
	}
	if (rc == 0)
		rc = admit(s, o, key, o->nresources, MU_SCHED_REFUSED_RESOURCES, &q);
	if (rc != 0) {
		if (r != NULL) {
			mu__free(r->addr);
			mu__free(r->port);
			mu__free(r->matchkey);
			mu__free(r);
		}
		return rc;
	}
	r->owner = o;
	r->queue = q;
	queue_gains(q);
	mu__list_insert_tail(&q->free, &r->queue_node);
	mu__list_insert_tail(&o->resources, &r->owner_node);
	q->nfree++;
	o->nresources++;
	notify(q);
	match(s, q);
	return 0;
}

int mu__sched_request(mu__sched_t *s, mu__sched_owner_t *o, const char *key,
                      double priority)
{
	mu__sched_queue_t *q;
	mu__sched_req_t *r;
	int rc = admit(s, o, key, o->nrequests, MU_SCHED_REFUSED_REQUESTS, &q);

	if (rc != 0)
		return rc;
	r = mu__calloc(1, sizeof(*r));
	if (r != NULL && q->nheap == q->capheap) {
		size_t ncap = q->capheap ? q->capheap * 2 : 8;
		mu__sched_req_t **h = mu__realloc(q->heap, ncap * sizeof(*h));

		if (h == NULL) {
			mu__free(r);
			r = NULL;
		} else {
			q->heap = h;
			q->capheap = ncap;
		}
	}
	if (r == NULL) {
		owner_unref(o, q);
		return MU_ENOMEM;
	}
	r->owner = o;
	r->queue = q;
	r->priority = priority;
	r->seq = q->next_seq++;
	r->since = mu__clock_ms();
	queue_gains(q);
	mu__list_insert_tail(&o->requests, &r->owner_node);
	o->nrequests++;
	heap_set(q, q->nheap++, r);
	sift_up(q, r->heap_idx);
	notify(q);
	match(s, q);
	return 0;
}

void mu__sched_refusal(const mu__sched_t *s, char *buf, size_t len)
{
	switch (s->refused) {
	case MU_SCHED_REFUSED_RESOURCES:
		snprintf(buf, len, "this connection already offers %zu free devices "
		         "(--max-per-conn)", s->max_per_owner);
		break;
	case MU_SCHED_REFUSED_REQUESTS:
		snprintf(buf, len, "this connection already has %zu requests waiting "
		         "(--max-per-conn)", s->max_per_owner);
		break;
	case MU_SCHED_REFUSED_OWNER_KEYS:
		snprintf(buf, len, "this connection already holds on %zu device keys "
		         "(--max-keys-per-conn)", s->max_keys_per_owner);
		break;
	case MU_SCHED_REFUSED_QUEUES:
		snprintf(buf, len, "the tracker already has %zu device keys in use "
		         "(--max-keys)", s->max_queues);
		break;
	default:
		snprintf(buf, len, "no limit was met");
		break;
	}
}

void mu__sched_owner_release(mu__sched_t *s, mu__sched_owner_t *o)
{
	mu__list_t *it, *tmp;

	(void)s;
	mu__list_foreach_safe(it, tmp, &o->resources)
		res_destroy(mu__container_of(it, mu__sched_res_t, owner_node));
	mu__list_foreach_safe(it, tmp, &o->requests) {
		mu__sched_req_t *r =
			mu__container_of(it, mu__sched_req_t, owner_node);

		req_unlink(r);
		mu__free(r);
	}
	/* every count went to zero with its item; the map is empty now */
	mu__strmap_free(&o->keys, NULL);
	mu__strmap_init(&o->keys);
}

int mu__sched_pending(const mu__sched_owner_t *o, cJSON *arr)
{
	const mu__list_t *it;
	mu__strmap_t seen;
	int rc = 0;

	/* A matchkey PUT twice is listed once (TVM keeps a set). A map, not a
	 * pairwise comparison: that was quadratic in what a peer may hold. */
	mu__strmap_init(&seen);
	mu__list_foreach(it, &o->resources) {
		const mu__sched_res_t *r =
			mu__container_of(it, mu__sched_res_t, owner_node);
		size_t n = strlen(r->matchkey);

		if (mu__strmap_get(&seen, r->matchkey, n) != NULL)
			continue;
		if (mu__strmap_put(&seen, r->matchkey, n, (void *)r, NULL) != 0 ||
		    !cJSON_AddItemToArray(arr, cJSON_CreateString(r->matchkey))) {
			rc = MU_ENOMEM;
			break;
		}
	}
	mu__strmap_free(&seen, NULL);
	return rc;
}

int mu__sched_queue_info(const mu__sched_t *s, cJSON *obj)
{
	const mu__list_t *it;

	mu__list_foreach(it, &s->order) {
		const mu__sched_queue_t *q =
			mu__container_of(it, mu__sched_queue_t, order_node);
		cJSON *e = cJSON_CreateObject();

		if (e == NULL || !cJSON_AddItemToObject(obj, q->key, e)) {
			cJSON_Delete(e);
			return MU_ENOMEM;
		}
		if (cJSON_AddNumberToObject(e, "free", (double)q->nfree) == NULL ||
		    cJSON_AddNumberToObject(e, "pending", (double)q->nheap) == NULL)
			return MU_ENOMEM;
	}
	return 0;
}
