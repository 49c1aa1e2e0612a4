/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the model's opening (mu_model_open): model.json is read
 * once, bounded, and that one text is what is parsed, digested and later
 * streamed to devices by a cluster (a file that changes or grows after
 * the open changes nothing); a missing, empty or oversized file is an
 * error that names it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "mu_test.h"

#include "muster/model.h"
#include "graph/graph_int.h"
#include "graph/model_int.h"
#include "cli/demo/fixture.h"

static char dir[64];
static char json[128];

static int setup(void **state)
{
	const uint64_t widths[] = {8, 16, 4};

	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/mu_model_XXXXXX");
	assert_non_null(mkdtemp(dir));
	assert_int_equal(cli_gen_mlp(dir, widths, 2, 2, "relu", 1, NULL, 0), 0);
	snprintf(json, sizeof(json), "%s/model.json", dir);
	return 0;
}

static int teardown(void **state)
{
	char path[128];

	(void)state;
	unlink(json);
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	unlink(path);
	rmdir(dir);
	return 0;
}

static char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	char *p = calloc(1, 1 << 20);

	assert_non_null(f);
	*n = fread(p, 1, (1 << 20) - 1, f);
	fclose(f);
	return p;
}

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_read_once(void **state)
{
	mu_model_t *m, *again;
	size_t n;
	char *orig = slurp(json, &n), err[512];

	(void)state;
	assert_int_equal(mu_model_open(dir, &m, err, sizeof(err)), 0);
	assert_int_equal(m->text_len, n);
	assert_memory_equal(m->text, orig, n);
	/* the file changes under the open model: what it holds does not */
	put(json, "{\"format\": \"something else\"}");
	assert_memory_equal(m->text, orig, n);
	assert_int_equal(mu_model_nodes(m), 3);
	put(json, orig);
	assert_int_equal(mu_model_open(dir, &again, err, sizeof(err)), 0);
	assert_true(mu_model_digest(again) == mu_model_digest(m));
	mu_model_close(again);
	mu_model_close(m);
	free(orig);
}

static void test_bad_files(void **state)
{
	mu_model_t *m = (mu_model_t *)dir;
	size_t n;
	char *orig = slurp(json, &n), err[512];
	int fd;

	(void)state;
	unlink(json);
	assert_int_equal(mu_model_open(dir, &m, err, sizeof(err)), -ENOENT);
	assert_null(m);
	assert_non_null(strstr(err, json));
	put(json, "");
	assert_int_equal(mu_model_open(dir, &m, err, sizeof(err)), MU_EJSON);
	assert_non_null(strstr(err, "empty"));
	/* one byte over the limit: refused whole, never parsed truncated */
	fd = open(json, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)MU_GRAPH_MAX_BYTES + 1), 0);
	close(fd);
	assert_int_equal(mu_model_open(dir, &m, err, sizeof(err)), MU_ETOOBIG);
	assert_null(m);
	assert_non_null(strstr(err, "limit"));
	put(json, orig);
	assert_int_equal(mu_model_open(dir, &m, err, sizeof(err)), 0);
	mu_model_close(m);
	free(orig);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_once),
		cmocka_unit_test(test_bad_files),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
