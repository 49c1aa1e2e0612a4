/* SPDX-License-Identifier: MIT */
/*
 * `muster bench tracker`: a load generator for any TVM-protocol tracker, so
 * TVM's Python tracker and ours are measured by the same code.
 *
 * Scale phase (first, so the tracker's memory is measured from a fresh
 * start): N connections register as servers (UPDATE_INFO + PUT); reports how
 * long that took, the tracker's RSS growth (with --pid) and one SUMMARY's
 * latency and size with all of them listed; then they disconnect.
 * Cycle phase: S simulated servers register and PUT; C simulated clients
 * REQUEST with priorities 1..5; each grant makes its server re-PUT a fresh
 * matchkey at once (a session of zero length), and the client asks again.
 * Counts grants and the REQUEST->grant latency, and the RSS at the end
 * (a tracker that keeps every PUT it ever saw grows here).
 *
 * Single-threaded over poll(): the generator must not be the bottleneck on
 * a 2-core machine where the tracker runs too. Frames are made and found
 * by the public framing calls (mu_tracker_frame_encode, _peek); the JSON
 * in them is written and read here.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "muster/tracker.h"
#include "cli/cli_int.h"
#include "core/buf_int.h"
#include "core/endian_int.h"
#include "core/proc_int.h"
#include "core/net_int.h"
#include "core/sock_int.h"
#include "core/time_int.h"

typedef struct {
	mu_stream_t *fd;
	int is_server;
	int id;
	int expect;       /* replies still owed to us (servers) */
	int waiting;      /* a REQUEST is out (clients) */
	int64_t sent_us;  /* when the REQUEST went out */
	unsigned seq;     /* matchkey counter (servers) */
	mu__buf_t in;
} bconn_t;

typedef struct {
	char host[256];
	int port;
	int64_t *lat_us;
	size_t nlat, caplat;
	long grants;
	int failed;
} bench_t;

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int send_frame(bconn_t *c, const char *json)
{
	char frame[256];
	size_t n;

	/* one send per frame: the generator must be cheap */
	if (mu_tracker_frame_encode(json, strlen(json), frame, sizeof(frame), &n) != 0)
		return -1;
	return mu__sock_send_all(c->fd, frame, n, mu__deadline(10000));
}

static int put(bconn_t *s)
{
	char msg[160];

	snprintf(msg, sizeof(msg), "[3, \"bench\", [%d, \"bench:s%d-%u\"], null]",
	         9000 + s->id % 1000, s->id, s->seq++);
	s->expect++;
	return send_frame(s, msg);
}

static int request(bconn_t *c)
{
	char msg[64];

	snprintf(msg, sizeof(msg), "[4, \"bench\", \"\", %d]", 1 + rand() % 5);
	c->waiting = 1;
	c->sent_us = now_us();
	return send_frame(c, msg);
}

/* Connect, exchange the magic, and (servers) register. */
static int open_conn(bench_t *b, bconn_t *c, int is_server, int id)
{
	unsigned char magic[4];
	char msg[128];
	int rc;

	memset(c, 0, sizeof(*c));
	c->is_server = is_server;
	c->id = id;
	mu__buf_init(&c->in, 1u << 24);
	rc = mu__sock_connect(b->host, b->port, NULL, mu__deadline(10000), &c->fd);
	if (rc != 0)
		return rc;
	mu_le32_put(magic, MU_TRACKER_MAGIC);
	rc = mu__sock_send_all(c->fd, magic, 4, mu__deadline(10000));
	if (rc == 0)
		rc = mu__sock_recv_all(c->fd, magic, 4, mu__deadline(10000));
	if (rc != 0 || !is_server)
		return rc;
	snprintf(msg, sizeof(msg), "[5, {\"key\": \"server:bench\", \"addr\": [null, %d]}]",
	         9000 + id % 1000);
	c->expect++;
	if (send_frame(c, msg) != 0 || put(c) != 0)
		return -EPIPE;
	return 0;
}

static void close_conn(bconn_t *c)
{
	mu__sock_close(c->fd);
	mu__buf_free(&c->in);
}

static void record(bench_t *b, int64_t us)
{
	if (b->nlat == b->caplat) {
		size_t n = b->caplat ? b->caplat * 2 : 4096;
		int64_t *p = realloc(b->lat_us, n * sizeof(*p));

		if (p == NULL)
			return;
		b->lat_us = p;
		b->caplat = n;
	}
	b->lat_us[b->nlat++] = us;
}

/* One frame arrived on c; servers[] lets a grant find its server. */
static int on_frame(bench_t *b, bconn_t *c, const char *body, size_t len,
                    bconn_t *servers, int nservers, int measuring)
{
	const char *mk;
	int sid;

	if (c->is_server) {
		c->expect--;
		return len == 1 && body[0] == '0' ? 0 : -1;
	}
	/* [0, ["addr", port, "bench:sID-SEQ"]] */
	mk = strstr(body, "\"bench:s");
	if (!c->waiting || mk == NULL || sscanf(mk, "\"bench:s%d-", &sid) != 1 ||
	    sid < 0 || sid >= nservers)
		return -1;
	c->waiting = 0;
	if (measuring) {
		b->grants++;
		record(b, now_us() - c->sent_us);
	}
	/* the session is over at once: the server offers itself again */
	if (put(&servers[sid]) != 0)
		return -1;
	return request(c);
}

static int drain(bench_t *b, bconn_t *c, bconn_t *servers, int nservers,
                 int measuring)
{
	char tmp[65536];
	size_t blen, n;
	int got = mu__stream_recv(c->fd, tmp, sizeof(tmp), &n);

	if (got == -EAGAIN)
		return 0;
	if (got != 0)
		return -1;
	if (mu__buf_append(&c->in, tmp, n) != 0)
		return -1;
	while (mu_tracker_frame_peek(c->in.data, c->in.len, 1u << 24, &blen) == 1) {
		char save = c->in.data[4 + blen];
		int rc;

		c->in.data[4 + blen] = '\0';
		rc = on_frame(b, c, c->in.data + 4, blen, servers, nservers, measuring);
		c->in.data[4 + blen] = save;
		if (rc != 0)
			return -1;
		mu__buf_consume(&c->in, 4 + blen);
	}
	return 0;
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

static double pct(bench_t *b, double p)
{
	if (b->nlat == 0)
		return 0;
	return (double)b->lat_us[(size_t)(p * (double)(b->nlat - 1))] / 1000.0;
}

/* Phase 1: grants cycle for `secs` seconds (after a short warm-up). */
static int phase_cycle(bench_t *b, int ns, int nc, double secs)
{
	bconn_t *all = calloc((size_t)(ns + nc), sizeof(*all));
	struct pollfd *pf = calloc((size_t)(ns + nc), sizeof(*pf));
	int64_t start, warm_end, end;
	int i, rc = 0;

	if (all == NULL || pf == NULL)
		return -ENOMEM;
	for (i = 0; i < ns + nc && rc == 0; i++)
		rc = open_conn(b, &all[i], i < ns, i < ns ? i : i - ns);
	for (i = ns; i < ns + nc && rc == 0; i++)
		rc = request(&all[i]);
	start = mu__now_ms();
	warm_end = start + 1000;
	end = warm_end + (int64_t)(secs * 1000);
	while (rc == 0 && mu__now_ms() < end) {
		int measuring = mu__now_ms() >= warm_end;

		for (i = 0; i < ns + nc; i++) {
			pf[i].fd = mu__stream_fd(all[i].fd);
			pf[i].events = POLLIN;
		}
		if (poll(pf, (nfds_t)(ns + nc), 100) < 0 && errno != EINTR)
			rc = -errno;
		for (i = 0; rc == 0 && i < ns + nc; i++)
			if (pf[i].revents != 0 &&
			    drain(b, &all[i], all, ns, measuring) != 0) {
				fprintf(stderr, "bench: connection %d failed\n", i);
				rc = -EPROTO;
			}
	}
	for (i = 0; i < ns + nc; i++)
		close_conn(&all[i]);
	free(all);
	free(pf);
	return rc;
}

/* The tracker's RSS in KiB, or -1 without --pid. */
static long tracker_rss_kib(int pid)
{
	return pid > 0 ? mu__proc_status_kib(pid, "VmRSS") : -1;
}

/* Phase 2: n registered server connections, then one SUMMARY. */
static int phase_scale(bench_t *b, int n, int pid, int json)
{
	bconn_t *all = calloc((size_t)n, sizeof(*all));
	long rss0 = tracker_rss_kib(pid), rss1;
	int64_t t0 = mu__now_ms(), t1, t2;
	mu_tracker_client_t *q;
	char *summary = NULL;
	int i, rc = 0;

	if (all == NULL)
		return -ENOMEM;
	for (i = 0; i < n && rc == 0; i++) {
		rc = open_conn(b, &all[i], 1, 100000 + i);
		/* collect both replies now, so the tracker is never far behind */
		while (rc == 0 && all[i].expect > 0) {
			rc = mu__sock_wait_readable(all[i].fd, mu__deadline(10000));
			if (rc == 0 && drain(b, &all[i], all, 0, 0) != 0)
				rc = -EPROTO;
		}
	}
	t1 = mu__now_ms();
	rss1 = tracker_rss_kib(pid);
	if (rc == 0)
		rc = mu_tracker_client_connect(b->host, b->port, 10000, &q);
	if (rc == 0) {
		rc = mu_tracker_client_summary(q, 60000, &summary);
		mu_tracker_client_close(q);
	}
	t2 = mu__now_ms();
	if (rc == 0 && json)
		printf("{\"phase\": \"scale\", \"connections\": %d, \"register_s\": %.3f, "
		       "\"rss_before_kib\": %ld, \"rss_after_kib\": %ld, "
		       "\"summary_ms\": %lld, \"summary_bytes\": %zu}\n",
		       n, (double)(t1 - t0) / 1000.0, rss0, rss1,
		       (long long)(t2 - t1), strlen(summary));
	else if (rc == 0) {
		printf("scale: %d registered server connections\n", n);
		printf("  register time   %.2f s (%.0f connections/s)\n",
		       (double)(t1 - t0) / 1000.0,
		       n / ((double)(t1 - t0 + 1) / 1000.0));
		if (rss0 > 0 && rss1 > 0)
			printf("  tracker RSS     %.1f MiB before, %.1f MiB after (%.2f KiB per connection)\n",
			       rss0 / 1024.0, rss1 / 1024.0, (double)(rss1 - rss0) / n);
		printf("  SUMMARY         %lld ms, %zu bytes\n", (long long)(t2 - t1),
		       strlen(summary));
	}
	if (rc != 0)
		fprintf(stderr, "bench: scale phase stopped at connection %d: %s\n", i,
		        mu_strerror(rc));
	mu_free(summary);
	for (int j = 0; j < n; j++)
		if (all[j].fd != NULL)
			close_conn(&all[j]);
	free(all);
	return rc;
}

int bench_tracker(int argc, char **argv)
{
	const char *target = NULL;
	int servers = 8, clients = 16, scale = 10000, pid = 0, json = 0, npos, rc;
	double secs = 10;
	bench_t b;
	cli_opt_t opts[] = {
		{"target", OPT_STR, &target, "HOST:PORT", "the tracker to load (required)"},
		{"duration", OPT_DOUBLE, &secs, "SECONDS", "length of the grant cycle (default 10; 0 skips)"},
		{"servers", OPT_INT, &servers, "N", "simulated servers in the cycle (default 8)"},
		{"clients", OPT_INT, &clients, "N", "simulated clients in the cycle (default 16)"},
		{"scale", OPT_INT, &scale, "N", "registered connections in the scale phase (default 10000; 0 skips)"},
		{"pid", OPT_INT, &pid, "PID", "the tracker's process, to read its RSS"},
		{"json", OPT_FLAG, &json, NULL, "one JSON line per phase"},
	};
	cli_cmd_t cmd = {
		"muster bench tracker --target HOST:PORT [options]",
		"Load any TVM-protocol tracker (muster's, TVM's Python one) the same way:\n"
		"many servers register at once, then servers PUT and clients REQUEST with\n"
		"priorities 1-5, every grant followed by a fresh PUT. Prints grants/s, grant\n"
		"latency percentiles, and the tracker's memory per registered server.\n"
		"bench/tracker.sh runs it against both trackers and prints the ratios.",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 0, 0};

	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	memset(&b, 0, sizeof(b));
	if (target == NULL ||
	    mu__split_hostport(target, b.host, sizeof(b.host), &b.port) != 0 ||
	    servers < 1 || clients < 1 || scale < 0 || secs < 0) {
		fprintf(stderr, "muster bench tracker: need --target HOST:PORT and positive counts (see --help)\n");
		return 2;
	}
	mu__raise_nofile_limit();
	srand(1);
	if (!json)
		printf("tracker %s\n", target);
	rc = scale > 0 ? phase_scale(&b, scale, pid, json) : 0;
	if (rc == 0 && secs > 0)
		rc = phase_cycle(&b, servers, clients, secs);
	if (rc == 0 && secs > 0) {
		long rss = tracker_rss_kib(pid);

		qsort(b.lat_us, b.nlat, sizeof(*b.lat_us), cmp64);
		if (json)
			printf("{\"phase\": \"cycle\", \"servers\": %d, \"clients\": %d, "
			       "\"seconds\": %.1f, \"grants\": %ld, \"grants_per_s\": %.1f, "
			       "\"p50_ms\": %.3f, \"p99_ms\": %.3f, \"rss_after_kib\": %ld}\n",
			       servers, clients, secs, b.grants, b.grants / secs,
			       pct(&b, 0.5), pct(&b, 0.99), rss);
		else {
			printf("cycle: %d servers, %d clients, priorities 1-5, %.0f s\n"
			       "  grants          %ld (%.0f/s)\n"
			       "  grant latency   p50 %.3f ms, p99 %.3f ms\n",
			       servers, clients, secs, b.grants, b.grants / secs,
			       pct(&b, 0.5), pct(&b, 0.99));
			if (rss > 0)
				printf("  tracker RSS     %.1f MiB after the cycle\n", rss / 1024.0);
		}
	}
	free(b.lat_us);
	if (rc != 0)
		fprintf(stderr, "muster bench tracker: %s: %s\n", target, mu_strerror(rc));
	return rc == 0 ? 0 : 1;
}
