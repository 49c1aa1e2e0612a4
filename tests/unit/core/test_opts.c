/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/core/opts.c: options structs that grow. A program
 * built against older headers (a shorter struct) and one built against
 * newer headers (a longer one) both work with this library, through a
 * real options struct (the tracker's) and the helpers themselves.
 */
#include <stdio.h>

#include "mu_test.h"

#include "muster/tracker.h"
#include "core/opts_int.h"

/* A struct as an older header had it: everything before `budget`. */
#define OLD_SIZE offsetof(mu_tracker_opts_t, budget)

static int start_and_stop(mu_tracker_opts_t *o)
{
	mu_tracker_t *t = NULL;
	int rc;

	o->host = "127.0.0.1";
	o->port = 0;
	o->silent = 1;
	rc = mu_tracker_start(o, &t);
	mu_tracker_free(t);
	return rc;
}

/* An old program: init writes only its bytes, start reads only them and
 * gives the fields it lacks their defaults. The bytes past its struct are
 * garbage a budget check would refuse (a negative grace), so reading them
 * fails the start. */
static void test_older_caller(void **state)
{
	unsigned char mem[sizeof(mu_tracker_opts_t) + 64];
	mu_tracker_opts_t *o = (mu_tracker_opts_t *)mem;

	(void)state;
	memset(mem, 0xAB, sizeof(mem));
	mu_tracker_opts_init_size(o, OLD_SIZE);
	assert_int_equal(o->struct_size, OLD_SIZE);
	assert_int_equal(o->port, 9190);
	for (size_t i = OLD_SIZE; i < sizeof(mem); i++)
		assert_int_equal(mem[i], 0xAB);
	assert_int_equal(start_and_stop(o), 0);
}

/* A newer program: the fields this library does not know are zeroed by
 * init and may stay so; set to anything else, the start is refused. */
static void test_newer_caller(void **state)
{
	unsigned char mem[sizeof(mu_tracker_opts_t) + 16];
	mu_tracker_opts_t *o = (mu_tracker_opts_t *)mem;

	(void)state;
	memset(mem, 0xAB, sizeof(mem));
	mu_tracker_opts_init_size(o, sizeof(mem));
	assert_int_equal(o->struct_size, sizeof(mem));
	for (size_t i = sizeof(*o); i < sizeof(mem); i++)
		assert_int_equal(mem[i], 0);
	assert_int_equal(start_and_stop(o), 0);
	mem[sizeof(mem) - 1] = 1;
	assert_int_equal(start_and_stop(o), MU_EARG);
}

/* Options never given to their init call, or with a size that cannot be
 * one, are refused; this build's own size works. */
static void test_uninitialised(void **state)
{
	mu_tracker_opts_t o;

	(void)state;
	memset(&o, 0, sizeof(o));
	assert_int_equal(start_and_stop(&o), MU_EARG);
	mu_tracker_opts_init(&o);
	assert_int_equal(o.struct_size, sizeof(o));
	o.struct_size = sizeof(size_t);
	assert_int_equal(start_and_stop(&o), MU_EARG);
	o.struct_size = (size_t)-1; /* never read that far */
	assert_int_equal(start_and_stop(&o), MU_EARG);
	mu_tracker_opts_init(&o);
	assert_int_equal(start_and_stop(&o), 0);
	assert_int_equal(mu_tracker_start(NULL, &(mu_tracker_t *){NULL}), MU_EARG);
}

typedef struct {
	size_t struct_size;
	int a;
	double b;
	int c;
} toy_t;

/* The helpers: fill copies only what fits, read overlays only what the
 * caller has, and neither touches struct_size's meaning. */
static void test_helpers(void **state)
{
	toy_t d = {sizeof(toy_t), 1, 2.0, 3}, dst, src;

	(void)state;
	mu__opts_fill(&src, offsetof(toy_t, c), &d, sizeof(d));
	assert_int_equal(src.struct_size, offsetof(toy_t, c));
	assert_int_equal(src.a, 1);
	src.a = 10;
	src.b = 20.0;
	dst = d;
	assert_int_equal(mu__opts_read(&dst, sizeof(dst), &src), 0);
	assert_int_equal(dst.a, 10);
	assert_true(dst.b == 20.0);
	assert_int_equal(dst.c, 3); /* not the caller's: the default */
	assert_int_equal(dst.struct_size, sizeof(dst));
	assert_int_equal(mu__opts_read(&dst, sizeof(dst), NULL), MU_EARG);
	mu__opts_fill(&src, 4, &d, sizeof(d)); /* too small for struct_size: untouched */
	assert_int_equal(src.struct_size, offsetof(toy_t, c));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_older_caller),
		cmocka_unit_test(test_newer_caller),
		cmocka_unit_test(test_uninitialised),
		cmocka_unit_test(test_helpers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
