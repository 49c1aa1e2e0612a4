/* SPDX-License-Identifier: MIT */
/*
 * The registrar: keeps the server registered with its tracker, forever.
 *
 * As TVM's servers do (spec §8): UPDATE_INFO {"key": "server:KEY", "addr":
 * [custom_addr or null, port]}, then PUT a fresh matchkey "KEY:0.<digits>";
 * every poll period ask GET_PENDING_MATCHKEYS; when the current matchkey has
 * been missing from that list four polls in a row (handed out, but nobody
 * came: about 8 s), make a new one and PUT it; after each session, PUT a new
 * one. While a session runs the server offers nothing, but unlike TVM's it
 * keeps polling, so a tracker restarted meanwhile sees the device at once.
 *
 * Unlike TVM's Python server, which stops registering for good after 60 s
 * without a tracker, this thread retries with capped exponential backoff
 * until the server stops, and registers again the moment a tracker (the
 * same one restarted, or another on that address) answers.
 *
 * A tracker may refuse a PUT (TVM's FAIL code, -1: a muster tracker does
 * when one of its limits is met, its key table full, say). TVM's servers
 * assert on it; this one says so in a warning and offers again on the same
 * connection with the same capped backoff, so it is never silently absent
 * from the tracker while it believes itself registered.
 */
#include <string.h>

#include "muster/tracker.h"
#include "core/log_int.h"
#include "core/rand_int.h"
#include "server/server_int.h"

#define CALL_MS 5000  /* bound on each tracker call */
#define MISSES_BEFORE_RENEW 4

/* Under s->lock: a fresh matchkey becomes the current one. */
static void renew_matchkey(mu_server_t *s)
{
	if (mu__random_key(s->key, s->matchkey, sizeof(s->matchkey)) != 0)
		s->matchkey[0] = '\0'; /* no randomness: offer nothing, retry later */
}

/*
 * Sleep up to `secs`, waking early for a stop or the end of a session.
 * Returns with s->lock held.
 */
static void wait_locked(mu_server_t *s, double secs)
{
	uint64_t ns = (uint64_t)(secs * 1e9);

	uv_mutex_lock(&s->lock);
	if (!s->stopping && !s->session_ended)
		uv_cond_timedwait(&s->cond, &s->lock, ns);
}

static int put_current(mu_server_t *s, mu_tracker_client_t *c)
{
	char mk[MU_MATCHKEY_MAX];
	int rc;

	uv_mutex_lock(&s->lock);
	memcpy(mk, s->matchkey, sizeof(mk));
	uv_mutex_unlock(&s->lock);
	if (mk[0] == '\0')
		return 0;
	rc = mu_tracker_client_put(c, s->key, s->port, mk, s->opts.custom_addr, CALL_MS);
	if (rc == 0)
		SLOG(s, MU_LOG_INFO, "Offering matchkey %s", mk);
	return rc;
}

/*
 * put_current until the tracker takes it: a refusal (MU_EFAIL) is logged
 * and the offer made again after a capped backoff, waking early for a stop
 * or the end of a session. 0, MU_ESTOPPED, or the failure.
 */
static int offer(mu_server_t *s, mu_tracker_client_t *c)
{
	double backoff = 0.25;
	unsigned refused = 0;
	int rc, stop;

	while ((rc = put_current(s, c)) == MU_EFAIL) {
		refused++;
		SLOG(s, MU_LOG_WARN, "Tracker %s:%d refused to register key %s (refusal %u: one "
		     "of its limits, its log says which); offering again in %.2g s",
		     s->tracker_host, s->opts.tracker_port, s->key, refused, backoff);
		wait_locked(s, backoff);
		stop = s->stopping;
		uv_mutex_unlock(&s->lock);
		if (stop)
			return MU_ESTOPPED;
		backoff = backoff * 2 > s->opts.retry_max ? s->opts.retry_max : backoff * 2;
	}
	if (rc == 0 && refused > 0)
		SLOG(s, MU_LOG_WARN, "Tracker %s:%d took key %s after %u refusals",
		     s->tracker_host, s->opts.tracker_port, s->key, refused);
	return rc;
}

static int still_pending(mu_server_t *s, mu_tracker_client_t *c, int *found)
{
	char mk[MU_MATCHKEY_MAX], **keys;
	size_t n, i;
	int rc;

	uv_mutex_lock(&s->lock);
	memcpy(mk, s->matchkey, sizeof(mk));
	uv_mutex_unlock(&s->lock);
	rc = mu_tracker_client_pending(c, CALL_MS, &keys, &n);
	if (rc != 0)
		return rc;
	*found = 0;
	for (i = 0; i < n && !*found; i++)
		*found = strcmp(keys[i], mk) == 0;
	mu_tracker_strv_free(keys);
	return 0;
}

/* Register on a fresh tracker connection, then keep it. 0 when stopping. */
static int serve_tracker(mu_server_t *s, mu_tracker_client_t *c)
{
	char info_key[300];
	int rc, busy, renew, missed = 0, found;

	snprintf(info_key, sizeof(info_key), "server:%s", s->key);
	rc = mu_tracker_client_update_info(c, info_key, s->opts.custom_addr,
	                                   s->port, CALL_MS);
	if (rc != 0)
		return rc;
	uv_mutex_lock(&s->lock);
	if (!s->busy) {
		renew_matchkey(s); /* a new registration never reuses a key */
		/* a session that ended while the tracker was away is covered by
		 * this fresh key: offering another would register us twice */
		s->session_ended = 0;
	}
	uv_mutex_unlock(&s->lock);
	if ((rc = offer(s, c)) != 0)
		return rc == MU_ESTOPPED ? 0 : rc;
	/* only now: a tracker that refused the PUT has not registered us */
	SLOG(s, MU_LOG_INFO, "Registered with tracker %s:%d as %s",
	     s->tracker_host, s->opts.tracker_port, info_key);
	for (;;) {
		wait_locked(s, s->opts.poll_period);
		if (s->stopping) {
			uv_mutex_unlock(&s->lock);
			return 0;
		}
		renew = s->session_ended;
		s->session_ended = 0;
		busy = s->busy;
		if (renew && !busy)
			renew_matchkey(s);
		uv_mutex_unlock(&s->lock);
		if (renew && !busy) {
			missed = 0;
			if ((rc = offer(s, c)) != 0)
				return rc == MU_ESTOPPED ? 0 : rc;
			continue;
		}
		/* Poll while a session runs too (TVM's servers fall silent):
		 * the answer is moot, but a tracker that went away is noticed,
		 * and the busy device registers again (UPDATE_INFO, no PUT) so
		 * a restarted tracker counts it at once. */
		if ((rc = still_pending(s, c, &found)) != 0)
			return rc;
		if (busy) {
			missed = 0;
			continue;
		}
		missed = found ? 0 : missed + 1;
		if (missed < MISSES_BEFORE_RENEW)
			continue;
		/* handed out, but nobody came: the grant is dead, offer anew */
		SLOG(s, MU_LOG_INFO, "Matchkey was granted but no client came; renewing");
		uv_mutex_lock(&s->lock);
		if (!s->busy)
			renew_matchkey(s);
		uv_mutex_unlock(&s->lock);
		missed = 0;
		if ((rc = offer(s, c)) != 0)
			return rc == MU_ESTOPPED ? 0 : rc;
	}
}

static int stopping(mu_server_t *s)
{
	int v;

	uv_mutex_lock(&s->lock);
	v = s->stopping;
	uv_mutex_unlock(&s->lock);
	return v;
}

void mu__server_registrar(void *arg)
{
	mu_server_t *s = arg;
	double backoff = 0.25;
	int down = 0, rc;

	while (!stopping(s)) {
		mu_tracker_client_t *c;

		rc = mu_tracker_client_connect(s->tracker_host, s->opts.tracker_port,
		                               CALL_MS, &c);
		if (rc == 0) {
			if (down)
				SLOG(s, MU_LOG_WARN, "Tracker %s:%d is back",
				     s->tracker_host, s->opts.tracker_port);
			down = 0;
			backoff = 0.25;
			rc = serve_tracker(s, c);
			mu_tracker_client_close(c);
			if (rc == 0)
				break; /* stopping */
			SLOG(s, MU_LOG_WARN,
			     "Lost tracker %s:%d (%s); registering again as soon as it answers",
			     s->tracker_host, s->opts.tracker_port, mu_strerror(rc));
			down = 1;
		}
		if (!down)
			SLOG(s, MU_LOG_WARN,
			     "Tracker %s:%d unreachable (%s); retrying until it answers",
			     s->tracker_host, s->opts.tracker_port, mu_strerror(rc));
		down = 1;
		wait_locked(s, backoff);
		uv_mutex_unlock(&s->lock);
		backoff = backoff * 2 > s->opts.retry_max ? s->opts.retry_max : backoff * 2;
	}
}
