/* SPDX-License-Identifier: MIT */
/*
 * The main job for a decoder LLM, coordinator side: devices from the
 * tracker (devices.c), the layers cut so each device's share fits its
 * memory budget with the KV cache its sequences will need (llm/plan.c), each stage
 * loaded from the device's own copy of the checkpoint or streamed to it
 * tensor by tensor with SHA-256 (a device's cache keeps what it already
 * has), and a lost device replaced by another with the same layers (the
 * engine then replays its KV caches; pipeline/llm/engine.c).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/json_int.h"
#include "core/proc_int.h"
#include "core/progress_int.h"
#include "core/time_int.h"
#include "pipeline/llm/cluster_int.h"

#define CHUNK ((size_t)16 << 20) /* tensor bytes per TENSOR message */

typedef struct {
	char addr[300];
	uint64_t budget;
	int first, last;
	int streamed;           /* weights sent (else the device's own copy) */
	uint64_t sent, cached;  /* bytes streamed; bytes its cache already had */
	int replaced;
} placed_t;

struct mu__llm_cluster_s {
	mu__llm_cluster_opts_t o;
	const mu__llm_src_t *src;
	uint64_t digest;
	char (*sha)[65];        /* per tensor of src, once needed */
	mu__devpool_t pool;
	mu__llm_coord_t *coord;
	placed_t *p;
	int n;
	int replacements;
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
	return mu__llm_kv_bytes(c->src, a, b, c->o.ctx, c->o.max_seqs);
}

static uint64_t need(const mu__llm_cluster_t *c, int a, int b)
{
	return mu__llm_src_bytes(c->src, a, b) + kv_bytes(c, a, b);
}

/* ---- a stage on a device ---- */

static int hashes(mu__llm_cluster_t *c, char *err, size_t el)
{
	int computed = 0, rc;
	double t0 = mu__clock_ms();

	if (c->sha != NULL)
		return 0;
	if ((c->sha = mu__calloc(c->src->nt, sizeof(*c->sha))) == NULL)
		return MU_ENOMEM;
	rc = mu__llm_src_hashes(c->src, c->sha, &computed, err, el);
	if (rc == 0 && computed)
		mu__devpool_say(&c->pool, "  hashed the checkpoint's %zu tensors (SHA-256) in %.1f s, "
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

	snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)c->digest);
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

/* READY's "need": the names to send; each is sent. */
static int stream(mu__llm_cluster_t *c, mu__chan_t *ch, const char *ready, placed_t *pl,
                  char *err, size_t el)
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
		snprintf(err, el, "device %s: its READY does not say which tensors it needs", pl->addr);
		return MU_EPROTO;
	}
	pl->cached = (uint64_t)cached;
	cJSON_ArrayForEach(it, need) /* the total, for the progress line */
		for (size_t k = 0; cJSON_IsString(it) && k < c->src->nt; k++)
			if (strcmp(c->src->t[k].name, it->valuestring) == 0)
				total += c->src->t[k].bytes;
	mu__progress_start(&pr, total, "weights -> %s", pl->addr);
	cJSON_ArrayForEach(it, need) {
		size_t k;

		for (k = 0; cJSON_IsString(it) && k < c->src->nt; k++)
			if (strcmp(c->src->t[k].name, it->valuestring) == 0)
				break;
		if (!cJSON_IsString(it) || k == c->src->nt ||
		    !mu__llm_tensor_in(c->src, k, pl->first, pl->last)) {
			snprintf(err, el, "device %s asked for a tensor that is not its stage's", pl->addr);
			rc = MU_EPROTO;
			break;
		}
		if ((rc = send_tensor(c, ch, k, &pl->sent, &pr)) != 0) {
			snprintf(err, el, "device %s: sending %s: %s", pl->addr, c->src->t[k].name,
			         mu_strerror(rc));
			break;
		}
	}
	mu__progress_end(&pr);
	cJSON_Delete(r);
	return rc;
}

/* Give device d stage i (c->p[i]'s layers); its session moves to the
 * coordinator. */
static int assign(mu__llm_cluster_t *c, int i, mu__device_t *d, char *err, size_t el)
{
	placed_t *pl = &c->p[i];
	int local = c->o.weights != MU_WEIGHTS_STREAM && mu__device_holds(d, c->digest);
	mu__msg_t m = {MU_MSG_ASSIGN, 0, 2, 0, 0, 0};
	char *body = NULL, *reply = NULL;
	double t0 = mu__clock_ms();
	mu__chan_t ch;
	int rc = 0;

	snprintf(pl->addr, sizeof(pl->addr), "%s", d->addr);
	pl->budget = d->budget;
	pl->streamed = !local;
	pl->sent = pl->cached = 0;
	if (c->o.weights == MU_WEIGHTS_LOCAL && !local) {
		snprintf(err, el, "device %s holds no copy of the checkpoint, and weights must be local",
		         d->addr);
		return MU_EARG;
	}
	if (!local)
		rc = hashes(c, err, el);
	if (rc == 0 && (body = assign_body(c, i, c->n, pl->first, pl->last, !local)) == NULL)
		rc = MU_ENOMEM;
	mu__chan_init(&ch, mu_session_stream(d->sess), d->sess, c->o.pool.io_timeout_ms,
	              c->o.pool.max_frame_bytes);
	if (rc == 0)
		rc = mu__device_exchange(&ch, &m, body, MU_MSG_READY, &reply, err, el, d->addr);
	mu__free(body);
	if (rc == 0 && !local) {
		rc = stream(c, &ch, reply, pl, err, el);
		mu__free(reply);
		reply = NULL;
		m = (mu__msg_t){MU_MSG_LOAD, 0, 3, 0, 0, 0};
		if (rc == 0)
			rc = mu__device_exchange(&ch, &m, NULL, MU_MSG_READY, &reply, err, el, d->addr);
	}
	if (rc == 0 && (rc = mu__llm_coord_set(c->coord, i, d->sess, d->addr, reply, err, el)) == 0)
		d->sess = NULL; /* the coordinator's now */
	mu__free(reply);
	if (rc == 0)
		mu__devpool_say(&c->pool, "  stage %d: layers %d..%d%s%s (%.1f MiB + %.1f MiB KV) -> %s, "
		                "%s in %.0f ms", i, pl->first, pl->last - 1, pl->first == 0 ? " + embedding" : "",
		                pl->last == c->src->hp.n_layers ? " + head" : "",
		                (double)mu__llm_src_bytes(c->src, pl->first, pl->last) / 1048576.0,
		                (double)kv_bytes(c, pl->first, pl->last) / 1048576.0, pl->addr,
		                local ? "weights from its own copy" : pl->sent == 0
		                        ? "weights all in its cache (0 bytes streamed)" : "weights streamed",
		                mu__clock_ms() - t0);
	if (rc == 0 && pl->streamed && pl->sent > 0)
		mu__devpool_say(&c->pool, "    streamed %llu bytes, %llu already in its cache",
		                (unsigned long long)pl->sent, (unsigned long long)pl->cached);
	return rc;
}

/* The plan's stages onto the devices; unused devices are released. */
static int place(mu__llm_cluster_t *c, mu__device_t *devs, int nd, char *err, size_t el)
{
	uint64_t budget[64] = {0};
	int order[64], cut[64], i, prev = 0, rc;

	for (i = 0; i < nd; i++)
		budget[i] = devs[i].budget;
	if ((rc = mu__llm_plan(c->src, c->o.ctx, c->o.max_seqs, budget, nd, order, cut, err,
	                       el)) != 0)
		return rc;
	for (i = 0; i < nd; i++)
		if (cut[i] > (i == 0 ? 0 : cut[i - 1]))
			c->n++;
	c->p = mu__calloc((size_t)c->n, sizeof(*c->p));
	if (c->p == NULL || mu__llm_coord_new(c->n, &c->o.coord, &c->coord) != 0)
		return MU_ENOMEM;
	mu__devpool_say(&c->pool, "the model (%d layers, %.1f MiB of weights) is cut into %d "
	                "stage%s, each with a KV cache for %d sequence%s of %d positions:",
	                c->src->hp.n_layers,
	                (double)mu__llm_src_bytes(c->src, 0, c->src->hp.n_layers) / 1048576.0, c->n,
	                c->n == 1 ? "" : "s", c->o.max_seqs, c->o.max_seqs == 1 ? "" : "s", c->o.ctx);
	for (i = 0, rc = 0; rc == 0 && i < nd; prev = cut[i], i++) {
		int k; /* the next stage without layers yet */

		for (k = 0; k < c->n && c->p[k].last > 0; k++)
			;
		if (cut[i] == prev)
			continue;
		c->p[k].first = prev;
		c->p[k].last = cut[i];
		rc = assign(c, k, &devs[order[i]], err, el);
	}
	return rc == 0 ? mu__llm_coord_check(c->coord, err, el) : rc;
}

int mu__llm_cluster_start(const mu__llm_src_t *src, const mu__llm_cluster_opts_t *o,
                          mu__llm_cluster_t **out, char *err, size_t el)
{
	mu__llm_cluster_t *c;
	mu__device_t *devs = NULL;
	int rc, i;

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
	c->digest = mu__llm_digest(src);
	rc = mu__devpool_init(&c->pool, &o->pool, err, el);
	if (rc == 0 && (devs = mu__calloc((size_t)o->devices, sizeof(*devs))) == NULL)
		rc = MU_ENOMEM;
	if (rc == 0) {
		mu__devpool_say(&c->pool, "asking the tracker at %s:%d for %d device%s of key \"%s\"",
		                o->pool.tracker_host, o->pool.tracker_port, o->devices,
		                o->devices == 1 ? "" : "s", o->pool.key);
		rc = mu__devpool_get_many(&c->pool, devs, o->devices, err, el);
	}
	if (rc == 0)
		rc = place(c, devs, o->devices, err, el);
	for (i = 0; devs != NULL && i < o->devices; i++)
		if (devs[i].sess != NULL) {
			if (rc == 0)
				mu__devpool_say(&c->pool, "  %s is not needed: released", devs[i].addr);
			mu_session_close(devs[i].sess);
		}
	mu__free(devs);
	if (rc != 0) {
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
	mu__devpool_free(&c->pool);
	mu__free(c->p);
	mu__free(c->sha);
	mu__free(c);
}

int mu__llm_cluster_recover(void *ud, int k, char *why, size_t wl)
{
	mu__llm_cluster_t *c = ud;
	placed_t *pl = &c->p[k];
	uint64_t want = need(c, pl->first, pl->last);
	mu__device_t d;
	int tries, rc = MU_ETOOBIG;

	mu__devpool_say(&c->pool, "device %s (stage %d, layers %d..%d) is lost; asking the tracker "
	                "for another", pl->addr, k, pl->first, pl->last - 1);
	for (tries = 0; tries < 3 && c->replacements < c->o.max_replacements; tries++) {
		if ((rc = mu__devpool_get(&c->pool, &d, why, wl)) != 0)
			return rc;
		if (d.budget >= want && (rc = assign(c, k, &d, why, wl)) == 0 &&
		    (rc = mu__llm_coord_check(c->coord, why, wl)) == 0) {
			pl->replaced++;
			c->replacements++;
			return 0;
		}
		if (d.budget < want)
			snprintf(why, wl, "device %s has %.1f MiB, stage %d needs %.1f MiB", d.addr,
			         (double)d.budget / 1048576.0, k, (double)want / 1048576.0);
		mu__devpool_say(&c->pool, "  %s: %s", d.addr, why);
		if (d.sess != NULL)
			mu_session_close(d.sess);
	}
	return rc;
}

int mu__llm_cluster_stages(const mu__llm_cluster_t *c)
{
	return c->n;
}

mu__llm_coord_t *mu__llm_cluster_coord(mu__llm_cluster_t *c)
{
	return c->coord;
}

void mu__llm_cluster_stage(const mu__llm_cluster_t *c, int i, mu__llm_cluster_stage_t *out)
{
	const placed_t *p = &c->p[i];

	out->addr = p->addr;
	out->budget = p->budget;
	out->first = p->first;
	out->last = p->last;
	out->weight_bytes = mu__llm_src_bytes(c->src, p->first, p->last);
	out->kv_bytes = kv_bytes(c, p->first, p->last);
	out->streamed = p->streamed;
	out->sent = p->sent;
	out->cached = p->cached;
	out->replaced = p->replaced;
}

int mu__llm_cluster_replacements(const mu__llm_cluster_t *c)
{
	return c->replacements;
}
