/* SPDX-License-Identifier: MIT */
/*
 * Opening what the API server runs (model_int.h): the checkpoint with its
 * tokenizer, then one of three placements behind the engine's links: a
 * decoder holding every layer in this process, a coordinator over `muster
 * stage` servers, or a cluster of devices from a tracker (which the engine
 * asks to replace a device it lost). The options are mu_serve_opts_t's;
 * serve.c has checked their ranges.
 */
#include <stdio.h>
#include <string.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/opts_int.h"
#include "llm/gen_int.h"
#include "pipeline/llm/cluster_int.h"
#include "pipeline/llm/coord_int.h"
#include "pipeline/llm/link_int.h"
#include "serve/model_int.h"

#define DEFAULT_CTX 4096

/* The caller's coordinator options over the defaults, as the internal
 * coordinator takes them. */
static int coord_opts(const mu_coord_opts_t *uo, mu__llm_coord_opts_t *o)
{
	mu_coord_opts_t c;

	mu_coord_opts_init(&c);
	if (uo != NULL && mu__opts_read(&c, sizeof(c), uo) != 0)
		return MU_EARG;
	mu__llm_coord_opts_init(o);
	o->connect_timeout_ms = c.connect_timeout_ms;
	o->io_timeout_ms = c.io_timeout_ms;
	o->max_frame_bytes = c.max_frame_bytes;
	o->sec = c.sec;
	return 0;
}

static int open_local(mu__serve_model_t *m, const mu_serve_opts_t *o, char *err, size_t el)
{
	mu__dec_opts_t d = {o->threads, o->parallel, UINT64_MAX, o->chunk};
	char why[1024] = "";
	int rc;

	rc = mu__dec_new(&m->src, 0, m->src.hp.n_layers, &d, &m->dec, why, sizeof(why));
	if (rc != 0) {
		snprintf(err, el, "cannot set up the model: %s", why);
		return rc;
	}
	/* the weights resident before anything is timed, as a stage does */
	mu__llm_src_touch(&m->src, 0, m->src.hp.n_layers);
	snprintf(m->where, sizeof(m->where), "this process, %d thread%s, kernels %s", o->threads,
	         o->threads == 1 ? "" : "s", mu__kern_isa());
	return 0;
}

static int open_remote(mu__serve_model_t *m, const mu_serve_opts_t *o, char *err, size_t el)
{
	mu__llm_coord_opts_t co;
	mu__llm_coord_t *c;
	mu__chain_t chain;
	char why[1024] = "";
	int rc;

	if (coord_opts(o->coord, &co) != 0) {
		snprintf(err, el, "the coordinator's options were not set by mu_coord_opts_init");
		return MU_EARG;
	}
	rc = mu__llm_coord_connect(o->stages, o->nstages, &co, &c, why, sizeof(why));
	if (rc != 0) {
		snprintf(err, el, "cannot use the stages: %s", why);
		return rc;
	}
	m->remote = c;
	mu__llm_coord_chain(c, &chain, o->chunk);
	if (chain.vocab != m->src.hp.vocab) {
		snprintf(err, el, "the stages serve another model: their model has a vocabulary of "
		         "%d, the model's %d", chain.vocab, m->src.hp.vocab);
		return MU_EARG;
	}
	if (m->ctx > mu__llm_coord_ctx(c))
		m->ctx = mu__llm_coord_ctx(c);
	snprintf(m->where, sizeof(m->where), "%d stage%s", o->nstages, o->nstages == 1 ? "" : "s");
	return 0;
}

static int open_cluster(mu__serve_model_t *m, const mu_serve_opts_t *o, char *err, size_t el)
{
	mu__llm_cluster_opts_t lo;
	mu__llm_cluster_t *c;
	mu_cluster_opts_t u;
	char why[1024] = "";
	int rc;

	mu_cluster_opts_init(&u);
	mu__llm_cluster_opts_init(&lo);
	if (mu__opts_read(&u, sizeof(u), o->cluster) != 0 || coord_opts(u.coord, &lo.coord) != 0) {
		snprintf(err, el, "the cluster's options were not set by mu_cluster_opts_init");
		return MU_EARG;
	}
	lo.pool.tracker_host = u.tracker_host;
	lo.pool.tracker_port = u.tracker_port;
	lo.pool.key = u.key;
	lo.pool.priority = u.priority;
	lo.pool.request_timeout_ms = u.request_timeout_ms;
	lo.pool.io_timeout_ms = lo.coord.io_timeout_ms;
	lo.pool.max_frame_bytes = lo.coord.max_frame_bytes;
	lo.pool.sec = lo.coord.sec;
	lo.pool.say = u.say;
	lo.pool.ud = u.ud;
	lo.devices = u.devices;
	lo.weights = u.weights;
	lo.max_replacements = u.max_replacements;
	lo.max_seqs = o->max_seqs > 0 ? o->max_seqs : o->parallel;
	lo.ctx = m->ctx;
	lo.max_chunk = o->chunk;
	rc = mu__llm_cluster_start(&m->src, &lo, &c, why, sizeof(why));
	if (rc != 0) {
		snprintf(err, el, "cannot place the model on the devices: %s", why);
		return rc;
	}
	m->cluster = c;
	snprintf(m->where, sizeof(m->where), "%d device%s from the tracker",
	         mu__llm_cluster_stages(c), mu__llm_cluster_stages(c) == 1 ? "" : "s");
	return 0;
}

/* One link per stage: the local decoder's, or each stage's of the
 * coordinator (the cluster's, over devices). */
static int make_links(mu__serve_model_t *m, const mu_serve_opts_t *o)
{
	mu__llm_coord_t *co = m->cluster != NULL ? mu__llm_cluster_coord(m->cluster) : m->remote;
	int i, k = co != NULL ? mu__llm_coord_stages(co) : 1;
	mu__eng_link_t *l = mu__calloc((size_t)k, sizeof(*l));

	if (l == NULL)
		return MU_ENOMEM;
	if (co == NULL && mu__link_local(m->dec, o->chunk, o->parallel, &l[0]) != 0) {
		mu__free(l);
		return MU_ENOMEM;
	}
	for (i = 0; co != NULL && i < k; i++)
		mu__llm_coord_link(co, i, o->chunk, &l[i]);
	m->links = l;
	m->nlinks = k;
	return 0;
}

static int start_engine(mu__serve_model_t *m, const mu_serve_opts_t *o)
{
	mu__eng_opts_t e = {.dim = m->src.hp.dim, .vocab = m->src.hp.vocab, .ctx_max = m->ctx,
	                    .max_active = o->parallel, .batch = o->batch,
	                    .io_timeout_ms = o->io_timeout_ms};
	int rc;

	/* devices end sessions idle past their --session-timeout (300 s by
	 * default): a long-lived coordinator shows it is there */
	if (m->cluster != NULL || m->remote != NULL)
		e.keepalive_ms = o->keepalive_ms;
	if (m->cluster != NULL) {
		e.recover = mu__llm_cluster_recover;
		e.recover_ud = m->cluster;
		e.max_recoveries = 3;
		e.replay_bytes = o->replay_bytes;
	}
	if ((rc = make_links(m, o)) != 0)
		return rc;
	return mu__eng_new(m->links, m->nlinks, &e, &m->eng);
}

int mu__serve_model_open(mu__serve_model_t *m, const mu_serve_opts_t *o, char *err, size_t el)
{
	char why[1024] = "";
	int rc;

	memset(m, 0, sizeof(*m));
	if ((rc = mu__llm_src_open(o->model, o->tokenizer, &m->src, why, sizeof(why))) != 0) {
		snprintf(err, el, "cannot open the model: %s", why);
		return rc;
	}
	m->have_src = 1;
	if ((rc = m->src.tokenizer(&m->src, &m->tok, why, sizeof(why))) != 0) {
		snprintf(err, el, "cannot load the tokenizer: %s", why);
		mu__serve_model_close(m);
		return rc;
	}
	m->ctx = o->ctx > 0 ? o->ctx : m->src.hp.ctx < DEFAULT_CTX ? m->src.hp.ctx : DEFAULT_CTX;
	if (o->stages != NULL)
		rc = open_remote(m, o, err, el);
	else if (o->cluster != NULL)
		rc = open_cluster(m, o, err, el);
	else
		rc = open_local(m, o, err, el);
	if (rc == 0 && (rc = start_engine(m, o)) != 0)
		snprintf(err, el, "cannot start the engine: %s", mu_strerror(rc));
	if (rc != 0)
		mu__serve_model_close(m);
	return rc;
}

void mu__serve_model_close(mu__serve_model_t *m)
{
	mu__eng_free(m->eng);
	if (m->remote == NULL && m->cluster == NULL && m->links != NULL)
		mu__link_local_free(&m->links[0]);
	mu__free(m->links);
	mu__dec_free(m->dec);
	mu__llm_coord_free(m->remote);
	mu__llm_cluster_close(m->cluster);
	mu__tok_free(m->tok);
	if (m->have_src)
		mu__llm_src_free(&m->src);
	memset(m, 0, sizeof(*m));
}
