/* SPDX-License-Identifier: MIT */
/*
 * Opening a decoder checkpoint whatever its format: which loader reads
 * path, the mapped files and tensor directory they fill in, and the checks
 * every format gets alike (hyperparameters in range, every tensor the
 * configuration implies present with its shape and a type we compute
 * with). The loaders themselves are llm/load_hf.c, llm/load_gguf.c and llm/load_l2c.c.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "muster/common.h"
#include "core/alloc_int.h"
#include "core/error_int.h"
#include "core/proc_int.h"
#include "formats/map_int.h"
#include "llm/arch_int.h"
#include "llm/llm_int.h"

struct mu__llm_map_s {
	mu__map_t map;
	char *path;
};

int mu__llm_map_file(const char *path, mu__llm_src_t *src,
                     const unsigned char **base, size_t *len, char *why,
                     size_t wl)
{
	mu__llm_map_t **maps, *m;
	mu__map_t map;
	int rc;

	if ((rc = mu__map_open(path, 1, NULL, MU__MAP_RANDOM, &map, why, wl)) != 0)
		return rc;
	m = mu__calloc(1, sizeof(*m));
	maps = mu__realloc(src->maps, (src->nmaps + 1) * sizeof(*maps));
	if (m == NULL || maps == NULL || (m->path = mu__strdup(path)) == NULL) {
		if (m != NULL)
			mu__free(m->path);
		mu__free(m);
		if (maps != NULL)
			src->maps = maps;
		mu__map_close(&map);
		return MU_ENOMEM;
	}
	m->map = map;
	src->maps = maps;
	src->maps[src->nmaps++] = m;
	*base = map.p;
	*len = map.len;
	return 0;
}

int mu__llm_add_tensor(mu__llm_src_t *src, const char *name, mu__wtype_t t,
                       const void *data, int64_t rows, int64_t cols)
{
	mu__llm_tensor_t *v;
	size_t rb = mu__wtype_row_bytes(t, cols);

	if (strlen(name) >= sizeof(v->name) || rb == 0 || rows <= 0)
		return MU_EARG;
	v = mu__realloc(src->t, (src->nt + 1) * sizeof(*v));
	if (v == NULL)
		return MU_ENOMEM;
	src->t = v;
	v = &src->t[src->nt++];
	memset(v, 0, sizeof(*v));
	memcpy(v->name, name, strlen(name) + 1);
	v->m.type = t;
	v->m.data = data;
	v->m.rows = rows;
	v->m.cols = cols;
	v->bytes = (uint64_t)rows * rb;
	return 0;
}

const mu__llm_tensor_t *mu__llm_src_tensor(const mu__llm_src_t *src,
                                           const char *name)
{
	size_t i;

	for (i = 0; i < src->nt; i++)
		if (strcmp(src->t[i].name, name) == 0)
			return &src->t[i];
	return NULL;
}

/* Formats' sniffing: a directory is HF; a file starting "GGUF" is GGUF;
 * anything else is tried as a llama2.c checkpoint. */
int mu__llm_src_open(const char *path, const char *tok_path,
                     mu__llm_src_t *src, char *why, size_t wl)
{
	struct stat st;
	char magic[4] = {0};
	FILE *f;
	int rc;

	memset(src, 0, sizeof(*src));
	if (stat(path, &st) != 0)
		return mu__why(why, wl, -errno, "cannot open %.300s: %s", path, strerror(errno));
	src->path = mu__strdup(path);
	if (src->path == NULL)
		return MU_ENOMEM;
	if (S_ISDIR(st.st_mode)) {
		rc = mu__llm_open_hf(path, src, why, wl);
	} else {
		f = fopen(path, "rb");
		if (f == NULL)
			return mu__why(why, wl, -errno, "cannot open %.300s: %s", path, strerror(errno));
		if (fread(magic, 1, 4, f) != 4)
			memset(magic, 0, 4);
		fclose(f);
		if (memcmp(magic, "GGUF", 4) == 0)
			rc = mu__llm_open_gguf(path, src, why, wl);
		else
			rc = mu__llm_open_l2c(path, tok_path, src, why, wl);
	}
	if (rc == 0)
		rc = mu__llm_check(src, why, wl);
	if (rc != 0)
		mu__llm_src_free(src);
	return rc;
}

void mu__llm_src_free(mu__llm_src_t *src)
{
	size_t i;

	if (src->priv_free != NULL)
		src->priv_free(src->priv);
	for (i = 0; i < src->nmaps; i++) {
		mu__map_close(&src->maps[i]->map);
		mu__free(src->maps[i]->path);
		mu__free(src->maps[i]);
	}
	mu__free(src->maps);
	mu__free(src->t);
	mu__free(src->path);
	mu__free(src->tok_path);
	memset(src, 0, sizeof(*src));
}

/* The tensor name's shape and type check; vectors are [1, n]. */
static int want(const mu__llm_src_t *src, const char *name, int64_t rows,
                int64_t cols, int vector, char *why, size_t wl)
{
	const mu__llm_tensor_t *t = mu__llm_src_tensor(src, name);

	if (t == NULL)
		return mu__why(why, wl, MU_EPROTO, "%.200s: tensor %s is missing", src->path, name);
	if (t->m.rows != rows || t->m.cols != cols)
		return mu__why(why, wl, MU_EPROTO, "%.200s: tensor %s is [%lld, %lld]; the configuration "
		               "implies [%lld, %lld]", src->path, name, (long long)t->m.rows,
		               (long long)t->m.cols, (long long)rows, (long long)cols);
	if (vector && mu__wtypes[t->m.type].block != 1) {
		char list[128];

		return mu__why(why, wl, MU_EPROTO, "%.200s: tensor %s is %s; muster takes norms and "
		               "biases in an unquantized type (%s)", src->path, name, mu__wtype_name(t->m.type),
		               mu__wtype_list(1, list, sizeof(list)));
	}
	return 0;
}

/* Every field in its range (the table's), then the rules across fields. */
static int check_fields(const mu__llm_src_t *src, char *why, size_t wl)
{
	char range[64];
	const mu__hpf_t *f;
	double v;
	size_t i;

	for (i = 0; (f = mu__hpf_at(i)) != NULL; i++) {
		v = mu__hpf_get(f, &src->hp);
		if (mu__hpf_in_range(f, v))
			continue;
		mu__hpf_range_text(f, range, sizeof(range));
		if (f->kind != MU__HPK_NUM && v > f->hi)
			return mu__why(why, wl, MU_ETOOBIG, "%.200s: the configuration's %s is %.0f, "
			               "past what muster loads (%s)", src->path, f->name, v, range);
		return mu__why(why, wl, MU_EPROTO, "%.200s: the configuration's %s is %g; muster "
		               "takes %s", src->path, f->name, v, range);
	}
	return 0;
}

int mu__llm_check_hp(const mu__llm_src_t *src, char *why, size_t wl)
{
	const mu__llm_hp_t *h = &src->hp;
	char list[256];
	int rc;

	if (mu__arch_by_name(h->arch) == NULL) {
		mu__arch_list(MU__ARCH_LIST_NAME, list, sizeof(list));
		return mu__why(why, wl, MU_EPROTO, "%.200s: architecture \"%.16s\" is not supported "
		               "(muster runs %s)", src->path, h->arch, list);
	}
	if ((rc = check_fields(src, why, wl)) != 0)
		return rc;
	if (h->n_heads % h->n_kv_heads != 0)
		return mu__why(why, wl, MU_EPROTO, "%.200s: %d attention heads is not a multiple of "
		               "%d key/value heads", src->path, h->n_heads, h->n_kv_heads);
	if (h->head_dim % 2 != 0)
		return mu__why(why, wl, MU_EPROTO, "%.200s: head_dim %d is odd; RoPE needs pairs",
		               src->path, h->head_dim);
	if (h->scaling != MU__RS_NONE && !(h->sc_factor >= 1))
		return mu__why(why, wl, MU_EPROTO, "%.200s: rope_scaling.factor must be >= 1",
		               src->path);
	if (h->scaling == MU__RS_LLAMA3 && (!(h->sc_high > h->sc_low) || !(h->sc_low > 0) ||
	                                    h->sc_orig <= 0))
		return mu__why(why, wl, MU_EPROTO, "%.200s: rope_scaling of type llama3 needs "
		               "high_freq_factor > low_freq_factor > 0 and "
		               "original_max_position_embeddings", src->path);
	return 0;
}

/* The tensor of spec t (of layer l, or of the whole model when l < 0) as
 * the checker wants it: present unless optional, with its shape. */
static int want_spec(const mu__llm_src_t *src, const mu__tspec_t *t, int l, char *why,
                     size_t wl)
{
	char name[64];

	if (l >= 0)
		snprintf(name, sizeof(name), "blk.%d.%s", l, t->gguf);
	else
		snprintf(name, sizeof(name), "%s", t->gguf);
	if (t->need == MU__NEED_OPTIONAL && mu__llm_src_tensor(src, name) == NULL)
		return 0;
	return want(src, name, mu__arch_size(&src->hp, t->rows), mu__arch_size(&src->hp, t->cols),
	            t->rows == MU__SZ_1, why, wl);
}

/* Does a stage of layers [first, last) need the whole-model tensor t? */
static int model_tensor_in(const mu__llm_hp_t *h, const mu__tspec_t *t, int first, int last)
{
	int head = last == h->n_layers;

	if (t->need == MU__NEED_UNTIED && h->tied)
		return 0;
	if (t->at == MU__AT_FIRST)
		return first == 0 || (head && h->tied);
	return t->at == MU__AT_EVERY || head;
}

int mu__llm_check_range(const mu__llm_src_t *src, int first, int last, char *why, size_t wl)
{
	const mu__arch_t *a = mu__arch_by_name(src->hp.arch);
	size_t i;
	int l, rc;

	if ((rc = mu__llm_check_hp(src, why, wl)) != 0)
		return rc;
	for (i = 0; i < a->nmodel; i++)
		if (model_tensor_in(&src->hp, &a->model[i], first, last) &&
		    (rc = want_spec(src, &a->model[i], -1, why, wl)) != 0)
			return rc;
	for (l = first; l < last; l++)
		for (i = 0; i < a->nlayer; i++)
			if ((rc = want_spec(src, &a->layer[i], l, why, wl)) != 0)
				return rc;
	for (i = 0; i < src->nt; i++)
		if ((rc = mu__arch_check_foreign(a, src->t[i].name, src->path, why, wl)) != 0)
			return rc;
	return 0;
}

int mu__llm_check(const mu__llm_src_t *src, char *why, size_t wl)
{
	return mu__llm_check_range(src, 0, src->hp.n_layers, why, wl);
}

int mu__llm_tensor_in(const mu__llm_src_t *src, size_t i, int first, int last)
{
	const mu__arch_t *a = mu__arch_by_name(src->hp.arch);
	const mu__tspec_t *t;
	int l;

	if (sscanf(src->t[i].name, "blk.%d.", &l) == 1)
		return l >= first && l < last;
	t = a != NULL ? mu__arch_spec(a, src->t[i].name, &l) : NULL;
	if (t != NULL && t->at == MU__AT_FIRST)
		return first == 0 || (src->hp.tied && last == src->hp.n_layers);
	if (t != NULL && t->at == MU__AT_EVERY)
		return 1;
	return last == src->hp.n_layers; /* the head's, and any no entry names */
}

uint64_t mu__llm_src_bytes(const mu__llm_src_t *src, int first, int last)
{
	uint64_t n = 0;
	size_t i;

	for (i = 0; i < src->nt; i++)
		if (mu__llm_tensor_in(src, i, first, last))
			n += src->t[i].bytes;
	return n;
}

size_t mu__llm_src_files(const mu__llm_src_t *src, size_t i, const char **path,
                         uint64_t *size, int64_t *mtime_ns)
{
	if (i < src->nmaps) {
		*path = src->maps[i]->path;
		*size = src->maps[i]->map.len;
		*mtime_ns = src->maps[i]->map.mtime_ns;
	}
	return src->nmaps;
}

void mu__llm_src_touch(const mu__llm_src_t *src, int first, int last)
{
	for (size_t i = 0; i < src->nt; i++)
		if (mu__llm_tensor_in(src, i, first, last))
			mu__pages_touch(src->t[i].m.data, src->t[i].bytes);
}
