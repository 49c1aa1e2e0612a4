/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer driver: what a peer sends a stage, read by the stage's own
 * message loop (mu__serve_chan) through a socket pair: headers, frame
 * bodies read into tensors, text bodies, skipped bodies, and the replies
 * to each. No stage is loaded, so every FORWARD and INFO is answered with
 * an error after its body was read in full.
 */
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pipeline/pipeline_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	mu__serve_ctx_t ctx = {0};
	mu__chan_t c;
	int sv[2];

	if (size > 65536 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		return 0;
	/* the whole input is in the pipe before the loop reads: the reader
	 * never waits, and the replies (short errors) fit the buffer */
	if (write(sv[1], data, size) != (ssize_t)size) {
		close(sv[0]);
		close(sv[1]);
		return 0;
	}
	shutdown(sv[1], SHUT_WR);
	ctx.name = "fuzz";
	ctx.idle_ms = 0;
	mu__chan_init(&c, sv[0], NULL, 0, 1u << 20);
	mu__serve_chan(&c, &ctx);
	close(sv[0]);
	close(sv[1]);
	return 0;
}
