/* SPDX-License-Identifier: MIT */
/*
 * `muster bench md`: metadata exchange through one backend.
 *
 * Fetch mode: agent "pub" publishes a blob of --blob-bytes; --fetchers
 * agents, each on its own thread, fetch it --fetches times in a row (every
 * fetch makes its network round trips; loading the same bytes again is a
 * no-op). Prints fetches/s and the p50/p99 of a fetch as a caller sees it:
 * queued, done on the worker, result read with mu_md_wait.
 * All-to-all mode (--agents N): N agents publish, then each fetches every
 * other one; prints the time until the last fetch completed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "muster/md.h"
#include "cli/cli_int.h"
#include "core/time_int.h"

typedef struct {
	const char *backend, *endpoint;
	int bytes, fetches, fetchers, agents, json, p2p;
	mu_md_peer_t peer;
} mdb_t;

typedef struct {
	const mdb_t *b;
	mu_md_agent_t *a;
	int64_t *lat; /* µs, fetches entries */
	int rc;
	pthread_t th;
} fetcher_t;

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static mu_md_agent_t *bench_agent(const mdb_t *b, const char *name, int listen)
{
	mu_md_opts_t o;
	mu_md_agent_t *a;
	char why[512] = "";
	int rc;

	mu_md_opts_init(&o);
	o.name = name;
	o.no_env = 1;
	o.lease_ttl = 60;
	o.op_timeout = 60;
	o.etcd_watch_timeout = 60;
	o.store_timeout = 60;
	if (strcmp(b->backend, "etcd") == 0)
		o.etcd_endpoints = b->endpoint;
	else if (strcmp(b->backend, "tcpstore") == 0)
		o.tcpstore_endpoint = b->endpoint;
	if (listen) {
		o.listen = 1;
		o.listen_host = "127.0.0.1";
		o.listen_port = 0;
	}
	rc = mu_md_agent_new(&o, &a, why, sizeof(why));
	if (rc != 0) {
		fprintf(stderr, "muster bench md: cannot create agent %s: %s\n", name,
		        why[0] != '\0' ? why : mu_strerror(rc));
		return NULL;
	}
	return a;
}

static int wait_ok(mu_md_agent_t *a, uint64_t op)
{
	int st = 0, rc = mu_md_wait(a, op, 120000, &st);

	return rc != 0 ? rc : st;
}

/* Set the payload and, through a store, publish it. */
static int publish(const mdb_t *b, mu_md_agent_t *a, const char *blob, uint64_t *op)
{
	int rc = mu_md_set_local(a, NULL, blob, (size_t)b->bytes);

	*op = 0;
	if (rc == 0 && !b->p2p)
		rc = mu_md_send_local(a, NULL, NULL, op);
	return rc;
}

static void *fetcher_main(void *arg)
{
	fetcher_t *f = arg;
	int k;

	for (k = 0; f->rc == 0 && k < f->b->fetches; k++) {
		int64_t t0 = now_us();
		uint64_t op;

		f->rc = mu_md_fetch_remote(f->a, "pub", f->b->p2p ? &f->b->peer : NULL, NULL, &op);
		if (f->rc == 0)
			f->rc = wait_ok(f->a, op);
		f->lat[k] = now_us() - t0;
	}
	return NULL;
}

static int cmp64(const void *x, const void *y)
{
	int64_t a = *(const int64_t *)x, c = *(const int64_t *)y;

	return (a > c) - (a < c);
}

static int fetch_mode(mdb_t *b, const char *blob)
{
	mu_md_agent_t *pub = bench_agent(b, "pub", b->p2p);
	fetcher_t *f = calloc((size_t)b->fetchers, sizeof(*f));
	int64_t *all = calloc((size_t)b->fetchers * (size_t)b->fetches, sizeof(*all)), t0, t1;
	size_t n = 0;
	uint64_t op;
	int i, rc = pub == NULL || f == NULL || all == NULL ? 1 : 0;

	if (pub != NULL && (f == NULL || all == NULL))
		fprintf(stderr, "muster bench md: out of memory\n");

	if (rc == 0)
		rc = publish(b, pub, blob, &op);
	if (rc == 0 && op != 0)
		rc = wait_ok(pub, op);
	if (pub != NULL)
		b->peer.port = mu_md_listen_port(pub);
	for (i = 0; rc == 0 && i < b->fetchers; i++) {
		char name[32];

		snprintf(name, sizeof(name), "fetcher-%d", i);
		f[i].b = b;
		f[i].lat = all + (size_t)i * (size_t)b->fetches;
		f[i].a = bench_agent(b, name, 0);
		rc = f[i].a == NULL;
	}
	t0 = now_us();
	for (i = 0; rc == 0 && i < b->fetchers; i++)
		pthread_create(&f[i].th, NULL, fetcher_main, &f[i]);
	for (i = 0; rc == 0 && i < b->fetchers; i++) {
		pthread_join(f[i].th, NULL);
		if (f[i].rc != 0)
			rc = f[i].rc;
	}
	t1 = now_us();
	for (i = 0; f != NULL && i < b->fetchers; i++)
		mu_md_agent_free(f[i].a);
	mu_md_agent_free(pub);
	if (rc == 0) {
		double secs = (double)(t1 - t0) / 1e6;

		n = (size_t)b->fetchers * (size_t)b->fetches;
		qsort(all, n, sizeof(*all), cmp64);
		if (b->json)
			printf("{\"mode\": \"fetch\", \"backend\": \"%s\", \"blob_bytes\": %d, \"fetchers\": %d, "
			       "\"fetches\": %zu, \"fetches_per_s\": %.1f, \"p50_ms\": %.3f, \"p99_ms\": %.3f}\n",
			       b->backend, b->bytes, b->fetchers, n, (double)n / secs,
			       (double)all[n / 2] / 1000.0, (double)all[(size_t)((double)(n - 1) * 0.99)] / 1000.0);
		else
			printf("%s, %d-byte blob, %d fetcher(s): %zu fetches, %.0f/s, p50 %.3f ms, p99 %.3f ms\n",
			       b->backend, b->bytes, b->fetchers, n, (double)n / secs,
			       (double)all[n / 2] / 1000.0, (double)all[(size_t)((double)(n - 1) * 0.99)] / 1000.0);
	} else if (rc != 1) { /* 1: bench_agent or the allocation said why */
		fprintf(stderr, "muster bench md: %s%s%s: %s\n", b->backend,
		        b->endpoint ? " at " : "", b->endpoint ? b->endpoint : "", mu_strerror(rc));
	}
	free(f);
	free(all);
	return rc == 0 ? 0 : 1;
}

static int all_to_all(mdb_t *b, const char *blob)
{
	int n = b->agents, i, j, rc = 0;
	mu_md_agent_t **ag = calloc((size_t)n, sizeof(*ag));
	uint64_t *ops = calloc((size_t)n * (size_t)n, sizeof(*ops));
	int64_t t0, t1, t2;

	if (ag == NULL || ops == NULL) {
		fprintf(stderr, "muster bench md: out of memory\n");
		free(ag);
		free(ops);
		return 1;
	}
	for (i = 0; rc == 0 && i < n; i++) {
		char name[32];

		snprintf(name, sizeof(name), "agent-%d", i);
		ag[i] = bench_agent(b, name, 0);
		rc = ag[i] == NULL;
	}
	t0 = now_us();
	for (i = 0; rc == 0 && i < n; i++)
		rc = publish(b, ag[i], blob, &ops[i]);
	for (i = 0; rc == 0 && i < n; i++)
		rc = wait_ok(ag[i], ops[i]);
	t1 = now_us();
	/* every agent queues a fetch of every other; their workers run them */
	for (i = 0; rc == 0 && i < n; i++)
		for (j = 0; rc == 0 && j < n; j++) {
			char name[32];

			if (i == j)
				continue;
			snprintf(name, sizeof(name), "agent-%d", j);
			rc = mu_md_fetch_remote(ag[i], name, NULL, NULL, &ops[(size_t)i * (size_t)n + (size_t)j]);
		}
	for (i = 0; rc == 0 && i < n; i++)
		for (j = 0; rc == 0 && j < n; j++)
			if (i != j)
				rc = wait_ok(ag[i], ops[(size_t)i * (size_t)n + (size_t)j]);
	t2 = now_us();
	for (i = 0; i < n; i++)
		mu_md_agent_free(ag[i]);
	free(ag);
	free(ops);
	if (rc != 0) {
		if (rc != 1) /* 1: bench_agent said why */
			fprintf(stderr, "muster bench md: all-to-all through %s at %s: %s\n",
			        b->backend, b->endpoint, mu_strerror(rc));
		return 1;
	}
	if (b->json)
		printf("{\"mode\": \"all-to-all\", \"backend\": \"%s\", \"agents\": %d, \"blob_bytes\": %d, "
		       "\"publish_s\": %.3f, \"fetch_all_s\": %.3f, \"total_s\": %.3f}\n",
		       b->backend, n, b->bytes, (double)(t1 - t0) / 1e6,
		       (double)(t2 - t1) / 1e6, (double)(t2 - t0) / 1e6);
	else
		printf("%s all-to-all, %d agents, %d-byte blobs: published in %.3f s, "
		       "all %d fetches done %.3f s later (%.3f s in all)\n",
		       b->backend, n, b->bytes, (double)(t1 - t0) / 1e6, n * (n - 1),
		       (double)(t2 - t1) / 1e6, (double)(t2 - t0) / 1e6);
	return 0;
}

int bench_md(int argc, char **argv)
{
	mdb_t b;
	char *blob;
	int npos, rc;
	cli_opt_t opts[] = {
		{"backend", OPT_STR, &b.backend, "etcd|tcpstore|p2p", "the exchange to measure (required)"},
		{"endpoint", OPT_STR, &b.endpoint, "EP", "etcd endpoints, or the TCPStore's host:port"},
		{"blob-bytes", OPT_INT, &b.bytes, "B", "payload size (default 1024)"},
		{"fetches", OPT_INT, &b.fetches, "N", "fetches per fetcher (default 1000)"},
		{"fetchers", OPT_INT, &b.fetchers, "N", "fetching agents, one thread each (default 1)"},
		{"agents", OPT_INT, &b.agents, "N", "instead: N agents publish and all fetch each other"},
		{"json", OPT_FLAG, &b.json, NULL, "one JSON line"},
	};
	cli_cmd_t cmd = {
		"muster bench md --backend etcd|tcpstore|p2p [--endpoint EP] [--blob-bytes B]",
		"Measure metadata fetches through one backend (latency percentiles and\n"
		"fetches/s), or with --agents N the time for N agents to publish and all fetch\n"
		"each other. bench/md.sh starts etcd and a store and runs the usual set.",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 0, 0};

	memset(&b, 0, sizeof(b));
	b.bytes = 1024;
	b.fetches = 1000;
	b.fetchers = 1;
	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if (b.backend == NULL || b.bytes < 0 || b.fetches < 1 || b.fetchers < 1 || b.agents < 0 ||
	    (strcmp(b.backend, "p2p") != 0 && b.endpoint == NULL) ||
	    (strcmp(b.backend, "p2p") && strcmp(b.backend, "etcd") && strcmp(b.backend, "tcpstore"))) {
		fprintf(stderr, "muster bench md: --backend etcd|tcpstore|p2p, with --endpoint for a store (see --help)\n");
		return 2;
	}
	b.p2p = strcmp(b.backend, "p2p") == 0;
	b.peer.ip = "127.0.0.1";
	if (b.p2p && b.agents > 0) {
		fprintf(stderr, "muster bench md: all-to-all goes through a store (etcd or tcpstore)\n");
		return 2;
	}
	blob = malloc((size_t)b.bytes + 1);
	if (blob == NULL) {
		fprintf(stderr, "muster bench md: no memory for a %d-byte blob\n", b.bytes);
		return 1;
	}
	memset(blob, 'm', (size_t)b.bytes);
	rc = b.agents > 0 ? all_to_all(&b, blob) : fetch_mode(&b, blob);
	free(blob);
	return rc;
}
