/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/graph/exec.c: a small graph run whole and cut into
 * stages at every point gives bit-identical outputs; a failing node is
 * named in why; shape inference for planning; allocation failures.
 */
#include "ops_ref.h"

#include "core/alloc_int.h"
#include "core/strmap_int.h"

/*
 * x [2,4], ids [2,3] -> y [2,3,4] and h1 [2,8] (an output made by the
 * first node and read again later: a skip connection across stages).
 */
static const char graph_json[] =
	"{\"format\":\"muster-graph\",\"version\":1,"
	"\"inputs\":[{\"name\":\"x\",\"shape\":[2,4]},{\"name\":\"ids\",\"shape\":[2,3]}],"
	"\"outputs\":[\"y\",\"h1\"],\"nodes\":["
	"{\"name\":\"fc1\",\"op\":\"gemm\",\"inputs\":[\"x\",\"W1\",\"b1\"],\"outputs\":[\"h1\"],"
	" \"attrs\":{\"transB\":1}},"
	"{\"name\":\"act\",\"op\":\"gelu\",\"inputs\":[\"h1\"],\"outputs\":[\"a1\"]},"
	"{\"name\":\"ln\",\"op\":\"layernorm\",\"inputs\":[\"a1\",\"g\",\"beta\"],\"outputs\":[\"n1\"]},"
	"{\"name\":\"fc2\",\"op\":\"matmul\",\"inputs\":[\"n1\",\"W2\"],\"outputs\":[\"h2\"]},"
	"{\"name\":\"res\",\"op\":\"add\",\"inputs\":[\"h2\",\"h1\"],\"outputs\":[\"r\"]},"
	"{\"name\":\"sm\",\"op\":\"softmax\",\"inputs\":[\"r\"],\"outputs\":[\"p\"]},"
	"{\"name\":\"t\",\"op\":\"transpose\",\"inputs\":[\"p\"],\"outputs\":[\"pt\"]},"
	"{\"name\":\"rs\",\"op\":\"reshape\",\"inputs\":[\"pt\"],\"outputs\":[\"q\"],"
	" \"attrs\":{\"shape\":[4,-1]}},"
	"{\"name\":\"sl\",\"op\":\"slice\",\"inputs\":[\"q\"],\"outputs\":[\"qs\"],"
	" \"attrs\":{\"starts\":[1],\"ends\":[3],\"axes\":[0]}},"
	"{\"name\":\"cat\",\"op\":\"concat\",\"inputs\":[\"qs\",\"x\"],\"outputs\":[\"c\"]},"
	"{\"name\":\"red\",\"op\":\"reduce_mean\",\"inputs\":[\"c\"],\"outputs\":[\"m\"],"
	" \"attrs\":{\"axes\":[0],\"keepdims\":0}},"
	"{\"name\":\"emb\",\"op\":\"embedding\",\"inputs\":[\"E\",\"ids\"],\"outputs\":[\"e\"]},"
	"{\"name\":\"out\",\"op\":\"mul\",\"inputs\":[\"e\",\"m\"],\"outputs\":[\"y\"]}"
	"]}";

static const struct {
	const char *name, *shape;
} weights[] = {
	{"W1", "[8,4]"}, {"b1", "[8]"}, {"g", "[8]"}, {"beta", "[8]"}, {"W2", "[8,8]"}, {"E", "[10,4]"},
};
#define NW (sizeof(weights) / sizeof(weights[0]))

static mu__graph_t g;
static mu__strmap_t params;
static mu_tensor_t *wt[NW];
static mu_tensor_list_t inputs;
static char why[512];

static int setup(void **state)
{
	static const float ids[] = {0, 9, 3, 3, 7, 1};
	mu_tensor_t *t;

	(void)state;
	if (mu__graph_parse(graph_json, strlen(graph_json), &g, why, sizeof(why)) != 0)
		return -1;
	mu__strmap_init(&params);
	for (size_t i = 0; i < NW; i++) {
		wt[i] = ref_tensor(weights[i].name, weights[i].shape);
		mu__strmap_put(&params, weights[i].name, strlen(weights[i].name), wt[i], NULL);
	}
	mu_tensor_list_init(&inputs);
	mu_tensor_list_push(&inputs, ref_tensor("x", "[2,4]"));
	t = ref_values("ids", "[2,3]", ids);
	mu_tensor_list_push(&inputs, t);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	mu__graph_free(&g);
	mu__strmap_free(&params, NULL);
	for (size_t i = 0; i < NW; i++)
		mu_tensor_free(wt[i]);
	mu_tensor_list_free(&inputs);
	return 0;
}

static int is_output(const char *v)
{
	for (int i = 0; i < g.noutputs; i++)
		if (strcmp(g.outputs[i], v) == 0)
			return 1;
	return 0;
}

/* What nodes [first, last) hand on: read later, or a model output. */
static int boundary(int first, int last, char **want)
{
	int n = 0;

	for (int i = first; i < last; i++)
		for (int j = 0; j < g.nodes[i].nout; j++) {
			const char *v = g.nodes[i].out[j];
			int needed = is_output(v);

			for (int k = last; k < g.nnodes && !needed; k++)
				for (int m = 0; m < g.nodes[k].nin; m++)
					needed |= strcmp(g.nodes[k].in[m], v) == 0;
			if (needed)
				want[n++] = g.nodes[i].out[j];
		}
	return n;
}

static void whole(mu_tensor_list_t *out)
{
	mu_tensor_list_init(out);
	assert_int_equal(mu__exec_run(&g, 0, g.nnodes, &params, &inputs, g.outputs, g.noutputs, out,
	                              why, sizeof(why)), 0);
	assert_int_equal(out->n, 2);
}

/* Run the stages cut at cuts[0..n], relaying boundaries through a pool as
 * a coordinator does; the model outputs end up in the pool. */
static void staged(const int *cuts, int n, mu_tensor_list_t *pool)
{
	mu_tensor_list_init(pool);
	for (size_t i = 0; i < inputs.n; i++) {
		mu_tensor_t *t;

		assert_int_equal(mu_tensor_new(inputs.t[i]->name, inputs.t[i]->rank, inputs.t[i]->dims, &t), 0);
		memcpy(t->data, inputs.t[i]->data, t->numel * 4);
		assert_int_equal(mu_tensor_list_push(pool, t), 0);
	}
	for (int s = 0; s < n; s++) {
		char *want[64];
		int nw = boundary(cuts[s], cuts[s + 1], want);

		/* the stage sees the whole pool: it takes what it needs */
		if (mu__exec_run(&g, cuts[s], cuts[s + 1], &params, pool, want, nw, pool, why,
		                 sizeof(why)) != 0)
			fail_msg("stage [%d, %d): %s", cuts[s], cuts[s + 1], why);
	}
}

static void same(const mu_tensor_list_t *a, const mu_tensor_list_t *pool)
{
	for (size_t i = 0; i < a->n; i++) {
		const mu_tensor_t *t = a->t[i], *u = NULL;

		for (size_t j = pool->n; j-- > 0 && u == NULL;) /* the latest */
			if (strcmp(pool->t[j]->name, t->name) == 0)
				u = pool->t[j];
		assert_non_null(u);
		assert_int_equal(u->rank, t->rank);
		assert_memory_equal(u->dims, t->dims, sizeof(t->dims));
		assert_memory_equal(u->data, t->data, t->numel * 4); /* bit for bit */
	}
}

static void test_whole_against_reference(void **state)
{
	mu_tensor_list_t out;
	const mu_tensor_t *y, *h1;
	const float *x = inputs.t[0]->data;

	(void)state;
	whole(&out);
	y = mu_tensor_list_find(&out, "y");
	h1 = mu_tensor_list_find(&out, "h1");
	assert_string_equal(out.t[0]->name, "y"); /* in the order asked */
	ref_shape_is(y, "[2,3,4]");
	ref_shape_is(h1, "[2,8]");
	/* h1 = x W1^T + b1 */
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 8; j++) {
			double s = wt[1]->data[j];

			for (int k = 0; k < 4; k++)
				s += (double)x[i * 4 + k] * wt[0]->data[j * 4 + k];
			assert_true(fabs(h1->data[i * 8 + j] - s) < 1e-4);
		}
	/* y[b,t,:] = E[ids[b,t]] * m for one m [4] (the row mean of
	 * concat(slice(...), x)): y[bt,d] E[id0,d] == y[0,d] E[id,d] */
	for (int bt = 0; bt < 6; bt++) {
		int id = (int)inputs.t[1]->data[bt], id0 = (int)inputs.t[1]->data[0];

		for (int d = 0; d < 4; d++)
			assert_true(fabs((double)y->data[bt * 4 + d] * wt[5]->data[id0 * 4 + d] -
			                 (double)y->data[d] * wt[5]->data[id * 4 + d]) < 1e-5);
	}
	mu_tensor_list_free(&out);
}

static void test_split_anywhere_is_identical(void **state)
{
	mu_tensor_list_t ref, pool;

	(void)state;
	whole(&ref);
	for (int k = 1; k < g.nnodes; k++) {
		int cuts[3] = {0, k, g.nnodes};

		staged(cuts, 2, &pool);
		same(&ref, &pool);
		mu_tensor_list_free(&pool);
	}
	for (int a = 1; a < g.nnodes; a++)
		for (int b = a + 1; b < g.nnodes; b++) {
			int cuts[4] = {0, a, b, g.nnodes};

			staged(cuts, 3, &pool);
			same(&ref, &pool);
			mu_tensor_list_free(&pool);
		}
	/* one node per stage */
	{
		int cuts[32];

		for (int i = 0; i <= g.nnodes; i++)
			cuts[i] = i;
		staged(cuts, g.nnodes, &pool);
		same(&ref, &pool);
		mu_tensor_list_free(&pool);
	}
	mu_tensor_list_free(&ref);
}

static void test_wanted_values(void **state)
{
	char *want[] = {"x", "h1", "n1", "y"};
	mu_tensor_list_t out;

	(void)state;
	/* an input passed through comes back as a copy; a wanted value that
	 * later nodes read survives them */
	mu_tensor_list_init(&out);
	assert_int_equal(mu__exec_run(&g, 0, g.nnodes, &params, &inputs, want, 4, &out, why, sizeof(why)), 0);
	assert_int_equal(out.n, 4);
	assert_ptr_not_equal(out.t[0], inputs.t[0]);
	assert_ptr_not_equal(out.t[0]->data, inputs.t[0]->data);
	assert_memory_equal(out.t[0]->data, inputs.t[0]->data, 32);
	assert_string_equal(out.t[2]->name, "n1");
	ref_shape_is(out.t[2], "[2,8]");
	mu_tensor_list_free(&out);
	/* asking for what the range does not make */
	want[0] = "q";
	assert_int_equal(mu__exec_run(&g, 0, 3, &params, &inputs, want, 1, &out, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "q is not produced by nodes 0..2"));
	mu_tensor_list_free(&out);
	/* an empty range passes inputs through */
	want[0] = "ids";
	assert_int_equal(mu__exec_run(&g, 4, 4, &params, &inputs, want, 1, &out, why, sizeof(why)), 0);
	assert_int_equal(out.n, 1);
	mu_tensor_list_free(&out);
}

static void test_failing_node_named(void **state)
{
	mu_tensor_list_t out, in;
	mu__strmap_t few;
	mu_tensor_t *bad;
	static const float ids[] = {0, 10, 3, 3, 7, 1}; /* 10: outside E [10,4] */

	(void)state;
	mu_tensor_list_init(&out);
	mu_tensor_list_init(&in);
	mu_tensor_list_push(&in, ref_tensor("x", "[2,4]"));
	bad = ref_values("ids", "[2,3]", ids);
	mu_tensor_list_push(&in, bad);
	assert_int_equal(mu__exec_run(&g, 0, g.nnodes, &params, &in, g.outputs, g.noutputs, &out, why,
	                              sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "node emb (embedding) failed"));
	assert_int_equal(out.n, 0);
	/* a shape that does not fit: x [2,5] against W1 [8,4] */
	mu_tensor_list_free(&in);
	mu_tensor_list_push(&in, ref_tensor("x", "[2,5]"));
	assert_int_equal(mu__exec_run(&g, 0, g.nnodes, &params, &in, g.outputs, g.noutputs, &out, why,
	                              sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "node fc1"));
	/* a missing input, a missing weight */
	mu_tensor_list_free(&in);
	assert_int_equal(mu__exec_run(&g, 0, g.nnodes, &params, &in, g.outputs, g.noutputs, &out, why,
	                              sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "node fc1: x is missing"));
	mu__strmap_init(&few);
	mu__strmap_put(&few, "W1", 2, wt[0], NULL);
	mu__strmap_put(&few, "b1", 2, wt[1], NULL);
	assert_int_equal(mu__exec_run(&g, 0, g.nnodes, &few, &inputs, g.outputs, g.noutputs, &out, why,
	                              sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "node ln: g is missing"));
	assert_int_equal(mu__exec_run(&g, 0, g.nnodes, NULL, &inputs, g.outputs, g.noutputs, &out, why,
	                              sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "node fc1: W1 is missing"));
	mu__strmap_free(&few, NULL);
	assert_int_equal(out.n, 0);
}

static void test_out_of_memory(void **state)
{
	mu_tensor_list_t ref, out;
	long n;
	int rc;

	(void)state;
	whole(&ref);
	for (n = 0; n < 2000; n++) {
		mu_tensor_list_init(&out);
		mu_test_fail_after(n);
		rc = mu__exec_run(&g, 0, g.nnodes, &params, &inputs, g.outputs, g.noutputs, &out, why,
		                  sizeof(why));
		mu_test_alloc_reset();
		if (rc == 0)
			break;
		assert_int_equal(rc, MU_ENOMEM);
		mu_tensor_list_free(&out);
	}
	assert_true(n < 2000);
	same(&ref, &out);
	mu_tensor_list_free(&out);
	mu_tensor_list_free(&ref);
}

static void free_shapes(mu__strmap_t *m)
{
	mu__strmap_free(m, mu__free);
}

static void test_graph_shapes(void **state)
{
	mu__strmap_t ps, shapes;
	mu__shape_t pshape[NW];
	double flops[32];
	const mu__shape_t *s;

	(void)state;
	mu__strmap_init(&ps);
	for (size_t i = 0; i < NW; i++) {
		pshape[i].rank = wt[i]->rank;
		pshape[i].dtype = wt[i]->dtype;
		memcpy(pshape[i].dims, wt[i]->dims, sizeof(wt[i]->dims));
		mu__strmap_put(&ps, weights[i].name, strlen(weights[i].name), &pshape[i], NULL);
	}
	mu__strmap_init(&shapes);
	assert_int_equal(mu__graph_shapes(&g, &ps, &shapes, flops, why, sizeof(why)), 0);
	s = mu__strmap_get(&shapes, "h1", 2);
	assert_int_equal(s->rank, 2);
	assert_int_equal(s->dims[1], 8);
	s = mu__strmap_get(&shapes, "q", 1);
	assert_int_equal(s->dims[0], 4);
	assert_int_equal(s->dims[1], 4);
	s = mu__strmap_get(&shapes, "y", 1);
	assert_int_equal(s->rank, 3);
	assert_int_equal(s->dims[2], 4);
	assert_true(flops[0] == 2.0 * 4 * 16); /* gemm: 2 K M N */
	assert_true(flops[3] == 2.0 * 8 * 16);
	assert_true(flops[1] == 16);
	assert_true(flops[6] == 0); /* transpose moves, computes nothing */
	free_shapes(&shapes);

	/* a weight with no shape, a shape that does not fit: the node named */
	mu__strmap_init(&shapes);
	mu__strmap_remove(&ps, "W2", 2);
	assert_int_equal(mu__graph_shapes(&g, &ps, &shapes, NULL, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "node fc2: no shape for W2"));
	free_shapes(&shapes);
	mu__strmap_init(&shapes);
	pshape[4].dims[0] = 7;
	mu__strmap_put(&ps, "W2", 2, &pshape[4], NULL);
	assert_int_equal(mu__graph_shapes(&g, &ps, &shapes, NULL, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "node fc2"));
	free_shapes(&shapes);

	/* allocation failures: an error, nothing leaked */
	pshape[4].dims[0] = 8;
	for (long n = 0; n < 1000; n++) {
		int rc;

		mu__strmap_init(&shapes);
		mu_test_fail_after(n);
		rc = mu__graph_shapes(&g, &ps, &shapes, NULL, why, sizeof(why));
		mu_test_alloc_reset();
		free_shapes(&shapes);
		if (rc == 0)
			break;
		assert_int_equal(rc, MU_ENOMEM);
	}
	mu__strmap_free(&ps, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_whole_against_reference),
		cmocka_unit_test(test_split_anywhere_is_identical),
		cmocka_unit_test(test_wanted_values),
		cmocka_unit_test(test_failing_node_named),
		cmocka_unit_test(test_out_of_memory),
		cmocka_unit_test(test_graph_shapes),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
