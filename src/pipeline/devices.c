/* SPDX-License-Identifier: MIT */
/*
 * Devices of the main job, from the coordinator's side: ask the tracker
 * for devices of a key (all at once, so a job's priority counts for each),
 * open a session on each, and learn what each offers from its md metadata
 * (memory budget, threads, the models it holds by digest). The main
 * job's lifecycle (pipeline/cluster.c) is built on it, for either kind
 * of stage.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "muster/md.h"
#include "muster/server.h"
#include "muster/tracker.h"
#include "core/alloc_int.h"
#include "core/json_int.h"
#include "core/net_int.h"
#include "core/progress_int.h"
#include "core/rand_int.h"
#include "core/sniff_int.h"
#include "core/time_int.h"
#include "pipeline/devices_int.h"

void mu__devpool_say(const mu__devpool_t *p, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	if (p->say == NULL)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	p->say(p->ud, line);
}


int mu__devpool_init(mu__devpool_t *p, const mu__devpool_opts_t *o, char *err, size_t el)
{
	mu_md_opts_t mo;
	char tag[40], name[96];
	int rc;

	memset(p, 0, sizeof(*p));
	p->o = *o;
	p->key = mu__strdup(o->key);
	p->thost = mu__strdup(o->tracker_host);
	if (p->key == NULL || p->thost == NULL) {
		mu__devpool_free(p);
		return MU_ENOMEM;
	}
	p->tport = o->tracker_port;
	p->priority = o->priority;
	p->request_timeout_ms = o->request_timeout_ms;
	p->io_timeout_ms = o->io_timeout_ms;
	p->max_frame = o->max_frame_bytes;
	p->say = o->say;
	p->ud = o->ud;
	if (mu__random_key("", tag, sizeof(tag)) != 0)
		snprintf(tag, sizeof(tag), "%ld", (long)getpid());
	snprintf(name, sizeof(name), "muster-coordinator/%ld/%s", (long)getpid(), tag);
	mu_md_opts_init(&mo);
	mo.name = name;
	rc = mu_md_agent_new(&mo, &p->md, err, el);
	if (rc != 0) {
		mu__devpool_free(p);
	}
	return rc;
}

void mu__devpool_free(mu__devpool_t *p)
{
	mu_md_agent_free(p->md);
	mu__free(p->key);
	mu__free(p->thost);
	memset(p, 0, sizeof(*p));
}

int mu__device_exchange(mu__chan_t *ch, mu__msg_t *m, const char *body, int want, char **reply,
                    char *err, size_t el, const char *addr)
{
	char *text = NULL;
	uint64_t id = m->id;
	int rc = mu__msg_send(ch, m, body, body != NULL ? strlen(body) : 0);

	if (rc == 0)
		rc = mu__msg_recv(ch, m, ch->io_ms);
	if (rc == 0 && !mu__msg_is_frame(m->type))
		rc = mu__msg_recv_body(ch, m, &text);
	if (rc != 0) {
		snprintf(err, el, "device %s: %s", addr, mu_strerror(rc));
		return rc;
	}
	if (m->type == MU_MSG_ERROR) {
		snprintf(err, el, "device %s refused: %s", addr, text);
		mu__free(text);
		return m->status < 0 ? m->status : MU_EFAIL;
	}
	if (m->type != want || m->id != id) {
		snprintf(err, el, "device %s answered %s to request %llu", addr,
		         mu__msg_type_name(m->type), (unsigned long long)id);
		mu__free(text);
		return MU_EPROTO;
	}
	*reply = text;
	return 0;
}

/* The device's capabilities, through md: the store when both sides use
 * the same one, else P2P from the device's metadata listener. */
static int fetch_caps(mu__devpool_t *p, mu__device_t *d, const char *info, char *err, size_t el)
{
	cJSON *o = NULL, *caps = NULL;
	const cJSON *agent, *backend, *port, *it;
	char host[256];
	mu_md_peer_t peer;
	uint64_t op;
	int rc, status = 0, dport;
	void *blob = NULL;
	const void *payload;
	size_t n, pn;

	rc = mu__json_parse(info, strlen(info), &o);
	agent = cJSON_GetObjectItemCaseSensitive(o, "md_agent");
	backend = cJSON_GetObjectItemCaseSensitive(o, "md_backend");
	port = cJSON_GetObjectItemCaseSensitive(o, "md_port");
	if (rc != 0 || !cJSON_IsString(agent) || !cJSON_IsString(backend) ||
	    mu__json_int(port, 0, 65535, &peer.port) != 0 ||
	    mu__split_hostport(d->addr, host, sizeof(host), &dport) != 0) {
		snprintf(err, el, "device %s does not describe its metadata agent (is it a muster server "
		         "of this version?)", d->addr);
		cJSON_Delete(o);
		return MU_EPROTO;
	}
	peer.ip = host;
	if (strcmp(backend->valuestring, "P2P") != 0 &&
	    strcmp(backend->valuestring, mu_md_backend_name(p->md)) == 0)
		rc = mu_md_fetch_remote(p->md, agent->valuestring, NULL, NULL, &op);
	else
		rc = mu_md_fetch_remote(p->md, agent->valuestring, &peer, NULL, &op);
	if (rc == 0)
		rc = mu_md_wait(p->md, op, p->request_timeout_ms, &status);
	if (rc == 0)
		rc = status;
	if (rc == 0)
		rc = mu_md_get_remote(p->md, agent->valuestring, NULL, &blob, &n);
	if (rc == 0)
		rc = mu_md_blob_payload(blob, n, &payload, &pn);
	if (rc == 0)
		rc = mu__json_parse(payload, pn, &caps);
	if (rc == 0 &&
	    (mu__json_u64(cJSON_GetObjectItemCaseSensitive(caps, "mem_budget"), UINT64_MAX,
	                  &d->budget) != 0 ||
	     mu__json_int(cJSON_GetObjectItemCaseSensitive(caps, "threads"), 1, INT_MAX,
	                  &d->threads) != 0))
		rc = MU_EPROTO; /* numbers missing or out of range */
	if (rc != 0) {
		snprintf(err, el, "device %s: cannot fetch its metadata (agent %s, %s): %s", d->addr,
		         agent->valuestring, backend->valuestring, mu_strerror(rc));
	} else {
		cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(caps, "models")) {
			const cJSON *dg = cJSON_GetObjectItemCaseSensitive(it, "digest");
			unsigned long long v;

			if (d->nheld < 64 && cJSON_IsString(dg) && sscanf(dg->valuestring, "%llx", &v) == 1)
				d->held[d->nheld++] = v;
		}
		mu__devpool_say(p, "  %s: %.1f MiB for weights, %d thread%s, %s the model (metadata of %s via %s)",
		    d->addr, (double)d->budget / 1048576.0, d->threads, d->threads == 1 ? "" : "s",
		    d->nheld > 0 ? "holds a copy of" : "no copy of", agent->valuestring,
		    strcmp(backend->valuestring, mu_md_backend_name(p->md)) == 0 &&
		            strcmp(backend->valuestring, "P2P") != 0 ? backend->valuestring : "P2P");
	}
	mu_md_invalidate_remote(p->md, agent->valuestring);
	mu__free(blob);
	cJSON_Delete(caps);
	cJSON_Delete(o);
	return rc;
}

/* How many of key the summary's server_info lists (registered, free or
 * in a session): TVM's servers and ours report "server:KEY". */
static int registered(const cJSON *servers, const char *key)
{
	const cJSON *it;
	int n = 0;

	cJSON_ArrayForEach(it, servers) {
		const cJSON *k = cJSON_GetObjectItemCaseSensitive(it, "key");

		n += cJSON_IsString(k) && strncmp(k->valuestring, "server:", 7) == 0 &&
		     strcmp(k->valuestring + 7, key) == 0;
	}
	return n;
}

/* A queue's count ("free", "pending"), 0 when absent. */
static int queue_count(const cJSON *q, const char *what)
{
	int v = 0;

	(void)mu__json_int(cJSON_GetObjectItemCaseSensitive(q, what), 0, INT_MAX, &v);
	return v;
}

/* The keys devices serve, as '"a" (1 of 2 free), ...' (at most 8); how
 * many there are. */
static int other_keys(const cJSON *st, char *out, size_t n)
{
	const cJSON *queues = cJSON_GetObjectItemCaseSensitive(st, "queue_info"), *q;
	const cJSON *servers = cJSON_GetObjectItemCaseSensitive(st, "server_info");
	size_t at = 0;
	int shown = 0;

	out[0] = '\0';
	cJSON_ArrayForEach(q, queues) {
		int reg = registered(servers, q->string), k;

		if (reg == 0 && queue_count(q, "free") == 0)
			continue; /* a key only asked for (this one, a moment ago) */
		k = shown == 8 ? -1 : snprintf(out + at, n - at, "%s\"%s\" (%d of %d free)",
		                               shown > 0 ? ", " : "", q->string,
		                               queue_count(q, "free"), reg);
		if (k < 0 || (size_t)k + 6 >= n - at) {
			snprintf(out + at, n - at, ", ...");
			return shown + 1;
		}
		at += (size_t)k;
		shown++;
	}
	return shown;
}

/*
 * What the tracker has of the pool's key, read from its summary on a
 * connection of its own: 'it has 2 devices of key "k" (1 granted to this
 * job), 0 free (1 request of another job waits)', or 'it has no device of
 * key "k"; its keys: ...'. ours: the devices this job holds now. *n_free
 * gets the free count. "" when the summary cannot be had.
 */
static void tracker_has(const mu__devpool_t *p, int ours, char *out, size_t n, int *n_free)
{
	mu_tracker_client_t *tc = NULL;
	char *text = NULL, keys[400], mine[48] = "";
	cJSON *st = NULL;
	const cJSON *q;
	int reg, pending;

	out[0] = '\0';
	*n_free = 0;
	if (mu_tracker_client_connect(p->thost, p->tport, 5000, &tc) != 0 ||
	    mu_tracker_client_summary(tc, 5000, &text) != 0 ||
	    mu__json_parse(text, strlen(text), &st) != 0) {
		mu_tracker_client_close(tc);
		mu_free(text);
		return;
	}
	q = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(st, "queue_info"),
	                                     p->key);
	reg = registered(cJSON_GetObjectItemCaseSensitive(st, "server_info"), p->key);
	*n_free = queue_count(q, "free");
	pending = queue_count(q, "pending");
	if (reg == 0 && *n_free == 0 && other_keys(st, keys, sizeof(keys)) == 0) {
		snprintf(out, n, "it has no devices at all (none registered)");
	} else if (reg == 0 && *n_free == 0) {
		snprintf(out, n, "it has no device of key \"%s\"; its keys: %s", p->key, keys);
	} else {
		if (ours > 0)
			snprintf(mine, sizeof(mine), " (%d granted to this job)", ours);
		snprintf(out, n, "it has %d device%s of key \"%s\"%s, %d free%s", reg,
		         reg == 1 ? "" : "s", p->key, mine, *n_free,
		         pending == 0 ? "" : pending == 1 ? " (1 request of another job waits)"
		                                          : " (requests of other jobs wait)");
	}
	cJSON_Delete(st);
	mu_free(text);
	mu_tracker_client_close(tc);
}

/* Why the devices did not all come: granted of want, rc the first
 * failure. A wait that ran out says what the tracker has. */
static int request_error(mu__devpool_t *p, int rc, int granted, int want, char *err, size_t el)
{
	char has[768];
	int nfree;

	if (rc == -ECONNREFUSED) {
		snprintf(err, el, "cannot reach the tracker at %s:%d: connection refused (is a "
		         "tracker running there?)", p->thost, p->tport);
		return rc;
	}
	if (rc != -ETIMEDOUT) {
		snprintf(err, el, "no device of key \"%s\" from the tracker at %s:%d: %s", p->key,
		         p->thost, p->tport, mu_strerror(rc));
		return rc;
	}
	tracker_has(p, granted, has, sizeof(has), &nfree);
	if (granted > 0)
		snprintf(err, el, "only %d of %d devices of key \"%s\" came from the tracker at %s:%d "
		         "within %.0f s (the wait is --device-timeout)%s%s", granted, want, p->key,
		         p->thost, p->tport, p->request_timeout_ms / 1000.0, has[0] ? ": " : "", has);
	else
		snprintf(err, el, "no device of key \"%s\" came from the tracker at %s:%d within "
		         "%.0f s (the wait is --device-timeout)%s%s", p->key, p->thost, p->tport,
		         p->request_timeout_ms / 1000.0, has[0] ? ": " : "", has);
	return rc;
}

/*
 * Before asking for devices: reach the tracker once, so that one not
 * running is said at once (the requests would retry, then report the
 * wait) and something else at its port is named; and say when it has
 * fewer free devices of the key than wanted, since then the wait is for
 * devices yet to register or be released.
 */
static int tracker_check(mu__devpool_t *p, int want, char *err, size_t el)
{
	mu_tracker_client_t *tc = NULL;
	char has[768], what[256] = "";
	int rc, nfree;

	rc = mu_tracker_client_connect(p->thost, p->tport, 10000, &tc);
	mu_tracker_client_close(tc);
	if (rc == -ECONNREFUSED)
		return request_error(p, rc, 0, want, err, el);
	if (rc == MU_EEOF || rc == MU_EBADMAGIC || rc == -ECONNRESET || rc == -ETIMEDOUT)
		(void)mu__sniff(p->thost, p->tport, 1000, what, sizeof(what));
	if (rc != 0) {
		snprintf(err, el, "cannot reach a tracker at %s:%d: %s%s%s%s", p->thost, p->tport,
		         mu_strerror(rc), what[0] != '\0' ? "; it is " : "", what,
		         what[0] != '\0' ? ", not a TVM RPC tracker" : "");
		return rc;
	}
	tracker_has(p, 0, has, sizeof(has), &nfree);
	if (has[0] != '\0' && nfree < want)
		mu__devpool_say(p, "  %s; waiting up to %.0f s (--device-timeout) for %s", has,
		                p->request_timeout_ms / 1000.0, nfree > 0 ? "more" : "one");
	return 0;
}

/* Learn what a granted device offers: INFO, then its md metadata. */
static int describe_device(mu__devpool_t *p, mu__device_t *d, char *err, size_t el)
{
	mu__msg_t m = {MU_MSG_INFO, 0, 1, 0, 0, 0};
	mu__chan_t ch;
	char *info = NULL;
	int rc;

	snprintf(d->addr, sizeof(d->addr), "%s", mu_session_peer(d->sess));
	mu__chan_init(&ch, mu_session_stream(d->sess), d->sess, p->io_timeout_ms,
	              p->max_frame);
	rc = mu__device_exchange(&ch, &m, NULL, MU_MSG_INFO, &info, err, el, d->addr);
	if (rc == 0)
		rc = fetch_caps(p, d, info, err, el);
	mu__free(info);
	if (rc != 0) {
		mu_session_close(d->sess);
		d->sess = NULL;
	}
	return rc;
}

/* Ask the tracker for one more device and learn what it offers. */
int mu__devpool_get(mu__devpool_t *p, mu__device_t *d, char *err, size_t el)
{
	/* a thread of its own too, so the wait shows on a terminal */
	return mu__devpool_get_many(p, d, 1, err, el);
}

/* The requests' shared count of answers, for the progress line. */
typedef struct {
	uv_mutex_t lock;
	uv_cond_t cond;
	int answered, granted;
} tally_t;

typedef struct {
	mu__devpool_t *p;
	mu__device_t *d;
	tally_t *tally;
	int rc;
	uv_thread_t th;
} req_t;

static void request_main(void *arg)
{
	req_t *r = arg;

	r->rc = mu_session_request(r->p->thost, r->p->tport, r->p->key, r->p->priority,
	                           0, 5, r->p->o.sec, r->p->request_timeout_ms, &r->d->sess);
	uv_mutex_lock(&r->tally->lock);
	r->tally->answered++;
	r->tally->granted += r->rc == 0;
	uv_cond_signal(&r->tally->cond);
	uv_mutex_unlock(&r->tally->lock);
}

/* Until every request of `started` is answered: "1 of 3 devices; waiting
 * for key K, 14 s" on a terminal, redrawn each second and on each grant. */
static void await_grants(mu__devpool_t *p, tally_t *t, int started, int n)
{
	mu__progress_t pr;
	int64_t t0 = mu__now_ms();
	int shown = -1;

	mu__progress_start(&pr, 0, "devices");
	uv_mutex_lock(&t->lock);
	while (t->answered < started) {
		int granted = t->granted;

		uv_mutex_unlock(&t->lock);
		mu__progress_text(&pr, granted != shown, "%d of %d device%s; waiting for key %s, %.0f s",
		                  granted, n, n == 1 ? "" : "s", p->key,
		                  (double)(mu__now_ms() - t0) / 1000.0);
		shown = granted;
		uv_mutex_lock(&t->lock);
		if (t->answered < started && t->granted == granted)
			(void)uv_cond_timedwait(&t->cond, &t->lock, 1000000000ull);
	}
	uv_mutex_unlock(&t->lock);
	mu__progress_end(&pr);
}

/*
 * All n requests at once: the tracker queues them by priority, so a
 * higher-priority job gets the devices freed first, all of them, rather
 * than one in turn with whoever else is waiting.
 */
int mu__devpool_get_many(mu__devpool_t *p, mu__device_t *devs, int n, char *err, size_t el)
{
	req_t *r = mu__calloc((size_t)n, sizeof(*r));
	tally_t tally = {.answered = 0, .granted = 0};
	int rc = 0, started = 0;

	if (r == NULL)
		return MU_ENOMEM;
	if ((rc = tracker_check(p, n, err, el)) != 0) {
		mu__free(r);
		return rc;
	}
	if (uv_mutex_init(&tally.lock) != 0) {
		mu__free(r);
		return MU_ENOMEM;
	}
	if (uv_cond_init(&tally.cond) != 0) {
		uv_mutex_destroy(&tally.lock);
		mu__free(r);
		return MU_ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		memset(&devs[i], 0, sizeof(devs[i]));
		memset(&r[i], 0, sizeof(r[i]));
		r[i].p = p;
		r[i].d = &devs[i];
		r[i].tally = &tally;
		if (uv_thread_create(&r[i].th, request_main, &r[i]) != 0) {
			r[i].rc = MU_ENOMEM;
			break;
		}
		started++;
	}
	await_grants(p, &tally, started, n);
	for (int i = 0; i < started; i++)
		uv_thread_join(&r[i].th);
	uv_cond_destroy(&tally.cond);
	uv_mutex_destroy(&tally.lock);
	for (int i = 0; i < n && rc == 0; i++)
		if ((rc = r[i].rc) != 0 || i >= started)
			request_error(p, rc != 0 ? rc : MU_ENOMEM, tally.granted, n, err, el);
	for (int i = 0; i < started && rc == 0; i++)
		rc = describe_device(p, &devs[i], err, el);
	mu__free(r);
	return rc;
}

int mu__device_holds(const mu__device_t *d, uint64_t digest)
{
	for (int i = 0; i < d->nheld; i++)
		if (d->held[i] == digest)
			return 1;
	return 0;
}

