/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer driver: what an etcd gateway (or something pretending to be
 * one) sends back, through every response parser of src/etcd/proto.c. The
 * first byte picks the HTTP status class and the parser; the rest is the
 * body (or a watch stream message).
 */
#include <stdint.h>
#include <string.h>

#include "etcd/proto_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int status[4] = {200, 400, 404, 503};
	mu__etcd_watch_msg_t m;
	mu_etcd_range_t r;
	cJSON *root = NULL;
	char msg[128];
	int64_t v;

	if (size < 1)
		return 0;
	if (data[0] & 0x10) {
		if (mu__etcd_parse_watch((const char *)data + 1, size - 1, &m) == 0)
			mu__etcd_watch_msg_free(&m);
		return 0;
	}
	if (mu__etcd_response(status[data[0] & 3], (const char *)data + 1, size - 1,
	                      &root, msg, sizeof(msg)) != 0)
		return 0;
	if (mu__etcd_parse_range(root, &r) == 0)
		mu_etcd_range_free(&r);
	mu__etcd_int64(root, "deleted", &v);
	mu__etcd_int64(cJSON_GetObjectItemCaseSensitive(root, "result"), "TTL", &v);
	cJSON_Delete(root);
	return 0;
}
