/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/graph/graph.c: valid muster-graph documents, and each
 * rule a graph can break, with why naming the node (or input) at fault.
 */
#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "mu_test.h"

#include "core/buf_int.h"
#include "graph/graph_int.h"

#define HEAD "{\"format\":\"muster-graph\",\"version\":1,"
#define X_IN "\"inputs\":[{\"name\":\"x\",\"shape\":[2,4]}],"

static const char good[] =
	HEAD X_IN "\"outputs\":[\"y\",\"h\"],\"nodes\":["
	"{\"name\":\"fc\",\"op\":\"gemm\",\"inputs\":[\"x\",\"W\",\"b\"],\"outputs\":[\"h\"],"
	" \"attrs\":{\"transB\":1,\"alpha\":0.5}},"
	"{\"op\":\"relu\",\"inputs\":[\"h\"],\"outputs\":[\"a\"]},"
	"{\"name\":\"out\",\"op\":\"add\",\"inputs\":[\"a\",\"h\"],\"outputs\":[\"y\"],\"attrs\":{}},"
	"{\"name\":\"again\",\"op\":\"mul\",\"inputs\":[\"W\",\"y\"],\"outputs\":[\"z\"]}"
	"]}";

static void test_parse_valid(void **state)
{
	mu__graph_t g;
	char why[256] = "";

	(void)state;
	assert_int_equal(mu__graph_parse(good, strlen(good), &g, why, sizeof(why)), 0);
	assert_int_equal(g.ninputs, 1);
	assert_string_equal(g.inputs[0].name, "x");
	assert_int_equal(g.inputs[0].rank, 2);
	assert_int_equal(g.inputs[0].dims[0], 2);
	assert_int_equal(g.inputs[0].dims[1], 4);
	assert_int_equal(g.noutputs, 2);
	assert_string_equal(g.outputs[0], "y");
	assert_string_equal(g.outputs[1], "h");
	assert_int_equal(g.nnodes, 4);
	assert_string_equal(g.nodes[0].name, "fc");
	assert_string_equal(g.nodes[0].op->name, "gemm");
	assert_int_equal(g.nodes[0].nin, 3);
	assert_string_equal(g.nodes[0].in[2], "b");
	assert_int_equal(mu__attr_int(&g.nodes[0], "transB", 0), 1);
	assert_int_equal(mu__attr_int(&g.nodes[0], "transA", 7), 7);
	assert_true(mu__attr_num(&g.nodes[0], "alpha", 1) == 0.5);
	/* a node without a name is named after its index */
	assert_string_equal(g.nodes[1].name, "#1");
	assert_non_null(g.nodes[1].attrs);
	/* params: what nodes use that nothing defines, each once */
	assert_int_equal(g.nparams, 2);
	assert_true(mu__graph_is_param(&g, "W"));
	assert_true(mu__graph_is_param(&g, "b"));
	assert_false(mu__graph_is_param(&g, "x"));
	assert_false(mu__graph_is_param(&g, "h"));
	mu__graph_free(&g);
	assert_int_equal(g.nnodes, 0);
}

static void test_parse_minimal_and_passthrough(void **state)
{
	/* no nodes: an output may be an input; whitespace is fine */
	static const char g0[] = " " HEAD "\"inputs\":[{\"name\":\"x\",\"shape\":[]}],"
	                         "\"outputs\":[\"x\"],\"nodes\":[]} \n";
	mu__graph_t g;
	char why[256] = "";

	(void)state;
	assert_int_equal(mu__graph_parse(g0, strlen(g0), &g, why, sizeof(why)), 0);
	assert_int_equal(g.nnodes, 0);
	assert_int_equal(g.inputs[0].rank, 0);
	mu__graph_free(&g);
}

static void expect_bad(const char *json, int want, const char *in_why)
{
	mu__graph_t g;
	char why[512] = "";
	int rc = mu__graph_parse(json, strlen(json), &g, why, sizeof(why));

	if (rc != want)
		fail_msg("%.300s: got %d, want %d (%s)", json, rc, want, why);
	if (strstr(why, in_why) == NULL)
		fail_msg("%.300s: why is \"%s\", not about \"%s\"", json, why, in_why);
	if (rc == 0) {
		mu__graph_free(&g);
		return;
	}
	assert_int_equal(g.nnodes, 0); /* nothing is left allocated */
	assert_null(g.nodes);
}

/* A graph with x [2,4] in, out y, and the given nodes. */
#define G(nodes) HEAD X_IN "\"outputs\":[\"y\"],\"nodes\":[" nodes "]}"
#define N(name, op, ins, outs) \
	"{\"name\":\"" name "\",\"op\":\"" op "\",\"inputs\":" ins ",\"outputs\":" outs "}"
#define NA(name, op, ins, outs, attrs) \
	"{\"name\":\"" name "\",\"op\":\"" op "\",\"inputs\":" ins ",\"outputs\":" outs \
	",\"attrs\":" attrs "}"

static void test_reject_document(void **state)
{
	(void)state;
	expect_bad("{", MU_EJSON, "not valid JSON");
	expect_bad("", MU_EJSON, "not valid JSON");
	expect_bad("[]", MU_EPROTO, "not a muster-graph version 1");
	expect_bad("{\"format\":\"onnx\",\"version\":1,\"inputs\":[],\"nodes\":[],\"outputs\":[]}",
	           MU_EPROTO, "not a muster-graph version 1");
	expect_bad("{\"format\":\"muster-graph\",\"version\":2,\"inputs\":[],\"nodes\":[],\"outputs\":[]}",
	           MU_EPROTO, "not a muster-graph version 1");
	expect_bad("{\"format\":\"muster-graph\",\"inputs\":[],\"nodes\":[],\"outputs\":[]}",
	           MU_EPROTO, "not a muster-graph version 1");
	expect_bad(HEAD "\"inputs\":[],\"outputs\":[]}", MU_EPROTO, "\"inputs\" and \"nodes\"");
	expect_bad(HEAD "\"nodes\":[],\"outputs\":[]}", MU_EPROTO, "\"inputs\" and \"nodes\"");
	expect_bad(HEAD "\"inputs\":{},\"nodes\":[],\"outputs\":[]}", MU_EPROTO, "\"inputs\" and \"nodes\"");
	expect_bad(HEAD X_IN "\"nodes\":[]}", MU_EPROTO, "\"outputs\" list");
	expect_bad(HEAD X_IN "\"nodes\":[],\"outputs\":[\"\"]}", MU_EPROTO, "\"outputs\" list");
	expect_bad(HEAD X_IN "\"nodes\":[],\"outputs\":\"x\"}", MU_EPROTO, "\"outputs\" list");
	expect_bad(HEAD X_IN "\"nodes\":[],\"outputs\":[\"q\"]}", MU_EPROTO, "output q is never computed");
	expect_bad(G(N("n", "relu", "[\"x\"]", "[\"y\"]") "," N("m", "relu", "[\"w\"]", "[\"v\"]"))
	           "", 0, "");
}

static void test_reject_inputs(void **state)
{
	(void)state;
	expect_bad(HEAD "\"inputs\":[{\"shape\":[1]}],\"outputs\":[],\"nodes\":[]}", MU_EPROTO,
	           "each graph input needs a name and a shape");
	expect_bad(HEAD "\"inputs\":[{\"name\":\"x\"}],\"outputs\":[],\"nodes\":[]}", MU_EPROTO,
	           "each graph input needs a name and a shape");
	expect_bad(HEAD "\"inputs\":[{\"name\":\"x\",\"shape\":[-1]}],\"outputs\":[],\"nodes\":[]}",
	           MU_EPROTO, "each graph input needs a name and a shape");
	expect_bad(HEAD "\"inputs\":[{\"name\":\"x\",\"shape\":[1,1,1,1,1,1,1,1,1]}],\"outputs\":[],"
	           "\"nodes\":[]}", MU_EPROTO, "each graph input needs a name and a shape");
	expect_bad(HEAD "\"inputs\":[{\"name\":\"x\",\"shape\":[1]},{\"name\":\"x\",\"shape\":[2]}],"
	           "\"outputs\":[],\"nodes\":[]}", MU_EPROTO, "input x is declared twice");
}

static void test_reject_nodes(void **state)
{
	(void)state;
	expect_bad(G(N("n1", "frob", "[\"x\"]", "[\"y\"]")), MU_EPROTO, "node n1: unknown op frob");
	expect_bad(G("{\"name\":\"n1\",\"inputs\":[\"x\"],\"outputs\":[\"y\"]}"), MU_EPROTO,
	           "node n1: unknown op (none)");
	expect_bad(G("{\"op\":\"Relu\",\"inputs\":[\"x\"],\"outputs\":[\"y\"]}"), MU_EPROTO,
	           "node #0: unknown op Relu");
	expect_bad(G(N("n1", "relu", "[\"x\"]", "[\"y\"]") "," N("n2", "relu", "\"x\"", "[\"z\"]")),
	           MU_EPROTO, "node n2: inputs and outputs must be lists of names");
	expect_bad(G(N("n1", "relu", "[\"x\"]", "[1]")), MU_EPROTO, "node n1: inputs and outputs");
	expect_bad(G(N("n1", "relu", "[\"\"]", "[\"y\"]")), MU_EPROTO, "node n1: inputs and outputs");
	expect_bad(G("{\"name\":\"n1\",\"op\":\"relu\",\"inputs\":[\"x\"]}"), MU_EPROTO,
	           "node n1: inputs and outputs");
	/* arity */
	expect_bad(G(N("n1", "add", "[\"x\"]", "[\"y\"]")), MU_EPROTO,
	           "node n1: wrong number of inputs or outputs for add");
	expect_bad(G(N("n1", "add", "[\"x\",\"x\",\"x\"]", "[\"y\"]")), MU_EPROTO, "for add");
	expect_bad(G(N("n1", "relu", "[\"x\"]", "[\"y\",\"z\"]")), MU_EPROTO, "node n1: wrong number");
	expect_bad(G(N("n1", "relu", "[\"x\"]", "[]")), MU_EPROTO, "node n1: wrong number");
	expect_bad(G(N("n1", "gemm", "[\"x\",\"a\",\"b\",\"c\"]", "[\"y\"]")), MU_EPROTO, "for gemm");
	expect_bad(G(N("n1", "layernorm", "[\"x\"]", "[\"y\"]")), MU_EPROTO, "for layernorm");
	expect_bad(G(N("n1", "rmsnorm", "[\"x\",\"g\",\"b\"]", "[\"y\"]")), MU_EPROTO, "for rmsnorm");
	expect_bad(G(N("n1", "concat", "[]", "[\"y\"]")), MU_EPROTO, "for concat");
	/* attrs must be an object */
	expect_bad(G(NA("n1", "relu", "[\"x\"]", "[\"y\"]", "[]")), MU_EPROTO,
	           "node n1: attrs must be an object");
}

static void test_reject_attrs(void **state)
{
	(void)state;
	expect_bad(G(NA("n1", "gelu", "[\"x\"]", "[\"y\"]", "{\"approximate\":\"fast\"}")), MU_EPROTO,
	           "node n1: gelu approximate");
	expect_bad(G(NA("n1", "gemm", "[\"x\",\"w\"]", "[\"y\"]", "{\"transA\":\"yes\"}")), MU_EPROTO,
	           "node n1: attribute transA");
	expect_bad(G(NA("n1", "gemm", "[\"x\",\"w\"]", "[\"y\"]", "{\"transB\":0.5}")), MU_EPROTO,
	           "node n1: attribute transB");
	expect_bad(G(NA("n1", "gemm", "[\"x\",\"w\"]", "[\"y\"]", "{\"alpha\":\"2\"}")), MU_EPROTO,
	           "node n1: attribute alpha");
	expect_bad(G(NA("n1", "reduce_sum", "[\"x\"]", "[\"y\"]", "{\"axes\":[\"a\"]}")), MU_EPROTO,
	           "node n1: attribute axes");
	expect_bad(G(NA("n1", "reduce_max", "[\"x\"]", "[\"y\"]", "{\"keepdims\":true}")), MU_EPROTO,
	           "node n1: attribute keepdims");
	expect_bad(G(N("n1", "reshape", "[\"x\"]", "[\"y\"]")), MU_EPROTO, "node n1: reshape needs");
	expect_bad(G(NA("n1", "reshape", "[\"x\"]", "[\"y\"]", "{\"shape\":[1,1,1,1,1,1,1,1,1]}")),
	           MU_EPROTO, "node n1: reshape needs");
	expect_bad(G(NA("n1", "reshape", "[\"x\"]", "[\"y\"]", "{\"shape\":[-1,-1]}")), MU_EPROTO,
	           "node n1: bad reshape target");
	expect_bad(G(NA("n1", "reshape", "[\"x\"]", "[\"y\"]", "{\"shape\":[-2,4]}")), MU_EPROTO,
	           "node n1: bad reshape target");
	expect_bad(G(NA("n1", "reshape", "[\"x\"]", "[\"y\"]", "{\"shape\":[2.5]}")), MU_EPROTO,
	           "node n1");
	/* attrs that are read as integers or numbers must be ones */
	expect_bad(G(NA("n1", "softmax", "[\"x\"]", "[\"y\"]", "{\"axis\":\"1\"}")), MU_EPROTO,
	           "node n1: attribute axis");
	expect_bad(G(NA("n1", "softmax", "[\"x\"]", "[\"y\"]", "{\"axis\":1e300}")), MU_EPROTO,
	           "node n1: attribute axis");
	expect_bad(G(NA("n1", "layernorm", "[\"x\",\"g\"]", "[\"y\"]", "{\"epsilon\":\"1e-5\"}")),
	           MU_EPROTO, "node n1: attribute epsilon");
	expect_bad(G(NA("n1", "rmsnorm", "[\"x\",\"g\"]", "[\"y\"]", "{\"axis\":1.5}")), MU_EPROTO,
	           "node n1: attribute axis");
	expect_bad(G(NA("n1", "concat", "[\"x\",\"x\"]", "[\"y\"]", "{\"axis\":[1]}")), MU_EPROTO,
	           "node n1: attribute axis");
	expect_bad(G(NA("n1", "flatten", "[\"x\"]", "[\"y\"]", "{\"axis\":null}")), MU_EPROTO,
	           "node n1: attribute axis");
	expect_bad(G(NA("n1", "transpose", "[\"x\"]", "[\"y\"]", "{\"perm\":[1,\"0\"]}")), MU_EPROTO,
	           "node n1: attribute perm");
	expect_bad(G(NA("n1", "slice", "[\"x\"]", "[\"y\"]", "{\"starts\":[0],\"ends\":[\"1\"]}")),
	           MU_EPROTO, "node n1: attribute ends");
	expect_bad(G(NA("n1", "slice", "[\"x\"]", "[\"y\"]", "{\"ends\":[1]}")), MU_EPROTO,
	           "node n1: slice needs");
	expect_bad(G(NA("n1", "slice", "[\"x\"]", "[\"y\"]", "{\"starts\":[0,0],\"ends\":[1]}")),
	           MU_EPROTO, "node n1: slice needs");
	expect_bad(G(NA("n1", "slice", "[\"x\"]", "[\"y\"]", "{\"starts\":[0],\"ends\":[1],\"steps\":[-1]}")),
	           MU_EPROTO, "node n1: slice");
	/* what is right passes */
	expect_bad(G(NA("n1", "softmax", "[\"x\"]", "[\"y\"]", "{\"axis\":-2}")), 0, "");
	expect_bad(G(NA("n1", "slice", "[\"x\"]", "[\"y\"]",
	                "{\"starts\":[-1],\"ends\":[-9e15],\"axes\":[0],\"steps\":[1]}")), 0, "");
}

static void test_reject_order_and_names(void **state)
{
	(void)state;
	/* a value used before the node that computes it */
	expect_bad(G(N("n1", "relu", "[\"h\"]", "[\"y\"]") "," N("n2", "relu", "[\"x\"]", "[\"h\"]")),
	           MU_EPROTO, "node n1 uses h before it is computed");
	expect_bad(G(N("n1", "add", "[\"x\",\"y\"]", "[\"y\"]")), MU_EPROTO,
	           "node n1 uses y before it is computed");
	/* a value defined twice: by two nodes, twice by one, over an input or a param */
	expect_bad(G(N("n1", "relu", "[\"x\"]", "[\"y\"]") "," N("n2", "neg", "[\"x\"]", "[\"y\"]")),
	           MU_EPROTO, "node n2 redefines y");
	expect_bad(G(N("n1", "relu", "[\"x\"]", "[\"x\"]")), MU_EPROTO, "node n1 redefines x");
	expect_bad(G(N("n1", "add", "[\"x\",\"W\"]", "[\"y\"]") "," N("n2", "relu", "[\"x\"]", "[\"W\"]")),
	           MU_EPROTO, "node n1 uses W before it is computed");
	/* a model output that is a weight is never computed */
	expect_bad(HEAD X_IN "\"outputs\":[\"W\"],\"nodes\":[" N("n1", "add", "[\"x\",\"W\"]", "[\"y\"]") "]}",
	           MU_EPROTO, "output W is never computed");
}

static void test_reject_sizes(void **state)
{
	mu__buf_t b;
	mu__graph_t g;
	char why[256] = "";

	(void)state;
	/* over 64 MiB: refused on the length, before it is read */
	assert_int_equal(mu__graph_parse("{}", MU_GRAPH_MAX_BYTES + 1, &g, why, sizeof(why)), MU_ETOOBIG);
	assert_non_null(strstr(why, "64 MiB"));

	/* more than MU_GRAPH_MAX_NODES nodes */
	mu__buf_init(&b, 16u << 20);
	assert_int_equal(mu__buf_appends(&b, HEAD "\"inputs\":[],\"outputs\":[],\"nodes\":["), 0);
	for (int i = 0; i <= MU_GRAPH_MAX_NODES; i++)
		assert_int_equal(mu__buf_appends(&b, i ? ",0" : "0"), 0);
	assert_int_equal(mu__buf_appends(&b, "]}"), 0);
	assert_int_equal(mu__graph_parse(b.data, b.len, &g, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "\"nodes\""));
	mu__buf_free(&b);

	/* more than 64 graph inputs, more than 64 inputs to a node */
	mu__buf_init(&b, 1u << 20);
	assert_int_equal(mu__buf_appends(&b, HEAD "\"outputs\":[],\"nodes\":[],\"inputs\":["), 0);
	for (int i = 0; i <= MU_NODE_MAX_IO; i++)
		assert_int_equal(mu__buf_printf(&b, "%s{\"name\":\"i%d\",\"shape\":[1]}", i ? "," : "", i), 0);
	assert_int_equal(mu__buf_appends(&b, "]}"), 0);
	assert_int_equal(mu__graph_parse(b.data, b.len, &g, why, sizeof(why)), MU_EPROTO);
	mu__buf_free(&b);
	mu__buf_init(&b, 1u << 20);
	assert_int_equal(mu__buf_appends(&b, G("{\"name\":\"wide\",\"op\":\"concat\",\"outputs\":[\"y\"],\"inputs\":[")), 0);
	b.len -= 2; /* back over the "]}" G() ends with */
	for (int i = 0; i <= MU_NODE_MAX_IO; i++)
		assert_int_equal(mu__buf_printf(&b, "%s\"x\"", i ? "," : ""), 0);
	assert_int_equal(mu__buf_appends(&b, "]}]}"), 0);
	assert_int_equal(mu__graph_parse(b.data, b.len, &g, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "node wide"));
	mu__buf_free(&b);

	/* a name over 4096 bytes is no name */
	mu__buf_init(&b, 1u << 20);
	assert_int_equal(mu__buf_appends(&b, HEAD X_IN "\"outputs\":[],\"nodes\":[{\"op\":\"relu\","
	                                     "\"inputs\":[\"x\"],\"outputs\":[\""), 0);
	for (int i = 0; i < 4097; i++)
		assert_int_equal(mu__buf_appendc(&b, 'n'), 0);
	assert_int_equal(mu__buf_appends(&b, "\"]}]}"), 0);
	assert_int_equal(mu__graph_parse(b.data, b.len, &g, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "node #0"));
	mu__buf_free(&b);
}

static void test_parse_out_of_memory(void **state)
{
	mu__graph_t g;
	long n;
	int rc;

	(void)state;
	for (n = 0; n < 1000; n++) {
		mu_test_fail_after(n);
		rc = mu__graph_parse(good, strlen(good), &g, NULL, 0);
		mu_test_alloc_reset();
		if (rc == 0)
			break;
		assert_true(rc == MU_ENOMEM || rc == MU_EJSON || rc == MU_EPROTO);
		assert_null(g.nodes);
	}
	assert_true(n < 1000);
	assert_int_equal(g.nnodes, 4);
	mu__graph_free(&g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_valid),
		cmocka_unit_test(test_parse_minimal_and_passthrough),
		cmocka_unit_test(test_reject_document),
		cmocka_unit_test(test_reject_inputs),
		cmocka_unit_test(test_reject_nodes),
		cmocka_unit_test(test_reject_attrs),
		cmocka_unit_test(test_reject_order_and_names),
		cmocka_unit_test(test_reject_sizes),
		cmocka_unit_test(test_parse_out_of_memory),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
