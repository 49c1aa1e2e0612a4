/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer driver: what a hostile coordinator can send an LLM stage. A
 * tiny random llama2.c checkpoint is written once and served as two
 * stages with room for two sequences each: the whole model (token ids
 * in, logits out) and its second layer alone (activations in). Each input
 * is a message:
 *
 *   byte 0: bits 0..5 the type (SEQ_OPEN, SEQ_FORWARD, SEQ_BATCH,
 *           SEQ_CLOSE, INFO, FORWARD, modulo 6); bit 6: to the second
 *           stage; bit 7: the header says version 1 whatever the frame
 *           holds (else the version its encoder would give it: 2 for a
 *           typed frame),
 *   bytes 1..8: aux (sequence), 9..12: arg (position),
 *   the rest: the body (a frame for SEQ_FORWARD/SEQ_BATCH/FORWARD, text
 *   otherwise; typed tensors are what the id paths read: I32, the F32
 *   form of before, and every dtype they must refuse).
 *
 * A frame is checked against its header's version as the stage server
 * checks it. Whatever comes, the stage answers (a reply or an ERROR) and
 * stays usable; the reply's tensors are the dtype and shapes the protocol
 * promises. The body is also read as an LLM configuration
 * (mu__llm_hp_from_json).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/endian_int.h"
#include "core/json_int.h"
#include "pipeline/llm/stage_int.h"
#include "pipeline/serve_int.h"
#include "tensor/frame_int.h"

static mu_stage_t *stage[2];

static void write_model(const char *path)
{
	int32_t hdr[7] = {16, 24, 2, 2, 1, 32, 16};
	size_t floats = 32 * 16 + 2 * 16 + 2 * (16 * 16 + 8 * 16 * 2 + 16 * 16) + 2 * 16 +
	                2 * 24 * 16 * 3 + 16 + 16 * 8;
	FILE *f = fopen(path, "wb");
	uint32_t s = 1;

	fwrite(hdr, sizeof(hdr), 1, f);
	for (size_t i = 0; i < floats; i++) {
		float v = (float)((s = s * 1103515245u + 12345u) >> 16) / 65536.0f - 0.5f;

		fwrite(&v, 4, 1, f);
	}
	fclose(f);
}

static void setup(void)
{
	char path[64] = "/tmp/mu_fuzz_llm_XXXXXX", hashes[96];
	mu__llm_stage_opts_t o;
	int fd = mkstemp(path);

	close(fd);
	write_model(path);
	mu__llm_stage_opts_init(&o);
	o.max_seqs = 2;
	o.kv_bytes = 1 << 20;
	o.max_chunk = 8;
	if (mu__stage_open_llm(path, NULL, 0, 1, -1, -1, &o, &stage[0], NULL, 0) != 0 ||
	    mu__stage_open_llm(path, NULL, 1, 2, 1, 2, &o, &stage[1], NULL, 0) != 0)
		abort();
	unlink(path);
	/* the stages hashed their weights and kept the hashes beside it */
	snprintf(hashes, sizeof(hashes), "%s.muster-sha256.json", path);
	unlink(hashes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int types[] = {MU_MSG_SEQ_OPEN, MU_MSG_SEQ_FORWARD, MU_MSG_SEQ_BATCH,
	                            MU_MSG_SEQ_CLOSE, MU_MSG_INFO, MU_MSG_FORWARD};
	mu__serve_ctx_t ctx;
	mu_tensor_list_t in;
	mu__reply_t r;
	mu__msg_t m;
	mu__llm_hp_t hp;
	cJSON *j = NULL;
	char *text;
	int version;

	if (stage[0] == NULL)
		setup();
	if (size < 13)
		return 0;
	memset(&ctx, 0, sizeof(ctx));
	ctx.stage = stage[data[0] >> 6 & 1];
	ctx.name = "fuzz";
	m = (mu__msg_t){(uint16_t)types[(data[0] & 0x3f) % 6], 0, 1, mu_le64_get(data + 1) % 4,
	                size - 13, mu_le32_get(data + 9)};
	mu_tensor_list_init(&in);
	text = malloc(size - 13 + 1);
	memcpy(text, data + 13, size - 13);
	text[size - 13] = '\0';
	if (mu__msg_is_frame(m.type) && mu_frame_decode(data + 13, size - 13, NULL, &in) != 0) {
		free(text);
		return 0;
	}
	version = data[0] & 0x80 || !mu__frame_typed(&in) ? MU_MSG_VERSION : MU_MSG_VERSION_TYPED;
	if (mu__msg_frame_check(version, &in) != 0) { /* the server closes: nothing is handled */
		if (!(data[0] & 0x80) || !mu__frame_typed(&in))
			abort();
		mu_tensor_list_free(&in);
		free(text);
		return 0;
	}
	mu__pipe_handle(&ctx, 7, &m, text, &in, &r);
	if (r.m.type == MU_MSG_RESULT) {
		const mu_tensor_t *t = r.out.n == 1 ? r.out.t[0] : NULL;

		if (t == NULL || t->dtype != MU_DTYPE_F32 || t->rank != 2 || t->dims[0] < 1 ||
		    t->dims[1] != (uint64_t)(strcmp(t->name, "logits") == 0 ? 32 : 16))
			abort();
	}
	mu__reply_free(&r);
	mu_tensor_list_free(&in);
	if (mu__json_parse(text, size - 13, &j) == 0)
		mu__llm_hp_from_json(j, &hp, NULL, 0);
	cJSON_Delete(j);
	free(text);
	return 0;
}
