/* SPDX-License-Identifier: MIT */
/*
 * The pipeline end to end in one process: stage servers on loopback, a
 * coordinator, a model written to a temporary directory. Split runs must
 * match the whole run bit for bit; bad peers must be told why and closed
 * while everyone else goes on being served.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mu_test.h"

#include "muster/pipeline.h"
#include "core/endian_int.h"
#include "core/sock_int.h"
#include "core/time_int.h"
#include "formats/safetensors_int.h"
#include "pipeline/msg_int.h"
#include "pipeline/serve_int.h"

static char dir[64];

/* x [2,8] -> fc0 (8x16) -> relu -> fc1 (16x16) -> add skip from h0 ->
 * fc2 (16x4) -> softmax: the skip makes h0 cross a stage boundary. */
static const char *graph =
	"{\"format\":\"muster-graph\",\"version\":1,"
	"\"inputs\":[{\"name\":\"x\",\"shape\":[2,8]}],\"outputs\":[\"y\",\"h0\"],"
	"\"nodes\":["
	"{\"name\":\"fc0\",\"op\":\"gemm\",\"inputs\":[\"x\",\"W0\",\"b0\"],\"outputs\":[\"h0\"]},"
	"{\"name\":\"act\",\"op\":\"relu\",\"inputs\":[\"h0\"],\"outputs\":[\"r0\"]},"
	"{\"name\":\"fc1\",\"op\":\"gemm\",\"inputs\":[\"r0\",\"W1\",\"b1\"],\"outputs\":[\"h1\"]},"
	"{\"name\":\"skip\",\"op\":\"add\",\"inputs\":[\"h1\",\"h0\"],\"outputs\":[\"s\"]},"
	"{\"name\":\"fc2\",\"op\":\"gemm\",\"inputs\":[\"s\",\"W2\",\"b2\"],\"outputs\":[\"z\"]},"
	"{\"name\":\"sm\",\"op\":\"softmax\",\"inputs\":[\"z\"],\"outputs\":[\"y\"]}]}";

static float frand(uint32_t *s)
{
	*s = *s * 1664525u + 1013904223u;
	return (float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

static void add_tensor(mu_tensor_list_t *l, const char *name, uint32_t rank, uint64_t d0,
                       uint64_t d1, uint32_t *seed)
{
	uint64_t dims[2] = {d0, d1};
	mu_tensor_t *t;

	assert_int_equal(mu_tensor_new(name, rank, dims, &t), 0);
	for (uint64_t i = 0; i < t->numel; i++)
		t->data[i] = frand(seed);
	assert_int_equal(mu_tensor_list_push(l, t), 0);
}

static int setup(void **state)
{
	mu_tensor_list_t w;
	uint32_t seed = 7;
	char path[128];
	FILE *f;

	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/mu_pipe_XXXXXX");
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/model.json", dir);
	f = fopen(path, "w");
	fputs(graph, f);
	fclose(f);
	mu_tensor_list_init(&w);
	add_tensor(&w, "W0", 2, 8, 16, &seed);
	add_tensor(&w, "b0", 1, 16, 0, &seed);
	add_tensor(&w, "W1", 2, 16, 16, &seed);
	add_tensor(&w, "b1", 1, 16, 0, &seed);
	add_tensor(&w, "W2", 2, 16, 4, &seed);
	add_tensor(&w, "b2", 1, 4, 0, &seed);
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	assert_int_equal(mu__st_write(path, &w), 0);
	mu_tensor_list_free(&w);
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void input(mu_tensor_list_t *l)
{
	uint32_t seed = 99;

	mu_tensor_list_init(l);
	add_tensor(l, "x", 2, 2, 8, &seed);
}

typedef struct {
	int n;
	mu_stage_t *s[6];
	mu_stage_server_t *srv[6];
	char addr[6][32];
	const char *addrs[6];
} cluster_t;

static void cluster_start(cluster_t *c, int n, int io_timeout_ms)
{
	char err[512];

	c->n = n;
	for (int i = 0; i < n; i++) {
		mu_stage_server_opts_t o;

		assert_int_equal(mu_stage_load(dir, i, n, &c->s[i], err, sizeof(err)), 0);
		mu_stage_server_opts_init(&o);
		o.io_timeout_ms = io_timeout_ms;
		assert_int_equal(mu_stage_server_start(c->s[i], &o, &c->srv[i]), 0);
		snprintf(c->addr[i], sizeof(c->addr[i]), "127.0.0.1:%d", mu_stage_server_port(c->srv[i]));
		c->addrs[i] = c->addr[i];
	}
}

static void cluster_stop(cluster_t *c)
{
	for (int i = 0; i < c->n; i++) {
		mu_stage_server_free(c->srv[i]);
		mu_stage_free(c->s[i]);
	}
}

static void assert_same(const mu_tensor_list_t *a, const mu_tensor_list_t *b)
{
	assert_int_equal(a->n, b->n);
	for (size_t i = 0; i < a->n; i++) {
		assert_string_equal(a->t[i]->name, b->t[i]->name);
		assert_int_equal(a->t[i]->numel, b->t[i]->numel);
		assert_memory_equal(a->t[i]->data, b->t[i]->data, a->t[i]->numel * 4);
	}
}

static void whole(mu_tensor_list_t *out)
{
	mu_tensor_list_t in;
	mu_model_t *m;
	char err[512];

	input(&in);
	mu_tensor_list_init(out);
	assert_int_equal(mu_model_open(dir, &m, err, sizeof(err)), 0);
	assert_int_equal(mu_model_run(m, &in, out, err, sizeof(err)), 0);
	mu_model_close(m);
	mu_tensor_list_free(&in);
}

/* ---- the header ---- */

static void test_header_bytes(void **state)
{
	mu__msg_t m = {MU_MSG_FORWARD, -1004, 0x0102030405060708ULL, 7, 300, 0}, d;
	static const unsigned char want[MU_MSG_HEADER] = {
		'M', 'U', 'P', 'L', 1, 0, 2, 0, 0x14, 0xfc, 0xff, 0xff, 0, 0, 0, 0,
		8, 7, 6, 5, 4, 3, 2, 1, 7, 0, 0, 0, 0, 0, 0, 0, 0x2c, 1, 0, 0, 0, 0, 0, 0};
	unsigned char h[MU_MSG_HEADER];

	(void)state;
	mu__msg_encode(&m, h);
	assert_memory_equal(h, want, sizeof(h));
	assert_int_equal(mu__msg_decode(h, 1 << 20, &d), 0);
	assert_int_equal(d.type, MU_MSG_FORWARD);
	assert_int_equal(d.status, -1004);
	assert_int_equal(d.id, m.id);
	assert_int_equal(d.aux, 7);
	assert_int_equal(d.len, 300);
}

/* Version 2 marks a frame with a non-F32 tensor: F32 frames go out as
 * version 1 (what every peer reads), typed ones as 2, which only frame
 * types may carry. */
static void test_header_typed_frames(void **state)
{
	static const uint64_t d1[] = {1};
	mu__msg_t m = {MU_MSG_FORWARD, 0, 9, 0, 0, 0}, d;
	unsigned char h[MU_MSG_HEADER];
	mu_tensor_list_t l;
	mu_tensor_t *t;

	(void)state;
	mu_tensor_list_init(&l);
	assert_int_equal(mu_tensor_new("x", 1, d1, &t), 0);
	assert_int_equal(mu_tensor_list_push(&l, t), 0);
	mu__msg_encode_frame(&m, &l, h);
	assert_int_equal(h[4], 1);
	assert_int_equal(mu_tensor_new_typed("ids", MU_DTYPE_I64, 1, d1, &t), 0);
	assert_int_equal(mu_tensor_list_push(&l, t), 0);
	mu__msg_encode_frame(&m, &l, h);
	assert_int_equal(h[4], 2);
	assert_int_equal(mu__msg_decode(h, 1 << 20, &d), 0);
	assert_int_equal(d.type, MU_MSG_FORWARD);
	h[4] = 3;
	assert_int_equal(mu__msg_decode(h, 1 << 20, &d), MU_EPROTO);
	/* a typed frame under a version-1 header is what a version-1 reader
	 * could not read: refused; F32 frames pass under either */
	assert_int_equal(mu__msg_frame_check(1, &l), MU_EPROTO);
	assert_int_equal(mu__msg_frame_check(2, &l), 0);
	mu_tensor_free(l.t[1]);
	l.n = 1;
	assert_int_equal(mu__msg_frame_check(1, &l), 0);
	assert_int_equal(mu__msg_frame_check(2, &l), 0);
	mu_tensor_list_free(&l);
}

static void test_header_rejects(void **state)
{
	mu__msg_t m = {MU_MSG_INFO, 0, 1, 0, 0, 0}, d;
	unsigned char h[MU_MSG_HEADER];

	(void)state;
	mu__msg_encode(&m, h);
	h[0] = 'X';
	assert_int_equal(mu__msg_decode(h, 1 << 20, &d), MU_EBADMAGIC);
	mu__msg_encode(&m, h);
	h[4] = 2; /* version */
	assert_int_equal(mu__msg_decode(h, 1 << 20, &d), MU_EPROTO);
	m.type = 0;
	mu__msg_encode(&m, h);
	assert_int_equal(mu__msg_decode(h, 1 << 20, &d), MU_EPROTO);
	m.type = MU_MSG_TYPE_MAX + 1;
	mu__msg_encode(&m, h);
	assert_int_equal(mu__msg_decode(h, 1 << 20, &d), MU_EPROTO);
	/* a JSON body over 64 MiB, a frame over its budget, 2^63 */
	m.type = MU_MSG_INFO;
	m.len = MU_MSG_MAX_TEXT + 1;
	mu__msg_encode(&m, h);
	assert_int_equal(mu__msg_decode(h, 1 << 20, &d), MU_ETOOBIG);
	m.type = MU_MSG_FORWARD;
	m.len = (1 << 20) + MU_MSG_MAX_TEXT + 1;
	mu__msg_encode(&m, h);
	assert_int_equal(mu__msg_decode(h, 1 << 20, &d), MU_ETOOBIG);
	m.len = (uint64_t)1 << 63;
	mu__msg_encode(&m, h);
	assert_int_equal(mu__msg_decode(h, 1 << 20, &d), MU_ETOOBIG);
}

/* ---- split runs ---- */

static void test_every_split_matches(void **state)
{
	mu_tensor_list_t ref, in;
	int nodes;
	mu_model_t *m;
	char err[512];

	(void)state;
	whole(&ref);
	assert_int_equal(ref.n, 2); /* y and h0, in the graph's order */
	assert_string_equal(ref.t[0]->name, "y");
	assert_string_equal(ref.t[1]->name, "h0");
	assert_int_equal(mu_model_open(dir, &m, err, sizeof(err)), 0);
	nodes = mu_model_nodes(m);
	mu_model_close(m);
	input(&in);
	for (int n = 1; n <= nodes; n++) {
		cluster_t c;
		mu_coord_t *co;
		mu_tensor_list_t out, many[5];

		cluster_start(&c, n, 5000);
		assert_int_equal(mu_coord_connect(c.addrs, n, NULL, &co, err, sizeof(err)), 0);
		mu_tensor_list_init(&out);
		assert_int_equal(mu_coord_forward(co, &in, &out, err, sizeof(err)), 0);
		assert_same(&ref, &out);
		mu_tensor_list_free(&out);
		{
			mu_tensor_list_t ins[5] = {in, in, in, in, in};

			for (int j = 0; j < 5; j++)
				mu_tensor_list_init(&many[j]);
			assert_int_equal(mu_coord_forward_many(co, ins, 5, many, err, sizeof(err)), 0);
			for (int j = 0; j < 5; j++) {
				assert_same(&ref, &many[j]);
				mu_tensor_list_free(&many[j]);
			}
		}
		for (int i = 0; i < n; i++) {
			mu_stage_timing_t t;

			mu_coord_timing(co, i, &t);
			assert_int_equal(t.forwards, 6);
			assert_true(t.bytes_in > 0 && t.bytes_out > 0);
		}
		mu_coord_close(co);
		cluster_stop(&c);
	}
	mu_tensor_list_free(&in);
	mu_tensor_list_free(&ref);
}

static void test_wrong_order_refused(void **state)
{
	cluster_t c;
	mu_coord_t *co = NULL;
	const char *swapped[2];
	char err[512];

	(void)state;
	cluster_start(&c, 2, 5000);
	swapped[0] = c.addrs[1];
	swapped[1] = c.addrs[0];
	assert_int_equal(mu_coord_connect(swapped, 2, NULL, &co, err, sizeof(err)), MU_EARG);
	assert_non_null(strstr(err, "serves stage 1/2 but was given as stage 0/2"));
	/* only the first of two: does not cover the graph */
	assert_int_equal(mu_coord_connect(c.addrs, 1, NULL, &co, err, sizeof(err)), MU_EARG);
	cluster_stop(&c);
}

static void test_nobody_listening(void **state)
{
	mu_coord_opts_t o;
	mu_coord_t *co = NULL;
	const char *addr = "127.0.0.1:1";
	char err[512];

	(void)state;
	mu_coord_opts_init(&o);
	o.connect_timeout_ms = 300;
	assert_int_not_equal(mu_coord_connect(&addr, 1, &o, &co, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "stage 0/1 (127.0.0.1:1): cannot connect"));
}

/* A forward that fails inside the stage: the error names the stage and
 * the cause, and the connection stays usable. */
static void test_stage_error_reported(void **state)
{
	cluster_t c;
	mu_coord_t *co;
	mu_tensor_list_t bad, out, ref, in;
	uint64_t dims[2] = {2, 9};
	mu_tensor_t *t;
	char err[512];

	(void)state;
	cluster_start(&c, 2, 5000);
	assert_int_equal(mu_coord_connect(c.addrs, 2, NULL, &co, err, sizeof(err)), 0);
	mu_tensor_list_init(&bad);
	assert_int_equal(mu_tensor_new("x", 2, dims, &t), 0);
	assert_int_equal(mu_tensor_list_push(&bad, t), 0);
	mu_tensor_list_init(&out);
	assert_int_not_equal(mu_coord_forward(co, &bad, &out, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "stage 0/2 (127.0.0.1:"));
	assert_non_null(strstr(err, "input x has shape [2, 9]; the stage takes [2, 8]"));
	mu_tensor_list_free(&bad);
	input(&in);
	whole(&ref);
	assert_int_equal(mu_coord_forward(co, &in, &out, err, sizeof(err)), 0);
	assert_same(&ref, &out);
	mu_tensor_list_free(&out);
	mu_tensor_list_free(&ref);
	mu_tensor_list_free(&in);
	mu_coord_close(co);
	cluster_stop(&c);
}

static void test_stage_gone(void **state)
{
	cluster_t c;
	mu_coord_t *co;
	mu_tensor_list_t in, out;
	char err[512];

	(void)state;
	cluster_start(&c, 3, 5000);
	assert_int_equal(mu_coord_connect(c.addrs, 3, NULL, &co, err, sizeof(err)), 0);
	mu_stage_server_stop(c.srv[1]);
	input(&in);
	mu_tensor_list_init(&out);
	assert_int_not_equal(mu_coord_forward(co, &in, &out, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "stage 1/3 (127.0.0.1:"));
	assert_non_null(strstr(err, "connection was lost"));
	mu_tensor_list_free(&out);
	mu_tensor_list_free(&in);
	mu_coord_close(co);
	cluster_stop(&c);
}

/* ---- bad peers ---- */

/* A hostile peer is a raw socket: it owes the transport nothing. */
static int raw_connect(const char *addr)
{
	int fd;

	assert_int_equal(mu__sock_connect_fd("127.0.0.1",
	                                     (int)strtol(strchr(addr, ':') + 1, NULL, 10),
	                                     mu__deadline(2000), &fd), 0);
	return fd;
}

/* Whole writes and reads on a raw socket, through a stream that borrows it. */
static int raw_io(int fd, void *buf, size_t n, int64_t deadline, int out)
{
	mu_stream_t *s;
	int rc;

	assert_int_equal(mu__stream_tcp_new(fd, &s), 0);
	rc = out ? mu__sock_send_all(s, buf, n, deadline) : mu__sock_recv_all(s, buf, n, deadline);
	s->fd = -1; /* the caller's */
	mu__stream_close(s);
	return rc;
}

#define raw_send_all(fd, b, n, d) raw_io((fd), (void *)(b), (n), (d), 1)
#define raw_recv_all(fd, b, n, d) raw_io((fd), (b), (n), (d), 0)

/* Read until EOF; return what came (the ERROR message, if any). */
static size_t read_all(int fd, unsigned char *buf, size_t cap, int timeout_ms)
{
	size_t n = 0;
	int64_t deadline = mu__deadline(timeout_ms);

	for (;;) {
		struct pollfd p = {fd, POLLIN, 0};
		ssize_t r;

		if (poll(&p, 1, mu__remaining_ms(deadline)) <= 0)
			fail_msg("the stage did not close a bad connection in time");
		r = recv(fd, buf + n, cap - n, 0);
		if (r <= 0)
			return n;
		n += (size_t)r;
	}
}

/* What fd receives until the peer closes is one ERROR with code, whose
 * text contains needle (when not NULL). */
static void expect_error_on(int fd, int code, const char *needle)
{
	unsigned char buf[4096];
	size_t n = read_all(fd, buf, sizeof(buf) - 1, 5000);
	mu__msg_t m;

	assert_true(n >= MU_MSG_HEADER);
	assert_int_equal(mu__msg_decode(buf, 1 << 20, &m), 0);
	assert_int_equal(m.type, MU_MSG_ERROR);
	assert_int_equal(m.status, code);
	assert_int_equal(n, MU_MSG_HEADER + m.len);
	buf[n] = '\0';
	if (needle != NULL && strstr((char *)buf + MU_MSG_HEADER, needle) == NULL)
		fail_msg("ERROR text \"%s\" does not say \"%s\"", (char *)buf + MU_MSG_HEADER, needle);
}

/* Send bytes (then shut the sending side if half_close): an ERROR comes
 * back before the close. */
static void expect_error_after(const char *addr, const void *bytes, size_t len, int half_close,
                               int code, const char *needle)
{
	int fd = raw_connect(addr);

	assert_int_equal(raw_send_all(fd, bytes, len, mu__deadline(2000)), 0);
	if (half_close)
		shutdown(fd, SHUT_WR);
	expect_error_on(fd, code, needle);
	close(fd);
}

static void expect_error_then_close(const char *addr, const void *bytes, size_t len, int code)
{
	expect_error_after(addr, bytes, len, 0, code, NULL);
}

static void still_serves(cluster_t *c)
{
	mu_coord_t *co;
	mu_tensor_list_t in, out, ref;
	char err[512];

	input(&in);
	whole(&ref);
	mu_tensor_list_init(&out);
	assert_int_equal(mu_coord_connect(c->addrs, c->n, NULL, &co, err, sizeof(err)), 0);
	assert_int_equal(mu_coord_forward(co, &in, &out, err, sizeof(err)), 0);
	assert_same(&ref, &out);
	mu_coord_close(co);
	mu_tensor_list_free(&out);
	mu_tensor_list_free(&ref);
	mu_tensor_list_free(&in);
}

static void test_bad_peers(void **state)
{
	cluster_t c;
	unsigned char h[MU_MSG_HEADER + 64];
	mu__msg_t m = {MU_MSG_FORWARD, 0, 1, 0, 0, 0};
	int silent, stalled;

	(void)state;
	cluster_start(&c, 1, 500);
	/* a client that connects and never sends: others are served anyway */
	silent = raw_connect(c.addr[0]);
	/* wrong magic */
	expect_error_then_close(c.addr[0], "GET / HTTP/1.1\r\nHost: x\r\n\r\nxxxxxxxxxxxxxxxx", 40,
	                        MU_EBADMAGIC);
	/* a length of 2^31 * 2^31 */
	m.len = (uint64_t)1 << 62;
	mu__msg_encode(&m, h);
	expect_error_then_close(c.addr[0], h, MU_MSG_HEADER, MU_ETOOBIG);
	/* a frame that declares 2^31 tensors */
	m.len = 8;
	mu__msg_encode(&m, h);
	mu_le32_put(h + MU_MSG_HEADER, 0x80000000u);
	mu_le32_put(h + MU_MSG_HEADER + 4, 1);
	expect_error_then_close(c.addr[0], h, MU_MSG_HEADER + 8, MU_ETOOBIG);
	/* a frame whose dims do not multiply to numel: name "x", rank 1, dim 3, numel 4 */
	{
		unsigned char *p = h + MU_MSG_HEADER;

		mu_le32_put(p, 1);
		mu_le32_put(p + 4, 1);
		p[8] = 'x';
		mu_le32_put(p + 9, 1);
		mu_le64_put(p + 13, 3);
		mu_le64_put(p + 21, 4);
		m.len = 29 + 16;
		mu__msg_encode(&m, h);
		expect_error_then_close(c.addr[0], h, MU_MSG_HEADER + 29, MU_EPROTO);
	}
	/* a frame that ends before the body does (trailing bytes in the body) */
	m.len = 12;
	mu__msg_encode(&m, h);
	memset(h + MU_MSG_HEADER, 0, 12);
	expect_error_then_close(c.addr[0], h, MU_MSG_HEADER + 12, MU_EPROTO);
	/* a header cut short, then silence: told so after the io timeout */
	stalled = raw_connect(c.addr[0]);
	assert_int_equal(raw_send_all(stalled, h, 10, mu__deadline(1000)), 0);
	expect_error_on(stalled, -ETIMEDOUT, "truncated message: 10 of 40 header bytes, then nothing "
	                "for 0.5 s");
	close(stalled);
	/* ... or a body cut short by the end of the stream */
	expect_error_after(c.addr[0], h, 20, 1, MU_EPROTO,
	                   "truncated message: 20 of 40 header bytes, then the stream ended");
	m.len = 100;
	mu__msg_encode(&m, h);
	mu_le32_put(h + MU_MSG_HEADER, 1);
	mu_le32_put(h + MU_MSG_HEADER + 4, 1);
	expect_error_after(c.addr[0], h, MU_MSG_HEADER + 8, 1, MU_EPROTO,
	                   "truncated message: 8 of 100 FORWARD body bytes, then the stream ended");
	still_serves(&c);
	close(silent);
	cluster_stop(&c);
}

/* A peer that vanishes mid-frame loses only its own connection. */
static void test_truncated_frame(void **state)
{
	cluster_t c;
	unsigned char h[MU_MSG_HEADER + 8];
	mu__msg_t m = {MU_MSG_FORWARD, 0, 1, 0, 1000, 0};
	int fd;

	(void)state;
	cluster_start(&c, 2, 5000);
	fd = raw_connect(c.addr[0]);
	mu__msg_encode(&m, h);
	mu_le32_put(h + MU_MSG_HEADER, 1);
	mu_le32_put(h + MU_MSG_HEADER + 4, 1);
	assert_int_equal(raw_send_all(fd, h, sizeof(h), mu__deadline(1000)), 0);
	close(fd);
	still_serves(&c);
	cluster_stop(&c);
}

/* A session's channel (mu__serve_chan) that gets a message cut short says
 * so before it returns: a stall past io_ms, or the end of the stream. */
static void chan_cut_short(const void *bytes, size_t len, int half_close, int want_rc,
                           int code, const char *needle)
{
	mu__serve_ctx_t ctx;
	mu__chan_t ch;
	mu_stream_t *st;
	int sv[2];

	memset(&ctx, 0, sizeof(ctx));
	ctx.name = "test";
	ctx.idle_ms = -1;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(raw_send_all(sv[1], bytes, len, mu__deadline(1000)), 0);
	if (half_close)
		shutdown(sv[1], SHUT_WR);
	assert_int_equal(mu__stream_tcp_new(sv[0], &st), 0);
	mu__chan_init(&ch, st, NULL, 300, 1 << 20);
	assert_int_equal(mu__serve_chan(&ch, &ctx), want_rc);
	mu__stream_close(st);
	expect_error_on(sv[1], code, needle);
	close(sv[1]);
}

static void test_session_cut_short(void **state)
{
	unsigned char h[MU_MSG_HEADER + 16];
	mu__msg_t m = {MU_MSG_ASSIGN, 0, 5, 0, 200, 0};

	(void)state;
	mu__msg_encode(&m, h);
	memcpy(h + MU_MSG_HEADER, "{\"stage\": 0, \"of", 16);
	chan_cut_short(h, 12, 0, -ETIMEDOUT, -ETIMEDOUT,
	               "truncated message: 12 of 40 header bytes, then nothing for 0.3 s");
	chan_cut_short(h, 12, 1, MU_EPROTO, MU_EPROTO,
	               "truncated message: 12 of 40 header bytes, then the stream ended");
	chan_cut_short(h, sizeof(h), 0, -ETIMEDOUT, -ETIMEDOUT,
	               "truncated message: 16 of 200 ASSIGN body bytes, then nothing for 0.3 s");
	chan_cut_short(h, sizeof(h), 1, MU_EEOF, MU_EPROTO,
	               "truncated message: 16 of 200 ASSIGN body bytes, then the stream ended");
}

/* A FORWARD of one I32 tensor "x" [1] under a header of this version. */
static size_t typed_forward(int version, unsigned char *h)
{
	mu__msg_t m = {MU_MSG_FORWARD, 0, 3, 0, 0, 0};
	unsigned char *p = h + MU_MSG_HEADER;

	mu_le32_put(p, 1);             /* one tensor */
	mu_le32_put(p + 4, 1);         /* name "x" */
	p[8] = 'x';
	mu_le32_put(p + 9, 1 | MU_DTYPE_I32 << 8);
	mu_le64_put(p + 13, 1);        /* dim 1 */
	mu_le64_put(p + 21, 1);        /* numel 1 */
	mu_le32_put(p + 29, 7);
	m.len = 33;
	mu__msg_encode(&m, h);
	mu_le16_put(h + 4, (uint16_t)version);
	return MU_MSG_HEADER + 33;
}

/* A version-1 header promises F32 tensors: one that carries another is
 * a broken message, on the stage server and on a session alike. Under
 * version 2 the same frame is read, and the stage says why it does not
 * take it. */
static void test_typed_frame_needs_version_2(void **state)
{
	unsigned char h[MU_MSG_HEADER + 64];
	mu__serve_ctx_t ctx;
	mu__chan_t ch;
	mu_stream_t *st;
	cluster_t c;
	size_t n;
	int sv[2], fd;

	(void)state;
	cluster_start(&c, 1, 2000);
	n = typed_forward(1, h);
	expect_error_after(c.addr[0], h, n, 0, MU_EPROTO, "a version-1 header carries only F32");
	n = typed_forward(2, h);
	fd = raw_connect(c.addr[0]);
	assert_int_equal(raw_send_all(fd, h, n, mu__deadline(1000)), 0);
	{
		unsigned char r[MU_MSG_HEADER + 512];
		mu__msg_t m;

		assert_int_equal(raw_recv_all(fd, r, MU_MSG_HEADER, mu__deadline(5000)), 0);
		assert_int_equal(mu__msg_decode(r, 1 << 20, &m), 0);
		assert_int_equal(m.type, MU_MSG_ERROR);
		assert_true(m.len < 512);
		assert_int_equal(raw_recv_all(fd, r + MU_MSG_HEADER, m.len, mu__deadline(5000)), 0);
		r[MU_MSG_HEADER + m.len] = '\0';
		assert_non_null(strstr((char *)r + MU_MSG_HEADER, "input x has shape [1]"));
	}
	close(fd);
	still_serves(&c);
	cluster_stop(&c);
	/* a session's blocking loop reads frames with mu__msg_recv_frame */
	memset(&ctx, 0, sizeof(ctx));
	ctx.name = "test";
	ctx.idle_ms = -1;
	n = typed_forward(1, h);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(raw_send_all(sv[1], h, n, mu__deadline(1000)), 0);
	assert_int_equal(mu__stream_tcp_new(sv[0], &st), 0);
	mu__chan_init(&ch, st, NULL, 300, 1 << 20);
	assert_int_equal(mu__serve_chan(&ch, &ctx), MU_EPROTO);
	mu__stream_close(st);
	expect_error_on(sv[1], MU_EPROTO, "bad FORWARD body");
	close(sv[1]);
}

/* The graph kind: its table, and what a graph stage says of another
 * kind's message. */
static void test_stage_kinds(void **state)
{
	mu__serve_ctx_t ctx;
	mu__msg_t m = {MU_MSG_SEQ_FORWARD, 0, 4, 1, 0, 0};
	mu_tensor_list_t in;
	mu__reply_t r;
	mu_stage_t *s;
	char err[512], names[64];

	(void)state;
	assert_int_equal(mu_stage_load(dir, 0, 1, &s, err, sizeof(err)), 0);
	assert_ptr_equal(s->kind, &mu__stage_kind_graph);
	assert_int_equal(s->kind->version, MU__STAGE_KIND_VERSION);
	assert_ptr_equal(mu__stage_kind_find("graph"), &mu__stage_kind_graph);
	assert_null(mu__stage_kind_find("tensor-parallel"));
	assert_ptr_equal(mu__stage_kind_owning(MU_MSG_FORWARD), &mu__stage_kind_graph);
	assert_null(mu__stage_kind_owning(MU_MSG_INFO));
	assert_null(mu__stage_kind_owning(0));
	mu__stage_kind_names(names, sizeof(names));
	assert_string_equal(names, "graph, llm");
	memset(&ctx, 0, sizeof(ctx));
	ctx.stage = s;
	ctx.name = "test";
	mu_tensor_list_init(&in);
	mu__pipe_handle(&ctx, 1, &m, "", &in, &r);
	assert_int_equal(r.m.type, MU_MSG_ERROR);
	assert_int_equal(r.m.status, MU_EPROTO);
	assert_false(r.fatal);
	assert_string_equal(r.text, "SEQ_FORWARD is for llm stages; this is a stage of kind graph, "
	                    "which answers INFO, FORWARD");
	mu__reply_free(&r);
	m.type = MU_MSG_INFO;
	mu__pipe_handle(&ctx, 1, &m, "", &in, &r);
	assert_int_equal(r.m.type, MU_MSG_INFO);
	assert_ptr_equal(r.text, mu_stage_describe(s));
	mu__reply_free(&r);
	assert_int_equal(mu_stage_set_threads(s, 0), MU_EARG);
	assert_int_equal(mu_stage_set_threads(s, 2), 0);
	mu_stage_free(s);
	mu_stage_free(NULL);
}

/* Connections that never send cannot lock a server out: the newest
 * displaces the oldest of them; only busy ones make a newcomer refused. */
static void test_connection_limit(void **state)
{
	mu_stage_t *s;
	mu_stage_server_t *srv;
	mu_stage_server_opts_t o;
	mu__msg_t m = {MU_MSG_INFO, 0, 1, 0, 0, 0};
	unsigned char h[MU_MSG_HEADER], buf[1 << 16];
	int silent[3], busy[2], late;
	char err[512], addr[32];

	(void)state;
	assert_int_equal(mu_stage_load(dir, 0, 1, &s, err, sizeof(err)), 0);
	mu_stage_server_opts_init(&o);
	o.max_conns = 2;
	assert_int_equal(mu_stage_server_start(s, &o, &srv), 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", mu_stage_server_port(srv));
	/* two silent, then a third: the first makes room */
	silent[0] = raw_connect(addr);
	silent[1] = raw_connect(addr);
	usleep(50000);
	silent[2] = raw_connect(addr);
	expect_error_on(silent[0], MU_ETOOBIG, "closed to make room");
	/* two that complete a message displace the silent ones ... */
	mu__msg_encode(&m, h);
	for (int i = 0; i < 2; i++) {
		mu__msg_t r;

		busy[i] = raw_connect(addr);
		assert_int_equal(raw_send_all(busy[i], h, sizeof(h), mu__deadline(1000)), 0);
		assert_int_equal(raw_recv_all(busy[i], buf, MU_MSG_HEADER, mu__deadline(5000)), 0);
		assert_int_equal(mu__msg_decode(buf, 1 << 20, &r), 0);
		assert_int_equal(r.type, MU_MSG_INFO);
		assert_true(r.len < sizeof(buf));
		assert_int_equal(raw_recv_all(busy[i], buf, r.len, mu__deadline(5000)), 0);
	}
	expect_error_on(silent[1], MU_ETOOBIG, "closed to make room");
	expect_error_on(silent[2], MU_ETOOBIG, "closed to make room");
	/* ... a newcomer displaces the one idle longest between messages ... */
	late = raw_connect(addr);
	expect_error_on(busy[0], MU_ETOOBIG, "was idle for");
	close(busy[0]);
	/* ... and with both in the middle of a message, it is refused */
	assert_int_equal(raw_send_all(busy[1], h, 10, mu__deadline(1000)), 0);
	assert_int_equal(raw_send_all(late, h, 10, mu__deadline(1000)), 0);
	usleep(50000);
	busy[0] = raw_connect(addr);
	expect_error_on(busy[0], MU_ETOOBIG, "too many connections");
	for (int i = 0; i < 3; i++)
		close(silent[i]);
	close(late);
	close(busy[0]);
	close(busy[1]);
	mu_stage_server_free(srv);
	mu_stage_free(s);
}

/* A connection that never sends is closed after silent_timeout_ms. */
static void test_silent_timeout(void **state)
{
	mu_stage_t *s;
	mu_stage_server_t *srv;
	mu_stage_server_opts_t o;
	char err[512], addr[32];
	int fd;

	(void)state;
	assert_int_equal(mu_stage_load(dir, 0, 1, &s, err, sizeof(err)), 0);
	mu_stage_server_opts_init(&o);
	o.silent_timeout_ms = 200;
	assert_int_equal(mu_stage_server_start(s, &o, &srv), 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", mu_stage_server_port(srv));
	fd = raw_connect(addr);
	expect_error_on(fd, -ETIMEDOUT, "nothing received in 0.2 s");
	close(fd);
	mu_stage_server_free(srv);
	mu_stage_free(s);
}

/* A connection idle past idle_timeout_ms is closed, saying why; a
 * coordinator that idled past it dials again and its forward goes on. */
static void test_idle_timeout(void **state)
{
	mu_stage_t *s;
	mu_stage_server_t *srv;
	mu_stage_server_opts_t o;
	mu_coord_t *co;
	mu_tensor_list_t in, out;
	char err[512], addr[32];
	const char *a = addr;

	(void)state;
	assert_int_equal(mu_stage_load(dir, 0, 1, &s, err, sizeof(err)), 0);
	mu_stage_server_opts_init(&o);
	assert_int_equal(o.idle_timeout_ms, 300000);
	o.idle_timeout_ms = 200;
	assert_int_equal(mu_stage_server_start(s, &o, &srv), 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", mu_stage_server_port(srv));
	assert_int_equal(mu_coord_connect(&a, 1, NULL, &co, err, sizeof(err)), 0);
	input(&in);
	for (int i = 0; i < 2; i++) {
		usleep(500000); /* past the idle limit: the stage closes us */
		mu_tensor_list_init(&out);
		assert_int_equal(mu_coord_forward(co, &in, &out, err, sizeof(err)), 0);
		mu_tensor_list_free(&out);
	}
	mu_coord_close(co);
	mu_stage_server_free(srv);
	mu_stage_free(s);
	mu_tensor_list_free(&in);
}

static void test_requests_limit(void **state)
{
	mu_stage_t *s;
	mu_stage_server_t *srv;
	mu_stage_server_opts_t o;
	mu_coord_t *co;
	mu_tensor_list_t in, out;
	char err[512], addr[32];
	const char *a = addr;

	(void)state;
	assert_int_equal(mu_stage_load(dir, 0, 1, &s, err, sizeof(err)), 0);
	mu_stage_server_opts_init(&o);
	o.requests = 2;
	assert_int_equal(mu_stage_server_start(s, &o, &srv), 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", mu_stage_server_port(srv));
	assert_int_equal(mu_coord_connect(&a, 1, NULL, &co, err, sizeof(err)), 0);
	input(&in);
	for (int i = 0; i < 2; i++) {
		mu_tensor_list_init(&out);
		assert_int_equal(mu_coord_forward(co, &in, &out, err, sizeof(err)), 0);
		mu_tensor_list_free(&out);
	}
	mu_stage_server_wait(srv); /* returns: two forwards were served */
	assert_int_equal(mu_stage_server_forwards(srv), 2);
	mu_coord_close(co);
	mu_stage_server_free(srv);
	mu_stage_free(s);
	mu_tensor_list_free(&in);
}

static void test_load_errors(void **state)
{
	mu_stage_t *s = NULL;
	mu_model_t *m = NULL;
	char err[512];

	(void)state;
	assert_int_equal(mu_stage_load(dir, 3, 3, &s, err, sizeof(err)), MU_EARG);
	assert_int_not_equal(mu_stage_load(dir, 0, 99, &s, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "into 99 stages"));
	assert_int_not_equal(mu_model_open("/nonexistent", &m, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "/nonexistent/model.json"));
	assert_null(m);
}

/* Budgets: stages fit their devices, a device too small gets nothing,
 * and a model that cannot fit says so with the numbers. The test model's
 * weights: fc0 8x16+16, fc1 16x16+16, fc2 16x4+4 floats. */
static void test_plan_budgets(void **state)
{
	mu_model_t *m;
	mu_plan_t *p = NULL;
	int dev[4];
	char err[512];
	uint64_t fc0 = (8 * 16 + 16) * 4, fc1 = (16 * 16 + 16) * 4, fc2 = (16 * 4 + 4) * 4;
	uint64_t roomy[3] = {1 << 20, 1 << 20, 1 << 20};
	uint64_t tight[3] = {fc0, 8, fc1 + fc2};
	uint64_t small[2] = {fc0, fc1};

	(void)state;
	assert_int_equal(mu_model_open(dir, &m, err, sizeof(err)), 0);
	/* room everywhere: balanced over all three */
	assert_int_equal(mu_plan_budgets(m, roomy, 3, &p, dev, err, sizeof(err)), 0);
	assert_int_equal(mu_plan_stages(p), 3);
	mu_plan_free(p);
	/* the 8-byte device cannot take a node: two stages, devices 0 and 2 */
	assert_int_equal(mu_plan_budgets(m, tight, 3, &p, dev, err, sizeof(err)), 0);
	assert_int_equal(mu_plan_stages(p), 2);
	assert_int_equal(dev[0], 0);
	assert_int_equal(dev[1], 2);
	for (int i = 0; i < 2; i++) {
		mu_stage_info_t si;

		mu_plan_stage(p, i, &si);
		assert_true(si.param_bytes <= tight[dev[i]]);
	}
	mu_plan_free(p);
	/* the same budgets listed the other way round: the same fit, each
	 * stage on the device whose budget it fits */
	{
		uint64_t rev[3] = {tight[2], tight[1], tight[0]};

		assert_int_equal(mu_plan_budgets(m, rev, 3, &p, dev, err, sizeof(err)), 0);
		assert_int_equal(mu_plan_stages(p), 2);
		assert_int_equal(dev[0], 2);
		assert_int_equal(dev[1], 0);
		for (int i = 0; i < 2; i++) {
			mu_stage_info_t si;

			mu_plan_stage(p, i, &si);
			assert_true(si.param_bytes <= rev[dev[i]]);
		}
		mu_plan_free(p);
	}
	/* fc2's weights find no room */
	assert_int_equal(mu_plan_budgets(m, small, 2, &p, dev, err, sizeof(err)), MU_ETOOBIG);
	assert_null(p);
	assert_non_null(strstr(err, "MiB"));
	mu_model_close(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_bytes),
		cmocka_unit_test(test_header_rejects),
		cmocka_unit_test(test_header_typed_frames),
		cmocka_unit_test(test_every_split_matches),
		cmocka_unit_test(test_wrong_order_refused),
		cmocka_unit_test(test_nobody_listening),
		cmocka_unit_test(test_stage_error_reported),
		cmocka_unit_test(test_stage_gone),
		cmocka_unit_test(test_bad_peers),
		cmocka_unit_test(test_truncated_frame),
		cmocka_unit_test(test_typed_frame_needs_version_2),
		cmocka_unit_test(test_stage_kinds),
		cmocka_unit_test(test_session_cut_short),
		cmocka_unit_test(test_connection_limit),
		cmocka_unit_test(test_silent_timeout),
		cmocka_unit_test(test_idle_timeout),
		cmocka_unit_test(test_requests_limit),
		cmocka_unit_test(test_load_errors),
		cmocka_unit_test(test_plan_budgets),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
