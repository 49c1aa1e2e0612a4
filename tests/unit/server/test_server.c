/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/server/{server,register,session}.c through the public
 * API: a server (and, in tracker mode, a tracker) on threads of this
 * process, clients through mu_session_connect / mu_session_request. Every
 * wait is bounded.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mu_test.h"

#include "muster/server.h"
#include "muster/tracker.h"
#include "core/time_int.h"

#define T 5000

/* A handler that echoes, or (hold) waits until released or cut off. */
static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cond = PTHREAD_COND_INITIALIZER;
static int hold, in_session;

static void handler(mu_session_t *s, void *ud)
{
	char buf[1024];
	size_t n;

	(void)ud;
	pthread_mutex_lock(&hold_lock);
	in_session++;
	pthread_cond_broadcast(&hold_cond);
	pthread_mutex_unlock(&hold_lock);
	while (mu_session_recv(s, buf, sizeof(buf), &n, -1) == 0 && n > 0)
		if (!hold && mu_session_send(s, buf, n, T) != 0)
			break;
	pthread_mutex_lock(&hold_lock);
	in_session--;
	pthread_cond_broadcast(&hold_cond);
	pthread_mutex_unlock(&hold_lock);
}

static void wait_in_session(int n)
{
	pthread_mutex_lock(&hold_lock);
	while (in_session != n)
		pthread_cond_wait(&hold_cond, &hold_lock);
	pthread_mutex_unlock(&hold_lock);
}

static mu_tracker_t *tracker_at(int port)
{
	mu_tracker_opts_t o;
	mu_tracker_t *t;

	mu_tracker_opts_init(&o);
	o.host = "127.0.0.1";
	o.port = port;
	o.port_end = port + 1;
	o.silent = 1;
	assert_int_equal(mu_tracker_start(&o, &t), 0);
	return t;
}

/* session_timeout for the servers started next (0: none) */
static double session_timeout;

static mu_server_t *server(mu_tracker_t *t, const char *key)
{
	mu_server_opts_t o;
	mu_server_t *s;

	mu_server_opts_init(&o);
	o.session_timeout = session_timeout;
	o.host = "127.0.0.1";
	o.port = 0;
	o.key = key;
	o.silent = 1;
	o.poll_period = 0.1; /* fast registrar for tests */
	o.retry_max = 0.2;
	o.handshake_timeout = 1;
	o.on_session = handler;
	if (t != NULL) {
		o.tracker_host = "127.0.0.1";
		o.tracker_port = mu_tracker_port(t);
	}
	assert_int_equal(mu_server_start(&o, &s), 0);
	return s;
}

/* Wait until the server offers a matchkey other than `not` ("" = any). */
static void wait_matchkey(mu_server_t *s, const char *not, char *mk, size_t len)
{
	int64_t deadline = mu__deadline(T);

	do {
		mu_server_matchkey(s, mk, len);
		if (mk[0] != '\0' && strcmp(mk, not) != 0)
			return;
		usleep(10000);
	} while (mu__now_ms() < deadline);
	fail_msg("no new matchkey within %d ms", T);
}

/* Wait until the tracker lists `n` free devices of `key`. */
static void wait_free(mu_tracker_t *t, const char *key, int n)
{
	int64_t deadline = mu__deadline(3 * T);
	char needle[128];

	snprintf(needle, sizeof(needle), "\"%s\": {\"free\": %d,", key, n);
	do {
		mu_tracker_client_t *c;
		char *json = NULL;
		int hit = 0;

		if (mu_tracker_client_connect("127.0.0.1", mu_tracker_port(t), T, &c) == 0 &&
		    mu_tracker_client_summary(c, T, &json) == 0)
			hit = strstr(json, needle) != NULL;
		mu_tracker_client_close(c);
		mu_free(json);
		if (hit)
			return;
		usleep(20000);
	} while (mu__now_ms() < deadline);
	fail_msg("tracker never showed %d free %s", n, key);
}

static void echo_once(mu_session_t *ss, const char *msg)
{
	char buf[64];
	size_t n, got = 0;

	assert_int_equal(mu_session_send(ss, msg, strlen(msg), T), 0);
	while (got < strlen(msg)) {
		assert_int_equal(mu_session_recv(ss, buf + got, sizeof(buf) - got, &n, T), 0);
		assert_true(n > 0);
		got += n;
	}
	assert_memory_equal(buf, msg, strlen(msg));
}

static void test_standalone(void **state)
{
	mu_server_t *s = server(NULL, "dev");
	mu_session_t *ss;
	char mk[64];

	(void)state;
	mu_server_matchkey(s, mk, sizeof(mk));
	assert_string_equal(mk, "dev"); /* TVM: the bare key */
	assert_int_equal(mu_session_connect("127.0.0.1", mu_server_port(s), "nope", 0, NULL, T, &ss),
	                 MU_EMISMATCH);
	assert_null(ss);
	assert_int_equal(mu_session_connect("127.0.0.1", mu_server_port(s), "dev", 0, NULL, T, &ss), 0);
	assert_string_equal(mu_session_server_key(ss), "server:dev");
	echo_once(ss, "hello");
	mu_session_close(ss);
	mu_server_free(s);
}

/* A client queued behind a session is told, after queue_timeout, that
 * the device is busy: -EBUSY, not a matchkey mismatch and not silence. */
static void test_busy_after_queue_timeout(void **state)
{
	mu_server_opts_t o;
	mu_server_t *s;
	mu_session_t *a, *b;

	(void)state;
	mu_server_opts_init(&o);
	assert_true(o.queue_timeout == 10);
	o.host = "127.0.0.1";
	o.port = 0;
	o.key = "dev";
	o.silent = 1;
	o.queue_timeout = 0.2;
	o.on_session = handler;
	assert_int_equal(mu_server_start(&o, &s), 0);
	assert_int_equal(mu_session_connect("127.0.0.1", mu_server_port(s), "dev", 0, NULL, T, &a), 0);
	assert_int_equal(mu_session_connect("127.0.0.1", mu_server_port(s), "dev", 0, NULL, T, &b),
	                 -EBUSY);
	assert_null(b);
	echo_once(a, "still mine");
	mu_session_close(a);
	mu_server_free(s);
}

static void test_request_through_tracker(void **state)
{
	mu_tracker_t *t = tracker_at(0);
	mu_server_t *s = server(t, "rasp");
	mu_session_t *ss;
	char mk1[128], mk2[128];

	(void)state;
	wait_free(t, "rasp", 1);
	wait_matchkey(s, "", mk1, sizeof(mk1));
	assert_true(strncmp(mk1, "rasp:0.", 7) == 0);
	assert_int_equal(mu_session_request("127.0.0.1", mu_tracker_port(t), "rasp", 1, 0, 3, NULL, T, &ss), 0);
	echo_once(ss, "ping");
	mu_session_close(ss);
	/* after the session: a fresh matchkey, registered again, and the used
	 * one is stale */
	wait_matchkey(s, mk1, mk2, sizeof(mk2));
	wait_free(t, "rasp", 1);
	assert_int_equal(mu_session_connect("127.0.0.1", mu_server_port(s), mk1, 0, NULL, T, &ss),
	                 MU_EMISMATCH);
	assert_true(mu_server_sessions(s) >= 1);
	mu_server_free(s);
	mu_tracker_free(t);
}

static void test_matchkey_is_single_use(void **state)
{
	mu_tracker_t *t = tracker_at(0);
	mu_server_t *s = server(t, "k");
	mu_session_t *a, *b;
	char mk[128];

	(void)state;
	wait_matchkey(s, "", mk, sizeof(mk));
	hold = 1;
	assert_int_equal(mu_session_connect("127.0.0.1", mu_server_port(s), mk, 0, NULL, T, &a), 0);
	wait_in_session(1);
	/* a second client with the same key while the first is served */
	assert_int_equal(mu_session_connect("127.0.0.1", mu_server_port(s), mk, 0, NULL, T, &b),
	                 MU_EMISMATCH);
	mu_session_close(a);
	wait_in_session(0);
	hold = 0;
	mu_server_free(s);
	mu_tracker_free(t);
}

static int raw_connect(int port)
{
	struct sockaddr_in sa;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static void test_silent_client_blocks_nobody(void **state)
{
	mu_server_t *s = server(NULL, "dev");
	mu_session_t *ss;
	char b;
	int quiet = raw_connect(mu_server_port(s));
	int half = raw_connect(mu_server_port(s));
	struct timeval tv = {3, 0};

	(void)state;
	/* one says nothing, one stops mid-hello (magic and half a length) */
	assert_int_equal(write(half, "\x71\xf2\x0f\x00\x20\x00", 6), 6);
	assert_int_equal(mu_session_connect("127.0.0.1", mu_server_port(s), "dev", 0, NULL, T, &ss), 0);
	echo_once(ss, "still served");
	mu_session_close(ss);
	/* the silent one is cut after the handshake timeout (1 s here) */
	setsockopt(quiet, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	assert_int_equal(read(quiet, &b, 1), 0);
	close(quiet);
	close(half);
	mu_server_free(s);
}

static void test_bytes_behind_the_hello(void **state)
{
	mu_server_t *s = server(NULL, "dev");
	int fd = raw_connect(mu_server_port(s));
	char buf[64];
	ssize_t n;
	size_t got = 0;

	(void)state;
	/* hello and the first session bytes in one segment */
	assert_int_equal(write(fd, "\x71\xf2\x0f\x00\x0a\x00\x00\x00" "client:devEARLY", 23), 23);
	while (got < 4 + 4 + 10 + 5) {
		n = read(fd, buf + got, sizeof(buf) - got);
		assert_true(n > 0);
		got += (size_t)n;
	}
	assert_memory_equal(buf, "\x71\xf2\x0f\x00\x0a\x00\x00\x00server:dev", 18);
	assert_memory_equal(buf + 18, "EARLY", 5);
	close(fd);
	mu_server_free(s);
}

/*
 * Two device servers in one process, each on its own loop thread, taking
 * handshakes at the same time. Each hello carries session bytes behind it
 * (read in the same segment), unique to the client, which must come back
 * unchanged. Before, the servers shared one static read buffer: under
 * ThreadSanitizer (make check-tsan) that is a reported race, and without
 * it a client could get the other server's bytes.
 */
typedef struct {
	int port, id, ok;
} twin_t;

static void *twin_client(void *arg)
{
	twin_t *tw = arg;
	char hello[64], buf[64];
	size_t got = 0;
	ssize_t n;
	int i, len;

	for (i = 0; i < 25; i++) {
		int fd = raw_connect(tw->port);

		/* the hello (it holds NULs), then 6 bytes of this client's own */
		memcpy(hello, "\x71\xf2\x0f\x00\x0a\x00\x00\x00" "client:dev", 18);
		len = 18 + snprintf(hello + 18, sizeof(hello) - 18, "c%02d%03d", tw->id, i);
		if (write(fd, hello, (size_t)len) != len)
			break;
		for (got = 0; got < 18 + 6 && (n = read(fd, buf + got, sizeof(buf) - got)) > 0;)
			got += (size_t)n;
		close(fd);
		if (got != 18 + 6 || memcmp(buf + 18, hello + 18, 6) != 0)
			break;
	}
	if (i != 25)
		fprintf(stderr, "client %d: round %d failed (%zu bytes back)\n", tw->id, i, got);
	tw->ok = i == 25;
	return NULL;
}

static void test_two_servers_in_one_process(void **state)
{
	mu_server_t *a = server(NULL, "dev"), *b = server(NULL, "dev");
	twin_t tw[2] = {{mu_server_port(a), 1, 0}, {mu_server_port(b), 2, 0}};
	pthread_t th[2];

	(void)state;
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, twin_client, &tw[i]), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	assert_true(tw[0].ok);
	assert_true(tw[1].ok);
	mu_server_free(a);
	mu_server_free(b);
}

static void test_session_timeout_and_stop(void **state)
{
	mu_server_t *s = server(NULL, "dev");
	mu_session_t *ss;
	int64_t t0;
	size_t n;
	char b;

	(void)state;
	hold = 1;
	/* -timeout=0.3: the server cuts the session off */
	assert_int_equal(mu_session_connect("127.0.0.1", mu_server_port(s), "dev", 0.3, NULL, T, &ss), 0);
	t0 = mu__now_ms();
	assert_int_equal(mu_session_recv(ss, &b, 1, &n, T), 0);
	assert_int_equal(n, 0); /* EOF */
	assert_true(mu__now_ms() - t0 >= 250 && mu__now_ms() - t0 < 3000);
	mu_session_close(ss);
	wait_in_session(0);
	/* stopping the server ends a session whose handler is blocked */
	assert_int_equal(mu_session_connect("127.0.0.1", mu_server_port(s), "dev", 0, NULL, T, &ss), 0);
	wait_in_session(1);
	mu_server_free(s);
	assert_int_equal(in_session, 0);
	mu_session_close(ss);
	hold = 0;
}

/* A raw client past the standalone hello for "dev" (fd stays open). */
static int raw_session(int port)
{
	static const char ok[] = "\x71\xf2\x0f\x00\x0a\x00\x00\x00server:dev";
	int fd = raw_connect(port);
	char buf[sizeof(ok) - 1];
	size_t got = 0;
	ssize_t n;

	assert_int_equal(write(fd, "\x71\xf2\x0f\x00\x0a\x00\x00\x00" "client:dev", 18), 18);
	while (got < sizeof(buf) && (n = read(fd, buf + got, sizeof(buf) - got)) > 0)
		got += (size_t)n;
	assert_int_equal(got, sizeof(buf));
	assert_memory_equal(buf, ok, sizeof(buf));
	return fd;
}

/* How long until a second client of "dev" gets its session (ms). */
static int64_t next_client_waits(mu_server_t *s)
{
	int64_t t0 = mu__now_ms();
	mu_session_t *ss;

	assert_int_equal(mu_session_connect("127.0.0.1", mu_server_port(s), "dev", 0, NULL, 2 * T, &ss), 0);
	echo_once(ss, "my turn");
	mu_session_close(ss);
	return mu__now_ms() - t0;
}

/*
 * A client that stops reading what the session echoes, and one that says
 * nothing after its hello, each hold the (single) session slot only until
 * the session timeout, 0.5 s here; the handler's own send timeout is T.
 * Before, the echo's send blocked in the kernel for good and the next
 * client never got in.
 */
static void test_session_timeout_ends_stuck_sessions(void **state)
{
	static char junk[1 << 16];
	mu_server_t *s;
	int64_t waited;
	int fd, fl;

	(void)state;
	session_timeout = 0.5;
	s = server(NULL, "dev");
	session_timeout = 0;
	/* a non-reader: send until both directions' buffers are full */
	fd = raw_session(mu_server_port(s));
	wait_in_session(1);
	fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	for (int64_t until = mu__deadline(300); mu__now_ms() < until;)
		if (write(fd, junk, sizeof(junk)) < 0)
			usleep(1000);
	waited = next_client_waits(s);
	assert_true(waited < T - 1000); /* the limit, not the handler's T */
	close(fd);
	wait_in_session(0);
	/* a silent one */
	fd = raw_session(mu_server_port(s));
	wait_in_session(1);
	waited = next_client_waits(s);
	assert_true(waited >= 300 && waited < T - 1000);
	close(fd);
	wait_in_session(0);
	mu_server_free(s);
}

static void test_tracker_restart(void **state)
{
	mu_tracker_t *t = tracker_at(0);
	int port = mu_tracker_port(t);
	mu_server_t *s = server(t, "dev");
	mu_session_t *ss;

	(void)state;
	wait_free(t, "dev", 1);
	mu_tracker_free(t);
	usleep(300000); /* the server notices and starts retrying */
	t = tracker_at(port); /* a new tracker, same port: nothing registered */
	wait_free(t, "dev", 1);
	assert_int_equal(mu_session_request("127.0.0.1", port, "dev", 1, 0, 3, NULL, T, &ss), 0);
	echo_once(ss, "back");
	mu_session_close(ss);
	mu_server_free(s);
	mu_tracker_free(t);
}

/* 1 when the tracker's summary mentions key (a failed call fails the test). */
static int tracker_lists(mu_tracker_t *t, const char *key)
{
	mu_tracker_client_t *c;
	char *json = NULL;
	int hit;

	assert_int_equal(mu_tracker_client_connect("127.0.0.1", mu_tracker_port(t), T, &c), 0);
	assert_int_equal(mu_tracker_client_summary(c, T, &json), 0);
	hit = strstr(json, key) != NULL;
	mu_tracker_client_close(c);
	mu_free(json);
	return hit;
}

/* defer_register: bound and serving, but the tracker hears of the server
 * only on mu_server_register (once, however often it is called). */
static void test_deferred_registration(void **state)
{
	mu_tracker_t *t = tracker_at(0);
	mu_server_opts_t o;
	mu_server_t *s;
	char mk[64];

	(void)state;
	mu_server_opts_init(&o);
	o.host = "127.0.0.1";
	o.port = 0;
	o.key = "later";
	o.silent = 1;
	o.poll_period = 0.1;
	o.retry_max = 0.2;
	o.on_session = handler;
	o.tracker_host = "127.0.0.1";
	o.tracker_port = mu_tracker_port(t);
	o.defer_register = 1;
	assert_int_equal(mu_server_start(&o, &s), 0);
	assert_true(mu_server_port(s) > 0);
	usleep(200000); /* what a registrar would need many times over */
	mu_server_matchkey(s, mk, sizeof(mk));
	assert_string_equal(mk, "");
	assert_false(tracker_lists(t, "later"));
	assert_int_equal(mu_server_register(s), 0);
	assert_int_equal(mu_server_register(s), 0);
	wait_free(t, "later", 1);
	mu_server_free(s);
	mu_tracker_free(t);
}

static mu_server_t *bound(const char *host, const char *custom, mu_tracker_t *t)
{
	mu_server_opts_t o;
	mu_server_t *s;

	mu_server_opts_init(&o);
	o.host = host;
	o.port = 0;
	o.key = t != NULL ? "h" : "";
	o.silent = 1;
	o.on_session = handler;
	o.custom_addr = custom;
	o.defer_register = 1; /* only the address is under test */
	if (t != NULL) {
		o.tracker_host = "127.0.0.1";
		o.tracker_port = mu_tracker_port(t);
	}
	assert_int_equal(mu_server_start(&o, &s), 0);
	return s;
}

/* The address to publish is never the wildcard bound to. */
static void test_reachable_host(void **state)
{
	mu_tracker_t *t = tracker_at(0);
	mu_server_t *s;

	(void)state;
	s = bound("0.0.0.0", NULL, t); /* the route to the tracker's loopback */
	assert_string_equal(mu_server_host(s), "127.0.0.1");
	mu_server_free(s);
	s = bound("0.0.0.0", NULL, NULL); /* standalone */
	assert_string_equal(mu_server_host(s), "127.0.0.1");
	mu_server_free(s);
	s = bound("127.0.0.1", NULL, t);
	assert_string_equal(mu_server_host(s), "127.0.0.1");
	mu_server_free(s);
	s = bound("0.0.0.0", "device7.example", t);
	assert_string_equal(mu_server_host(s), "device7.example");
	mu_server_free(s);
	mu_tracker_free(t);
}

static void test_request_failures(void **state)
{
	mu_tracker_t *t = tracker_at(0);
	int port = mu_tracker_port(t);
	mu_session_t *ss;
	int64_t t0 = mu__now_ms();

	(void)state;
	/* nobody serves this key: the timeout holds */
	assert_int_equal(mu_session_request("127.0.0.1", port, "none", 1, 0, 3, NULL, 300, &ss), -ETIMEDOUT);
	assert_null(ss);
	assert_true(mu__now_ms() - t0 < 2000);
	mu_tracker_free(t);
	/* no tracker at all */
	assert_int_equal(mu_session_request("127.0.0.1", port, "none", 1, 0, 2, NULL, T, &ss), -ECONNREFUSED);
}

static void test_bad_options(void **state)
{
	mu_server_opts_t o;
	mu_server_t *s;

	(void)state;
	mu_server_opts_init(&o);
	o.key = "k";
	assert_int_equal(mu_server_start(&o, &s), MU_EARG); /* no handler */
	assert_null(s);
	o.on_session = handler;
	o.key = NULL;
	assert_int_equal(mu_server_start(&o, &s), MU_EARG);
	mu_server_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_standalone),
		cmocka_unit_test(test_busy_after_queue_timeout),
		cmocka_unit_test(test_request_through_tracker),
		cmocka_unit_test(test_matchkey_is_single_use),
		cmocka_unit_test(test_silent_client_blocks_nobody),
		cmocka_unit_test(test_bytes_behind_the_hello),
		cmocka_unit_test(test_two_servers_in_one_process),
		cmocka_unit_test(test_session_timeout_and_stop),
		cmocka_unit_test(test_session_timeout_ends_stuck_sessions),
		cmocka_unit_test(test_tracker_restart),
		cmocka_unit_test(test_deferred_registration),
		cmocka_unit_test(test_reachable_host),
		cmocka_unit_test(test_request_failures),
		cmocka_unit_test(test_bad_options),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
