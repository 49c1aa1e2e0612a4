/* SPDX-License-Identifier: MIT */
/*
 * muster's pipeline messages (docs/protocols/pipeline.md). Every message
 * is a 40-byte little-endian header and a body:
 *
 *   0  magic    "MUPL"
 *   4  u16      version: 1, or 2 for a frame body holding a tensor that
 *                is not F32 (a typed frame; version 1 bodies are rlx's)
 *   6  u16      type (mu__msg_type_t)
 *   8  i32      status: 0, or a muster/errno code (ERROR)
 *   12 u32      arg: SEQ_FORWARD's position; else 0
 *   16 u64      request id (a reply carries its request's)
 *   24 u64      aux: RESULT: the stage's compute time in ns; SEQ_*: the
 *               sequence
 *   32 u64      body length
 *
 * Bodies: FORWARD, RESULT and WEIGHTS are one rlx tensor frame filling the
 * body exactly; INFO replies, ASSIGN and READY are JSON; ERROR is UTF-8
 * text. The reader checks magic, version, type and the length against its
 * limits before it reads a byte of the body.
 *
 * A channel is a stream (core/stream_int.h; every wait is bounded) and,
 * on a tracker session, the session whose limits its reads keep.
 */
#ifndef MU_PIPELINE_MSG_INT_H
#define MU_PIPELINE_MSG_INT_H

#include <stddef.h>
#include <stdint.h>

#include "muster/server.h"
#include "muster/tensor.h"

#define MU_MSG_MAGIC "MUPL"
#define MU_MSG_VERSION 1       /* every body rlx could read */
#define MU_MSG_VERSION_TYPED 2 /* a frame with non-F32 tensors */
#define MU_MSG_HEADER 40
#define MU_MSG_MAX_TEXT ((uint64_t)64 << 20) /* JSON and error bodies */

typedef enum {
	MU_MSG_INFO = 1,     /* -> INFO with the stage's JSON description */
	MU_MSG_FORWARD = 2,  /* inputs frame -> RESULT or ERROR */
	MU_MSG_RESULT = 3,   /* outputs frame */
	MU_MSG_ERROR = 4,    /* text; status is the code */
	MU_MSG_CLOSE = 5,    /* goodbye; no reply */
	MU_MSG_ASSIGN = 6,   /* JSON: the stage to become -> READY or ERROR */
	MU_MSG_WEIGHTS = 7,  /* a frame of the assigned stage's weights */
	MU_MSG_LOAD = 8,     /* every weight was sent: load -> READY or ERROR */
	MU_MSG_READY = 9,    /* JSON: what the stage loaded and how long it took */
	MU_MSG_SEQ_OPEN = 10,    /* aux = seq; JSON {"ctx": N} -> READY or ERROR */
	MU_MSG_SEQ_FORWARD = 11, /* aux = seq, arg = position (| ALL_LOGITS);
	                            frame "tokens" [n] or "x" [n, dim]
	                            -> RESULT "x" [n, dim] or "logits" */
	MU_MSG_SEQ_CLOSE = 12,   /* aux = seq -> READY or ERROR */
	MU_MSG_SEQ_BATCH = 13,   /* frame "items" [k, 4] (seq, pos, n, all_logits)
	                            and "tokens" [rows] or "x" [rows, dim]
	                            -> RESULT "x" or "logits", items in order */
	MU_MSG_TENSOR = 14,      /* arg = JSON length; JSON {"name", "offset"}
	                            then raw bytes of that tensor (no reply) */
	MU_MSG_TYPE_MAX = 14
} mu__msg_type_t;

/* SEQ_FORWARD's arg: the first position, and this bit for the logits of
 * every position rather than the last only. */
#define MU_SEQ_ALL_LOGITS 0x80000000u

typedef struct {
	uint16_t type;
	int32_t status;
	uint64_t id;
	uint64_t aux;
	uint64_t len;
	uint32_t arg;       /* header bytes 12..15: SEQ_FORWARD's position; else 0 */
} mu__msg_t;

typedef struct {
	mu_stream_t *st;
	mu_session_t *sess;  /* when set, reads go through it */
	int io_ms;           /* a wait with no progress longer than this fails */
	uint64_t max_frame;  /* tensor data bytes per frame body */
	uint64_t got;        /* after a failed receive: how many bytes of the
	                      * header (or of the body) had come, so a reply can
	                      * say how far a truncated message got */
	int version;         /* of the last header received (mu__msg_frame_check) */
} mu__chan_t;

/* A channel over st (borrowed), or over a session's stream (sess). */
void mu__chan_init(mu__chan_t *c, mu_stream_t *st, mu_session_t *sess, int io_ms,
                   uint64_t max_frame);

/*
 * Before closing after an error: stop writing and read what the peer has
 * still in flight (briefly, bounded), so the error reaches it.
 */
void mu__chan_linger(mu__chan_t *c);

const char *mu__msg_type_name(int type);
/* Does a message of this type carry a frame? */
int mu__msg_is_frame(int type);

/* A header of version 1. */
void mu__msg_encode(const mu__msg_t *m, unsigned char *hdr);
/* The header of a message whose body is frame l: version 2 when l holds a
 * tensor that is not F32, else 1, so a peer of before typed tensors reads
 * every F32 frame and refuses a typed one by its version. */
void mu__msg_encode_frame(const mu__msg_t *m, const mu_tensor_list_t *l, unsigned char *hdr);
/* MU_EBADMAGIC, MU_EPROTO (version, type), MU_ETOOBIG (length vs limit).
 * Version 2 is taken only for frame types. */
int mu__msg_decode(const unsigned char *hdr, uint64_t max_frame, mu__msg_t *m);
/* The version a header says (read it after mu__msg_decode took it). */
int mu__msg_version(const unsigned char *hdr);
/*
 * A frame read whole under a header of this version: MU_EPROTO when a
 * version-1 header carries a tensor that is not F32 (what such a header
 * promises, so a peer of before typed tensors can read the body), else 0.
 * mu__msg_recv_frame checks it; a reader of its own (the stage server)
 * calls it once the frame is in.
 */
int mu__msg_frame_check(int version, const mu_tensor_list_t *l);

/* Send a header and a body of bytes (len in m is set here). */
int mu__msg_send(mu__chan_t *c, mu__msg_t *m, const void *body, size_t len);
/* Send a header and a frame of l (len in m is set here). */
int mu__msg_send_frame(mu__chan_t *c, mu__msg_t *m, const mu_tensor_list_t *l);
/* An ERROR reply to id with code and text. */
int mu__msg_send_error(mu__chan_t *c, uint64_t id, int code, const char *text);

/*
 * Read the next header. wait_ms bounds the wait for its first byte (< 0:
 * forever; an idle channel between messages), io_ms the rest. MU_EEOF
 * when the peer closed before a header began; MU_EPROTO when it closed
 * inside one, -ETIMEDOUT when it stalled there (c->got < MU_MSG_HEADER
 * in both cases).
 */
int mu__msg_recv(mu__chan_t *c, mu__msg_t *m, int wait_ms);
/*
 * Bodies: MU_EEOF when the peer closed before the body's end, -ETIMEDOUT
 * when it stalled; c->got then counts the body bytes that came.
 */
/* Read a body of m->len bytes into a new NUL-terminated buffer. */
int mu__msg_recv_body(mu__chan_t *c, const mu__msg_t *m, char **body);
/* Read a frame body (it must fill m->len exactly, and hold only F32
 * tensors under a version-1 header); tensors go into out. */
int mu__msg_recv_frame(mu__chan_t *c, const mu__msg_t *m, mu_tensor_list_t *out);
/* Read and drop a body. */
int mu__msg_skip(mu__chan_t *c, const mu__msg_t *m);

#endif
