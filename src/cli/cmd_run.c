/* SPDX-License-Identifier: MIT */
/*
 * `muster run`: drive forwards of a model, in one of three ways, each a
 * runner of its own below: whole in this process (the reference a split
 * run matches bit for bit), through `muster stage` servers given by
 * address, or through devices a tracker grants (a cluster). What they
 * share (reading the input, repeating and pipelining forwards, checking
 * every output against the first, the report) is the command's.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "muster/pipeline.h"
#include "cli/cli_int.h"
#include "cli/progress_int.h"
#include "core/net_int.h"
#include "core/proc_int.h"
#include "core/time_int.h"

/* ---- run ---- */

static int same_outputs(const mu_tensor_list_t *a, const mu_tensor_list_t *b)
{
	if (a->n != b->n)
		return 0;
	for (size_t i = 0; i < a->n; i++)
		if (a->t[i]->numel != b->t[i]->numel || a->t[i]->dtype != b->t[i]->dtype ||
		    strcmp(a->t[i]->name, b->t[i]->name) != 0 ||
		    (a->t[i]->numel > 0 &&
		     memcmp(a->t[i]->raw, b->t[i]->raw, mu_tensor_nbytes(a->t[i])) != 0))
			return 0;
	return 1;
}

/* Element k of t, as printed: floats to 7 digits, integers exactly. */
static void print_elem(const mu_tensor_t *t, uint64_t k)
{
	const void *p = (const char *)t->raw + k * mu_dtype_size((int)t->dtype);
	union { int8_t i8; int16_t i16; int32_t i32; int64_t i64; uint8_t u8; uint16_t u16;
		uint32_t u32; uint64_t u64; double f64; } v;

	memcpy(&v, p, mu_dtype_size((int)t->dtype));
	switch (t->dtype) {
	case MU_DTYPE_F32: printf(" %.7g", (double)t->data[k]); break;
	case MU_DTYPE_F64: printf(" %.7g", v.f64); break;
	case MU_DTYPE_I8: printf(" %d", v.i8); break;
	case MU_DTYPE_I16: printf(" %d", v.i16); break;
	case MU_DTYPE_I32: printf(" %" PRId32, v.i32); break;
	case MU_DTYPE_I64: printf(" %" PRId64, v.i64); break;
	case MU_DTYPE_U8: case MU_DTYPE_BOOL: printf(" %u", v.u8); break;
	case MU_DTYPE_U16: printf(" %u", v.u16); break;
	case MU_DTYPE_U32: printf(" %" PRIu32, v.u32); break;
	case MU_DTYPE_U64: printf(" %" PRIu64, v.u64); break;
	default: printf(" 0x%04x", v.u16); break; /* F16, BF16: the bits */
	}
}

static void print_outputs(const mu_tensor_list_t *out)
{
	for (size_t i = 0; i < out->n; i++) {
		const mu_tensor_t *t = out->t[i];

		printf("output %s [", t->name);
		for (uint32_t d = 0; d < t->rank; d++)
			printf("%s%" PRIu64, d ? ", " : "", t->dims[d]);
		printf("]%s%s =", t->dtype != MU_DTYPE_F32 ? " " : "",
		       t->dtype != MU_DTYPE_F32 ? mu_dtype_name((int)t->dtype) : "");
		for (uint64_t k = 0; k < t->numel && k < 8; k++)
			print_elem(t, k);
		printf("%s\n", t->numel > 8 ? " ..." : "");
	}
}

static int split_addrs(char *list, const char **addrs, int max)
{
	int n = 0;
	char *save = NULL;

	for (char *t = strtok_r(list, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
		if (n == max)
			return -1;
		addrs[n++] = t;
	}
	return n;
}

static void add_timing(cJSON *x, const mu_stage_timing_t *t)
{
	cJSON_AddNumberToObject(x, "load_ms", t->load_ms);
	cJSON_AddNumberToObject(x, "resident_bytes", (double)t->resident_bytes);
	cJSON_AddNumberToObject(x, "rss_bytes", (double)t->rss_bytes);
	cJSON_AddNumberToObject(x, "forward_ms", t->forward_ms);
	cJSON_AddNumberToObject(x, "compute_ms", t->compute_ms);
	cJSON_AddNumberToObject(x, "bytes_in", (double)t->bytes_in);
	cJSON_AddNumberToObject(x, "bytes_out", (double)t->bytes_out);
	cJSON_AddNumberToObject(x, "forwards", (double)t->forwards);
}

/* What this process (the coordinator, which holds no stage) needed at most. */
static void print_peak(void)
{
	char b[32];

	cli_bytes((double)mu__self_peak_rss(), b, sizeof(b));
	printf("the coordinator's own peak memory: %s\n", b);
}

static void add_totals(cJSON *o, double wall_ms, int forwards, double first_ms)
{
	cJSON_AddNumberToObject(o, "forwards", forwards);
	cJSON_AddNumberToObject(o, "wall_ms", wall_ms);
	cJSON_AddNumberToObject(o, "first_output_ms", first_ms);
	cJSON_AddNumberToObject(o, "forwards_per_s", wall_ms > 0 ? forwards * 1000.0 / wall_ms : 0);
	cJSON_AddNumberToObject(o, "coordinator_peak_rss_bytes", (double)mu__self_peak_rss());
}

static void print_table(mu_coord_t *c, int json, double wall_ms, int forwards, double first_ms)
{
	int n = c != NULL ? mu_coord_stages(c) : 0;

	if (json) {
		cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "stages");

		for (int i = 0; i < n; i++) {
			mu_stage_timing_t t;
			cJSON *x = cJSON_CreateObject();

			mu_coord_timing(c, i, &t);
			cJSON_AddNumberToObject(x, "index", i);
			cJSON_AddStringToObject(x, "address", mu_coord_addr(c, i));
			add_timing(x, &t);
			cJSON_AddItemToArray(a, x);
		}
		add_totals(o, wall_ms, forwards, first_ms);
		cli_print_json(o);
		return;
	}
	if (n > 0) {
		printf("\n%-6s %-22s %9s %11s %11s %11s %11s %11s\n", "stage", "address", "load ms",
		       "resident", "forward ms", "compute ms", "sent", "received");
		for (int i = 0; i < n; i++) {
			mu_stage_timing_t t;
			char r[32], in[32], out[32];

			mu_coord_timing(c, i, &t);
			cli_bytes((double)t.resident_bytes, r, sizeof(r));
			cli_bytes((double)t.bytes_in, in, sizeof(in));
			cli_bytes((double)t.bytes_out, out, sizeof(out));
			printf("%-6d %-22s %9.1f %11s %11.2f %11.2f %11s %11s\n", i, mu_coord_addr(c, i),
			       t.load_ms, r, t.forwards ? t.forward_ms / (double)t.forwards : 0,
			       t.forwards ? t.compute_ms / (double)t.forwards : 0, in, out);
		}
		printf("(forward and compute ms are per forward; sent/received are tensor bytes in all)\n");
	}
	printf("%d forward%s in %.1f ms (%.1f/s); first output after %.1f ms\n", forwards,
	       forwards == 1 ? "" : "s", wall_ms, wall_ms > 0 ? forwards * 1000.0 / wall_ms : 0,
	       first_ms);
}

/* The cluster's table: where each stage ran and what it cost. */
void cli_print_cluster(mu_cluster_t *c, int json, double wall_ms, int forwards, double first_ms)
{
	int n = mu_cluster_stages(c);

	if (json) {
		cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "stages");

		for (int i = 0; i < n; i++) {
			mu_cluster_stage_t s;
			cJSON *x = cJSON_CreateObject();

			mu_cluster_stage(c, i, &s);
			cJSON_AddNumberToObject(x, "index", i);
			cJSON_AddStringToObject(x, "device", s.address);
			cJSON_AddNumberToObject(x, "budget", (double)s.budget);
			cJSON_AddStringToObject(x, "weights", s.streamed ? "streamed" : "local");
			cJSON_AddNumberToObject(x, "replaced", s.replaced);
			cJSON_AddNumberToObject(x, "first", s.first);
			cJSON_AddNumberToObject(x, "last", s.last);
			add_timing(x, &s.timing);
			cJSON_AddItemToArray(a, x);
		}
		cJSON_AddNumberToObject(o, "replacements", mu_cluster_replacements(c));
		add_totals(o, wall_ms, forwards, first_ms);
		cli_print_json(o);
		return;
	}
	printf("\n%-5s %-21s %-9s %-8s %9s %10s %10s %10s %10s\n", "stage", "device", "weights",
	       "nodes", "load ms", "resident", "forward ms", "sent", "received");
	for (int i = 0; i < n; i++) {
		mu_cluster_stage_t s;
		char r[32], in[32], out[32], nodes[24];

		mu_cluster_stage(c, i, &s);
		cli_bytes((double)s.timing.resident_bytes, r, sizeof(r));
		cli_bytes((double)s.timing.bytes_in, in, sizeof(in));
		cli_bytes((double)s.timing.bytes_out, out, sizeof(out));
		snprintf(nodes, sizeof(nodes), "%d..%d", s.first, s.last - 1);
		printf("%-5d %-21s %-9s %-8s %9.1f %10s %10.2f %10s %10s%s\n", i, s.address,
		       s.streamed ? "streamed" : "local", nodes, s.timing.load_ms, r,
		       s.timing.forwards ? s.timing.forward_ms / (double)s.timing.forwards : 0, in, out,
		       s.replaced ? "  (replacement)" : "");
	}
	printf("(load ms: the device's own load of its stage; resident: its weights in memory;\n"
	       " forward ms: per forward, as seen from here; sent/received: tensor bytes in all)\n");
	printf("%d forward%s in %.1f ms (%.1f/s); first output %.1f ms after the start%s\n", forwards,
	       forwards == 1 ? "" : "s", wall_ms, wall_ms > 0 ? forwards * 1000.0 / wall_ms : 0,
	       first_ms, mu_cluster_replacements(c) ? "; a lost device was replaced" : "");
	print_peak();
}

static void say_stderr(void *ud, const char *line)
{
	(void)ud;
	cli_progress_clear();
	fprintf(stderr, "%s\n", line);
}

/* The command line, and what a run holds. */
typedef struct {
	const char *dir, *input, *output, *stages, *tracker, *key, *weights;
	int repeat, micro, json, connect_timeout, io_timeout, devices, request_timeout, quiet;
	double priority;
	char thost[256];        /* --tracker's host, and port */
	int tport;
	mu_weights_t wmode;     /* --weights */
	mu_model_t *m;          /* --model: run here, or checked against the stages */
	mu_coord_t *c;          /* --stages */
	mu_cluster_t *cl;       /* --tracker */
	mu_tensor_list_t in;    /* the input, read once */
	mu_tensor_list_t first; /* the first forward's outputs */
	cli_secure_t cs;        /* --secret-file, --tls-* */
	mu_secure_t *sec;       /* from cs: toward the stages and devices */
	double first_ms;        /* from the command's start to them */
	char err[2048];
} run_t;

static int run_args(run_t *r, int argc, char **argv)
{
	int npos, rc;
	cli_opt_t opts[] = {
		{"model", OPT_STR, &r->dir, "DIR", "the model directory (required without --stages; with them, checked against what they serve)"},
		{"input", OPT_STR, &r->input, "FILE", "the model's inputs, by name, in a safetensors file (`muster model input` makes one)"},
		{"stages", OPT_STR, &r->stages, "H:P,...", "stage servers in stage order (`muster stage`)"},
		{"tracker", OPT_STR, &r->tracker, "HOST:PORT", "instead of --stages: get devices from this tracker (`muster server` on each)"},
		{"key", OPT_STR, &r->key, "KEY", "with --tracker: the device key to request"},
		{"devices", OPT_INT, &r->devices, "N", "with --tracker: how many devices to request (default 1)"},
		{"priority", OPT_DOUBLE, &r->priority, "P", "with --tracker: priority of the requests (higher first; default 0)"},
		{"weights", OPT_STR, &r->weights, "auto|local|stream", "with --tracker: load stages from the devices' copies (local), stream them from here, or local where a device has a copy (auto, default)"},
		{"device-timeout", OPT_INT, &r->request_timeout, "SECONDS", "with --tracker: wait this long for the devices; then say what the tracker has (default 30)"},
		{"output", OPT_STR, &r->output, "FILE", "write the outputs to FILE (safetensors, each in its dtype)"},
		{"repeat", OPT_INT, &r->repeat, "R", "run R forwards of the input (default 1)"},
		{"micro-batches", OPT_INT, &r->micro, "M", "keep up to M forwards in flight, pipelined over the stages (default 1)"},
		{"connect-timeout", OPT_INT, &r->connect_timeout, "SECONDS", "keep trying to reach each stage this long (default 10)"},
		{"io-timeout", OPT_INT, &r->io_timeout, "SECONDS", "give up on a stage that makes no progress this long (default 60)"},
		{"json", OPT_FLAG, &r->json, NULL, "print the figures as JSON instead of a table"},
		{"quiet", OPT_FLAG, &r->quiet, NULL, "with --tracker: do not narrate the steps, nor show progress, on stderr"},
		CLI_SECURE_OPTS(r->cs),
		CLI_ALIAS("request-timeout", "device-timeout"),
	};
	cli_cmd_t cmd = {
		"muster run --input FILE (--model DIR | --stages H:P,... | --tracker H:P --key K --devices N --model DIR)",
		"Run a model's forward pass, and print its outputs and a per-stage table.\n"
		"\n"
		"  --model DIR alone     in this process (the reference every split matches\n"
		"                        bit for bit);\n"
		"  --stages H:P,...      through `muster stage` servers, one per stage;\n"
		"  --tracker H:P         through devices found by the tracker: N devices of KEY\n"
		"                        are requested, their capabilities fetched, the model\n"
		"                        cut so each stage fits its device's memory, each device\n"
		"                        given its stage (from its own copy, or streamed from\n"
		"                        here), and a device lost mid-run replaced.\n"
		"\n"
		"The coordinator (this process) holds no weights: it relays the named tensors\n"
		"each stage needs.",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 0, 0};

	cli_secure_init(&r->cs);
	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc;
	if (r->input == NULL || (r->stages == NULL && r->dir == NULL) || r->repeat < 1 ||
	    r->micro < 1 || r->connect_timeout < 0 || r->io_timeout < 1 ||
	    (r->stages != NULL && r->tracker != NULL)) {
		fprintf(stderr, "muster run: needs --input FILE and one of --model, --stages, --tracker "
		                "(see --help)\n");
		return 2;
	}
	if (r->tracker != NULL &&
	    mu__split_hostport(r->tracker, r->thost, sizeof(r->thost), &r->tport) != 0) {
		fprintf(stderr, "muster run: --tracker %s is not HOST:PORT\n", r->tracker);
		return 2;
	}
	if (r->tracker != NULL &&
	    (r->key == NULL || r->dir == NULL || r->devices < 1 || r->request_timeout < 1)) {
		fprintf(stderr, "muster run: --tracker HOST:PORT needs --key, --model and --devices >= 1\n");
		return 2;
	}
	if (strcmp(r->weights, "auto") == 0)
		r->wmode = MU_WEIGHTS_AUTO;
	else if (strcmp(r->weights, "local") == 0)
		r->wmode = MU_WEIGHTS_LOCAL;
	else if (strcmp(r->weights, "stream") == 0)
		r->wmode = MU_WEIGHTS_STREAM;
	else {
		fprintf(stderr, "muster run: --weights is auto, local or stream\n");
		return 2;
	}
	return cli_secure_apply("muster run", &r->cs, &r->sec);
}

/* --tracker: devices granted by the tracker, each given its stage. */
static int open_cluster(run_t *r)
{
	mu_cluster_opts_t o;
	mu_coord_opts_t co;

	mu_cluster_opts_init(&o);
	mu_coord_opts_init(&co);
	o.tracker_host = r->thost;
	o.tracker_port = r->tport;
	o.weights = r->wmode;
	o.key = r->key;
	o.devices = r->devices;
	o.priority = r->priority;
	o.request_timeout_ms = r->request_timeout * 1000;
	co.io_timeout_ms = r->io_timeout * 1000;
	co.sec = r->sec;
	o.coord = &co;
	o.say = r->quiet ? NULL : say_stderr;
	if (r->quiet)
		cli_progress_enable(0);
	return mu_cluster_start(r->m, &o, &r->cl, r->err, sizeof(r->err));
}

/* --stages: `muster stage` servers by address, checked against --model. */
static int open_stages(run_t *r)
{
	const char *addrs[256];
	char *list = strdup(r->stages);
	int n = list != NULL ? split_addrs(list, addrs, 256) : 0, rc;
	mu_coord_opts_t co;

	mu_coord_opts_init(&co);
	co.connect_timeout_ms = r->connect_timeout * 1000;
	co.io_timeout_ms = r->io_timeout * 1000;
	co.sec = r->sec;
	if (n < 1) {
		snprintf(r->err, sizeof(r->err), "--stages needs 1 to 256 HOST:PORT addresses");
		rc = MU_EARG;
	} else {
		rc = mu_coord_connect(addrs, n, &co, &r->c, r->err, sizeof(r->err));
	}
	free(list);
	if (rc == 0 && r->m != NULL && mu_coord_digest(r->c) != mu_model_digest(r->m)) {
		snprintf(r->err, sizeof(r->err), "the stages serve a different model than %s "
		         "(digest %016" PRIx64 " vs %016" PRIx64 ")", r->dir, mu_coord_digest(r->c),
		         mu_model_digest(r->m));
		rc = MU_EARG;
	}
	return rc;
}

/* b forwards of the input, by whichever runner this run has; in this
 * process (no stages, no cluster) b is 1. */
static int forward(run_t *r, mu_tensor_list_t *ins, mu_tensor_list_t *outs, int b)
{
	if (r->cl != NULL)
		return mu_cluster_forward_many(r->cl, ins, b, outs, r->err, sizeof(r->err));
	if (r->c == NULL)
		return mu_model_run(r->m, &r->in, &outs[0], r->err, sizeof(r->err));
	if (b == 1)
		return mu_coord_forward(r->c, &r->in, &outs[0], r->err, sizeof(r->err));
	return mu_coord_forward_many(r->c, ins, b, outs, r->err, sizeof(r->err));
}

/* --repeat forwards, --micro-batches at a time: the first one's outputs
 * are kept, every other must equal them. *done counts those run. */
static int run_forwards(run_t *r, double t_start, int *done)
{
	mu_tensor_list_t *outs = calloc((size_t)r->micro, sizeof(*outs));
	mu_tensor_list_t *ins = calloc((size_t)r->micro, sizeof(*ins));
	int rc = outs == NULL || ins == NULL ? MU_ENOMEM : 0;

	if (rc != 0)
		snprintf(r->err, sizeof(r->err), "out of memory");
	while (rc == 0 && *done < r->repeat) {
		int b = r->repeat - *done < r->micro ? r->repeat - *done : r->micro;

		if (r->c == NULL && r->cl == NULL)
			b = 1;
		for (int j = 0; j < b; j++) {
			mu_tensor_list_init(&outs[j]);
			ins[j] = r->in; /* the same inputs, borrowed */
		}
		rc = forward(r, ins, outs, b);
		for (int j = 0; j < b; j++) {
			if (rc == 0 && *done == 0 && j == 0) {
				r->first = outs[0];
				mu_tensor_list_init(&outs[0]);
				r->first_ms = mu__clock_ms() - t_start;
			} else if (rc == 0 && !same_outputs(&r->first, &outs[j])) {
				snprintf(r->err, sizeof(r->err), "forward %d gave different outputs than the "
				         "first", *done + j);
				rc = MU_EPROTO;
			}
			mu_tensor_list_free(&outs[j]);
		}
		*done += b;
	}
	free(outs);
	free(ins);
	return rc;
}

int cmd_run(int argc, char **argv)
{
	run_t r = {.weights = "auto", .repeat = 1, .micro = 1, .connect_timeout = 10,
	           .io_timeout = 60, .devices = 1, .request_timeout = 30};
	double t_start = mu__clock_ms(), t0;
	int rc, done = 0;

	rc = run_args(&r, argc, argv);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	mu_tensor_list_init(&r.in);
	mu_tensor_list_init(&r.first);
	signal(SIGPIPE, SIG_IGN);
	rc = mu_safetensors_read(r.input, &r.in, r.err, sizeof(r.err));
	if (rc == 0 && r.dir != NULL)
		rc = mu_model_open(r.dir, &r.m, r.err, sizeof(r.err));
	if (rc == 0 && r.tracker != NULL)
		rc = open_cluster(&r);
	if (rc == 0 && r.stages != NULL)
		rc = open_stages(&r);
	t0 = mu__clock_ms();
	if (rc == 0)
		rc = run_forwards(&r, t_start, &done);
	if (rc == 0) {
		double wall = mu__clock_ms() - t0;

		if (!r.json)
			print_outputs(&r.first);
		if (r.output != NULL && (rc = mu_safetensors_write(r.output, &r.first)) != 0)
			snprintf(r.err, sizeof(r.err), "cannot write %s: %s", r.output, mu_strerror(rc));
		if (rc == 0 && r.cl != NULL)
			cli_print_cluster(r.cl, r.json, wall, done, r.first_ms);
		else if (rc == 0)
			print_table(r.c, r.json, wall, done, r.first_ms);
	}
	if (rc != 0)
		fprintf(stderr, "muster run: %s\n", r.err[0] != '\0' ? r.err : mu_strerror(rc));
	mu_tensor_list_free(&r.first);
	mu_tensor_list_free(&r.in);
	mu_cluster_close(r.cl);
	mu_coord_close(r.c);
	mu_model_close(r.m);
	mu_secure_free(r.sec);
	return rc == 0 ? 0 : 1;
}
