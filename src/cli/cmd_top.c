/* SPDX-License-Identifier: MIT */
/*
 * `muster top`: a live table of a muster deployment in the terminal, in
 * the spirit of top(1): the tracker's device keys (devices, free,
 * waiting) and the servers registered there, and for each --metrics
 * endpoint what the process is doing (connections, grants, store ops,
 * stage forwards and tokens with their rates, KV bytes, RSS). --once
 * prints one frame and exits (for scripts, tests and pipes); without it
 * the frame is redrawn every --interval seconds until Ctrl-C.
 *
 * It reads the tracker with the ordinary client (SUMMARY) and the
 * endpoints with libcurl, and parses the text format's sample lines only
 * (name{labels} value), which is all the table needs.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#ifdef MU_HAVE_CURL
#include <curl/curl.h>
#endif

#include "muster/tracker.h"
#include "cli/cli_int.h"
#include "core/buf_int.h"
#include "core/net_int.h"

#define MAX_TARGETS 64
#define MAX_TEXT ((size_t)16 << 20)

/* One endpoint's figures this frame, and last frame's for the rates. */
typedef struct {
	char url[512];
	int up;
	double rss, fds, open, grants, waiting, ops, fwd, tok, compute, kv, seqs, sessions,
		reqs, ctok, t;
	double last_fwd, last_tok, last_t;
	int role; /* what it is, by the series it has */
} target_t;

enum { ROLE_NONE, ROLE_TRACKER, ROLE_STORE, ROLE_STAGE, ROLE_SERVER, ROLE_SERVE };
static const char *const role_name[] = {"?", "tracker", "store", "stage", "server", "serve"};

#ifdef MU_HAVE_CURL
static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
	return mu__buf_append(ud, p, size * n) == 0 ? size * n : 0;
}

/* GET url into b. 0 or -1. */
static int fetch(CURL *c, const char *url, mu__buf_t *b)
{
	long code = 0;

	mu__buf_reset(b);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	if (curl_easy_perform(c) != CURLE_OK ||
	    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code) != CURLE_OK || code != 200 ||
	    mu__buf_appendc(b, '\0') != 0)
		return -1;
	return 0;
}
#else /* built without libcurl: no endpoint can be read */
typedef void CURL;
static int fetch(CURL *c, const char *url, mu__buf_t *b)
{
	(void)c, (void)url, (void)b;
	return -1;
}
#define CURL_GLOBAL_DEFAULT 0
static int curl_global_init(int f) { (void)f; return 0; }
static CURL *curl_easy_init(void) { static int one; return &one; }
static void curl_easy_cleanup(CURL *c) { (void)c; }
static void curl_global_cleanup(void) {}
#endif

/* Add the value of each sample line of family `name` (any labels; for a
 * histogram pass name_sum or name_count) to *sum. 1 when one was seen. */
static int total(const char *text, const char *name, double *sum)
{
	size_t n = strlen(name);
	const char *p = text;
	int seen = 0;

	*sum = 0;
	while (p != NULL && *p != '\0') {
		if (strncmp(p, name, n) == 0 && (p[n] == ' ' || p[n] == '{')) {
			const char *v = strchr(p, ' ');
			const char *nl = strchr(p, '\n');

			if (p[n] == '{') /* label values may hold spaces: after the } */
				v = strstr(p, "} ") != NULL ? strstr(p, "} ") + 1 : NULL;
			if (v != NULL && (nl == NULL || v < nl)) {
				*sum += strtod(v + 1, NULL);
				seen = 1;
			}
		}
		p = strchr(p, '\n');
		if (p != NULL)
			p++;
	}
	return seen;
}

static void read_target(target_t *t, const char *text)
{
	double x;

	t->last_fwd = t->fwd;
	t->last_tok = t->tok;
	t->role = total(text, "muster_tracker_connections_open", &t->open) ? ROLE_TRACKER
	          : total(text, "muster_store_connections_open", &t->open) ? ROLE_STORE
	          : total(text, "muster_stage_connections_open", &t->open) ? ROLE_STAGE
	          : total(text, "muster_server_sessions_total", &t->sessions) ? ROLE_SERVER
	          : total(text, "muster_serve_requests_running", &x) ? ROLE_SERVE : ROLE_NONE;
	total(text, "process_resident_memory_bytes", &t->rss);
	total(text, "process_open_fds", &t->fds);
	total(text, "muster_tracker_grants_total", &t->grants);
	total(text, "muster_tracker_queue_depth", &t->waiting);
	total(text, "muster_store_op_seconds_count", &t->ops);
	total(text, "muster_stage_forwards_total", &t->fwd);
	total(text, "muster_stage_tokens_total", &t->tok);
	total(text, "muster_stage_compute_seconds_sum", &t->compute);
	total(text, "muster_stage_kv_bytes", &t->kv);
	total(text, "muster_stage_sequences_open", &t->seqs);
	total(text, "muster_serve_requests_total", &t->reqs);
	total(text, "muster_serve_completion_tokens_total", &t->ctok);
	if (t->role == ROLE_SERVE)
		total(text, "muster_serve_requests_running", &t->seqs);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void print_tracker(const char *addr, const char *summary_json)
{
	cJSON *s = cJSON_Parse(summary_json), *q, *it;
	const cJSON *servers;

	printf("tracker %s\n", addr);
	q = cJSON_GetObjectItemCaseSensitive(s, "queue_info");
	servers = cJSON_GetObjectItemCaseSensitive(s, "server_info");
	printf("  %-24s %8s %6s %8s\n", "KEY", "DEVICES", "FREE", "WAITING");
	cJSON_ArrayForEach(it, q) {
		int ndev = 0;
		const cJSON *srv;
		char want[300];

		snprintf(want, sizeof(want), "server:%s", it->string);
		cJSON_ArrayForEach(srv, servers) {
			const cJSON *k = cJSON_GetObjectItemCaseSensitive(srv, "key");

			ndev += cJSON_IsString(k) && strcmp(k->valuestring, want) == 0;
		}
		printf("  %-24.24s %8d %6d %8d\n", it->string, ndev,
		       (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(it, "free")),
		       (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(it, "pending")));
	}
	if (cJSON_GetArraySize(q) == 0)
		printf("  (no device keys)\n");
	printf("  %d server%s registered\n", cJSON_GetArraySize(servers),
	       cJSON_GetArraySize(servers) == 1 ? "" : "s");
	cJSON_Delete(s);
}

/* The endpoint as short as it can be said: HOST:PORT when the URL is the
 * usual http://HOST:PORT/metrics. */
static void short_name(const char *url, char *out, size_t n)
{
	size_t len;

	if (strncmp(url, "http://", 7) == 0)
		url += 7;
	len = strlen(url);
	if (len > 8 && strcmp(url + len - 8, "/metrics") == 0)
		len -= 8;
	snprintf(out, n, "%.*s", (int)len, url);
}

static void print_targets(target_t *t, int n, int rates)
{
	char rss[32], kv[32], load[160], name[64];

	printf("%-22s %-8s %5s %10s %5s  %s\n", "ENDPOINT", "ROLE", "CONNS", "RSS", "FDS", "LOAD");
	for (int i = 0; i < n; i++) {
		double dt = t[i].t - t[i].last_t;

		short_name(t[i].url, name, sizeof(name));
		if (!t[i].up) {
			printf("%-22s %-8s %s\n", name, "down", "(no answer)");
			continue;
		}
		cli_bytes(t[i].rss, rss, sizeof(rss));
		load[0] = '\0';
		switch (t[i].role) {
		case ROLE_TRACKER:
			snprintf(load, sizeof(load), "%.0f grants, %.0f waiting", t[i].grants,
			         t[i].waiting);
			break;
		case ROLE_STORE:
			snprintf(load, sizeof(load), "%.0f ops", t[i].ops);
			break;
		case ROLE_STAGE:
			cli_bytes(t[i].kv, kv, sizeof(kv));
			if (rates && dt > 0)
				snprintf(load, sizeof(load), "%.1f fwd/s %.1f tok/s, %.0f seqs, KV %s",
				         (t[i].fwd - t[i].last_fwd) / dt, (t[i].tok - t[i].last_tok) / dt,
				         t[i].seqs, kv);
			else
				snprintf(load, sizeof(load), "%.0f fwd %.0f tok %.1f s compute, %.0f seqs, "
				         "KV %s", t[i].fwd, t[i].tok, t[i].compute, t[i].seqs, kv);
			break;
		case ROLE_SERVER:
			snprintf(load, sizeof(load), "%.0f sessions", t[i].sessions);
			break;
		case ROLE_SERVE:
			snprintf(load, sizeof(load), "%.0f requests, %.0f running, %.0f tokens",
			         t[i].reqs, t[i].seqs, t[i].ctok);
			break;
		default:
			break;
		}
		printf("%-22s %-8s %5.0f %10s %5.0f  %s\n", name, role_name[t[i].role],
		       t[i].open, rss, t[i].fds, load);
	}
}

static volatile sig_atomic_t stop_top;

static void on_int(int sig)
{
	(void)sig;
	stop_top = 1;
}

/* Split "a,b,c" into URLs (http://HOST:PORT/metrics when only HOST:PORT). */
static int split_urls(const char *list, target_t *t)
{
	int n = 0;
	const char *p = list;

	while (*p != '\0' && n < MAX_TARGETS) {
		size_t len = strcspn(p, ",");

		if (len > 0 && len < 400) {
			int full = strncmp(p, "http://", 7) == 0 || strncmp(p, "https://", 8) == 0;

			memset(&t[n], 0, sizeof(t[n]));
			snprintf(t[n].url, sizeof(t[n].url), "%s%.*s%s", full ? "" : "http://", (int)len,
			         p, full || memchr(p, '/', len) != NULL ? "" : "/metrics");
			n++;
		}
		p += len + (p[len] == ',');
	}
	return n;
}

static int frame(const char *thost, int tport, target_t *t, int n, CURL *c, mu__buf_t *b,
                 int live, int first)
{
	char *summary = NULL, addr[300];
	mu_tracker_client_t *tc;
	int rc;

	if (live)
		printf("\033[H\033[2J"); /* home, clear */
	if (live || first) {
		time_t now = time(NULL);
		char stamp[32];

		strftime(stamp, sizeof(stamp), "%H:%M:%S", localtime(&now));
		printf("muster top - %s\n\n", stamp);
	}
	if (thost != NULL) {
		mu__hostport_text(thost, tport, addr, sizeof(addr));
		rc = mu_tracker_client_connect(thost, tport, 5000, &tc);
		if (rc == 0)
			rc = mu_tracker_client_summary(tc, 5000, &summary);
		mu_tracker_client_close(tc);
		if (rc != 0) {
			printf("tracker %s: %s\n", addr, mu_strerror(rc));
			if (!live)
				return 1;
		} else {
			print_tracker(addr, summary);
		}
		mu_free(summary);
		printf("\n");
	}
	for (int i = 0; i < n; i++) {
		t[i].last_t = t[i].t;
		t[i].t = now_s();
		t[i].up = fetch(c, t[i].url, b) == 0;
		if (t[i].up)
			read_target(&t[i], b->data);
	}
	if (n > 0)
		print_targets(t, n, live && !first);
	fflush(stdout);
	return 0;
}

int cmd_top(int argc, char **argv)
{
	const char *tracker = NULL, *metrics = NULL;
	int once = 0, npos, rc = 0, n = 0, tport = 0;
	double interval = 2;
	char thost[256];
	static target_t t[MAX_TARGETS];
	mu__buf_t b;
	CURL *c;
	cli_opt_t opts[] = {
		{"tracker", OPT_STR, &tracker, "HOST:PORT", "show this tracker's device keys, devices and queues"},
		{"metrics", OPT_STR, &metrics, "URL,...", "show these metrics endpoints (HOST:PORT or http://HOST:PORT/metrics of --metrics): connections, RSS, and per-stage load"},
		{"once", OPT_FLAG, &once, NULL, "print one frame and exit (no screen control: for scripts and pipes)"},
		{"interval", OPT_DOUBLE, &interval, "SECONDS", "between frames (default 2)"},
	};
	cli_cmd_t cmd = {
		"muster top (--tracker HOST:PORT | --metrics URL,...) [--once] [--interval S]",
		"A live table of a deployment: the tracker's device keys (devices registered,\n"
		"free, requests waiting) and, for each --metrics endpoint of a muster server,\n"
		"its role, connections, RSS, descriptors and load (grants, store ops, a stage's\n"
		"forwards and tokens per second and KV cache, serve's requests). Redrawn every\n"
		"--interval seconds until Ctrl-C; --once prints one frame.",
		opts, (int)(sizeof(opts) / sizeof(opts[0])), 0, 0};

	rc = cli_parse(&cmd, argc, argv, &npos);
	if (rc != 0)
		return rc == 1 ? 0 : rc;
	if ((tracker == NULL && metrics == NULL) || !(interval >= 0.1)) {
		fprintf(stderr, "muster top: give --tracker HOST:PORT or --metrics URL,... "
		        "(--interval at least 0.1)\n");
		return 2;
	}
	if (tracker != NULL && mu__split_hostport(tracker, thost, sizeof(thost), &tport) != 0) {
		fprintf(stderr, "muster top: --tracker %s is not HOST:PORT\n", tracker);
		return 2;
	}
	if (metrics != NULL && (n = split_urls(metrics, t)) == 0) {
		fprintf(stderr, "muster top: --metrics %s names no endpoint\n", metrics);
		return 2;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0 || (c = curl_easy_init()) == NULL) {
		fprintf(stderr, "muster top: cannot start libcurl\n");
		return 1;
	}
	mu__buf_init(&b, MAX_TEXT);
	signal(SIGINT, on_int);
	signal(SIGTERM, on_int);
	if (once) {
		rc = frame(tracker != NULL ? thost : NULL, tport, t, n, c, &b, 0, 1);
		for (int i = 0; i < n && rc == 0; i++)
			rc = t[i].up ? 0 : 1;
	} else {
		for (int first = 1; !stop_top; first = 0) {
			frame(tracker != NULL ? thost : NULL, tport, t, n, c, &b, 1, first);
			for (double w = 0; w < interval && !stop_top; w += 0.05)
				usleep(50000);
		}
	}
	mu__buf_free(&b);
	curl_easy_cleanup(c);
	curl_global_cleanup();
	return rc;
}
