/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/pipeline/device_start.c: mu_device_start binds,
 * publishes and then registers, so that by the time a tracker lists the
 * device its metadata can be fetched; and its failures leave nothing
 * running and say which step failed.
 */
#include <stdio.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include "mu_test.h"

#include "muster/md.h"
#include "muster/pipeline.h"
#include "muster/tracker.h"
#include "core/json_int.h"

#define T 5000

static mu_tracker_t *tracker(void)
{
	mu_tracker_opts_t o;
	mu_tracker_t *t;

	mu_tracker_opts_init(&o);
	o.host = "127.0.0.1";
	o.port = 0;
	o.silent = 1;
	assert_int_equal(mu_tracker_start(&o, &t), 0);
	return t;
}

static mu_device_t *device(void)
{
	mu_device_opts_t o;
	mu_device_t *d;

	mu_device_opts_init(&o);
	o.key = "dev";
	o.mem_budget = 1 << 20;
	o.md_host = "127.0.0.1";
	assert_int_equal(mu_device_new(&o, &d, NULL, 0), 0);
	return d;
}

static void server_opts(mu_server_opts_t *o, const mu_tracker_t *t)
{
	mu_server_opts_init(o);
	o->host = "127.0.0.1";
	o->port = 0;
	o->key = "dev";
	o->silent = 1;
	o->poll_period = 0.1;
	o->retry_max = 0.2;
	o->tracker_host = "127.0.0.1";
	o->tracker_port = mu_tracker_port(t);
	/* no on_session: the device's own handler is used */
}

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

static void test_publish_then_register(void **state)
{
	mu_tracker_t *t = tracker();
	mu_device_t *d = device();
	mu_server_opts_t o;
	mu_server_t *s;
	mu_md_opts_t mo;
	mu_md_agent_t *a;
	mu_md_peer_t peer = {"127.0.0.1", 0};
	char err[512], name[128], want[64];
	cJSON *info = NULL;
	uint64_t op;
	int status = -1, i;

	(void)state;
	server_opts(&o, t);
	assert_int_equal(mu_device_start(d, &o, &s, err, sizeof(err)), 0);
	/* published before it returned, under the address it registers */
	assert_int_equal(mu__json_parse(mu_device_describe(d), strlen(mu_device_describe(d)),
	                                &info), 0);
	snprintf(want, sizeof(want), "127.0.0.1:%d", mu_server_port(s));
	snprintf(name, sizeof(name), "muster-device/dev/%s", want);
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(info, "address")->valuestring, want);
	assert_int_equal(sscanf(cJSON_GetObjectItemCaseSensitive(info, "md_address")->valuestring,
	                        "127.0.0.1:%d", &peer.port), 1);
	cJSON_Delete(info);
	for (i = 0; i < 100 && listed(t) == 0; i++)
		usleep(50000);
	assert_int_equal(listed(t), 1);
	/* and what a coordinator granted it fetches is there */
	mu_md_opts_init(&mo);
	mo.name = "coordinator";
	mo.no_env = 1;
	assert_int_equal(mu_md_agent_new(&mo, &a, NULL, 0), 0);
	assert_int_equal(mu_md_fetch_remote(a, name, &peer, NULL, &op), 0);
	assert_int_equal(mu_md_wait(a, op, T, &status), 0);
	assert_int_equal(status, 0);
	mu_md_agent_free(a);
	mu_server_free(s);
	mu_device_free(d);
	mu_tracker_free(t);
}

/* A port that is taken: MU_EBIND with the range in words, nothing left. */
static void test_bind_failure(void **state)
{
	mu_tracker_t *t = tracker();
	mu_device_t *d = device();
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	mu_server_opts_t o;
	mu_server_t *s = (mu_server_t *)&o;
	char err[512], want[64];
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	(void)state;
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 1), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	server_opts(&o, t);
	o.port = ntohs(sa.sin_port);
	o.port_end = o.port + 1;
	assert_int_equal(mu_device_start(d, &o, &s, err, sizeof(err)), MU_EBIND);
	assert_null(s);
	snprintf(want, sizeof(want), "[%d, %d)", o.port, o.port_end);
	assert_non_null(strstr(err, want));
	assert_int_equal(listed(t), 0);
	close(fd);
	mu_device_free(d);
	mu_tracker_free(t);
}

static void test_bad_arguments(void **state)
{
	mu_server_opts_t o;
	mu_server_t *s;
	char err[512];

	(void)state;
	memset(&o, 0, sizeof(o)); /* never given to mu_server_opts_init */
	assert_int_equal(mu_device_start(NULL, &o, &s, err, sizeof(err)), MU_EARG);
	assert_null(s);
	assert_true(strlen(err) > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_publish_then_register),
		cmocka_unit_test(test_bind_failure),
		cmocka_unit_test(test_bad_arguments),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
