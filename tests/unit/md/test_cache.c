/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/md/cache.c: the remote metadata cache keeps to its
 * byte limit, evicting pushed-only agents first and then the least
 * recently used, and says so in REMOTE_DROPPED events. Loads go in through
 * the same internal entry points the P2P listener (pushes) and the fetch
 * completions (wanted) use. Issue 12, finding 7: before, 400 pushed agents
 * of 1 MiB each were all kept.
 */
#include <errno.h>
#include <stdio.h>

#include "mu_test.h"

#include "muster/md.h"
#include "core/alloc_int.h"
#include "md/md_int.h"

#define LIMIT ((size_t)1 << 20)
#define PAYLOAD 60000 /* about 1/17 of the limit, with its bookkeeping */

static mu_md_agent_t *agent(size_t limit)
{
	mu_md_opts_t o;
	mu_md_agent_t *a;

	mu_md_opts_init(&o);
	o.name = "me";
	o.no_env = 1;
	o.remote_cache_max = limit;
	assert_int_equal(mu_md_agent_new(&o, &a, NULL, 0), 0);
	return a;
}

/* Load (pushed or wanted) a blob of `size` payload bytes for `name`
 * under label (NULL: the full blob). */
static int put_label(mu_md_agent_t *a, const char *name, const char *label, size_t size,
                     int pushed)
{
	static char payload[1 << 21];
	char who[64];
	void *blob;
	size_t len;
	int rc;

	assert_true(size <= sizeof(payload));
	assert_int_equal(mu__md_blob_make(name, label, payload, size, &blob, &len), 0);
	rc = pushed ? mu__md_load_pushed(a, label, blob, len, who, sizeof(who))
	            : mu__md_load(a, label, blob, len, who, sizeof(who));
	mu__free(blob);
	return rc;
}

static int put(mu_md_agent_t *a, const char *name, size_t size, int pushed)
{
	return put_label(a, name, NULL, size, pushed);
}

static int loaded(mu_md_agent_t *a, const char *name)
{
	char **names;
	size_t n;
	int found = 0;

	/* list, not check: check counts as a use and would reorder */
	assert_int_equal(mu_md_list_remote(a, &names, &n), 0);
	for (size_t i = 0; i < n; i++)
		found |= strcmp(names[i], name) == 0;
	mu_md_strv_free(names);
	return found;
}

static size_t count(mu_md_agent_t *a)
{
	char **names;
	size_t n;

	assert_int_equal(mu_md_list_remote(a, &names, &n), 0);
	mu_md_strv_free(names);
	return n;
}

/* How many REMOTE_DROPPED events say "evicted", draining the queue. */
static size_t evictions(mu_md_agent_t *a)
{
	mu_md_event_t ev;
	size_t n = 0;

	while (mu_md_next_event(a, &ev) == 0)
		n += ev.kind == MU_MD_REMOTE_DROPPED && strstr(ev.detail, "evicted") != NULL;
	return n;
}

static void test_pushes_stay_under_the_limit(void **state)
{
	mu_md_agent_t *a = agent(LIMIT);
	char name[32];
	size_t peak = 0;

	(void)state;
	/* 400 distinct agents pushed at us, 60 kB each: 24 MB offered */
	for (int i = 0; i < 400; i++) {
		snprintf(name, sizeof(name), "evil-%d", i);
		assert_int_equal(put(a, name, PAYLOAD, 1), 0);
		if (mu_md_remote_bytes(a) > peak)
			peak = mu_md_remote_bytes(a);
	}
	assert_true(peak <= LIMIT);
	assert_true(mu_md_remote_bytes(a) > LIMIT - 2 * PAYLOAD); /* it is used */
	/* the newest are there, the oldest went first, each reported */
	assert_true(loaded(a, "evil-399"));
	assert_false(loaded(a, "evil-0"));
	assert_int_equal(evictions(a), 400 - count(a));
	/* invalidating everything gives every byte back */
	for (int i = 0; i < 400; i++) {
		snprintf(name, sizeof(name), "evil-%d", i);
		mu_md_invalidate_remote(a, name);
	}
	assert_int_equal(mu_md_remote_bytes(a), 0);
	mu_md_agent_free(a);
}

static void test_pushes_evict_pushes_before_what_we_use(void **state)
{
	mu_md_agent_t *a = agent(LIMIT);
	char name[32];

	(void)state;
	assert_int_equal(put(a, "fetched", PAYLOAD, 0), 0);  /* a fetch's answer */
	assert_int_equal(put(a, "pushed-then-read", PAYLOAD, 1), 0);
	assert_int_equal(mu_md_check_remote(a, "pushed-then-read"), 0); /* a use */
	for (int i = 0; i < 100; i++) {
		snprintf(name, sizeof(name), "flood-%d", i);
		assert_int_equal(put(a, name, PAYLOAD, 1), 0);
	}
	assert_true(mu_md_remote_bytes(a) <= LIMIT);
	assert_true(loaded(a, "fetched"));
	assert_true(loaded(a, "pushed-then-read"));
	assert_false(loaded(a, "flood-0"));
	/* a push that updates an agent we use does not demote it */
	assert_int_equal(put(a, "fetched", PAYLOAD, 1), 0); /* same bytes: no-op */
	for (int i = 100; i < 200; i++) {
		snprintf(name, sizeof(name), "flood-%d", i);
		assert_int_equal(put(a, name, PAYLOAD, 1), 0);
	}
	assert_true(loaded(a, "fetched"));
	mu_md_agent_free(a);
}

static void test_used_ones_go_least_recently_used_first(void **state)
{
	mu_md_agent_t *a = agent(LIMIT);
	void *blob;
	size_t n, fit = 0;
	char name[32];

	(void)state;
	/* fill with wanted agents u-0, u-1, ... */
	while (mu_md_remote_bytes(a) + PAYLOAD + 1024 <= LIMIT) {
		snprintf(name, sizeof(name), "u-%zu", fit++);
		assert_int_equal(put(a, name, PAYLOAD, 0), 0);
	}
	assert_true(fit >= 3);
	assert_int_equal(evictions(a), 0);
	/* reading u-0 makes u-1 the least recently used */
	assert_int_equal(mu_md_get_remote(a, "u-0", NULL, &blob, &n), 0);
	mu_free(blob);
	assert_int_equal(put(a, "newest", PAYLOAD, 0), 0);
	assert_true(loaded(a, "u-0"));
	assert_false(loaded(a, "u-1"));
	assert_true(loaded(a, "u-2"));
	assert_int_equal(evictions(a), 1);
	mu_md_agent_free(a);
}

static void test_too_big_alone_is_refused(void **state)
{
	mu_md_agent_t *a = agent(LIMIT);

	(void)state;
	assert_int_equal(put(a, "small", PAYLOAD, 0), 0);
	assert_int_equal(put(a, "huge", LIMIT, 0), MU_ETOOBIG);
	assert_int_equal(put(a, "huge", LIMIT, 1), MU_ETOOBIG);
	/* nothing changed: nobody was evicted for a load that cannot fit */
	assert_true(loaded(a, "small"));
	assert_false(loaded(a, "huge"));
	assert_int_equal(evictions(a), 0);
	/* nor may one agent's labels together pass it */
	assert_int_equal(put_label(a, "multi", "l0", 400000, 0), 0);
	assert_int_equal(put_label(a, "multi", "l1", 400000, 0), 0);
	assert_int_equal(put_label(a, "multi", "l2", 400000, 0), MU_ETOOBIG);
	assert_true(mu_md_remote_bytes(a) <= LIMIT);
	mu_md_agent_free(a);
}

static void test_default_limit(void **state)
{
	mu_md_agent_t *a = agent(0);

	(void)state;
	/* 0 is the default: 128 MiB, two of the largest blobs */
	assert_true(a->remote_max == MU_MD_REMOTE_CACHE_DEFAULT);
	assert_true(MU_MD_REMOTE_CACHE_DEFAULT >= 2 * (size_t)MU_MD_MAX_BLOB);
	assert_int_equal(put(a, "big", 1 << 21, 0), 0);
	assert_true(mu_md_remote_bytes(a) > (1u << 21));
	mu_md_agent_free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pushes_stay_under_the_limit),
		cmocka_unit_test(test_pushes_evict_pushes_before_what_we_use),
		cmocka_unit_test(test_used_ones_go_least_recently_used_first),
		cmocka_unit_test(test_too_big_alone_is_refused),
		cmocka_unit_test(test_default_limit),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
