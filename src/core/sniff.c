/* SPDX-License-Identifier: MIT */
/*
 * Which protocol answers at an address (sniff_int.h), for the message of a
 * client that found something else there. The probes and the answers they
 * draw are the protocols' own first bytes, written here from their specs
 * rather than through their codecs, since this sits below them all:
 *
 *   TVM tracker   -> int32 LE 0x2F271        <- the same four bytes
 *   TCPStore 2.x  -> VALIDATE 0x3C85F7CE, PING nonce  <- the nonce
 *   TVM RPC       -> int32 0xFF271, int32 7, "client:"  <- 0xFF271 + code
 *   HTTP          -> "GET / HTTP/1.0"        <- "HTTP/1.x NNN ..."
 *
 * and, whatever was sent, a TLS record (0x15 or 0x16, then 0x03) from a
 * TLS server, "MUAU" from muster's secret handshake (which speaks first,
 * as SSH does with "SSH-"). Each probe goes on a fresh connection, since
 * a peer that did not understand the last one has closed or is waiting
 * for bytes that will never come. The order puts first the probes that
 * the peers muster's clients get confused with answer at once, so a
 * common mistake costs well under a second.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/endian_int.h"
#include "core/sniff_int.h"
#include "core/sock_int.h"
#include "core/time_int.h"

#define TRACKER_MAGIC 0x2F271u /* include/muster/tracker.h's MU_TRACKER_MAGIC */
#define RPC_MAGIC 0xFF271u     /* TVM's RPC_MAGIC; SUCCESS, DUPLICATE, MISMATCH follow */
#define STORE_MAGIC 0x3C85F7CEu
#define STORE_NONCE 0x00FF5A17u /* the third byte 0xFF: a 1.13 store sees a huge length */
#define FIRST_WORD_MS 300       /* how long a peer that speaks first gets */

/* Each protocol's phrase, and who speaks it, for the sniff's answer. */
static const char *const names[][2] = {
	[MU__PROTO_UNKNOWN] = {"", ""},
	[MU__PROTO_TRACKER] = {"a TVM RPC tracker", " (muster tracker, TVM's rpc_tracker)"},
	[MU__PROTO_STORE] = {"a TCPStore", " (muster store, torch's)"},
	[MU__PROTO_RPC] = {"a TVM RPC server", " (muster server, TVM's rpc_server)"},
	[MU__PROTO_HTTP] = {"an HTTP server", ""},
	[MU__PROTO_TLS] = {"a TLS server", ""},
	[MU__PROTO_SECRET] = {"a muster server that requires the shared secret",
	                      " (--secret-file)"},
	[MU__PROTO_SSH] = {"an SSH server", ""},
};

const char *mu__proto_name(mu__proto_t p)
{
	return (unsigned)p < sizeof(names) / sizeof(names[0]) ? names[p][0] : "";
}

/* Up to 40 bytes of b as text when they are printable, else in hex. */
static void show_bytes(const unsigned char *b, size_t n, char *out, size_t on)
{
	size_t i, at = 0, k = n < 40 ? n : 40;
	int text = 1;

	for (i = 0; i < k; i++)
		if (!(isprint(b[i]) || b[i] == '\r' || b[i] == '\n' || b[i] == '\t'))
			text = 0;
	at = (size_t)snprintf(out, on, text ? "something that answered \"" : "something that "
	                      "answered the bytes");
	for (i = 0; i < k && at + 4 < on; i++) {
		if (text)
			out[at++] = isprint(b[i]) ? (char)b[i] : ' ';
		else
			at += (size_t)snprintf(out + at, on - at, " %02x", b[i]);
	}
	snprintf(out + at, on - at, "%s%s", k < n ? "..." : "", text ? "\"" : "");
}

/* What the first bytes of an answer say (n > 0). */
static mu__proto_t classify(const unsigned char *b, size_t n, char *out, size_t on)
{
	mu__proto_t p = MU__PROTO_UNKNOWN;
	uint32_t w = n >= 4 ? mu_le32_get(b) : 0;

	if (n >= 4 && w == TRACKER_MAGIC)
		p = MU__PROTO_TRACKER;
	else if (n >= 4 && w == STORE_NONCE)
		p = MU__PROTO_STORE;
	else if (n >= 4 && w >= RPC_MAGIC && w <= RPC_MAGIC + 2)
		p = MU__PROTO_RPC;
	else if (n >= 5 && memcmp(b, "HTTP/", 5) == 0)
		p = MU__PROTO_HTTP;
	else if (n >= 2 && (b[0] == 0x15 || b[0] == 0x16) && b[1] == 0x03)
		p = MU__PROTO_TLS;
	else if (n >= 4 && memcmp(b, "MUAU", 4) == 0)
		p = MU__PROTO_SECRET;
	else if (n >= 4 && memcmp(b, "SSH-", 4) == 0)
		p = MU__PROTO_SSH;
	if (p == MU__PROTO_UNKNOWN) {
		show_bytes(b, n, out, on);
	} else if (p == MU__PROTO_HTTP) {
		size_t k = strcspn((const char *)b, "\r\n");

		/* its status line says which server, or why it refused */
		k = k < n ? k : n;
		snprintf(out, on, "an HTTP server (it answered \"%.*s\")", (int)(k < 60 ? k : 60),
		         (const char *)b);
	} else if (p == MU__PROTO_SECRET && n > 8 && b[4] == 4 /* ERROR */ &&
	           memmem(b + 8, n - 8, "speaks TLS", 10) != NULL) {
		snprintf(out, on, "a muster server that speaks TLS (--tls-ca)");
		p = MU__PROTO_TLS;
	} else {
		snprintf(out, on, "%s%s", names[p][0], names[p][1]);
	}
	return p;
}

/* Send probe (n 0: nothing) on a fresh connection and read what comes
 * back within wait_ms: its length, 0 (closed, silent), or -1 when there
 * is no connecting at all (nothing more to ask). */
static long ask(const char *host, int port, const void *probe, size_t n, int wait_ms,
                unsigned char *buf, size_t len)
{
	mu_stream_t *st = NULL;
	size_t got = 0, k = 0;
	int64_t deadline;

	if (mu__sock_connect(host, port, NULL, mu__deadline(wait_ms), &st) != 0)
		return -1;
	deadline = mu__deadline(wait_ms);
	if (n == 0 || mu__sock_send_all(st, probe, n, deadline) == 0)
		while (got < len && mu__sock_recv_some(st, buf + got, len - got, &k, deadline) == 0) {
			got += k;
			if (got >= 16)
				break; /* enough to tell */
		}
	mu__sock_close(st);
	return (long)got;
}

mu__proto_t mu__sniff(const char *host, int port, int timeout_ms, char *out, size_t n)
{
	unsigned char tracker[4], store[10], rpc[15], buf[128];
	static const char http[] = "GET / HTTP/1.0\r\n\r\n";
	const struct {
		const void *p;
		size_t n;
	} probes[] = {{NULL, 0},           {tracker, sizeof(tracker)}, {store, sizeof(store)},
	              {rpc, sizeof(rpc)},  {http, sizeof(http) - 1}};
	long got;

	if (n > 0)
		out[0] = '\0';
	mu_le32_put(tracker, TRACKER_MAGIC);
	store[0] = 0; /* VALIDATE in 2.x's numbering */
	mu_le32_put(store + 1, STORE_MAGIC);
	store[5] = 13; /* PING */
	mu_le32_put(store + 6, STORE_NONCE);
	mu_le32_put(rpc, RPC_MAGIC);
	mu_le32_put(rpc + 4, 7);
	memcpy(rpc + 8, "client:", 7);
	for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
		got = ask(host, port, probes[i].p, probes[i].n,
		          i == 0 && timeout_ms > FIRST_WORD_MS ? FIRST_WORD_MS : timeout_ms, buf,
		          sizeof(buf) - 1);
		if (got < 0)
			break;
		if (got > 0) {
			buf[got] = '\0';
			return classify(buf, (size_t)got, out, n);
		}
	}
	return MU__PROTO_UNKNOWN;
}
