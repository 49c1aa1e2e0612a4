/* SPDX-License-Identifier: MIT */
/*
 * Devices from the tracker, the coordinator's side (pipeline/devices.c):
 * a pool that requests sessions by key and priority and fetches each
 * device's capabilities through md. Both kinds' clusters use it.
 */
#ifndef MU_PIPELINE_DEVICES_INT_H
#define MU_PIPELINE_DEVICES_INT_H

#include <stddef.h>
#include <stdint.h>

#include "muster/md.h"
#include "muster/pipeline.h"
#include "pipeline/msg_int.h"

typedef struct {
	mu_session_t *sess;     /* NULL once handed on or closed */
	char addr[300];
	uint64_t budget;        /* its memory budget */
	int threads;
	int nheld;
	uint64_t held[64];      /* digests of the models it holds */
} mu__device_t;

typedef struct {
	const char *tracker_host, *key;
	int tracker_port;
	double priority;
	int request_timeout_ms;  /* to get each device */
	int io_timeout_ms;       /* on its session */
	uint64_t max_frame_bytes;
	const mu_secure_t *sec;  /* toward the devices; NULL: plain TCP */
	void (*say)(void *ud, const char *line); /* narration, or NULL */
	void *ud;
} mu__devpool_opts_t;

typedef struct {
	mu__devpool_opts_t o;
	char *key, *thost;
	int tport;
	double priority;
	int request_timeout_ms, io_timeout_ms;
	uint64_t max_frame;
	mu_md_agent_t *md;       /* fetches the devices' metadata */
	void (*say)(void *ud, const char *line);
	void *ud;
} mu__devpool_t;

/* A pool over a tracker and key, with its own md agent. */
int mu__devpool_init(mu__devpool_t *p, const mu__devpool_opts_t *o, char *err, size_t el);
void mu__devpool_free(mu__devpool_t *p);
void mu__devpool_say(const mu__devpool_t *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* One device (a session, what it offers), or n requested at once. */
int mu__devpool_get(mu__devpool_t *p, mu__device_t *d, char *err, size_t el);
int mu__devpool_get_many(mu__devpool_t *p, mu__device_t *devs, int n, char *err, size_t el);
int mu__device_holds(const mu__device_t *d, uint64_t digest);
/* Send a text message on ch and read its reply of type want (text into
 * *reply); an ERROR reply becomes an error with its text in err. */
int mu__device_exchange(mu__chan_t *ch, mu__msg_t *m, const char *body, int want, char **reply,
                        char *err, size_t el, const char *addr);

#endif
