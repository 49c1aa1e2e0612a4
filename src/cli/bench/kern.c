/* SPDX-License-Identifier: MIT */
/*
 * `muster bench kern`: the decoder's matrix products for each weight type
 * of the kernels' table, through their public face (muster/kern.h, as any
 * program would), at the shapes of a 1B-parameter llama (2048x2048
 * attention, 5632x2048 gate/up, 2048x5632 down, a 32000x2048 head), for
 * one token (decode, n = 1) and a 256-token prompt (prefill), on 1 and 2
 * threads.
 * Yardsticks from the same run: OpenBLAS sgemv/sgemm on the same F32
 * weights, and this machine's memory read bandwidth.
 *
 * A decode product reads every weight once and is bound by memory, so its
 * weights must not sit in the cache between runs as one small matrix
 * would: each measurement cycles through enough copies of the matrix to
 * fill MIN_SET bytes, as a model's successive layers do. GB/s counts the
 * weight bytes read; GFLOP/s counts 2 * rows * cols * n.
 *
 * On a shared machine wall times swing with the others' load. A one-thread
 * product (muster's and OpenBLAS's both run on the calling thread) also
 * gets the CPU time of that thread, which the others' load hardly moves,
 * and a ratio on it.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "muster/kern.h"
#include "cli/cli_int.h"
#include "core/time_int.h"

/* Bytes of weights a decode measurement cycles through (past the L3). */
#define MIN_SET (384ull << 20)
/* Weight types one run measures at most (the table's, or a subset). */
#define MAX_TYPES 32

typedef struct {
	int rows, cols;
	const char *what;
} shape_t;

static const shape_t shapes[] = {
	{2048, 2048, "attn q/o"},
	{5632, 2048, "ffn gate/up"},
	{2048, 5632, "ffn down"},
	{32000, 2048, "head"},
};

static double now_s(void)
{
	return mu__clock_ms() / 1e3;
}

static double thread_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Seconds per product: the best wall time and the best thread CPU time. */
typedef struct {
	double wall, cpu;
} tm_t;

/* ---- memory bandwidth ---- */

/* What the options asked for. */
typedef struct {
	int threads[8], nthreads, reps, prefill;
	int types[MAX_TYPES], ntypes;
	uint64_t set_bytes;
} opts_t;

typedef struct {
	const uint64_t *a;
	atomic_uint_fast64_t sum; /* keeps the loads; the value is irrelevant */
} sum_t;

static void sum_range(void *arg, int64_t lo, int64_t hi)
{
	sum_t *s = arg;
	uint64_t acc = 0;

	for (int64_t i = lo * 4096; i < hi * 4096; i++)
		acc += s->a[i];
	atomic_fetch_add(&s->sum, acc);
}

static double read_bw(mu_pool_t *pool, const void *buf, size_t bytes)
{
	sum_t s = {buf, 0};
	double best = 1e30;

	for (int r = 0; r < 3; r++) {
		double t0 = now_s(), t;

		mu_pool_run(pool, sum_range, &s, (int64_t)(bytes / 8 / 4096));
		t = now_s() - t0;
		best = t < best ? t : best;
	}
	return (double)bytes / best / 1e9;
}

static void print_bandwidth(const opts_t *o, mu_pool_t **pools)
{
	size_t bytes = 512u << 20;
	void *buf = malloc(bytes);

	if (buf == NULL)
		return;
	memset(buf, 1, bytes);
	printf("memory read bandwidth:");
	for (int t = 0; t < o->nthreads; t++)
		printf(" %d thread%s %.1f GB/s%s", o->threads[t], o->threads[t] > 1 ? "s" : "",
		       read_bw(pools[t], buf, bytes), t + 1 < o->nthreads ? "," : "\n");
	free(buf);
}

/* ---- weights ---- */

typedef struct {
	mu_wmat_t *w; /* copies of one matrix */
	void *data;
	int copies;
	size_t bytes; /* of one copy */
} wset_t;

/* Copies of f (rows x cols f32) as type t, enough to fill min_bytes. */
static int wset_make(wset_t *s, const float *f, int rows, int cols, int t, uint64_t min_bytes)
{
	size_t rb = mu_wtype_row_bytes(t, cols);

	s->bytes = rb * (size_t)rows;
	s->copies = (int)((min_bytes + s->bytes - 1) / s->bytes);
	s->copies = s->copies < 1 ? 1 : s->copies;
	s->data = malloc(s->bytes * (size_t)s->copies);
	s->w = calloc((size_t)s->copies, sizeof(*s->w));
	if (s->data == NULL || s->w == NULL)
		return -1;
	for (int r = 0; r < rows; r++) {
		unsigned char *row = (unsigned char *)s->data + (size_t)r * rb;
		int rc = mu_wtype_from_f32(t, f + (size_t)r * (size_t)cols, cols, row);

		/* a type with no quantizer yet: random bytes are blocks (a
		 * scale may be NaN), and the time does not depend on values */
		for (size_t b = 0; rc == -ENOTSUP && b < rb; b++)
			row[b] = (unsigned char)((b * 2654435761u + (size_t)r * 40503u) >> 13);
		if (rc != 0 && rc != -ENOTSUP)
			return -1;
	}
	for (int c = 0; c < s->copies; c++) {
		if (c > 0)
			memcpy((char *)s->data + s->bytes * (size_t)c, s->data, s->bytes);
		s->w[c] = (mu_wmat_t){t, (char *)s->data + s->bytes * (size_t)c, rows, cols};
	}
	return 0;
}

static void wset_free(wset_t *s)
{
	free(s->data);
	free(s->w);
	memset(s, 0, sizeof(*s));
}

/* ---- measurements: seconds per product, the best of reps passes ---- */

static void keep_best(tm_t *best, double t0, double c0, int copies)
{
	double t = (now_s() - t0) / copies, c = (thread_cpu_s() - c0) / copies;

	best->wall = t < best->wall ? t : best->wall;
	best->cpu = c < best->cpu ? c : best->cpu;
}

static tm_t time_muster(mu_pool_t *pool, const wset_t *s, const float *x, int n, float *y,
                        int reps)
{
	tm_t best = {1e30, 1e30};

	mu_matmul(pool, &s->w[0], x, n, y, NULL); /* warm up */
	for (int r = 0; r < reps; r++) {
		double t0 = now_s(), c0 = thread_cpu_s();

		for (int c = 0; c < s->copies; c++)
			if (mu_matmul(pool, &s->w[c], x, n, y, NULL) != 0)
				return (tm_t){-1, -1};
		keep_best(&best, t0, c0, s->copies);
	}
	return best;
}

static void blas(const mu_wmat_t *w, const float *x, int n, float *y)
{
	int rows = (int)w->rows, cols = (int)w->cols;

	if (n == 1)
		cblas_sgemv(CblasRowMajor, CblasNoTrans, rows, cols, 1.0f, w->data, cols, x, 1, 0.0f,
		            y, 1);
	else
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, rows, cols, 1.0f, x, cols,
		            w->data, cols, 0.0f, y, rows);
}

static tm_t time_blas(const wset_t *s, const float *x, int n, float *y, int reps)
{
	tm_t best = {1e30, 1e30};

	blas(&s->w[0], x, n, y); /* warm up */
	for (int r = 0; r < reps; r++) {
		double t0 = now_s(), c0 = thread_cpu_s();

		for (int c = 0; c < s->copies; c++)
			blas(&s->w[c], x, n, y);
		keep_best(&best, t0, c0, s->copies);
	}
	return best;
}

/* ---- the table ---- */


static void row(const char *mode, const shape_t *sh, int th, const char *type, tm_t t, int n,
                size_t wbytes, tm_t bl)
{
	double flop = 2.0 * sh->rows * sh->cols * n;

	printf("  %-7s %5dx%-5d %-11s %2d %-10s %9.4f %8.1f %7.1f", mode, sh->rows, sh->cols, sh->what,
	       th, type, t.wall * 1e3, flop / t.wall / 1e9, (double)wbytes / t.wall / 1e9);
	if (bl.wall > 0)
		printf(" %7.2f", bl.wall / t.wall);
	else if (th == 1)
		printf(" %7s", "");
	if (th == 1) /* the work ran on this thread alone */
		printf(" %9.4f", t.cpu * 1e3);
	if (th == 1 && bl.wall > 0)
		printf(" %7.2f", bl.cpu / t.cpu);
	printf("\n");
}

/*
 * One shape, one mode (n = 1 or the prefill), every type and thread count.
 * muster first, OpenBLAS last: OpenBLAS's idle threads keep spinning for a
 * while after a call, which would steal the cores from what runs next.
 */
static int bench_shape(const opts_t *o, mu_pool_t **pools, const shape_t *sh, int n)
{
	const char *mode = n == 1 ? "decode" : "prefill";
	uint64_t set = n == 1 ? o->set_bytes : 0;
	size_t nf = (size_t)sh->rows * (size_t)sh->cols, wbytes[MAX_TYPES] = {0};
	float *f = malloc(nf * sizeof(float)), *x = malloc((size_t)n * sh->cols * sizeof(float));
	float *y = malloc((size_t)n * sh->rows * sizeof(float));
	tm_t bl[8] = {{0, 0}}, tm[MAX_TYPES][8] = {{{0, 0}}};
	wset_t s = {0};
	int rc = f == NULL || x == NULL || y == NULL ? -1 : 0;

	for (size_t i = 0; rc == 0 && i < nf; i++)
		f[i] = (float)((double)(rand() % 20001 - 10000) / 1e6);
	for (int64_t i = 0; rc == 0 && i < (int64_t)n * sh->cols; i++)
		x[i] = (float)((double)(rand() % 20001 - 10000) / 1e4);
	for (int k = 0; rc == 0 && k < o->ntypes; k++) {
		wset_free(&s);
		rc = wset_make(&s, f, sh->rows, sh->cols, o->types[k], set);
		wbytes[k] = s.bytes;
		for (int t = 0; rc == 0 && t < o->nthreads; t++)
			rc = (tm[k][t] = time_muster(pools[t], &s, x, n, y, o->reps)).wall > 0 ? 0 : -1;
	}
	wset_free(&s);
	if (rc == 0)
		rc = wset_make(&s, f, sh->rows, sh->cols, mu_wtype_from_name("F32"), set);
	for (int t = 0; rc == 0 && t < o->nthreads; t++) {
		openblas_set_num_threads(o->threads[t]);
		bl[t] = time_blas(&s, x, n, y, o->reps);
	}
	for (int t = 0; rc == 0 && t < o->nthreads; t++) {
		row(mode, sh, o->threads[t], n == 1 ? "BLAS sgemv" : "BLAS sgemm", bl[t], n, s.bytes,
		    (tm_t){0, 0});
		for (int k = 0; k < o->ntypes; k++)
			row(mode, sh, o->threads[t], mu_wtype_name(o->types[k]), tm[k][t], n,
			    wbytes[k], bl[t]);
	}
	wset_free(&s);
	free(f);
	free(x);
	free(y);
	if (rc != 0)
		fprintf(stderr, "muster bench kern: out of memory\n");
	return rc;
}

static int parse_list(const char *s, int *out, int max, int lo, int hi)
{
	int n = 0;

	while (s && *s) {
		char *end;
		long v = strtol(s, &end, 10);

		if (end == s || v < lo || v > hi || n == max)
			return -1;
		out[n++] = (int)v;
		s = *end == ',' ? end + 1 : end;
		if (*end != ',' && *end != '\0')
			return -1;
	}
	return n;
}

/* Whether the bench can make weights of type t: from f32, or for a type
 * muster reads but has no quantizer for (-ENOTSUP: IQ4_NL, the K-quants
 * today) as valid random blocks (wset_make). */
static int quantizable(int t)
{
	float zero[256] = {0};
	unsigned char out[sizeof(zero)];
	int b = mu_wtype_block(t), rc;

	if (b < 1 || b > 256 || mu_wtype_row_bytes(t, b) > sizeof(out))
		return 0;
	rc = mu_wtype_from_f32(t, zero, b, out);
	return rc == 0 || rc == -ENOTSUP;
}

/* "Q8_0,F16" into the codes of the types named, in the table's order;
 * their count, or -1 for a name that is not a type the bench can make. */
static int parse_types(const char *s, int *out)
{
	int want[MAX_TYPES] = {0}, n = 0;

	while (*s) {
		size_t len = strcspn(s, ",");
		char name[32];
		int t;

		if (len == 0 || len >= sizeof(name))
			return -1;
		memcpy(name, s, len);
		name[len] = '\0';
		if ((t = mu_wtype_from_name(name)) < 0 || t >= MAX_TYPES || !quantizable(t))
			return -1;
		want[t] = 1;
		s += len + (s[len] == ',');
	}
	for (int t = 0; t < mu_wtype_count() && t < MAX_TYPES; t++)
		if (want[t])
			out[n++] = t;
	return n;
}

/* Every type the bench can make, "F32,F16,...", from the table. */
static void all_types(char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = '\0';
	for (int t = 0; t < mu_wtype_count() && at < len; t++) {
		int w;

		if (!quantizable(t))
			continue;
		w = snprintf(buf + at, len - at, "%s%s", at ? "," : "", mu_wtype_name(t));

		at = w < 0 ? len : at + (size_t)w;
	}
}

/* "RxC" into sh (rows 0 when it is not one). */
static void parse_shape(const char *s, shape_t *sh)
{
	char *end;
	long r = strtol(s, &end, 10), c = *end == 'x' ? strtol(end + 1, &end, 10) : 0;

	sh->rows = *end == '\0' && r >= 1 && r <= 1 << 20 && c >= 1 && c <= 1 << 20 ? (int)r : 0;
	sh->cols = (int)c;
}

/* Whether every type asked for can hold rows of the shape's width. */
static int shape_fits(const opts_t *o, const shape_t *sh)
{
	for (int k = 0; k < o->ntypes; k++)
		if (mu_wtype_row_bytes(o->types[k], sh->cols) == 0)
			return 0;
	return 1;
}

int bench_kern(int argc, char **argv)
{
	char every[256], types_help[300];
	const char *threads = "1,2", *types = every, *shape = NULL;
	int reps = 3, prefill = 256, set_mib = (int)(MIN_SET >> 20), npos, rc;
	opts_t o;
	shape_t custom = {0, 0, "custom"};
	const shape_t *list = shapes;
	int nshapes = (int)(sizeof(shapes) / sizeof(shapes[0]));
	mu_pool_t *pools[8] = {0};
	cli_opt_t opts[] = {
		{"threads", OPT_STR, &threads, "N,N", "thread counts (default 1,2)"},
		{"types", OPT_STR, &types, "T,T", types_help},
		{"reps", OPT_INT, &reps, "N", "passes per figure, the best kept (default 3)"},
		{"prefill", OPT_INT, &prefill, "N", "rows of x for prefill, 0 for none (default 256)"},
		{"set-mib", OPT_INT, &set_mib, "MiB", "weights a decode figure cycles through (default 384)"},
		{"shape", OPT_STR, &shape, "RxC", "one shape instead of the 1B model's four"},
	};
	cli_cmd_t cmd = {
		"muster bench kern [options]",
		"The decoder's matrix products per weight type, for one token (decode) and a\n"
		"prompt (prefill), against OpenBLAS sgemv/sgemm on the same F32 weights and\n"
		"this machine's memory read bandwidth, all in the same run.",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 0, 0};

	all_types(every, sizeof(every));
	snprintf(types_help, sizeof(types_help), "weight types (default all it can make: %s)", every);
	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	memset(&o, 0, sizeof(o));
	o.nthreads = parse_list(threads, o.threads, 8, 1, 256);
	o.ntypes = parse_types(types, o.types);
	o.reps = reps;
	o.prefill = prefill;
	o.set_bytes = (uint64_t)(set_mib < 0 ? 0 : set_mib) << 20;
	if (shape != NULL) {
		parse_shape(shape, &custom);
		list = &custom;
		nshapes = 1;
	}
	if (o.nthreads < 1 || o.ntypes < 1 || reps < 1 || prefill < 0 ||
	    (shape && (custom.rows == 0 || !shape_fits(&o, &custom)))) {
		fprintf(stderr, "muster bench kern: bad --threads, --types (of %s), --reps, --prefill or "
		                "--shape (RxC, C a multiple of each type's block)\n", every);
		return 2;
	}
	for (int t = 0; t < o.nthreads; t++)
		if (mu_pool_new(o.threads[t], &pools[t]) != 0) {
			fprintf(stderr, "muster bench kern: cannot start %d threads\n", o.threads[t]);
			for (int k = 0; k < t; k++)
				mu_pool_free(pools[k]);
			return 1;
		}
	printf("kern: %s kernels, best of %d passes; others may share this machine, so figures are noisy\n",
	       mu_kern_isa(), reps);
	print_bandwidth(&o, pools);
	printf("  %-7s %-11s %-11s %2s %-10s %9s %8s %7s %7s %9s %7s\n", "mode", "shape", "", "th",
	       "type", "ms", "GFLOP/s", "GB/s", "vs BLAS", "cpu ms", "vs BLAS");
	for (int s = 0; rc == 0 && s < nshapes; s++)
		rc = bench_shape(&o, pools, &list[s], 1);
	for (int s = 0; rc == 0 && prefill > 0 && s < nshapes; s++)
		rc = bench_shape(&o, pools, &list[s], prefill);
	printf("(ms: wall time per product; GB/s: weight bytes per product / that time. vs BLAS:\n"
	       " OpenBLAS's time on the F32 weights / this type's, same thread count; sgemv for\n"
	       " decode, sgemm for prefill. cpu ms: the calling thread's CPU time per product, for\n"
	       " one thread, where both run on the calling thread; its ratio is the steadier one\n"
	       " when others load the machine.)\n");
	for (int t = 0; t < o.nthreads; t++)
		mu_pool_free(pools[t]);
	return rc == 0 ? 0 : 1;
}
