/* SPDX-License-Identifier: MIT */
/*
 * The remote metadata cache: other agents' blobs, by agent and label, with
 * NIXL's load rules and a byte limit (mu_md_opts_t.remote_cache_max).
 *
 * What an entry costs is its blob's bytes plus its bookkeeping (the agent
 * record, the map entries and their keys), so many tiny blobs are bounded
 * as surely as a few big ones. Past the limit, whole agents are evicted,
 * each reported as REMOTE_DROPPED, in this order:
 *   1. agents whose metadata only ever came from peers' unsolicited P2P
 *      LOADs, oldest first: nobody here has asked for them;
 *   2. then agents this agent fetched, loaded or read, least recently used
 *      first (a fetch, a load, mu_md_check_remote and mu_md_get_remote
 *      count as uses).
 * So a peer flooding us with LOADs can only push out other pushes, until
 * nothing else is left. The agent being loaded is never evicted for its own
 * load; a load that alone would pass the limit is refused (MU_ETOOBIG).
 *
 * Everything here runs under a->lock; events are emitted after it.
 */
#include <errno.h>
#include <string.h>

#include "muster/md.h"
#include "core/alloc_int.h"
#include "core/log_int.h"
#include "md/md_int.h"

/* What the bookkeeping of an agent record and of one label costs beyond
 * the strings' bytes: the structs, map entries and a share of map slots. */
#define AGENT_OVERHEAD (sizeof(mu__md_remote_t) + sizeof(mu__strmap_entry_t) + 64)
#define LABEL_OVERHEAD (sizeof(mu__md_blob_t) + sizeof(mu__strmap_entry_t) + 16)

static size_t label_cost(const char *label, size_t n)
{
	return LABEL_OVERHEAD + strlen(label) + 1 + n;
}

static size_t agent_cost(const char *name)
{
	return AGENT_OVERHEAD + strlen(name) + 1;
}

void mu__md_cache_init(mu_md_agent_t *a)
{
	mu__strmap_init(&a->remote);
	mu__list_init(&a->pushed);
	mu__list_init(&a->used);
	a->remote_bytes = 0;
	a->remote_max = a->o.remote_cache_max != 0 ? a->o.remote_cache_max
	                                           : MU_MD_REMOTE_CACHE_DEFAULT;
}

static void remote_free(void *p)
{
	mu__md_remote_t *r = p;

	mu__strmap_free(&r->labels, mu__free);
	mu__free(r);
}

void mu__md_cache_free(mu_md_agent_t *a)
{
	mu__strmap_free(&a->remote, remote_free);
}

/* Under the lock: r leaves the cache (its memory too). */
static void remote_remove(mu_md_agent_t *a, mu__md_remote_t *r)
{
	mu__strmap_remove(&a->remote, r->name, strlen(r->name));
	mu__list_remove(&r->node);
	a->remote_bytes -= r->bytes;
	remote_free(r);
}

/* Under the lock: this agent uses r, which goes to the tail of `used`. */
static void touch(mu_md_agent_t *a, mu__md_remote_t *r)
{
	mu__list_remove(&r->node);
	mu__list_insert_tail(&a->used, &r->node);
}

/* Names of the agents one load evicted, reported once the lock is off. */
typedef struct {
	char (*names)[MU_MD_NAME_MAX + 1];
	size_t n, cap;
} evicted_t;

/*
 * Under the lock: evict until `need` more bytes fit, sparing `keep`. The
 * caller has checked that keep's bytes plus need fit alone, so this ends.
 * A name that cannot be remembered for its event (no memory) is still
 * evicted: the limit comes first.
 */
static void make_room(mu_md_agent_t *a, const mu__md_remote_t *keep, size_t need,
                      evicted_t *ev)
{
	while (a->remote_bytes + need > a->remote_max) {
		mu__list_t *lists[2] = {&a->pushed, &a->used}, *it = NULL;
		mu__md_remote_t *victim = NULL;

		for (int i = 0; i < 2 && victim == NULL; i++)
			mu__list_foreach(it, lists[i]) {
				mu__md_remote_t *r = mu__container_of(it, mu__md_remote_t, node);

				if (r != keep) {
					victim = r;
					break;
				}
			}
		if (victim == NULL)
			return; /* cannot happen: see the caller's check */
		if (ev->n == ev->cap) {
			size_t cap = ev->cap ? ev->cap * 2 : 8;
			void *p = mu__realloc(ev->names, cap * sizeof(*ev->names));

			if (p != NULL) {
				ev->names = p;
				ev->cap = cap;
			}
		}
		if (ev->n < ev->cap)
			memcpy(ev->names[ev->n++], victim->name, sizeof(victim->name));
		remote_remove(a, victim);
	}
}

static void report_evicted(mu_md_agent_t *a, const char *loaded, evicted_t *ev)
{
	char why[200];

	if (ev->n == 0)
		return;
	snprintf(why, sizeof(why), "evicted: the remote metadata cache is at its limit "
	         "of %zu bytes", a->remote_max);
	mu__log(MU_LOG_INFO, "md", "agent %s: remote cache at its %zu-byte limit: "
	        "evicted %zu agent%s (the first: %s) to load %s", a->name, a->remote_max,
	        ev->n, ev->n == 1 ? "" : "s", ev->names[0], loaded);
	for (size_t i = 0; i < ev->n; i++)
		mu__md_event(a, MU_MD_REMOTE_DROPPED, 0, ev->names[i], why);
	mu__free(ev->names);
}

/* Under the lock: add blob under label to who's metadata (r: NULL when
 * who has none yet), making room first. */
static int add_blob(mu_md_agent_t *a, mu__md_remote_t *r, const char *who, const char *label,
                    const void *blob, size_t n, int pushed, evicted_t *ev)
{
	size_t cost = label_cost(label, n), need = cost + (r == NULL ? agent_cost(who) : 0);
	mu__md_blob_t *b;

	if ((r != NULL ? r->bytes : 0) + need > a->remote_max)
		return MU_ETOOBIG;
	make_room(a, r, need, ev);
	if (r == NULL) {
		r = mu__calloc(1, sizeof(*r));
		if (r == NULL)
			return MU_ENOMEM;
		memcpy(r->name, who, strlen(who) + 1);
		mu__strmap_init(&r->labels);
		if (mu__strmap_put(&a->remote, who, strlen(who), r, NULL) != 0) {
			mu__free(r);
			return MU_ENOMEM;
		}
		r->bytes = agent_cost(who);
		a->remote_bytes += r->bytes;
		mu__list_insert_tail(&a->pushed, &r->node);
	}
	b = mu__md_blob_new(blob, n);
	if (b == NULL || mu__strmap_put(&r->labels, label, strlen(label), b, NULL) != 0) {
		mu__free(b);
		return MU_ENOMEM; /* an agent record left empty is harmless */
	}
	r->bytes += cost;
	a->remote_bytes += cost;
	if (!pushed)
		touch(a, r);
	return 0;
}

static int load(mu_md_agent_t *a, const char *label, const void *blob, size_t n, char *name,
                size_t name_len, int pushed)
{
	char who[MU_MD_NAME_MAX + 1];
	mu__md_remote_t *r;
	mu__md_blob_t *old = NULL;
	evicted_t ev = {NULL, 0, 0};
	int rc = mu_md_blob_name(blob, n, who, sizeof(who));

	label = mu__md_label_or_default(label);
	if (rc != 0)
		return MU_EPROTO; /* NIXL: MISMATCH */
	if (name != NULL && name_len > 0)
		snprintf(name, name_len, "%s", who);
	if (strcmp(who, a->name) == 0)
		return MU_EARG; /* our own metadata */
	uv_mutex_lock(&a->lock);
	r = mu__strmap_get(&a->remote, who, strlen(who));
	if (r != NULL)
		old = mu__strmap_get(&r->labels, label, strlen(label));
	if (old != NULL) {
		/* the same bytes again: nothing to do; other bytes: refused
		 * until someone invalidates this agent (NIXL's rule) */
		rc = old->len == n && memcmp(old->data, blob, n) == 0 ? 0 : -EEXIST;
		if (rc == 0 && !pushed)
			touch(a, r);
	} else {
		rc = add_blob(a, r, who, label, blob, n, pushed, &ev);
	}
	uv_mutex_unlock(&a->lock);
	if (rc == MU_ETOOBIG)
		mu__log(MU_LOG_WARN, "md", "agent %s: metadata of %s under %s (%zu bytes) refused: "
		        "more than the remote cache's limit of %zu bytes on its own", a->name, who,
		        label, n, a->remote_max);
	report_evicted(a, who, &ev);
	return rc;
}

int mu__md_load(mu_md_agent_t *a, const char *label, const void *blob, size_t n,
                char *name, size_t name_len)
{
	return load(a, label, blob, n, name, name_len, 0);
}

int mu__md_load_pushed(mu_md_agent_t *a, const char *label, const void *blob, size_t n,
                       char *name, size_t name_len)
{
	return load(a, label, blob, n, name, name_len, 1);
}

int mu_md_load_remote(mu_md_agent_t *a, const char *label, const void *blob,
                      size_t n, char *name, size_t name_len)
{
	return load(a, label, blob, n, name, name_len, 0);
}

int mu_md_check_remote(mu_md_agent_t *a, const char *name)
{
	mu__md_remote_t *r;

	uv_mutex_lock(&a->lock);
	r = mu__strmap_get(&a->remote, name, strlen(name));
	if (r != NULL)
		touch(a, r);
	uv_mutex_unlock(&a->lock);
	return r != NULL ? 0 : -ENOENT;
}

int mu_md_get_remote(mu_md_agent_t *a, const char *name, const char *label,
                     void **blob, size_t *n)
{
	mu__md_remote_t *r;
	mu__md_blob_t *b = NULL;

	*blob = NULL;
	*n = 0;
	label = mu__md_label_or_default(label);
	uv_mutex_lock(&a->lock);
	r = mu__strmap_get(&a->remote, name, strlen(name));
	if (r != NULL)
		b = mu__strmap_get(&r->labels, label, strlen(label));
	if (b != NULL) {
		touch(a, r);
		if ((*blob = mu__malloc(b->len + 1)) != NULL) {
			memcpy(*blob, b->data, b->len);
			*n = b->len;
		}
	}
	uv_mutex_unlock(&a->lock);
	return b == NULL ? -ENOENT : *blob == NULL ? MU_ENOMEM : 0;
}

int mu_md_invalidate_remote(mu_md_agent_t *a, const char *name)
{
	mu__md_remote_t *r;

	if (strcmp(name, a->name) == 0)
		return MU_EARG;
	uv_mutex_lock(&a->lock);
	r = mu__strmap_get(&a->remote, name, strlen(name));
	if (r != NULL)
		remote_remove(a, r);
	uv_mutex_unlock(&a->lock);
	return r != NULL ? 0 : -ENOENT;
}

void mu__md_drop(mu_md_agent_t *a, const char *name, const char *why)
{
	if (mu_md_invalidate_remote(a, name) == 0)
		mu__md_event(a, MU_MD_REMOTE_DROPPED, 0, name, why);
}

int mu_md_list_remote(mu_md_agent_t *a, char ***names, size_t *n)
{
	int rc;

	uv_mutex_lock(&a->lock);
	rc = mu__strmap_keys(&a->remote, names, n);
	uv_mutex_unlock(&a->lock);
	return rc;
}

void mu_md_strv_free(char **v)
{
	mu__strv_free(v);
}

size_t mu_md_remote_bytes(mu_md_agent_t *a)
{
	size_t n;

	uv_mutex_lock(&a->lock);
	n = a->remote_bytes;
	uv_mutex_unlock(&a->lock);
	return n;
}
