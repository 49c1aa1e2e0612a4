/* SPDX-License-Identifier: MIT */
/*
 * TVM RPC tracker protocol codec: frames and messages, pure (no sockets), so
 * unit tests and fuzzers call it directly. The byte layout is in
 * docs/protocols/tvm-tracker.md and ../shared/spec/tvm-tracker.md §2-§4.
 *
 * A frame is an LE int32 byte length then that many bytes of UTF-8 JSON.
 * Every message is a JSON array whose first element is the code.
 */
#ifndef MU_TRACKER_PROTO_INT_H
#define MU_TRACKER_PROTO_INT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "muster/tracker.h" /* MU_TRACKER_MAGIC */
#include "core/buf_int.h"

#define MU_RPC_MAGIC 0xFF271
#define MU_RPC_CODE_SUCCESS (MU_RPC_MAGIC + 0)
#define MU_RPC_CODE_DUPLICATE (MU_RPC_MAGIC + 1)
#define MU_RPC_CODE_MISMATCH (MU_RPC_MAGIC + 2)

/* TVM's frame limit since PR #19586. */
#define MU_TRACKER_MAX_FRAME (1u << 20)
/* Longest key, matchkey or address we keep (a peer-sized string). */
#define MU_TRACKER_MAX_STR 4096

enum mu__tracker_code {
	MU_TC_FAIL = -1,
	MU_TC_SUCCESS = 0,
	MU_TC_PING = 1,
	MU_TC_STOP = 2,
	MU_TC_PUT = 3,
	MU_TC_REQUEST = 4,
	MU_TC_UPDATE_INFO = 5,
	MU_TC_SUMMARY = 6,
	MU_TC_GET_PENDING_MATCHKEYS = 7
};

/*
 * A parsed request. Every pointer points into `root`, which the message owns;
 * mu__tracker_msg_free() releases it.
 */
typedef struct {
	int code;
	cJSON *root;
	const char *key;         /* PUT, REQUEST: device key */
	const char *matchkey;    /* PUT */
	const cJSON *port;       /* PUT: number or string, echoed unchanged */
	const char *custom_addr; /* PUT: NULL when missing or null */
	double priority;         /* REQUEST: any JSON number */
	const cJSON *stop_key;   /* STOP: any JSON value (only a string matches) */
	cJSON *info;             /* UPDATE_INFO: the object (still in root) */
} mu__tracker_msg_t;

/*
 * Look at the start of a byte stream. Returns 0 when more bytes are needed,
 * 1 when a whole frame is there (*body_off = 4, *body_len its length, the
 * frame spans 4 + body_len bytes), or MU_EPROTO (length <= 0) / MU_ETOOBIG
 * (length > max) as soon as the 4 length bytes are in.
 */
int mu__tracker_frame_peek(const void *data, size_t len, size_t max,
                           size_t *body_len);

/* Append one frame holding the Python-style JSON text of v. */
int mu__tracker_frame_json(mu__buf_t *out, const cJSON *v);

/* Append one frame holding a bare integer (the replies 0 and -1). */
int mu__tracker_frame_int(mu__buf_t *out, int v);

/*
 * Parse and validate one request body. On failure the message is empty and
 * `why` (if given) names what was wrong, for the log line: MU_EJSON for text
 * that is not JSON, MU_EPROTO for JSON of the wrong shape or an unknown code,
 * MU_ENOMEM.
 */
int mu__tracker_msg_parse(const char *body, size_t len, mu__tracker_msg_t *m,
                          char *why, size_t whylen);
void mu__tracker_msg_free(mu__tracker_msg_t *m);

/*
 * Client side: parse a REQUEST grant `[0, [ADDR, PORT, MATCHKEY]]`. addr and
 * matchkey are copied into the caller's buffers. 0, MU_EJSON, MU_EPROTO, or
 * MU_EFAIL for a refusal `[-1, ...]`.
 */
int mu__tracker_grant_parse(const char *body, size_t len, char *addr,
                            size_t addrlen, int *port, char *matchkey,
                            size_t mklen);

#endif
