/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer driver: what a coordinator sends a device, read by the
 * session's own message loop (mu__serve_chan, as a device with no model)
 * through a socket pair: headers, frame bodies read into tensors, JSON
 * bodies (ASSIGN), streamed weights, and the replies to each.
 */
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/stream_int.h"
#include "pipeline/device_int.h"

static mu_device_t *device;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	mu__serve_ctx_t ctx;
	mu__device_sess_t ss;
	mu_device_opts_t o;
	mu__chan_t c;
	mu_stream_t *st;
	int sv[2];

	if (device == NULL) {
		mu_device_opts_init(&o);
		o.mem_budget = 1 << 20;
		if (mu_device_new(&o, &device, NULL, 0) != 0)
			return 0;
	}
	if (size > 65536 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		return 0;
	/* the whole input is in the pipe before the loop reads: the reader
	 * never waits, and the replies (short) fit the buffer */
	if (write(sv[1], data, size) != (ssize_t)size) {
		close(sv[0]);
		close(sv[1]);
		return 0;
	}
	shutdown(sv[1], SHUT_WR);
	mu__device_ctx(&ctx, &ss, device);
	ctx.idle_ms = 0;
	if (mu__stream_tcp_new(sv[0], &st) == 0) { /* takes sv[0] */
		mu__chan_init(&c, st, NULL, 0, 1u << 20);
		mu__serve_chan(&c, &ctx);
		mu__stream_close(st);
	}
	mu__device_ctx_done(&ctx);
	close(sv[1]);
	return 0;
}
