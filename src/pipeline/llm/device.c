/* SPDX-License-Identifier: MIT */
/*
 * A device given a stage of a decoder LLM (ASSIGN with "kind": "llm"):
 * loaded from its own copy of the checkpoint (found by digest), or built
 * from tensors the coordinator streams. Streamed tensors are checked
 * against their SHA-256 and kept in the device's cache directory under
 * that hash, so a later run sends only what is missing there; a cached
 * file is hashed again before it is trusted, so a truncated or flipped
 * one is fetched anew.
 *
 * The stream: ASSIGN lists the stage's tensors with their hashes; READY
 * answers {"weights": "stream", "need": [names]}; each TENSOR message
 * carries a JSON header ({"name", "offset"}, its length in the header's
 * arg) and then the next bytes of that tensor, in order; LOAD builds the
 * stage once every needed tensor has come whole and checked.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc_int.h"
#include "core/json_int.h"
#include "core/log_int.h"
#include "core/sha256_int.h"
#include "core/time_int.h"
#include "pipeline/device_int.h"
#include "pipeline/llm/stage_int.h"

#define LOG "device"

/* A stage whose tensors stream in (ss->pending). */
typedef struct {
	int index, of, first, last;
	uint64_t digest;
	mu__llm_hp_t hp;
	mu__llm_stage_opts_t so;
	mu__llm_file_t *files;   /* name, path (in the cache), type, shape */
	char (*sha)[MU_SHA256_HEX];
	uint64_t *bytes, *got;   /* each tensor's size and what came of it */
	int *need;
	size_t n;
	FILE *out;               /* the tensor being received */
	size_t cur;
	mu__sha256_t *h;
	char dir[4096];          /* where the files go */
	int temp_dir;            /* ours for this session only: removed after */
	uint64_t streamed;
	double t0;
} lpending_t;

static void part_name(const lpending_t *p, size_t i, char *out, size_t n)
{
	/* several devices may share a cache directory: each writes its own */
	snprintf(out, n, "%s.%ld.%p.part", p->files[i].path, (long)getpid(), (const void *)p);
}

int mu__llm_dev_probe(const char *path, mu__held_t *h, char *err, size_t el)
{
	mu__llm_src_t src;
	int rc;

	/* the last kind asked: whatever is no other kind's model is a checkpoint or nothing */
	if ((rc = mu__llm_src_open(path, NULL, &src, err, el)) != 0)
		return rc;
	h->digest = mu__llm_digest(&src);
	h->layers = src.hp.n_layers;
	h->param_bytes = mu__llm_src_bytes(&src, 0, src.hp.n_layers);
	mu__llm_src_free(&src);
	return 0;
}

void mu__llm_dev_held_caps(const mu__held_t *h, cJSON *m)
{
	cJSON_AddStringToObject(m, "kind", "llm");
	cJSON_AddNumberToObject(m, "layers", h->layers);
}

void mu__llm_dev_pending_free(void *pending)
{
	lpending_t *p = pending;

	if (p == NULL)
		return;
	if (p->out != NULL) { /* cut off mid-tensor: nothing half-written stays */
		char part[4400];

		fclose(p->out);
		part_name(p, p->cur, part, sizeof(part));
		unlink(part);
	}
	mu__sha256_free(p->h);
	for (size_t i = 0; i < p->n; i++) {
		if (p->temp_dir && p->files[i].path != NULL)
			unlink(p->files[i].path);
		mu__free((char *)p->files[i].name);
		mu__free((char *)p->files[i].path);
	}
	if (p->temp_dir)
		rmdir(p->dir);
	mu__free(p->files);
	mu__free(p->sha);
	mu__free(p->bytes);
	mu__free(p->got);
	mu__free(p->need);
	mu__free(p);
}

/* A cached file is used only when its bytes hash to its name. */
static int cached_ok(const char *path, const char *sha, uint64_t bytes)
{
	char hex[MU_SHA256_HEX];
	uint64_t size;
	struct stat st;

	if (stat(path, &st) != 0)
		return 0;
	if ((uint64_t)st.st_size != bytes || mu__sha256_file(path, hex, &size) != 0 ||
	    strcmp(hex, sha) != 0) {
		mu__log(MU_LOG_WARN, LOG, "cached tensor %s is damaged (%llu bytes, want %llu): "
		        "fetching it again", path, (unsigned long long)st.st_size,
		        (unsigned long long)bytes);
		unlink(path);
		return 0;
	}
	return 1;
}

/* One entry of ASSIGN's "tensors". */
static int read_tensor(lpending_t *p, size_t i, const cJSON *t, char *err, size_t el)
{
	const cJSON *nm = cJSON_GetObjectItemCaseSensitive(t, "name");
	const cJSON *ty = cJSON_GetObjectItemCaseSensitive(t, "type");
	const cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "sha256");
	mu__llm_file_t *f = &p->files[i];
	char path[4200];
	int64_t rows, cols;

	if (!cJSON_IsString(nm) || strlen(nm->valuestring) >= 64 || !cJSON_IsString(ty) ||
	    mu__wtype_by_name(ty->valuestring, &f->type) != 0 || !cJSON_IsString(sh) ||
	    strlen(sh->valuestring) != MU_SHA256_HEX - 1 ||
	    strspn(sh->valuestring, "0123456789abcdef") != MU_SHA256_HEX - 1 ||
	    mu__json_int64(cJSON_GetObjectItemCaseSensitive(t, "rows"), 1, 1 << 24, &rows) != 0 ||
	    mu__json_int64(cJSON_GetObjectItemCaseSensitive(t, "cols"), 1, 1 << 24, &cols) != 0 ||
	    mu__wtype_row_bytes(f->type, cols) == 0) {
		snprintf(err, el, "ASSIGN: tensor %zu lacks name, type, rows, cols or sha256, or one "
		         "is out of range", i);
		return MU_EPROTO;
	}
	f->rows = rows;
	f->cols = cols;
	p->bytes[i] = (uint64_t)rows * mu__wtype_row_bytes(f->type, cols);
	memcpy(p->sha[i], sh->valuestring, MU_SHA256_HEX);
	snprintf(path, sizeof(path), "%s/%s.tensor", p->dir, p->sha[i]);
	f->name = mu__strdup(nm->valuestring);
	f->path = mu__strdup(path);
	if (f->name == NULL || f->path == NULL)
		return MU_ENOMEM;
	p->need[i] = !cached_ok(f->path, p->sha[i], p->bytes[i]);
	return 0;
}

/* The cache directory, or a private one for this session. */
static int pick_dir(lpending_t *p, const char *cache_dir, char *err, size_t el)
{
	if (cache_dir != NULL) {
		snprintf(p->dir, sizeof(p->dir), "%s", cache_dir);
		if (mkdir(p->dir, 0700) != 0 && errno != EEXIST) {
			snprintf(err, el, "cannot create the cache directory %.300s: %s", p->dir,
			         strerror(errno));
			return -errno;
		}
		return 0;
	}
	snprintf(p->dir, sizeof(p->dir), "%s/muster-stage-XXXXXX",
	         getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
	if (mkdtemp(p->dir) == NULL) {
		snprintf(err, el, "cannot create a directory for streamed weights: %s", strerror(errno));
		return -errno;
	}
	p->temp_dir = 1;
	return 0;
}

static int read_assign(lpending_t *p, const cJSON *o, const char *cache_dir, char *err,
                       size_t el)
{
	const cJSON *ts = cJSON_GetObjectItemCaseSensitive(o, "tensors"), *t;
	int rc;
	size_t i = 0, n;

	if ((rc = mu__llm_hp_from_json(cJSON_GetObjectItemCaseSensitive(o, "config"), &p->hp, err,
	                               el)) != 0)
		return rc;
	if (!cJSON_IsArray(ts) || (n = (size_t)cJSON_GetArraySize(ts)) < 1 || n > 65536) {
		snprintf(err, el, "ASSIGN: \"tensors\" must list 1 to 65536 tensors");
		return MU_EPROTO;
	}
	p->files = mu__calloc(n, sizeof(*p->files));
	p->sha = mu__calloc(n, sizeof(*p->sha));
	p->bytes = mu__calloc(n, sizeof(*p->bytes));
	p->got = mu__calloc(n, sizeof(*p->got));
	p->need = mu__calloc(n, sizeof(*p->need));
	if (p->files == NULL || p->sha == NULL || p->bytes == NULL || p->got == NULL || p->need == NULL)
		return MU_ENOMEM;
	if ((rc = pick_dir(p, cache_dir, err, el)) != 0)
		return rc;
	cJSON_ArrayForEach(t, ts) {
		p->n = i + 1;
		if ((rc = read_tensor(p, i++, t, err, el)) != 0)
			return rc;
	}
	return 0;
}

/* The READY body for a stream: which tensors to send. */
static char *need_json(const lpending_t *p)
{
	cJSON *o = cJSON_CreateObject(), *a;
	uint64_t cached = 0;
	char *s, *text;

	cJSON_AddStringToObject(o, "weights", "stream");
	a = cJSON_AddArrayToObject(o, "need");
	for (size_t i = 0; a != NULL && i < p->n; i++) {
		if (p->need[i])
			cJSON_AddItemToArray(a, cJSON_CreateString(p->files[i].name));
		else
			cached += p->bytes[i];
	}
	cJSON_AddNumberToObject(o, "cached_bytes", (double)cached);
	text = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	/* the reply frees it with mu__free: a copy in our memory, not cJSON's */
	s = text != NULL ? mu__strdup(text) : NULL;
	cJSON_free(text);
	return s;
}

static int open_stage(lpending_t *p, const char *path, mu_stage_t **st, char *err, size_t el)
{
	mu__llm_src_t src;
	int rc;

	if (path != NULL)
		return mu__stage_open_llm(path, NULL, p->index, p->of, p->first, p->last, &p->so, st,
		                          err, el);
	rc = mu__llm_src_from_files(&p->hp, p->files, p->n, p->first, p->last, &src, err, el);
	if (rc == 0)
		rc = mu__stage_from_llm_src(&src, p->digest, (const char (*)[MU_SHA256_HEX])p->sha,
		                            p->index, p->of, p->first, p->last, &p->so, st, err, el);
	return rc;
}

/* ASSIGN's weights "local": the device's own copy of that digest. */
static int assign_local(mu__device_sess_t *ss, lpending_t *p, const mu__msg_t *m,
                        mu_stage_t **st, char *err, size_t el)
{
	const char *path = mu__device_held(ss->d, &mu__stage_kind_llm, p->digest);
	int rc;

	(void)m;
	if (path == NULL) {
		snprintf(err, el, "this device holds no checkpoint with digest %016llx",
		         (unsigned long long)p->digest);
		return MU_EARG;
	}
	if ((rc = open_stage(p, path, st, err, el)) == 0)
		mu__log(MU_LOG_INFO, LOG, "LLM stage %d/%d (layers %d..%d) loaded from %s", p->index,
		        p->of, p->first, p->last - 1, path);
	return rc;
}

/* ASSIGN's weights "stream": READY lists the tensors to send. */
static int assign_stream(mu__device_sess_t *ss, lpending_t *p, const mu__msg_t *m,
                         const cJSON *o, mu__reply_t *r, char *err, size_t el)
{
	int rc = read_assign(p, o, mu__device_cache_dir(ss->d), err, el);

	if (rc == 0 && (r->text = need_json(p)) == NULL)
		rc = MU_ENOMEM;
	if (rc != 0)
		return rc;
	r->m = (mu__msg_t){MU_MSG_READY, 0, m->id, 0, 0, 0};
	r->text_owned = 1;
	ss->kind = &mu__stage_kind_llm;
	ss->pending = p;
	return 0;
}

void mu__llm_dev_assign(mu__device_sess_t *ss, const mu__msg_t *m, const cJSON *o,
                        mu__reply_t *r)
{
	const cJSON *w = cJSON_GetObjectItemCaseSensitive(o, "weights");
	lpending_t *p = mu__calloc(1, sizeof(*p));
	unsigned long long dg = 0;
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "digest");
	double need;
	char err[768] = "";
	mu_stage_t *st = NULL;
	int rc = p == NULL ? MU_ENOMEM : 0;

	if (rc == 0) {
		mu__llm_stage_opts_init(&p->so);
		p->so.threads = mu__device_threads(ss->d);
		p->t0 = mu__clock_ms();
	}
	if (rc == 0 &&
	    (mu__json_int(cJSON_GetObjectItemCaseSensitive(o, "of"), 1, 1024, &p->of) != 0 ||
	     mu__json_int(cJSON_GetObjectItemCaseSensitive(o, "stage"), 0, p->of - 1, &p->index) ||
	     mu__json_int(cJSON_GetObjectItemCaseSensitive(o, "first"), 0, 1024, &p->first) != 0 ||
	     mu__json_int(cJSON_GetObjectItemCaseSensitive(o, "last"), p->first, 1024, &p->last) ||
	     mu__json_int(cJSON_GetObjectItemCaseSensitive(o, "max_sequences"), 1, 4096,
	                  &p->so.max_seqs) != 0 ||
	     mu__json_u64(cJSON_GetObjectItemCaseSensitive(o, "kv_bytes"), UINT64_MAX,
	                  &p->so.kv_bytes) != 0 ||
	     mu__json_int(cJSON_GetObjectItemCaseSensitive(o, "max_chunk"), 1, 8192,
	                  &p->so.max_chunk) != 0 ||
	     mu__json_double(cJSON_GetObjectItemCaseSensitive(o, "param_bytes"), 0,
	                     (double)MU_JSON_INT_MAX, &need) != 0 ||
	     !cJSON_IsString(d) || sscanf(d->valuestring, "%llx", &dg) != 1 || !cJSON_IsString(w))) {
		snprintf(err, sizeof(err), "ASSIGN of an LLM stage lacks stage, of, first, last, "
		         "max_sequences, kv_bytes, max_chunk, param_bytes, digest or weights, or one "
		         "is out of range");
		rc = MU_EPROTO;
	}
	if (rc == 0 && need + (double)p->so.kv_bytes > (double)mu__device_mem(ss->d)) {
		snprintf(err, sizeof(err), "stage %d/%d needs %.0f bytes of weights and %llu of KV "
		         "cache; this device's budget is %llu", p->index, p->of, need,
		         (unsigned long long)p->so.kv_bytes, (unsigned long long)mu__device_mem(ss->d));
		rc = MU_ETOOBIG;
	}
	if (rc == 0) {
		p->digest = dg;
		if (strcmp(w->valuestring, "local") == 0)
			rc = assign_local(ss, p, m, &st, err, sizeof(err));
		else if (strcmp(w->valuestring, "stream") == 0)
			rc = assign_stream(ss, p, m, o, r, err, sizeof(err));
		else {
			snprintf(err, sizeof(err), "weights must be \"local\" or \"stream\"");
			rc = MU_EPROTO;
		}
	}
	if (rc == 0 && st != NULL)
		mu__device_ready(ss, m->id, st, r);
	if (rc == 0 && ss->pending == p)
		p = NULL; /* the session holds it */
	if (rc != 0)
		mu__reply_error(r, m->id, rc, 1, "%s", err[0] ? err : mu_strerror(rc));
	mu__llm_dev_pending_free(p);
}

/* Start writing tensor i: its file in the cache, named .part until it
 * is whole and checked. */
static int begin_tensor(lpending_t *p, size_t i, char *err, size_t el)
{
	char part[4400];
	int rc;

	part_name(p, i, part, sizeof(part));
	if ((p->out = fopen(part, "wb")) == NULL) {
		snprintf(err, el, "cannot write %.300s: %s", part, strerror(errno));
		return -errno;
	}
	if ((rc = mu__sha256_new(&p->h)) != 0) {
		fclose(p->out);
		p->out = NULL;
		return rc;
	}
	p->cur = i;
	return 0;
}

/* Tensor i has all its bytes: keep it under its hash, or refuse it. */
static int end_tensor(lpending_t *p, char *err, size_t el)
{
	char hex[MU_SHA256_HEX], part[4400];
	size_t i = p->cur;
	int ok = fclose(p->out) == 0, rc;

	p->out = NULL;
	rc = mu__sha256_final(p->h, hex);
	p->h = NULL;
	part_name(p, i, part, sizeof(part));
	if (!ok || rc != 0 || strcmp(hex, p->sha[i]) != 0 || rename(part, p->files[i].path) != 0) {
		unlink(part);
		snprintf(err, el, "tensor %s: %s", p->files[i].name,
		         !ok || rc != 0 ? "cannot be written to the cache"
		                        : "its bytes do not hash to the SHA-256 announced for it");
		return MU_EPROTO;
	}
	p->need[i] = 0;
	return 0;
}

/* The JSON header of a TENSOR message: which tensor, from which offset. */
static int tensor_header(const lpending_t *p, const mu__msg_t *m, const char *body,
                         size_t *idx, uint64_t *off, char *err, size_t el)
{
	cJSON *j = NULL;
	const cJSON *nm;
	size_t i;
	int rc = MU_EPROTO;

	if (m->arg == 0 || m->arg > 4096 || m->arg > m->len ||
	    mu__json_parse(body, m->arg, &j) != 0) {
		snprintf(err, el, "TENSOR: the header is not %u bytes of JSON", m->arg);
		return MU_EPROTO;
	}
	nm = cJSON_GetObjectItemCaseSensitive(j, "name");
	for (i = 0; cJSON_IsString(nm) && i < p->n; i++)
		if (strcmp(p->files[i].name, nm->valuestring) == 0)
			break;
	if (!cJSON_IsString(nm) || i == p->n || !p->need[i])
		snprintf(err, el, "TENSOR: %s is not a tensor this stage waits for",
		         cJSON_IsString(nm) ? nm->valuestring : "(no name)");
	else if (mu__json_u64(cJSON_GetObjectItemCaseSensitive(j, "offset"), UINT64_MAX, off) != 0 ||
	         *off != p->got[i] || m->len - m->arg > p->bytes[i] - p->got[i])
		snprintf(err, el, "TENSOR %s: bytes out of order or past its end", p->files[i].name);
	else if (p->out != NULL && p->cur != i)
		snprintf(err, el, "TENSOR %s: another tensor is not finished", p->files[i].name);
	else
		rc = 0;
	*idx = i;
	cJSON_Delete(j);
	return rc;
}

void mu__llm_dev_tensor(mu__device_sess_t *ss, const mu__msg_t *m, const char *body,
                        mu_tensor_list_t *in, mu__reply_t *r)
{
	lpending_t *p = ss->pending;
	uint64_t off, n;
	char err[512];
	size_t i;
	int rc;

	(void)in; /* a TENSOR's body is bytes, not a frame */
	if ((rc = tensor_header(p, m, body, &i, &off, err, sizeof(err))) != 0) {
		mu__reply_error(r, m->id, rc, 1, "%s", err);
		return;
	}
	n = m->len - m->arg;
	if (p->streamed + n > mu__device_mem(ss->d)) {
		mu__reply_error(r, m->id, MU_ETOOBIG, 1, "the weights sent pass this device's budget "
		                "of %llu bytes", (unsigned long long)mu__device_mem(ss->d));
		return;
	}
	if (p->out == NULL && (rc = begin_tensor(p, i, err, sizeof(err))) != 0) {
		mu__reply_error(r, m->id, rc, 1, "%s", err);
		return;
	}
	if (fwrite(body + m->arg, 1, (size_t)n, p->out) != n ||
	    mu__sha256_update(p->h, body + m->arg, (size_t)n) != 0) {
		mu__reply_error(r, m->id, -EIO, 1, "cannot write tensor %s to %s", p->files[i].name,
		                p->dir);
		return;
	}
	p->got[i] += n;
	p->streamed += n;
	if (p->got[i] == p->bytes[i] && (rc = end_tensor(p, err, sizeof(err))) != 0)
		mu__reply_error(r, m->id, rc, 1, "%s", err);
}

void mu__llm_dev_load(mu__device_sess_t *ss, const mu__msg_t *m, mu__reply_t *r)
{
	lpending_t *p = ss->pending;
	mu_stage_t *st = NULL;
	char err[768] = "";
	int rc;

	for (size_t i = 0; i < p->n; i++)
		if (p->need[i]) {
			mu__reply_error(r, m->id, MU_EPROTO, 1, "LOAD before tensor %s came whole",
			                p->files[i].name);
			return;
		}
	rc = open_stage(p, NULL, &st, err, sizeof(err));
	if (rc != 0) {
		mu__reply_error(r, m->id, rc, 1, "stage %d/%d: %s", p->index, p->of, err);
		return;
	}
	mu__log(MU_LOG_INFO, LOG, "LLM stage %d/%d (layers %d..%d) built from %llu streamed bytes "
	        "and %s", p->index, p->of, p->first, p->last - 1, (unsigned long long)p->streamed,
	        p->temp_dir ? "no cache" : p->dir);
	mu__device_ready(ss, m->id, st, r);
	/* the stage has the files mapped: a private directory can go now */
	mu__llm_dev_pending_free(p);
	ss->pending = NULL;
	ss->kind = NULL;
}
