/* SPDX-License-Identifier: MIT */
/*
 * `muster demo`: the main job on one machine, narrated for a newcomer.
 *
 * It starts a tracker and three device servers as separate processes (the
 * very commands one would run on real machines, printed as it goes), makes
 * a model that no one of the devices can hold, and runs it across them
 * through the tracker: devices requested, capabilities fetched, the model
 * cut to fit, each stage loaded (one device from its own copy, the others
 * streamed), forwards pipelined. Then it checks the split run against the
 * whole model in one process, bit for bit, and stops everything it
 * started.
 *
 * Its processes never outlive it: on SIGINT/SIGTERM a signal thread stops
 * them, removes the demo's directory and exits; each child also asks the
 * kernel for SIGTERM should the demo die without that (PR_SET_PDEATHSIG).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "muster/pipeline.h"
#include "muster/tracker.h"
#include "cli/cli_int.h"
#include "core/time_int.h"
#include "cli/demo/demo.h"
#include "cli/demo/fixture.h"

#define T 15000 /* ms bound on every step */
#define NDEV 3
#define LAYERS 8
#define WIDTH 1024
#define BATCH 4
#define FORWARDS 24
#define MICRO 3

static const char *const budgets[NDEV] = {"12M", "16M", "20M"};

/* A port nobody uses now (the tracker must have a known one). */
int demo_free_port(void)
{
	struct sockaddr_in a;
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &l) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* Start `muster ARGS...` with its output in the demo's log. */
int demo_spawn(demo_t *d, char *const *args)
{
	char *all[48];
	int n = 0;
	char log[128];
	pid_t pid, parent = getpid();
	int fd;

	/* the device servers get the demo's security options; the tracker
	 * speaks TVM's protocol, which has none */
	while (args[n] != NULL && n < 38) {
		all[n] = args[n];
		n++;
	}
	for (int i = 0; strcmp(args[1], "tracker") != 0 && d->sec_args[i] != NULL; i++)
		all[n++] = (char *)d->sec_args[i];
	all[n] = NULL;
	args = all;
	snprintf(log, sizeof(log), "%s/demo.log", d->dir);
	pthread_mutex_lock(&d->lock);
	if (d->stopping || d->npids == DEMO_MAX_PIDS) {
		pthread_mutex_unlock(&d->lock);
		return d->stopping ? -EINTR : -ENOSPC;
	}
	pid = fork();
	if (pid < 0) {
		pthread_mutex_unlock(&d->lock);
		return -errno;
	}
	if (pid == 0) {
		sigset_t none;

		/* the demo blocks SIGINT/SIGTERM for its signal thread; the
		 * command it runs must get them */
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		/* should the demo die without stopping us (SIGKILL), the kernel
		 * sends SIGTERM; if it died already, do not start */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(127);
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		execv(d->exe, args);
		_exit(127);
	}
	d->pids[d->npids++] = pid;
	pthread_mutex_unlock(&d->lock);
	printf("   $ muster");
	for (int i = 1; args[i] != NULL; i++)
		printf(" %s", args[i]);
	printf("\n");
	return 0;
}

/* SIGTERM, up to 5 s to exit, then SIGKILL; every one reaped. */
void demo_stop_all(demo_t *d)
{
	double deadline = mu__clock_ms() + 5000;
	int left;

	pthread_mutex_lock(&d->lock);
	left = d->npids;
	for (int i = 0; i < d->npids; i++)
		kill(d->pids[i], SIGTERM);
	while (left > 0 && mu__clock_ms() < deadline) {
		left = 0;
		for (int i = 0; i < d->npids; i++)
			if (d->pids[i] > 0 && waitpid(d->pids[i], NULL, WNOHANG) == 0)
				left++;
			else
				d->pids[i] = 0;
		if (left > 0)
			usleep(20000);
	}
	for (int i = 0; i < d->npids; i++)
		if (d->pids[i] > 0) {
			kill(d->pids[i], SIGKILL);
			waitpid(d->pids[i], NULL, 0);
		}
	d->npids = 0;
	pthread_mutex_unlock(&d->lock);
}

void demo_remove_dir(const demo_t *d)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "muster demo: could not remove %s\n", d->dir);
}

/* SIGINT/SIGTERM (the signal thread): stop what was started, clean up,
 * exit; the main thread may be anywhere, so it is not waited for. */
static void on_signal(void *ud)
{
	demo_t *d = ud;

	pthread_mutex_lock(&d->lock);
	d->stopping = 1;
	pthread_mutex_unlock(&d->lock);
	fflush(stdout);
	fprintf(stderr, "\nmuster demo: interrupted; stopping the processes it started\n");
	demo_stop_all(d);
	demo_remove_dir(d);
	fprintf(stderr, "muster demo: stopped; %s removed\n", d->dir);
	_exit(128 + cli_signal_caught());
}

static char *summary(int port)
{
	mu_tracker_client_t *c = NULL;
	char *json = NULL;

	if (mu_tracker_client_connect("127.0.0.1", port, 1000, &c) == 0)
		mu_tracker_client_summary(c, 1000, &json);
	mu_tracker_client_close(c);
	return json;
}

/* Wait until the tracker's summary contains needle. */
int demo_start_tracker(demo_t *d, char *targ, size_t n)
{
	char tport[16], tend[16];
	char *args[] = {d->exe, "tracker", "--host", "127.0.0.1", "--port", tport, "--port-end",
	                tend, NULL};

	d->tport = demo_free_port();
	snprintf(tport, sizeof(tport), "%d", d->tport);
	snprintf(tend, sizeof(tend), "%d", d->tport + 1); /* exactly that port */
	snprintf(targ, n, "127.0.0.1:%d", d->tport);
	printf("\n2. A tracker keeps the pool of devices. It speaks Apache TVM's RPC tracker\n"
	       "   protocol, so TVM's own servers and clients can use it too:\n");
	return demo_spawn(d, args);
}

int demo_wait_summary(int port, const char *needle)
{
	double deadline = mu__clock_ms() + T;

	while (mu__clock_ms() < deadline) {
		char *json = summary(port);
		int hit = json != NULL && strstr(json, needle) != NULL;

		mu_free(json);
		if (hit)
			return 0;
		usleep(50000);
	}
	return -ETIMEDOUT;
}

void demo_show_queue(int port)
{
	char *json = summary(port), *text = NULL;

	if (json != NULL && mu_tracker_summary_text(json, &text) == 0)
		printf("\n%s\n", text);
	mu_free(json);
	mu_free(text);
}

void demo_narrate(void *ud, const char *line)
{
	(void)ud;
	printf("   %s\n", line);
}

static int same(const mu_tensor_list_t *a, const mu_tensor_list_t *b)
{
	if (a->n != b->n)
		return 0;
	for (size_t i = 0; i < a->n; i++)
		if (a->t[i]->numel != b->t[i]->numel ||
		    memcmp(a->t[i]->data, b->t[i]->data, a->t[i]->numel * 4) != 0)
			return 0;
	return 1;
}

static int run_model(demo_t *d, const char *model, char *err, size_t el)
{
	mu_model_t *m = NULL;
	mu_cluster_t *cl = NULL;
	mu_cluster_opts_t o;
	mu_coord_opts_t co;
	mu_tensor_list_t in, first, ref, outs[MICRO], ins[MICRO];
	uint64_t dims[2] = {BATCH, WIDTH};
	mu_tensor_t *x;
	double t0, first_ms = 0, t1;
	int rc, done = 0;

	mu_tensor_list_init(&in);
	mu_tensor_list_init(&first);
	mu_tensor_list_init(&ref);
	rc = mu_model_open(model, &m, err, el);
	if (rc == 0 && (rc = cli_tensor_random("x", 2, dims, 7, &x)) == 0)
		rc = mu_tensor_list_push(&in, x);
	printf("\n4. A coordinator gets the devices through the tracker and splits the model\n"
	       "   over them. This process plays it; elsewhere it is\n"
	       "   $ muster run --tracker 127.0.0.1:%d --key demo --devices 3 \\\n"
	       "         --model %s --input FILE\n\n", d->tport, model);
	mu_cluster_opts_init(&o);
	o.tracker_host = "127.0.0.1";
	o.tracker_port = d->tport;
	o.key = "demo";
	o.devices = NDEV;
	o.request_timeout_ms = T;
	o.say = demo_narrate;
	mu_coord_opts_init(&co);
	co.sec = d->sec;
	o.coord = &co;
	t0 = mu__clock_ms();
	if (rc == 0)
		rc = mu_cluster_start(m, &o, &cl, err, el);
	/* one forward alone (the time to a first answer), then pipelined */
	if (rc == 0) {
		rc = mu_cluster_forward_many(cl, &in, 1, &first, err, el);
		first_ms = mu__clock_ms() - t0;
		done = 1;
	}
	t1 = mu__clock_ms();
	while (rc == 0 && done < FORWARDS + 1) {
		for (int j = 0; j < MICRO; j++) {
			ins[j] = in;
			mu_tensor_list_init(&outs[j]);
		}
		rc = mu_cluster_forward_many(cl, ins, MICRO, outs, err, el);
		for (int j = 0; j < MICRO; j++) {
			if (rc == 0 && !same(&first, &outs[j])) {
				snprintf(err, el, "a pipelined forward differs from the first");
				rc = MU_EPROTO;
			}
			mu_tensor_list_free(&outs[j]);
		}
		done += MICRO;
	}
	if (rc == 0) {
		printf("\n5. One forward ran alone, then %d more with %d in flight at a time, so each\n"
		       "   device works on one input while the next works on the one before. Per\n"
		       "   stage: the device, where its weights came from, its nodes, how long it\n"
		       "   took to load them, what it holds in memory, and its time per forward:\n",
		       FORWARDS, MICRO);
		cli_print_cluster(cl, 0, mu__clock_ms() - t1, done - 1, first_ms);
		printf("   (the first output's time includes getting the devices and loading every\n"
		       "   stage; forwards/s counts the pipelined ones)\n");
	}
	if (rc == 0) {
		printf("\n6. The check: the same input through the whole model in this process, with\n"
		       "   the same kernels. A split run must give exactly the same bits:\n");
		rc = mu_model_run(m, &in, &ref, err, el);
		if (rc == 0 && same(&first, &ref)) {
			printf("   y [%d, %d] = %.7g %.7g %.7g ... from the devices\n", BATCH, WIDTH,
			       (double)first.t[0]->data[0], (double)first.t[0]->data[1],
			       (double)first.t[0]->data[2]);
			printf("   y [%d, %d] = %.7g %.7g %.7g ... in one process\n", BATCH, WIDTH,
			       (double)ref.t[0]->data[0], (double)ref.t[0]->data[1],
			       (double)ref.t[0]->data[2]);
			printf("   bit-identical: all %d values match exactly.\n", BATCH * WIDTH);
		} else if (rc == 0) {
			snprintf(err, el, "the split run's output differs from the single-process run");
			rc = MU_EPROTO;
		}
	}
	mu_cluster_close(cl);
	if (rc == 0) {
		printf("\n7. The run is over: the sessions close and the devices register as free\n"
		       "   again, ready for the next job:\n");
		rc = demo_wait_summary(d->tport, "\"demo\": {\"free\": 3,");
		if (rc == 0)
			demo_show_queue(d->tport);
		else
			snprintf(err, el, "the devices did not register again");
	}
	mu_tensor_list_free(&first);
	mu_tensor_list_free(&ref);
	mu_tensor_list_free(&in);
	mu_model_close(m);
	return rc;
}

static int demo(demo_t *d, char *err, size_t el)
{
	char model[128], targ[32], b[32];
	uint64_t widths[LAYERS + 1];
	int rc;

	snprintf(model, sizeof(model), "%s/model", d->dir);
	for (int i = 0; i <= LAYERS; i++)
		widths[i] = WIDTH;
	rc = cli_gen_mlp(model, widths, LAYERS, BATCH, "gelu", 1, err, el);
	if (rc != 0)
		return rc;
	cli_bytes((double)LAYERS * (WIDTH * WIDTH + WIDTH) * 4, b, sizeof(b));
	printf("1. A model to run: %d dense layers of %dx%d with GELU between them, %s of\n"
	       "   weights (made by `muster model gen`), in %s.\n"
	       "   None of the devices below can hold it alone.\n", LAYERS, WIDTH, WIDTH, b, model);

	rc = demo_start_tracker(d, targ, sizeof(targ));
	printf("\n3. Three devices register with it under the key \"demo\", each with a memory\n"
	       "   budget for weights; the third holds its own copy of the model. Each also\n"
	       "   publishes its capabilities as metadata (md, over P2P here):\n");
	for (int i = 0; rc == 0 && i < NDEV; i++) {
		char *args[] = {d->exe, "server", "--host", "127.0.0.1", "--port", "0", "--tracker",
		                targ, "--key", "demo", "--mem", (char *)budgets[i], NULL, NULL, NULL};

		if (i == NDEV - 1) {
			args[12] = "--model";
			args[13] = model;
		}
		rc = demo_spawn(d, args);
	}
	if (rc == 0 && (rc = demo_wait_summary(d->tport, "\"demo\": {\"free\": 3,")) != 0)
		snprintf(err, el, "the devices did not all register within %d s (see %s/demo.log)",
		         T / 1000, d->dir);
	if (rc == 0) {
		printf("\n   `muster query --port %d` (or TVM's query_rpc_tracker) shows them:\n", d->tport);
		demo_show_queue(d->tport);
		rc = run_model(d, model, err, el);
	}
	return rc;
}

/* The demo's model: --model, else the project's copy beside this build
 * (build/bin/muster -> models/stories260K/). */
static void find_model(const char *exe, char *out, size_t n)
{
	const char *slash = strrchr(exe, '/');
	int dl = slash != NULL ? (int)(slash - exe) : 0;

	snprintf(out, n, "%.*s/../../models/stories260K/stories260K.gguf", dl, exe);
}

/* The device servers' share of --secret-file and --tls-*. */
static void secure_args(demo_t *d, const mu_secure_opts_t *o)
{
	const char *v[][2] = {{"--secret-file", o->secret_file}, {"--tls-cert", o->tls_cert},
	                      {"--tls-key", o->tls_key}, {"--tls-ca", o->tls_ca}};
	int n = 0;

	for (int i = 0; i < 4; i++)
		if (v[i][1] != NULL) {
			d->sec_args[n++] = v[i][0];
			d->sec_args[n++] = v[i][1];
		}
	d->sec_args[n] = NULL;
}

int cmd_demo(int argc, char **argv)
{
	demo_t d;
	int npos, rc, mlp = 0, stopping;
	ssize_t n;
	const char *model = NULL;
	char err[2048] = "", found[4200];
	cli_secure_t cs;
	cli_opt_t opts[] = {
		{"mlp", OPT_FLAG, &mlp, NULL, "the forward-pass show instead: a generated model none of "
		 "the devices can hold, split and run, bit-identical to one process"},
		{"model", OPT_STR, &model, "FILE", "the LLM to generate with (default: the project's "
		 "models/stories260K/stories260K.gguf)"},
		CLI_SECURE_OPTS(cs),
	};
	cli_cmd_t c = {
		"muster demo [--mlp] [--model FILE]",
		"Show muster's main job on this machine, step by step: a tracker and device\n"
		"servers start as processes; a really trained language model (stories260K)\n"
		"is split across three of them through the tracker and tells its story token\n"
		"by token; one device is killed mid-sentence and a spare takes its place\n"
		"without changing a word; and the story is checked against the model run whole\n"
		"in this process. With --mlp it shows the forward-pass job instead.\n"
		"\n"
		"Every process it starts is stopped before it exits, also on Ctrl-C or\n"
		"SIGTERM (and should the demo be killed outright, the kernel sends them\n"
		"SIGTERM). Its files (the model, the processes' log) go in a new directory\n"
		"/tmp/muster-demo-XXXXXX, removed at the end and on Ctrl-C or SIGTERM; when\n"
		"a step fails it is kept and its path printed, to read the log. Exit status:\n"
		"0 when every step passed, 1 otherwise, 128 + the signal's number after\n"
		"Ctrl-C (130) or SIGTERM (143).",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 0, 0};

	cli_secure_init(&cs);
	rc = cli_parse(&c, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	memset(&d, 0, sizeof(d));
	if ((rc = cli_secure_apply("muster demo", &cs, &d.sec)) != 0)
		return rc;
	secure_args(&d, &cs.o);
	pthread_mutex_init(&d.lock, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	n = readlink("/proc/self/exe", d.exe, sizeof(d.exe) - 1);
	snprintf(d.dir, sizeof(d.dir), "/tmp/muster-demo-XXXXXX");
	if (n <= 0 || mkdtemp(d.dir) == NULL) {
		fprintf(stderr, "muster demo: cannot find this program or make a directory under /tmp\n");
		return 1;
	}
	d.exe[n] = '\0';
	cli_on_signal(on_signal, &d); /* before any thread or child starts */
	if (model == NULL)
		find_model(d.exe, found, sizeof(found));
	if (mlp) {
		printf("muster demo: one model, split across devices found through a tracker\n"
		       "====================================================================\n\n");
		rc = demo(&d, err, sizeof(err));
	} else {
		printf("muster demo: a language model, split across devices found through a tracker\n"
		       "===========================================================================\n\n");
		rc = demo_llm(&d, model != NULL ? model : found, err, sizeof(err));
	}
	pthread_mutex_lock(&d.lock);
	stopping = d.stopping;
	pthread_mutex_unlock(&d.lock);
	/* A step that failed because the signal thread is stopping its
	 * processes is no failure to report: that thread exits 128 + the
	 * signal once it is done, so wait for it here (signals are blocked in
	 * this thread, pause only waits). */
	while (stopping)
		pause();
	demo_stop_all(&d);
	if (rc == 0)
		printf("8. Everything the demo started is stopped. Done.\n");
	else
		fprintf(stderr, "\nmuster demo: a step failed: %s\n(the processes' log: %s/demo.log, "
		        "kept)\n", err[0] ? err : mu_strerror(rc), d.dir);
	if (rc == 0)
		demo_remove_dir(&d);
	mu_secure_free(d.sec);
	return rc == 0 ? 0 : 1;
}
