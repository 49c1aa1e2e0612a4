/* SPDX-License-Identifier: MIT */
/*
 * The main job's lifecycle, coordinator side, for any stage kind: request
 * the devices of a key from the tracker (all at once, so the job's
 * priority counts for each), learn each one's budget from its metadata
 * (devices.c), have the kind cut its work to those budgets, give each
 * stage its device (ASSIGN; its weights from the device's own copy when
 * it holds one and that is allowed, else streamed by the kind; LOAD), and
 * hand the sessions to the kind's coordinator. A device lost later is
 * replaced by another one, which sets up that stage alone. The steps a
 * kind does its own way are its mu__cluster_kind_t (cluster_int.h).
 */
#include <stdio.h>
#include <string.h>

#include "core/alloc_int.h"
#include "core/time_int.h"
#include "pipeline/cluster_int.h"

/* Give device d stage i; on success its session is the coordinator's. */
static int assign(mu__cluster_t *c, int i, mu__device_t *d, char *err, size_t el)
{
	int stream = c->o.weights == MU_WEIGHTS_STREAM || !mu__device_holds(d, c->o.digest), rc;
	mu__msg_t m = {MU_MSG_ASSIGN, 0, 2, 0, 0, 0};
	char *body = NULL, *reply = NULL;
	double t0 = mu__clock_ms();
	mu__chan_t ch;

	if (c->o.weights == MU_WEIGHTS_LOCAL && stream) {
		snprintf(err, el, "device %s holds no copy of the %s, and weights must be local", d->addr,
		         c->kind->noun);
		return MU_EARG;
	}
	if ((rc = c->kind->assign(c->ud, i, stream, &body, err, el)) != 0)
		return rc;
	mu__chan_init(&ch, mu_session_stream(d->sess), d->sess, c->pool.io_timeout_ms,
	              c->pool.max_frame);
	rc = mu__device_exchange(&ch, &m, body, MU_MSG_READY, &reply, err, el, d->addr);
	mu__free(body);
	if (rc == 0 && stream) {
		rc = c->kind->stream(c->ud, i, &ch, reply, d->addr, err, el);
		mu__free(reply);
		reply = NULL;
		m = (mu__msg_t){MU_MSG_LOAD, 0, 3, 0, 0, 0};
		if (rc == 0)
			rc = mu__device_exchange(&ch, &m, NULL, MU_MSG_READY, &reply, err, el, d->addr);
	}
	if (rc == 0)
		rc = c->kind->set(c->ud, i, d->sess, d->addr, reply, err, el);
	mu__free(reply);
	if (rc != 0)
		return rc;
	d->sess = NULL; /* the coordinator's now */
	snprintf(c->placed[i].addr, sizeof(c->placed[i].addr), "%s", d->addr);
	c->placed[i].budget = d->budget;
	c->placed[i].streamed = stream;
	c->kind->placed(c->ud, i, d->addr, stream, mu__clock_ms() - t0);
	return 0;
}

/* The kind's cut of its work over the devices granted, then each stage
 * onto its device. */
static int place(mu__cluster_t *c, mu__device_t *devs, int nd, char *err, size_t el)
{
	uint64_t *budget = mu__calloc((size_t)nd, sizeof(*budget));
	int *device = mu__calloc((size_t)nd, sizeof(*device)), rc;

	rc = budget == NULL || device == NULL ? MU_ENOMEM : 0;
	for (int i = 0; rc == 0 && i < nd; i++)
		budget[i] = devs[i].budget;
	if (rc == 0)
		rc = c->kind->plan(c->ud, budget, nd, device, &c->n, err, el);
	if (rc == 0 && (c->placed = mu__calloc((size_t)c->n, sizeof(*c->placed))) == NULL)
		rc = MU_ENOMEM;
	for (int i = 0; rc == 0 && i < c->n; i++)
		rc = assign(c, i, &devs[device[i]], err, el);
	if (rc == 0)
		rc = c->kind->check(c->ud, err, el);
	mu__free(budget);
	mu__free(device);
	return rc;
}

int mu__cluster_start(mu__cluster_t *c, const mu__cluster_kind_t *kind, void *ud,
                      const mu__cluster_opts_t *o, char *err, size_t el)
{
	const mu__devpool_opts_t *po = &o->pool;
	mu__device_t *devs = NULL;
	int rc;

	memset(c, 0, sizeof(*c));
	c->kind = kind;
	c->ud = ud;
	c->o = *o;
	if ((rc = mu__devpool_init(&c->pool, po, err, el)) != 0)
		return rc;
	if ((devs = mu__calloc((size_t)o->devices, sizeof(*devs))) == NULL)
		return MU_ENOMEM;
	mu__devpool_say(&c->pool, "asking the tracker at %s:%d for %d device%s of key \"%s\" "
	                "(priority %g)", po->tracker_host, po->tracker_port, o->devices,
	                o->devices == 1 ? "" : "s", po->key, po->priority);
	rc = mu__devpool_get_many(&c->pool, devs, o->devices, err, el);
	if (rc == 0)
		rc = place(c, devs, o->devices, err, el);
	for (int i = 0; i < o->devices; i++) /* granted, not used: back to the pool */
		if (devs[i].sess != NULL) {
			if (rc == 0)
				mu__devpool_say(&c->pool, "  %s is not needed (%.1f MiB budget): released",
				                devs[i].addr, (double)devs[i].budget / 1048576.0);
			mu_session_close(devs[i].sess);
		}
	mu__free(devs);
	return rc;
}

void mu__cluster_free(mu__cluster_t *c)
{
	mu__devpool_free(&c->pool);
	mu__free(c->placed);
	memset(c, 0, sizeof(*c));
}

int mu__cluster_replace(mu__cluster_t *c, int k, char *err, size_t el)
{
	uint64_t want = c->kind->need(c->ud, k);
	char where[64];
	mu__device_t d;
	int rc = 0;

	c->kind->range(c->ud, k, where, sizeof(where));
	mu__devpool_say(&c->pool, "device %s (stage %d, %s) is lost; asking the tracker for another",
	                c->placed[k].addr, k, where);
	if (c->replacements >= c->o.max_replacements) {
		snprintf(err, el, "%d lost device%s replaced already, as many as allowed",
		         c->replacements, c->replacements == 1 ? "" : "s");
		return MU_ETOOBIG;
	}
	for (int tries = 0; tries < 3; tries++) {
		if ((rc = mu__devpool_get(&c->pool, &d, err, el)) != 0)
			return rc;
		if (d.budget < want) {
			rc = MU_ETOOBIG;
			snprintf(err, el, "no device with %.1f MiB for stage %d came (%s has %.1f MiB)",
			         (double)want / 1048576.0, k, d.addr, (double)d.budget / 1048576.0);
		} else if ((rc = assign(c, k, &d, err, el)) == 0 &&
		           (rc = c->kind->check(c->ud, err, el)) == 0) {
			c->placed[k].replaced++;
			c->replacements++;
			return 0;
		}
		mu__devpool_say(&c->pool, "  %s: %s", d.addr, err);
		if (d.sess != NULL)
			mu_session_close(d.sess);
	}
	return rc;
}
