/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/graph/st_writer.c, the public streaming safetensors
 * writer: tensors of several dtypes (an empty one and a scalar among
 * them) put a piece at a time make the very bytes mu_safetensors_write
 * makes of the same tensors; a put that runs past its tensor is refused
 * and changes nothing; a stream short of its header fails at close;
 * descriptions that are not tensors, sizes that overflow and paths that
 * cannot be created fail at open with the cause in words.
 */
#include <errno.h>
#include <stdio.h>

#define MU_TEST_TMPDIR_TAG "stwp"
#include "mu_test.h"

#include "muster/model.h"

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

static void assert_same_file(const char *a, const char *b)
{
	size_t na, nb;
	char *pa = slurp(a, &na), *pb = slurp(b, &nb);

	assert_int_equal(na, nb);
	assert_memory_equal(pa, pb, na);
	free(pa);
	free(pb);
}

/* w [2, 3] F32, e [0] I32 (empty), s [] F64, ids [4] I64, h [3] F16 */
static void make_list(mu_tensor_list_t *l)
{
	const uint64_t wd[2] = {2, 3}, ed[1] = {0}, id[1] = {4}, hd[1] = {3};
	const float w[6] = {1, 2, 3, -1, 0.5f, 7};
	const int64_t ids[4] = {5, -6, 1LL << 40, 0};
	const uint16_t h[3] = {0x3c00, 0xc000, 0x7bff};
	mu_tensor_t *t;

	mu_tensor_list_init(l);
	assert_int_equal(mu_tensor_new("w", 2, wd, &t), 0);
	memcpy(t->data, w, sizeof(w));
	assert_int_equal(mu_tensor_list_push(l, t), 0);
	assert_int_equal(mu_tensor_new_typed("e", MU_DTYPE_I32, 1, ed, &t), 0);
	assert_int_equal(mu_tensor_list_push(l, t), 0);
	assert_int_equal(mu_tensor_new_typed("s", MU_DTYPE_F64, 0, NULL, &t), 0);
	*(double *)t->raw = -2.25;
	assert_int_equal(mu_tensor_list_push(l, t), 0);
	assert_int_equal(mu_tensor_new_typed("ids", MU_DTYPE_I64, 1, id, &t), 0);
	memcpy(t->raw, ids, sizeof(ids));
	assert_int_equal(mu_tensor_list_push(l, t), 0);
	assert_int_equal(mu_tensor_new_typed("h", MU_DTYPE_F16, 1, hd, &t), 0);
	memcpy(t->raw, h, sizeof(h));
	assert_int_equal(mu_tensor_list_push(l, t), 0);
}

static void describe(const mu_tensor_list_t *l, mu_safetensors_desc_t *d)
{
	for (size_t i = 0; i < l->n; i++)
		d[i] = (mu_safetensors_desc_t){l->t[i]->name, l->t[i]->dtype, l->t[i]->rank,
		                               l->t[i]->dims};
}

static void test_pieces_make_the_file_write_makes(void **state)
{
	mu_tensor_list_t l;
	mu_safetensors_desc_t d[5];
	mu_safetensors_writer_t *w;
	const float *wv;
	char err[256] = "";

	(void)state;
	make_list(&l);
	describe(&l, d);
	assert_int_equal(mu_safetensors_write(mu_test_path("whole"), &l), 0);
	assert_int_equal(mu_safetensors_writer_open(mu_test_path("stream"), d, 5, &w, err,
	                                            sizeof(err)), 0);
	wv = l.t[0]->data;
	assert_int_equal(mu_safetensors_writer_put(w, wv, 3), 0); /* a row at a time */
	assert_int_equal(mu_safetensors_writer_put(w, wv + 3, 2), 0);
	assert_int_equal(mu_safetensors_writer_put(w, wv + 5, 0), 0); /* nothing: fine */
	assert_int_equal(mu_safetensors_writer_put(w, wv + 5, 1), 0);
	/* the empty tensor is passed over: the scalar is next */
	assert_int_equal(mu_safetensors_writer_put(w, l.t[2]->raw, 1), 0);
	assert_int_equal(mu_safetensors_writer_put(w, l.t[3]->raw, 4), 0);
	assert_int_equal(mu_safetensors_writer_put(w, l.t[4]->raw, 3), 0);
	assert_int_equal(mu_safetensors_writer_close(w), 0);
	assert_same_file(mu_test_path("whole"), mu_test_path("stream"));
	mu_tensor_list_free(&l);
}

static void test_put_stays_inside_its_tensor(void **state)
{
	const uint64_t ad[1] = {2}, bd[1] = {1};
	const mu_safetensors_desc_t d[2] = {{"a", MU_DTYPE_F32, 1, ad}, {"b", MU_DTYPE_I64, 1, bd}};
	const float a[3] = {1, 2, 3};
	const int64_t b = 9;
	mu_tensor_list_t back;
	mu_safetensors_writer_t *w;
	char err[256];

	(void)state;
	assert_int_equal(mu_safetensors_writer_open(mu_test_path("ab"), d, 2, &w, NULL, 0), 0);
	/* three floats would run into b: refused, nothing written */
	assert_int_equal(mu_safetensors_writer_put(w, a, 3), MU_EARG);
	assert_int_equal(mu_safetensors_writer_put(w, NULL, 1), MU_EARG);
	assert_int_equal(mu_safetensors_writer_put(w, a, 2), 0);
	assert_int_equal(mu_safetensors_writer_put(w, &b, 1), 0);
	assert_int_equal(mu_safetensors_writer_put(w, &b, 1), MU_EARG); /* all full */
	assert_int_equal(mu_safetensors_writer_close(w), 0);
	mu_tensor_list_init(&back);
	assert_int_equal(mu_safetensors_read(mu_test_path("ab"), &back, err, sizeof(err)), 0);
	assert_int_equal(back.n, 2);
	assert_memory_equal(back.t[0]->data, a, 2 * sizeof(float));
	assert_int_equal(back.t[1]->dtype, MU_DTYPE_I64);
	assert_int_equal(*(int64_t *)back.t[1]->raw, 9);
	mu_tensor_list_free(&back);
	/* a stream short of its header */
	assert_int_equal(mu_safetensors_writer_open(mu_test_path("short"), d, 2, &w, NULL, 0), 0);
	assert_int_equal(mu_safetensors_writer_put(w, a, 2), 0);
	assert_int_equal(mu_safetensors_writer_close(w), -EIO);
	assert_int_equal(mu_safetensors_writer_close(NULL), 0);
	assert_int_equal(mu_safetensors_writer_put(NULL, a, 1), MU_EARG);
}

static void test_open_refuses_what_is_not_a_tensor(void **state)
{
	const uint64_t dims[2] = {1ULL << 40, 1ULL << 40}, one[1] = {1};
	const mu_safetensors_desc_t huge[1] = {{"huge", MU_DTYPE_F32, 2, dims}};
	const mu_safetensors_desc_t bad_dtype[1] = {{"x", (mu_dtype_t)99, 1, one}};
	const mu_safetensors_desc_t no_name[1] = {{NULL, MU_DTYPE_F32, 1, one}};
	const mu_safetensors_desc_t no_dims[1] = {{"x", MU_DTYPE_F32, 1, NULL}};
	const mu_safetensors_desc_t deep[1] = {{"x", MU_DTYPE_F32, MU_TENSOR_MAX_RANK + 1, one}};
	const mu_safetensors_desc_t ok[1] = {{"x", MU_DTYPE_F32, 1, one}};
	mu_safetensors_writer_t *w = (mu_safetensors_writer_t *)1;
	char err[256] = "";

	(void)state;
	assert_int_equal(mu_safetensors_writer_open(mu_test_path("h"), huge, 1, &w, err,
	                                            sizeof(err)), MU_ETOOBIG);
	assert_null(w);
	assert_non_null(strstr(err, "huge"));
	assert_int_equal(mu_safetensors_writer_open(mu_test_path("d"), bad_dtype, 1, &w, err,
	                                            sizeof(err)), MU_EARG);
	assert_int_equal(mu_safetensors_writer_open(mu_test_path("n"), no_name, 1, &w, NULL, 0),
	                 MU_EARG);
	assert_int_equal(mu_safetensors_writer_open(mu_test_path("m"), no_dims, 1, &w, NULL, 0),
	                 MU_EARG);
	assert_int_equal(mu_safetensors_writer_open(mu_test_path("r"), deep, 1, &w, NULL, 0),
	                 MU_EARG);
	assert_null(w);
	assert_int_equal(mu_safetensors_writer_open("/nonexistent/dir/x", ok, 1, &w, err,
	                                            sizeof(err)), -ENOENT);
	assert_null(w);
	assert_non_null(strstr(err, "/nonexistent/dir/x"));
	/* no tensors at all is a file too: "{}" and its padding */
	assert_int_equal(mu_safetensors_writer_open(mu_test_path("none"), NULL, 0, &w, NULL, 0), 0);
	assert_int_equal(mu_safetensors_writer_close(w), 0);
}

static void test_out_of_memory_leaves_nothing(void **state)
{
	const uint64_t one[1] = {1};
	const mu_safetensors_desc_t ok[1] = {{"x", MU_DTYPE_F32, 1, one}};
	mu_safetensors_writer_t *w;
	int rc = MU_ENOMEM;

	(void)state;
	for (long n = 0; rc == MU_ENOMEM && n < 100; n++) {
		mu_test_fail_after(n);
		rc = mu_safetensors_writer_open(mu_test_path("oom"), ok, 1, &w, NULL, 0);
		mu_test_alloc_reset();
		if (rc == MU_ENOMEM)
			assert_null(w);
	}
	assert_int_equal(rc, 0);
	assert_int_equal(mu_safetensors_writer_put(w, (float[]){1}, 1), 0);
	assert_int_equal(mu_safetensors_writer_close(w), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pieces_make_the_file_write_makes),
		cmocka_unit_test(test_put_stays_inside_its_tensor),
		cmocka_unit_test(test_open_refuses_what_is_not_a_tensor),
		cmocka_unit_test(test_out_of_memory_leaves_nothing),
	};

	return cmocka_run_group_tests(tests, mu_test_tmpdir_setup, mu_test_tmpdir_teardown);
}
