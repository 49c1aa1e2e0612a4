/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/graph/cast.c, mu_tensor_cast: values worked out by
 * hand for each kind of conversion (rounding to F16 and BF16 ties to
 * even, truncation toward zero, wrapping, BOOL), the name and shape kept,
 * empty and scalar tensors; and the bits of a graph's `cast` op, run
 * through mu_model_run on the same values, for every target dtype.
 */
#include <math.h>
#include <stdio.h>

#define MU_TEST_TMPDIR_TAG "cast"
#include "mu_test.h"

#include "muster/model.h"

static mu_tensor_t *f32(const char *name, const float *v, uint64_t n)
{
	mu_tensor_t *t;

	assert_int_equal(mu_tensor_new(name, 1, &n, &t), 0);
	memcpy(t->data, v, n * sizeof(float));
	return t;
}

static void test_values(void **state)
{
	const float v[6] = {1.0f, 1.0f + 0x1p-11f, -2.7f, 300.0f, NAN, 0.0f};
	const uint16_t f16[6] = {0x3c00, 0x3c00, 0xc166, 0x5cb0, 0x7e00, 0x0000};
	const int32_t i32[6] = {1, 1, -2, 300, 0, 0};
	const uint8_t b[6] = {1, 1, 1, 1, 1, 0};
	mu_tensor_t *t = f32("v", v, 6), *c, *d;

	(void)state;
	assert_int_equal(mu_tensor_cast(t, MU_DTYPE_F16, &c), 0);
	assert_string_equal(c->name, "v");
	assert_int_equal(c->dtype, MU_DTYPE_F16);
	assert_int_equal(c->rank, 1);
	assert_int_equal(c->dims[0], 6);
	assert_memory_equal(c->raw, f16, sizeof(f16)); /* 1 + 2^-11: a tie, to even */
	mu_tensor_free(c);
	assert_int_equal(mu_tensor_cast(t, MU_DTYPE_I32, &c), 0);
	assert_memory_equal(c->raw, i32, sizeof(i32)); /* toward zero; NaN is 0 */
	assert_int_equal(mu_tensor_cast(c, MU_DTYPE_I8, &d), 0);
	assert_int_equal(((int8_t *)d->raw)[3], 44); /* 300 wraps to its low byte */
	assert_int_equal(((int8_t *)d->raw)[2], -2);
	mu_tensor_free(d);
	mu_tensor_free(c);
	assert_int_equal(mu_tensor_cast(t, MU_DTYPE_BOOL, &c), 0);
	assert_memory_equal(c->raw, b, sizeof(b)); /* NaN too */
	mu_tensor_free(c);
	assert_int_equal(mu_tensor_cast(t, MU_DTYPE_F32, &c), 0); /* a copy */
	assert_memory_equal(c->raw, t->raw, sizeof(v));
	assert_ptr_not_equal(c->raw, t->raw);
	mu_tensor_free(c);
	c = (mu_tensor_t *)1;
	assert_int_equal(mu_tensor_cast(t, (mu_dtype_t)99, &c), MU_EARG);
	assert_null(c);
	mu_tensor_free(t);
}

static void test_empty_and_scalar(void **state)
{
	const uint64_t zero[2] = {3, 0};
	mu_tensor_t *t, *c;

	(void)state;
	assert_int_equal(mu_tensor_new("e", 2, zero, &t), 0);
	assert_int_equal(mu_tensor_cast(t, MU_DTYPE_BF16, &c), 0);
	assert_int_equal(c->numel, 0);
	assert_int_equal(c->rank, 2);
	assert_int_equal(c->dims[0], 3);
	mu_tensor_free(c);
	mu_tensor_free(t);
	assert_int_equal(mu_tensor_new("s", 0, NULL, &t), 0);
	t->data[0] = 1.00390625f; /* 1 + 2^-8: a BF16 tie, to even (1) */
	assert_int_equal(mu_tensor_cast(t, MU_DTYPE_BF16, &c), 0);
	assert_int_equal(c->rank, 0);
	assert_int_equal(((uint16_t *)c->raw)[0], 0x3f80);
	mu_tensor_free(c);
	mu_tensor_free(t);
}

/* A model of one cast node x -> y, with no weights. */
static void cast_model(const char *dir, const char *to, uint64_t n)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "mkdir -p '%s'", dir);
	assert_int_equal(system(path), 0);
	snprintf(path, sizeof(path), "%s/model.json", dir);
	assert_non_null(f = fopen(path, "w"));
	fprintf(f, "{\"format\": \"muster-graph\", \"version\": 1, \"inputs\": [{\"name\": \"x\", "
	        "\"shape\": [%llu]}], \"outputs\": [\"y\"], \"nodes\": [{\"name\": \"c\", "
	        "\"op\": \"cast\", \"attrs\": {\"to\": \"%s\"}, \"inputs\": [\"x\"], "
	        "\"outputs\": [\"y\"]}]}\n", (unsigned long long)n, to);
	fclose(f);
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	assert_non_null(f = fopen(path, "wb"));
	fwrite("\x08\0\0\0\0\0\0\0{}      ", 1, 16, f);
	fclose(f);
}

static void test_same_bits_as_the_cast_op(void **state)
{
	float v[64];
	mu_tensor_t *x;

	(void)state;
	for (int i = 0; i < 64; i++) /* signs, fractions, ties, large and tiny values */
		v[i] = (float)((i % 2 ? -1 : 1) * ldexp(1.0 + i / 7.0, i - 32));
	v[0] = NAN;
	v[1] = INFINITY;
	x = f32("x", v, 64);
	for (int dt = 0; dt < MU_DTYPE_COUNT; dt++) {
		char dir[128], err[256] = "";
		mu_model_t *m;
		mu_tensor_list_t in, out;
		mu_tensor_t *c;

		snprintf(dir, sizeof(dir), "%s/%s", mu_test_dir, mu_dtype_name(dt));
		cast_model(dir, mu_dtype_name(dt), 64);
		assert_int_equal(mu_model_open(dir, &m, err, sizeof(err)), 0);
		mu_tensor_list_init(&in);
		mu_tensor_list_init(&out);
		assert_int_equal(mu_tensor_cast(x, MU_DTYPE_F32, &c), 0);
		assert_int_equal(mu_tensor_list_push(&in, c), 0);
		assert_int_equal(mu_model_run(m, &in, &out, err, sizeof(err)), 0);
		assert_int_equal(out.n, 1);
		assert_int_equal(mu_tensor_cast(x, (mu_dtype_t)dt, &c), 0);
		assert_int_equal(out.t[0]->dtype, dt);
		assert_memory_equal(out.t[0]->raw, c->raw, mu_tensor_nbytes(c));
		mu_tensor_free(c);
		mu_tensor_list_free(&in);
		mu_tensor_list_free(&out);
		mu_model_close(m);
	}
	mu_tensor_free(x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_values),
		cmocka_unit_test(test_empty_and_scalar),
		cmocka_unit_test(test_same_bits_as_the_cast_op),
	};

	return cmocka_run_group_tests(tests, mu_test_tmpdir_setup, mu_test_tmpdir_teardown);
}
