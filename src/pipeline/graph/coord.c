/* SPDX-License-Identifier: MIT */
/*
 * The coordinator: holds no weights, only each stage's names. A forward
 * keeps a pool of named tensors (the model's inputs, then whatever each
 * stage hands on); stage k is sent exactly the tensors it consumes and
 * its outputs join the pool, and tensors no later stage reads are dropped
 * as soon as they are done with. Connections are persistent, one per
 * stage, and every wait on them is bounded.
 *
 * Pipelining: a thread per stage, each working through the inputs in
 * order. Stage k may take input j once stage k-1 has finished it (then
 * every earlier stage has), and stage 0 runs at most n inputs ahead of the
 * last stage, so one input is in flight per stage.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc_int.h"
#include "core/json_int.h"
#include "core/log_int.h"
#include "core/net_int.h"
#include "core/opts_int.h"
#include "core/sock_int.h"
#include "core/time_int.h"
#include "pipeline/graph/coord_int.h"
#include "pipeline/opts_int.h"
#include "pipeline/msg_int.h"

#define LOG "coord"

#include "pipeline/graph/coord_priv_int.h"


static int stage_error(mu_coord_t *c, int i, int rc, char *err, size_t el, const char *what)
{
	const cstage_t *s = &c->s[i];

	c->failed_stage = i; /* its connection is not usable any more */
	if (rc == MU_EEOF || rc == -ECONNRESET || rc == -EPIPE)
		snprintf(err, el, "stage %d/%d (%s): the connection was lost %s (the stage stopped or "
		         "closed it)", i, c->n, s->addr, what);
	else if (rc == -ETIMEDOUT)
		snprintf(err, el, "stage %d/%d (%s): no progress for %d ms %s", i, c->n, s->addr,
		         c->o.io_timeout_ms, what);
	else
		snprintf(err, el, "stage %d/%d (%s): %s %s", i, c->n, s->addr, mu_strerror(rc), what);
	return rc;
}

/* Read a reply to id: the wanted type, or an ERROR turned into err. */
static int reply(mu_coord_t *c, int i, uint64_t id, int type, mu__msg_t *m, char *err,
                 size_t el, const char *what)
{
	cstage_t *s = &c->s[i];
	char *text = NULL;
	int rc = mu__msg_recv(&s->c, m, s->c.io_ms);

	if (rc == 0 && m->type == MU_MSG_ERROR) {
		rc = mu__msg_recv_body(&s->c, m, &text);
		if (rc == 0) {
			snprintf(err, el, "stage %d/%d (%s) failed: %s", i, c->n, s->addr, text);
			mu__free(text);
			return m->status < 0 ? m->status : MU_EFAIL;
		}
	}
	if (rc == 0 && (m->type != type || m->id != id)) {
		snprintf(err, el, "stage %d/%d (%s): sent %s for request %llu while %s %llu was due", i,
		         c->n, s->addr, mu__msg_type_name(m->type), (unsigned long long)m->id,
		         mu__msg_type_name(type), (unsigned long long)id);
		return MU_EPROTO;
	}
	return rc != 0 ? stage_error(c, i, rc, err, el, what) : 0;
}

static int connect_stage(mu_coord_t *c, int i, const char *addr, char *err, size_t el)
{
	cstage_t *s = &c->s[i];
	int64_t deadline = mu__deadline(c->o.connect_timeout_ms);
	char host[256], *body = NULL;
	mu__msg_t m = {MU_MSG_INFO, 0, 0, 0, 0, 0};
	int port, rc;

	snprintf(s->addr, sizeof(s->addr), "%s", addr);
	s->fd = NULL;
	if (mu__split_hostport(addr, host, sizeof(host), &port) != 0) {
		snprintf(err, el, "stage %d: \"%s\" is not HOST:PORT", i, addr);
		return MU_EARG;
	}
	/* the stage may still be loading: retry until the deadline */
	for (;;) {
		rc = mu__sock_connect(host, port, c->o.sec, deadline, &s->fd);
		/* a refusal (secret, certificate) will not change on retry */
		if (rc == 0 || rc == MU_ERESOLVE || rc == MU_EAUTH || rc == MU_ETLS ||
		    mu__remaining_ms(deadline) == 0)
			break;
		usleep(50 * 1000);
	}
	if (rc != 0) {
		snprintf(err, el, "stage %d/%d (%s): cannot connect: %s", i, c->n, addr, mu_strerror(rc));
		return rc;
	}
	mu__chan_init(&s->c, s->fd, NULL, c->o.io_timeout_ms, c->o.max_frame_bytes);
	m.id = ++c->next_id;
	rc = mu__msg_send(&s->c, &m, NULL, 0);
	if (rc != 0)
		return stage_error(c, i, rc, err, el, "asking what it serves");
	rc = reply(c, i, m.id, MU_MSG_INFO, &m, err, el, "asking what it serves");
	if (rc == 0 && (rc = mu__msg_recv_body(&s->c, &m, &body)) != 0)
		return stage_error(c, i, rc, err, el, "reading what it serves");
	if (rc == 0) {
		s->desc = body;
		rc = mu__coord_parse_info(c, i, body, err, el);
	}
	return rc;
}

int mu_coord_connect(const char *const *addrs, int n, const mu_coord_opts_t *uo, mu_coord_t **out,
                     char *err, size_t el)
{
	mu_coord_opts_t o;
	mu_coord_t *c;
	int rc = 0;

	*out = NULL;
	if (err == NULL)
		el = 0;
	mu__coord_defaults(&o);
	if (uo != NULL && mu__opts_read(&o, sizeof(o), uo) != 0) {
		snprintf(err, el, "coordinator options not made by mu_coord_opts_init, or asking for "
		         "what this library (%s) does not have", mu_version());
		return MU_EARG;
	}
	if (n < 1) {
		snprintf(err, el, "no stages given");
		return MU_EARG;
	}
	rc = mu__coord_new(n, &o, &c);
	for (int i = 0; rc == 0 && i < n; i++)
		rc = connect_stage(c, i, addrs[i], err, el);
	if (rc == 0)
		rc = mu__coord_check_chain(c, err, el);
	if (rc != 0) {
		mu_coord_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

int mu_coord_stages(const mu_coord_t *c)
{
	return c->n;
}

uint64_t mu_coord_digest(const mu_coord_t *c)
{
	return c->digest;
}

const char *mu_coord_addr(const mu_coord_t *c, int i)
{
	return c->s[i].addr;
}

const char *mu_coord_describe(const mu_coord_t *c, int i)
{
	return c->s[i].desc;
}

void mu_coord_timing(const mu_coord_t *c, int i, mu_stage_timing_t *t)
{
	*t = c->s[i].t;
}

void mu_coord_close(mu_coord_t *c)
{
	if (c == NULL)
		return;
	for (int i = 0; i < c->n; i++) {
		cstage_t *s = &c->s[i];

		if (s->fd != NULL) {
			mu__msg_t m = {MU_MSG_CLOSE, 0, 0, 0, 0, 0};

			s->c.io_ms = 1000; /* a goodbye is worth a second at most */
			mu__msg_send(&s->c, &m, NULL, 0);
			if (s->sess != NULL)
				mu_session_close(s->sess);
			else
				mu__sock_close(s->fd);
		}
		mu__coord_free_names(s->in, s->nin);
		mu__coord_free_names(s->out, s->nout);
		mu__free(s->desc);
	}
	mu__coord_free_names(c->model_out, c->nmodel_out);
	uv_mutex_destroy(&c->lock);
	mu__free(c->s);
	mu__free(c);
}

/* ---- forwards ---- */

/* A list that borrows its tensors: free the array only. */
static void list_release(mu_tensor_list_t *l)
{
	mu__free(l->t);
	mu_tensor_list_init(l);
}

static int read_later(const mu_coord_t *c, int k, const char *name)
{
	for (int i = k + 1; i < c->n; i++)
		for (int j = 0; j < c->s[i].nin; j++)
			if (strcmp(c->s[i].in[j], name) == 0)
				return 1;
	for (int j = 0; j < c->nmodel_out; j++)
		if (strcmp(c->model_out[j], name) == 0)
			return 1;
	return 0;
}

static uint64_t list_bytes(const mu_tensor_list_t *l)
{
	uint64_t b = 0;

	for (size_t i = 0; i < l->n; i++)
		b += mu_tensor_nbytes(l->t[i]);
	return b;
}

/* A RESULT holds exactly the outputs stage k's description lists, each
 * once: a tensor by another name would stand in for another stage's (or
 * the caller's) in the pool. Their dtypes and shapes are checked by the
 * stage that reads them next (its inputs), and the caller's by dtype. */
static int check_result(const mu_coord_t *c, int k, const mu_tensor_list_t *got, char *err,
                        size_t el)
{
	const cstage_t *s = &c->s[k];

	for (size_t j = 0; j < got->n; j++) {
		int known = 0;

		for (int o = 0; o < s->nout && !known; o++)
			known = strcmp(s->out[o], got->t[j]->name) == 0;
		for (size_t i = 0; known && i < j; i++)
			known = strcmp(got->t[i]->name, got->t[j]->name) != 0;
		if (!known) {
			snprintf(err, el, "stage %d/%d (%s) returned %.200s (%s), which is not one of its "
			         "outputs or came twice", k, c->n, s->addr, got->t[j]->name,
			         mu_dtype_name((int)got->t[j]->dtype));
			return MU_EPROTO;
		}
	}
	if (got->n != (size_t)s->nout) {
		snprintf(err, el, "stage %d/%d (%s) returned %zu tensors; its description lists %d "
		         "outputs", k, c->n, s->addr, got->n, s->nout);
		return MU_EPROTO;
	}
	return 0;
}

/*
 * Stage k on one input: gather its inputs from `given` (the caller's,
 * borrowed) and `pool` (owned boundaries), send, and add its outputs to the
 * pool. `lock` guards the pool and the figures when stages run at once.
 */
/*
 * Between forwards a stage may have closed the connection as idle
 * (`muster stage --idle-timeout`): it said so and closed, so the socket
 * is readable before we asked anything. Dial it again (a graph stage
 * keeps nothing for a connection). 0, or the dial's error in err.
 */
static int redial_if_closed(mu_coord_t *c, int k, char *err, size_t el)
{
	cstage_t *s = &c->s[k];
	char host[256];
	int port, rc;

	/* a device session's stream is the session's: its loss is the
	 * cluster's to handle (a replacement), not a connection to dial */
	if (s->fd == NULL || s->sess != NULL || mu__sock_idle_ok(s->fd))
		return 0;
	mu__log(MU_LOG_INFO, "coord", "stage %d/%d (%s) closed the connection between forwards "
	        "(idle, or going away): dialling it again", k, c->n, s->addr);
	mu__sock_close(s->fd);
	s->fd = NULL;
	if (mu__split_hostport(s->addr, host, sizeof(host), &port) != 0)
		return MU_EARG;
	rc = mu__sock_connect(host, port, c->o.sec, mu__deadline(c->o.connect_timeout_ms), &s->fd);
	if (rc != 0) {
		s->fd = NULL;
		snprintf(err, el, "stage %d/%d (%s): the connection was lost between forwards, and "
		         "dialling it again failed: %s", k, c->n, s->addr, mu_strerror(rc));
		return rc;
	}
	mu__chan_init(&s->c, s->fd, NULL, c->o.io_timeout_ms, c->o.max_frame_bytes);
	return 0;
}

static int run_stage(mu_coord_t *c, int k, const mu_tensor_list_t *given, mu_tensor_list_t *pool,
                     int locked, char *err, size_t el)
{
	cstage_t *s = &c->s[k];
	mu_tensor_list_t send, got;
	mu__msg_t m = {MU_MSG_FORWARD, 0, 0, 0, 0, 0};
	double t0;
	int rc = 0;

	mu_tensor_list_init(&send);
	mu_tensor_list_init(&got);
	if (locked)
		uv_mutex_lock(&c->lock);
	m.id = ++c->next_id;
	for (int j = 0; rc == 0 && j < s->nin; j++) {
		mu_tensor_t *t = mu_tensor_list_find(pool, s->in[j]);

		if (t == NULL)
			t = mu_tensor_list_find(given, s->in[j]);
		if (t == NULL) {
			snprintf(err, el, "stage %d/%d (%s) needs %s, which neither the input nor an "
			         "earlier stage provides", k, c->n, s->addr, s->in[j]);
			rc = MU_EARG;
		} else {
			rc = mu_tensor_list_push(&send, t);
		}
	}
	if (locked)
		uv_mutex_unlock(&c->lock);
	t0 = mu__clock_ms();
	if (rc == 0)
		rc = redial_if_closed(c, k, err, el);
	if (rc == 0 && (rc = mu__msg_send_frame(&s->c, &m, &send)) != 0)
		stage_error(c, k, rc, err, el, "sending a forward");
	if (rc == 0)
		rc = reply(c, k, m.id, MU_MSG_RESULT, &m, err, el, "waiting for a forward's result");
	if (rc == 0 && (rc = mu__msg_recv_frame(&s->c, &m, &got)) != 0)
		stage_error(c, k, rc, err, el, "reading a forward's result");
	if (rc == 0)
		rc = check_result(c, k, &got, err, el);
	if (locked)
		uv_mutex_lock(&c->lock);
	if (rc == 0) {
		s->t.forward_ms += mu__clock_ms() - t0;
		s->t.compute_ms += (double)m.aux / 1e6;
		s->t.bytes_in += list_bytes(&send);
		s->t.bytes_out += list_bytes(&got);
		s->t.forwards++;
	}
	for (size_t j = 0; rc == 0 && j < got.n; j++) {
		rc = mu_tensor_list_push(pool, got.t[j]);
		if (rc == 0)
			got.t[j] = NULL;
	}
	/* drop what nobody after this stage reads */
	for (size_t j = 0; rc == 0 && j < pool->n;) {
		if (!read_later(c, k, pool->t[j]->name)) {
			mu_tensor_free(pool->t[j]);
			pool->t[j] = pool->t[--pool->n];
		} else {
			j++;
		}
	}
	if (locked)
		uv_mutex_unlock(&c->lock);
	for (size_t j = 0; j < got.n; j++)
		mu_tensor_free(got.t[j]);
	list_release(&got);
	list_release(&send);
	return rc;
}

/* The model's outputs, moved from the pool to out in the model's order. */
static int collect(mu_coord_t *c, mu_tensor_list_t *pool, mu_tensor_list_t *out, char *err,
                   size_t el)
{
	for (int j = 0; j < c->nmodel_out; j++) {
		size_t i;

		for (i = 0; i < pool->n; i++)
			if (pool->t[i] != NULL && strcmp(pool->t[i]->name, c->model_out[j]) == 0)
				break;
		if (i == pool->n) {
			snprintf(err, el, "no stage returned the model output %s", c->model_out[j]);
			return MU_EPROTO;
		}
		if (mu_tensor_list_push(out, pool->t[i]) != 0)
			return MU_ENOMEM;
		pool->t[i] = NULL;
	}
	return 0;
}

static void pool_free(mu_tensor_list_t *pool)
{
	for (size_t i = 0; i < pool->n; i++)
		mu_tensor_free(pool->t[i]);
	list_release(pool);
}

int mu_coord_forward(mu_coord_t *c, const mu_tensor_list_t *inputs, mu_tensor_list_t *out,
                     char *err, size_t el)
{
	mu_tensor_list_t pool;
	int rc = 0;

	if (err == NULL)
		el = 0;
	c->failed_stage = -1;
	mu_tensor_list_init(&pool);
	for (int k = 0; rc == 0 && k < c->n; k++)
		rc = run_stage(c, k, inputs, &pool, 0, err, el);
	if (rc == 0)
		rc = collect(c, &pool, out, err, el);
	pool_free(&pool);
	return rc;
}

typedef struct {
	mu_coord_t *c;
	int k, m;
	const mu_tensor_list_t *inputs;
	mu_tensor_list_t *pools;
	int *done;             /* per stage: inputs finished */
	int *failed;
	char *err;
	size_t el;
	uv_cond_t *cond;
	uv_thread_t thr;
} worker_t;

static void stage_worker(void *arg)
{
	worker_t *w = arg;
	mu_coord_t *c = w->c;
	char why[1024];

	for (int j = 0; j < w->m; j++) {
		int rc;

		uv_mutex_lock(&c->lock);
		while (!*w->failed &&
		       ((w->k > 0 && w->done[w->k - 1] <= j) ||
		        (w->k == 0 && j - w->done[c->n - 1] >= c->n)))
			uv_cond_wait(w->cond, &c->lock);
		uv_mutex_unlock(&c->lock);
		if (*w->failed)
			break;
		rc = run_stage(c, w->k, &w->inputs[j], &w->pools[j], 1, why, sizeof(why));
		uv_mutex_lock(&c->lock);
		if (rc != 0 && !*w->failed) {
			*w->failed = rc;
			snprintf(w->err, w->el, "%s", why);
		}
		if (rc == 0)
			w->done[w->k] = j + 1;
		uv_cond_broadcast(w->cond);
		uv_mutex_unlock(&c->lock);
		if (rc != 0)
			break;
	}
}

int mu_coord_forward_many(mu_coord_t *c, const mu_tensor_list_t *inputs, int m,
                          mu_tensor_list_t *out, char *err, size_t el)
{
	worker_t *w;
	mu_tensor_list_t *pools;
	int *done, failed = 0, started = 0, rc = 0;
	uv_cond_t cond;

	if (err == NULL)
		el = 0;
	if (m < 1)
		return MU_EARG;
	c->failed_stage = -1;
	w = mu__calloc((size_t)c->n, sizeof(*w));
	pools = mu__calloc((size_t)m, sizeof(*pools));
	done = mu__calloc((size_t)c->n, sizeof(*done));
	if (w == NULL || pools == NULL || done == NULL) {
		mu__free(w);
		mu__free(pools);
		mu__free(done);
		return MU_ENOMEM;
	}
	uv_cond_init(&cond);
	for (int k = 0; k < c->n; k++) {
		w[k] = (worker_t){c, k, m, inputs, pools, done, &failed, err, el, &cond, 0};
		if (uv_thread_create(&w[k].thr, stage_worker, &w[k]) != 0) {
			uv_mutex_lock(&c->lock);
			failed = MU_ENOMEM;
			snprintf(err, el, "cannot start a thread per stage");
			uv_cond_broadcast(&cond);
			uv_mutex_unlock(&c->lock);
			break;
		}
		started++;
	}
	for (int k = 0; k < started; k++)
		uv_thread_join(&w[k].thr);
	rc = failed;
	for (int j = 0; j < m; j++) {
		if (rc == 0)
			rc = collect(c, &pools[j], &out[j], err, el);
		pool_free(&pools[j]);
	}
	uv_cond_destroy(&cond);
	mu__free(w);
	mu__free(pools);
	mu__free(done);
	return rc;
}

/* ---- over sessions (the main job) ---- */

int mu__coord_new(int n, const mu_coord_opts_t *o, mu_coord_t **out)
{
	mu_coord_t *c = mu__calloc(1, sizeof(*c));

	*out = NULL;
	if (c == NULL || n < 1 || (c->s = mu__calloc((size_t)n, sizeof(*c->s))) == NULL) {
		mu__free(c);
		return n < 1 ? MU_EARG : MU_ENOMEM;
	}
	c->n = n;
	if (o != NULL) /* a full struct of this build (internal callers) */
		c->o = *o;
	else
		mu__coord_defaults(&c->o);
	uv_mutex_init(&c->lock);
	c->failed_stage = -1;
	for (int i = 0; i < n; i++)
		c->s[i].fd = NULL;
	*out = c;
	return 0;
}

int mu__coord_set(mu_coord_t *c, int i, mu_session_t *sess, const char *addr,
                  const char *desc, char *err, size_t el)
{
	cstage_t *s = &c->s[i];
	cstage_t old = *s;
	int rc;

	memset(s, 0, sizeof(*s));
	snprintf(s->addr, sizeof(s->addr), "%s", addr);
	s->sess = sess;
	s->fd = mu_session_stream(sess);
	mu__chan_init(&s->c, s->fd, sess, c->o.io_timeout_ms, c->o.max_frame_bytes);
	s->desc = mu__strdup(desc);
	rc = s->desc == NULL ? MU_ENOMEM : mu__coord_parse_info(c, i, desc, err, el);
	if (rc == 0 && old.fd != NULL && (s->first != old.first || s->last != old.last)) {
		snprintf(err, el, "%s took nodes %d..%d in place of %d..%d", addr, s->first, s->last - 1,
		         old.first, old.last - 1);
		rc = MU_EPROTO;
	}
	if (rc != 0) {
		mu__coord_free_names(s->in, s->nin);
		mu__coord_free_names(s->out, s->nout);
		mu__free(s->desc);
		*s = old; /* the caller still owns sess */
		return rc;
	}
	/* a replacement: the old session is gone; keep its figures going */
	if (old.fd != NULL) {
		s->t.forward_ms = old.t.forward_ms;
		s->t.compute_ms = old.t.compute_ms;
		s->t.bytes_in = old.t.bytes_in;
		s->t.bytes_out = old.t.bytes_out;
		s->t.forwards = old.t.forwards;
		if (old.sess != NULL)
			mu_session_close(old.sess);
		else
			mu__sock_close(old.fd);
		mu__coord_free_names(old.in, old.nin);
		mu__coord_free_names(old.out, old.nout);
		mu__free(old.desc);
	}
	return 0;
}

int mu__coord_check(const mu_coord_t *c, char *err, size_t el)
{
	return mu__coord_check_chain(c, err, el);
}

int mu__coord_failed_stage(const mu_coord_t *c)
{
	return c->failed_stage;
}
