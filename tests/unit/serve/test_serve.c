/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/serve/serve.c and src/serve/metrics_http.c: the
 * public API server and metrics endpoint (muster/serve.h). Options are
 * checked before anything is opened; the key file's rules; a server over
 * stories260K answers /health, a greedy completion and, on its own loop,
 * /metrics, then stops; a metrics endpoint of its own loop is scraped and
 * stopped from another thread. The servers run on this (the main) thread,
 * as the header asks; a client thread talks HTTP/1.0 to them.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mu_test.h"

#include "muster/serve.h"

#define GGUF MU_SOURCE_DIR "/models/stories260K/stories260K.gguf"

/* One HTTP/1.0 exchange with 127.0.0.1:port; the whole reply into out. */
static int http(int port, const char *req, char *out, size_t n)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	size_t got = 0;
	ssize_t k;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
	    write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	while (got + 1 < n && (k = read(fd, out + got, n - 1 - got)) > 0)
		got += (size_t)k;
	out[got] = '\0';
	close(fd);
	return 0;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_opts_are_checked_first(void **state)
{
	mu_serve_opts_t o;
	mu_serve_t *s = (mu_serve_t *)&o;
	char err[256] = "";

	(void)state;
	mu_serve_opts_init(&o);
	assert_int_equal(o.struct_size, sizeof(o));
	assert_string_equal(o.host, "127.0.0.1");
	assert_int_equal(o.port, 8080);
	assert_int_equal(o.parallel, 4);
	assert_int_equal(o.max_conns, 32);
	assert_int_equal(o.max_body, 4 << 20);
	/* no model */
	assert_int_equal(mu_serve_start(&o, &s, err, sizeof(err)), MU_EARG);
	assert_null(s);
	assert_non_null(strstr(err, "no model"));
	/* ranges, before any file is opened */
	o.model = "/nonexistent/model.gguf";
	o.chat_template = "frob";
	assert_int_equal(mu_serve_start(&o, &s, err, sizeof(err)), MU_EARG);
	assert_non_null(strstr(err, "chat_template is one of"));
	o.chat_template = NULL;
	o.max_body = 10;
	assert_int_equal(mu_serve_start(&o, &s, err, sizeof(err)), MU_EARG);
	o.max_body = 4096;
	o.stages = (const char *const[]){"127.0.0.1:1"};
	o.nstages = 1;
	o.cluster = (const mu_cluster_opts_t *)&o; /* never read: refused before */
	assert_int_equal(mu_serve_start(&o, &s, err, sizeof(err)), MU_EARG);
	assert_non_null(strstr(err, "not both"));
	o.stages = NULL;
	o.cluster = NULL;
	/* then the model: the step is named */
	assert_true(mu_serve_start(&o, &s, err, sizeof(err)) < 0);
	assert_null(s);
	assert_non_null(strstr(err, "cannot open the model"));
	/* a struct not filled by the init call */
	memset(&o, 0, sizeof(o));
	assert_int_equal(mu_serve_start(&o, &s, NULL, 0), MU_EARG);
}

static void test_chat_families(void **state)
{
	int n = 0;

	(void)state;
	assert_string_equal(mu_serve_chat_family(0), "chatml");
	while (mu_serve_chat_family(n) != NULL)
		n++;
	assert_int_equal(n, 6);
	assert_string_equal(mu_serve_chat_family(5), "mistral");
	assert_null(mu_serve_chat_family(-1));
}

static void test_read_key(void **state)
{
	char path[] = "/tmp/mu-test-key-XXXXXX", key[MU_SERVE_KEY_MAX + 1], err[512];
	char big[MU_SERVE_KEY_MAX + 8];
	int fd = mkstemp(path);

	(void)state;
	assert_true(fd >= 0);
	close(fd);
	write_file(path, "sk-abc_123\r\n");
	assert_int_equal(mu_serve_read_key(path, key, sizeof(key), err, sizeof(err)), 0);
	assert_string_equal(key, "sk-abc_123");
	write_file(path, "two words\n");
	assert_int_equal(mu_serve_read_key(path, key, sizeof(key), err, sizeof(err)), MU_EARG);
	assert_non_null(strstr(err, "must hold one key of 1 to 512 printable"));
	write_file(path, "\n");
	assert_int_equal(mu_serve_read_key(path, key, sizeof(key), err, sizeof(err)), MU_EARG);
	memset(big, 'k', sizeof(big) - 2);
	big[sizeof(big) - 2] = '\n';
	big[sizeof(big) - 1] = '\0';
	write_file(path, big); /* one byte too long for the key, within the read */
	assert_true(mu_serve_read_key(path, key, sizeof(key), err, sizeof(err)) < 0);
	/* no room for the key */
	assert_int_equal(mu_serve_read_key(path, key, 8, err, sizeof(err)), MU_EARG);
	unlink(path);
	assert_int_equal(mu_serve_read_key(path, key, sizeof(key), err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, path));
}

typedef struct {
	int port, mport;
	mu_serve_t *s;
	mu_metrics_server_t *ms;
	char health[4096], completion[8192], metrics[65536], models[4096];
} client_t;

static void *client_main(void *arg)
{
	client_t *c = arg;
	static const char body[] = "{\"prompt\": \"Once\", \"max_tokens\": 12, \"temperature\": 0}";
	char req[512];

	http(c->port, "GET /health HTTP/1.0\r\n\r\n", c->health, sizeof(c->health));
	http(c->port, "GET /v1/models HTTP/1.0\r\nAuthorization: Bearer k-1\r\n\r\n", c->models,
	     sizeof(c->models));
	snprintf(req, sizeof(req), "POST /v1/completions HTTP/1.0\r\nContent-Type: "
	         "application/json\r\nAuthorization: Bearer k-1\r\nContent-Length: %zu\r\n\r\n%s",
	         strlen(body), body);
	http(c->port, req, c->completion, sizeof(c->completion));
	if (c->mport > 0)
		http(c->mport, "GET /metrics HTTP/1.0\r\n\r\n", c->metrics, sizeof(c->metrics));
	if (c->s != NULL)
		mu_serve_stop(c->s);
	else
		mu_metrics_server_stop(c->ms);
	return NULL;
}

static void test_serve_a_model(void **state)
{
	mu_serve_opts_t o;
	mu_metrics_server_opts_t mo;
	mu_metrics_t *m;
	client_t *c = calloc(1, sizeof(*c));
	char err[1024] = "";
	pthread_t th;

	(void)state;
	assert_non_null(c);
	assert_int_equal(mu_metrics_new(&m), 0);
	mu_serve_opts_init(&o);
	o.model = GGUF;
	o.port = 0;
	o.parallel = 2;
	o.api_key = "k-1";
	o.metrics = m;
	assert_int_equal(mu_serve_start(&o, &c->s, err, sizeof(err)), 0);
	assert_true(mu_serve_port(c->s) > 0);
	assert_string_equal(mu_serve_model_name(c->s), "stories260K.gguf");
	assert_true(mu_serve_ctx(c->s) > 0 && mu_serve_ctx(c->s) <= 4096);
	assert_non_null(strstr(mu_serve_where(c->s), "this process, 1 thread"));
	mu_metrics_server_opts_init(&mo);
	mo.serve = c->s;
	assert_int_equal(mu_metrics_server_start(m, &mo, &c->ms, err, sizeof(err)), 0);
	assert_int_equal(mu_metrics_server_run(c->ms), MU_EARG); /* the API server's loop */
	c->port = mu_serve_port(c->s);
	c->mport = mu_metrics_server_port(c->ms);
	assert_int_equal(pthread_create(&th, NULL, client_main, c), 0);
	assert_int_equal(mu_serve_run(c->s), 0);
	pthread_join(th, NULL);
	mu_metrics_server_free(c->ms);
	mu_serve_free(c->s);
	mu_metrics_free(m);
	/* /health needs no key */
	assert_non_null(strstr(c->health, " 200 "));
	assert_non_null(strstr(c->health, "\"where\": \"this process"));
	assert_non_null(strstr(c->models, "\"id\":\"stories260K.gguf\""));
	/* stories260K's greedy text after "Once" */
	assert_non_null(strstr(c->completion, "\"text\":\" upon a time, there was a little"));
	assert_non_null(strstr(c->metrics, "muster_serve_requests_total{status=\"200\"} 1"));
	assert_non_null(strstr(c->metrics, "muster_serve_completion_tokens_total 12"));
	free(c);
}

static void test_metrics_on_its_own_loop(void **state)
{
	mu_metrics_server_opts_t mo;
	mu_metrics_t *m;
	mu_metrics_server_t *ms, *busy;
	client_t *c = calloc(1, sizeof(*c));
	char err[256] = "";
	pthread_t th;

	(void)state;
	assert_non_null(c);
	assert_int_equal(mu_metrics_new(&m), 0);
	mu_metrics_server_opts_init(&mo);
	assert_string_equal(mo.host, "127.0.0.1");
	assert_int_equal(mo.port, 0);
	assert_int_equal(mu_metrics_server_start(NULL, &mo, &ms, err, sizeof(err)), MU_EARG);
	assert_int_equal(mu_metrics_server_start(m, &mo, &ms, err, sizeof(err)), 0);
	/* its port is taken: the next one says where and why */
	mo.port = mu_metrics_server_port(ms);
	assert_true(mu_metrics_server_start(m, &mo, &busy, err, sizeof(err)) < 0);
	assert_null(busy);
	assert_non_null(strstr(err, "cannot listen on 127.0.0.1 port"));
	c->ms = ms;
	c->port = mu_metrics_server_port(ms); /* the API routes are 404 here */
	c->mport = c->port;
	assert_int_equal(pthread_create(&th, NULL, client_main, c), 0);
	assert_int_equal(mu_metrics_server_run(ms), 0);
	pthread_join(th, NULL);
	mu_metrics_server_free(ms);
	mu_metrics_free(m);
	assert_non_null(strstr(c->health, " 404 "));
	assert_non_null(strstr(c->completion, " 405 "));
	assert_non_null(strstr(c->metrics, " 200 "));
	assert_non_null(strstr(c->metrics, "process_resident_memory_bytes"));
	free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_opts_are_checked_first),
		cmocka_unit_test(test_chat_families),
		cmocka_unit_test(test_read_key),
		cmocka_unit_test(test_serve_a_model),
		cmocka_unit_test(test_metrics_on_its_own_loop),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
