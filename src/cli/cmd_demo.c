/* SPDX-License-Identifier: MIT */
/*
 * `muster demo`: the system on one machine, narrated for a newcomer.
 *
 * Today it shows the device layer: a tracker starts, three device servers
 * register with it (the same code as `muster server`), jobs open sessions
 * on devices through the tracker, queue by priority while the devices are
 * busy, and a device that goes away is withdrawn at once. Everything it
 * starts it stops before returning.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "muster/server.h"
#include "muster/tracker.h"
#include "cli/cli_int.h"
#include "core/time_int.h"

#define T 10000 /* ms bound on every demo step */

typedef struct {
	const char *name;
	const char *key;
	mu_server_t *srv;
} device_t;

typedef struct {
	const char *name;
	double priority;
	int tracker_port;
	pthread_t th;
	int rc;
	mu_session_t *sess;
} job_t;

/* The order in which waiting jobs got their sessions. */
static pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t order_cond = PTHREAD_COND_INITIALIZER;
static job_t *order[8];
static int norder;

/* What every device runs for a session: echo (the stage runner comes later). */
static void echo(mu_session_t *s, void *ud)
{
	char buf[4096];
	size_t n;

	(void)ud;
	while (mu_session_recv(s, buf, sizeof(buf), &n, -1) == 0 && n > 0)
		if (mu_session_send(s, buf, n, T) != 0)
			break;
}

static void *job_main(void *arg)
{
	job_t *j = arg;

	j->rc = mu_session_request("127.0.0.1", j->tracker_port, "rasp",
	                           j->priority, 0, 3, 3 * T, &j->sess);
	pthread_mutex_lock(&order_lock);
	order[norder++] = j;
	pthread_cond_broadcast(&order_cond);
	pthread_mutex_unlock(&order_lock);
	return NULL;
}

static char *summary_json(int port)
{
	mu_tracker_client_t *c;
	char *json = NULL;

	if (mu_tracker_client_connect("127.0.0.1", port, T, &c) == 0)
		mu_tracker_client_summary(c, T, &json);
	mu_tracker_client_close(c);
	return json;
}

static int show_table(int port)
{
	char *json = summary_json(port), *text = NULL;
	int rc = json != NULL ? mu_tracker_summary_text(json, &text) : MU_EEOF;

	if (rc == 0)
		printf("\n%s\n", text);
	mu_free(json);
	mu_free(text);
	return rc;
}

/* Wait until the summary JSON does (or does not) contain needle. */
static int wait_summary(int port, const char *needle, int present)
{
	int64_t deadline = mu__deadline(T);

	while (mu__now_ms() < deadline) {
		char *json = summary_json(port);
		int hit = json != NULL && strstr(json, needle) != NULL;

		mu_free(json);
		if (hit == present)
			return 0;
	}
	return -ETIMEDOUT;
}

static const char *device_at(device_t *devs, const mu_session_t *s)
{
	const char *colon = strrchr(mu_session_peer(s), ':');
	int port = colon != NULL ? (int)strtol(colon + 1, NULL, 10) : -1;

	for (int i = 0; i < 3; i++)
		if (devs[i].srv != NULL && mu_server_port(devs[i].srv) == port)
			return devs[i].name;
	return "?";
}

static int say_hello(job_t *j, device_t *devs)
{
	char buf[64];
	size_t n = 0;
	int rc = mu_session_send(j->sess, "hello", 5, T);

	if (rc == 0)
		rc = mu_session_recv(j->sess, buf, sizeof(buf), &n, T);
	if (rc == 0)
		printf("   %s has a session on %s: it sent \"hello\", the device echoed \"%.*s\"\n",
		       j->name, device_at(devs, j->sess), (int)n, buf);
	return rc;
}

static int start_devices(int tport, device_t *devs)
{
	mu_server_opts_t o;
	int i, rc = 0;

	for (i = 0; i < 3 && rc == 0; i++) {
		mu_server_opts_init(&o);
		o.host = "127.0.0.1";
		o.port = 0;
		o.tracker_host = "127.0.0.1";
		o.tracker_port = tport;
		o.key = devs[i].key;
		o.silent = 1;
		o.on_session = echo;
		rc = mu_server_start(&o, &devs[i].srv);
		if (rc == 0)
			printf("   %-8s key %-7s listening on 127.0.0.1:%d\n", devs[i].name,
			       devs[i].key, mu_server_port(devs[i].srv));
	}
	if (rc == 0)
		rc = wait_summary(tport, "\"rasp\": {\"free\": 2,", 1);
	if (rc == 0)
		rc = wait_summary(tport, "\"jetson\": {\"free\": 1,", 1);
	return rc;
}

/* Steps 3 and 4: two jobs hold both boards; three more queue by priority. */
static int run_jobs(int tport, device_t *devs)
{
	job_t jobs[5] = {{"job-1", 1, tport, 0, 0, NULL}, {"job-2", 1, tport, 0, 0, NULL},
	                 {"job-A", 1, tport, 0, 0, NULL}, {"job-B", 5, tport, 0, 0, NULL},
	                 {"job-C", 3, tport, 0, 0, NULL}};
	int i, rc = 0, started = 0;

	printf("\n3. Two jobs ask the tracker for a rasp board. Each gets a device's address\n"
	       "   and matchkey, connects to the device and opens a session on it:\n");
	for (i = 0; i < 2 && rc == 0; i++) {
		rc = mu_session_request("127.0.0.1", tport, "rasp", 1, 0, 3, T, &jobs[i].sess);
		if (rc == 0)
			rc = say_hello(&jobs[i], devs);
	}
	printf("\n4. While both boards are busy, three more jobs ask for one, in this order:\n"
	       "   job-A (priority 1), job-B (priority 5), job-C (priority 3). They wait:\n");
	for (i = 2; i < 5 && rc == 0; i++) {
		char needle[64];

		/* one at a time, so the arrival order is the one announced */
		snprintf(needle, sizeof(needle), "\"pending\": %d}", i - 1);
		rc = pthread_create(&jobs[i].th, NULL, job_main, &jobs[i]) == 0 ? 0 : MU_ENOMEM;
		started += rc == 0;
		if (rc == 0)
			rc = wait_summary(tport, needle, 1);
	}
	if (rc == 0)
		rc = show_table(tport);
	printf("5. The sessions end one at a time. Each board registers again at once, and\n"
	       "   the tracker gives it to the waiting job with the highest priority:\n");
	for (i = 0; i < 3 && rc == 0; i++) {
		job_t *done = i < 2 ? &jobs[i] : order[0];

		mu_session_close(done->sess); /* the board is free again */
		done->sess = NULL;
		pthread_mutex_lock(&order_lock);
		while (norder <= i)
			pthread_cond_wait(&order_cond, &order_lock);
		pthread_mutex_unlock(&order_lock);
		rc = order[i]->rc;
		if (rc == 0)
			printf("   %s ended  ->  %s (priority %g) gets %s\n", done->name,
			       order[i]->name, order[i]->priority, device_at(devs, order[i]->sess));
	}
	for (i = 2; i < 2 + started; i++)
		pthread_join(jobs[i].th, NULL);
	for (i = 0; i < 5; i++)
		mu_session_close(jobs[i].sess);
	return rc;
}

static int demo(mu_tracker_t *t)
{
	int tport = mu_tracker_port(t), rc, i;
	device_t devs[3] = {{"rasp-0", "rasp", NULL}, {"rasp-1", "rasp", NULL},
	                    {"jetson-0", "jetson", NULL}};

	printf("1. A tracker runs on 127.0.0.1:%d. It speaks Apache TVM's RPC tracker\n"
	       "   protocol, so TVM's own servers and clients can use it too.\n", tport);
	printf("\n2. Three devices start and register with it (what `muster server --tracker\n"
	       "   HOST:PORT --key KEY` does on each machine):\n");
	rc = start_devices(tport, devs);
	if (rc == 0) {
		printf("\n   `muster query` (or TVM's query_rpc_tracker) shows:\n");
		rc = show_table(tport);
	}
	if (rc == 0)
		rc = run_jobs(tport, devs);
	if (rc == 0) {
		printf("\n6. jetson-0 is switched off. The tracker withdraws it at once, so no job\n"
		       "   is ever sent to a dead device:\n");
		mu_server_free(devs[2].srv);
		devs[2].srv = NULL;
		rc = wait_summary(tport, "server:jetson", 0);
		if (rc == 0)
			rc = show_table(tport);
	}
	for (i = 0; i < 3; i++)
		mu_server_free(devs[i].srv);
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
		"registering with it, jobs opening sessions on devices and queueing for them\n"
		"by priority. Everything it starts is stopped before it exits. No arguments.",
		NULL, 0, 0, 0};

	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("muster demo: devices, a tracker, and jobs\n"
	       "=========================================\n\n");
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
	if (rc == 0 && mu_tracker_client_connect("127.0.0.1", mu_tracker_port(t), T, &c) == 0) {
		if (mu_tracker_client_stop(c, mu_tracker_stop_key(t), T) == 0)
			printf("7. The tracker is stopped with its secret stop key. Done.\n");
		mu_tracker_client_close(c);
	}
	mu_tracker_free(t);
	if (rc != 0) {
		fprintf(stderr, "muster demo: a step failed: %s\n", mu_strerror(rc));
		return 1;
	}
	return 0;
}
