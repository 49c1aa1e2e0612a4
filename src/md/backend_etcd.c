/* SPDX-License-Identifier: MIT */
/*
 * etcd backend: NIXL's key layout, so NIXL agents and muster agents find
 * each other's metadata:
 *
 *   NS "/" agent "/"          empty marker: the agent is announced
 *   NS "/" agent "/" label    a blob ("metadata" for the full one)
 *
 * with NS = NIXL_ETCD_NAMESPACE, "/nixl/agents/" by default (hence the
 * double slash NIXL's keys have), joined verbatim. Invalidation deletes the
 * NS/agent/ prefix; agents that fetched watch the marker and drop their
 * copy when it goes. Beyond NIXL, compatibly:
 *
 * - everything an agent writes carries its lease, kept alive from the
 *   worker's poll, so a crashed agent's keys expire (and peers drop it);
 *   a lease found lost is re-granted and every key put again;
 * - markers are watched from the revision right after the fetch's read,
 *   so an invalidation between the read and the watch is not missed, and
 *   through one watch per agent on the namespace's deletes (NIXL opens one
 *   per remote agent, which caps it at thousands of peers); when etcd
 *   ends that watch (a compacted revision), every tracked marker is read
 *   again and the watch restarted from those reads;
 * - a fetch of a key not there yet waits on a watch without holding the
 *   worker, so many such fetches wait together;
 * - a blob over etcd's request limit is written in 1 MiB chunks under
 *   NS/agent/label/.chunk/GEN/i, the label key holding a manifest (no
 *   NIXL agent could have read such a blob anyway).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "muster/etcd.h"
#include "muster/md.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/log_int.h"
#include "core/rand_int.h"
#include "core/strmap_int.h"
#include "core/time_int.h"
#include "md/md_int.h"

#define CHUNK (1u << 20)
#define MANIFEST "\0muster-chunks\0"
#define MANIFEST_LEN 15

typedef struct etcd_be_s etcd_be_t;

typedef struct {
	mu__list_t node;
	etcd_be_t *be;
	mu__md_op_t *op;
	mu_etcd_watch_t *w;
	int64_t deadline;
	int state;        /* 0 waiting, 1 published, 2 deleted, 3 etcd
	                   * ended the watch (read again) */
} pending_t;

/* An agent we fetched: dropped when its marker goes after `rev`. */
typedef struct {
	int64_t rev;      /* the revision our copy was read at */
	int dropped;      /* the marker went: drop the agent after the poll */
} fetched_t;

struct etcd_be_s {
	mu_md_agent_t *a;
	mu_etcd_t *e;
	int64_t lease;
	int64_t next_keepalive; /* ms */
	int announced;
	mu__strmap_t published; /* labels we put since the last invalidate */
	mu__list_t pending;
	mu__strmap_t fetched;   /* name -> fetched_t */
	mu_etcd_watch_t *deletes; /* the namespace's deletes, once we fetch */
	int deletes_ended;      /* etcd ended it: re-arm (rearm_deletes) */
	int64_t rearm_at;       /* ms; when a failed re-arm tries again */
	mu__buf_t ns;           /* NS "/": where every agent's keys live */
};

static int key_of(const etcd_be_t *be, const char *agent, const char *label,
                  mu__buf_t *k)
{
	/* verbatim, as NIXL joins it: NS + "/" + agent + "/" + label */
	return mu__buf_printf(k, "%s/%s/%s", be->a->o.etcd_namespace, agent,
	                      label ? label : "");
}

/* ---- announcing, with a lease ---- */

static int announce(etcd_be_t *be, char *why, size_t wl)
{
	double ttl = be->a->o.lease_ttl;
	mu__buf_t k;
	int64_t granted = 0;
	int rc = 0;

	if (be->announced)
		return 0;
	if (ttl > 0 && be->lease == 0) {
		rc = mu_etcd_lease_grant(be->e, (int64_t)(ttl + 0.999), &be->lease, &granted);
		if (rc != 0) {
			snprintf(why, wl, "lease grant: %.100s", mu_etcd_last_error(be->e));
			return rc;
		}
		be->next_keepalive = mu__now_ms() + granted * 1000 / 3;
	}
	mu__buf_init(&k, 4096);
	rc = key_of(be, be->a->name, NULL, &k);
	if (rc == 0)
		rc = mu_etcd_put(be->e, k.data, k.len, "", 0, be->lease, NULL);
	if (rc != 0)
		snprintf(why, wl, "announce %.100s: %.100s", k.data ? k.data : "", mu_etcd_last_error(be->e));
	mu__buf_free(&k);
	be->announced = rc == 0;
	return rc;
}

/* Write a blob under key, in chunks when it is over the request limit. */
static int put_blob(etcd_be_t *be, const mu__buf_t *key, const void *blob, size_t n)
{
	mu__buf_t ck, man;
	mu_etcd_range_t old;
	uint32_t gen;
	size_t i, nchunks;
	int rc;

	if (n <= CHUNK)
		return mu_etcd_put(be->e, key->data, key->len, blob, n, be->lease, NULL);
	/* the chunks first, the manifest last: a reader that sees the
	 * manifest finds every chunk it names */
	if ((rc = mu__random_bytes(&gen, sizeof(gen))) != 0)
		return rc;
	rc = mu_etcd_get(be->e, key->data, key->len, 0, &old);
	if (rc != 0)
		return rc;
	nchunks = (n + CHUNK - 1) / CHUNK;
	mu__buf_init(&ck, 8192);
	for (i = 0; rc == 0 && i < nchunks; i++) {
		size_t len = i + 1 < nchunks ? CHUNK : n - i * CHUNK;

		mu__buf_reset(&ck);
		rc = mu__buf_printf(&ck, "%s/.chunk/%08" PRIx32 "/%zu", key->data, gen, i);
		if (rc == 0)
			rc = mu_etcd_put(be->e, ck.data, ck.len, (const char *)blob + i * CHUNK,
			                 len, be->lease, NULL);
	}
	mu__buf_init(&man, 256);
	if (rc == 0)
		rc = mu__buf_append(&man, MANIFEST, MANIFEST_LEN);
	if (rc == 0)
		rc = mu__buf_printf(&man, "%08" PRIx32 " %zu %zu", gen, nchunks, n);
	if (rc == 0)
		rc = mu_etcd_put(be->e, key->data, key->len, man.data, man.len, be->lease, NULL);
	/* the previous generation's chunks, if any, are garbage now */
	if (rc == 0 && old.n == 1 && old.kvs[0].vlen > MANIFEST_LEN + 8 &&
	    memcmp(old.kvs[0].value, MANIFEST, MANIFEST_LEN) == 0) {
		mu__buf_reset(&ck);
		if (mu__buf_printf(&ck, "%s/.chunk/%.8s/", key->data,
		                   old.kvs[0].value + MANIFEST_LEN) == 0)
			mu_etcd_delete(be->e, ck.data, ck.len, 1, NULL);
	}
	mu_etcd_range_free(&old);
	mu__buf_free(&ck);
	mu__buf_free(&man);
	return rc;
}

/* Reassemble a chunked blob from its manifest. */
static int read_chunks(etcd_be_t *be, const mu__buf_t *key, const char *man,
                       size_t mlen, mu__buf_t *out)
{
	char text[64], gen[9];
	size_t nchunks, total, i;
	mu__buf_t ck;
	int rc = 0;

	snprintf(text, sizeof(text), "%.*s", (int)(mlen - MANIFEST_LEN), man + MANIFEST_LEN);
	if (sscanf(text, "%8s %zu %zu", gen, &nchunks, &total) != 3 ||
	    total > MU_MD_MAX_BLOB || nchunks != (total + CHUNK - 1) / CHUNK)
		return MU_EPROTO;
	mu__buf_init(&ck, 8192);
	for (i = 0; rc == 0 && i < nchunks; i++) {
		mu_etcd_range_t r = {0};

		mu__buf_reset(&ck);
		rc = mu__buf_printf(&ck, "%s/.chunk/%s/%zu", key->data, gen, i);
		if (rc == 0)
			rc = mu_etcd_get(be->e, ck.data, ck.len, 0, &r);
		if (rc == 0 && r.n != 1)
			rc = -ENOENT; /* a chunk went missing: rewritten meanwhile */
		if (rc == 0)
			rc = mu__buf_append(out, r.kvs[0].value, r.kvs[0].vlen);
		mu_etcd_range_free(&r);
	}
	mu__buf_free(&ck);
	if (rc == 0 && out->len != total)
		rc = MU_EPROTO;
	return rc;
}

static int etcd_send(void *st, mu__md_op_t *op, char *why, size_t wl)
{
	etcd_be_t *be = st;
	mu__buf_t k;
	int rc = announce(be, why, wl);

	if (rc != 0)
		return rc;
	mu__buf_init(&k, 4096);
	rc = key_of(be, be->a->name, op->label, &k);
	if (rc == 0)
		rc = put_blob(be, &k, op->blob, op->len);
	if (rc == 0)
		rc = mu__strmap_put(&be->published, op->label, strlen(op->label), be, NULL);
	else
		snprintf(why, wl, "put %.100s: %.100s", k.data ? k.data : "",
		         rc == MU_ETOOBIG ? "over etcd's request limit" : mu_etcd_last_error(be->e));
	mu__buf_free(&k);
	return rc;
}

/* ---- fetching ---- */

/* A delete in the namespace: if it is the marker of an agent we hold
 * (NS/name/) and newer than our copy, that agent is gone. */
static void deletes_cb(void *ud, const mu_etcd_event_t *ev, int err)
{
	etcd_be_t *be = ud;
	const char *k, *slash;
	fetched_t *f;
	size_t n;

	if (ev == NULL) { /* etcd ended it (a compacted revision, say) */
		mu__log(MU_LOG_WARN, "md", "agent %s: etcd ended the watch on %s (%s); "
		        "re-arming it", be->a->name, be->ns.data, mu_etcd_last_error(be->e));
		(void)err;
		be->deletes_ended = 1; /* freed and replaced after the poll */
		return;
	}
	if (ev->type != MU_ETCD_EVENT_DELETE || ev->kv->klen <= be->ns.len ||
	    memcmp(ev->kv->key, be->ns.data, be->ns.len) != 0)
		return;
	k = ev->kv->key + be->ns.len;
	n = ev->kv->klen - be->ns.len;
	slash = memchr(k, '/', n);
	if (slash == NULL || (size_t)(slash - k) != n - 1)
		return; /* a blob or a chunk, not a marker */
	f = mu__strmap_get(&be->fetched, k, n - 1);
	if (f != NULL && ev->kv->mod_revision > f->rev)
		f->dropped = 1;
}

/* Note that we hold name's metadata as of rev; watch deletes from then. */
static void track(etcd_be_t *be, const char *name, int64_t rev)
{
	fetched_t *f = mu__strmap_get(&be->fetched, name, strlen(name));

	if (f == NULL) {
		f = mu__calloc(1, sizeof(*f));
		if (f == NULL || mu__strmap_put(&be->fetched, name, strlen(name), f, NULL) != 0) {
			mu__free(f);
			return;
		}
	}
	if (rev > f->rev)
		f->rev = rev;
	f->dropped = 0;
	/* an ended watch is re-armed by rearm_deletes, which checks this
	 * agent's marker too */
	if (be->deletes == NULL && !be->deletes_ended)
		mu_etcd_watch(be->e, be->ns.data, be->ns.len, MU_ETCD_PREFIX | MU_ETCD_NOPUT,
		              rev + 1, deletes_cb, be, &be->deletes);
}

/*
 * Check name's marker as of now: gone, or put again after the read our
 * copy came from (deleted and re-announced meanwhile), means the agent
 * was invalidated. *rev gets the read's revision.
 */
static int check_marker(etcd_be_t *be, const char *name, fetched_t *f, int64_t *rev)
{
	mu_etcd_range_t r;
	mu__buf_t k;
	int rc;

	mu__buf_init(&k, 4096);
	rc = key_of(be, name, NULL, &k);
	if (rc == 0)
		rc = mu_etcd_get(be->e, k.data, k.len, 0, &r);
	mu__buf_free(&k);
	if (rc != 0)
		return rc;
	*rev = r.revision;
	if (r.n == 0 || r.kvs[0].create_revision > f->rev)
		f->dropped = 1;
	mu_etcd_range_free(&r);
	return 0;
}

/*
 * etcd ended the deletes watch (it does when the revision the watch must
 * resume from was compacted, e.g. after a reconnect): deletes since its
 * last event may never be seen. Check every tracked marker with a fresh
 * read and watch again from the oldest of those reads' revisions + 1: a
 * delete at or before a marker's read shows in that read, a later one in
 * the new watch. A failure (etcd unreachable) tries again soon.
 */
static void rearm_deletes(etcd_be_t *be)
{
	mu__strmap_entry_t *e = NULL;
	size_t slot = 0;
	int64_t from = 0, rev = 0;
	int rc = 0;

	if (!be->deletes_ended || mu__now_ms() < be->rearm_at)
		return;
	mu_etcd_watch_cancel(be->deletes); /* outside its callback now */
	be->deletes = NULL;
	while (rc == 0 && (e = mu__strmap_next(&be->fetched, &slot, e)) != NULL) {
		rc = check_marker(be, e->key, e->value, &rev);
		if (rc == 0 && (from == 0 || rev < from))
			from = rev;
	}
	if (rc == 0 && from > 0)
		rc = mu_etcd_watch(be->e, be->ns.data, be->ns.len,
		                   MU_ETCD_PREFIX | MU_ETCD_NOPUT, from + 1, deletes_cb,
		                   be, &be->deletes);
	if (rc != 0) {
		be->rearm_at = mu__now_ms() + 500;
		mu__log(MU_LOG_WARN, "md", "agent %s: re-arming the watch on %s: %s",
		        be->a->name, be->ns.data, mu_etcd_last_error(be->e));
		return;
	}
	be->deletes_ended = 0; /* with nothing tracked, the next fetch arms it */
}

/* Load a fetched value (maybe a chunk manifest) into the agent. */
static int load_value(etcd_be_t *be, mu__md_op_t *op, const mu__buf_t *key,
                      const char *v, size_t n, char *why, size_t wl)
{
	char who[MU_MD_NAME_MAX + 1];
	mu__buf_t whole;
	int rc = 0;

	mu__buf_init(&whole, MU_MD_MAX_BLOB);
	if (n > MANIFEST_LEN && memcmp(v, MANIFEST, MANIFEST_LEN) == 0) {
		rc = read_chunks(be, key, v, n, &whole);
		v = whole.data;
		n = whole.len;
	}
	if (rc == 0)
		rc = mu__md_load(be->a, op->label, v, n, who, sizeof(who));
	if (rc != 0)
		snprintf(why, wl, "%.100s: %.100s", key->data,
		         rc == MU_EPROTO ? "not a metadata blob"
		         : rc == -EEXIST ? "different metadata of that agent is loaded; invalidate it first"
		                         : mu_strerror(rc));
	else if (strcmp(who, op->name) != 0) /* NIXL only logs this */
		snprintf(why, wl, "%.100s holds metadata of %.100s, not of %.100s", key->data, who, op->name);
	if (rc == 0 && strcmp(who, op->name) != 0)
		rc = MU_EPROTO;
	mu__buf_free(&whole);
	return rc;
}

static void pending_cb(void *ud, const mu_etcd_event_t *ev, int err)
{
	pending_t *p = ud;

	(void)err;
	if (ev == NULL) /* canceled by etcd (a compacted revision, say): the
	                 * key may have come and gone meanwhile; look again */
		p->state = 3;
	else if (ev->type == MU_ETCD_EVENT_DELETE)
		p->state = 2;
	else if (ev->kv->vlen > 0) /* the empty marker is not a blob */
		p->state = 1;
}

static int etcd_fetch(void *st, mu__md_op_t *op, char *why, size_t wl)
{
	etcd_be_t *be = st;
	mu_etcd_range_t r;
	pending_t *p;
	mu__buf_t k;
	int rc;

	mu__buf_init(&k, 4096);
	rc = key_of(be, op->name, op->label, &k);
	if (rc == 0)
		rc = mu_etcd_get(be->e, k.data, k.len, 0, &r);
	if (rc != 0) {
		snprintf(why, wl, "get %.100s: %.100s", k.data ? k.data : "", mu_etcd_last_error(be->e));
		mu__buf_free(&k);
		return rc;
	}
	if (r.n == 1 && r.kvs[0].vlen > 0) { /* NIXL: an empty value is absent */
		rc = load_value(be, op, &k, r.kvs[0].value, r.kvs[0].vlen, why, wl);
		if (rc == 0)
			track(be, op->name, r.revision);
		mu_etcd_range_free(&r);
		mu__buf_free(&k);
		return rc;
	}
	/* not published yet: watch from the next revision, without blocking */
	p = mu__calloc(1, sizeof(*p));
	rc = p == NULL ? MU_ENOMEM
	     : mu_etcd_watch(be->e, k.data, k.len, 0, r.revision + 1, pending_cb, p, &p->w);
	mu_etcd_range_free(&r);
	mu__buf_free(&k);
	if (rc != 0) {
		mu__free(p);
		snprintf(why, wl, "watch: %.100s", mu_etcd_last_error(be->e));
		return rc;
	}
	p->be = be;
	p->op = op;
	p->deadline = mu__deadline((int64_t)(be->a->o.etcd_watch_timeout * 1000));
	mu__list_insert_tail(&be->pending, &p->node);
	return 1;
}

static void finish_pending(etcd_be_t *be, pending_t *p, int rc, const char *why)
{
	mu__list_remove(&p->node);
	mu_etcd_watch_cancel(p->w);
	mu__md_complete(be->a, p->op, rc, NULL, why);
	mu__free(p);
}

/* Fetches whose key appeared, went, or never came. */
static void settle_pending(etcd_be_t *be)
{
	mu__list_t *it, *tmp;
	char why[256];

	mu__list_foreach_safe(it, tmp, &be->pending) {
		pending_t *p = mu__container_of(it, pending_t, node);
		int rc;

		why[0] = '\0';
		if (p->state == 1 || p->state == 3) {
			p->state = 0;
			rc = etcd_fetch(be, p->op, why, sizeof(why)); /* read it again, whole */
			if (rc == 1) { /* not there: keep the newer wait, same deadline */
				mu__container_of(be->pending.prev, pending_t, node)->deadline =
					p->deadline;
				mu__list_remove(&p->node);
				mu_etcd_watch_cancel(p->w);
				mu__free(p);
				continue;
			}
			finish_pending(be, p, rc, why);
		} else if (p->state == 2) {
			snprintf(why, sizeof(why), "%.100s's metadata was deleted while we waited", p->op->name);
			finish_pending(be, p, -ENOENT, why);
		} else if (mu__now_ms() >= p->deadline) {
			snprintf(why, sizeof(why), "%.100s published nothing under \"%.60s\" within %g s",
			         p->op->name, p->op->label, be->a->o.etcd_watch_timeout);
			finish_pending(be, p, -ETIMEDOUT, why);
		}
	}
}

/* Markers that went: drop those agents (NIXL does it on its next poll). */
static void settle_markers(etcd_be_t *be)
{
	mu__strmap_entry_t *e = NULL;
	size_t slot = 0;
	char names[16][MU_MD_NAME_MAX + 1];
	int n = 0;

	while (n < 16 && (e = mu__strmap_next(&be->fetched, &slot, e)) != NULL)
		if (((fetched_t *)e->value)->dropped)
			snprintf(names[n++], sizeof(names[0]), "%s", e->key);
	for (int i = 0; i < n; i++) {
		mu__free(mu__strmap_remove(&be->fetched, names[i], strlen(names[i])));
		mu__md_drop(be->a, names[i], "its etcd keys were deleted or expired");
	}
}

/* ---- invalidating ---- */

static int etcd_invalidate(void *st, mu__md_op_t *op, char *why, size_t wl)
{
	etcd_be_t *be = st;
	mu__buf_t k;
	int rc;

	(void)op;
	if (!be->announced)
		return 0; /* nothing published: as NIXL, not an error */
	mu__buf_init(&k, 4096);
	rc = key_of(be, be->a->name, NULL, &k);
	if (rc == 0)
		rc = mu_etcd_delete(be->e, k.data, k.len, 1, NULL);
	if (rc != 0)
		snprintf(why, wl, "delete %.100s*: %.100s", k.data ? k.data : "", mu_etcd_last_error(be->e));
	mu__buf_free(&k);
	if (rc == 0) {
		be->announced = 0;
		mu__strmap_free(&be->published, NULL);
		mu__strmap_init(&be->published);
	}
	return rc;
}

/* ---- the lease ---- */

/* Lost lease: our keys are gone; announce and put everything again. */
static void republish(etcd_be_t *be)
{
	mu__strmap_entry_t *e = NULL;
	size_t slot = 0;
	char why[256];

	be->lease = 0;
	be->announced = 0;
	if (announce(be, why, sizeof(why)) != 0)
		return; /* the next keep-alive tries again */
	while ((e = mu__strmap_next(&be->published, &slot, e)) != NULL) {
		mu__md_blob_t *b = mu__md_local_copy(be->a, e->key);
		mu__buf_t k;

		mu__buf_init(&k, 4096);
		if (b != NULL && key_of(be, be->a->name, e->key, &k) == 0)
			put_blob(be, &k, b->data, b->len);
		mu__buf_free(&k);
		mu__free(b);
	}
	mu__log(MU_LOG_WARN, "md", "agent %s: etcd lease was lost; keys published again",
	        be->a->name);
}

static void keepalive(etcd_be_t *be)
{
	int64_t ttl = 0;

	if (be->lease == 0 || mu__now_ms() < be->next_keepalive)
		return;
	if (mu_etcd_lease_keepalive(be->e, be->lease, &ttl) != 0) {
		be->next_keepalive = mu__now_ms() + 500; /* etcd unreachable: soon */
		return;
	}
	if (ttl <= 0) {
		republish(be);
		ttl = (int64_t)be->a->o.lease_ttl;
	}
	be->next_keepalive = mu__now_ms() + (ttl > 0 ? ttl : 1) * 1000 / 3;
}

static int etcd_poll(void *st, int ms)
{
	etcd_be_t *be = st;
	int64_t until;

	keepalive(be);
	if (be->lease != 0 && (until = be->next_keepalive - mu__now_ms()) < ms)
		ms = until < 0 ? 0 : (int)until;
	if (!mu__list_empty(&be->pending) && ms > 50)
		ms = 50; /* deadlines of waiting fetches */
	if (be->deletes_ended && ms > 500)
		ms = 500; /* a re-arm that failed tries again */
	mu_etcd_poll(be->e, ms);
	settle_pending(be);
	rearm_deletes(be);
	settle_markers(be);
	return 0;
}

static void etcd_wakeup(void *st)
{
	mu_etcd_wakeup(((etcd_be_t *)st)->e);
}

/* ---- lifecycle ---- */

static void etcd_close(void *st)
{
	etcd_be_t *be = st;
	mu__list_t *it, *tmp;

	if (be == NULL)
		return;
	mu__list_foreach_safe(it, tmp, &be->pending)
		finish_pending(be, mu__container_of(it, pending_t, node), MU_ESTOPPED,
		               "the agent stopped while the fetch waited");
	mu_etcd_watch_cancel(be->deletes);
	mu__strmap_free(&be->fetched, mu__free);
	mu__strmap_free(&be->published, NULL);
	mu__buf_free(&be->ns);
	/* the lease is left to expire: our keys go a TTL after we do */
	mu_etcd_free(be->e);
	mu__free(be);
}

static int etcd_open(mu_md_agent_t *a, void **st)
{
	etcd_be_t *be = mu__calloc(1, sizeof(*be));
	mu_etcd_opts_t o;
	int rc;

	if (be == NULL)
		return MU_ENOMEM;
	be->a = a;
	mu__list_init(&be->pending);
	mu__strmap_init(&be->published);
	mu__strmap_init(&be->fetched);
	mu__buf_init(&be->ns, 4096);
	mu_etcd_opts_init(&o);
	o.endpoints = a->o.etcd_endpoints;
	o.timeout_ms = (int)(a->o.op_timeout * 1000);
	rc = mu__buf_printf(&be->ns, "%s/", a->o.etcd_namespace);
	if (rc == 0)
		rc = mu_etcd_new(&o, &be->e);
	if (rc != 0) {
		mu__md_setup_error(a, "agent %.64s: bad etcd endpoints \"%.100s\": %s",
		                   a->name, a->o.etcd_endpoints, mu_strerror(rc));
		etcd_close(be);
		return rc;
	}
	*st = be;
	return 0;
}

const mu__md_backend_t mu__md_backend_etcd = {
	MU_MD_BACKEND_VERSION, "ETCD", etcd_open, etcd_close,
	etcd_send, etcd_fetch, etcd_invalidate, etcd_poll, etcd_wakeup,
};
