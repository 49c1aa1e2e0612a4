/* SPDX-License-Identifier: MIT */
/*
 * `muster bench store`: a load generator for any TCPStore (muster's or
 * torch's), speaking either dialect, so both servers are measured by the
 * same code.
 *
 * Mix mode: N clients each cycle through the operations of --mix on keys of
 * their own (set = SET, no reply, its latency is the send; get = WAIT then
 * GET, two round trips, as torch's client does; add = ADD), and report
 * ops/s and p50/p99 latency per operation.
 * Rendezvous mode (--rendezvous N): N clients connect, each ADDs 1 to a
 * counter, the one that brings it to N SETs a barrier key, and all WAIT for
 * it: the time from the first connect to the last release is what a job of
 * N ranks spends meeting. Clients connect without blocking and run
 * concurrently; at most RDV_WINDOW of them are connecting or awaiting their
 * ADD reply at any moment (a burst of 10,000 SYNs would overflow any listen
 * backlog and time the kernel's SYN retries instead of the store).
 *
 * Single-threaded over poll(): pump() drives every client's state machine.
 * Requests are encoded by the public codec (mu_store_request_encode) into
 * one scratch buffer: each message goes out whole before the next is built.
 * Replies are read here.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "muster/common.h"
#include "muster/store.h"
#include "cli/cli_int.h"
#include "core/buf_int.h"
#include "core/endian_int.h"
#include "core/net_int.h"
#include "core/sock_int.h"
#include "core/time_int.h"

enum { OP_SET, OP_GET, OP_ADD, NOPS };
static const char *op_names[NOPS] = {"set", "get", "add"};

/* Rendezvous clients connecting or awaiting their ADD reply, at most. */
#define RDV_WINDOW 256

/*
 * What the client waits for next. R_NONE: nothing; in mix mode that means
 * "ready to start the next operation once the socket is writable".
 */
typedef enum {
	R_NONE,
	R_STOP,     /* STOP_WAITING of the WAIT before a GET */
	R_VALUE,    /* GET's value */
	R_I64,      /* ADD's result (mix) */
	R_CONNECT,  /* rendezvous: non-blocking connect in progress */
	R_ECHO,     /* rendezvous, v2: the PING echo */
	R_COUNT,    /* rendezvous: the counter after its ADD */
	R_BARRIER   /* rendezvous: STOP_WAITING of the barrier */
} expect_t;

typedef struct {
	int fd, id;      /* fd: st's socket, for poll; -1 before */
	mu_stream_t *st;
	int step;        /* index into the mix */
	expect_t expect;
	int64_t t0_us;   /* start of the operation being timed */
	mu__buf_t in;
	int done;
} bclient_t;

typedef struct {
	char host[256];
	int port;
	mu_store_dialect_t d;
	int mix[8], nmix;
	size_t vbytes;
	char *value;
	int64_t *lat[NOPS];
	size_t nlat[NOPS], cap[NOPS];
	long ops;
	int measuring;
	int rdv_n, released;
	int rdv_started, rdv_joined;  /* connects begun; ADD replies read */
	char rdv_count[64], rdv_go[64];
	size_t rdv_count_len, rdv_go_len;
	struct sockaddr_storage addr; /* the target, resolved once */
	socklen_t addrlen;
	int64_t joined_us, last_release_us;
	unsigned char *scratch;       /* the message being built */
	size_t scratch_cap;
} sbench_t;

#define SCRATCH_EXTRA 1024 /* past the value: a SET's, or three requests' keys */

/* One message of one or more requests, built in the bench's scratch. */
typedef struct {
	unsigned char *p;
	size_t len, cap;
} msg_t;

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void record(sbench_t *b, int op, int64_t us)
{
	if (!b->measuring)
		return;
	b->ops++;
	if (b->nlat[op] == b->cap[op]) {
		size_t n = b->cap[op] ? b->cap[op] * 2 : 4096;
		int64_t *p = realloc(b->lat[op], n * sizeof(*p));

		if (p == NULL)
			return;
		b->lat[op] = p;
		b->cap[op] = n;
	}
	b->lat[op][b->nlat[op]++] = us;
}

static msg_t message(sbench_t *b)
{
	return (msg_t){b->scratch, 0, b->scratch_cap};
}

/* Append the request of op on key (klen bytes, may be 0) to m, with
 * whatever else the request carries set by the caller in *r first. */
static int add_req(sbench_t *b, msg_t *m, mu_store_request_t *r, mu_store_op_t op,
                   const char *key, size_t klen)
{
	size_t n = 0;
	int rc;

	r->dialect = b->d;
	r->op = op;
	r->key = key;
	r->key_len = klen;
	rc = mu_store_request_encode(r, m->p + m->len, m->cap - m->len, &n);
	if (rc == 0)
		m->len += n;
	return rc;
}

static int add_simple(sbench_t *b, msg_t *m, mu_store_op_t op, const char *key, size_t klen)
{
	mu_store_request_t r;

	mu_store_request_init(&r);
	return add_req(b, m, &r, op, key, klen);
}

/* The client's own key NAME: /bench/ID/NAME. */
static size_t client_key(char *key, size_t n, int id, const char *name)
{
	return (size_t)snprintf(key, n, "/bench/%d/%s", id, name);
}

static int send_msg(bclient_t *c, const msg_t *m)
{
	return mu__sock_send_all(c->st, m->p, m->len, mu__deadline(30000));
}

static int send_set(sbench_t *b, bclient_t *c)
{
	char key[64];
	msg_t m = message(b);
	mu_store_request_t r;
	size_t klen;
	int rc;

	c->t0_us = now_us();
	klen = client_key(key, sizeof(key), c->id, "k");
	mu_store_request_init(&r);
	r.value = b->value;
	r.value_len = b->vbytes;
	rc = add_req(b, &m, &r, MU_STORE_OP_SET, key, klen);
	if (rc == 0)
		rc = send_msg(c, &m);
	record(b, OP_SET, now_us() - c->t0_us); /* no reply: the send is all */
	return rc;
}

/*
 * Start the client's next operation of the mix. A SET has no reply, so the
 * operation after it starts at once, but at most one round of the mix runs
 * per call: a mix of sets only then returns with R_NONE and pump() calls
 * again when the socket is writable, rather than never returning.
 */
static int next_op(sbench_t *b, bclient_t *c)
{
	char key[64];
	msg_t m = message(b);
	mu_store_request_t r;
	int i, op = OP_SET, rc = 0;

	c->expect = R_NONE;
	for (i = 0; i < b->nmix && rc == 0; i++) {
		op = b->mix[c->step++ % b->nmix];
		if (op != OP_SET)
			break;
		rc = send_set(b, c);
	}
	if (rc != 0 || op == OP_SET)
		return rc;
	c->t0_us = now_us();
	mu_store_request_init(&r);
	if (op == OP_GET) { /* WAIT first, as torch's client does */
		rc = add_req(b, &m, &r, MU_STORE_OP_WAIT, key, client_key(key, sizeof(key), c->id, "k"));
		c->expect = R_STOP;
	} else {
		r.delta = 1;
		rc = add_req(b, &m, &r, MU_STORE_OP_ADD, key, client_key(key, sizeof(key), c->id, "n"));
		c->expect = R_I64;
	}
	return rc != 0 ? rc : send_msg(c, &m);
}

static int send_get(sbench_t *b, bclient_t *c)
{
	char key[64];
	msg_t m = message(b);
	int rc = add_simple(b, &m, MU_STORE_OP_GET, key, client_key(key, sizeof(key), c->id, "k"));

	c->expect = R_VALUE;
	return rc != 0 ? rc : send_msg(c, &m);
}

static int rdv_counted(sbench_t *b, bclient_t *c, int64_t v);

static size_t reply_size(expect_t e)
{
	switch (e) {
	case R_VALUE: /* its length, first */
	case R_I64:
	case R_COUNT:
		return 8;
	case R_ECHO:
		return 4;
	default:
		return 1;
	}
}

/* Consume whole replies from c->in; returns -1 on a protocol error. */
static int on_input(sbench_t *b, bclient_t *c)
{
	for (;;) {
		size_t need = reply_size(c->expect);
		int64_t v;

		if (c->expect == R_NONE || c->expect == R_CONNECT || c->in.len < need)
			return 0;
		if (c->expect == R_VALUE) {
			uint64_t n = mu_le64_get(c->in.data);

			if (c->in.len < 8 + n)
				return 0;
			need = 8 + (size_t)n;
		}
		v = need >= 8 ? (int64_t)mu_le64_get(c->in.data) : 0;
		mu__buf_consume(&c->in, need);
		switch (c->expect) {
		case R_STOP:
			if (send_get(b, c) != 0)
				return -1;
			continue;
		case R_VALUE:
			record(b, OP_GET, now_us() - c->t0_us);
			break;
		case R_I64:
			record(b, OP_ADD, now_us() - c->t0_us);
			break;
		case R_ECHO:
			c->expect = R_COUNT;
			continue;
		case R_COUNT:
			if (rdv_counted(b, c, v) != 0)
				return -1;
			continue;
		default: /* R_BARRIER: released */
			c->expect = R_NONE;
			c->done = 1;
			b->released++;
			b->last_release_us = now_us();
			return 0;
		}
		c->expect = R_NONE;
		if (b->rdv_n == 0 && next_op(b, c) != 0)
			return -1;
	}
}

static int drain(sbench_t *b, bclient_t *c)
{
	char tmp[65536];
	size_t n = 0;
	int rc = mu__stream_recv(c->st, tmp, sizeof(tmp), &n);

	if (rc != 0 && rc != -EAGAIN)
		return -1;
	if (n > 0 && mu__buf_append(&c->in, tmp, n) != 0)
		return -1;
	return on_input(b, c);
}

/* v2's opening, as torch 2.x sends it: VALIDATE and PING (nonce id). */
static int add_hello(sbench_t *b, msg_t *m, int id)
{
	mu_store_request_t r;
	int rc = add_simple(b, m, MU_STORE_OP_VALIDATE, NULL, 0);

	mu_store_request_init(&r);
	r.nonce = (uint32_t)id;
	return rc != 0 ? rc : add_req(b, m, &r, MU_STORE_OP_PING, NULL, 0);
}

/* Connect and (v2) validate; blocking, with a deadline. */
static int open_client(sbench_t *b, bclient_t *c, int id)
{
	unsigned char echo[4];
	msg_t m = message(b);
	int rc;

	memset(c, 0, sizeof(*c));
	c->id = id;
	mu__buf_init(&c->in, (b->vbytes + 64) * 2 + 65536);
	c->fd = -1;
	rc = mu__sock_connect(b->host, b->port, NULL, mu__deadline(30000), &c->st);
	if (rc != 0)
		return rc;
	c->fd = mu__stream_fd(c->st);
	if (b->d == MU_STORE_DIALECT_V1)
		return 0;
	rc = add_hello(b, &m, id);
	if (rc == 0)
		rc = send_msg(c, &m);
	if (rc == 0)
		rc = mu__sock_recv_all(c->st, echo, 4, mu__deadline(30000));
	return rc;
}

static int rdv_admit(sbench_t *b, bclient_t *cl);
static int rdv_connected(sbench_t *b, bclient_t *c);

/* The poll events a client waits for; 0 for none. */
static short want(const sbench_t *b, const bclient_t *c)
{
	if (c->done || c->fd < 0)
		return 0;
	if (c->expect == R_CONNECT || (c->expect == R_NONE && b->rdv_n == 0))
		return POLLOUT;
	return POLLIN;
}

/* Move a client on after poll() reported it. */
static int service(sbench_t *b, bclient_t *c)
{
	if (c->expect == R_CONNECT)
		return rdv_connected(b, c);
	if (c->expect == R_NONE && b->rdv_n == 0)
		return next_op(b, c);
	return drain(b, c);
}

/*
 * Poll every client until `until` returns true or the deadline passes; in
 * rendezvous mode, start new clients as the window allows.
 */
static int pump(sbench_t *b, bclient_t *cl, int n, int64_t deadline_ms,
                int (*until)(sbench_t *))
{
	struct pollfd *pf = calloc((size_t)n, sizeof(*pf));
	int i, rc = 0;

	if (pf == NULL)
		return -ENOMEM;
	while (rc == 0 && !until(b) && mu__now_ms() < deadline_ms) {
		if (b->rdv_n > 0 && (rc = rdv_admit(b, cl)) != 0)
			break;
		for (i = 0; i < n; i++) {
			pf[i].events = want(b, &cl[i]);
			pf[i].fd = pf[i].events != 0 ? cl[i].fd : -1;
			pf[i].revents = 0;
		}
		if (poll(pf, (nfds_t)n, 50) < 0 && errno != EINTR)
			rc = -errno;
		for (i = 0; rc == 0 && i < n; i++)
			if (pf[i].revents != 0 && (rc = service(b, &cl[i])) == -1)
				rc = -EPROTO; /* on_input()'s "not a reply" */
	}
	free(pf);
	return rc;
}

static int never(sbench_t *b)
{
	(void)b;
	return 0;
}

static int all_released(sbench_t *b)
{
	return b->released == b->rdv_n;
}

static int cmp64(const void *x, const void *y)
{
	int64_t a = *(const int64_t *)x, c = *(const int64_t *)y;

	return (a > c) - (a < c);
}

static double pct_ms(const int64_t *v, size_t n, double p)
{
	return n == 0 ? 0 : (double)v[(size_t)(p * (double)(n - 1))] / 1000.0;
}

static int run_mix(sbench_t *b, int nclients, double secs, int json)
{
	bclient_t *cl = calloc((size_t)nclients, sizeof(*cl));
	int i, rc = 0;

	if (cl == NULL)
		return -ENOMEM;
	for (i = 0; i < nclients && rc == 0; i++)
		rc = open_client(b, &cl[i], i);
	for (i = 0; i < nclients && rc == 0; i++)
		rc = next_op(b, &cl[i]); /* the first get finds its key: set runs first */
	if (rc == 0)
		rc = pump(b, cl, nclients, mu__now_ms() + 1000, never); /* warm-up */
	b->measuring = 1;
	if (rc == 0)
		rc = pump(b, cl, nclients, mu__now_ms() + (int64_t)(secs * 1000), never);
	b->measuring = 0;
	for (i = 0; i < nclients; i++) {
		mu__sock_close(cl[i].st);
		mu__buf_free(&cl[i].in);
	}
	free(cl);
	if (rc != 0)
		return rc;
	if (json)
		printf("{\"mode\": \"mix\", \"clients\": %d, \"seconds\": %.1f, \"ops_per_s\": %.1f",
		       nclients, secs, b->ops / secs);
	else
		printf("mix: %d clients, %.0f s: %.0f ops/s\n", nclients, secs, b->ops / secs);
	for (i = 0; i < NOPS; i++) {
		if (b->nlat[i] == 0)
			continue;
		qsort(b->lat[i], b->nlat[i], sizeof(int64_t), cmp64);
		if (json)
			printf(", \"%s_p50_ms\": %.3f, \"%s_p99_ms\": %.3f", op_names[i],
			       pct_ms(b->lat[i], b->nlat[i], 0.5), op_names[i],
			       pct_ms(b->lat[i], b->nlat[i], 0.99));
		else
			printf("  %-4s %9zu ops   p50 %.3f ms   p99 %.3f ms\n", op_names[i],
			       b->nlat[i], pct_ms(b->lat[i], b->nlat[i], 0.5),
			       pct_ms(b->lat[i], b->nlat[i], 0.99));
	}
	if (json)
		printf("}\n");
	return 0;
}

/* Resolve the target once, for the non-blocking connects. */
static int rdv_resolve(sbench_t *b)
{
	struct addrinfo hints, *res = NULL;
	char service[8];

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	snprintf(service, sizeof(service), "%d", b->port);
	if (getaddrinfo(b->host, service, &hints, &res) != 0 || res == NULL)
		return MU_ERESOLVE;
	memcpy(&b->addr, res->ai_addr, res->ai_addrlen);
	b->addrlen = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

/* Begin client c's connect; it goes on in pump(). */
static int rdv_connect(sbench_t *b, bclient_t *c)
{
	int one = 1;

	c->fd = socket(b->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -errno;
	if (mu__stream_tcp_new(c->fd, &c->st) != 0) {
		c->fd = -1;
		return MU_ENOMEM;
	}
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->expect = R_CONNECT;
	if (connect(c->fd, (struct sockaddr *)&b->addr, b->addrlen) == 0)
		return rdv_connected(b, c);
	return errno == EINPROGRESS ? 0 : -errno;
}

static int rdv_admit(sbench_t *b, bclient_t *cl)
{
	int rc = 0;

	while (rc == 0 && b->rdv_started < b->rdv_n &&
	       b->rdv_started - b->rdv_joined < RDV_WINDOW)
		rc = rdv_connect(b, &cl[b->rdv_started++]);
	return rc;
}

/* Connected: (v2: VALIDATE and PING, as torch sends them, then) ADD 1. */
static int rdv_connected(sbench_t *b, bclient_t *c)
{
	int err = 0, rc = 0;
	socklen_t len = sizeof(err);
	msg_t m = message(b);
	mu_store_request_t r;

	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
		return -errno;
	if (err != 0)
		return -err;
	if (b->d == MU_STORE_DIALECT_V2)
		rc = add_hello(b, &m, c->id);
	mu_store_request_init(&r);
	r.delta = 1;
	if (rc == 0)
		rc = add_req(b, &m, &r, MU_STORE_OP_ADD, b->rdv_count, b->rdv_count_len);
	if (rc != 0)
		return rc;
	c->expect = b->d == MU_STORE_DIALECT_V2 ? R_ECHO : R_COUNT;
	return send_msg(c, &m);
}

/* The ADD came back with v: the one that made it N opens the barrier; all WAIT. */
static int rdv_counted(sbench_t *b, bclient_t *c, int64_t v)
{
	msg_t m = message(b);
	mu_store_request_t r;
	int rc = 0;

	if (++b->rdv_joined == b->rdv_n)
		b->joined_us = now_us();
	if (v == b->rdv_n) {
		mu_store_request_init(&r);
		r.value = "1";
		r.value_len = 1;
		rc = add_req(b, &m, &r, MU_STORE_OP_SET, b->rdv_go, b->rdv_go_len);
	}
	if (rc == 0)
		rc = add_simple(b, &m, MU_STORE_OP_WAIT, b->rdv_go, b->rdv_go_len);
	if (rc != 0)
		return rc;
	c->expect = R_BARRIER;
	return send_msg(c, &m);
}

static int run_rendezvous(sbench_t *b, int json)
{
	int n = b->rdv_n, i, rc;
	bclient_t *cl = calloc((size_t)n, sizeof(*cl));
	int64_t t0;

	if (cl == NULL)
		return -ENOMEM;
	/* keys of this run only, so a reused server's old counter is no trap */
	t0 = now_us();
	b->rdv_count_len = (size_t)snprintf(b->rdv_count, sizeof(b->rdv_count),
	                                    "/bench/rdv/%ld-%lld/count", (long)getpid(),
	                                    (long long)t0);
	b->rdv_go_len = (size_t)snprintf(b->rdv_go, sizeof(b->rdv_go),
	                                 "/bench/rdv/%ld-%lld/go", (long)getpid(),
	                                 (long long)t0);
	for (i = 0; i < n; i++) {
		cl[i].fd = -1;
		cl[i].id = i;
		mu__buf_init(&cl[i].in, 65536);
	}
	rc = rdv_resolve(b);
	t0 = now_us();
	if (rc == 0)
		rc = pump(b, cl, n, mu__now_ms() + 120000, all_released);
	for (i = 0; i < n; i++) {
		mu__sock_close(cl[i].st);
		mu__buf_free(&cl[i].in);
	}
	free(cl);
	if (rc != 0 || b->released != n) {
		fprintf(stderr, "bench: rendezvous: %d of %d joined, %d released (%s)\n",
		        b->rdv_joined, n, b->released, mu_strerror(rc));
		return rc != 0 ? rc : -ETIMEDOUT;
	}
	if (json)
		printf("{\"mode\": \"rendezvous\", \"clients\": %d, \"window\": %d, \"join_s\": %.3f, \"total_s\": %.3f}\n",
		       n, RDV_WINDOW, (double)(b->joined_us - t0) / 1e6,
		       (double)(b->last_release_us - t0) / 1e6);
	else
		printf("rendezvous: %d clients (at most %d joining at once): all ADDed after %.3f s, all released after %.3f s\n",
		       n, RDV_WINDOW, (double)(b->joined_us - t0) / 1e6,
		       (double)(b->last_release_us - t0) / 1e6);
	return 0;
}

static int parse_mix(sbench_t *b, const char *mix)
{
	char tmp[128], *save = NULL, *tok;

	snprintf(tmp, sizeof(tmp), "%s", mix);
	for (tok = strtok_r(tmp, ",", &save); tok != NULL && b->nmix < 8;
	     tok = strtok_r(NULL, ",", &save)) {
		int i;

		for (i = 0; i < NOPS && strcmp(tok, op_names[i]) != 0; i++)
			;
		if (i == NOPS)
			return -1;
		b->mix[b->nmix++] = i;
	}
	/* a get waits for the client's own key: a set must come first */
	for (int i = 0; i < b->nmix; i++) {
		if (b->mix[i] == OP_SET)
			break;
		if (b->mix[i] == OP_GET)
			return -1;
	}
	return b->nmix > 0 ? 0 : -1;
}

int bench_store(int argc, char **argv)
{
	const char *target = NULL, *mix = "set,get,add", *dialect = "v1";
	int clients = 1, vbytes = 64, rdv = 0, json = 0, npos, rc;
	double secs = 10;
	sbench_t b;
	cli_opt_t opts[] = {
		{"target", OPT_STR, &target, "HOST:PORT", "the store to load (required)"},
		{"clients", OPT_INT, &clients, "N", "concurrent clients (default 1)"},
		{"mix", OPT_STR, &mix, "OPS", "operations each client cycles through: set,get,add"},
		{"value-bytes", OPT_INT, &vbytes, "B", "size of each value set (default 64)"},
		{"duration", OPT_DOUBLE, &secs, "SECONDS", "measured time, after 1 s of warm-up (default 10)"},
		{"dialect", OPT_STR, &dialect, "v1|v2", "protocol (default v1: torch 1.13's server speaks only that)"},
		{"rendezvous", OPT_INT, &rdv, "N", "instead: N clients meet at a barrier, timed end to end"},
		{"json", OPT_FLAG, &json, NULL, "one JSON line"},
	};
	cli_cmd_t cmd = {
		"muster bench store --target HOST:PORT [--clients N] [--mix set,get,add] [--value-bytes B]",
		"Load any TCPStore (muster's, torch's) the way torch's clients do and print\n"
		"ops/s and p50/p99 latency per operation; or, with --rendezvous N, time N\n"
		"clients meeting at a barrier (ADD a counter, the last sets a key, all WAIT).\n"
		"bench/store.sh runs it against torch 1.13's server and muster store.",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 0, 0};

	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	memset(&b, 0, sizeof(b));
	if (target == NULL || mu__split_hostport(target, b.host, sizeof(b.host), &b.port) != 0 ||
	    clients < 1 || vbytes < 0 || secs <= 0 || rdv < 0 || parse_mix(&b, mix) != 0) {
		fprintf(stderr, "muster bench store: need --target HOST:PORT, a mix of set,get,add and positive counts (see --help)\n");
		return 2;
	}
	if (strcmp(dialect, "v1") != 0 && strcmp(dialect, "v2") != 0) {
		fprintf(stderr, "muster bench store: --dialect %s is not v1 or v2\n", dialect);
		return 2;
	}
	b.d = strcmp(dialect, "v2") == 0 ? MU_STORE_DIALECT_V2 : MU_STORE_DIALECT_V1;
	b.vbytes = (size_t)vbytes;
	b.value = malloc(b.vbytes + 1);
	b.scratch_cap = b.vbytes + SCRATCH_EXTRA;
	b.scratch = malloc(b.scratch_cap);
	if (b.value == NULL || b.scratch == NULL) {
		fprintf(stderr, "muster bench store: no memory for a %d-byte value\n", vbytes);
		free(b.value);
		free(b.scratch);
		return 1;
	}
	memset(b.value, 'v', b.vbytes);
	b.rdv_n = rdv;
	mu__raise_nofile_limit();
	rc = rdv > 0 ? run_rendezvous(&b, json) : run_mix(&b, clients, secs, json);
	for (int i = 0; i < NOPS; i++)
		free(b.lat[i]);
	free(b.value);
	free(b.scratch);
	if (rc != 0)
		fprintf(stderr, "muster bench store: %s: %s\n", target, mu_strerror(rc));
	return rc == 0 ? 0 : 1;
}
