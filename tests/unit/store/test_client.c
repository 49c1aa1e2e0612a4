/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/store/client.c on connections that go bad between
 * calls: a store restarted on the same port (a SET must reach the new
 * one, not vanish into the old connection), a server that never answers,
 * and one that sends bytes nobody asked for. The plain request paths are
 * in test_server.c; torch as the peer in tests/interop/test_store_*.py.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mu_test.h"

#include "muster/store.h"
#include "core/endian_int.h"
#include "core/time_int.h"
#include "store/client_int.h"

static mu_store_server_t *server_on(int port)
{
	mu_store_server_opts_t o;
	mu_store_server_t *s;

	mu_store_server_opts_init(&o);
	o.host = "127.0.0.1";
	o.port = port;
	o.silent = 1;
	assert_int_equal(mu_store_server_start(&o, &s), 0);
	return s;
}

static mu_store_client_t *client_on(int port, mu_store_dialect_t d, int timeout_ms)
{
	mu_store_client_opts_t o;
	mu_store_client_t *c;

	mu_store_client_opts_init(&o);
	o.port = port;
	o.dialect = d;
	o.timeout_ms = timeout_ms;
	assert_int_equal(mu_store_client_connect(&o, &c), 0);
	return c;
}

static int has_key(int port, const char *key)
{
	mu_store_client_t *c = client_on(port, MU_STORE_AUTO, 5000);
	int ready = -1;

	assert_int_equal(mu_store_check(c, &key, 1, &ready), 0);
	mu_store_client_close(c);
	return ready;
}

/* Every request kind right after a restart: none is lost or misread. */
static void restarted_on_the_same_port(mu_store_dialect_t d)
{
	mu_store_server_t *s = server_on(0);
	int port = mu_store_server_port(s), ready = 0, deleted = 0;
	mu_store_client_t *c = client_on(port, d, 5000);
	const char *k3 = "k3";
	mu_store_value_t v;
	int64_t n = 0;

	assert_int_equal(mu_store_set(c, "k1", "v1", 2), 0);
	assert_int_equal(has_key(port, "k1"), 1);
	/* SET has no reply: written into the old connection it would be
	 * reported done and lost */
	mu_store_server_free(s);
	s = server_on(port);
	assert_int_equal(mu_store_set(c, "k2", "v2", 2), 0);
	assert_int_equal(has_key(port, "k2"), 1);
	/* requests with a reply work at once as well */
	mu_store_server_free(s);
	s = server_on(port);
	assert_int_equal(mu_store_add(c, "n", 5, &n), 0);
	assert_true(n == 5);
	mu_store_server_free(s);
	s = server_on(port);
	assert_int_equal(mu_store_multi_set(c, &k3, &(mu_store_value_t){"v3", 2}, 1), 0);
	assert_int_equal(has_key(port, "k3"), 1);
	assert_int_equal(mu_store_check(c, &k3, 1, &ready), 0);
	assert_int_equal(ready, 1);
	assert_int_equal(mu_store_get(c, "k3", &v), 0);
	assert_int_equal(v.len, 2);
	mu_free(v.data);
	assert_int_equal(mu_store_delete(c, "k3", &deleted), 0);
	assert_int_equal(deleted, 1);
	mu_store_client_close(c);
	mu_store_server_free(s);
}

static void test_restarted_on_the_same_port_v2(void **state)
{
	(void)state;
	restarted_on_the_same_port(MU_STORE_AUTO);
}

static void test_restarted_on_the_same_port_v1(void **state)
{
	(void)state;
	restarted_on_the_same_port(MU_STORE_DIALECT_V1);
}

/*
 * A fake v1 server: each accepted connection reads one request and gets
 * the next of `replies` (NULL: none, ever); the connections stay open.
 * conns and nconns belong to its thread until fake_stop joins it.
 */
typedef struct {
	int fd, port, nconns;
	int conns[8];
	const char *replies[8];
	size_t lens[8];
	pthread_t th;
} fake_t;

static void *fake_main(void *arg)
{
	fake_t *f = arg;
	char buf[4096];
	int c;

	while (f->nconns < 8 && (c = accept(f->fd, NULL, NULL)) >= 0) {
		const char *r = f->replies[f->nconns];

		f->conns[f->nconns] = c;
		if (r != NULL && read(c, buf, sizeof(buf)) > 0)
			(void)!write(c, r, f->lens[f->nconns]);
		f->nconns++;
	}
	return NULL;
}

static void fake_start(fake_t *f)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	f->fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(bind(f->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(f->fd, 8), 0);
	getsockname(f->fd, (struct sockaddr *)&sa, &len);
	f->port = ntohs(sa.sin_port);
	pthread_create(&f->th, NULL, fake_main, f);
}

static void fake_stop(fake_t *f)
{
	shutdown(f->fd, SHUT_RDWR);
	close(f->fd);
	pthread_join(f->th, NULL);
	for (int i = 0; i < f->nconns; i++)
		close(f->conns[i]);
}

/* A request whose reply never comes fails at the deadline; the next call
 * does not read the late reply as its own, it starts over. */
static void test_reply_that_never_comes_fails(void **state)
{
	fake_t f = {.replies = {NULL, "\x01"}, .lens = {0, 1}};
	mu_store_client_t *c;
	const char *k = "k";
	int ready = -1;
	int64_t t0;

	(void)state;
	fake_start(&f);
	c = client_on(f.port, MU_STORE_DIALECT_V1, 500);
	t0 = mu__now_ms();
	assert_int_equal(mu_store_check(c, &k, 1, &ready), -ETIMEDOUT);
	assert_true(mu__now_ms() - t0 < 3000);
	assert_int_equal(mu_store_check(c, &k, 1, &ready), 0);
	assert_int_equal(ready, 0); /* the second connection's NOT_READY */
	mu_store_client_close(c);
	fake_stop(&f);
}

/* Bytes nobody asked for on an idle connection: it is not trusted with
 * the next request (whose reply they would pass for). */
static void test_unasked_bytes_drop_the_connection(void **state)
{
	fake_t f = {.replies = {"\x00X", "\x01"}, .lens = {2, 1}};
	mu_store_client_t *c;
	const char *k = "k";
	int ready = -1;

	(void)state;
	fake_start(&f);
	c = client_on(f.port, MU_STORE_DIALECT_V1, 2000);
	assert_int_equal(mu_store_check(c, &k, 1, &ready), 0);
	assert_int_equal(ready, 1); /* READY, and then an 'X' */
	poll(NULL, 0, 100);         /* let the 'X' arrive */
	assert_int_equal(mu_store_check(c, &k, 1, &ready), 0);
	assert_int_equal(ready, 0); /* from a new connection, not the 'X' */
	mu_store_client_close(c);
	fake_stop(&f);
}

static int has_value(const mu_store_value_t *v, size_t n, const char *want)
{
	for (size_t i = 0; i < n; i++)
		if (v[i].len == strlen(want) && memcmp(v[i].data, want, v[i].len) == 0)
			return 1;
	return 0;
}

static void free_values(mu_store_value_t *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		mu_free(v[i].data);
	mu_free(v);
}

/* LIST against muster's server: torch's view ("/" keys, stripped) and the
 * raw one; a v1 connection cannot list. */
static void test_list(void **state)
{
	mu_store_server_t *s = server_on(0);
	int port = mu_store_server_port(s);
	mu_store_client_t *c = client_on(port, MU_STORE_DIALECT_V2, 5000), *raw, *v1;
	mu_store_client_opts_t o;
	mu_store_value_t *keys;
	size_t n;

	(void)state;
	assert_int_equal(mu_store_list(c, &keys, &n), 0);
	assert_int_equal(n, 0);
	assert_null(keys);
	assert_int_equal(mu_store_set(c, "a", "1", 1), 0);
	assert_int_equal(mu_store_set(c, "nixl/agents/metadata/A/NULL_AGENT", "x", 1), 0);
	mu_store_client_opts_init(&o);
	o.port = port;
	o.raw_keys = 1;
	o.timeout_ms = 5000;
	assert_int_equal(mu_store_client_connect(&o, &raw), 0);
	assert_int_equal(mu_store_set(raw, "unprefixed", "2", 1), 0);
	assert_int_equal(mu_store_list(c, &keys, &n), 0);
	assert_int_equal(n, 2);
	assert_true(has_value(keys, n, "a"));
	assert_true(has_value(keys, n, "nixl/agents/metadata/A/NULL_AGENT"));
	free_values(keys, n);
	assert_int_equal(mu_store_list(raw, &keys, &n), 0);
	assert_int_equal(n, 3);
	assert_true(has_value(keys, n, "/a"));
	assert_true(has_value(keys, n, "unprefixed"));
	free_values(keys, n);
	/* the connection is still good for what follows */
	assert_int_equal(has_key(port, "a"), 1);
	v1 = client_on(port, MU_STORE_DIALECT_V1, 5000);
	keys = (void *)1;
	assert_int_equal(mu_store_list(v1, &keys, &n), -ENOTSUP);
	assert_null(keys);
	assert_int_equal(mu_store_set(v1, "after", "3", 1), 0); /* still usable */
	assert_int_equal(has_key(port, "after"), 1);
	mu_store_client_close(v1);
	mu_store_client_close(raw);
	mu_store_client_close(c);
	mu_store_server_free(s);
}

/*
 * A v2 server that answers the handshake, then the LIST request with
 * `reply` (NULL: closes the connection, as torch's do for an opcode they
 * do not know).
 */
typedef struct {
	int fd, port;
	const char *reply;
	size_t len;
	pthread_t th;
} lister_t;

static void *lister_main(void *arg)
{
	lister_t *l = arg;
	unsigned char buf[64];
	int c = accept(l->fd, NULL, NULL);

	if (c < 0)
		return NULL;
	if (read(c, buf, sizeof(buf)) >= 10) {
		(void)!write(c, buf + 6, 4);          /* PING's echo */
		if (read(c, buf, sizeof(buf)) > 0 && l->reply != NULL)
			(void)!write(c, l->reply, l->len);
	}
	poll(NULL, 0, 200);
	close(c);
	return NULL;
}

static void list_from(const char *reply, size_t len, int want)
{
	lister_t l = {.reply = reply, .len = len};
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	mu_store_client_t *c;
	mu_store_value_t *keys;
	size_t n = 7;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	l.fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(bind(l.fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(l.fd, 8), 0);
	getsockname(l.fd, (struct sockaddr *)&sa, &sl);
	l.port = ntohs(sa.sin_port);
	pthread_create(&l.th, NULL, lister_main, &l);
	c = client_on(l.port, MU_STORE_DIALECT_V2, 2000);
	assert_int_equal(mu_store_list(c, &keys, &n), want);
	assert_null(keys);
	assert_int_equal(n, 0);
	mu_store_client_close(c);
	pthread_join(l.th, NULL);
	close(l.fd);
}

/* A server without LIST says so as -ENOTSUP; a count beyond what could
 * fit in the reply budget is refused before allocating for it. */
static void test_list_refused_or_lied_about(void **state)
{
	(void)state;
	list_from(NULL, 0, -ENOTSUP);
	list_from("\xff\xff\xff\xff\xff\xff\xff\x3f", 8, MU_ETOOBIG);
	list_from("\x02\0\0\0\0\0\0\0" "\x01\0\0\0\0\0\0\0/", 17, MU_EEOF); /* cut short */
}

/* mu__store_client_from_fd (what the fuzz driver runs on): a client on a
 * socketpair end reads replies queued ahead in order, writes its requests
 * there, and after a failure says -ENOTCONN rather than dial anywhere. */
static void test_client_from_fd(void **state)
{
	mu_store_client_opts_t o;
	mu_store_client_t *c;
	mu_store_value_t v;
	unsigned char req[64], echo[4];
	const char add_v1[] = "\x03" "\x02\0\0\0\0\0\0\0/n" "\x05\0\0\0\0\0\0\0";
	int64_t n = 0;
	int sv[2];

	(void)state;
	mu_store_client_opts_init(&o);
	o.timeout_ms = 2000;

	/* v1: ADD's i64, then GET's STOP_WAITING and a value cut short */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(write(sv[1], "\x2a\0\0\0\0\0\0\0" "\x00" "\x05\0\0\0\0\0\0\0ab", 19), 19);
	shutdown(sv[1], SHUT_WR);
	o.dialect = MU_STORE_DIALECT_V1;
	assert_int_equal(mu__store_client_from_fd(&o, sv[0], &c), 0);
	assert_int_equal(mu_store_client_dialect(c), MU_STORE_DIALECT_V1);
	assert_int_equal(mu_store_add(c, "n", 5, &n), 0);
	assert_true(n == 42);
	assert_int_equal(read(sv[1], req, sizeof(add_v1) - 1), (ssize_t)sizeof(add_v1) - 1);
	assert_memory_equal(req, add_v1, sizeof(add_v1) - 1);
	assert_int_equal(mu_store_get(c, "k", &v), MU_EEOF);
	assert_null(v.data);
	assert_int_equal(mu_store_num_keys(c, &n), -ENOTCONN);
	mu_store_client_close(c);
	close(sv[1]);

	/* v2: the handshake reads PING's echo first */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	mu_le32_put(echo, mu__store_client_nonce());
	assert_int_equal(write(sv[1], echo, 4), 4);
	assert_int_equal(write(sv[1], "\x07\0\0\0\0\0\0\0", 8), 8);
	shutdown(sv[1], SHUT_WR);
	o.dialect = MU_STORE_DIALECT_V2;
	assert_int_equal(mu__store_client_from_fd(&o, sv[0], &c), 0);
	assert_int_equal(mu_store_num_keys(c, &n), 0);
	assert_true(n == 7);
	assert_int_equal(read(sv[1], req, sizeof(req)), 11); /* VALIDATE, PING, GETNUMKEYS */
	assert_int_equal(req[0], 0);
	assert_int_equal(req[5], 0x0d);
	assert_memory_equal(req + 6, echo, 4);
	assert_int_equal(req[10], 0x07);
	mu_store_client_close(c);
	close(sv[1]);

	/* a wrong echo fails the handshake; AUTO cannot be taken: the fd is
	 * the client's either way, closed on failure */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(write(sv[1], "\0\0\0\0", 4), 4);
	assert_int_equal(mu__store_client_from_fd(&o, sv[0], &c), MU_EPROTO);
	assert_null(c);
	assert_int_equal(fcntl(sv[0], F_GETFD), -1);
	close(sv[1]);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	o.dialect = MU_STORE_AUTO;
	assert_int_equal(mu__store_client_from_fd(&o, sv[0], &c), MU_EARG);
	assert_null(c);
	assert_int_equal(fcntl(sv[0], F_GETFD), -1);
	close(sv[1]);
}

/* A reply length of 2^64-1 under max_value_bytes = SIZE_MAX ("no limit")
 * once wrapped the value's allocation (n + 1) to 0 bytes, and the value
 * was received into it: a heap overflow (found by fuzz_store_client). */
static void test_value_length_that_wraps(void **state)
{
	mu_store_client_opts_t o;
	mu_store_client_t *c;
	mu_store_value_t v = {"", 1};
	int sv[2];

	(void)state;
	mu_store_client_opts_init(&o);
	o.timeout_ms = 2000;
	o.dialect = MU_STORE_DIALECT_V1;
	o.max_value_bytes = SIZE_MAX;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(write(sv[1], "\xff\xff\xff\xff\xff\xff\xff\xff" "abcd", 12), 12);
	shutdown(sv[1], SHUT_WR);
	assert_int_equal(mu__store_client_from_fd(&o, sv[0], &c), 0);
	assert_int_equal(mu_store_compare_set(c, "k", "", 0, "d", 1, &v), MU_ETOOBIG);
	assert_null(v.data);
	assert_int_equal(v.len, 0);
	mu_store_client_close(c);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_restarted_on_the_same_port_v2),
		cmocka_unit_test(test_restarted_on_the_same_port_v1),
		cmocka_unit_test(test_reply_that_never_comes_fails),
		cmocka_unit_test(test_unasked_bytes_drop_the_connection),
		cmocka_unit_test(test_list),
		cmocka_unit_test(test_list_refused_or_lied_about),
		cmocka_unit_test(test_client_from_fd),
		cmocka_unit_test(test_value_length_that_wraps),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
