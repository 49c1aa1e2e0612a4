/* SPDX-License-Identifier: MIT */
/* Unit tests for src/tensor/tensor.c: tensors and tensor lists. */
#include <stdio.h>

#include "mu_test.h"

#include "muster/tensor.h"

static void test_new(void **state)
{
	static const uint64_t d[] = {2, 3, 4};
	mu_tensor_t *t;

	(void)state;
	assert_int_equal(mu_tensor_new("x", 3, d, &t), 0);
	assert_string_equal(t->name, "x");
	assert_int_equal(t->rank, 3);
	assert_int_equal(t->numel, 24);
	assert_int_equal(t->dims[2], 4);
	assert_non_null(t->mem);
	assert_int_equal((uintptr_t)t->data % 64, 0);
	for (int i = 0; i < 24; i++)
		assert_true(t->data[i] == 0.0f);
	t->data[23] = 1; /* all of it is writable */
	mu_tensor_free(t);

	/* rank 0: one element, dims may be NULL; a NULL name is "" */
	assert_int_equal(mu_tensor_new(NULL, 0, NULL, &t), 0);
	assert_string_equal(t->name, "");
	assert_int_equal(t->numel, 1);
	assert_non_null(t->data);
	mu_tensor_free(t);
	mu_tensor_free(NULL);
}

static void test_new_limits(void **state)
{
	static const uint64_t d9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
	static const uint64_t big[] = {(uint64_t)1 << 32, (uint64_t)1 << 31};
	static const uint64_t zero[] = {(uint64_t)1 << 40, 0, 7};
	mu_tensor_t *t = (mu_tensor_t *)&t;

	(void)state;
	assert_int_equal(mu_tensor_new("x", 9, d9, &t), MU_ETOOBIG);
	assert_null(t);
	/* 2^63 elements: their bytes overflow */
	t = (mu_tensor_t *)&t;
	assert_int_equal(mu_tensor_new("x", 2, big, &t), MU_ETOOBIG);
	assert_null(t);
	assert_int_equal(mu_tensor_wrap("x", 2, big, NULL, &t), MU_ETOOBIG);
	assert_int_equal(mu_tensor_wrap("x", 9, d9, NULL, &t), MU_ETOOBIG);
	assert_null(t);
	/* a zero dim: numel 0, still a valid (aligned) pointer */
	assert_int_equal(mu_tensor_new("z", 3, zero, &t), 0);
	assert_int_equal(t->numel, 0);
	assert_non_null(t->data);
	mu_tensor_free(t);
}

static void test_wrap(void **state)
{
	static const uint64_t d[] = {2, 2};
	float data[4] = {1, 2, 3, 4};
	mu_tensor_t *t;

	(void)state;
	assert_int_equal(mu_tensor_wrap("w", 2, d, data, &t), 0);
	assert_ptr_equal(t->data, data);
	assert_null(t->mem);
	assert_int_equal(t->numel, 4);
	mu_tensor_free(t); /* data is not ours: ASan would see a bad free */
	assert_true(data[3] == 4);
}

static void test_list(void **state)
{
	mu_tensor_list_t l;
	mu_tensor_t *t;
	char name[16];

	(void)state;
	mu_tensor_list_init(&l);
	assert_null(mu_tensor_list_find(&l, "a"));
	for (int i = 0; i < 20; i++) { /* past the first growth */
		snprintf(name, sizeof(name), "t%d", i);
		assert_int_equal(mu_tensor_new(name, 0, NULL, &t), 0);
		t->data[0] = (float)i;
		assert_int_equal(mu_tensor_list_push(&l, t), 0);
	}
	assert_int_equal(l.n, 20);
	assert_true(mu_tensor_list_find(&l, "t0")->data[0] == 0);
	assert_true(mu_tensor_list_find(&l, "t19")->data[0] == 19);
	assert_null(mu_tensor_list_find(&l, "t20"));
	assert_null(mu_tensor_list_find(&l, "t"));
	/* first of two with one name */
	assert_int_equal(mu_tensor_new("t3", 0, NULL, &t), 0);
	assert_int_equal(mu_tensor_list_push(&l, t), 0);
	assert_true(mu_tensor_list_find(&l, "t3")->data[0] == 3);
	mu_tensor_list_free(&l);
	assert_int_equal(l.n, 0);
	assert_null(l.t);
	mu_tensor_list_free(&l); /* twice is fine */
}

static void test_out_of_memory(void **state)
{
	static const uint64_t d[] = {5, 7};
	mu_tensor_list_t l;
	mu_tensor_t *t;
	long n;
	int rc;

	(void)state;
	for (n = 0; n < 10; n++) {
		mu_test_fail_after(n);
		rc = mu_tensor_new("name", 2, d, &t);
		mu_test_alloc_reset();
		if (rc == 0)
			break;
		assert_int_equal(rc, MU_ENOMEM);
		assert_null(t);
	}
	assert_int_equal(n, 3); /* struct, name, storage */
	mu_tensor_free(t);
	for (n = 0; n < 10; n++) {
		mu_test_fail_after(n);
		rc = mu_tensor_wrap("name", 2, d, NULL, &t);
		mu_test_alloc_reset();
		if (rc == 0)
			break;
		assert_int_equal(rc, MU_ENOMEM);
	}
	mu_tensor_free(t);
	/* a failed push leaves the list and the tensor as they were */
	mu_tensor_list_init(&l);
	assert_int_equal(mu_tensor_new("a", 0, NULL, &t), 0);
	mu_test_fail_after(0);
	assert_int_equal(mu_tensor_list_push(&l, t), MU_ENOMEM);
	mu_test_alloc_reset();
	assert_int_equal(l.n, 0);
	assert_int_equal(mu_tensor_list_push(&l, t), 0);
	mu_tensor_list_free(&l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_new),
		cmocka_unit_test(test_new_limits),
		cmocka_unit_test(test_wrap),
		cmocka_unit_test(test_list),
		cmocka_unit_test(test_out_of_memory),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
