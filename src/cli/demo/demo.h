/* SPDX-License-Identifier: MIT */
/*
 * What `muster demo`'s two shows share (cli/demo/cmd_demo.c): the processes they
 * start, stop and reap, and the tracker they watch.
 */
#ifndef MU_CLI_DEMO_DEMO_H
#define MU_CLI_DEMO_DEMO_H

#include <pthread.h>
#include <sys/types.h>

#include "muster/stream.h"

#define DEMO_MAX_PIDS 8

typedef struct {
	char dir[64];
	char exe[4096];
	pthread_mutex_t lock;     /* pids, npids, stopping: main and signal thread */
	pid_t pids[DEMO_MAX_PIDS];
	int npids;
	int stopping;             /* a signal came: start nothing more */
	int tport;
	/* --secret-file, --tls-*: given to every device server it starts
	 * (sec_args, NULL-terminated) and used by its coordinator (sec) */
	const char *sec_args[9];
	mu_secure_t *sec;
} demo_t;

/* A port nobody uses now (the tracker must have a known one). */
int demo_free_port(void);
/* Start `muster ARGS...` (args[0] is the program) with its output in the
 * demo's log; the command is printed. */
int demo_spawn(demo_t *d, char *const *args);
/* SIGTERM, up to 5 s to exit, then SIGKILL; every one reaped. */
void demo_stop_all(demo_t *d);
void demo_remove_dir(const demo_t *d);
/* Step 2 of both shows: the tracker on a free port (d->tport), its
 * address into targ. */
int demo_start_tracker(demo_t *d, char *targ, size_t n);
/* Wait until the tracker's summary contains needle. */
int demo_wait_summary(int port, const char *needle);
void demo_show_queue(int port);
/* A narration line, indented. */
void demo_narrate(void *ud, const char *line);

/* The generation demo (cli/demo/cmd_demo_llm.c); its exit status. */
int demo_llm(demo_t *d, const char *model, char *err, size_t el);

#endif
