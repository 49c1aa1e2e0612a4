/* SPDX-License-Identifier: MIT */
/*
 * What every part of libmuster shares: the export macro, error codes and
 * their text, the log sink and the allocator hooks.
 *
 * Errors: every call returns int, 0 on success or a negative code. System
 * failures are -errno (-ECONNREFUSED, -ETIMEDOUT, ...); failures that are
 * muster's own are the MU_E* codes below, all in [-1099, -1000] so they never
 * collide with an errno. mu_strerror() names either kind.
 *
 * Reasons in words: a call whose failure a person must be able to read
 * about ("which node, which tensor, which stage at which address")
 * takes `char *err, size_t errlen` as its last two parameters: a buffer
 * of the caller's (NULL for none) that gets the reason on failure,
 * truncated to errlen - 1 bytes; 512 bytes hold any. The code is still
 * the return value. An asynchronous operation's reason travels with its
 * completion instead (mu_md_event_t's detail), since no call is waiting.
 *
 * Global state: the log sink, the progress sink and the allocator are the
 * only process-wide settings. Set them once, before any other muster call,
 * from one thread.
 */
#ifndef MUSTER_COMMON_H
#define MUSTER_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "muster/version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(MU_BUILDING)
#define MU_EXTERN __attribute__((visibility("default")))
#else
#define MU_EXTERN
#endif

enum {
	MU_EPROTO = -1000,    /* peer broke the protocol (bad shape, bad code) */
	MU_EBADMAGIC = -1001, /* wrong magic number in a handshake */
	MU_ETOOBIG = -1002,   /* a length or count over its configured limit */
	MU_EJSON = -1003,     /* text that is not valid JSON */
	MU_EEOF = -1004,      /* peer closed the connection mid-exchange */
	MU_EFAIL = -1005,     /* peer answered with its failure code */
	MU_EMISMATCH = -1006, /* session handshake refused: wrong matchkey */
	MU_ESTOPPED = -1007,  /* the service was stopped while we waited */
	MU_EBIND = -1008,     /* no port in the requested range could be bound */
	MU_EARG = -1009,      /* bad argument from the caller */
	MU_ENOMEM = -1010,    /* allocation failed */
	MU_ERESOLVE = -1011,  /* host name did not resolve */
	MU_EAUTH = -1012,     /* shared-secret handshake failed or refused */
	MU_ETLS = -1013       /* TLS failed: handshake, certificate, or record */
};

/*
 * Text for a code returned by any muster call: muster's own codes, -errno
 * values, or 0 ("success"). Never NULL; the string is static.
 */
MU_EXTERN const char *mu_strerror(int err);

/* Log levels, most severe first. */
typedef enum {
	MU_LOG_ERROR = 0,
	MU_LOG_WARN = 1,
	MU_LOG_INFO = 2,
	MU_LOG_DEBUG = 3
} mu_log_level_t;

/*
 * Receives every log line of the library: the level, the module ("tracker",
 * "net", ...) and the message without a trailing newline. Called from
 * whichever thread logs (a service's loop thread, a caller's thread), so the
 * sink must be thread-safe. The library never writes to stdout or stderr on
 * its own; with no sink installed, log lines are dropped.
 */
typedef void (*mu_log_sink_cb)(mu_log_level_t level, const char *module,
                               const char *msg, void *ud);

/*
 * Install the sink (NULL to drop everything) and the most verbose level that
 * reaches it. Not thread-safe: call before starting anything.
 */
MU_EXTERN void mu_log_set_sink(mu_log_sink_cb cb, void *ud,
                               mu_log_level_t max_level);

/*
 * A ready-made sink that writes "YYYY-mm-dd HH:MM:SS.mmm LEVEL message\n" to
 * stderr (the format TVM's Python tracker uses). ud is ignored.
 */
MU_EXTERN void mu_log_stderr_sink(mu_log_level_t level, const char *module,
                                  const char *msg, void *ud);

/*
 * Progress of the library's long steps, for a program that shows it (the
 * muster command draws a status line on a terminal; the library draws
 * nothing). A step -- streaming a stage's weights to a device, hashing a
 * large checkpoint, waiting for devices -- is one MU_PROGRESS_BEGIN, then
 * any number of MU_PROGRESS_BYTES or MU_PROGRESS_STATE, then one
 * MU_PROGRESS_END, all with the step's id and all from the one thread
 * that runs the step. Steps on different threads interleave.
 */
typedef enum {
	MU_PROGRESS_BEGIN = 0, /* a step starts: what, total */
	MU_PROGRESS_BYTES = 1, /* done of total bytes */
	MU_PROGRESS_STATE = 2, /* where the step stands, in words: state */
	MU_PROGRESS_END = 3    /* the step is over, done or failed */
} mu_progress_kind_t;

typedef struct {
	size_t struct_size;       /* what the library filled: fields past it
	                             are absent (an older library) */
	mu_progress_kind_t kind;
	uint64_t id;              /* the step's, unique in the process */
	const char *what;         /* the step in words: "weights -> HOST:PORT",
	                             "hashing FILE", "devices" */
	uint64_t done;            /* BYTES: bytes so far (the last event of a
	                             step that finished has done == total) */
	uint64_t total;           /* bytes in all; 0 when unknown */
	const char *state;        /* STATE: "1 of 2 devices; waiting for key K,
	                             3 s"; NULL for the other kinds */
	int changed;              /* STATE: more than its clock changed since
	                             the last one (worth showing at once) */
	int64_t elapsed_ms;       /* since the step's BEGIN (monotonic) */
} mu_progress_event_t;

/* Receives each event; the event and its strings live for the call. */
typedef void (*mu_progress_sink_cb)(const mu_progress_event_t *ev, void *ud);

/*
 * Install the sink; NULL (the default) for none, and with none the
 * library reports no progress at all. The sink is called on the step's
 * thread, between pieces of its work: it must be thread-safe and quick.
 * Not thread-safe: call before starting anything, as mu_log_set_sink.
 */
MU_EXTERN void mu_progress_set_sink(mu_progress_sink_cb cb, void *ud);

/*
 * Replace the allocator used by libmuster. All three must be given (NULL
 * restores libc's). Call before anything else; not thread-safe. Tests use
 * it to fail the Nth allocation. The JSON parser underneath (the system's
 * cJSON, which the host program may use too) keeps its own allocator: the
 * library never changes process-wide hooks of another library.
 */
MU_EXTERN void mu_set_allocator(void *(*malloc_fn)(size_t),
                                void *(*realloc_fn)(void *, size_t),
                                void (*free_fn)(void *));

/*
 * Free memory that a muster call handed to the caller (strings, arrays of
 * strings, JSON text). NULL is a no-op.
 */
MU_EXTERN void mu_free(void *p);

/*
 * Options structs grow. Every mu_*_opts_t starts with `size_t struct_size`
 * and gains fields only at its end. mu_X_opts_init(o) is a macro that
 * hands the library sizeof *o, the struct's size in the headers the
 * caller was compiled with; the library fills in its defaults and sets
 * struct_size. A call taking the options reads only struct_size bytes:
 *   - a program built against older headers runs with a newer library,
 *     and the fields it does not know keep their defaults;
 *   - one built against newer headers runs with an older library as long
 *     as it leaves the fields that library lacks as init set them (zero
 *     past the library's struct): set to anything else, the call fails
 *     with MU_EARG, as the library cannot do what they ask.
 * Options not filled by their init call (struct_size 0) are refused with
 * MU_EARG. Bindings that mirror a struct check their layout against the
 * library's with mu_layout_size and mu_layout_field.
 */

/*
 * The layout of a public struct as this library was built: its size
 * (0 for a name it does not describe), and a field's offset and size
 * (0, or -ENOENT for an unknown struct or field). name is the C type
 * name ("mu_tracker_opts_t"). Covers every options struct and the data
 * structs the Python binding mirrors.
 */
MU_EXTERN size_t mu_layout_size(const char *type);
MU_EXTERN int mu_layout_field(const char *type, const char *field,
                              size_t *offset, size_t *size);

/*
 * What a server may hold on its peers' behalf (docs/internals/budgets.md):
 * each peer's queued replies at their real cost (the bytes and the
 * bookkeeping of every write), its partial request, and state it asked the
 * server to keep (store watches). A peer past conn_bytes is not read until
 * it falls back to half of it; one that stays past it and reads nothing for
 * `grace` seconds is closed, and so is one that others' notifications push
 * past twice its budget. total_bytes caps all peers of one server
 * together: while they hold more, a peer is read only once it holds
 * nothing, and a peer not being read that others' notifications would
 * push past the total by more than conn_bytes is closed. A single request
 * or reply larger than the budget is still served (its size has limits of
 * its own); the peer is then not read until it has taken the reply.
 */
/* Embedded in options structs, so its layout never changes: a new knob
 * would be a new field of the options. */
typedef struct {
	size_t conn_bytes;  /* per peer; default 16 MiB */
	size_t total_bytes; /* all peers of a server; default 512 MiB */
	double grace;       /* seconds; default 30 */
} mu_budget_t;

#define MU_BUDGET_CONN_DEFAULT ((size_t)16 << 20)
#define MU_BUDGET_TOTAL_DEFAULT ((size_t)512 << 20)
#define MU_BUDGET_GRACE_DEFAULT 30.0

/* Fill b with the defaults above. */
MU_EXTERN void mu_budget_init(mu_budget_t *b);

/* 0 when b is usable (conn_bytes > 0, total_bytes >= conn_bytes, grace > 0), else MU_EARG. */
MU_EXTERN int mu_budget_check(const mu_budget_t *b);

/*
 * The version of the library running, "MAJOR.MINOR.PATCH" (static). It is
 * MU_VERSION_STRING of the headers the library was built with, which need
 * not be the ones the caller was compiled against (see version.h).
 */
MU_EXTERN const char *mu_version(void);
/* The same as a number, MU_VERSION_NUM of the library's build. */
MU_EXTERN int mu_version_num(void);

#ifdef __cplusplus
}
#endif
#endif
