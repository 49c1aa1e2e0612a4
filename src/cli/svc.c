/* SPDX-License-Identifier: MIT */
/*
 * The service side of the long-running subcommands (svc_int.h): the log
 * sink they install and SIGHUP's reopening of the log file.
 *
 * The log file is opened onto descriptor 2, so the library's log lines,
 * the command's own messages and anything else written to stderr (a
 * sanitizer's report) land in it alike. SIGHUP opens the path again and
 * moves the new file onto descriptor 2 with dup2, which is atomic: a
 * thread writing a line at that moment writes it whole to the old file or
 * to the new one. Each line is one write(2) with O_APPEND, so lines of
 * different threads never interleave.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#ifdef MU_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "cli/svc_int.h"
#include "core/log_int.h"
#include "core/net_int.h"

/* Set by cli_svc_start before any thread starts, read-only afterwards. */
static int log_json;
static const char *log_path;

static void write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t k = write(fd, p, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return; /* nowhere to say so: the log is what failed */
		p += k;
		n -= (size_t)k;
	}
}

static void svc_sink(mu_log_level_t level, const char *module, const char *msg, void *ud)
{
	char line[MU_LOG_LINE_MAX];
	size_t n = mu__log_format(line, sizeof(line), log_json, level, module, msg);

	(void)ud;
	write_all(2, line, n);
}

static int open_log(void)
{
	int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);

	if (fd < 0)
		return -errno;
	if (fd != 2) {
		if (dup2(fd, 2) < 0) {
			int err = -errno;

			close(fd);
			return err;
		}
		close(fd);
	}
	return 0;
}

/* The signal thread, on SIGHUP. */
static void reopen_log(void *ud)
{
	int rc;

	(void)ud;
	if (log_path == NULL) {
		mu__log(MU_LOG_INFO, "log", "SIGHUP: logging to stderr, nothing to reopen");
		return;
	}
	rc = open_log();
	if (rc != 0)
		mu__log(MU_LOG_WARN, "log", "SIGHUP: cannot reopen %s: %s; still writing to the "
		        "file open before", log_path, mu_strerror(rc));
	else
		mu__log(MU_LOG_INFO, "log", "SIGHUP: reopened %s", log_path);
}

void cli_svc_init(cli_svc_t *sv)
{
	memset(sv, 0, sizeof(*sv));
	sv->log_format = "text";
}

int cli_svc_start(cli_svc_t *sv, const char *cmd, mu_log_level_t level)
{
	int rc;

	if (strcmp(sv->log_format, "text") != 0 && strcmp(sv->log_format, "json") != 0) {
		fprintf(stderr, "%s: --log-format is text or json, not %s\n", cmd, sv->log_format);
		return 2;
	}
	log_json = strcmp(sv->log_format, "json") == 0;
	log_path = sv->log_file;
	if (log_path != NULL && (rc = open_log()) != 0) {
		fprintf(stderr, "%s: cannot open --log-file %s: %s\n", cmd, log_path,
		        mu_strerror(rc));
		return 1;
	}
	mu_log_set_sink(svc_sink, NULL, level);
	cli_on_hup(reopen_log, NULL);
	if (sv->metrics == NULL)
		return 0;
	if (mu__split_hostport(sv->metrics, sv->mhost, sizeof(sv->mhost), &sv->mport) != 0) {
		fprintf(stderr, "%s: --metrics %s is not HOST:PORT\n", cmd, sv->metrics);
		return 2;
	}
	if (mu_metrics_new(&sv->reg) != 0) {
		fprintf(stderr, "%s: out of memory\n", cmd);
		return 1;
	}
	return 0;
}

int cli_svc_listen(cli_svc_t *sv, const char *cmd, mu_serve_t *on)
{
	mu_metrics_server_opts_t o;
	char why[256] = "", addr[300];
	int rc;

	if (sv->reg == NULL || sv->http != NULL)
		return 0;
	cli_block_signals();
	mu_metrics_server_opts_init(&o);
	o.host = sv->mhost;
	o.port = sv->mport;
	o.serve = on;
	rc = mu_metrics_server_start(sv->reg, &o, &sv->http, why, sizeof(why));
	if (rc != 0) {
		mu__log(MU_LOG_ERROR, "metrics", "%s: cannot serve metrics on %s: %s", cmd,
		        sv->metrics, why[0] != '\0' ? why : mu_strerror(rc));
		return 1;
	}
	sv->lent = on != NULL;
	mu__hostport_text(sv->mhost, mu_metrics_server_port(sv->http), addr, sizeof(addr));
	mu__log(MU_LOG_INFO, "metrics", "serving metrics on http://%s/metrics", addr);
	cli_warn_open("metrics", sv->mhost, mu_metrics_server_port(sv->http), "the metrics "
	              "endpoint has no authentication: anyone who can reach it reads this "
	              "server's counters (peers, keys, addresses)",
	              "bind it to 127.0.0.1, or let only the Prometheus host through a firewall");
	return 0;
}

int cli_is_loopback(const char *host)
{
	unsigned char a[16];

	if (host == NULL || host[0] == '\0')
		return 0; /* the wildcard: every address */
	if (strcasecmp(host, "localhost") == 0)
		return 1;
	if (inet_pton(AF_INET, host, a) == 1)
		return a[0] == 127;
	if (inet_pton(AF_INET6, host, a) == 1) {
		static const unsigned char one[16] = {[15] = 1};
		static const unsigned char v4map[12] = {[10] = 0xff, [11] = 0xff};

		return memcmp(a, one, 16) == 0 || (memcmp(a, v4map, 12) == 0 && a[12] == 127);
	}
	return 0; /* a name: assume it reaches beyond this machine */
}

void cli_warn_open(const char *component, const char *host, int port, const char *risk,
                   const char *fix)
{
	char addr[300];

	if (cli_is_loopback(host))
		return;
	mu__hostport_text(host != NULL && host[0] != '\0' ? host : "0.0.0.0", port, addr,
	                  sizeof(addr));
	mu__log(MU_LOG_WARN, component, "listening on %s, beyond loopback: %s; %s "
	        "(docs/deploy.md)", addr, risk, fix);
}

void cli_svc_ready(cli_svc_t *sv, const char *status)
{
	(void)sv;
#ifdef MU_HAVE_SYSTEMD
	/* sd_notify does nothing unless $NOTIFY_SOCKET is set (by systemd) */
	sd_notifyf(0, "READY=1\nSTATUS=%s", status);
#else
	(void)status;
#endif
}

void cli_svc_stopping(void)
{
#ifdef MU_HAVE_SYSTEMD
	sd_notify(0, "STOPPING=1");
#endif
}

void cli_svc_wait(cli_svc_t *sv, void (*wait_fn)(void *), void *ud)
{
	if (sv->http == NULL || sv->lent)
		wait_fn(ud);
	else
		cli_metrics_run(sv->http, wait_fn, ud);
}

void cli_svc_stop(cli_svc_t *sv)
{
	mu_metrics_server_free(sv->http);
	sv->http = NULL;
	mu_metrics_free(sv->reg);
	sv->reg = NULL;
}
