/* SPDX-License-Identifier: MIT */
/*
 * Priority matching of tracker requests to free resources (spec §7).
 *
 * Order: among waiting requests the highest priority wins, ties go to the
 * earliest (a per-queue arrival counter, as TVM does since #7389); among free
 * resources the oldest PUT wins. A failed delivery drops the request and puts
 * the resource at the tail, and matching goes on, so one dead requester never
 * blocks a key.
 */
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "tracker/sched_int.h"

#define DEFAULT_MAX_QUEUES 10000
#define DEFAULT_MAX_PER_OWNER 4096

typedef struct {
	mu__list_t owner_node;
	mu__sched_owner_t *owner;
	mu__sched_queue_t *queue;
	double priority;
	uint64_t seq;
	size_t heap_idx;
} mu__sched_req_t;

struct mu__sched_queue_s {
	mu__list_t order_node;
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
	s->max_queues = DEFAULT_MAX_QUEUES;
	s->max_per_owner = DEFAULT_MAX_PER_OWNER;
	s->deliver = deliver;
	s->ud = ud;
}

static void queue_destroy(mu__sched_t *s, mu__sched_queue_t *q)
{
	mu__strmap_remove(&s->queues, q->key, q->keylen);
	mu__list_remove(&q->order_node);
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
}

/* ---- resources ---- */

static void res_destroy(mu__sched_res_t *r)
{
	mu__list_remove(&r->queue_node);
	mu__list_remove(&r->owner_node);
	r->queue->nfree--;
	r->owner->nresources--;
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

/* An empty queue (nothing free, nobody waiting) that can be dropped. */
static int prune_one(mu__sched_t *s)
{
	mu__list_t *it;

	mu__list_foreach(it, &s->order) {
		mu__sched_queue_t *q =
			mu__container_of(it, mu__sched_queue_t, order_node);

		if (q->nfree == 0 && q->nheap == 0) {
			queue_destroy(s, q);
			return 1;
		}
	}
	return 0;
}

/*
 * Find or create KEY's queue. Queues live forever, as in TVM (they show in
 * SUMMARY with zero counts), until the queue limit is reached; then empty
 * ones are dropped to make room.
 */
static int get_queue(mu__sched_t *s, const char *key, mu__sched_queue_t **out)
{
	size_t klen = strlen(key);
	mu__sched_queue_t *q = mu__strmap_get(&s->queues, key, klen);

	if (q != NULL) {
		*out = q;
		return 0;
	}
	if (s->queues.count >= s->max_queues && !prune_one(s))
		return MU_ETOOBIG;
	q = mu__calloc(1, sizeof(*q));
	if (q == NULL)
		return MU_ENOMEM;
	q->key = mu__strndup(key, klen);
	q->keylen = klen;
	mu__list_init(&q->free);
	if (q->key == NULL || mu__strmap_put(&s->queues, key, klen, q, NULL)) {
		mu__free(q->key);
		mu__free(q);
		return MU_ENOMEM;
	}
	mu__list_insert_tail(&s->order, &q->order_node);
	*out = q;
	return 0;
}

int mu__sched_put(mu__sched_t *s, mu__sched_owner_t *o, const char *key,
                  const char *addr, const char *port_json,
                  const char *matchkey)
{
	mu__sched_queue_t *q;
	mu__sched_res_t *r;
	int rc;

	if (o->nresources >= s->max_per_owner)
		return MU_ETOOBIG;
	rc = get_queue(s, key, &q);
	if (rc != 0)
		return rc;
	r = mu__calloc(1, sizeof(*r));
	if (r == NULL)
		return MU_ENOMEM;
	r->addr = mu__strdup(addr);
	r->port = mu__strdup(port_json);
	r->matchkey = mu__strdup(matchkey);
	if (r->addr == NULL || r->port == NULL || r->matchkey == NULL) {
		mu__free(r->addr);
		mu__free(r->port);
		mu__free(r->matchkey);
		mu__free(r);
		return MU_ENOMEM;
	}
	r->owner = o;
	r->queue = q;
	mu__list_insert_tail(&q->free, &r->queue_node);
	mu__list_insert_tail(&o->resources, &r->owner_node);
	q->nfree++;
	o->nresources++;
	match(s, q);
	return 0;
}

int mu__sched_request(mu__sched_t *s, mu__sched_owner_t *o, const char *key,
                      double priority)
{
	mu__sched_queue_t *q;
	mu__sched_req_t *r;
	int rc;

	if (o->nrequests >= s->max_per_owner)
		return MU_ETOOBIG;
	rc = get_queue(s, key, &q);
	if (rc != 0)
		return rc;
	if (q->nheap == q->capheap) {
		size_t ncap = q->capheap ? q->capheap * 2 : 8;
		mu__sched_req_t **h = mu__realloc(q->heap, ncap * sizeof(*h));

		if (h == NULL)
			return MU_ENOMEM;
		q->heap = h;
		q->capheap = ncap;
	}
	r = mu__calloc(1, sizeof(*r));
	if (r == NULL)
		return MU_ENOMEM;
	r->owner = o;
	r->queue = q;
	r->priority = priority;
	r->seq = q->next_seq++;
	mu__list_insert_tail(&o->requests, &r->owner_node);
	o->nrequests++;
	heap_set(q, q->nheap++, r);
	sift_up(q, r->heap_idx);
	match(s, q);
	return 0;
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
}

int mu__sched_pending(const mu__sched_owner_t *o, cJSON *arr)
{
	const mu__list_t *it, *jt;

	mu__list_foreach(it, &o->resources) {
		const mu__sched_res_t *r =
			mu__container_of(it, mu__sched_res_t, owner_node);
		int dup = 0;

		/* A matchkey PUT twice is listed once (TVM keeps a set). */
		for (jt = o->resources.next; jt != it && !dup; jt = jt->next)
			dup = strcmp(mu__container_of(jt, mu__sched_res_t,
			                              owner_node)->matchkey,
			             r->matchkey) == 0;
		if (!dup && !cJSON_AddItemToArray(arr, cJSON_CreateString(r->matchkey)))
			return MU_ENOMEM;
	}
	return 0;
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
