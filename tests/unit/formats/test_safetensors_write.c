/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/formats/safetensors_write.c, the one safetensors
 * writer: data streamed after a header given up front reads back as
 * written; a stream that falls short of or runs past its header fails;
 * and a generated model (cli/demo/fixture.c streams its rows through the
 * public writer over this one) is byte for byte the file mu__st_write
 * makes of the same tensors.
 */
#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#define MU_TEST_TMPDIR_TAG "stw"
#include "mu_test.h"

#include "muster/model.h"
#include "formats/safetensors_int.h"
#include "cli/demo/fixture.h"

static void test_stream_and_read_back(void **state)
{
	const uint64_t wd[2] = {2, 3}, id[1] = {4};
	const mu__st_desc_t d[2] = {{"w", MU_DTYPE_F32, 2, wd}, {"ids", MU_DTYPE_I64, 1, id}};
	const float row0[3] = {1, 2, 3}, row1[3] = {-1, 0.5f, 7};
	const int64_t ids[4] = {5, -6, 1LL << 40, 0};
	mu__st_writer_t w;
	mu__st_file_t f;
	mu_tensor_t *t;
	char why[256];

	(void)state;
	assert_int_equal(mu__st_writer_open(&w, mu_test_path("s.safetensors"), d, 2), 0);
	assert_int_equal(mu__st_writer_put(&w, row0, 3, 4), 0); /* a row at a time */
	assert_int_equal(mu__st_writer_put(&w, row1, 3, 4), 0);
	assert_int_equal(mu__st_writer_put(&w, ids, 4, 8), 0);
	assert_int_equal(mu__st_writer_close(&w), 0);
	assert_int_equal(mu__st_open(mu_test_path("s.safetensors"), &f, why, sizeof(why)), 0);
	assert_int_equal(f.n, 2);
	assert_int_equal(mu__st_load_exact(&f, mu__st_find(&f, "w"), &t), 0);
	assert_int_equal(t->numel, 6);
	assert_memory_equal(t->data, row0, sizeof(row0));
	assert_memory_equal(t->data + 3, row1, sizeof(row1));
	mu_tensor_free(t);
	assert_int_equal(mu__st_load_exact(&f, mu__st_find(&f, "ids"), &t), 0);
	assert_int_equal(t->dtype, MU_DTYPE_I64);
	assert_memory_equal(t->raw, ids, sizeof(ids));
	mu_tensor_free(t);
	mu__st_close(&f);
}

static void test_stream_must_match_its_header(void **state)
{
	const uint64_t dims[1] = {4};
	const mu__st_desc_t d[1] = {{"v", MU_DTYPE_F32, 1, dims}};
	const mu__st_desc_t bad[1] = {{"v", (mu_dtype_t)99, 1, dims}};
	const float v[5] = {1, 2, 3, 4, 5};
	mu__st_writer_t w;

	(void)state;
	assert_int_equal(mu__st_writer_open(&w, mu_test_path("short"), d, 1), 0);
	assert_int_equal(mu__st_writer_put(&w, v, 3, 4), 0);
	assert_int_equal(mu__st_writer_close(&w), -EIO); /* one float short */
	assert_int_equal(mu__st_writer_open(&w, mu_test_path("long"), d, 1), 0);
	assert_int_equal(mu__st_writer_put(&w, v, 5, 4), MU_EARG); /* one too many */
	assert_int_equal(mu__st_writer_put(&w, v, 1, 4), MU_EARG); /* and it stays failed */
	assert_int_equal(mu__st_writer_close(&w), MU_EARG);
	assert_int_equal(mu__st_writer_open(&w, mu_test_path("bad"), bad, 1), MU_EARG);
	assert_null(w.f);
	assert_int_equal(mu__st_writer_open(&w, "/nonexistent/dir/x", d, 1), -ENOENT);
}

static char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	char *p;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	rewind(f);
	p = malloc(*n + 1);
	assert_int_equal(fread(p, 1, *n, f), *n);
	fclose(f);
	return p;
}

/* The generator's weights, loaded and written again by mu__st_write:
 * the same bytes, so there is one format however a file is written. */
static void test_generated_model_is_the_same_file(void **state)
{
	const uint64_t widths[] = {5, 7, 3};
	char model[96], gen[128], why[256];
	mu_tensor_list_t l;
	mu__st_file_t f;
	size_t na, nb;
	char *a, *b;

	(void)state;
	snprintf(model, sizeof(model), "%s/mlp", mu_test_dir);
	assert_int_equal(cli_gen_mlp(model, widths, 2, 1, "tanh", 9, NULL, 0), 0);
	snprintf(gen, sizeof(gen), "%s/model.safetensors", model);
	assert_int_equal(mu__st_open(gen, &f, why, sizeof(why)), 0);
	mu_tensor_list_init(&l);
	for (size_t i = 0; i < f.n; i++) { /* in data order, as written */
		mu_tensor_t *t;

		assert_int_equal(mu__st_load_exact(&f, &f.e[i], &t), 0);
		assert_int_equal(mu_tensor_list_push(&l, t), 0);
	}
	assert_int_equal(mu__st_write(mu_test_path("again.safetensors"), &l), 0);
	mu_tensor_list_free(&l);
	mu__st_close(&f);
	a = slurp(gen, &na);
	b = slurp(mu_test_path("again.safetensors"), &nb);
	assert_int_equal(na, nb);
	assert_memory_equal(a, b, na);
	free(a);
	free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stream_and_read_back),
		cmocka_unit_test(test_stream_must_match_its_header),
		cmocka_unit_test(test_generated_model_is_the_same_file),
	};

	return cmocka_run_group_tests(tests, mu_test_tmpdir_setup, mu_test_tmpdir_teardown);
}
