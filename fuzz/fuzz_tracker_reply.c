/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer driver: what a tracker sends back to our client, through the
 * client-side decoders (a REQUEST grant, the summary text of `muster
 * query`). The first byte picks the decoder.
 */
#include <stdint.h>
#include <string.h>

#include "muster/tracker.h"
#include "core/alloc_int.h"
#include "tracker/proto_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char addr[64], mk[64], *text = NULL, *s;
	int port;

	if (size < 1)
		return 0;
	if (data[0] & 1) {
		mu__tracker_grant_parse((const char *)data + 1, size - 1, addr,
		                        sizeof(addr), &port, mk, sizeof(mk));
		return 0;
	}
	s = mu__strndup((const char *)data + 1, size - 1);
	if (s != NULL && mu_tracker_summary_text(s, &text) == 0)
		mu_free(text);
	mu__free(s);
	return 0;
}
