/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer driver: a safetensors header as mu__st_parse validates it.
 * The first 4 bytes give the size of the data area (up to 1 MiB), the rest
 * is the header text. A header that passes must describe tensors that lie
 * inside the data area without overlapping; each is then loaded from a
 * mapped data area of that size, as a weight (F32 in place or copied,
 * F16/BF16 converted, other dtypes kept) and as a run's input (every dtype
 * kept).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "muster/tensor.h"
#include "core/endian_int.h"
#include "formats/safetensors_int.h"

/* bytes per element of a file dtype: the tensor dtypes' own, 1 for F8 */
static unsigned dsize(int dt)
{
	return dt == MU_DT_F8_E4M3 || dt == MU_DT_F8_E5M2 ? 1 : (unsigned)mu_dtype_size(dt);
}

static int by_begin(const void *a, const void *b)
{
	const mu__st_entry_t *x = a, *y = b;

	return (x->begin > y->begin) - (x->begin < y->begin);
}

static void check(const mu__st_file_t *f, uint64_t data_len)
{
	mu__st_entry_t *s;
	uint64_t end = 0;

	for (size_t i = 0; i < f->n; i++) {
		const mu__st_entry_t *e = &f->e[i];

		if (e->begin > e->end || e->end > data_len || e->rank > MU_TENSOR_MAX_RANK ||
		    e->end - e->begin != e->numel * dsize((int)e->dtype) || mu__st_find(f, e->name) == NULL)
			abort();
	}
	if (f->n == 0)
		return;
	s = malloc(f->n * sizeof(*s));
	memcpy(s, f->e, f->n * sizeof(*s));
	qsort(s, f->n, sizeof(*s), by_begin);
	for (size_t i = 0; i < f->n; i++) {
		if (s[i].begin == s[i].end)
			continue;
		if (s[i].begin < end)
			abort(); /* an overlap got through */
		end = s[i].end > end ? s[i].end : end;
	}
	free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	mu__st_file_t f;
	uint64_t data_len;
	char why[256];
	void *area;

	if (size < 4)
		return 0;
	data_len = mu_le32_get(data) % ((1u << 20) + 1);
	if (mu__st_parse((const char *)data + 4, size - 4, data_len, &f, why, sizeof(why)) != 0)
		return 0;
	check(&f, data_len);
	/* a data area to load from: mapped, as a real file's would be */
	area = mmap(NULL, data_len + 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (area != MAP_FAILED) {
		memset(area, 0x3c, data_len);
		f.data = (const unsigned char *)area + (data_len & 1); /* sometimes misaligned */
		f.data_len = data_len;
		for (size_t i = 0; i < f.n; i++) {
			mu_tensor_t *t;

			if (mu__st_load(&f, &f.e[i], &t) == 0) {
				if (t->numel != f.e[i].numel || (int)t->dtype != mu__st_loaded_dtype(&f.e[i]))
					abort();
				mu_tensor_free(t);
			}
			if (mu__st_load_exact(&f, &f.e[i], &t) == 0) {
				if (t->numel != f.e[i].numel || (int)t->dtype != (int)f.e[i].dtype)
					abort();
				mu_tensor_free(t);
			}
		}
		munmap(area, data_len + 1);
	}
	f.data = NULL;
	mu__st_close(&f);
	return 0;
}
