/* SPDX-License-Identifier: MIT */
/*
 * mu_gguf_quantize (muster/formats.h): a GGUF file in, a GGUF file out.
 * Picks each tensor's type (formats/quant_rules.c), writes the output
 * under a temporary name (formats/gguf_write.c lays out the bytes) and
 * renames it when whole. The input's rows are read as f32 through the
 * kernels' exact conversions (kern/types.c) and quantized by the
 * reference quantizers (kern/quant_*.c) on a pool of threads, a slab of
 * rows at a time: memory is a slab whatever the model's size.
 * mu__gguf_quantize_parsed (formats/gguf_quantize_int.h) is the same on a
 * GGUF in memory whose tensors point anywhere, with a row order per
 * tensor: mu_hf_quantize (llm/hf_quant.c) feeds it an HF directory.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "muster/formats.h"
#include "core/alloc_int.h"
#include "core/progress_int.h"
#include "formats/gguf_int.h"
#include "formats/gguf_quantize_int.h"
#include "formats/gguf_write_int.h"
#include "formats/map_int.h"
#include "formats/quant_rules_int.h"
#include "kern/kern_int.h"
#include "kern/quant_int.h"

const char *mu_quant_types(void)
{
	return mu__qftype_list();
}

/* A tensor of the output: the input's, its row order, its new type and
 * bytes. */
typedef struct {
	const mu__gguf_tensor_t *in;
	const uint32_t *rows; /* row r is the input's row rows[r]; NULL: r */
	uint32_t type;
	uint64_t bytes;
} plan_t;

static int64_t meta_int(const mu__gguf_t *g, const char *arch, const char *key, int64_t def)
{
	char k[256];
	const mu__gguf_kv_t *kv;

	snprintf(k, sizeof(k), "%s.%s", arch, key);
	kv = mu__gguf_find(g, k);
	if (kv == NULL)
		return def;
	if (kv->type == MU__GGUF_ARRAY)
		return kv->arr_n > 0 && kv->arr_type != MU__GGUF_STRING ? mu__gguf_arr_i64(kv, 0) : def;
	return kv->type == MU__GGUF_STRING ? def : kv->i;
}

/* The model's part of the plan, from its metadata. */
static void plan_model(const mu__gguf_t *g, mu__qplan_t *p)
{
	const char *s = "";
	uint64_t len = 0;
	char arch[128] = "";
	int64_t heads, kv;

	if (mu__gguf_get_str(g, "general.architecture", &s, &len, NULL, 0) == 0 &&
	    len < sizeof(arch)) {
		memcpy(arch, s, len);
		arch[len] = '\0';
	}
	memset(p, 0, sizeof(*p));
	p->falcon = strcmp(arch, "falcon") == 0;
	p->n_layer = (int)meta_int(g, arch, "block_count", 0);
	p->n_expert = (int)meta_int(g, arch, "expert_count", 0);
	heads = meta_int(g, arch, "attention.head_count", 0);
	kv = meta_int(g, arch, "attention.head_count_kv", heads);
	p->n_gqa = kv > 0 ? (int)(heads / kv) : 0;
}

static int plan(const mu__gguf_t *g, const uint32_t *const *rows, const mu__qftype_t *ft,
                plan_t *out, mu_quant_summary_t *sum, char *err, size_t el)
{
	const char **names = mu__calloc(g->nt ? g->nt : 1, sizeof(*names));
	mu__qplan_t p;

	if (names == NULL)
		return MU_ENOMEM;
	plan_model(g, &p);
	for (size_t i = 0; i < g->nt; i++)
		names[i] = g->t[i].name;
	/* the names sort as llama.cpp walks them (each name is g's own) */
	qsort(names, g->nt, sizeof(*names), mu__quant_order);
	mu__quant_plan_names(&p, names, g->nt);
	for (size_t i = 0; i < g->nt; i++) {
		const mu__gguf_tensor_t *t = mu__gguf_tensor(g, names[i]);
		int64_t ty = mu__quant_pick(&p, ft, t->name, t->ne, t->type, err, el);
		uint64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
		mu__wtype_t w;

		if (ty < 0) {
			mu__free(names);
			return MU_EPROTO;
		}
		if ((uint32_t)ty != t->type && mu__wtype_by_ggml(t->type, &w) != 0) {
			const char *tn = mu__ggml_type_name(t->type);

			snprintf(err, el, "tensor %s is %s, a type muster cannot read to quantize again",
			         t->name, tn != NULL ? tn : "of an unknown type");
			mu__free(names);
			return MU_EPROTO;
		}
		out[i].in = t;
		out[i].rows = rows != NULL ? rows[t - g->t] : NULL;
		out[i].type = (uint32_t)ty;
		out[i].bytes = ty == t->type ? t->bytes
		                             : n / (uint64_t)mu__quant((uint32_t)ty)->block *
		                                   mu__quant((uint32_t)ty)->block_bytes;
	}
	sum->fallbacks = p.fallbacks;
	mu__free(names);
	return 0;
}

static void count(mu_quant_summary_t *s, const plan_t *t)
{
	const char *name = mu__ggml_type_name(t->type);
	uint64_t n = t->in->ne[0] * t->in->ne[1] * t->in->ne[2] * t->in->ne[3];
	int i;

	for (i = 0; i < s->ntypes; i++)
		if (strcmp(s->type[i].name, name != NULL ? name : "?") == 0)
			break;
	if (i == s->ntypes) {
		if (s->ntypes == MU_QUANT_MAX_TYPES)
			return;
		snprintf(s->type[s->ntypes++].name, sizeof(s->type[0].name), "%s",
		         name != NULL ? name : "?");
	}
	s->type[i].tensors++;
	s->type[i].elements += n;
	s->type[i].bytes += t->bytes;
	s->tensors++;
	s->elements += n;
	s->in_bytes += t->in->bytes;
	s->out_bytes += t->bytes;
}

/* Rows in flight: a slab of output rows up to SLAB bytes, quantized by
 * the pool's threads, then written in order. Each row's bytes depend on
 * that row only, so the file is the same for any thread count. */
#define SLAB (16u << 20)

typedef struct {
	const mu__gguf_tensor_t *in;
	const uint32_t *rows;
	const mu__quant_t *q;
	mu__wtype_t w;
	size_t rin, rout;
	uint64_t r0;       /* the slab's first row */
	float *x;          /* per thread: one row of f32 */
	unsigned char *out; /* the slab */
} job_t;

static void quant_rows(void *arg, int64_t lo, int64_t hi, int thread)
{
	job_t *j = arg;
	float *x = j->x + (size_t)thread * (size_t)j->in->ne[0];

	for (int64_t r = lo; r < hi; r++) {
		uint64_t src = j->r0 + (uint64_t)r;

		mu__wtypes[j->w].to_f32(j->in->data + (j->rows != NULL ? j->rows[src] : src) * j->rin,
		                        (int64_t)j->in->ne[0], x);
		j->q->from_f32(x, (int64_t)j->in->ne[0], j->out + (size_t)r * j->rout);
	}
}

/* Write one tensor's data: as it is, or row by row through f32. */
static int write_tensor(mu__gguf_out_t *o, mu__pool_t *pool, const plan_t *t, float *x,
                        unsigned char *slab, mu__progress_t *pr, uint64_t *done)
{
	const mu__gguf_tensor_t *in = t->in;
	uint64_t rows = in->ne[1] * in->ne[2] * in->ne[3], per;
	job_t j = {in, t->rows, NULL, MU__WT_F32, 0, 0, 0, x, slab};
	int rc = 0;

	if (t->type == in->type && t->rows != NULL && rows > 0) {
		for (uint64_t r = 0; rc == 0 && r < rows; r++)
			rc = mu__gguf_out_data(o, in->data + t->rows[r] * (in->bytes / rows),
			                       (size_t)(in->bytes / rows));
		mu__progress_bytes(pr, *done += in->bytes);
		return rc;
	}
	if (t->type == in->type || rows == 0) {
		rc = mu__gguf_out_data(o, in->data, in->bytes);
		mu__progress_bytes(pr, *done += in->bytes);
		return rc;
	}
	j.q = mu__quant(t->type);
	(void)mu__wtype_by_ggml(in->type, &j.w); /* plan checked it */
	j.rin = (size_t)(in->bytes / rows);
	j.rout = (size_t)(t->bytes / rows);
	per = SLAB / j.rout > 0 ? SLAB / j.rout : 1;
	for (j.r0 = 0; j.r0 < rows && rc == 0; j.r0 += per) {
		uint64_t n = rows - j.r0 < per ? rows - j.r0 : per;

		mu__pool_run_indexed(pool, quant_rows, &j, (int64_t)n);
		rc = mu__gguf_out_data(o, slab, (size_t)n * j.rout);
		mu__progress_bytes(pr, *done + (j.r0 + n) * j.rin);
	}
	*done += in->bytes;
	return rc;
}

static int write_all(const mu__gguf_t *g, const mu__qftype_t *ft, const plan_t *pl,
                     const char *tmp, const char *in_name, int threads, char *err, size_t el)
{
	mu__gguf_out_t o;
	mu__progress_t pr;
	mu__pool_t *pool = NULL;
	uint64_t total = 0, done = 0, maxcols = 1, maxrow = 1;
	float *x = NULL;
	unsigned char *slab = NULL;
	int rc;

	for (size_t i = 0; i < g->nt; i++) {
		uint64_t rows = pl[i].in->ne[1] * pl[i].in->ne[2] * pl[i].in->ne[3];

		total += g->t[i].bytes;
		if (g->t[i].ne[0] > maxcols)
			maxcols = g->t[i].ne[0];
		if (rows > 0 && pl[i].bytes / rows > maxrow)
			maxrow = pl[i].bytes / rows;
	}
	if ((rc = mu__pool_new(threads, &pool)) != 0) {
		snprintf(err, el, "cannot start %d threads: %s", threads, mu_strerror(rc));
		return rc;
	}
	x = mu__calloc((size_t)maxcols * (size_t)threads, sizeof(float));
	slab = mu__malloc(maxrow > SLAB ? (size_t)maxrow : SLAB);
	rc = x != NULL && slab != NULL ? mu__gguf_out_open(&o, tmp, g, ft->ftype, err, el)
	                               : MU_ENOMEM;
	if (rc == 0) {
		for (size_t i = 0; rc == 0 && i < g->nt; i++)
			rc = mu__gguf_out_tensor(&o, pl[i].in, pl[i].type, pl[i].bytes);
		if (rc == 0)
			rc = mu__gguf_out_begin_data(&o);
		mu__progress_start(&pr, total, "quantizing %s to %s", in_name, ft->name);
		for (size_t i = 0; rc == 0 && i < g->nt; i++)
			if ((rc = write_tensor(&o, pool, &pl[i], x, slab, &pr, &done)) == 0)
				rc = mu__gguf_out_pad(&o);
		mu__progress_end(&pr);
		rc = mu__gguf_out_close(&o, rc, err, el);
	}
	mu__pool_free(pool);
	mu__free(x);
	mu__free(slab);
	return rc;
}

static int check_type(const char *type, const mu__qftype_t **ft, char *err, size_t el)
{
	*ft = type != NULL ? mu__qftype(type) : NULL;
	if (*ft == NULL) {
		snprintf(err, el, "unknown type \"%s\"; the types are %s", type ? type : "",
		         mu__qftype_list());
		return MU_EARG;
	}
	if ((*ft)->why != NULL) {
		snprintf(err, el, "type %s is not written: %s", type, (*ft)->why);
		return MU_EARG;
	}
	return 0;
}

static int open_input(const char *in, mu__map_t *m, mu__gguf_t *g, char *err, size_t el)
{
	struct stat st;
	char why[400] = "";
	int rc;

	if (stat(in, &st) == 0 && S_ISDIR(st.st_mode)) {
		snprintf(err, el, "%s is a directory: mu_gguf_quantize takes a GGUF file "
		         "(mu_hf_quantize takes an HF directory)", in);
		return MU_EARG;
	}
	rc = mu__map_open(in, 8, "too short to be a GGUF file", MU__MAP_NORMAL, m, why, sizeof(why));
	if (rc == 0 && (rc = mu__gguf_parse(m->p, m->len, g, why, sizeof(why))) != 0)
		mu__map_close(m);
	if (rc != 0)
		snprintf(err, el, "%s", why[0] ? why : mu_strerror(rc));
	return rc == MU_EBADMAGIC || rc == MU_ETOOBIG ? MU_EPROTO : rc;
}

int mu__gguf_quantize_parsed(const mu__gguf_t *g, const uint32_t *const *rows,
                             const char *in_name, const char *out, const char *type, int threads,
                             mu_quant_summary_t *sum, char *err, size_t errlen)
{
	const mu__qftype_t *ft;
	mu_quant_summary_t s;
	plan_t *pl;
	char tmp[4096];
	int rc;

	memset(&s, 0, sizeof(s));
	if (threads < 1 || threads > MU__POOL_MAX_THREADS) {
		snprintf(err, errlen, "threads %d is not in [1, %d]", threads, MU__POOL_MAX_THREADS);
		return MU_EARG;
	}
	if ((rc = check_type(type, &ft, err, errlen)) != 0)
		return rc;
	pl = mu__calloc(g->nt ? g->nt : 1, sizeof(*pl));
	rc = pl != NULL ? plan(g, rows, ft, pl, &s, err, errlen) : MU_ENOMEM;
	if (rc == 0 && snprintf(tmp, sizeof(tmp), "%s.tmp%ld", out, (long)getpid()) >= (int)sizeof(tmp))
		rc = -ENAMETOOLONG;
	if (rc == 0)
		rc = write_all(g, ft, pl, tmp, in_name, threads, err, errlen);
	if (rc == 0 && rename(tmp, out) != 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot rename %s to %s: %s", tmp, out, strerror(errno));
		unlink(tmp);
	}
	for (size_t i = 0; rc == 0 && i < g->nt; i++)
		count(&s, &pl[i]);
	if (rc == 0 && sum != NULL)
		*sum = s;
	mu__free(pl);
	return rc;
}

int mu_gguf_quantize(const char *in, const char *out, const char *type, int threads,
                     mu_quant_summary_t *sum, char *err, size_t errlen)
{
	const mu__qftype_t *ft;
	mu__map_t m;
	mu__gguf_t g;
	const char *base;
	int rc;

	if (errlen > 0)
		err[0] = '\0';
	if (in == NULL || out == NULL) {
		snprintf(err, errlen, "needs an input and an output");
		return MU_EARG;
	}
	if (threads < 1 || threads > MU__POOL_MAX_THREADS) {
		snprintf(err, errlen, "threads %d is not in [1, %d]", threads, MU__POOL_MAX_THREADS);
		return MU_EARG;
	}
	if ((rc = check_type(type, &ft, err, errlen)) != 0)
		return rc;
	if ((rc = open_input(in, &m, &g, err, errlen)) != 0)
		return rc;
	base = strrchr(in, '/') != NULL ? strrchr(in, '/') + 1 : in;
	rc = mu__gguf_quantize_parsed(&g, NULL, base, out, type, threads, sum, err, errlen);
	if (rc != 0 && err[0] == '\0')
		snprintf(err, errlen, "%s", mu_strerror(rc));
	mu__gguf_free(&g);
	mu__map_close(&m);
	return rc;
}
