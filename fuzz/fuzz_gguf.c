/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer driver: a GGUF file as mu__gguf_parse reads it. A file that
 * passes must hold only tensors inside its data area, and every string
 * array must walk to its end exactly; every tensor of a type we compute
 * with is read row by row as the decoder would (the bytes are touched, so
 * ASan sees any read past them).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf_int.h"
#include "kern/kern_int.h"

static void walk_strings(const mu__gguf_kv_t *kv)
{
	uint64_t pos = 0, len, i;
	const char *s;
	volatile char sink = 0;

	for (i = 0; i < kv->arr_n; i++) {
		if (mu__gguf_arr_str(kv, &pos, &s, &len) != 0)
			abort();
		if (len > 0)
			sink ^= s[len - 1];
	}
	if (pos != kv->arr_bytes)
		abort();
	(void)sink;
}

static void read_rows(const mu__gguf_tensor_t *t)
{
	mu__wmat_t m;
	float *row;
	int64_t r;

	if (mu__wtype_by_ggml(t->type, &m.type) != 0)
		return;
	if (t->n_dims > 2 || t->ne[0] > 4096 || t->ne[1] > 64)
		return;
	m.data = t->data;
	m.cols = (int64_t)t->ne[0];
	m.rows = (int64_t)t->ne[1];
	if (mu__wtype_row_bytes(m.type, m.cols) * (uint64_t)m.rows != t->bytes)
		abort();
	row = malloc((size_t)m.cols * sizeof(float));
	for (r = 0; row != NULL && r < m.rows; r++)
		mu__wmat_row(&m, r, row);
	free(row);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	mu__gguf_t g;
	size_t i;

	if (mu__gguf_parse(data, size, &g, NULL, 0) != 0)
		return 0;
	for (i = 0; i < g.nkv; i++)
		if (g.kv[i].type == MU__GGUF_ARRAY && g.kv[i].arr_type == MU__GGUF_STRING)
			walk_strings(&g.kv[i]);
	for (i = 0; i < g.nt; i++) {
		const mu__gguf_tensor_t *t = &g.t[i];

		if (t->offset > g.data_len || t->bytes > g.data_len - t->offset ||
		    t->data != g.data + t->offset)
			abort();
		read_rows(t);
	}
	mu__gguf_free(&g);
	return 0;
}
