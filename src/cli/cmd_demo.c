/* SPDX-License-Identifier: MIT */
/*
 * `muster demo`: the system on one machine, narrated for a newcomer.
 *
 * Today it shows the device tracker: a tracker starts, simulated devices
 * register the way TVM's rpc_server (and later `muster server`) does, jobs
 * queue for devices with priorities, and the tracker hands devices out in
 * priority order and forgets a device that goes away. Everything it starts
 * it stops before returning.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "muster/tracker.h"
#include "cli/cli_int.h"
#include "core/time_int.h"

#define T 5000 /* ms bound on every demo step */

typedef struct {
	const char *name;
	const char *key;
	int port;
	mu_tracker_client_t *conn;
	int session; /* how many times it has been handed out */
} device_t;

typedef struct {
	const char *name;
	double priority;
	int port; /* tracker */
	pthread_t th;
	int rc;
	mu_tracker_grant_t grant;
} job_t;

/* Grants in the order the tracker made them (filled by the job threads). */
static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static job_t *done_order[8];
static int ndone;

static void *job_main(void *arg)
{
	job_t *j = arg;
	mu_tracker_client_t *c;

	j->rc = mu_tracker_client_connect("127.0.0.1", j->port, T, &c);
	if (j->rc == 0) {
		j->rc = mu_tracker_client_request(c, "rasp", j->priority, 3 * T,
		                                  &j->grant);
		mu_tracker_client_close(c);
	}
	pthread_mutex_lock(&done_lock);
	done_order[ndone++] = j;
	pthread_cond_signal(&done_cond);
	pthread_mutex_unlock(&done_lock);
	return NULL;
}

static int show_table(int port)
{
	mu_tracker_client_t *c;
	char *json = NULL, *text = NULL;
	int rc = mu_tracker_client_connect("127.0.0.1", port, T, &c);

	if (rc == 0)
		rc = mu_tracker_client_summary(c, T, &json);
	mu_tracker_client_close(c);
	if (rc == 0)
		rc = mu_tracker_summary_text(json, &text);
	if (rc == 0)
		printf("\n%s\n", text);
	mu_free(json);
	mu_free(text);
	return rc;
}

/* A device says "I am free, connect with this matchkey" (a PUT). */
static int offer(device_t *d)
{
	char mk[96];

	snprintf(mk, sizeof(mk), "%s:%s-session%d", d->key, d->name, d->session++);
	return mu_tracker_client_put(d->conn, d->key, d->port, mk, NULL, T);
}

static int register_device(int port, device_t *d)
{
	char info[64];
	int rc = mu_tracker_client_connect("127.0.0.1", port, T, &d->conn);

	snprintf(info, sizeof(info), "server:%s", d->key);
	if (rc == 0)
		rc = mu_tracker_client_update_info(d->conn, info, NULL, d->port, T);
	if (rc == 0)
		rc = offer(d);
	if (rc == 0)
		printf("   %-8s key %-7s listening on port %d\n", d->name, d->key, d->port);
	return rc;
}

/* Wait until the tracker's summary JSON does (or does not) contain needle. */
static int wait_summary(int port, const char *needle, int present)
{
	int64_t deadline = mu__deadline(T);

	while (mu__now_ms() < deadline) {
		mu_tracker_client_t *c;
		char *json = NULL;
		int hit = 0;

		if (mu_tracker_client_connect("127.0.0.1", port, T, &c) == 0 &&
		    mu_tracker_client_summary(c, T, &json) == 0)
			hit = strstr(json, needle) != NULL;
		mu_tracker_client_close(c);
		mu_free(json);
		if (hit == present)
			return 0;
	}
	return -1;
}

static int run_jobs(int port, device_t *devs)
{
	job_t jobs[3] = {{"job-A", 1, port, 0, 0, {{0}, 0, {0}}},
	                 {"job-B", 5, port, 0, 0, {{0}, 0, {0}}},
	                 {"job-C", 3, port, 0, 0, {{0}, 0, {0}}}};
	int i, rc = 0;

	printf("\n3. Both rasp boards are busy with earlier work. Three jobs now ask for a\n"
	       "   rasp board, in this order: job-A (priority 1), job-B (priority 5),\n"
	       "   job-C (priority 3). The tracker queues them; nothing is free yet.\n");
	for (i = 0; i < 3; i++) {
		char needle[64];

		/* one at a time, so the arrival order is the one announced */
		snprintf(needle, sizeof(needle), "\"rasp\": {\"free\": 0, \"pending\": %d}", i + 1);
		pthread_create(&jobs[i].th, NULL, job_main, &jobs[i]);
		if (rc == 0)
			rc = wait_summary(port, needle, 1) == 0 ? 0 : -ETIMEDOUT;
	}
	if (rc == 0)
		rc = show_table(port);
	printf("4. The boards finish their work and offer themselves again, one at a time.\n"
	       "   Higher priority is served first, whatever the arrival order:\n");
	for (i = 0; i < 3 && rc == 0; i++) {
		device_t *d = &devs[i % 2];

		rc = offer(d);
		pthread_mutex_lock(&done_lock);
		while (rc == 0 && ndone <= i)
			pthread_cond_wait(&done_cond, &done_lock);
		pthread_mutex_unlock(&done_lock);
		if (rc == 0 && done_order[i]->rc == 0)
			printf("   %s frees up  ->  granted to %s (priority %g), matchkey %s\n",
			       d->name, done_order[i]->name, done_order[i]->priority,
			       done_order[i]->grant.matchkey);
		else if (rc == 0)
			rc = done_order[i]->rc;
	}
	for (i = 0; i < 3; i++)
		pthread_join(jobs[i].th, NULL);
	return rc;
}

static int demo(mu_tracker_t *t)
{
	int port = mu_tracker_port(t), rc = 0, i;
	device_t devs[3] = {{"rasp-0", "rasp", 9090, NULL, 0},
	                    {"rasp-1", "rasp", 9091, NULL, 0},
	                    {"jetson-0", "jetson", 9092, NULL, 0}};
	mu_tracker_client_t *c;
	mu_tracker_grant_t g;

	printf("1. A tracker is running on 127.0.0.1:%d. It speaks Apache TVM's RPC tracker\n"
	       "   protocol, so TVM's own servers and clients could use it as well.\n", port);
	printf("\n2. Three devices register: each keeps a connection to the tracker and\n"
	       "   says \"I am free, connect to me with this matchkey\".\n");
	for (i = 0; i < 3 && rc == 0; i++)
		rc = register_device(port, &devs[i]);
	if (rc == 0) {
		printf("\n   `muster query` (or TVM's query_rpc_tracker) now shows:\n");
		rc = show_table(port);
	}
	/* earlier work takes both rasp boards */
	for (i = 0; i < 2 && rc == 0; i++) {
		rc = mu_tracker_client_connect("127.0.0.1", port, T, &c);
		if (rc == 0)
			rc = mu_tracker_client_request(c, "rasp", 1, T, &g);
		mu_tracker_client_close(c);
	}
	if (rc == 0)
		rc = run_jobs(port, devs);
	if (rc == 0) {
		printf("\n5. jetson-0 loses power: its connection drops and the tracker withdraws it\n"
		       "   at once, so no job is ever sent to a dead device:\n");
		mu_tracker_client_close(devs[2].conn);
		devs[2].conn = NULL;
		rc = wait_summary(port, "server:jetson", 0) == 0 ? show_table(port)
		                                                 : -ETIMEDOUT;
	}
	for (i = 0; i < 3; i++)
		mu_tracker_client_close(devs[i].conn);
	return rc;
}

int cmd_demo(int argc, char **argv)
{
	mu_tracker_opts_t o;
	mu_tracker_t *t;
	mu_tracker_client_t *c;
	int npos, rc;
	cli_cmd_t cmd = {
		"muster demo",
		"Show muster working on this machine, step by step: a device tracker, devices\n"
		"registering with it, jobs queueing for devices by priority. Everything it\n"
		"starts is stopped before it exits. Takes no arguments.",
		NULL, 0, 0, 0};

	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("muster demo: the device tracker\n"
	       "===============================\n\n");
	mu_tracker_opts_init(&o);
	o.host = "127.0.0.1";
	o.port = 0; /* any free port: the demo must not collide with a real tracker */
	o.silent = 1;
	rc = mu_tracker_start(&o, &t);
	if (rc != 0) {
		fprintf(stderr, "muster demo: cannot start a tracker: %s\n", mu_strerror(rc));
		return 1;
	}
	rc = demo(t);
	/* Stop it the way TVM's Tracker.terminate() does: STOP with the key. */
	if (mu_tracker_client_connect("127.0.0.1", mu_tracker_port(t), T, &c) == 0) {
		if (mu_tracker_client_stop(c, mu_tracker_stop_key(t), T) == 0)
			printf("6. The tracker is stopped with its secret stop key. Done.\n");
		mu_tracker_client_close(c);
	}
	mu_tracker_free(t);
	if (rc != 0) {
		fprintf(stderr, "muster demo: a step failed: %s\n", mu_strerror(rc));
		return 1;
	}
	return 0;
}
