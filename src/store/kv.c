/* SPDX-License-Identifier: MIT */
/*
 * TCPStore semantics over the key/value map; see kv_int.h. Where torch's
 * servers disagree, this follows the newer (libuv) one, except as noted:
 *
 * - GET of a missing key: a v1 connection is closed (1.13's server does
 *   that; its clients never GET without a WAIT first), a v2 one gets an
 *   empty value (libuv).
 * - COMPARE_SET wakes the waiters of its key whatever the outcome (libuv,
 *   spec §5 and §8; 1.13 and 2.x legacy never do), even on the "lie" path
 *   (key missing, `expected` not empty) that replies `expected` and creates
 *   nothing: the waiters get STOP_WAITING while the key is still missing,
 *   so a v2 waiter's GET then reads an empty value and a v1 waiter's GET
 *   closes its connection. Watchers (v1) hear only of a compare_set that
 *   stored something (spec §5, WATCH_KEY).
 */
#include <stdio.h>
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/endian_int.h"
#include "store/kv_int.h"

typedef struct {
	mu__list_t waiters;  /* reg_t.key_node, in registration order */
	mu__list_t watchers;
} keyregs_t;

typedef struct {
	mu__list_t key_node;
	mu__list_t peer_node;
	mu__store_peer_t *peer;
	keyregs_t *kr;
	char *key; /* the regs map key, for removing an emptied keyregs_t */
	size_t klen;
	size_t cost;  /* what it adds to peer->held */
	int watch;
} reg_t;

/*
 * What one registration takes: itself and its copy of the key, and (as if
 * it were alone on its key) the key's lists and the map's copy of the key,
 * with the allocator's overhead on each of the four blocks.
 */
static size_t reg_cost(size_t klen)
{
	return sizeof(reg_t) + sizeof(keyregs_t) + 2 * (klen + 1) + 4 * 32;
}

typedef struct {
	mu__list_t node;
	mu__store_val_t *val;
} qitem_t;

typedef struct {
	mu__list_t items;
	size_t n;
} queue_t;

/* ---- values ---- */

mu__store_val_t *mu__store_val_new(const void *p, size_t n)
{
	mu__store_val_t *v = mu__malloc(sizeof(*v) + n);

	if (v == NULL)
		return NULL;
	v->refs = 1;
	v->len = n;
	if (n > 0)
		memcpy(v->data, p, n);
	return v;
}

mu__store_val_t *mu__store_val_ref(mu__store_val_t *v)
{
	v->refs++;
	return v;
}

void mu__store_val_unref(mu__store_val_t *v)
{
	if (v != NULL && --v->refs == 0)
		mu__free(v);
}

static void val_unref_cb(void *v)
{
	mu__store_val_unref(v);
}

static void queue_free_cb(void *p)
{
	queue_t *q = p;
	mu__list_t *it, *tmp;

	mu__list_foreach_safe(it, tmp, &q->items) {
		qitem_t *qi = mu__container_of(it, qitem_t, node);

		mu__store_val_unref(qi->val);
		mu__free(qi);
	}
	mu__free(q);
}

/* ---- lifecycle ---- */

void mu__store_init(mu__store_t *s, mu__store_send_cb send, void *ud)
{
	mu__strmap_init(&s->data);
	mu__strmap_init(&s->regs);
	mu__strmap_init(&s->queues);
	s->send = send;
	s->ud = ud;
}

void mu__store_free(mu__store_t *s)
{
	mu__strmap_free(&s->data, val_unref_cb);
	mu__strmap_free(&s->regs, mu__free); /* empty once peers are released */
	mu__strmap_free(&s->queues, queue_free_cb);
}

void mu__store_peer_init(mu__store_peer_t *p, mu__store_dialect_t d)
{
	mu__list_init(&p->waits);
	mu__list_init(&p->watches);
	p->awaiting = 0;
	p->nwatches = 0;
	p->held = 0;
	p->dialect = d;
	p->validated = 0;
}

/* ---- registrations ---- */

static void reg_drop(mu__store_t *s, reg_t *r)
{
	keyregs_t *kr = r->kr;

	mu__list_remove(&r->key_node);
	mu__list_remove(&r->peer_node);
	r->peer->held -= r->cost;
	if (r->watch) {
		r->peer->nwatches--;
		s->nwatches--;
	}
	if (mu__list_empty(&kr->waiters) && mu__list_empty(&kr->watchers))
		mu__free(mu__strmap_remove(&s->regs, r->key, r->klen));
	mu__free(r->key);
	mu__free(r);
}

static void drop_all(mu__store_t *s, mu__list_t *peer_list)
{
	mu__list_t *it, *tmp;

	mu__list_foreach_safe(it, tmp, peer_list)
		reg_drop(s, mu__container_of(it, reg_t, peer_node));
}

void mu__store_peer_release(mu__store_t *s, mu__store_peer_t *p)
{
	drop_all(s, &p->waits);
	drop_all(s, &p->watches);
	p->awaiting = 0;
}

/* Register p on key (a watch with lim, else a wait). */
static int reg_add(mu__store_t *s, mu__store_peer_t *p, mu__span_t key,
                   const mu__store_limits_t *lim)
{
	keyregs_t *kr = mu__strmap_get(&s->regs, key.p, key.n);
	int watch = lim != NULL;
	reg_t *r;

	if (watch && (p->nwatches >= lim->max_watches || s->nwatches >= lim->max_watches_total))
		return MU_ETOOBIG;
	if (kr == NULL) {
		kr = mu__malloc(sizeof(*kr));
		if (kr == NULL)
			return MU_ENOMEM;
		mu__list_init(&kr->waiters);
		mu__list_init(&kr->watchers);
		if (mu__strmap_put(&s->regs, key.p, key.n, kr, NULL) != 0) {
			mu__free(kr);
			return MU_ENOMEM;
		}
	}
	r = mu__calloc(1, sizeof(*r));
	if (r == NULL || (r->key = mu__malloc(key.n + 1)) == NULL) {
		mu__free(r);
		if (mu__list_empty(&kr->waiters) && mu__list_empty(&kr->watchers))
			mu__free(mu__strmap_remove(&s->regs, key.p, key.n));
		return MU_ENOMEM;
	}
	if (key.n > 0)
		memcpy(r->key, key.p, key.n);
	r->klen = key.n;
	r->peer = p;
	r->kr = kr;
	r->watch = watch;
	r->cost = reg_cost(key.n);
	p->held += r->cost;
	if (watch) {
		p->nwatches++;
		s->nwatches++;
	}
	mu__list_insert_tail(watch ? &kr->watchers : &kr->waiters, &r->key_node);
	mu__list_insert_tail(watch ? &p->watches : &p->waits, &r->peer_node);
	return 0;
}

static int send_u8(mu__store_t *s, mu__store_peer_t *p, uint8_t v)
{
	return s->send(s->ud, p, &v, 1, NULL);
}

static int send_i64(mu__store_t *s, mu__store_peer_t *p, int64_t v)
{
	unsigned char b[8];

	mu_le64_put(b, (uint64_t)v);
	return s->send(s->ud, p, b, 8, NULL);
}

/* A length-prefixed value (empty when v is NULL). */
static int send_bytes(mu__store_t *s, mu__store_peer_t *p, mu__store_val_t *v)
{
	unsigned char b[8];

	mu_le64_put(b, v != NULL ? v->len : 0);
	return s->send(s->ud, p, b, 8, v != NULL && v->len > 0 ? v : NULL);
}

/*
 * Key written: every waiter on it is one key closer; those with none left
 * get STOP_WAITING. `one` (QUEUE_PUSH) releases only the first waiter.
 */
static void wake(mu__store_t *s, mu__span_t key, int one)
{
	keyregs_t *kr = mu__strmap_get(&s->regs, key.p, key.n);
	mu__list_t *it, *tmp;

	if (kr == NULL)
		return;
	mu__list_foreach_safe(it, tmp, &kr->waiters) {
		reg_t *r = mu__container_of(it, reg_t, key_node);
		mu__store_peer_t *p = r->peer;
		int last = it->next == &kr->waiters;

		reg_drop(s, r); /* may free kr when it was the last registration */
		if (--p->awaiting == 0)
			send_u8(s, p, MU_STORE_STOP_WAITING); /* its failure is the server's to handle */
		if (one || last)
			break;
	}
}

/* A length-prefixed string at p; returns the end. */
static char *put_str(char *p, const void *v, size_t n)
{
	mu_le64_put((unsigned char *)p, n);
	if (n > 0)
		memcpy(p + 8, v, n);
	return p + 8 + n;
}

/*
 * v1 watchers of key: u8 kind, str key, bytes old, bytes new. The event
 * is built once and every watcher's write references it: a hundred
 * watchers of a large value cost one copy of it, not a hundred.
 */
static void notify(mu__store_t *s, mu__span_t key, int kind,
                   const mu__store_val_t *old, const mu__store_val_t *nv)
{
	keyregs_t *kr = mu__strmap_get(&s->regs, key.p, key.n);
	size_t on = old ? old->len : 0, nn = nv ? nv->len : 0;
	mu__list_t *it;
	mu__store_val_t *ev;
	char *p;

	if (kr == NULL || mu__list_empty(&kr->watchers))
		return;
	ev = mu__malloc(sizeof(*ev) + 1 + 24 + key.n + on + nn);
	if (ev == NULL)
		return; /* out of memory: watchers miss one event, nobody crashes */
	ev->refs = 1;
	ev->len = 1 + 24 + key.n + on + nn;
	ev->data[0] = (char)kind;
	p = put_str(ev->data + 1, key.p, key.n);
	p = put_str(p, old ? old->data : "", on);
	put_str(p, nv ? nv->data : "", nn);
	mu__list_foreach(it, &kr->watchers)
		s->send(s->ud, mu__container_of(it, reg_t, key_node)->peer, NULL, 0, ev);
	mu__store_val_unref(ev);
}

static int exists(mu__store_t *s, mu__span_t key)
{
	queue_t *q;

	if (mu__strmap_get(&s->data, key.p, key.n) != NULL)
		return 1;
	q = mu__strmap_get(&s->queues, key.p, key.n);
	return q != NULL && q->n > 0;
}

/* Store v (taken) under key; notify watchers; wake waiters. */
static int put(mu__store_t *s, mu__span_t key, mu__store_val_t *v)
{
	void *old = NULL;

	if (v == NULL)
		return MU_ENOMEM;
	if (mu__strmap_put(&s->data, key.p, key.n, v, &old) != 0) {
		mu__store_val_unref(v);
		return MU_ENOMEM;
	}
	notify(s, key, old != NULL ? MU_STORE_KEY_UPDATED : MU_STORE_KEY_CREATED,
	       old, v);
	mu__store_val_unref(old);
	wake(s, key, 0);
	return 0;
}

/* ---- operations ---- */

static int op_wait(mu__store_t *s, mu__store_peer_t *p, const mu__store_req_t *r)
{
	size_t i, missing = 0;
	int rc;

	/* a second WAIT replaces the first (torch clients never send one) */
	drop_all(s, &p->waits);
	p->awaiting = 0;
	for (i = 0; i < r->nkeys; i++) {
		if (exists(s, r->keys[i]))
			continue;
		rc = reg_add(s, p, r->keys[i], NULL);
		if (rc != 0)
			return rc;
		missing++;
	}
	p->awaiting = missing;
	return missing == 0 ? send_u8(s, p, MU_STORE_STOP_WAITING) : 0;
}

static int op_add(mu__store_t *s, mu__store_peer_t *p, const mu__store_req_t *r)
{
	mu__store_val_t *cur = mu__strmap_get(&s->data, r->key.p, r->key.n);
	int64_t v = 0;
	char text[24];
	int n, rc;

	if (cur != NULL && (rc = mu__store_stoll(cur->data, cur->len, &v)) != 0)
		return MU_EPROTO; /* torch closes the connection, value unchanged */
	/* int64 overflow wraps, as observed on torch's server */
	v = (int64_t)((uint64_t)v + (uint64_t)r->delta);
	n = snprintf(text, sizeof(text), "%lld", (long long)v);
	rc = put(s, r->key, mu__store_val_new(text, (size_t)n));
	return rc != 0 ? rc : send_i64(s, p, v);
}

static int op_compare_set(mu__store_t *s, mu__store_peer_t *p,
                          const mu__store_req_t *r)
{
	mu__store_val_t *cur = mu__strmap_get(&s->data, r->key.p, r->key.n), *nv;
	int rc;

	if ((cur == NULL && r->value.n == 0) ||
	    (cur != NULL && cur->len == r->value.n &&
	     memcmp(cur->data, r->value.p, r->value.n) == 0)) {
		nv = mu__store_val_new(r->desired.p, r->desired.n);
		if (nv == NULL)
			return MU_ENOMEM;
		mu__store_val_ref(nv); /* one for the map, one for the reply */
		rc = put(s, r->key, nv);
		if (rc == 0)
			rc = send_bytes(s, p, nv);
		mu__store_val_unref(nv);
		return rc;
	}
	if (cur != NULL) {
		rc = send_bytes(s, p, cur);
	} else {
		/* missing key, non-empty expected: answer `expected`, create nothing */
		nv = mu__store_val_new(r->value.p, r->value.n);
		if (nv == NULL)
			return MU_ENOMEM;
		rc = send_bytes(s, p, nv);
		mu__store_val_unref(nv);
	}
	/* the newer server wakes the key's waiters on every path (the header) */
	if (rc == 0)
		wake(s, r->key, 0);
	return rc;
}

static int op_append(mu__store_t *s, const mu__store_req_t *r,
                     const mu__store_limits_t *lim)
{
	mu__store_val_t *cur = mu__strmap_get(&s->data, r->key.p, r->key.n), *nv;
	size_t old = cur != NULL ? cur->len : 0;

	if (old > lim->max_value || r->value.n > lim->max_value - old)
		return MU_ETOOBIG;
	nv = mu__malloc(sizeof(*nv) + old + r->value.n);
	if (nv == NULL)
		return MU_ENOMEM;
	nv->refs = 1;
	nv->len = old + r->value.n;
	if (old > 0)
		memcpy(nv->data, cur->data, old);
	if (r->value.n > 0)
		memcpy(nv->data + old, r->value.p, r->value.n);
	return put(s, r->key, nv);
}

static int op_delete(mu__store_t *s, mu__store_peer_t *p, const mu__store_req_t *r)
{
	mu__store_val_t *old = mu__strmap_remove(&s->data, r->key.p, r->key.n);

	if (old != NULL)
		notify(s, r->key, MU_STORE_KEY_DELETED, old, NULL);
	mu__store_val_unref(old);
	return send_i64(s, p, old != NULL ? 1 : 0);
}

static int op_queue_push(mu__store_t *s, const mu__store_req_t *r)
{
	queue_t *q = mu__strmap_get(&s->queues, r->key.p, r->key.n);
	qitem_t *qi;

	if (q == NULL) {
		q = mu__calloc(1, sizeof(*q));
		if (q == NULL)
			return MU_ENOMEM;
		mu__list_init(&q->items);
		if (mu__strmap_put(&s->queues, r->key.p, r->key.n, q, NULL) != 0) {
			mu__free(q);
			return MU_ENOMEM;
		}
	}
	qi = mu__malloc(sizeof(*qi));
	if (qi == NULL || (qi->val = mu__store_val_new(r->value.p, r->value.n)) == NULL) {
		mu__free(qi);
		return MU_ENOMEM;
	}
	mu__list_insert_tail(&q->items, &qi->node);
	q->n++;
	wake(s, r->key, 1);
	return 0;
}

static int op_queue_pop(mu__store_t *s, mu__store_peer_t *p, const mu__store_req_t *r)
{
	queue_t *q = mu__strmap_get(&s->queues, r->key.p, r->key.n);
	size_t n = q != NULL ? q->n : 0;
	qitem_t *qi;
	int rc = send_i64(s, p, (int64_t)n); /* the length before the pop */

	if (rc != 0 || n == 0)
		return rc;
	qi = mu__container_of(mu__list_head(&q->items), qitem_t, node);
	mu__list_remove(&qi->node);
	q->n--;
	rc = send_bytes(s, p, qi->val);
	mu__store_val_unref(qi->val);
	mu__free(qi);
	if (q->n == 0)
		queue_free_cb(mu__strmap_remove(&s->queues, r->key.p, r->key.n));
	return rc;
}

static int op_list(mu__store_t *s, mu__store_peer_t *p)
{
	mu__strmap_entry_t *e = NULL;
	size_t slot = 0;
	mu__buf_t out;
	int rc;

	mu__buf_init(&out, (size_t)-1);
	rc = mu__store_put_u64(&out, s->data.count);
	while (rc == 0 && (e = mu__strmap_next(&s->data, &slot, e)) != NULL)
		rc = mu__store_put_str(&out, e->key, e->klen);
	if (rc == 0)
		rc = s->send(s->ud, p, out.data, out.len, NULL);
	mu__buf_free(&out);
	return rc;
}

static int op_multi(mu__store_t *s, mu__store_peer_t *p, const mu__store_req_t *r)
{
	size_t i;
	int rc = 0;

	for (i = 0; rc == 0 && i < r->nkeys; i++) {
		if (r->op == MU_SOP_MULTI_SET)
			rc = put(s, r->keys[i], mu__store_val_new(r->values[i].p, r->values[i].n));
		else /* MULTI_GET: missing keys read as empty (libuv) */
			rc = send_bytes(s, p, mu__strmap_get(&s->data, r->keys[i].p, r->keys[i].n));
	}
	return rc;
}

static int op_get(mu__store_t *s, mu__store_peer_t *p, const mu__store_req_t *r)
{
	mu__store_val_t *v = mu__strmap_get(&s->data, r->key.p, r->key.n);

	if (v == NULL && p->dialect == MU_STORE_V1)
		return MU_EPROTO; /* 1.13's server closes the connection */
	return send_bytes(s, p, v);
}

static int op_check(mu__store_t *s, mu__store_peer_t *p, const mu__store_req_t *r)
{
	size_t i;

	for (i = 0; i < r->nkeys; i++)
		if (!exists(s, r->keys[i]))
			return send_u8(s, p, MU_STORE_NOT_READY);
	return send_u8(s, p, MU_STORE_READY);
}

int mu__store_exec(mu__store_t *s, mu__store_peer_t *p,
                   const mu__store_req_t *r, const mu__store_limits_t *lim)
{
	unsigned char b[4];
	queue_t *q;

	if (p->dialect == MU_STORE_V2 && !p->validated && r->op != MU_SOP_VALIDATE)
		return MU_EPROTO;
	switch (r->op) {
	case MU_SOP_VALIDATE:
		if (r->u32 != MU_STORE_V2_MAGIC)
			return MU_EPROTO;
		p->validated = 1;
		return 0; /* no reply */
	case MU_SOP_SET:
		return put(s, r->key, mu__store_val_new(r->value.p, r->value.n));
	case MU_SOP_GET:
		return op_get(s, p, r);
	case MU_SOP_ADD:
		return op_add(s, p, r);
	case MU_SOP_COMPARE_SET:
		return op_compare_set(s, p, r);
	case MU_SOP_CHECK:
		return op_check(s, p, r);
	case MU_SOP_WAIT:
		return op_wait(s, p, r);
	case MU_SOP_GETNUMKEYS:
		return send_i64(s, p, (int64_t)s->data.count);
	case MU_SOP_DELETE_KEY:
		return op_delete(s, p, r);
	case MU_SOP_WATCH_KEY: {
		int rc = reg_add(s, p, r->key, lim);

		return rc != 0 ? rc : send_u8(s, p, MU_STORE_KEY_CALLBACK_REGISTERED);
	}
	case MU_SOP_APPEND:
		return op_append(s, r, lim);
	case MU_SOP_MULTI_GET:
	case MU_SOP_MULTI_SET:
		return op_multi(s, p, r);
	case MU_SOP_CANCEL_WAIT:
		drop_all(s, &p->waits);
		p->awaiting = 0;
		return send_u8(s, p, MU_STORE_WAIT_CANCELED);
	case MU_SOP_PING:
		mu_le32_put(b, r->u32);
		return s->send(s->ud, p, b, 4, NULL);
	case MU_SOP_QUEUE_PUSH:
		return op_queue_push(s, r);
	case MU_SOP_QUEUE_POP:
		return op_queue_pop(s, p, r);
	case MU_SOP_QUEUE_LEN:
		q = mu__strmap_get(&s->queues, r->key.p, r->key.n);
		return send_i64(s, p, q != NULL ? (int64_t)q->n : 0);
	case MU_SOP_LIST:
		return op_list(s, p);
	default:
		return MU_EPROTO;
	}
}
