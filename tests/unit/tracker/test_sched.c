/* SPDX-License-Identifier: MIT */
/* Unit tests for src/tracker/sched.c: the matching rules of spec §7. */
#include <stdio.h>

#include "mu_test.h"

#include "tracker/sched_int.h"

/* Who got what, in order; owners that "died" refuse delivery. */
typedef struct {
	mu__sched_owner_t *who[64];
	char matchkey[64][32];
	int n;
	mu__sched_owner_t *dead;
} log_t;

static int deliver(void *ud, mu__sched_owner_t *o, const mu__sched_res_t *r)
{
	log_t *l = ud;

	if (o == l->dead)
		return -1;
	l->who[l->n] = o;
	snprintf(l->matchkey[l->n], sizeof(l->matchkey[0]), "%s", r->matchkey);
	l->n++;
	return 0;
}

static void test_priority_then_fifo(void **state)
{
	mu__sched_t s;
	mu__sched_owner_t srv, c[4];
	log_t l = {0};
	int i;

	(void)state;
	mu__sched_init(&s, deliver, &l);
	mu__sched_owner_init(&srv);
	/* spec §7.2 [verified]: priorities 1, 5, 5, 3 are granted 5, 5, 3, 1 */
	const double prio[4] = {1, 5, 5, 3};
	for (i = 0; i < 4; i++) {
		mu__sched_owner_init(&c[i]);
		assert_int_equal(mu__sched_request(&s, &c[i], "rasp", prio[i]), 0);
	}
	assert_int_equal(l.n, 0);
	for (i = 0; i < 4; i++) {
		char mk[16];

		snprintf(mk, sizeof(mk), "rasp:%d", i);
		assert_int_equal(mu__sched_put(&s, &srv, "rasp", "1.2.3.4", "9090", mk), 0);
	}
	assert_int_equal(l.n, 4);
	assert_ptr_equal(l.who[0], &c[1]);
	assert_ptr_equal(l.who[1], &c[2]);
	assert_ptr_equal(l.who[2], &c[3]);
	assert_ptr_equal(l.who[3], &c[0]);
	assert_int_equal(srv.nresources, 0);
	for (i = 0; i < 4; i++)
		mu__sched_owner_release(&s, &c[i]);
	mu__sched_owner_release(&s, &srv);
	mu__sched_free(&s);
}

static void test_oldest_free_resource_first(void **state)
{
	mu__sched_t s;
	mu__sched_owner_t a, b, cl;
	log_t l = {0};

	(void)state;
	mu__sched_init(&s, deliver, &l);
	mu__sched_owner_init(&a);
	mu__sched_owner_init(&b);
	mu__sched_owner_init(&cl);
	mu__sched_put(&s, &a, "k", "h", "1", "k:a");
	mu__sched_put(&s, &b, "k", "h", "2", "k:b");
	mu__sched_request(&s, &cl, "k", 1);
	mu__sched_request(&s, &cl, "k", 1);
	assert_int_equal(l.n, 2);
	assert_string_equal(l.matchkey[0], "k:a");
	assert_string_equal(l.matchkey[1], "k:b");
	mu__sched_owner_release(&s, &a);
	mu__sched_owner_release(&s, &b);
	mu__sched_owner_release(&s, &cl);
	mu__sched_free(&s);
}

static void test_failed_delivery_skips_dead(void **state)
{
	mu__sched_t s;
	mu__sched_owner_t srv, dead, live;
	log_t l = {0};
	cJSON *qi = cJSON_CreateObject();

	(void)state;
	mu__sched_init(&s, deliver, &l);
	mu__sched_owner_init(&srv);
	mu__sched_owner_init(&dead);
	mu__sched_owner_init(&live);
	l.dead = &dead;
	/* the dead priority-100 requester comes first but never blocks */
	mu__sched_request(&s, &dead, "k", 100);
	mu__sched_request(&s, &live, "k", 1);
	mu__sched_put(&s, &srv, "k", "h", "1", "k:1");
	assert_int_equal(l.n, 1);
	assert_ptr_equal(l.who[0], &live);
	/* a failed delivery with nobody else waiting leaves the resource free */
	mu__sched_request(&s, &dead, "k", 100);
	mu__sched_put(&s, &srv, "k", "h", "1", "k:2");
	assert_int_equal(l.n, 1);
	mu__sched_queue_info(&s, qi);
	assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(qi, "k"), "free")->valueint, 1);
	assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(qi, "k"), "pending")->valueint, 0);
	cJSON_Delete(qi);
	mu__sched_owner_release(&s, &srv);
	mu__sched_owner_release(&s, &dead);
	mu__sched_owner_release(&s, &live);
	mu__sched_free(&s);
}

/*
 * spec §7.2 [verified]: the resource a failed delivery offered goes to the
 * END of the free list, so with A then B free, a dead requester that was
 * offered A leaves the order B, A and the next live requester gets B.
 */
static void test_failed_delivery_tail_order(void **state)
{
	mu__sched_t s;
	mu__sched_owner_t a, b, dead, live;
	log_t l = {0};

	(void)state;
	mu__sched_init(&s, deliver, &l);
	mu__sched_owner_init(&a);
	mu__sched_owner_init(&b);
	mu__sched_owner_init(&dead);
	mu__sched_owner_init(&live);
	l.dead = &dead;
	assert_int_equal(mu__sched_put(&s, &a, "k", "h", "1", "k:a"), 0);
	assert_int_equal(mu__sched_put(&s, &b, "k", "h", "2", "k:b"), 0);
	assert_int_equal(mu__sched_request(&s, &dead, "k", 100), 0);
	assert_int_equal(l.n, 0);
	assert_int_equal(dead.nrequests, 0); /* the failed request is dropped */
	assert_int_equal(a.nresources, 1);   /* A is still free, now last */
	assert_int_equal(mu__sched_request(&s, &live, "k", 1), 0);
	assert_int_equal(l.n, 1);
	assert_ptr_equal(l.who[0], &live);
	assert_string_equal(l.matchkey[0], "k:b");
	assert_int_equal(mu__sched_request(&s, &live, "k", 1), 0);
	assert_int_equal(l.n, 2);
	assert_string_equal(l.matchkey[1], "k:a");
	mu__sched_owner_release(&s, &a);
	mu__sched_owner_release(&s, &b);
	mu__sched_owner_release(&s, &dead);
	mu__sched_owner_release(&s, &live);
	mu__sched_free(&s);
}

static void test_release_withdraws_and_drops(void **state)
{
	mu__sched_t s;
	mu__sched_owner_t srv, cl, other;
	log_t l = {0};
	cJSON *qi = cJSON_CreateObject(), *k;

	(void)state;
	mu__sched_init(&s, deliver, &l);
	mu__sched_owner_init(&srv);
	mu__sched_owner_init(&cl);
	mu__sched_owner_init(&other);
	mu__sched_put(&s, &srv, "a:b", "h", "1", "a:b:0.1"); /* key with ':' */
	mu__sched_put(&s, &srv, "a:b", "h", "1", "a:b:0.2");
	mu__sched_request(&s, &cl, "z", 1);
	mu__sched_request(&s, &cl, "z", 2);
	mu__sched_request(&s, &other, "z", 3);
	mu__sched_owner_release(&s, &srv);
	mu__sched_owner_release(&s, &cl);
	assert_int_equal(srv.nresources, 0);
	assert_int_equal(cl.nrequests, 0);
	mu__sched_queue_info(&s, qi);
	k = cJSON_GetObjectItem(qi, "a:b");
	assert_int_equal(cJSON_GetObjectItem(k, "free")->valueint, 0);
	k = cJSON_GetObjectItem(qi, "z");
	assert_int_equal(cJSON_GetObjectItem(k, "pending")->valueint, 1);
	cJSON_Delete(qi);
	/* the survivor's request is still the one served */
	mu__sched_put(&s, &srv, "z", "h", "1", "z:1");
	assert_int_equal(l.n, 1);
	assert_ptr_equal(l.who[0], &other);
	mu__sched_owner_release(&s, &other);
	mu__sched_owner_release(&s, &srv); /* empty, but it holds its key map */
	mu__sched_free(&s);
}

static void test_heap_removal_keeps_order(void **state)
{
	mu__sched_t s;
	mu__sched_owner_t srv, o[40];
	log_t l = {0};
	int i;

	(void)state;
	mu__sched_init(&s, deliver, &l);
	mu__sched_owner_init(&srv);
	for (i = 0; i < 40; i++) {
		mu__sched_owner_init(&o[i]);
		mu__sched_request(&s, &o[i], "k", (i * 7) % 11);
	}
	/* drop every third requester from the middle of the heap */
	for (i = 0; i < 40; i += 3)
		mu__sched_owner_release(&s, &o[i]);
	for (i = 0; i < 40; i++)
		mu__sched_put(&s, &srv, "k", "h", "1", "k:x");
	assert_int_equal(l.n, 26);
	for (i = 1; i < l.n; i++) {
		int a = (int)(l.who[i - 1] - o), b = (int)(l.who[i] - o);
		int pa = (a * 7) % 11, pb = (b * 7) % 11;

		assert_true(pa > pb || (pa == pb && a < b));
	}
	for (i = 0; i < 40; i++)
		mu__sched_owner_release(&s, &o[i]);
	mu__sched_owner_release(&s, &srv);
	mu__sched_free(&s);
}

static void test_pending_lists_distinct_ungranted(void **state)
{
	mu__sched_t s;
	mu__sched_owner_t srv, cl;
	log_t l = {0};
	cJSON *arr = cJSON_CreateArray();

	(void)state;
	mu__sched_init(&s, deliver, &l);
	mu__sched_owner_init(&srv);
	mu__sched_owner_init(&cl);
	mu__sched_put(&s, &srv, "k", "h", "1", "k:1");
	mu__sched_put(&s, &srv, "k", "h", "1", "k:2");
	mu__sched_put(&s, &srv, "k", "h", "1", "k:2");
	mu__sched_request(&s, &cl, "k", 1); /* takes k:1 */
	assert_int_equal(mu__sched_pending(&srv, arr), 0);
	assert_int_equal(cJSON_GetArraySize(arr), 1);
	assert_string_equal(cJSON_GetArrayItem(arr, 0)->valuestring, "k:2");
	cJSON_Delete(arr);
	arr = cJSON_CreateArray();
	assert_int_equal(mu__sched_pending(&cl, arr), 0);
	assert_int_equal(cJSON_GetArraySize(arr), 0);
	cJSON_Delete(arr);
	mu__sched_owner_release(&s, &srv);
	mu__sched_owner_release(&s, &cl);
	mu__sched_free(&s);
}

static void test_limits(void **state)
{
	mu__sched_t s;
	mu__sched_owner_t o;
	log_t l = {0};
	char key[16];
	int i;

	(void)state;
	mu__sched_init(&s, deliver, &l);
	s.max_queues = 4;
	s.max_per_owner = 3;
	mu__sched_owner_init(&o);
	for (i = 0; i < 3; i++)
		assert_int_equal(mu__sched_put(&s, &o, "k", "h", "1", "k:1"), 0);
	assert_int_equal(mu__sched_put(&s, &o, "k", "h", "1", "k:1"), MU_ETOOBIG);
	assert_int_equal(s.refused, MU_SCHED_REFUSED_RESOURCES);
	for (i = 0; i < 3; i++) {
		snprintf(key, sizeof(key), "q%d", i);
		assert_int_equal(mu__sched_request(&s, &o, key, 1), 0);
	}
	assert_int_equal(mu__sched_request(&s, &o, "q9", 1), MU_ETOOBIG);
	assert_int_equal(s.refused, MU_SCHED_REFUSED_REQUESTS);
	mu__sched_owner_release(&s, &o);
	/* at the queue limit, empty queues are pruned to make room */
	assert_int_equal(s.queues.count, 4);
	assert_int_equal(mu__sched_request(&s, &o, "fresh", 1), 0);
	assert_int_equal(s.queues.count, 4);
	mu__sched_owner_release(&s, &o);
	mu__sched_free(&s);
}

/* PUT n distinct keys "<prefix><i>"; returns how many were taken. */
static int put_keys(mu__sched_t *s, mu__sched_owner_t *o, const char *prefix, int n)
{
	char key[32];
	int i, ok = 0, rc;

	for (i = 0; i < n; i++) {
		snprintf(key, sizeof(key), "%s%d", prefix, i);
		rc = mu__sched_put(s, o, key, "h", "1", key);
		assert_true(rc == 0 || rc == MU_ETOOBIG);
		ok += rc == 0;
	}
	return ok;
}

static void test_keys_per_owner(void **state)
{
	mu__sched_t s;
	mu__sched_owner_t o, other;
	log_t l = {0};
	char why[200];

	(void)state;
	mu__sched_init(&s, deliver, &l);
	s.max_keys_per_owner = 3;
	mu__sched_owner_init(&o);
	mu__sched_owner_init(&other);
	assert_int_equal(put_keys(&s, &o, "k", 3), 3);
	/* a fourth key, by PUT or by REQUEST, is one too many; more of the
	 * same keys are not */
	assert_int_equal(mu__sched_put(&s, &o, "new", "h", "1", "new:1"), MU_ETOOBIG);
	assert_int_equal(s.refused, MU_SCHED_REFUSED_OWNER_KEYS);
	mu__sched_refusal(&s, why, sizeof(why));
	assert_non_null(strstr(why, "3 device keys"));
	assert_int_equal(mu__sched_request(&s, &o, "new", 1), MU_ETOOBIG);
	assert_int_equal(mu__sched_put(&s, &o, "k1", "h", "1", "k1:2"), 0);
	assert_int_equal(mu__sched_request(&s, &o, "k2", 1), 0); /* granted at once */
	assert_int_equal(l.n, 1);
	/* nothing of a refused key was kept: no queue */
	assert_null(mu__strmap_get(&s.queues, "new", 3));
	/* k2's only resource was granted: o holds on two keys, room for one */
	assert_int_equal(o.keys.count, 2);
	assert_int_equal(mu__sched_put(&s, &o, "new", "h", "1", "new:1"), 0);
	/* the limit is per owner */
	assert_int_equal(put_keys(&s, &other, "x", 3), 3);
	mu__sched_owner_release(&s, &o);
	assert_int_equal(o.keys.count, 0);
	assert_int_equal(put_keys(&s, &o, "again", 3), 3); /* usable again */
	mu__sched_owner_release(&s, &o);
	mu__sched_owner_release(&s, &other);
	mu__sched_free(&s);
}

/*
 * Issue 12, finding 6: three connections PUT 10,000 distinct keys each.
 * With the defaults each holds at most 64 keys, so a fourth can still PUT
 * and REQUEST a new key. (Before, the three filled the 10,000-key table
 * and every new key was refused.)
 */
static void test_three_owners_cannot_take_the_key_table(void **state)
{
	mu__sched_t s;
	mu__sched_owner_t o[3], fresh;
	log_t l = {0};
	char prefix[8];
	int i;

	(void)state;
	mu__sched_init(&s, deliver, &l);
	for (i = 0; i < 3; i++) {
		mu__sched_owner_init(&o[i]);
		snprintf(prefix, sizeof(prefix), "o%d-", i);
		assert_int_equal(put_keys(&s, &o[i], prefix, 10000), MU_SCHED_MAX_KEYS_PER_OWNER);
	}
	assert_int_equal(s.queues.count, 3 * MU_SCHED_MAX_KEYS_PER_OWNER);
	mu__sched_owner_init(&fresh);
	assert_int_equal(mu__sched_put(&s, &fresh, "newdev", "h", "9090", "newdev:1"), 0);
	assert_int_equal(mu__sched_request(&s, &fresh, "newdev", 1), 0);
	assert_int_equal(l.n, 1);
	assert_string_equal(l.matchkey[0], "newdev:1");
	for (i = 0; i < 3; i++)
		mu__sched_owner_release(&s, &o[i]);
	mu__sched_owner_release(&s, &fresh);
	mu__sched_free(&s);
}

/* At the key limit the queue empty longest goes first, found at once. */
static void test_prunes_oldest_empty_queue(void **state)
{
	mu__sched_t s;
	mu__sched_owner_t a, b;
	log_t l = {0};
	cJSON *qi;

	(void)state;
	mu__sched_init(&s, deliver, &l);
	s.max_queues = 3;
	mu__sched_owner_init(&a);
	mu__sched_owner_init(&b);
	assert_int_equal(mu__sched_put(&s, &a, "held", "h", "1", "held:1"), 0);
	assert_int_equal(mu__sched_put(&s, &b, "first", "h", "1", "first:1"), 0);
	assert_int_equal(mu__sched_request(&s, &b, "second", 1), 0);
	/* full, nothing empty: a new key is refused */
	assert_int_equal(mu__sched_put(&s, &b, "fourth", "h", "1", "fourth:1"), MU_ETOOBIG);
	assert_int_equal(s.refused, MU_SCHED_REFUSED_QUEUES);
	/* a release withdraws resources, then requests: "first" is emptied
	 * before "second", so "first" goes */
	mu__sched_owner_release(&s, &b);
	assert_int_equal(mu__sched_put(&s, &a, "fourth", "h", "1", "fourth:1"), 0);
	qi = cJSON_CreateObject();
	assert_int_equal(mu__sched_queue_info(&s, qi), 0);
	assert_non_null(cJSON_GetObjectItem(qi, "held"));
	assert_null(cJSON_GetObjectItem(qi, "first"));
	assert_non_null(cJSON_GetObjectItem(qi, "second"));
	assert_non_null(cJSON_GetObjectItem(qi, "fourth"));
	cJSON_Delete(qi);
	mu__sched_owner_release(&s, &a);
	mu__sched_free(&s);
}

static void test_out_of_memory(void **state)
{
	mu__sched_t s;
	mu__sched_owner_t o;
	log_t l = {0};
	long n;
	int rc;

	(void)state;
	for (n = 0; n < 30; n++) {
		mu__sched_init(&s, deliver, &l);
		mu__sched_owner_init(&o);
		mu_test_fail_after(n);
		rc = mu__sched_put(&s, &o, "k", "h", "1", "k:1");
		if (rc == 0)
			rc = mu__sched_request(&s, &o, "k2", 1);
		mu_test_alloc_reset();
		assert_true(rc == 0 || rc == MU_ENOMEM);
		mu__sched_owner_release(&s, &o);
		mu__sched_free(&s);
		if (rc == 0)
			break;
	}
	assert_true(n < 30);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_priority_then_fifo),
		cmocka_unit_test(test_oldest_free_resource_first),
		cmocka_unit_test(test_failed_delivery_skips_dead),
		cmocka_unit_test(test_failed_delivery_tail_order),
		cmocka_unit_test(test_release_withdraws_and_drops),
		cmocka_unit_test(test_heap_removal_keeps_order),
		cmocka_unit_test(test_pending_lists_distinct_ungranted),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_keys_per_owner),
		cmocka_unit_test(test_three_owners_cannot_take_the_key_table),
		cmocka_unit_test(test_prunes_oldest_empty_queue),
		cmocka_unit_test(test_out_of_memory),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
