/* SPDX-License-Identifier: MIT */
/*
 * One model split across machines: stages, the stage server, devices,
 * the coordinator and clusters. The model and its plans are the model
 * layer's (include/muster/model.h, included here).
 *
 * A stage holds only its own weights and runs its nodes
 * for whoever sends it the tensors it consumes. A coordinator holds no
 * weights: it sends each stage its inputs, collects what the stage hands
 * on, and relays those named tensors to the stages that read them.
 *
 * Stages and coordinators speak muster's pipeline messages (a 40-byte
 * header around an rlx tensor frame or a JSON body; docs/protocols/
 * pipeline.md), over a plain TCP connection to `muster stage` or over a
 * session opened through the tracker.
 *
 * Calls that can fail for a reason a person must read take `err` (errlen
 * bytes, may be NULL) and write the cause there: which node, which tensor,
 * which stage at which address, and what went wrong.
 */
#ifndef MUSTER_PIPELINE_H
#define MUSTER_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "muster/common.h"
#include "muster/metrics.h"
#include "muster/model.h"
#include "muster/server.h"
#include "muster/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- stages ---- */

typedef struct mu_stage_s mu_stage_t;

/*
 * Load stage i of the balanced n-way split of the model in dir (by weight
 * bytes): only its own weights are read and made resident.
 */
MU_EXTERN int mu_stage_load(const char *dir, int i, int n, mu_stage_t **out,
                            char *err, size_t errlen);
/* The same with the node range given: stage i of n is nodes [first, last). */
MU_EXTERN int mu_stage_load_range(const char *dir, int i, int n, int first,
                                  int last, mu_stage_t **out, char *err,
                                  size_t errlen);
/*
 * Run the stage on inputs (its boundary inputs by name); its outputs are
 * appended to out in the stage's order. Thread-safe: forwards on one
 * stage run one at a time.
 */
MU_EXTERN int mu_stage_forward(mu_stage_t *s, const mu_tensor_list_t *inputs,
                               mu_tensor_list_t *out, char *err,
                               size_t errlen);
/* Threads its forwards split their products over, and what OpenBLAS's own
 * count must be for the promised bits: see mu_model_set_threads. Waits for
 * a forward under way. */
MU_EXTERN int mu_stage_set_threads(mu_stage_t *s, int threads);
/* The stage's description as JSON text (the INFO message's body). */
MU_EXTERN const char *mu_stage_describe(const mu_stage_t *s);
MU_EXTERN void mu_stage_free(mu_stage_t *s);

typedef struct mu_stage_server_s mu_stage_server_t;

typedef struct {
	size_t struct_size;       /* set by mu_stage_server_opts_init */
	const char *host;        /* default "127.0.0.1" */
	int port;                /* default 0: any free port */
	unsigned long requests;  /* stop after this many forwards; 0: never */
	int max_conns;           /* connections served at once; default 64. At
	                          * the limit a newcomer displaces the oldest
	                          * connection that never completed a message,
	                          * or is refused (ERROR, MU_ETOOBIG) */
	int io_timeout_ms;       /* a read or write that makes no progress for
	                          * this long closes the connection; 30000 */
	int idle_timeout_ms;     /* a connection idle between messages this
	                          * long is closed (ERROR, -ETIMEDOUT); at the
	                          * limit the longest idle makes room for a
	                          * newcomer. Default 300000; <= 0 never */
	int silent_timeout_ms;   /* a connection that sends nothing this long
	                          * after connecting is closed (ERROR,
	                          * -ETIMEDOUT); default 30000; <= 0 never */
	uint64_t max_frame_bytes;/* tensor data per message; default 1 GiB */
	const char *name;        /* for logs and errors: "stage 2/3" */
	mu_budget_t budget;      /* what each client may make the server hold
	                          * (replies it has not read, the message it is
	                          * sending) */
	mu_metrics_t *metrics;   /* count into this registry (muster_stage_*,
	                          * docs/metrics.md); NULL (default): nothing.
	                          * It must outlive the server */
	const mu_secure_t *sec;  /* TLS / shared secret (muster/stream.h);
	                          * NULL: plain TCP. Must outlive the server */
	int body_timeout_ms;     /* a message must arrive whole within this
	                          * of its first byte, however it trickles;
	                          * default 120000; <= 0 never */
} mu_stage_server_opts_t;

MU_EXTERN void mu_stage_server_opts_init_size(mu_stage_server_opts_t *o, size_t size);
#define mu_stage_server_opts_init(o) mu_stage_server_opts_init_size((o), sizeof(*(o)))
/*
 * Serve a loaded stage (borrowed; keep it until the server is freed).
 * Returns once bound: the stage is resident, so this is when to announce.
 */
MU_EXTERN int mu_stage_server_start(mu_stage_t *s,
                                    const mu_stage_server_opts_t *o,
                                    mu_stage_server_t **out);
MU_EXTERN int mu_stage_server_port(const mu_stage_server_t *srv);
/* Forwards served so far. */
MU_EXTERN unsigned long mu_stage_server_forwards(mu_stage_server_t *srv);
/* Wait until `requests` forwards were served or the server was stopped. */
MU_EXTERN void mu_stage_server_wait(mu_stage_server_t *srv);
/* Stop accepting, shut every connection down, join. Safe from any thread. */
MU_EXTERN void mu_stage_server_stop(mu_stage_server_t *srv);
MU_EXTERN void mu_stage_server_free(mu_stage_server_t *srv);

/* ---- devices (the main job) ---- */

/*
 * A device serves stages to coordinators over tracker sessions: give
 * mu_device_session to mu_server_opts_t.on_session with the device as ud.
 * In a session it takes the stage the coordinator assigns (loaded from a
 * model directory it holds, found by digest, or built from weights the
 * coordinator streams), within its memory budget, then serves forwards;
 * the stage is freed when the session ends. A session whose first bytes
 * are not a pipeline message is echoed (what `muster request` shows).
 */
typedef struct mu_device_s mu_device_t;

typedef struct {
	size_t struct_size;       /* set by mu_device_opts_init */
	const char *key;            /* the tracker key it registers under */
	uint64_t mem_budget;        /* bytes of weights; 0: MemAvailable now */
	int threads;                /* threads per forward, default 1: a graph
	                               stage's products (mu_stage_set_threads),
	                               the kernels' pool for an LLM stage */
	const char *const *models;  /* models held here: graph model
	                               directories, or decoder LLM checkpoints
	                               (GGUF, HF directory, llama2.c) */
	int nmodels;
	const char *md_host;        /* metadata agent's P2P listener; 0.0.0.0 */
	int md_port;                /* default 0: any */
	const char *cache_dir;      /* where streamed LLM tensors are kept under
	                               their SHA-256 for later runs; NULL: a
	                               private directory per session, removed */
	mu_metrics_t *metrics;      /* its metadata agent counts here
	                               (muster_md_*); NULL: nothing */
} mu_device_opts_t;

MU_EXTERN void mu_device_opts_init_size(mu_device_opts_t *o, size_t size);
#define mu_device_opts_init(o) mu_device_opts_init_size((o), sizeof(*(o)))
/* Opens each held model once (to know its digest); loads nothing. */
MU_EXTERN int mu_device_new(const mu_device_opts_t *o, mu_device_t **out,
                            char *err, size_t errlen);
/*
 * Publish the device's capabilities as md metadata, once its session
 * address ("host:port", what the tracker hands out; one others can dial,
 * such as mu_server_host's, never a wildcard) is known: agent
 * "muster-device/KEY/ADDR", through P2P (a listener on md_host:md_port)
 * and, when the environment configures one (MUSTER_ETCD_ENDPOINTS, ...),
 * the store. Call it before the server registers (mu_server_opts_t's
 * defer_register), so no coordinator is granted a device whose metadata
 * is not there yet: mu_device_start does it all in that order. The JSON: {"key", "address", "mem_budget", "threads",
 * "models": [{"dir", "digest", "param_bytes"}], "muster", "md_address"};
 * md_address is the P2P listener as others dial it (ADDR's host when
 * md_host is a wildcard).
 */
MU_EXTERN int mu_device_publish(mu_device_t *d, const char *addr, char *err,
                                size_t errlen);
/*
 * Serve the device: start a session server with the options o (the
 * device's handler replaces o's on_session and ud, and registration is
 * held back), publish the device (mu_device_publish) at the address the
 * tracker will hand out (mu_server_host's, and the bound port), and only
 * then register, so that no coordinator is granted the device before its
 * metadata is there. *out is the running server: wait on it, stop and
 * free it before the device. On failure nothing is left running, *out is
 * NULL, and err says which step failed: mu_server_start's codes (MU_EBIND
 * ...) or mu_device_publish's. Any thread.
 */
MU_EXTERN int mu_device_start(mu_device_t *d, const mu_server_opts_t *o,
                              mu_server_t **out, char *err, size_t errlen);
MU_EXTERN const char *mu_device_describe(const mu_device_t *d);
MU_EXTERN void mu_device_session(mu_session_t *s, void *device);
MU_EXTERN void mu_device_free(mu_device_t *d);
/* MemAvailable of /proc/meminfo, in bytes (0 when unknown). */
MU_EXTERN uint64_t mu_mem_available(void);

/* ---- the coordinator ---- */

typedef struct mu_coord_s mu_coord_t;

typedef struct {
	size_t struct_size;       /* set by mu_coord_opts_init */
	int connect_timeout_ms;  /* retrying each stage's connect; 10000 */
	int io_timeout_ms;       /* each read/write's progress; 60000 */
	uint64_t max_frame_bytes;/* largest reply accepted; default 1 GiB */
	const mu_secure_t *sec;  /* TLS / shared secret toward the stages and
	                          * devices (muster/stream.h); NULL: plain */
} mu_coord_opts_t;

MU_EXTERN void mu_coord_opts_init_size(mu_coord_opts_t *o, size_t size);
#define mu_coord_opts_init(o) mu_coord_opts_init_size((o), sizeof(*(o)))

/*
 * Connect to the stage servers addrs[0..n) ("host:port", in stage order),
 * ask each what it serves, and check they are one model's consecutive
 * stages, together covering the whole graph.
 */
MU_EXTERN int mu_coord_connect(const char *const *addrs, int n,
                               const mu_coord_opts_t *o, mu_coord_t **out,
                               char *err, size_t errlen);

typedef struct {
	double load_ms;          /* the stage's own load time */
	uint64_t resident_bytes; /* its weights in memory */
	uint64_t rss_bytes;      /* its process's resident set at load */
	double forward_ms;       /* total wall time of its forwards, as seen
	                          * from here (send + compute + receive) */
	double compute_ms;       /* total of the stage's own compute time */
	uint64_t bytes_in;       /* tensor bytes sent to it */
	uint64_t bytes_out;      /* tensor bytes received from it */
	unsigned long forwards;
} mu_stage_timing_t;

MU_EXTERN int mu_coord_stages(const mu_coord_t *c);
/* The digest of the model the stages serve (see mu_model_digest). */
MU_EXTERN uint64_t mu_coord_digest(const mu_coord_t *c);
/* "host:port" of stage i. */
MU_EXTERN const char *mu_coord_addr(const mu_coord_t *c, int i);
/* The stage's INFO reply (JSON text). */
MU_EXTERN const char *mu_coord_describe(const mu_coord_t *c, int i);
/* Accumulated figures of stage i since connect. */
MU_EXTERN void mu_coord_timing(const mu_coord_t *c, int i,
                               mu_stage_timing_t *t);

/*
 * One forward: inputs (the model's, by name) through every stage; the
 * model's outputs are appended to out. On a stage's failure, err names the
 * stage, its address and the cause (its own error text when it sent one).
 */
MU_EXTERN int mu_coord_forward(mu_coord_t *c, const mu_tensor_list_t *inputs,
                               mu_tensor_list_t *out, char *err,
                               size_t errlen);
/*
 * m forwards pipelined: up to one per stage in flight, so stage k works on
 * input j while stage k+1 works on input j-1. out[j] gets input j's
 * outputs. The first failure stops the run and is reported.
 */
MU_EXTERN int mu_coord_forward_many(mu_coord_t *c,
                                    const mu_tensor_list_t *inputs, int m,
                                    mu_tensor_list_t *out, char *err,
                                    size_t errlen);
/* Say goodbye to every stage and close. NULL is a no-op. */
MU_EXTERN void mu_coord_close(mu_coord_t *c);

/* ---- a cluster found through the tracker (the main job) ---- */

typedef struct mu_cluster_s mu_cluster_t;

typedef enum {
	MU_WEIGHTS_AUTO = 0,   /* from a device's own copy when it has one */
	MU_WEIGHTS_LOCAL = 1,  /* every device must hold a copy */
	MU_WEIGHTS_STREAM = 2  /* always streamed from the coordinator */
} mu_weights_t;

typedef struct {
	size_t struct_size;       /* set by mu_cluster_opts_init */
	const char *tracker_host;  /* default "127.0.0.1" */
	int tracker_port;          /* default 9190 */
	const char *key;           /* device key (required) */
	int devices;               /* how many to request; default 1 */
	double priority;           /* of the requests (TVM's: higher first) */
	int request_timeout_ms;    /* to get each device; default 30000 */
	mu_weights_t weights;
	int max_replacements;      /* devices lost mid-run replaced; default 3 */
	const mu_coord_opts_t *coord; /* the coordinator's; NULL: defaults.
	                           * A pointer, so mu_coord_opts_t may grow */
	/* narration of each step (may be NULL), one line at a time */
	void (*say)(void *ud, const char *line);
	void *ud;
} mu_cluster_opts_t;

MU_EXTERN void mu_cluster_opts_init_size(mu_cluster_opts_t *o, size_t size);
#define mu_cluster_opts_init(o) mu_cluster_opts_init_size((o), sizeof(*(o)))

/*
 * Request the devices, fetch their capabilities (md), split the model so
 * each stage fits its device's memory budget (devices not needed are
 * released), and load each stage on its device. MU_ETOOBIG with the
 * numbers in err when the model does not fit the devices granted. m must
 * outlive the cluster (weights are streamed from its mapped file).
 */
MU_EXTERN int mu_cluster_start(mu_model_t *m, const mu_cluster_opts_t *o,
                               mu_cluster_t **out, char *err, size_t errlen);
/*
 * n forwards (pipelined when n > 1; see mu_coord_forward_many). A device
 * lost on the way is replaced by another from the tracker, its stage
 * loaded there, and the forwards run again (up to max_replacements).
 */
MU_EXTERN int mu_cluster_forward_many(mu_cluster_t *c,
                                      const mu_tensor_list_t *inputs, int n,
                                      mu_tensor_list_t *out, char *err,
                                      size_t errlen);

typedef struct {
	const char *address;       /* the device's session address */
	uint64_t budget;           /* its memory budget */
	int streamed;              /* weights streamed (else its own copy) */
	int replaced;              /* times this stage moved to a new device */
	int first, last;           /* nodes [first, last) */
	uint64_t param_bytes;
	mu_stage_timing_t timing;
} mu_cluster_stage_t;

MU_EXTERN int mu_cluster_stages(const mu_cluster_t *c);
MU_EXTERN void mu_cluster_stage(const mu_cluster_t *c, int i,
                                mu_cluster_stage_t *out);
MU_EXTERN int mu_cluster_replacements(const mu_cluster_t *c);
/* Close every session (the devices register as free again). */
MU_EXTERN void mu_cluster_close(mu_cluster_t *c);

#ifdef __cplusplus
}
#endif
#endif
