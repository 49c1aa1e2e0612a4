/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/core/conn.c: the budget rule (docs/internals/
 * budgets.md) and the end of a connection. A tiny server on this thread's
 * loop answers every input byte with a 4-byte reply (a PING flood's
 * shape); clients are plain sockets that read, or do not.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mu_test.h"

#include "core/accept_int.h"
#include "core/conn_int.h"

typedef struct {
	mu__conn_t conn;
	int closed, freed, err;
	size_t processed; /* input bytes answered */
	int dones;        /* done callbacks run for tail writes */
} tconn_t;

static uv_loop_t loop;
static mu__listener_t listener;
static int port;
static mu__budget_t budget;
static char scratch[65536];
static tconn_t *conns[8];
static int nconns;
static char tail[64 << 10];
static size_t reply_len = 4; /* bytes of each reply (from tail) */

static void t_done(void *arg)
{
	((tconn_t *)arg)->dones++;
}

/* Each input byte: a reply of reply_len bytes (copied), until paused. */
static void t_data(mu__conn_t *c)
{
	tconn_t *t = (tconn_t *)c;
	size_t i = 0;

	while (i < c->in.len && !c->paused && !c->closing) {
		assert_int_equal(mu__conn_send(c, tail, reply_len, NULL, 0, NULL, NULL), 0);
		i++;
	}
	t->processed += i;
	mu__buf_consume(&c->in, i);
}

static void t_close(mu__conn_t *c, int err)
{
	tconn_t *t = (tconn_t *)c;

	t->closed = 1;
	t->err = err;
}

static void t_free(mu__conn_t *c)
{
	((tconn_t *)c)->freed = 1;
}

static void t_timeout(mu__conn_t *c)
{
	(void)c;
}

static const mu__conn_ops_t ops = {t_data, t_close, t_free, t_timeout, NULL, NULL, NULL};

static void on_connection(mu__listener_t *l, mu_stream_t *st)
{
	tconn_t *t = calloc(1, sizeof(*t));

	(void)l;
	assert_non_null(t);
	assert_true(nconns < 8);
	conns[nconns++] = t;
	assert_int_equal(mu__conn_accept(&t->conn, &loop, st, &ops, 1 << 20, scratch, sizeof(scratch),
	                                 &budget), 0);
}

/* Run the loop for about ms milliseconds. */
static void spin(int ms)
{
	struct timespec ts = {0, 1000000};
	int i;

	for (i = 0; i < ms; i++) {
		uv_run(&loop, UV_RUN_NOWAIT);
		nanosleep(&ts, NULL);
	}
}

static void setup_server(size_t conn_bytes, size_t total_bytes, double grace)
{
	mu__listen_opts_t lo = {"127.0.0.1", 0, 0, 1, 16};
	mu_budget_t lim = {conn_bytes, total_bytes, grace};

	assert_int_equal(uv_loop_init(&loop), 0);
	mu__budget_init(&budget, &lim, "test");
	assert_int_equal(mu__listener_start(&listener, &loop, &lo, NULL, "test", on_connection,
	                                    &port), 0);
	nconns = 0;
}

static void free_conns(void)
{
	int i;

	for (i = 0; i < nconns; i++) {
		assert_true(conns[i]->freed);
		free(conns[i]);
	}
	nconns = 0;
}

/* Close everything; the loop must end with no handle left (libuv's
 * MAKE_VALGRIND_HAPPY) and the budget at zero. */
static void teardown_server(void)
{
	int i;

	for (i = 0; i < nconns; i++)
		mu__conn_close(&conns[i]->conn, 0);
	mu__listener_close(&listener, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&loop), 0);
	assert_int_equal(budget.total, 0);
	free_conns();
}

/* A client with a small receive window (set before connecting, so the
 * window is small from the start). */
static int client(void)
{
	struct sockaddr_in sa = {0};
	int fd = socket(AF_INET, SOCK_STREAM, 0), rcv = 4096;

	assert_true(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	spin(20);
	return fd;
}

/* Send up to n bytes without blocking while the loop runs; how many went. */
static size_t flood(int fd, size_t n, int ms)
{
	static char junk[65536];
	size_t sent = 0;
	int i;

	for (i = 0; i < ms && sent < n; i++) {
		size_t k = n - sent < sizeof(junk) ? n - sent : sizeof(junk);
		ssize_t w = send(fd, junk, k, MSG_NOSIGNAL);

		if (w > 0)
			sent += (size_t)w;
		spin(1);
	}
	return sent;
}

/* Read (and drop) what is there while the loop runs; bytes read. */
static size_t drain(int fd, int ms)
{
	char buf[65536];
	size_t got = 0;
	int i;

	for (i = 0; i < ms; i++) {
		ssize_t r;

		while ((r = recv(fd, buf, sizeof(buf), 0)) > 0)
			got += (size_t)r;
		spin(1);
	}
	return got;
}

static void test_non_reader_is_paused_then_resumed(void **state)
{
	tconn_t *t;
	size_t held, got, sent;
	int fd;

	(void)state;
	reply_len = 256; /* past what the kernel's buffers take in a moment */
	setup_server(64 << 10, 1 << 20, 60);
	fd = client();
	sent = flood(fd, 512 << 10, 1500);
	assert_int_equal(nconns, 1);
	t = conns[0];
	/* it was stopped at its budget and holds no more than that and the
	 * last growth of the buffer its replies are gathered in (the kernel
	 * may have taken some since) */
	assert_true(t->conn.paused);
	held = t->conn.out_bytes;
	assert_true(held > (32u << 10));  /* not yet back to half of it */
	assert_true(held <= (128u << 10) + 1024);
	assert_true(t->processed < sent);
	assert_int_equal(budget.total, mu__conn_held(&t->conn));
	/* reading its replies, it is read again, and everything is answered */
	got = drain(fd, 1500);
	got += drain(fd, 500);
	assert_false(t->conn.paused);
	assert_int_equal(t->processed, sent);
	assert_int_equal(got, sent * reply_len);
	reply_len = 4;
	close(fd);
	spin(50);
	assert_true(t->closed);
	assert_int_equal(t->err, 0);
	teardown_server();
}

static void test_grace_closes_a_non_reader(void **state)
{
	tconn_t *t;
	int fd;

	(void)state;
	/* replies of 1 KiB: the kernel's buffers (which the server may fill:
	 * they are not its memory) are full after a few thousand */
	reply_len = 1024;
	setup_server(256 << 10, 1 << 20, 0.2);
	fd = client();
	flood(fd, 64 << 10, 1000);
	t = conns[0];
	spin(400);
	reply_len = 4;
	assert_true(t->closed);
	assert_int_equal(t->err, -ENOBUFS);
	assert_int_equal(budget.cut, 1);
	spin(20);
	assert_int_equal(budget.total, 0);
	close(fd);
	teardown_server();
}

static void test_shared_tail_is_charged_once(void **state)
{
	tconn_t *t;
	size_t one;
	int fd, i;

	(void)state;
	setup_server(1 << 20, 4 << 20, 60);
	fd = client();
	t = conns[0];
	mu__conn_hold(&t->conn, 1); /* this test sends; it does not answer */
	assert_int_equal(mu__conn_send(&t->conn, "h", 1, tail, sizeof(tail), t_done, t), 0);
	one = t->conn.out_bytes;
	for (i = 0; i < 9; i++)
		assert_int_equal(mu__conn_send(&t->conn, "h", 1, tail, sizeof(tail), t_done, t), 0);
	/* ten writes of one 64 KiB buffer: one copy of it, ten writes' overhead */
	assert_true(t->conn.out_bytes < one + 9 * 512);
	assert_int_equal(budget.total, mu__conn_held(&t->conn));
	assert_int_equal(drain(fd, 1000), 10 * (1 + sizeof(tail)));
	assert_int_equal(t->dones, 10);
	assert_int_equal(t->conn.out_bytes, 0);
	close(fd);
	teardown_server();
}

static void test_pushing_past_twice_the_budget_cuts_off(void **state)
{
	tconn_t *t;
	int fd, rc = 0, i;

	(void)state;
	setup_server(64 << 10, 1 << 20, 60);
	fd = client();
	t = conns[0];
	/* sends that are no answer to the peer (not from on_data), as a
	 * store's watch events are: the peer's reading less cannot stop them */
	for (i = 0; i < 1024; i++) {
		rc = mu__conn_send(&t->conn, NULL, 0, tail, sizeof(tail), NULL, NULL);
		if (rc != 0)
			break;
		spin(1);
	}
	assert_int_equal(rc, -ENOBUFS);
	assert_true(t->conn.out_bytes <= 2 * (64u << 10) + 512);
	assert_int_equal(mu__conn_send(&t->conn, "x", 1, NULL, 0, NULL, NULL), -ENOBUFS);
	spin(20);
	assert_true(t->closed);
	assert_int_equal(t->err, -ENOBUFS);
	close(fd);
	teardown_server();
}

static void test_owned_state_counts(void **state)
{
	tconn_t *t;
	int fd;

	(void)state;
	setup_server(64 << 10, 1 << 20, 60);
	fd = client();
	t = conns[0];
	mu__conn_own(&t->conn, 100 << 10);
	assert_true(t->conn.paused);
	assert_int_equal(budget.total, mu__conn_held(&t->conn));
	mu__conn_own(&t->conn, 1 << 10);
	assert_false(t->conn.paused);
	assert_int_equal(budget.total, mu__conn_held(&t->conn));
	close(fd);
	spin(50);
	assert_true(t->closed);
	teardown_server();
	assert_int_equal(budget.total, 0);
}

static void test_total_budget_pauses_and_resumes(void **state)
{
	tconn_t *a, *b;
	size_t before;
	int fa, fb;

	(void)state;
	setup_server(64 << 10, 96 << 10, 60);
	fa = client();
	fb = client();
	a = conns[0];
	b = conns[1];
	mu__conn_own(&a->conn, 60 << 10); /* within its own budget */
	assert_false(a->conn.paused);
	flood(fb, 256 << 10, 500);           /* b's replies take the total past */
	/* paused for the total, within its own budget, waiting for the total */
	assert_true(b->conn.paused);
	assert_true(b->conn.out_bytes < (64u << 10));
	assert_true(budget.total > (96u << 10));
	assert_false(mu__list_empty(&b->conn.wait_node));
	/* a lets go: the server is within its total, b is read again */
	before = b->processed;
	mu__conn_own(&a->conn, 0);
	drain(fb, 500);
	assert_true(b->processed > before);
	close(fa);
	close(fb);
	spin(50);
	teardown_server();
}

static void test_eof_closes_once_the_replies_are_out(void **state)
{
	char buf[64];
	tconn_t *t;
	size_t got = 0;
	ssize_t r;
	int fd, i;

	(void)state;
	setup_server(64 << 10, 1 << 20, 60);
	/* connect and close: gone at once */
	fd = client();
	close(fd);
	spin(20);
	assert_true(conns[0]->closed);
	/* send, half-close, then read: every reply, then the end */
	fd = client();
	t = conns[1];
	assert_int_equal(send(fd, "abc", 3, 0), 3);
	shutdown(fd, SHUT_WR);
	for (i = 0; i < 500 && !t->closed; i++) {
		while ((r = recv(fd, buf, sizeof(buf), 0)) > 0)
			got += (size_t)r;
		spin(1);
	}
	assert_true(t->closed);
	assert_int_equal(t->err, 0);
	while ((r = recv(fd, buf, sizeof(buf), 0)) > 0)
		got += (size_t)r;
	assert_int_equal(got, 12);
	assert_int_equal(r, 0); /* EOF, not a reset */
	close(fd);
	teardown_server();
}

static void test_budget_check(void **state)
{
	mu_budget_t b;

	(void)state;
	mu_budget_init(&b);
	assert_int_equal(b.conn_bytes, MU_BUDGET_CONN_DEFAULT);
	assert_int_equal(b.total_bytes, MU_BUDGET_TOTAL_DEFAULT);
	assert_int_equal(mu_budget_check(&b), 0);
	b.total_bytes = b.conn_bytes - 1;
	assert_int_equal(mu_budget_check(&b), MU_EARG);
	mu_budget_init(&b);
	b.grace = 0;
	assert_int_equal(mu_budget_check(&b), MU_EARG);
	mu_budget_init(&b);
	b.conn_bytes = 0;
	assert_int_equal(mu_budget_check(&b), MU_EARG);
	assert_int_equal(mu_budget_check(NULL), MU_EARG);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN); /* as every muster server does */
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_non_reader_is_paused_then_resumed),
		cmocka_unit_test(test_grace_closes_a_non_reader),
		cmocka_unit_test(test_shared_tail_is_charged_once),
		cmocka_unit_test(test_pushing_past_twice_the_budget_cuts_off),
		cmocka_unit_test(test_owned_state_counts),
		cmocka_unit_test(test_total_budget_pauses_and_resumes),
		cmocka_unit_test(test_eof_closes_once_the_replies_are_out),
		cmocka_unit_test(test_budget_check),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
