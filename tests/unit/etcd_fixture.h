/* SPDX-License-Identifier: MIT */
/*
 * Real etcd members for C tests: Debian's /usr/bin/etcd (etcd-server 3.4,
 * which `make check` installs), on loopback ports the kernel hands out,
 * each with a fresh data directory, stopped and removed afterwards. A
 * missing etcd fails the test; it is never skipped.
 */
#ifndef MU_TEST_ETCD_FIXTURE_H
#define MU_TEST_ETCD_FIXTURE_H

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define ETCD_BIN "/usr/bin/etcd"
#define ETCD_MAX 3

typedef struct {
	int n;
	pid_t pid[ETCD_MAX];
	int client_port[ETCD_MAX], peer_port[ETCD_MAX];
	char dir[ETCD_MAX][64];
	char name[ETCD_MAX][16];
	char cluster[512];
	char endpoints[256]; /* "http://127.0.0.1:P1,..." */
} etcd_fixture_t;

static int etcd_free_port(void)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	getsockname(fd, (struct sockaddr *)&sa, &len);
	port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

static int etcd_port_open(int port)
{
	struct sockaddr_in sa;
	int fd = socket(AF_INET, SOCK_STREAM, 0), ok;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

/* Start member i (its data dir is kept across restarts). */
static void etcd_member_start(etcd_fixture_t *f, int i, int existing)
{
	char client[64], peer[64];
	pid_t pid;

	snprintf(client, sizeof(client), "http://127.0.0.1:%d", f->client_port[i]);
	snprintf(peer, sizeof(peer), "http://127.0.0.1:%d", f->peer_port[i]);
	pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		/* a test killed outright (a CI timeout) takes its etcd along */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(null, 1);
		dup2(null, 2);
		execl(ETCD_BIN, ETCD_BIN, "--name", f->name[i], "--data-dir", f->dir[i],
		      "--listen-client-urls", client, "--advertise-client-urls", client,
		      "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		      "--initial-cluster", f->cluster, "--initial-cluster-state",
		      existing ? "existing" : "new", "--heartbeat-interval", "100",
		      "--election-timeout", "1000", (char *)NULL);
		_exit(127);
	}
	f->pid[i] = pid;
}

/* A cluster of n members; returns once every member accepts clients. */
static void etcd_start(etcd_fixture_t *f, int n)
{
	int i, tries;
	size_t off = 0, eoff = 0;

	if (access(ETCD_BIN, X_OK) != 0)
		fail_msg("%s is missing: make check installs Debian's etcd-server", ETCD_BIN);
	memset(f, 0, sizeof(*f));
	f->n = n;
	for (i = 0; i < n; i++) {
		f->client_port[i] = etcd_free_port();
		f->peer_port[i] = etcd_free_port();
		snprintf(f->name[i], sizeof(f->name[i]), "m%d", i);
		snprintf(f->dir[i], sizeof(f->dir[i]), "/tmp/mu-etcd-XXXXXX");
		if (mkdtemp(f->dir[i]) == NULL)
			fail_msg("mkdtemp failed");
		off += (size_t)snprintf(f->cluster + off, sizeof(f->cluster) - off, "%s%s=http://127.0.0.1:%d",
		                        i ? "," : "", f->name[i], f->peer_port[i]);
		eoff += (size_t)snprintf(f->endpoints + eoff, sizeof(f->endpoints) - eoff,
		                         "%shttp://127.0.0.1:%d", i ? "," : "", f->client_port[i]);
	}
	for (i = 0; i < n; i++)
		etcd_member_start(f, i, 0);
	for (i = 0; i < n; i++)
		for (tries = 0; tries < 300 && !etcd_port_open(f->client_port[i]); tries++)
			usleep(50000);
	usleep(n > 1 ? 1500000 : 300000); /* a leader is elected */
}

static void etcd_member_kill(etcd_fixture_t *f, int i)
{
	if (f->pid[i] > 0) {
		kill(f->pid[i], SIGKILL);
		waitpid(f->pid[i], NULL, 0);
		f->pid[i] = 0;
	}
}

static void etcd_stop(etcd_fixture_t *f)
{
	char cmd[128];
	int i;

	for (i = 0; i < f->n; i++) {
		etcd_member_kill(f, i);
		snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir[i]);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", f->dir[i]);
	}
}

#endif
