/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer driver: what a P2P metadata peer sends, as the listener reads
 * it: frames cut out by mu__p2p_frame_peek, commands by mu__p2p_parse, and
 * a LOAD's blob through the blob readers (its name, label and payload).
 */
#include <stdint.h>

#include "muster/md.h"
#include "md/md_int.h"
#include "md/p2p_proto_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char name[MU_MD_NAME_MAX + 1], label[MU_MD_LABEL_MAX + 1];
	const void *arg, *payload;
	size_t plen, argn, n, off = 0;
	mu__p2p_cmd_t cmd;

	while (off < size && mu__p2p_frame_peek(data + off, size - off, 1u << 20, &plen) == 1) {
		if (mu__p2p_parse(data + off + 8, plen, &cmd, &arg, &argn) != 0)
			break;
		if (cmd == MU_P2P_LOAD) {
			mu_md_blob_name(arg, argn, name, sizeof(name));
			mu__md_blob_label(arg, argn, label, sizeof(label));
			mu_md_blob_payload(arg, argn, &payload, &n);
		}
		off += 8 + plen;
	}
	return 0;
}
