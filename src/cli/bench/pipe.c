/* SPDX-License-Identifier: MIT */
/*
 * `muster bench pipeline`: four measurements, each against its own
 * yardstick taken in the same run.
 *
 *  frame     a large tensor sent as an rlx frame between two processes over
 *            loopback TCP, against the same bytes sent with plain send()
 *            and recv() on the same kind of connection;
 *  pipeline  N equal stages in this process with M forwards in flight,
 *            against the ideal rate the stages' own compute times allow on
 *            this machine's cores;
 *  executor  a large MLP forward through the executor, against the same
 *            sequence of OpenBLAS calls made directly;
 *  resnet18  torchvision's resnet18 (a model directory tools/torchbench.py
 *            exports) through the executor, against torch's own forward
 *            of the same model and image on the same thread count (one),
 *            which tools/torchbench.py times in a child process.
 */
#include <errno.h>
#include <poll.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "muster/pipeline.h"
#include "cli/cli_int.h"
#include "core/secure_int.h"
#include "core/sock_int.h"
#include "core/time_int.h"
#include "cli/demo/fixture.h"

static double now_s(void)
{
	return mu__clock_ms() / 1e3;
}

/* ---- frame vs raw socket ---- */

/* The receiving process: frames (or raw blocks of `bytes`) until EOF, a
 * one-byte ack after each. */
static void receiver(int lfd, const mu_secure_t *sec, int raw, uint64_t bytes, int rounds)
{
	struct pollfd pfd = {lfd, POLLIN, 0};
	/* the listener is non-blocking: wait for the sender's connect */
	int sfd = poll(&pfd, 1, 10000) == 1 ? accept(lfd, NULL, NULL) : -1;
	char *buf = raw ? malloc(bytes) : NULL;
	mu_stream_t *fd = NULL;
	mu_frame_limits_t lim;

	if (sfd < 0 || mu__secure_stream(sec, sfd, 1, NULL, &fd) != 0 ||
	    mu__sock_handshake(fd, mu__deadline(10000)) != 0)
		_exit(1);
	mu_frame_limits_init(&lim);
	lim.max_bytes = bytes;
	for (int r = 0; r < rounds; r++) {
		mu_tensor_list_t l;
		int rc;

		mu_tensor_list_init(&l);
		if (raw == 2) { /* a fresh buffer, as a new tensor needs */
			free(buf);
			buf = malloc(bytes);
		}
		rc = raw ? mu__sock_recv_all(fd, buf, bytes, MU_NO_DEADLINE)
		         : mu_frame_recv(fd, &lim, &l, -1);
		mu_tensor_list_free(&l);
		if (rc != 0 || mu__sock_send_all(fd, "k", 1, mu__deadline(10000)) != 0)
			_exit(1);
	}
	_exit(0);
}

/* Seconds for `rounds` frames (or raw blocks) to another process, each
 * acknowledged; over sec's TLS (ssec on the server side) when given. */
static double transfer(int raw, uint64_t bytes, int rounds, const mu_tensor_list_t *l,
                       const char *block, const mu_secure_t *ssec, const mu_secure_t *csec)
{
	int lfd, port, status;
	mu_stream_t *fd = NULL;
	pid_t pid;
	double t0, t;
	char ack;

	if (mu__sock_listen("127.0.0.1", 0, 1, &lfd, &port) != 0)
		return -1;
	pid = fork();
	if (pid == 0)
		receiver(lfd, ssec, raw, bytes, rounds);
	close(lfd);
	if (pid < 0 || mu__sock_connect("127.0.0.1", port, csec, mu__deadline(5000), &fd) != 0)
		return -1;
	t0 = now_s();
	for (int r = 0; r < rounds; r++) {
		int rc = raw ? mu__sock_send_all(fd, block, bytes, MU_NO_DEADLINE)
		             : mu_frame_send(fd, l, -1);

		if (rc != 0 || mu__sock_recv_all(fd, &ack, 1, mu__deadline(60000)) != 0) {
			t0 = -1;
			break;
		}
	}
	t = now_s() - t0;
	mu__sock_close(fd);
	waitpid(pid, &status, 0);
	return t0 < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ? -1 : t;
}

/* The accepting process of connect_ms: n connections, each through its
 * handshakes, one byte in, one byte out. */
static void accepter(int lfd, const mu_secure_t *sec, int n)
{
	for (int i = 0; i < n; i++) {
		struct pollfd pfd = {lfd, POLLIN, 0};
		int sfd = poll(&pfd, 1, 10000) == 1 ? accept(lfd, NULL, NULL) : -1;
		mu_stream_t *s = NULL;
		char b;
		int one = 1;

		/* as every muster server does (core/accept.c): the handshakes'
		 * small records must not wait for Nagle */
		if (sfd >= 0)
			setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (sfd < 0 || mu__secure_stream(sec, sfd, 1, NULL, &s) != 0 ||
		    mu__sock_recv_all(s, &b, 1, mu__deadline(10000)) != 0 ||
		    mu__sock_send_all(s, &b, 1, mu__deadline(10000)) != 0)
			_exit(1);
		mu__sock_close(s);
	}
	_exit(0);
}

/* Mean milliseconds from connect to the first byte answered, over n
 * connections to another process: what a session pays for its
 * handshakes (TLS, shared secret) before any work. */
static double connect_ms(const mu_secure_t *sec, int n)
{
	int lfd, port, status, rc = 0;
	pid_t pid;
	double t0;

	if (mu__sock_listen("127.0.0.1", 0, 1, &lfd, &port) != 0)
		return -1;
	pid = fork();
	if (pid == 0)
		accepter(lfd, sec, n);
	close(lfd);
	t0 = now_s();
	for (int i = 0; pid > 0 && rc == 0 && i < n; i++) {
		mu_stream_t *s = NULL;
		char b = 'x';

		rc = mu__sock_connect("127.0.0.1", port, sec, mu__deadline(10000), &s);
		if (rc == 0 && (rc = mu__sock_send_all(s, &b, 1, mu__deadline(10000))) == 0)
			rc = mu__sock_recv_all(s, &b, 1, mu__deadline(10000));
		mu__sock_close(s);
	}
	t0 = (now_s() - t0) * 1e3 / n;
	if (pid > 0)
		waitpid(pid, &status, 0);
	return pid < 0 || rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ? -1 : t0;
}

/* --secret-file/--tls-*: the same frames over them, and the handshake's
 * cost; tf is the plain frames' time. */
static int bench_secure(const mu_secure_t *sec, const mu_tensor_list_t *l, uint64_t bytes,
                        int rounds, double tf)
{
	double ts = transfer(0, bytes, rounds, l, NULL, sec, sec), ts2, cp, cs;

	ts2 = transfer(0, bytes, rounds, l, NULL, sec, sec);
	ts = ts2 > 0 && ts2 < ts ? ts2 : ts;
	cp = connect_ms(NULL, 50);
	cs = connect_ms(sec, 50);
	if (ts <= 0 || cp <= 0 || cs <= 0) {
		fprintf(stderr, "muster bench pipeline: a transfer over --tls-*/--secret-file failed "
		        "(the certificate must be for 127.0.0.1)\n");
		return 1;
	}
	printf("  rlx frame, secured   %8.1f MiB/s (%s)\n", (double)bytes * rounds / ts / 1048576.0,
	       mu__secure_kind(sec));
	printf("  ratio secured/plain  %8.2f\n", tf / ts);
	printf("  connect to 1st byte  %8.3f ms plain, %.3f ms secured: %+.3f ms per session "
	       "(mean of 50)\n\n", cp, cs, cs - cp);
	return 0;
}

static int bench_frame(int mib, int rounds, const mu_secure_t *sec)
{
	uint64_t dims[1] = {(uint64_t)mib << 18}; /* mib MiB of f32 */
	mu_tensor_list_t l;
	mu_tensor_t *t;
	double tf, tr, tn;
	uint64_t bytes;
	char *block;
	int rc;

	mu_tensor_list_init(&l);
	if (cli_tensor_random("big", 1, dims, 1, &t) != 0 || mu_tensor_list_push(&l, t) != 0) {
		fprintf(stderr, "muster bench pipeline: no memory for a %d MiB tensor\n", mib);
		return 1;
	}
	bytes = mu_frame_size(&l);
	block = calloc(1, bytes);
	if (block == NULL) {
		fprintf(stderr, "muster bench pipeline: no memory for a %d MiB frame\n", mib);
		mu_tensor_list_free(&l);
		return 1;
	}
	memcpy(block, t->data, t->numel * 4); /* the same bytes, touched */
	tr = transfer(1, bytes, rounds, NULL, block, NULL, NULL);
	tf = transfer(0, bytes, rounds, &l, NULL, NULL, NULL);
	tn = transfer(2, bytes, rounds, NULL, block, NULL, NULL);
	{
		double tn2 = transfer(2, bytes, rounds, NULL, block, NULL, NULL);

		tn = tn2 > 0 && tn2 < tn ? tn2 : tn;
	}
	/* once more each, interleaved, and keep the better of two */
	{
		double tr2 = transfer(1, bytes, rounds, NULL, block, NULL, NULL);
		double tf2 = transfer(0, bytes, rounds, &l, NULL, NULL, NULL);

		tr = tr2 > 0 && tr2 < tr ? tr2 : tr;
		tf = tf2 > 0 && tf2 < tf ? tf2 : tf;
	}
	free(block);
	if (tf <= 0 || tr <= 0 || tn <= 0) {
		fprintf(stderr, "muster bench pipeline: a transfer failed\n");
		mu_tensor_list_free(&l);
		return 1;
	}
	printf("frame: a %d MiB tensor between two processes over loopback TCP, %d rounds each\n", mib,
	       rounds);
	printf("  rlx frame (muster)   %8.1f MiB/s\n", (double)bytes * rounds / tf / 1048576.0);
	printf("  raw send/recv        %8.1f MiB/s (into one reused buffer)\n", (double)bytes * rounds / tr / 1048576.0);
	printf("  raw into new memory  %8.1f MiB/s\n", (double)bytes * rounds / tn / 1048576.0);
	printf("  ratio frame/raw      %8.2f (raw into one buffer reused every round)\n", tr / tf);
	printf("  ratio frame/raw-new  %8.2f (raw into new memory, as a received tensor needs)\n%s",
	       tn / tf, sec != NULL ? "" : "\n");
	rc = sec != NULL ? bench_secure(sec, &l, bytes, rounds, tf) : 0;
	mu_tensor_list_free(&l);
	return rc;
}

/* ---- pipelined stages vs the ideal ---- */

/* bench_stages's setting: N stage servers in this process and a
 * coordinator through them. */
typedef struct {
	int n, ncpu;
	mu_stage_t *st[16];
	mu_stage_server_t *srv[16];
	mu_coord_t *c;
	mu_tensor_list_t in;
	double maxs, sum; /* a stage's compute per forward (s), 1 in flight */
	char err[1024];
} stages_t;

/* Generate the model, load and serve each stage, connect. */
static int stages_start(stages_t *s, const char *tmp, int width, int per_stage, int batch)
{
	uint64_t w[257], xd[2] = {(uint64_t)batch, (uint64_t)width};
	int layers = s->n * per_stage, rc;
	char addr[16][32];
	const char *addrs[16];
	mu_tensor_t *x;

	for (int i = 0; i <= layers; i++)
		w[i] = (uint64_t)width;
	rc = cli_gen_mlp(tmp, w, layers, (uint64_t)batch, "relu", 1, s->err, sizeof(s->err));
	for (int i = 0; rc == 0 && i < s->n; i++) {
		mu_stage_server_opts_t o;

		rc = mu_stage_load(tmp, i, s->n, &s->st[i], s->err, sizeof(s->err));
		mu_stage_server_opts_init(&o);
		if (rc == 0)
			rc = mu_stage_server_start(s->st[i], &o, &s->srv[i]);
		if (rc == 0) {
			snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d", mu_stage_server_port(s->srv[i]));
			addrs[i] = addr[i];
		}
	}
	if (rc == 0 && (rc = cli_tensor_random("x", 2, xd, 2, &x)) == 0)
		rc = mu_tensor_list_push(&s->in, x);
	if (rc == 0)
		rc = mu_coord_connect(addrs, s->n, NULL, &s->c, s->err, sizeof(s->err));
	return rc;
}

static void stages_stop(stages_t *s)
{
	mu_coord_close(s->c);
	for (int i = 0; i < s->n; i++) {
		mu_stage_server_free(s->srv[i]);
		mu_stage_free(s->st[i]);
	}
	mu_tensor_list_free(&s->in);
}

/* Each stage's compute so far (ms), into ms[0..n). */
static void stages_compute(const stages_t *s, double *ms)
{
	for (int k = 0; k < s->n; k++) {
		mu_stage_timing_t tm;

		mu_coord_timing(s->c, k, &tm);
		ms[k] = tm.compute_ms;
	}
}

/* `forwards` forwards with m in flight, and the table's row for them. */
static int stages_row(stages_t *s, int m, int forwards)
{
	mu_tensor_list_t *ins = calloc((size_t)m, sizeof(*ins)), *outs = calloc((size_t)m, sizeof(*outs));
	double before[16], after[16], t0, t, ideal, worst = 0;
	int done = 0, rc = 0;

	stages_compute(s, before);
	t0 = now_s();
	while (rc == 0 && done < forwards) {
		for (int j = 0; j < m; j++) {
			ins[j] = s->in;
			mu_tensor_list_init(&outs[j]);
		}
		rc = m == 1 ? mu_coord_forward(s->c, &s->in, &outs[0], s->err, sizeof(s->err))
		            : mu_coord_forward_many(s->c, ins, m, outs, s->err, sizeof(s->err));
		for (int j = 0; j < m; j++)
			mu_tensor_list_free(&outs[j]);
		done += m;
	}
	t = now_s() - t0;
	stages_compute(s, after);
	/* each stage's own compute per forward, measured alone (one in
	 * flight): the ideal pipeline is paced by the slowest stage, or by
	 * the cores when there are more stages than cores */
	for (int k = 0; m == 1 && k < s->n; k++) {
		double per = (after[k] - before[k]) / done / 1e3;

		s->maxs = per > s->maxs ? per : s->maxs;
		s->sum += per;
	}
	ideal = m == 1 ? 1.0 / s->sum
	               : 1.0 / (s->maxs > s->sum / s->ncpu ? s->maxs : s->sum / s->ncpu);
	for (int k = 0; k < s->n; k++)
		if ((after[k] - before[k]) / done > worst)
			worst = (after[k] - before[k]) / done;
	if (rc == 0)
		printf("  %-10d %12.1f %12.1f %9.0f%% %18.2f\n", m, done / t, ideal,
		       100.0 * done / t / ideal, worst);
	free(ins);
	free(outs);
	return rc;
}

static int bench_stages(int nstages, int width, int per_stage, int batch, int forwards,
                          const char *tmp)
{
	stages_t s = {.n = nstages, .ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN)};
	int rc;

	if (nstages > 16 || nstages * per_stage > 256)
		return 2;
	mu_tensor_list_init(&s.in);
	rc = stages_start(&s, tmp, width, per_stage, batch);
	printf("pipeline: %d equal stages of %d layers %dx%d (batch %d), in this process, %d cores\n",
	       nstages, per_stage, width, width, batch, s.ncpu);
	printf("  %-10s %12s %12s %10s %18s\n", "in flight", "forwards/s", "ideal/s", "of ideal",
	       "slowest stage ms");
	for (int m = 1; rc == 0 && m <= 2 * nstages; m = m == 1 ? nstages : m * 2)
		rc = stages_row(&s, m, forwards);
	printf("  (ideal, from each stage's compute time measured with 1 in flight: their sum\n"
	       "   for 1 in flight; for more, the slowest stage or all the work spread over\n"
	       "   every core, whichever is slower. A stage's own compute per forward grows\n"
	       "   when stages share the cores' caches and memory bandwidth.)\n\n");
	if (rc != 0)
		fprintf(stderr, "muster bench pipeline: %s\n", s.err[0] != '\0' ? s.err : mu_strerror(rc));
	stages_stop(&s);
	return rc == 0 ? 0 : 1;
}

/* ---- executor vs OpenBLAS directly ---- */

static int bench_executor(int width, int layers, int batch, int rounds, const char *tmp)
{
	uint64_t w[65], xd[2] = {(uint64_t)batch, (uint64_t)width};
	mu_model_t *m = NULL;
	mu_tensor_list_t in, weights;
	mu_tensor_t *x;
	char err[1024] = "", path[4096];
	double te = 1e30, td = 1e30;
	float *a, *b;
	int rc;

	if (layers > 64)
		return 2;
	for (int i = 0; i <= layers; i++)
		w[i] = (uint64_t)width;
	rc = cli_gen_mlp(tmp, w, layers, (uint64_t)batch, "relu", 3, err, sizeof(err));
	if (rc == 0)
		rc = mu_model_open(tmp, &m, err, sizeof(err));
	mu_tensor_list_init(&in);
	mu_tensor_list_init(&weights);
	snprintf(path, sizeof(path), "%s/model.safetensors", tmp);
	if (rc == 0 && (rc = cli_tensor_random("x", 2, xd, 4, &x)) == 0)
		rc = mu_tensor_list_push(&in, x);
	if (rc == 0)
		rc = mu_safetensors_read(path, &weights, err, sizeof(err));
	a = calloc((size_t)batch * (size_t)width, sizeof(float));
	b = calloc((size_t)batch * (size_t)width, sizeof(float));
	if (rc != 0 || a == NULL || b == NULL) {
		fprintf(stderr, "muster bench pipeline: %s\n",
		        rc == 0 ? "out of memory" : err[0] != '\0' ? err : mu_strerror(rc));
		mu_model_close(m);
		return 1;
	}
	openblas_set_num_threads(1);
	for (int r = 0; rc == 0 && r <= rounds; r++) { /* round 0 warms up */
		mu_tensor_list_t out;
		double t0 = now_s(), t;

		mu_tensor_list_init(&out);
		rc = mu_model_run(m, &in, &out, err, sizeof(err));
		t = now_s() - t0;
		mu_tensor_list_free(&out);
		if (r > 0 && t < te)
			te = t;
		/* the same work by hand: per layer, rows = bias, += x W^T, relu */
		t0 = now_s();
		memcpy(a, x->data, sizeof(float) * (size_t)batch * (size_t)width);
		for (int l = 0; l < layers; l++) {
			char wn[32], bn[32];
			const float *W, *bias;
			float *tmpp;

			snprintf(wn, sizeof(wn), "fc%d.weight", l);
			snprintf(bn, sizeof(bn), "fc%d.bias", l);
			W = mu_tensor_list_find(&weights, wn)->data;
			bias = mu_tensor_list_find(&weights, bn)->data;

			for (int i = 0; i < batch; i++)
				memcpy(b + (size_t)i * width, bias, sizeof(float) * (size_t)width);
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, width, width, 1.0f, a,
			            width, W, width, 1.0f, b, width);
			if (l < layers - 1)
				for (size_t i = 0; i < (size_t)batch * (size_t)width; i++)
					b[i] = b[i] > 0 ? b[i] : 0;
			tmpp = a;
			a = b;
			b = tmpp;
		}
		t = now_s() - t0;
		if (r > 0 && t < td)
			td = t;
	}
	if (rc == 0) {
		printf("executor: an MLP of %d layers %dx%d, batch %d, one thread, best of %d\n", layers,
		       width, width, batch, rounds);
		printf("  muster executor      %8.2f ms\n", te * 1e3);
		printf("  OpenBLAS directly    %8.2f ms\n", td * 1e3);
		printf("  ratio executor/direct %7.3f\n", te / td);
	} else {
		fprintf(stderr, "muster bench pipeline: %s\n", err[0] != '\0' ? err : mu_strerror(rc));
	}
	free(a);
	free(b);
	mu_tensor_list_free(&in);
	mu_tensor_list_free(&weights);
	mu_model_close(m);
	return rc == 0 ? 0 : 1;
}

/* ---- resnet18: the executor against torch's own forward ---- */

/* Run `python script time dir --threads 1 --forwards n` and read torch's
 * forwards/s from its output; -1 when it fails. */
static double torch_rate(const char *python, const char *script, const char *dir, int forwards)
{
	char nf[16], line[512];
	int pfd[2], status;
	double rate = -1;
	FILE *f;
	pid_t pid;

	snprintf(nf, sizeof(nf), "%d", forwards);
	if (pipe(pfd) != 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(pfd[1], 1);
		close(pfd[0]);
		close(pfd[1]);
		execl(python, python, script, "time", dir, "--threads", "1", "--forwards", nf,
		      (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	f = pid > 0 ? fdopen(pfd[0], "r") : NULL;
	while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
		const char *p = strstr(line, "torch forwards/s ");

		if (p != NULL)
			rate = strtod(p + strlen("torch forwards/s "), NULL);
	}
	if (f != NULL)
		fclose(f);
	else
		close(pfd[0]);
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0)
		return -1;
	return rate;
}

static int bench_resnet(const char *dir, const char *python, const char *script, int forwards)
{
	mu_tensor_list_t in;
	mu_model_t *m = NULL;
	char err[1024], path[4096];
	double best = 1e30, rate;
	int rc;

	mu_tensor_list_init(&in);
	snprintf(path, sizeof(path), "%s/input.safetensors", dir);
	rc = mu_model_open(dir, &m, err, sizeof(err));
	if (rc == 0)
		rc = mu_safetensors_read(path, &in, err, sizeof(err));
	for (int r = 0; rc == 0 && r <= forwards; r++) { /* round 0 warms up */
		mu_tensor_list_t out;
		double t0 = now_s(), t;

		mu_tensor_list_init(&out);
		rc = mu_model_run(m, &in, &out, err, sizeof(err)); /* one OpenBLAS thread */
		t = now_s() - t0;
		mu_tensor_list_free(&out);
		if (r > 0 && t < best)
			best = t;
	}
	mu_tensor_list_free(&in);
	mu_model_close(m);
	if (rc != 0) {
		fprintf(stderr, "muster bench pipeline: resnet18 in %s: %s\n", dir, err);
		return 1;
	}
	rate = torch_rate(python, script, dir, forwards);
	printf("resnet18: %s, one thread, best of %d forwards\n", dir, forwards);
	printf("  muster executor      %8.2f forwards/s %9.2f ms\n", 1.0 / best, best * 1e3);
	if (rate <= 0) {
		fprintf(stderr, "muster bench pipeline: torch's timing (%s %s time %s) failed\n",
		        python, script, dir);
		return 1;
	}
	printf("  torch, 1 thread      %8.2f forwards/s %9.2f ms\n", rate, 1e3 / rate);
	printf("  ratio muster/torch    %7.3f\n", 1.0 / best / rate);
	return 0;
}

int bench_pipeline(int argc, char **argv)
{
	int mib = 64, rounds = 8, stages = 4, width = 1024, per_stage = 4, batch = 16, forwards = 64,
	    ex_width = 2048, ex_layers = 8, ex_batch = 64, npos, rc;
	const char *only = NULL, *resnet = NULL, *script = "tools/torchbench.py", *python = "/usr/bin/python3";
	int rn_forwards = 8;
	char tmp[] = "/tmp/muster-bench-XXXXXX", cmd[128];
	cli_secure_t cs;
	mu_secure_t *sec = NULL;
	cli_opt_t opts[] = {
		{"only", OPT_STR, &only, "frame|pipeline|executor|resnet18",
		 "run one part (default: all; resnet18 only with --resnet18)"},
		{"frame-mib", OPT_INT, &mib, "N", "size of the frame's tensor (default 64)"},
		{"rounds", OPT_INT, &rounds, "N", "frames sent per measurement (default 8)"},
		{"of", OPT_INT, &stages, "N", "pipeline: this many equal stages (default 4)"},
		{"width", OPT_INT, &width, "W", "pipeline: layer width (default 1024)"},
		{"layers-per-stage", OPT_INT, &per_stage, "L", "pipeline: layers per stage (default 4)"},
		{"batch", OPT_INT, &batch, "B", "pipeline: rows per forward (default 16)"},
		{"forwards", OPT_INT, &forwards, "N", "pipeline: forwards per measurement (default 64)"},
		{"exec-width", OPT_INT, &ex_width, "W", "executor: layer width (default 2048)"},
		{"exec-layers", OPT_INT, &ex_layers, "L", "executor: layers (default 8)"},
		{"exec-batch", OPT_INT, &ex_batch, "B", "executor: rows (default 64)"},
		{"resnet18", OPT_STR, &resnet, "DIR", "resnet18: the model directory `tools/torchbench.py export DIR` made"},
		{"torch-bench", OPT_STR, &script, "FILE", "resnet18: tools/torchbench.py, which times torch (default: that path)"},
		{"python", OPT_STR, &python, "FILE", "resnet18: the python with torch (default /usr/bin/python3)"},
		{"resnet-forwards", OPT_INT, &rn_forwards, "N", "resnet18: forwards timed on each side (default 8)"},
		CLI_SECURE_OPTS(cs),
		CLI_ALIAS("stages", "of"), /* --stages is addresses everywhere else */
	};
	cli_cmd_t cmd_ = {
		"muster bench pipeline [--only frame|pipeline|executor] [options]",
		"Measure the pipeline's costs, each against a yardstick from the same run:\n"
		"the tensor wire against raw loopback sockets, pipelined stages against the\n"
		"ideal their compute allows, the executor against OpenBLAS called directly,\n"
		"and (with --resnet18 DIR) resnet18's forwards/s against torch's own forward\n"
		"on the same thread count.",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 0, 0};

	cli_secure_init(&cs);
	rc = cli_parse(&cmd_, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if ((rc = cli_secure_apply("muster bench pipeline", &cs, &sec)) != 0)
		return rc;
	if (mib < 1 || rounds < 1 || stages < 1 || stages > 16 || width < 1 || per_stage < 1 ||
	    stages * per_stage > 256 || batch < 1 || forwards < 1 || ex_width < 1 || ex_layers < 1 ||
	    ex_layers > 64 || ex_batch < 1 || rn_forwards < 1 ||
	    (only != NULL && strcmp(only, "resnet18") == 0 && resnet == NULL)) {
		fprintf(stderr, "muster bench pipeline: sizes must be positive (--of <= 16, "
		        "--of * --layers-per-stage <= 256, --exec-layers <= 64); "
		        "--only resnet18 needs --resnet18 DIR\n");
		mu_secure_free(sec);
		return 2;
	}
	if (only != NULL && strcmp(only, "frame") != 0 && strcmp(only, "pipeline") != 0 &&
	    strcmp(only, "executor") != 0 && strcmp(only, "resnet18") != 0) {
		fprintf(stderr, "muster bench pipeline: --only %s is not frame, pipeline, executor or "
		        "resnet18\n", only);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (mkdtemp(tmp) == NULL) {
		fprintf(stderr, "muster bench pipeline: cannot make a temporary directory\n");
		return 1;
	}
	if (rc == 0 && (only == NULL || strcmp(only, "frame") == 0))
		rc = bench_frame(mib, rounds, sec);
	if (rc == 0 && (only == NULL || strcmp(only, "pipeline") == 0))
		rc = bench_stages(stages, width, per_stage, batch, forwards, tmp);
	if (rc == 0 && (only == NULL || strcmp(only, "executor") == 0))
		rc = bench_executor(ex_width, ex_layers, ex_batch, 5, tmp);
	if (rc == 0 && resnet != NULL && (only == NULL || strcmp(only, "resnet18") == 0))
		rc = bench_resnet(resnet, python, script, rn_forwards);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "muster bench pipeline: could not remove %s\n", tmp);
	mu_secure_free(sec);
	return rc;
}
