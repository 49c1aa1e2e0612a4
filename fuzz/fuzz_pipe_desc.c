/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer driver: a stage's description (its INFO or READY reply) as a
 * coordinator takes it in: JSON, names, node range, digest.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/stream_int.h"
#include "pipeline/graph/coord_int.h"
#include "server/session_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	mu_coord_t *c = NULL;
	mu_session_t *s;
	mu_stream_t *st;
	char *text, err[256];
	int sv[2];

	if (size > 65536 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		return 0;
	text = malloc(size + 1);
	if (text == NULL || mu__coord_new(2, NULL, &c) != 0) {
		free(text);
		close(sv[0]);
		close(sv[1]);
		return 0;
	}
	memcpy(text, data, size);
	text[size] = '\0';
	s = mu__stream_tcp_new(sv[0], &st) == 0 ? mu__session_new(st, 0, NULL, 0) : NULL;
	if (s != NULL && mu__coord_set(c, 0, s, "fuzz:1", text, err, sizeof(err)) != 0)
		mu__session_free(s); /* not taken */
	if (s != NULL)
		mu__coord_check(c, err, sizeof(err));
	mu_coord_close(c); /* closes a session it took */
	close(sv[1]);
	free(text);
	return 0;
}
