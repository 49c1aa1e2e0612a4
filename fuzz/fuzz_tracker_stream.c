/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer driver: a tracker peer's byte stream, decoded as the server
 * decodes it (magic, then frames split by mu__tracker_frame_peek, each body
 * through mu__tracker_msg_parse), with every valid message applied to a
 * scheduler so PUT/REQUEST/withdrawal sequences are explored too. The first
 * input byte picks how the stream is cut into reads.
 */
#include <stdint.h>
#include <string.h>

#include "core/buf_int.h"
#include "core/endian_int.h"
#include "tracker/proto_int.h"
#include "tracker/sched_int.h"

static int deliver(void *ud, mu__sched_owner_t *o, const mu__sched_res_t *r)
{
	(void)ud;
	(void)r;
	/* owner 1 "has died": its deliveries fail and resources re-queue */
	return o == (mu__sched_owner_t *)ud ? -1 : 0;
}

static void apply(mu__sched_t *s, mu__sched_owner_t *o, mu__tracker_msg_t *m)
{
	cJSON *arr;

	switch (m->code) {
	case MU_TC_PUT:
		mu__sched_put(s, o, m->key, "127.0.0.1", "9090", m->matchkey);
		break;
	case MU_TC_REQUEST:
		mu__sched_request(s, o, m->key, m->priority);
		break;
	case MU_TC_GET_PENDING_MATCHKEYS:
	case MU_TC_SUMMARY:
		arr = cJSON_CreateObject();
		if (m->code == MU_TC_SUMMARY)
			mu__sched_queue_info(s, arr);
		else
			mu__sched_pending(o, arr);
		cJSON_Delete(arr);
		break;
	default:
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	mu__sched_owner_t owners[2];
	mu__tracker_msg_t m;
	mu__sched_t s;
	mu__buf_t in;
	size_t chunk, off, blen;
	int handshook = 0, msgs = 0, dead = 0;

	if (size < 1)
		return 0;
	chunk = (size_t)(data[0] % 16) + 1;
	data++;
	size--;
	mu__sched_init(&s, deliver, &owners[1]);
	s.max_queues = 8;
	s.max_per_owner = 16;
	mu__sched_owner_init(&owners[0]);
	mu__sched_owner_init(&owners[1]);
	mu__buf_init(&in, 4 + 4096 + 16);
	for (off = 0; off < size && !dead; off += chunk) {
		size_t n = size - off < chunk ? size - off : chunk;

		if (mu__buf_append(&in, data + off, n) != 0)
			break;
		if (!handshook) {
			if (in.len < 4)
				continue;
			if (mu_le32_get_signed(in.data) != MU_TRACKER_MAGIC)
				break;
			mu__buf_consume(&in, 4);
			handshook = 1;
		}
		for (;;) {
			int rc = mu__tracker_frame_peek(in.data, in.len, 4096, &blen);

			if (rc <= 0) {
				dead = rc < 0;
				break;
			}
			if (mu__tracker_msg_parse(in.data + 4, blen, &m, NULL, 0) != 0) {
				dead = 1;
				break;
			}
			apply(&s, &owners[msgs++ % 2], &m);
			mu__tracker_msg_free(&m);
			mu__buf_consume(&in, 4 + blen);
		}
	}
	mu__sched_owner_release(&s, &owners[0]);
	mu__sched_owner_release(&s, &owners[1]);
	mu__sched_free(&s);
	mu__buf_free(&in);
	return 0;
}
