/* SPDX-License-Identifier: MIT */
/*
 * Serving a stage: the message loop of one connection (shared with tracker
 * sessions) and `muster stage`'s server, a listener thread and a thread
 * per connection. Forwards on one stage run one at a time (the stage's
 * lock); a connection that breaks the protocol, stalls mid-message or
 * sends more than the limits is told why and closed, and every other
 * connection goes on being served.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/alloc_int.h"
#include "core/log_int.h"
#include "core/net_int.h"
#include "core/sock_int.h"
#include "core/time_int.h"
#include "pipe/pipe_int.h"

#define LOG "stage"

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int reply_error(mu__chan_t *c, const mu__serve_ctx_t *ctx, uint64_t id, int code,
                       const char *cause)
{
	(void)ctx; /* the coordinator names the stage: the text is the cause */
	return mu__msg_send_error(c, id, code, cause);
}

static int do_forward(mu__chan_t *c, const mu__serve_ctx_t *ctx, const mu__msg_t *m)
{
	mu_tensor_list_t in, out;
	mu__msg_t r = {MU_MSG_RESULT, 0, m->id, 0, 0};
	char why[768] = "", cause[900];
	int64_t t0;
	int rc;

	mu_tensor_list_init(&in);
	mu_tensor_list_init(&out);
	rc = mu__msg_recv_frame(c, m, &in);
	if (rc != 0) {
		/* the stream is lost inside the body: say why, then close */
		snprintf(cause, sizeof(cause), "bad FORWARD frame: %s", mu_strerror(rc));
		if (rc != MU_EEOF && rc != -ETIMEDOUT)
			reply_error(c, ctx, m->id, rc, cause);
		mu__log(MU_LOG_WARN, LOG, "%s: closing a connection: %s", ctx->name, cause);
		mu_tensor_list_free(&in);
		return rc;
	}
	if (ctx->stage == NULL) {
		rc = reply_error(c, ctx, m->id, MU_EARG, "no stage is loaded here yet");
		mu_tensor_list_free(&in);
		return rc;
	}
	t0 = now_ns();
	rc = mu_stage_forward(ctx->stage, &in, &out, why, sizeof(why));
	r.aux = (uint64_t)(now_ns() - t0);
	mu_tensor_list_free(&in);
	if (rc != 0) {
		mu__log(MU_LOG_WARN, LOG, "%s: forward %llu failed: %s", ctx->name,
		        (unsigned long long)m->id, why);
		mu_tensor_list_free(&out);
		return reply_error(c, ctx, m->id, rc, why); /* the connection stays */
	}
	rc = mu__msg_send_frame(c, &r, &out);
	mu_tensor_list_free(&out);
	if (rc == 0 && ctx->on_forward != NULL)
		ctx->on_forward(ctx->ud);
	return rc;
}

int mu__serve_chan(mu__chan_t *c, const mu__serve_ctx_t *ctx)
{
	mu__msg_t m;
	int rc = 0;

	while (ctx->stop == NULL || !*ctx->stop) {
		rc = mu__msg_recv(c, &m, ctx->idle_ms);
		if (rc == MU_EEOF)
			return 0; /* closed between messages: a goodbye */
		if (rc == MU_EBADMAGIC || rc == MU_EPROTO || rc == MU_ETOOBIG) {
			char cause[256];

			snprintf(cause, sizeof(cause), "bad message header: %s", mu_strerror(rc));
			reply_error(c, ctx, 0, rc, cause);
			mu__log(MU_LOG_WARN, LOG, "%s: closing a connection: %s", ctx->name, cause);
			return rc;
		}
		if (rc != 0)
			return rc;
		switch (m.type) {
		case MU_MSG_FORWARD:
			rc = do_forward(c, ctx, &m);
			break;
		case MU_MSG_INFO:
			rc = mu__msg_skip(c, &m);
			if (rc == 0 && ctx->stage == NULL)
				rc = reply_error(c, ctx, m.id, MU_EARG, "no stage is loaded here yet");
			else if (rc == 0) {
				mu__msg_t r = {MU_MSG_INFO, 0, m.id, 0, 0};
				const char *d = mu_stage_describe(ctx->stage);

				rc = mu__msg_send(c, &r, d, strlen(d));
			}
			break;
		case MU_MSG_CLOSE:
			mu__msg_skip(c, &m);
			return 0;
		default: {
			char cause[128];

			snprintf(cause, sizeof(cause), "a %s message is not expected here",
			         mu__msg_type_name(m.type));
			rc = mu__msg_skip(c, &m);
			if (rc == 0)
				rc = reply_error(c, ctx, m.id, MU_EPROTO, cause);
			break;
		}
		}
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* ---- the server ---- */

typedef struct conn_s {
	struct conn_s *next;
	mu_stage_server_t *srv;
	int fd;
	int done;
	pthread_t thr;
	char peer[64];
} conn_t;

struct mu_stage_server_s {
	mu_stage_t *stage;
	mu_stage_server_opts_t o;
	char *host, *name;
	int lfd, port;
	int wake[2];
	pthread_t accept_thr;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	conn_t *conns;
	int nconns;
	unsigned long forwards;
	volatile int stop;
	int finished;   /* served `requests` forwards, or stopped */
	int joined;
};

void mu_stage_server_opts_init(mu_stage_server_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->host = "127.0.0.1";
	o->max_conns = 64;
	o->io_timeout_ms = 30000;
	o->idle_timeout_ms = -1;
	o->max_frame_bytes = (uint64_t)1 << 30;
	o->name = "stage";
}

static void counted(void *ud)
{
	mu_stage_server_t *srv = ud;

	pthread_mutex_lock(&srv->lock);
	srv->forwards++;
	if (srv->o.requests > 0 && srv->forwards >= srv->o.requests) {
		srv->finished = 1;
		pthread_cond_broadcast(&srv->cond);
	}
	pthread_mutex_unlock(&srv->lock);
}

static void *conn_main(void *arg)
{
	conn_t *k = arg;
	mu_stage_server_t *srv = k->srv;
	mu__serve_ctx_t ctx;
	mu__chan_t c;
	int rc;

	memset(&ctx, 0, sizeof(ctx));
	ctx.stage = srv->stage;
	ctx.name = srv->name;
	ctx.idle_ms = srv->o.idle_timeout_ms;
	ctx.on_forward = counted;
	ctx.ud = srv;
	ctx.stop = &srv->stop;
	mu__chan_init(&c, k->fd, NULL, srv->o.io_timeout_ms, srv->o.max_frame_bytes);
	rc = mu__serve_chan(&c, &ctx);
	if (rc == -ETIMEDOUT)
		mu__log(MU_LOG_WARN, LOG, "%s: %s sent nothing for too long; closed", srv->name, k->peer);
	else if (rc != 0 && !srv->stop)
		mu__log(MU_LOG_INFO, LOG, "%s: connection from %s ended: %s", srv->name, k->peer,
		        mu_strerror(rc));
	else
		mu__log(MU_LOG_DEBUG, LOG, "%s: %s closed", srv->name, k->peer);
	if (rc != 0 && rc != -ETIMEDOUT && !srv->stop)
		mu__chan_linger(&c);
	pthread_mutex_lock(&srv->lock);
	k->done = 1;
	pthread_mutex_unlock(&srv->lock);
	if (write(srv->wake[1], "r", 1) < 0) { /* the acceptor reaps us */
	}
	return NULL;
}

/* Join finished connections (all of them when stopping). */
static void reap(mu_stage_server_t *srv, int all)
{
	conn_t **pp = &srv->conns, *k;

	pthread_mutex_lock(&srv->lock);
	while ((k = *pp) != NULL) {
		if (!k->done && !all) {
			pp = &k->next;
			continue;
		}
		if (!k->done)
			shutdown(k->fd, SHUT_RDWR);
		*pp = k->next;
		srv->nconns--;
		pthread_mutex_unlock(&srv->lock);
		pthread_join(k->thr, NULL);
		close(k->fd);
		mu__free(k);
		pthread_mutex_lock(&srv->lock);
	}
	pthread_mutex_unlock(&srv->lock);
}

static void accept_one(mu_stage_server_t *srv)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char ip[64];
	int fd, port = 0, one = 1;
	conn_t *k;

	fd = accept4(srv->lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fd < 0)
		return;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	mu__addr_text((struct sockaddr *)&ss, ip, sizeof(ip), &port);
	if (srv->nconns >= srv->o.max_conns) {
		mu__log(MU_LOG_WARN, LOG, "%s: refusing %s: %d connections already", srv->name, ip,
		        srv->nconns);
		close(fd);
		return;
	}
	k = mu__calloc(1, sizeof(*k));
	if (k == NULL) {
		close(fd);
		return;
	}
	k->srv = srv;
	k->fd = fd;
	mu__hostport_text(ip, port, k->peer, sizeof(k->peer));
	mu__log(MU_LOG_INFO, LOG, "%s: connection from %s", srv->name, k->peer);
	pthread_mutex_lock(&srv->lock);
	if (pthread_create(&k->thr, NULL, conn_main, k) != 0) {
		pthread_mutex_unlock(&srv->lock);
		close(fd);
		mu__free(k);
		return;
	}
	k->next = srv->conns;
	srv->conns = k;
	srv->nconns++;
	pthread_mutex_unlock(&srv->lock);
}

static void *accept_main(void *arg)
{
	mu_stage_server_t *srv = arg;
	struct pollfd p[2];
	char drain[64];

	while (!srv->stop) {
		p[0].fd = srv->lfd;
		p[0].events = POLLIN;
		p[1].fd = srv->wake[0];
		p[1].events = POLLIN;
		p[0].revents = p[1].revents = 0;
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents != 0 && read(srv->wake[0], drain, sizeof(drain)) < 0) {
		}
		reap(srv, 0);
		if (!srv->stop && (p[0].revents & POLLIN))
			accept_one(srv);
	}
	reap(srv, 1);
	return NULL;
}

int mu_stage_server_start(mu_stage_t *s, const mu_stage_server_opts_t *o,
                          mu_stage_server_t **out)
{
	mu_stage_server_t *srv;
	int rc;

	*out = NULL;
	srv = mu__calloc(1, sizeof(*srv));
	if (srv == NULL)
		return MU_ENOMEM;
	srv->stage = s;
	srv->o = *o;
	srv->host = mu__strdup(o->host != NULL ? o->host : "127.0.0.1");
	srv->name = mu__strdup(o->name != NULL ? o->name : "stage");
	srv->o.host = srv->host;
	srv->o.name = srv->name;
	srv->lfd = srv->wake[0] = srv->wake[1] = -1;
	pthread_mutex_init(&srv->lock, NULL);
	pthread_cond_init(&srv->cond, NULL);
	rc = srv->host == NULL || srv->name == NULL ? MU_ENOMEM : 0;
	if (rc == 0)
		rc = mu__sock_listen(srv->host, o->port, 128, &srv->lfd, &srv->port);
	if (rc == 0 && pipe2(srv->wake, O_CLOEXEC | O_NONBLOCK) != 0)
		rc = -errno;
	if (rc == 0 && pthread_create(&srv->accept_thr, NULL, accept_main, srv) != 0)
		rc = MU_ENOMEM;
	if (rc != 0) {
		mu__sock_close(srv->lfd);
		mu__sock_close(srv->wake[0]);
		mu__sock_close(srv->wake[1]);
		pthread_mutex_destroy(&srv->lock);
		pthread_cond_destroy(&srv->cond);
		mu__free(srv->host);
		mu__free(srv->name);
		mu__free(srv);
		return rc;
	}
	*out = srv;
	return 0;
}

int mu_stage_server_port(const mu_stage_server_t *srv)
{
	return srv->port;
}

unsigned long mu_stage_server_forwards(mu_stage_server_t *srv)
{
	unsigned long n;

	pthread_mutex_lock(&srv->lock);
	n = srv->forwards;
	pthread_mutex_unlock(&srv->lock);
	return n;
}

void mu_stage_server_wait(mu_stage_server_t *srv)
{
	pthread_mutex_lock(&srv->lock);
	while (!srv->finished)
		pthread_cond_wait(&srv->cond, &srv->lock);
	pthread_mutex_unlock(&srv->lock);
}

void mu_stage_server_stop(mu_stage_server_t *srv)
{
	int join;

	pthread_mutex_lock(&srv->lock);
	srv->stop = 1;
	srv->finished = 1;
	join = !srv->joined;
	srv->joined = 1;
	pthread_cond_broadcast(&srv->cond);
	pthread_mutex_unlock(&srv->lock);
	if (write(srv->wake[1], "s", 1) < 0) {
	}
	if (join)
		pthread_join(srv->accept_thr, NULL);
}

void mu_stage_server_free(mu_stage_server_t *srv)
{
	if (srv == NULL)
		return;
	mu_stage_server_stop(srv);
	mu__sock_close(srv->lfd);
	mu__sock_close(srv->wake[0]);
	mu__sock_close(srv->wake[1]);
	pthread_mutex_destroy(&srv->lock);
	pthread_cond_destroy(&srv->cond);
	mu__free(srv->host);
	mu__free(srv->name);
	mu__free(srv);
}
