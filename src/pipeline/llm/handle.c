/* SPDX-License-Identifier: MIT */
/*
 * Opening a decoder LLM where its layers run (include/muster/llm.h,
 * pipeline/llm/handle_int.h): the checkpoint and its tokenizer here, and
 * the layers on a decoder in this process, on `muster stage` servers
 * (the coordinator) or on devices from a tracker (the cluster), each
 * stage then a link of the one engine that generates.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/error_int.h"
#include "core/opts_int.h"
#include "llm/arch_int.h"
#include "pipeline/llm/handle_int.h"

#define DEFAULT_CTX 4096
#define STAGE_RETRY_MS 1000 /* a lost stage is tried again at least this often */

static void llm_defaults(mu_llm_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->struct_size = sizeof(*o);
	o->max_sequences = 1;
	o->chunk = 256;
	o->batch = 1;
	o->io_timeout_ms = 60000;
	o->keepalive_ms = 60000;
	o->replay_bytes = (uint64_t)256 << 20;
	o->kv_type = MU_LLM_KV_F16;
}

void mu_llm_opts_init_size(mu_llm_opts_t *o, size_t size)
{
	mu_llm_opts_t d;

	llm_defaults(&d);
	mu__opts_fill(o, size, &d, sizeof(d));
}

static int check_opts(const mu_llm_opts_t *o, char *err, size_t el)
{
	const char *bad = NULL;

	if (o->threads < 0 || o->threads > 1024)
		bad = "threads must be 0 (the machine's cores) to 1024";
	else if (o->max_sequences < 1 || o->max_sequences > 4096)
		bad = "max_sequences must be 1 to 4096";
	else if (o->ctx < 0 || o->chunk < 1 || o->chunk > 8192)
		bad = "ctx must be 0 or more, chunk 1 to 8192";
	else if (o->io_timeout_ms < 1 || o->keepalive_ms < 0)
		bad = "io_timeout_ms must be positive, keepalive_ms 0 or more";
	else if (o->stages != NULL && (o->nstages < 1 || o->nstages > 1024))
		bad = "give 1 to 1024 stages";
	else if (o->stages != NULL && o->cluster != NULL)
		bad = "stages and a cluster of devices exclude each other";
	else if (o->device_sequences < 0)
		bad = "device_sequences must be 0 or more";
	else if (mu_llm_kv_type_name(o->kv_type) == NULL)
		bad = "kv_type must be a mu_llm_kv_type_t";
	return bad != NULL ? mu__why(err, el, MU_EARG, "%s", bad) : 0;
}

/* The caller's coordinator options (NULL: the defaults) as the internal
 * coordinator takes them. */
static int coord_opts(const mu_coord_opts_t *uo, mu__llm_coord_opts_t *o, char *err, size_t el)
{
	mu_coord_opts_t c;

	mu_coord_opts_init(&c);
	if (uo != NULL && mu__opts_read(&c, sizeof(c), uo) != 0)
		return mu__why(err, el, MU_EARG, "the coordinator's options were not set up by "
		               "mu_coord_opts_init");
	mu__llm_coord_opts_init(o);
	o->connect_timeout_ms = c.connect_timeout_ms;
	o->io_timeout_ms = c.io_timeout_ms;
	o->max_frame_bytes = c.max_frame_bytes;
	o->sec = c.sec;
	return 0;
}

static int open_local(mu_llm_t *l, char *err, size_t el)
{
	mu__dec_opts_t o = {l->threads, l->o.max_sequences, UINT64_MAX, l->o.chunk, 0, 0,
	                    l->o.kv_type};
	const mu__llm_hp_t *h = &l->src.hp;
	char why[1024] = "";
	int rc;

	rc = mu__dec_new(&l->src, 0, h->n_layers, &o, &l->dec, why, sizeof(why));
	if (rc != 0)
		return mu__why(err, el, rc, "cannot set up the model: %s", why);
	/* the weights resident before anything is timed, as a stage does */
	mu__llm_src_touch(&l->src, 0, h->n_layers);
	if ((l->links = mu__calloc(1, sizeof(*l->links))) == NULL ||
	    mu__link_local(l->dec, l->o.chunk, l->o.max_sequences, &l->links[0]) != 0)
		return mu__why(err, el, MU_ENOMEM, "out of memory");
	l->nlinks = 1;
	snprintf(l->where, sizeof(l->where), "this process, %d thread%s, kernels %s", l->threads,
	         l->threads == 1 ? "" : "s", mu__kern_isa());
	return 0;
}

/* The engine's links over the stages of co. */
static int coord_links(mu_llm_t *l, mu__llm_coord_t *co, char *err, size_t el)
{
	int n = mu__llm_coord_stages(co);

	if ((l->links = mu__calloc((size_t)n, sizeof(*l->links))) == NULL)
		return mu__why(err, el, MU_ENOMEM, "out of memory");
	for (int i = 0; i < n; i++)
		mu__llm_coord_link(co, i, l->o.chunk, &l->links[i]);
	l->nlinks = n;
	return 0;
}

static int open_stages(mu_llm_t *l, char *err, size_t el)
{
	mu__llm_coord_opts_t o;
	char why[1024] = "";
	int rc, n = l->o.nstages, computed;

	if ((rc = coord_opts(l->o.coord, &o, err, el)) != 0)
		return rc;
	o.kv_type = l->o.kv_type;
	/* each stage must hold the weights of our checkpoint: their digests
	 * come from its tensors' hashes (kept beside it after the first run) */
	if ((l->sha = mu__calloc(l->src.nt + 1, sizeof(*l->sha))) == NULL)
		return mu__why(err, el, MU_ENOMEM, "out of memory");
	rc = mu__llm_src_hashes(&l->src, -1, -1, l->sha, &computed, why, sizeof(why));
	if (rc != 0)
		return mu__why(err, el, rc, "cannot hash the checkpoint's weights: %s", why);
	o.src = &l->src;
	o.sha = (const char (*)[65])l->sha;
	rc = mu__llm_coord_connect(l->o.stages, n, &o, &l->coord, why, sizeof(why));
	if (rc != 0)
		return mu__why(err, el, rc, "cannot use the stages: %s", why);
	if (mu__llm_coord_vocab(l->coord) != l->src.hp.vocab)
		return mu__why(err, el, MU_EARG, "the stages serve another model: their model has a "
		               "vocabulary of %d, the checkpoint's %d", mu__llm_coord_vocab(l->coord),
		               l->src.hp.vocab);
	if (l->ctx > mu__llm_coord_ctx(l->coord))
		l->ctx = mu__llm_coord_ctx(l->coord);
	snprintf(l->where, sizeof(l->where), "%d stage%s", n, n == 1 ? "" : "s");
	return coord_links(l, l->coord, err, el);
}

static int open_devices(mu_llm_t *l, char *err, size_t el)
{
	mu__llm_cluster_opts_t lo;
	mu_cluster_opts_t u;
	char why[1024] = "";
	int rc, n;

	mu_cluster_opts_init(&u);
	mu__llm_cluster_opts_init(&lo);
	if (mu__opts_read(&u, sizeof(u), l->o.cluster) != 0)
		return mu__why(err, el, MU_EARG, "the cluster's options were not set up by "
		               "mu_cluster_opts_init");
	if (u.key == NULL || u.devices < 1 || u.devices > 64 || u.max_replacements < 0)
		return mu__why(err, el, MU_EARG, "a cluster needs a key, and 1 to 64 devices");
	if ((rc = coord_opts(u.coord, &lo.coord, err, el)) != 0)
		return rc;
	lo.coord.kv_type = l->o.kv_type; /* the devices' sequences, and the plan */
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
	lo.max_seqs = l->o.device_sequences > 0 ? l->o.device_sequences : l->o.max_sequences;
	lo.ctx = l->ctx;
	lo.max_chunk = l->o.chunk;
	rc = mu__llm_cluster_start(&l->src, &lo, &l->cluster, why, sizeof(why));
	if (rc != 0)
		return mu__why(err, el, rc, "cannot place the model on the devices: %s", why);
	l->max_recoveries = u.max_replacements;
	n = mu__llm_cluster_stages(l->cluster);
	snprintf(l->where, sizeof(l->where), "%d device%s from the tracker", n, n == 1 ? "" : "s");
	return coord_links(l, mu__llm_cluster_coord(l->cluster), err, el);
}

static int start_engine(mu_llm_t *l, char *err, size_t el)
{
	mu__eng_opts_t o = {.dim = l->src.hp.dim, .vocab = l->src.hp.vocab, .ctx_max = l->ctx,
	                    .max_active = l->o.max_sequences, .batch = l->o.batch,
	                    .io_timeout_ms = l->o.io_timeout_ms};
	int rc;

	/* devices end sessions idle past their --session-timeout (300 s by
	 * default): a long-lived handle shows it is there */
	if (l->dec == NULL)
		o.keepalive_ms = l->o.keepalive_ms;
	if (l->cluster != NULL) {
		o.recover = mu__llm_cluster_recover;
		o.recover_ud = l->cluster;
		o.max_recoveries = l->max_recoveries;
		o.replay_bytes = l->o.replay_bytes;
	} else if (l->coord != NULL) {
		/* a `muster stage` comes back where it was (restarted, or only
		 * its connection broke): reconnect while it is down, rebuild */
		o.recover = mu__llm_coord_recover;
		o.recover_ud = l->coord;
		o.retry_ms = STAGE_RETRY_MS;
		o.replay_bytes = l->o.replay_bytes;
	}
	if ((rc = mu__eng_new(l->links, l->nlinks, &o, &l->eng)) != 0)
		return mu__why(err, el, rc, "cannot start the engine: %s", mu_strerror(rc));
	return 0;
}

static int open_all(mu_llm_t *l, const char *path, char *err, size_t el)
{
	const mu__llm_hp_t *h = &l->src.hp;
	char why[1024] = "";
	long cores;
	int rc;

	if ((rc = mu__llm_src_open(path, l->o.tokenizer, &l->src, why, sizeof(why))) != 0)
		return mu__why(err, el, rc, "cannot open the model: %s", why);
	l->have_src = 1;
	if ((rc = l->src.tokenizer(&l->src, &l->tok.t, why, sizeof(why))) != 0)
		return mu__why(err, el, rc, "cannot load the tokenizer: %s", why);
	l->ctx = l->o.ctx > 0 ? l->o.ctx : h->ctx < DEFAULT_CTX ? h->ctx : DEFAULT_CTX;
	/* what every stage would refuse at its first sequence: said before
	 * any device is asked for, or any weight streamed to one */
	if (l->ctx > h->ctx)
		return mu__why(err, el, MU_ETOOBIG, "a context of %d positions: the model takes 1 "
		               "to %d", l->ctx, h->ctx);
	if ((rc = mu__kv_check(l->o.kv_type, h, why, sizeof(why))) != 0)
		return mu__why(err, el, rc, "cannot keep the KV cache: %s", why);
	cores = sysconf(_SC_NPROCESSORS_ONLN);
	l->threads = l->o.threads > 0 ? l->o.threads : cores > 0 ? (int)cores : 1;
	rc = l->o.stages != NULL ? open_stages(l, err, el)
	   : l->o.cluster != NULL ? open_devices(l, err, el) : open_local(l, err, el);
	return rc != 0 ? rc : start_engine(l, err, el);
}

int mu_llm_open(const char *path, const mu_llm_opts_t *uo, mu_llm_t **out, char *err, size_t el)
{
	mu_llm_t *l;
	int rc;

	*out = NULL;
	if (path == NULL)
		return mu__why(err, el, MU_EARG, "no checkpoint given");
	if ((l = mu__calloc(1, sizeof(*l))) == NULL)
		return mu__why(err, el, MU_ENOMEM, "out of memory");
	llm_defaults(&l->o);
	if (uo != NULL && mu__opts_read(&l->o, sizeof(l->o), uo) != 0) {
		mu__free(l);
		return mu__why(err, el, MU_EARG, "the options were not set up by mu_llm_opts_init, "
		               "or set fields this library does not have");
	}
	if ((rc = check_opts(&l->o, err, el)) != 0) {
		mu__free(l);
		return rc;
	}
	if (uv_mutex_init(&l->lock) != 0) {
		mu__free(l);
		return mu__why(err, el, MU_ENOMEM, "out of memory");
	}
	if (uv_cond_init(&l->done) != 0) {
		uv_mutex_destroy(&l->lock);
		mu__free(l);
		return mu__why(err, el, MU_ENOMEM, "out of memory");
	}
	if ((rc = open_all(l, path, err, el)) != 0) {
		mu_llm_free(l);
		return rc;
	}
	l->o.stages = NULL; /* the caller's, read during open */
	l->o.coord = NULL;
	l->o.cluster = NULL;
	*out = l;
	return 0;
}

void mu_llm_free(mu_llm_t *l)
{
	if (l == NULL)
		return;
	mu__eng_free(l->eng); /* first: its thread drives the links */
	if (l->dec != NULL && l->links != NULL)
		mu__link_local_free(&l->links[0]);
	mu__free(l->links);
	mu__dec_free(l->dec);
	mu__llm_coord_free(l->coord);
	mu__free(l->sha); /* after the coordinator, which reads it */
	mu__llm_cluster_close(l->cluster);
	mu__tok_free(l->tok.t);
	if (l->have_src)
		mu__llm_src_free(&l->src);
	uv_cond_destroy(&l->done);
	uv_mutex_destroy(&l->lock);
	mu__free(l);
}

const mu_tokenizer_t *mu_llm_tokenizer(const mu_llm_t *l)
{
	return &l->tok;
}

mu__eng_t *mu__llm_engine(mu_llm_t *l)
{
	return l->eng;
}

const mu__tok_t *mu__llm_tok(const mu_llm_t *l)
{
	return l->tok.t;
}

void mu_llm_info(const mu_llm_t *l, mu_llm_info_t *out)
{
	const mu__llm_hp_t *h = &l->src.hp;

	memset(out, 0, sizeof(*out));
	out->arch = h->arch;
	out->format = l->src.fmt == MU__FMT_HF ? MU_LLM_HF
	            : l->src.fmt == MU__FMT_GGUF ? MU_LLM_GGUF : MU_LLM_LLAMA2C;
	out->layers = h->n_layers;
	out->dim = h->dim;
	out->vocab = h->vocab;
	out->trained_ctx = h->ctx;
	out->ctx = l->ctx;
	out->weight_bytes = mu__llm_src_bytes(&l->src, 0, h->n_layers);
	out->stages = l->nlinks;
	out->where = l->where;
}

int mu_llm_stage_info(const mu_llm_t *l, int i, mu_llm_stage_info_t *out)
{
	mu__llm_coord_t *co = l->cluster != NULL ? mu__llm_cluster_coord(l->cluster) : l->coord;
	mu__eng_stage_stats_t es;

	if (i < 0 || i >= l->nlinks)
		return MU_EARG;
	memset(out, 0, sizeof(*out));
	out->last = l->src.hp.n_layers;
	if (co != NULL) {
		mu__llm_coord_stage_t cs;

		mu__llm_coord_stage(co, i, &cs);
		out->address = cs.addr;
		out->first = cs.first;
		out->last = cs.last;
	}
	if (l->cluster != NULL) {
		mu__llm_cluster_stage_t cs;

		mu__llm_cluster_stage(l->cluster, i, &cs);
		out->replaced = cs.replaced;
	}
	mu__eng_stage_stats(l->eng, i, &es);
	out->batches = es.batches;
	out->rows = es.rows;
	out->busy_ms = es.busy_ms;
	return 0;
}

void mu_llm_recovery(const mu_llm_t *l, mu_llm_recovery_t *out)
{
	mu__eng_stats_t st;

	mu__eng_stats(l->eng, &st);
	out->recoveries = st.recoveries;
	out->recovery_ms = st.recovery_ms;
	out->replayed = st.replayed;
	out->kept_bytes = st.kept_bytes;
}

int mu_llm_architectures(int hf, char *out, size_t n)
{
	return mu__arch_list(hf ? MU__ARCH_LIST_HF : MU__ARCH_LIST_NAME, out, n);
}

/* the public numbers are the table's */
_Static_assert((int)MU_LLM_KV_F32 == (int)MU__KV_F32 && (int)MU_LLM_KV_F16 == (int)MU__KV_F16 &&
                   (int)MU_LLM_KV_Q8_0 == (int)MU__KV_Q8_0,
               "mu_llm_kv_type_t follows mu__kv_t");

const char *mu_llm_kv_type_name(int t)
{
	return (unsigned)t < MU__KV_COUNT ? mu__kv_types[t].name : NULL;
}

int mu_llm_kv_type_parse(const char *name, int *t, char *err, size_t errlen)
{
	return mu__kv_by_name(name, t, err, errlen);
}
