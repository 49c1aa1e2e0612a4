/* SPDX-License-Identifier: MIT */
/*
 * The main job for a decoder LLM, coordinator side: the lifecycle is
 * pipeline/cluster.c's (devices from the tracker, the plan to their
 * budgets, each stage assigned and loaded, a lost device replaced); this
 * file is the LLM kind's part of it: the layers cut so each device's
 * share fits its budget with the KV cache its sequences will need
 * (llm/plan.c), a stage's ASSIGN (its layers, and its tensors' SHA-256
 * when they are streamed), the tensors the device's cache lacks streamed
 * one by one, and the coordinator the engine generates over (which
 * replays a replaced stage's KV caches; pipeline/llm/engine.c).
 */
#include <stdio.h>
#include <string.h>

#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/json_int.h"
#include "core/proc_int.h"
#include "core/progress_int.h"
#include "core/time_int.h"
#include "pipeline/cluster_int.h"
#include "pipeline/llm/cluster_int.h"

#define CHUNK ((size_t)16 << 20) /* tensor bytes per TENSOR message */

/* A stage's layers, and what its last loading streamed. */
typedef struct {
	int first, last;
	uint64_t sent, cached;  /* bytes streamed; bytes its cache already had */
} stage_t;

struct mu__llm_cluster_s {
	mu__cluster_t base;     /* the lifecycle: devices, stages placed */
	mu__llm_cluster_opts_t o;
	const mu__llm_src_t *src;
	char (*sha)[65];        /* per tensor of src, once needed */
	mu__llm_coord_t *coord;
	stage_t *p;             /* base.n of them */
};

void mu__llm_cluster_opts_init(mu__llm_cluster_opts_t *o)
{
	memset(o, 0, sizeof(*o));
	o->pool.tracker_host = "127.0.0.1";
	o->pool.tracker_port = 9190;
	o->pool.request_timeout_ms = 30000;
	o->pool.io_timeout_ms = 60000;
	o->pool.max_frame_bytes = (uint64_t)1 << 30;
	o->devices = 1;
	o->max_seqs = 4;
	o->ctx = 2048;
	o->max_chunk = 256;
	o->max_replacements = 3;
}

static uint64_t kv_bytes(const mu__llm_cluster_t *c, int a, int b)
{
	return mu__llm_kv_bytes(c->src, a, b, c->o.ctx, c->o.max_seqs, c->o.coord.kv_type);
}

/* ---- the LLM kind's steps of the lifecycle ---- */

static int hashes(mu__llm_cluster_t *c, char *err, size_t el)
{
	int computed = 0, rc;
	double t0 = mu__clock_ms();

	if (c->sha != NULL)
		return 0;
	if ((c->sha = mu__calloc(c->src->nt, sizeof(*c->sha))) == NULL)
		return MU_ENOMEM;
	rc = mu__llm_src_hashes(c->src, -1, -1, c->sha, &computed, err, el);
	if (rc == 0 && computed)
		mu__devpool_say(&c->base.pool, "  hashed the checkpoint's %zu tensors (SHA-256) in %.1f s, "
		                "kept beside it for next time", c->src->nt,
		                (mu__clock_ms() - t0) / 1e3);
	if (rc != 0) {
		mu__free(c->sha);
		c->sha = NULL;
	}
	return rc;
}

/* ASSIGN's body for stage i over layers [a, b). */
static char *assign_body(mu__llm_cluster_t *c, int i, int n, int a, int b, int stream)
{
	cJSON *o = cJSON_CreateObject(), *t;
	char hex[20], *s = NULL;
	mu__buf_t buf;

	snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)c->base.o.digest);
	cJSON_AddStringToObject(o, "kind", "llm");
	cJSON_AddNumberToObject(o, "stage", i);
	cJSON_AddNumberToObject(o, "of", n);
	cJSON_AddNumberToObject(o, "first", a);
	cJSON_AddNumberToObject(o, "last", b);
	cJSON_AddStringToObject(o, "digest", hex);
	cJSON_AddNumberToObject(o, "param_bytes", (double)mu__llm_src_bytes(c->src, a, b));
	cJSON_AddNumberToObject(o, "kv_bytes", (double)kv_bytes(c, a, b));
	cJSON_AddNumberToObject(o, "max_sequences", c->o.max_seqs);
	cJSON_AddNumberToObject(o, "max_chunk", c->o.max_chunk);
	cJSON_AddStringToObject(o, "weights", stream ? "stream" : "local");
	if (stream) {
		mu__llm_hp_to_json(&c->src->hp, cJSON_AddObjectToObject(o, "config"));
		t = cJSON_AddArrayToObject(o, "tensors");
		for (size_t k = 0; k < c->src->nt; k++) {
			const mu__llm_tensor_t *x = &c->src->t[k];
			cJSON *e;

			if (!mu__llm_tensor_in(c->src, k, a, b))
				continue;
			e = cJSON_CreateObject();
			cJSON_AddStringToObject(e, "name", x->name);
			cJSON_AddStringToObject(e, "type", mu__wtype_name(x->m.type));
			cJSON_AddNumberToObject(e, "rows", (double)x->m.rows);
			cJSON_AddNumberToObject(e, "cols", (double)x->m.cols);
			cJSON_AddStringToObject(e, "sha256", c->sha[k]);
			cJSON_AddItemToArray(t, e);
		}
	}
	mu__buf_init(&buf, MU_MSG_MAX_TEXT);
	if (mu__json_dump(&buf, o) == 0 && mu__buf_appendc(&buf, '\0') == 0)
		s = mu__buf_take(&buf, NULL);
	mu__buf_free(&buf);
	cJSON_Delete(o);
	return s;
}


/* Send tensor k in TENSOR messages of at most CHUNK bytes. */
static int send_tensor(mu__llm_cluster_t *c, mu__chan_t *ch, size_t k, uint64_t *sent,
                       mu__progress_t *pr)
{
	const mu__llm_tensor_t *x = &c->src->t[k];
	const unsigned char *data = x->m.data;
	char head[256];
	uint64_t off;
	int rc = 0;
	char *buf = mu__malloc(CHUNK + sizeof(head));

	if (buf == NULL)
		return MU_ENOMEM;
	for (off = 0; rc == 0 && off < x->bytes; off += CHUNK) {
		size_t n = x->bytes - off < CHUNK ? (size_t)(x->bytes - off) : CHUNK;
		int hn = snprintf(head, sizeof(head), "{\"name\": \"%s\", \"offset\": %llu}", x->name,
		                  (unsigned long long)off);
		mu__msg_t m = {MU_MSG_TENSOR, 0, 0, 0, 0, (uint32_t)hn};

		memcpy(buf, head, (size_t)hn);
		memcpy(buf + hn, data + off, n);
		rc = mu__msg_send(ch, &m, buf, (size_t)hn + n);
		*sent += n;
		if (rc == 0)
			mu__progress_bytes(pr, *sent);
	}
	mu__free(buf);
	mu__pages_release(x->m.data, x->bytes);
	return rc;
}

/* READY's "need": the names to send (each one of the stage's); each is sent. */
static int stream(mu__llm_cluster_t *c, mu__chan_t *ch, const char *ready, stage_t *pl,
                  const char *addr, char *err, size_t el)
{
	cJSON *r = NULL;
	const cJSON *need, *it;
	double cached = 0;
	uint64_t total = 0;
	mu__progress_t pr;
	int rc = mu__json_parse(ready, strlen(ready), &r);

	need = cJSON_GetObjectItemCaseSensitive(r, "need");
	if (rc != 0 || !cJSON_IsArray(need) ||
	    mu__json_double(cJSON_GetObjectItemCaseSensitive(r, "cached_bytes"), 0, 1e18, &cached)) {
		cJSON_Delete(r);
		snprintf(err, el, "device %s: its READY does not say which tensors it needs", addr);
		return MU_EPROTO;
	}
	pl->cached = (uint64_t)cached;
	cJSON_ArrayForEach(it, need) /* the total, for the progress line */
		for (size_t k = 0; cJSON_IsString(it) && k < c->src->nt; k++)
			if (strcmp(c->src->t[k].name, it->valuestring) == 0)
				total += c->src->t[k].bytes;
	mu__progress_start(&pr, total, "weights -> %s", addr);
	cJSON_ArrayForEach(it, need) {
		size_t k;

		for (k = 0; cJSON_IsString(it) && k < c->src->nt; k++)
			if (strcmp(c->src->t[k].name, it->valuestring) == 0)
				break;
		if (!cJSON_IsString(it) || k == c->src->nt ||
		    !mu__llm_tensor_in(c->src, k, pl->first, pl->last)) {
			snprintf(err, el, "device %s asked for a tensor that is not its stage's", addr);
			rc = MU_EPROTO;
			break;
		}
		if ((rc = send_tensor(c, ch, k, &pl->sent, &pr)) != 0) {
			snprintf(err, el, "device %s: sending %s: %s", addr, c->src->t[k].name,
			         mu_strerror(rc));
			break;
		}
	}
	mu__progress_end(&pr);
	cJSON_Delete(r);
	return rc;
}

/* The layers over the devices (device order[j] ends at cut[j]); those
 * that got some, in pipeline order, are the stages. */
static int kind_plan(void *ud, const uint64_t *budget, int nd, int *device, int *n, char *err,
                     size_t el)
{
	mu__llm_cluster_t *c = ud;
	int *order = mu__calloc((size_t)nd, sizeof(*order));
	int *cut = mu__calloc((size_t)nd, sizeof(*cut)), L = c->src->hp.n_layers, rc, k = 0;

	rc = order == NULL || cut == NULL ? MU_ENOMEM : 0;
	if (rc == 0)
		rc = mu__llm_plan(c->src, c->o.ctx, c->o.max_seqs, c->o.coord.kv_type, budget, nd,
		                  order, cut, err, el);
	if (rc == 0 && (c->p = mu__calloc((size_t)nd, sizeof(*c->p))) == NULL)
		rc = MU_ENOMEM;
	for (int j = 0, prev = 0; rc == 0 && j < nd; prev = cut[j], j++)
		if (cut[j] > prev) {
			c->p[k].first = prev;
			c->p[k].last = cut[j];
			device[k++] = order[j];
		}
	mu__free(order);
	mu__free(cut);
	*n = k;
	/* the hashes stream the weights, and tell a device's own copy, or a
	 * replacement's, from other weights of the same shape */
	if (rc == 0 && (rc = hashes(c, err, el)) == 0) {
		c->o.coord.src = c->src;
		c->o.coord.sha = (const char (*)[65])c->sha;
		rc = mu__llm_coord_new(k, &c->o.coord, &c->coord);
	}
	if (rc == 0)
		mu__devpool_say(&c->base.pool, "the model (%d layers, %.1f MiB of weights) is cut into %d "
		                "stage%s, each with a KV cache for %d sequence%s of %d positions:", L,
		                (double)mu__llm_src_bytes(c->src, 0, L) / 1048576.0, k, k == 1 ? "" : "s",
		                c->o.max_seqs, c->o.max_seqs == 1 ? "" : "s", c->o.ctx);
	return rc;
}

static uint64_t kind_need(void *ud, int i)
{
	mu__llm_cluster_t *c = ud;

	return mu__llm_src_bytes(c->src, c->p[i].first, c->p[i].last) +
	       kv_bytes(c, c->p[i].first, c->p[i].last);
}

static void kind_range(void *ud, int i, char *buf, size_t n)
{
	mu__llm_cluster_t *c = ud;

	snprintf(buf, n, "layers %d..%d", c->p[i].first, c->p[i].last - 1);
}

static int kind_assign(void *ud, int i, int stream, char **body, char *err, size_t el)
{
	mu__llm_cluster_t *c = ud;
	int rc = stream ? hashes(c, err, el) : 0;

	c->p[i].sent = c->p[i].cached = 0;
	if (rc == 0 && (*body = assign_body(c, i, c->base.n, c->p[i].first, c->p[i].last,
	                                    stream)) == NULL)
		rc = MU_ENOMEM;
	return rc;
}

static int kind_stream(void *ud, int i, mu__chan_t *ch, const char *ready, const char *addr,
                       char *err, size_t el)
{
	mu__llm_cluster_t *c = ud;

	return stream(c, ch, ready, &c->p[i], addr, err, el);
}

static int kind_set(void *ud, int i, mu_session_t *sess, const char *addr, const char *desc,
                    char *err, size_t el)
{
	return mu__llm_coord_set(((mu__llm_cluster_t *)ud)->coord, i, sess, addr, desc, err, el);
}

static int kind_check(void *ud, char *err, size_t el)
{
	mu__llm_cluster_t *c = ud;

	for (int i = 0; i < c->base.n; i++)
		mu__llm_coord_streamed(c->coord, i, c->base.placed[i].streamed);
	return mu__llm_coord_check(c->coord, err, el);
}

static void kind_placed(void *ud, int i, const char *addr, int streamed, double ms)
{
	mu__llm_cluster_t *c = ud;
	const stage_t *pl = &c->p[i];

	mu__devpool_say(&c->base.pool, "  stage %d: layers %d..%d%s%s (%.1f MiB + %.1f MiB KV) -> %s, "
	                "%s in %.0f ms", i, pl->first, pl->last - 1, pl->first == 0 ? " + embedding" : "",
	                pl->last == c->src->hp.n_layers ? " + head" : "",
	                (double)mu__llm_src_bytes(c->src, pl->first, pl->last) / 1048576.0,
	                (double)kv_bytes(c, pl->first, pl->last) / 1048576.0, addr,
	                !streamed ? "weights from its own copy" : pl->sent == 0
	                        ? "weights all in its cache (0 bytes streamed)" : "weights streamed", ms);
	if (streamed && pl->sent > 0)
		mu__devpool_say(&c->base.pool, "    streamed %llu bytes, %llu already in its cache",
		                (unsigned long long)pl->sent, (unsigned long long)pl->cached);
}

static const mu__cluster_kind_t llm_kind = {
	"checkpoint", kind_plan, kind_need, kind_range, kind_assign, kind_stream, kind_set,
	kind_check, kind_placed,
};

/* ---- the cluster ---- */

int mu__llm_cluster_start(const mu__llm_src_t *src, const mu__llm_cluster_opts_t *o,
                          mu__llm_cluster_t **out, char *err, size_t el)
{
	mu__cluster_opts_t lo = {o->pool, o->devices, o->weights, mu__llm_digest(src),
	                         o->max_replacements};
	mu__llm_cluster_t *c;
	int rc;

	*out = NULL;
	if (o->devices < 1 || o->devices > 64 || o->pool.key == NULL || o->max_seqs < 1 ||
	    o->ctx < 1 || o->max_chunk < 1) {
		snprintf(err, el, "an LLM cluster needs a tracker, a key, 1 to 64 devices, and positive "
		         "sequences, context and chunk");
		return MU_EARG;
	}
	if ((c = mu__calloc(1, sizeof(*c))) == NULL)
		return MU_ENOMEM;
	c->o = *o;
	c->src = src;
	if ((rc = mu__cluster_start(&c->base, &llm_kind, c, &lo, err, el)) != 0) {
		mu__llm_cluster_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

void mu__llm_cluster_close(mu__llm_cluster_t *c)
{
	if (c == NULL)
		return;
	mu__llm_coord_free(c->coord); /* CLOSE to each: the devices register again */
	mu__cluster_free(&c->base);
	mu__free(c->p);
	mu__free(c->sha);
	mu__free(c);
}

int mu__llm_cluster_recover(void *ud, int k, char *why, size_t wl)
{
	return mu__cluster_replace(&((mu__llm_cluster_t *)ud)->base, k, why, wl);
}

int mu__llm_cluster_stages(const mu__llm_cluster_t *c)
{
	return c->base.n;
}

mu__llm_coord_t *mu__llm_cluster_coord(mu__llm_cluster_t *c)
{
	return c->coord;
}

void mu__llm_cluster_stage(const mu__llm_cluster_t *c, int i, mu__llm_cluster_stage_t *out)
{
	const mu__placed_t *b = &c->base.placed[i];
	const stage_t *p = &c->p[i];

	out->addr = b->addr;
	out->budget = b->budget;
	out->first = p->first;
	out->last = p->last;
	out->weight_bytes = mu__llm_src_bytes(c->src, p->first, p->last);
	out->kv_bytes = kv_bytes(c, p->first, p->last);
	out->streamed = b->streamed;
	out->sent = p->sent;
	out->cached = p->cached;
	out->replaced = b->replaced;
}

int mu__llm_cluster_replacements(const mu__llm_cluster_t *c)
{
	return c->base.replacements;
}
