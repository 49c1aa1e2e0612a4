/* SPDX-License-Identifier: MIT */
/*
 * NIXL's P2P metadata framing (spec nixl-metadata.md §6), pure:
 *
 *   frame   := u64 length (little-endian) , payload
 *   payload := "NIXLCOMM:" CMD ARG        CMD: LOAD <blob> | SEND | INVL <name>
 *
 * Unlike NIXL's receiver, which splits a payload on every "NIXLCOMM:" (so
 * a blob containing those bytes is cut apart), one frame is one command.
 */
#ifndef MU_MD_P2P_PROTO_INT_H
#define MU_MD_P2P_PROTO_INT_H

#include <stddef.h>

#include "core/buf_int.h"

#define MU_P2P_HEADER "NIXLCOMM:"
#define MU_P2P_HEADER_LEN 9

typedef enum { MU_P2P_LOAD, MU_P2P_SEND, MU_P2P_INVL } mu__p2p_cmd_t;

/*
 * 0: more bytes needed; 1: a whole frame (*plen payload bytes after the 8
 * length bytes); MU_ETOOBIG (length over max) or MU_EPROTO (shorter than
 * any command) as soon as the length is in.
 */
int mu__p2p_frame_peek(const void *data, size_t len, size_t max, size_t *plen);

/* Parse a payload. MU_EPROTO: not NIXLCOMM, or an unknown command. */
int mu__p2p_parse(const void *payload, size_t n, mu__p2p_cmd_t *cmd,
                  const void **arg, size_t *argn);

/* Append one frame. */
int mu__p2p_frame(mu__buf_t *out, mu__p2p_cmd_t cmd, const void *arg, size_t n);

#endif
