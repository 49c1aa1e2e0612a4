/* SPDX-License-Identifier: MIT */
/*
 * Which protocol answers at an address, for a client's error message: a
 * client that finds its peer closing on it or answering with the wrong
 * magic asks the peer, on fresh connections, in the other protocols
 * muster meets, and names what answered ("a TCPStore", not "connection
 * closed by peer"). For error paths only: it costs a few connections and
 * up to a few seconds.
 */
#ifndef MU_CORE_SNIFF_INT_H
#define MU_CORE_SNIFF_INT_H

#include <stddef.h>

typedef enum {
	MU__PROTO_UNKNOWN,  /* nothing recognisable, or nothing answered */
	MU__PROTO_TRACKER,  /* TVM's RPC tracker: it echoed the tracker magic */
	MU__PROTO_STORE,    /* torch's TCPStore (2.x): it echoed a PING */
	MU__PROTO_RPC,      /* TVM's RPC server (muster server): the handshake's reply */
	MU__PROTO_HTTP,     /* an HTTP server */
	MU__PROTO_TLS,      /* a TLS server (a record where plain bytes were due) */
	MU__PROTO_SECRET,   /* muster's shared-secret handshake (docs/protocols/auth.md) */
	MU__PROTO_SSH       /* an SSH server (it speaks first) */
} mu__proto_t;

/*
 * Ask host:port what it speaks: wait briefly for a peer that speaks first
 * (SSH, muster's secret handshake, an HTTP peer that writes at once),
 * then send, each on a fresh connection until one answers, the TVM
 * tracker magic, TCPStore 2.x's VALIDATE + PING, the TVM RPC handshake
 * and an HTTP request. Each read waits at most timeout_ms. out (room for
 * 160 bytes or so) gets what answered as a phrase for a message ("a TVM
 * RPC tracker (muster tracker, TVM's rpc_tracker)"; for an unknown peer
 * its first bytes), or "" when nothing answered. Blocking; the result.
 */
mu__proto_t mu__sniff(const char *host, int port, int timeout_ms, char *out, size_t n);

/* "a TVM RPC tracker", "a TCPStore", ...: p in short, "" for UNKNOWN. */
const char *mu__proto_name(mu__proto_t p);

#endif
