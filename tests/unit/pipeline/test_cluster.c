/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/pipeline/cluster.c, the main job's lifecycle, with a
 * stage kind made up here over a real tracker and real devices on
 * loopback: the kind sees the devices' budgets, a stage goes ASSIGN,
 * stream, LOAD, set, placed in that order and the unused device is
 * released; a lost stage is set up again on another device, held to the
 * stage's need and to the number of replacements allowed; a plan that
 * does not fit, weights that must be local and a device that refuses
 * fail with the reason and leave every device free.
 */
#include <unistd.h>

#include "mu_test.h"

#include "muster/pipeline.h"
#include "muster/server.h"
#include "muster/tracker.h"
#include "core/alloc_int.h"
#include "core/json_int.h"
#include "pipeline/cluster_int.h"

#define T 5000
#define MIB ((uint64_t)1 << 20)

/* One relu, no weights: a graph stage a device builds from its ASSIGN. */
static const char graph_json[] =
	"{\"format\":\"muster-graph\",\"version\":1,"
	"\"inputs\":[{\"name\":\"x\",\"shape\":[4]}],\"outputs\":[\"y\"],\"nodes\":["
	"{\"name\":\"n0\",\"op\":\"relu\",\"inputs\":[\"x\"],\"outputs\":[\"y\"]}]}";

/* The kind made up here: what it was asked, and what it answers. */
typedef struct {
	int plan_rc;             /* what plan returns */
	int device;              /* the device its one stage goes to */
	uint64_t need;
	const char *weights;     /* ASSIGN's "weights" */
	uint64_t budget[4];      /* as plan saw them */
	int nd;
	char calls[256];         /* each method's letter, in order */
	mu_session_t *sess;      /* what set took */
	char desc[512];
	char said[8192];         /* the narration */
} fake_t;

static void call(fake_t *f, char c)
{
	size_t n = strlen(f->calls);

	if (n + 1 < sizeof(f->calls))
		f->calls[n] = c;
}

static int fake_plan(void *ud, const uint64_t *budget, int nd, int *device, int *n, char *err,
                     size_t el)
{
	fake_t *f = ud;

	call(f, 'p');
	f->nd = nd;
	memcpy(f->budget, budget, sizeof(*budget) * (size_t)nd);
	if (f->plan_rc != 0) {
		snprintf(err, el, "the widget does not fit %d devices", nd);
		return f->plan_rc;
	}
	*n = 1;
	device[0] = f->device;
	return 0;
}

static uint64_t fake_need(void *ud, int i)
{
	(void)i;
	return ((fake_t *)ud)->need;
}

static void fake_range(void *ud, int i, char *buf, size_t n)
{
	(void)ud;
	snprintf(buf, n, "widgets %d..%d", i, i);
}

static int fake_assign(void *ud, int i, int stream, char **body, char *err, size_t el)
{
	fake_t *f = ud;
	cJSON *o = cJSON_CreateObject(), *sh;
	char *text;

	(void)err, (void)el;
	call(f, stream ? 'A' : 'a');
	cJSON_AddNumberToObject(o, "stage", i);
	cJSON_AddNumberToObject(o, "of", 1);
	cJSON_AddNumberToObject(o, "first", 0);
	cJSON_AddNumberToObject(o, "last", 1);
	cJSON_AddStringToObject(o, "digest", "00000000000000ab");
	cJSON_AddNumberToObject(o, "param_bytes", 0);
	cJSON_AddStringToObject(o, "weights", f->weights);
	cJSON_AddStringToObject(o, "graph", graph_json);
	sh = cJSON_AddObjectToObject(o, "input_shapes");
	cJSON_AddItemToObject(sh, "x", cJSON_CreateIntArray((const int[]){4}, 1));
	text = cJSON_PrintUnformatted(o);
	*body = mu__strdup(text);
	cJSON_free(text);
	cJSON_Delete(o);
	return *body != NULL ? 0 : MU_ENOMEM;
}

static int fake_stream(void *ud, int i, mu__chan_t *ch, const char *ready, const char *addr,
                       char *err, size_t el)
{
	fake_t *f = ud;

	(void)i, (void)ch, (void)addr, (void)err, (void)el;
	call(f, 's');
	assert_non_null(strstr(ready, "stream")); /* the device's READY to ASSIGN */
	return 0; /* a stage with no weights: nothing to send */
}

static int fake_set(void *ud, int i, mu_session_t *sess, const char *addr, const char *desc,
                    char *err, size_t el)
{
	fake_t *f = ud;

	(void)i, (void)addr, (void)err, (void)el;
	call(f, 'S');
	mu_session_close(f->sess); /* a replacement: the old device is gone */
	f->sess = sess;
	snprintf(f->desc, sizeof(f->desc), "%s", desc);
	return 0;
}

static int fake_check(void *ud, char *err, size_t el)
{
	(void)err, (void)el;
	call(ud, 'c');
	return 0;
}

static void fake_placed(void *ud, int i, const char *addr, int streamed, double ms)
{
	(void)i, (void)addr, (void)ms;
	call(ud, streamed ? 'P' : 'l');
}

static const mu__cluster_kind_t fake_kind = {
	"widget", fake_plan, fake_need, fake_range, fake_assign, fake_stream, fake_set, fake_check,
	fake_placed,
};

static void say(void *ud, const char *line)
{
	fake_t *f = ud;
	size_t n = strlen(f->said);

	snprintf(f->said + n, sizeof(f->said) - n, "%s\n", line);
}

/* ---- a tracker and two devices of 1 MiB ---- */

typedef struct {
	mu_tracker_t *t;
	mu_device_t *d[2];
	mu_server_t *s[2];
} world_t;

/* The free devices of key "dev" the tracker lists now. */
static int listed(const mu_tracker_t *t)
{
	mu_tracker_client_t *c;
	char *json = NULL;
	cJSON *v = NULL, *q;
	int n = 0;

	assert_int_equal(mu_tracker_client_connect("127.0.0.1", mu_tracker_port(t), T, &c), 0);
	assert_int_equal(mu_tracker_client_summary(c, T, &json), 0);
	assert_int_equal(mu__json_parse(json, strlen(json), &v), 0);
	q = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(v, "queue_info"), "dev");
	if (q != NULL)
		n = cJSON_GetObjectItemCaseSensitive(q, "free")->valueint;
	cJSON_Delete(v);
	mu_free(json);
	mu_tracker_client_close(c);
	return n;
}

static void wait_listed(const world_t *w, int n)
{
	for (int i = 0; i < 200 && listed(w->t) != n; i++)
		usleep(50000);
	assert_int_equal(listed(w->t), n);
}

static int setup(void **state)
{
	static world_t w;
	mu_tracker_opts_t to;
	char err[512];

	mu_tracker_opts_init(&to);
	to.host = "127.0.0.1";
	to.port = 0;
	to.silent = 1;
	if (mu_tracker_start(&to, &w.t) != 0)
		return -1;
	for (int i = 0; i < 2; i++) {
		mu_device_opts_t o;
		mu_server_opts_t so;

		mu_device_opts_init(&o);
		o.key = "dev";
		o.mem_budget = MIB;
		o.md_host = "127.0.0.1";
		mu_server_opts_init(&so);
		so.host = "127.0.0.1";
		so.port = 0;
		so.key = "dev";
		so.silent = 1;
		so.poll_period = 0.1;
		so.retry_max = 0.2;
		so.tracker_host = "127.0.0.1";
		so.tracker_port = mu_tracker_port(w.t);
		if (mu_device_new(&o, &w.d[i], err, sizeof(err)) != 0 ||
		    mu_device_start(w.d[i], &so, &w.s[i], err, sizeof(err)) != 0)
			return -1;
	}
	*state = &w;
	return 0;
}

static int teardown(void **state)
{
	world_t *w = *state;

	for (int i = 0; i < 2; i++) {
		mu_server_free(w->s[i]);
		mu_device_free(w->d[i]);
	}
	mu_tracker_free(w->t);
	return 0;
}

static void start_opts(const world_t *w, fake_t *f, mu__cluster_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->pool = (mu__devpool_opts_t){"127.0.0.1", "dev", mu_tracker_port(w->t), 0, T, T, MIB,
	                               NULL, say, f};
	o->devices = 2;
	o->weights = MU_WEIGHTS_AUTO;
	o->digest = 0xab;
	o->max_replacements = 1;
}

/* Each step in order; the device not planned on goes back; a lost stage
 * moves to another device, as many times as allowed. */
static void test_start_and_replace(void **state)
{
	world_t *w = *state;
	fake_t f = {.device = 1, .need = MIB, .weights = "stream"};
	mu__cluster_opts_t o;
	mu__cluster_t c;
	char err[512] = "";

	wait_listed(w, 2);
	start_opts(w, &f, &o);
	assert_int_equal(mu__cluster_start(&c, &fake_kind, &f, &o, err, sizeof(err)), 0);
	assert_string_equal(f.calls, "pAsSPc"); /* plan, ASSIGN, stream, set, placed, check */
	assert_int_equal(f.nd, 2);
	assert_true(f.budget[0] == MIB && f.budget[1] == MIB);
	assert_int_equal(c.n, 1);
	assert_true(c.placed[0].streamed && c.placed[0].budget == MIB && c.placed[0].replaced == 0);
	assert_non_null(strstr(f.desc, "\"stage\"")); /* LOAD's READY */
	assert_non_null(strstr(f.said, "asking the tracker at 127.0.0.1:"));
	assert_non_null(strstr(f.said, "is not needed (1.0 MiB budget): released"));
	wait_listed(w, 1);
	/* lost: the released device takes the stage */
	memset(f.calls, 0, sizeof(f.calls));
	assert_int_equal(mu__cluster_replace(&c, 0, err, sizeof(err)), 0);
	assert_string_equal(f.calls, "AsSPc");
	assert_int_equal(c.replacements, 1);
	assert_int_equal(c.placed[0].replaced, 1);
	assert_non_null(strstr(f.said, "(stage 0, widgets 0..0) is lost"));
	/* one replacement allowed in all */
	assert_int_equal(mu__cluster_replace(&c, 0, err, sizeof(err)), MU_ETOOBIG);
	assert_non_null(strstr(err, "1 lost device replaced already"));
	/* held to the stage's need: no 1 MiB device takes a 2 MiB stage */
	c.o.max_replacements = 2;
	f.need = 2 * MIB;
	wait_listed(w, 1);
	assert_int_equal(mu__cluster_replace(&c, 0, err, sizeof(err)), MU_ETOOBIG);
	assert_non_null(strstr(err, "no device with 2.0 MiB for stage 0 came"));
	assert_int_equal(c.replacements, 1);
	mu_session_close(f.sess);
	mu__cluster_free(&c);
	wait_listed(w, 2);
}

/* The kind's refusal is the answer, and every device goes back. */
static void test_plan_refused(void **state)
{
	world_t *w = *state;
	fake_t f = {.plan_rc = MU_ETOOBIG, .weights = "stream"};
	mu__cluster_opts_t o;
	mu__cluster_t c;
	char err[512] = "";

	wait_listed(w, 2);
	start_opts(w, &f, &o);
	assert_int_equal(mu__cluster_start(&c, &fake_kind, &f, &o, err, sizeof(err)), MU_ETOOBIG);
	assert_string_equal(err, "the widget does not fit 2 devices");
	assert_null(strstr(f.said, "is not needed"));
	mu__cluster_free(&c);
	wait_listed(w, 2);
}

/* Weights that must be local, on a device without a copy: no ASSIGN. */
static void test_local_weights_refused(void **state)
{
	world_t *w = *state;
	fake_t f = {.device = 0, .weights = "local"};
	mu__cluster_opts_t o;
	mu__cluster_t c;
	char err[512] = "";

	wait_listed(w, 2);
	start_opts(w, &f, &o);
	o.weights = MU_WEIGHTS_LOCAL;
	assert_int_equal(mu__cluster_start(&c, &fake_kind, &f, &o, err, sizeof(err)), MU_EARG);
	assert_string_equal(f.calls, "p");
	assert_non_null(strstr(err, "holds no copy of the widget, and weights must be local"));
	mu__cluster_free(&c);
	wait_listed(w, 2);
}

/* A device's ERROR reply to ASSIGN is the error, with its words. */
static void test_device_refuses(void **state)
{
	world_t *w = *state;
	fake_t f = {.device = 0, .weights = "sideways"};
	mu__cluster_opts_t o;
	mu__cluster_t c;
	char err[512] = "";

	wait_listed(w, 2);
	start_opts(w, &f, &o);
	assert_int_not_equal(mu__cluster_start(&c, &fake_kind, &f, &o, err, sizeof(err)), 0);
	assert_string_equal(f.calls, "pA");
	assert_non_null(strstr(err, "refused: weights must be"));
	mu__cluster_free(&c);
	wait_listed(w, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_start_and_replace),
		cmocka_unit_test(test_plan_refused),
		cmocka_unit_test(test_local_weights_refused),
		cmocka_unit_test(test_device_refuses),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
