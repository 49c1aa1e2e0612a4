/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/store/kv.c: the meaning of each operation, with a send
 * callback that collects every peer's output.
 */
#include "mu_test.h"

#include "core/endian_int.h"
#include "store/kv_int.h"

#define NPEERS 3

static mu__store_t st;
static mu__store_limits_t lim;
static mu__store_peer_t peers[NPEERS];
static mu__buf_t out[NPEERS];
static int fail_sends;

static int collect(void *ud, mu__store_peer_t *p, const void *b, size_t n,
                   mu__store_val_t *tail)
{
	mu__buf_t *o = &out[p - peers];

	(void)ud;
	if (fail_sends)
		return MU_ENOMEM;
	mu__buf_append(o, b, n);
	if (tail != NULL)
		mu__buf_append(o, tail->data, tail->len);
	return 0;
}

static int setup(void **state)
{
	(void)state;
	mu__store_limits_init(&lim);
	mu__store_init(&st, collect, NULL);
	for (int i = 0; i < NPEERS; i++) {
		mu__store_peer_init(&peers[i], i == 2 ? MU_STORE_V1 : MU_STORE_V2);
		peers[i].validated = 1;
		mu__buf_init(&out[i], 1u << 30);
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < NPEERS; i++) {
		mu__store_peer_release(&st, &peers[i]);
		mu__buf_free(&out[i]);
	}
	mu__store_free(&st);
	return 0;
}

static mu__span_t S(const char *s)
{
	mu__span_t sp = {s, strlen(s)};

	return sp;
}

static int run(int peer, mu__store_op_t op, const char *key, const char *value,
               const char *desired, int64_t delta)
{
	mu__store_req_t r;

	memset(&r, 0, sizeof(r));
	r.op = op;
	if (key != NULL)
		r.key = S(key);
	if (value != NULL)
		r.value = S(value);
	if (desired != NULL)
		r.desired = S(desired);
	r.delta = delta;
	mu__buf_reset(&out[peer]);
	return mu__store_exec(&st, &peers[peer], &r, &lim);
}

static int run_keys(int peer, mu__store_op_t op, int n, const char **keys)
{
	mu__span_t spans[8];
	mu__store_req_t r;

	memset(&r, 0, sizeof(r));
	r.op = op;
	for (int i = 0; i < n; i++)
		spans[i] = S(keys[i]);
	r.keys = spans;
	r.nkeys = (size_t)n;
	mu__buf_reset(&out[peer]);
	return mu__store_exec(&st, &peers[peer], &r, &lim);
}

/* out[peer] holds exactly a u64 length + bytes equal to s */
static void assert_bytes(int peer, const char *s, size_t n)
{
	assert_int_equal(out[peer].len, 8 + n);
	assert_int_equal(mu_le64_get(out[peer].data), n);
	assert_memory_equal(out[peer].data + 8, s, n);
}

static int64_t i64_reply(int peer)
{
	assert_int_equal(out[peer].len, 8);
	return (int64_t)mu_le64_get(out[peer].data);
}

static void test_set_get_and_no_reply(void **state)
{
	(void)state;
	assert_int_equal(run(0, MU_SOP_SET, "/k", NULL, NULL, 0), 0);
	assert_int_equal(out[0].len, 0); /* SET has no reply */
	assert_int_equal(run(0, MU_SOP_GET, "/k", NULL, NULL, 0), 0);
	assert_bytes(0, "", 0);
	assert_int_equal(run(0, MU_SOP_GET, "/missing", NULL, NULL, 0), 0);
	assert_bytes(0, "", 0); /* v2: empty value */
	assert_int_equal(run(2, MU_SOP_GET, "/missing", NULL, NULL, 0), MU_EPROTO); /* v1: close */
}

static void test_add_text_and_parsing(void **state)
{
	(void)state;
	assert_int_equal(run(0, MU_SOP_ADD, "c", NULL, NULL, 5), 0);
	assert_true(i64_reply(0) == 5);
	run(0, MU_SOP_GET, "c", NULL, NULL, 0);
	assert_bytes(0, "5", 1); /* stored as decimal text */
	run(0, MU_SOP_SET, "c", "12abc", NULL, 0);
	run(0, MU_SOP_ADD, "c", NULL, NULL, 1);
	assert_true(i64_reply(0) == 13);
	run(0, MU_SOP_SET, "c", "9223372036854775807", NULL, 0);
	run(0, MU_SOP_ADD, "c", NULL, NULL, 1);
	assert_true(i64_reply(0) == INT64_MIN); /* wraps */
	run(0, MU_SOP_SET, "bad", "abc", NULL, 0);
	assert_int_equal(run(0, MU_SOP_ADD, "bad", NULL, NULL, 1), MU_EPROTO);
	run(0, MU_SOP_GET, "bad", NULL, NULL, 0);
	assert_bytes(0, "abc", 3); /* unchanged */
}

static void test_compare_set(void **state)
{
	(void)state;
	/* missing, non-empty expected: answer expected, create nothing */
	run(0, MU_SOP_COMPARE_SET, "cs", "exp", "des", 0);
	assert_bytes(0, "exp", 3);
	run(0, MU_SOP_GETNUMKEYS, NULL, NULL, NULL, 0);
	assert_true(i64_reply(0) == 0);
	/* missing, empty expected: create */
	run(0, MU_SOP_COMPARE_SET, "cs", "", "v1", 0);
	assert_bytes(0, "v1", 2);
	/* present, mismatch: current value, unchanged */
	run(0, MU_SOP_COMPARE_SET, "cs", "zz", "v2", 0);
	assert_bytes(0, "v1", 2);
	/* present, match: replaced */
	run(0, MU_SOP_COMPARE_SET, "cs", "v1", "v2", 0);
	assert_bytes(0, "v2", 2);
}

static void test_wait_released_by_other_peer(void **state)
{
	const char *keys[] = {"a", "b", "a"};

	(void)state;
	run(0, MU_SOP_SET, "b", "x", NULL, 0);
	assert_int_equal(run_keys(1, MU_SOP_WAIT, 3, keys), 0);
	assert_int_equal(out[1].len, 0); /* "a" missing twice: no reply yet */
	assert_int_equal(peers[1].awaiting, 2);
	run(0, MU_SOP_ADD, "a", NULL, NULL, 1); /* duplicates count twice: done */
	assert_int_equal(out[1].len, 1);
	assert_int_equal(out[1].data[0], MU_STORE_STOP_WAITING);
	assert_int_equal(peers[1].awaiting, 0);
	/* all present: answered at once */
	assert_int_equal(run_keys(1, MU_SOP_WAIT, 2, keys), 0);
	assert_int_equal(out[1].len, 1);
}

static void test_cancel_and_release(void **state)
{
	const char *k[] = {"w"};

	(void)state;
	run_keys(1, MU_SOP_WAIT, 1, k);
	assert_int_equal(run(1, MU_SOP_CANCEL_WAIT, NULL, NULL, NULL, 0), 0);
	assert_int_equal(out[1].len, 1);
	assert_int_equal(out[1].data[0], MU_STORE_WAIT_CANCELED);
	mu__buf_reset(&out[1]);
	run(0, MU_SOP_SET, "w", "1", NULL, 0);
	assert_int_equal(out[1].len, 0); /* no STOP_WAITING after the cancel */
	/* a released peer's waits vanish too */
	k[0] = "w2";
	run_keys(1, MU_SOP_WAIT, 1, k);
	mu__store_peer_release(&st, &peers[1]);
	run(0, MU_SOP_SET, "w2", "1", NULL, 0);
	assert_int_equal(out[1].len, 0);
}

/*
 * Spec §5/§8: the newer (libuv) server wakes COMPARE_SET's key's waiters
 * on every path, the "lie" (missing key, non-empty expected) included. The
 * lie still creates nothing and tells no v1 watcher.
 */
static void test_compare_set_wakes_even_when_it_lies(void **state)
{
	const char *k[] = {"/cw"}, *two[] = {"/cw2", "/cw3"};

	(void)state;
	run_keys(1, MU_SOP_WAIT, 1, k);
	run(2, MU_SOP_WATCH_KEY, "/cw", NULL, NULL, 0);
	mu__buf_reset(&out[2]);
	assert_int_equal(run(0, MU_SOP_COMPARE_SET, "/cw", "nope", "x", 0), 0);
	assert_bytes(0, "nope", 4);       /* the lie: `expected` comes back */
	assert_int_equal(out[1].len, 1);  /* and the waiter is released */
	assert_int_equal(out[1].data[0], MU_STORE_STOP_WAITING);
	assert_int_equal(peers[1].awaiting, 0);
	assert_int_equal(out[2].len, 0);  /* nothing stored: no watch event */
	run_keys(0, MU_SOP_CHECK, 1, k);  /* the key is still missing */
	assert_int_equal(out[0].data[0], MU_STORE_NOT_READY);
	run(0, MU_SOP_GET, "/cw", NULL, NULL, 0);
	assert_bytes(0, "", 0);           /* what a released v2 waiter reads */
	/* the registration is gone: a later write sends nothing more */
	mu__buf_reset(&out[1]);
	run(0, MU_SOP_SET, "/cw", "v", NULL, 0);
	assert_int_equal(out[1].len, 0);

	/* one of two keys: one step closer, no STOP_WAITING yet */
	run_keys(1, MU_SOP_WAIT, 2, two);
	run(0, MU_SOP_COMPARE_SET, "/cw2", "nope", "x", 0);
	assert_int_equal(out[1].len, 0);
	assert_int_equal(peers[1].awaiting, 1);
	run(0, MU_SOP_COMPARE_SET, "/cw3", "", "x", 0); /* creates: wakes too */
	assert_bytes(0, "x", 1);
	assert_int_equal(out[1].len, 1);
	assert_int_equal(out[1].data[0], MU_STORE_STOP_WAITING);
	/* the mismatch path answers the current value and stores nothing */
	run(0, MU_SOP_COMPARE_SET, "/cw3", "y", "z", 0);
	assert_bytes(0, "x", 1);
}

static void test_delete_check_list_append(void **state)
{
	const char *both[] = {"p", "q"};

	(void)state;
	run(0, MU_SOP_SET, "p", "1", NULL, 0);
	run_keys(0, MU_SOP_CHECK, 2, both);
	assert_int_equal(out[0].data[0], MU_STORE_NOT_READY);
	run(0, MU_SOP_APPEND, "q", "ab", NULL, 0);
	run(0, MU_SOP_APPEND, "q", "cd", NULL, 0);
	assert_int_equal(out[0].len, 0);
	run(0, MU_SOP_GET, "q", NULL, NULL, 0);
	assert_bytes(0, "abcd", 4);
	run_keys(0, MU_SOP_CHECK, 2, both);
	assert_int_equal(out[0].data[0], MU_STORE_READY);
	run(0, MU_SOP_LIST, NULL, NULL, NULL, 0);
	assert_true(mu_le64_get(out[0].data) == 2);
	run(0, MU_SOP_DELETE_KEY, "p", NULL, NULL, 0);
	assert_true(i64_reply(0) == 1);
	run(0, MU_SOP_DELETE_KEY, "p", NULL, NULL, 0);
	assert_true(i64_reply(0) == 0);
}

static void test_queues(void **state)
{
	const char *k[] = {"q"};

	(void)state;
	run_keys(1, MU_SOP_WAIT, 1, k);
	run_keys(2, MU_SOP_WAIT, 1, k);
	run(0, MU_SOP_QUEUE_PUSH, "q", "one", NULL, 0);
	/* a push releases ONE waiter, the first */
	assert_int_equal(out[1].len, 1);
	assert_int_equal(out[2].len, 0);
	run(0, MU_SOP_QUEUE_PUSH, "q", "two", NULL, 0);
	run(0, MU_SOP_QUEUE_LEN, "q", NULL, NULL, 0);
	assert_true(i64_reply(0) == 2);
	run(0, MU_SOP_QUEUE_POP, "q", NULL, NULL, 0);
	assert_int_equal(out[0].len, 8 + 8 + 3);
	assert_true(mu_le64_get(out[0].data) == 2); /* length before the pop */
	assert_memory_equal(out[0].data + 16, "one", 3);
	run(0, MU_SOP_QUEUE_POP, "q", NULL, NULL, 0);
	run(0, MU_SOP_QUEUE_POP, "q", NULL, NULL, 0);
	assert_true(i64_reply(0) == 0); /* empty: nothing follows */
}

static void test_v1_watch_events(void **state)
{
	(void)state;
	assert_int_equal(run(2, MU_SOP_WATCH_KEY, "/w", NULL, NULL, 0), 0);
	assert_int_equal(out[2].data[0], MU_STORE_KEY_CALLBACK_REGISTERED);
	mu__buf_reset(&out[2]);
	run(0, MU_SOP_SET, "/w", "a", NULL, 0);
	/* u8 CREATED, str key, bytes old (empty), bytes new */
	assert_int_equal(out[2].len, 1 + 10 + 8 + 9);
	assert_int_equal(out[2].data[0], MU_STORE_KEY_CREATED);
	mu__buf_reset(&out[2]);
	run(0, MU_SOP_DELETE_KEY, "/w", NULL, NULL, 0);
	assert_int_equal(out[2].data[0], MU_STORE_KEY_DELETED);
}

static void test_validate_gate(void **state)
{
	mu__store_peer_t p;
	mu__store_req_t r;

	(void)state;
	mu__store_peer_init(&p, MU_STORE_V2);
	memset(&r, 0, sizeof(r));
	r.op = MU_SOP_GETNUMKEYS;
	assert_int_equal(mu__store_exec(&st, &p, &r, &lim), MU_EPROTO);
	r.op = MU_SOP_VALIDATE;
	r.u32 = 1;
	assert_int_equal(mu__store_exec(&st, &p, &r, &lim), MU_EPROTO);
	r.u32 = MU_STORE_V2_MAGIC;
	assert_int_equal(mu__store_exec(&st, &p, &r, &lim), 0);
	assert_true(p.validated);
}

static void test_append_limit_and_send_failure(void **state)
{
	(void)state;
	lim.max_value = 4;
	run(0, MU_SOP_APPEND, "l", "abc", NULL, 0);
	assert_int_equal(run(0, MU_SOP_APPEND, "l", "de", NULL, 0), MU_ETOOBIG);
	mu__store_limits_init(&lim);
	fail_sends = 1;
	assert_int_equal(run(0, MU_SOP_GET, "l", NULL, NULL, 0), MU_ENOMEM);
	fail_sends = 0;
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_set_get_and_no_reply),
		T(test_add_text_and_parsing),
		T(test_compare_set),
		T(test_wait_released_by_other_peer),
		T(test_cancel_and_release),
		T(test_compare_set_wakes_even_when_it_lies),
		T(test_delete_check_list_append),
		T(test_queues),
		T(test_v1_watch_events),
		T(test_validate_gate),
		T(test_append_limit_and_send_failure),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
