/* SPDX-License-Identifier: MIT */
/*
 * A model directory opened: its graph checked against its weights' header
 * (every weight present, of a float type, shapes that flow through every
 * node), every value's shape and every node's work estimated, and plans
 * cut from it. Nothing is loaded until something runs.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>


#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/cut_int.h"
#include "core/error_int.h"
#include "core/proc_int.h"
#include "kern/blas_int.h"
#include "graph/model_int.h"

uint64_t mu__fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

void mu__dims_text(uint32_t rank, const uint64_t *dims, char *buf, size_t len)
{
	size_t off = 0;

	off += (size_t)snprintf(buf, len, "[");
	for (uint32_t i = 0; i < rank && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s%llu", i ? ", " : "",
		                        (unsigned long long)dims[i]);
	if (off < len)
		snprintf(buf + off, len - off, "]");
}

static int check_weights(mu_model_t *m, char *err, size_t el)
{
	for (int i = 0; i < m->g.nparams; i++) {
		const char *p = m->g.params[i];
		const mu__st_entry_t *e = mu__st_find(&m->st, p);
		mu__shape_t *s;
		uint64_t *b;

		if (e == NULL) {
			snprintf(err, el, "weight %.200s is used by the graph but not in model.safetensors", p);
			return MU_EPROTO;
		}
		if (mu__st_loaded_dtype(e) < 0) {
			snprintf(err, el, "weight %.200s: F8 weights cannot be loaded", p);
			return MU_EPROTO;
		}
		s = mu__calloc(1, sizeof(*s));
		b = mu__malloc(sizeof(*b));
		if (s == NULL || b == NULL) {
			mu__free(s);
			mu__free(b);
			return MU_ENOMEM;
		}
		s->rank = e->rank;
		s->dtype = (mu_dtype_t)mu__st_loaded_dtype(e);
		memcpy(s->dims, e->dims, sizeof(s->dims));
		*b = mu__st_loaded_bytes(e);
		m->param_bytes += *b;
		if (mu__strmap_put(&m->pshapes, p, strlen(p), s, NULL) != 0 ||
		    mu__strmap_put(&m->pbytes, p, strlen(p), b, NULL) != 0) {
			mu__free(s);
			mu__free(b);
			return MU_ENOMEM;
		}
	}
	return 0;
}

int mu_model_open(const char *dir, mu_model_t **out, char *err, size_t el)
{
	char path[4096], why[512] = "";
	mu__buf_t text;
	mu_model_t *m;
	int rc;

	*out = NULL;
	if (err == NULL)
		el = 0;
	m = mu__calloc(1, sizeof(*m));
	if (m == NULL || (m->dir = mu__strdup(dir)) == NULL) {
		mu__free(m);
		return MU_ENOMEM;
	}
	mu__strmap_init(&m->pbytes);
	mu__strmap_init(&m->pshapes);
	mu__strmap_init(&m->shapes);
	mu__strmap_init(&m->loaded);
	m->threads = 1;
	/* read once: the text parsed is the text digested, and the text a
	 * cluster streams to its devices (mu__model_text) */
	snprintf(path, sizeof(path), "%s/model.json", dir);
	rc = mu__buf_read_file(&text, path, MU_GRAPH_MAX_BYTES, why, sizeof(why));
	if (rc == 0 && text.len == 0)
		rc = mu__why(why, sizeof(why), MU_EJSON, "the file is empty");
	if (rc == 0) {
		m->text_len = text.len;
		m->text = mu__buf_take(&text, NULL);
		m->digest = mu__fnv(MU_FNV_INIT, m->text, m->text_len);
		rc = mu__graph_parse(m->text, m->text_len, &m->g, why, sizeof(why));
	}
	if (rc != 0 && rc != MU_ENOMEM)
		snprintf(err, el, "%.300s: %s", path, why);
	mu__buf_free(&text);
	if (rc == 0) {
		snprintf(path, sizeof(path), "%s/model.safetensors", dir);
		rc = mu__st_open(path, &m->st, why, sizeof(why));
		if (rc != 0)
			snprintf(err, el, "%.300s: %s", path, why);
		else /* the header, as text, fixes the weights' layout */
			m->digest = mu__fnv(m->digest, m->st.map, (size_t)(m->st.data - (const unsigned char *)m->st.map));
	}
	if (rc == 0)
		rc = check_weights(m, err, el);
	if (rc == 0) {
		m->flops = mu__calloc((size_t)m->g.nnodes + 1, sizeof(double));
		rc = m->flops == NULL ? MU_ENOMEM
		                      : mu__graph_shapes(&m->g, &m->pshapes, &m->shapes, m->flops, why, sizeof(why));
		if (rc != 0 && rc != MU_ENOMEM)
			snprintf(err, el, "%.300s/model.json does not fit its weights: %s", dir, why);
	}
	for (int i = 0; rc == 0 && i < m->g.noutputs; i++)
		if (mu__strmap_get(&m->shapes, m->g.outputs[i], strlen(m->g.outputs[i])) == NULL) {
			snprintf(err, el, "output %.200s is not computed by any node", m->g.outputs[i]);
			rc = MU_EPROTO;
		}
	if (rc == MU_ENOMEM)
		snprintf(err, el, "out of memory opening %.300s", dir);
	if (rc != 0) {
		mu_model_close(m);
		return rc;
	}
	*out = m;
	return 0;
}

static void tensor_free(void *t)
{
	mu_tensor_free(t);
}

void mu_model_close(mu_model_t *m)
{
	if (m == NULL)
		return;
	mu__strmap_free(&m->loaded, tensor_free);
	mu__strmap_free(&m->pbytes, mu__free);
	mu__strmap_free(&m->pshapes, mu__free);
	mu__strmap_free(&m->shapes, mu__free);
	mu__graph_free(&m->g);
	mu__st_close(&m->st);
	mu__free(m->text);
	mu__free(m->flops);
	mu__free(m->dir);
	mu__free(m);
}

int mu_model_nodes(const mu_model_t *m)
{
	return m->g.nnodes;
}

int mu_model_inputs(const mu_model_t *m)
{
	return m->g.ninputs;
}

void mu_model_input(const mu_model_t *m, int i, const char **name, uint32_t *rank,
                    uint64_t *dims)
{
	*name = m->g.inputs[i].name;
	*rank = m->g.inputs[i].rank;
	memcpy(dims, m->g.inputs[i].dims, sizeof(uint64_t) * m->g.inputs[i].rank);
}

mu_dtype_t mu_model_input_dtype(const mu_model_t *m, int i)
{
	return m->g.inputs[i].dtype;
}

uint64_t mu_model_param_bytes(const mu_model_t *m)
{
	return m->param_bytes;
}

uint64_t mu_model_digest(const mu_model_t *m)
{
	return m->digest;
}

/* ---- plans ---- */

/* Per node: the bytes of the weights it is first to use. */
static int node_bytes(const mu_model_t *m, double *w)
{
	mu__strmap_t seen;
	int rc = 0;

	mu__strmap_init(&seen);
	for (int i = 0; rc == 0 && i < m->g.nnodes; i++) {
		const mu__node_t *n = &m->g.nodes[i];

		w[i] = 0;
		for (int j = 0; rc == 0 && j < n->nin; j++) {
			const uint64_t *b = mu__strmap_get(&m->pbytes, n->in[j], strlen(n->in[j]));

			if (b != NULL && mu__strmap_get(&seen, n->in[j], strlen(n->in[j])) == NULL) {
				w[i] += (double)*b;
				rc = mu__strmap_put(&seen, n->in[j], strlen(n->in[j]), &seen, NULL);
			}
		}
	}
	mu__strmap_free(&seen, NULL);
	return rc;
}

int mu_plan_balanced(const mu_model_t *m, int n, mu_split_t by, mu_plan_t **out,
                     char *err, size_t el)
{
	double *w;
	int *cuts, rc;
	mu_plan_t *p;

	*out = NULL;
	if (err == NULL)
		el = 0;
	if (n < 1 || n > m->g.nnodes) {
		snprintf(err, el, "cannot cut %d node%s into %d stages: each stage needs a node",
		         m->g.nnodes, m->g.nnodes == 1 ? "" : "s", n);
		return MU_EARG;
	}
	w = mu__calloc((size_t)m->g.nnodes, sizeof(*w));
	cuts = mu__calloc((size_t)n + 1, sizeof(*cuts));
	p = mu__calloc(1, sizeof(*p));
	rc = w == NULL || cuts == NULL || p == NULL ? MU_ENOMEM : 0;
	if (rc == 0 && by == MU_SPLIT_FLOPS)
		memcpy(w, m->flops, sizeof(*w) * (size_t)m->g.nnodes);
	else if (rc == 0)
		rc = node_bytes(m, w);
	if (rc == 0)
		rc = mu__cut_balanced(&(mu__cut_items_t){w, m->g.nnodes, 0}, n, MU__CUT_FILL, cuts);
	if (rc == 0)
		rc = mu__plan_from_cuts(&m->g, cuts, n, &m->pbytes, m->flops, &p->p);
	mu__free(w);
	mu__free(cuts);
	if (rc != 0) {
		mu__free(p);
		snprintf(err, el, "cannot plan %d stages: %s", n, mu_strerror(rc));
		return rc;
	}
	*out = p;
	return 0;
}

static void fit_error(const mu_model_t *m, const double *w, const uint64_t *budget, int nb,
                      char *err, size_t el)
{
	double total = 0, big = 0, room = 0;
	int at = 0;

	for (int i = 0; i < m->g.nnodes; i++) {
		total += w[i];
		if (w[i] > big) {
			big = w[i];
			at = i;
		}
	}
	for (int k = 0; k < nb; k++)
		room += (double)budget[k];
	if (big > 0 && m->g.nnodes > 0) {
		uint64_t most = 0;

		for (int k = 0; k < nb; k++)
			most = budget[k] > most ? budget[k] : most;
		if (big > (double)most) {
			snprintf(err, el, "node %s alone needs %.1f MiB of weights, more than the largest "
			         "budget (%.1f MiB)", m->g.nodes[at].name, big / 1048576.0,
			         (double)most / 1048576.0);
			return;
		}
	}
	snprintf(err, el, "the model's weights (%.1f MiB) do not fit %d device%s with %.1f MiB in "
	         "all (a stage holds whole nodes, so some room is always lost at the cuts)",
	         total / 1048576.0, nb, nb == 1 ? "" : "s", room / 1048576.0);
}

/* What mu__cut_fit_any's accept sees: the model, and the best plan so far. */
typedef struct {
	const mu_model_t *m;
	const uint64_t *budget;
	mu__plan_t best;        /* the last accepted fit's stages */
	int *device;            /* its budget index per stage */
	int *keep, *dev;        /* scratch: the non-empty stages' cuts, devices */
	char why[512];          /* the first fit refused, and why */
} fit_t;

/* Build a fit's stages; a weight two stages share is held by both, so
 * check the real totals against the budgets before taking it. */
static int accept_fit(const int *order, const int *cuts, int nb, void *ud)
{
	fit_t *f = ud;
	mu__plan_t p;
	int *dev = f->dev, k = 0, rc;

	for (int i = 0; i < nb; i++) /* devices that got nothing are not used */
		if (cuts[i + 1] > cuts[i]) {
			dev[k] = order[i];
			f->keep[k++] = cuts[i];
		}
	f->keep[k] = f->m->g.nnodes;
	rc = mu__plan_from_cuts(&f->m->g, f->keep, k, &f->m->pbytes, f->m->flops, &p);
	for (int i = 0; rc == 0 && i < k; i++)
		if (p.s[i].param_bytes > f->budget[dev[i]]) {
			if (f->why[0] == '\0')
				snprintf(f->why, sizeof(f->why), "stage %d needs %.1f MiB (weights it shares "
				         "with another stage count twice), over its device's %.1f MiB", i,
				         (double)p.s[i].param_bytes / 1048576.0,
				         (double)f->budget[dev[i]] / 1048576.0);
			mu__plan_free(&p);
			return MU_ETOOBIG;
		}
	if (rc != 0)
		return rc;
	mu__plan_free(&f->best);
	f->best = p;
	memcpy(f->device, dev, sizeof(int) * (size_t)k);
	return 0;
}

int mu_plan_budgets(const mu_model_t *m, const uint64_t *budget, int nb, mu_plan_t **out,
                    int *device, char *err, size_t el)
{
	double *w;
	int *cuts, *order, rc;
	mu_plan_t *p;
	fit_t f;

	*out = NULL;
	if (err == NULL)
		el = 0;
	if (nb < 1)
		return MU_EARG;
	memset(&f, 0, sizeof(f));
	f.m = m;
	f.budget = budget;
	f.device = device;
	w = mu__calloc((size_t)m->g.nnodes + 1, sizeof(*w));
	cuts = mu__calloc((size_t)nb + 1, sizeof(*cuts));
	order = mu__calloc((size_t)nb + 1, sizeof(*order));
	f.keep = mu__calloc((size_t)nb + 1, sizeof(*f.keep));
	f.dev = mu__calloc((size_t)nb + 1, sizeof(*f.dev));
	p = mu__calloc(1, sizeof(*p));
	rc = w == NULL || cuts == NULL || order == NULL || f.keep == NULL || f.dev == NULL ||
	     p == NULL ? MU_ENOMEM : 0;
	if (rc == 0)
		rc = node_bytes(m, w);
	/* whichever order the devices came in: the fit is the same */
	if (rc == 0)
		rc = mu__cut_fit_any(&(mu__cut_items_t){w, m->g.nnodes, 0}, budget, nb, MU__CUT_EVEN,
		                     accept_fit, &f, order, cuts);
	if (rc == MU_ETOOBIG && f.why[0] != '\0')
		snprintf(err, el, "%s", f.why);
	else if (rc == MU_ETOOBIG)
		fit_error(m, w, budget, nb, err, el);
	mu__free(w);
	mu__free(cuts);
	mu__free(order);
	mu__free(f.keep);
	mu__free(f.dev);
	if (rc != 0) {
		mu__plan_free(&f.best);
		mu__free(p);
		return rc;
	}
	p->p = f.best;
	*out = p;
	return 0;
}

int mu_plan_stages(const mu_plan_t *p)
{
	return p->p.n;
}

void mu_plan_stage(const mu_plan_t *p, int i, mu_stage_info_t *o)
{
	const mu__stage_t *s = &p->p.s[i];

	o->first = s->first;
	o->last = s->last;
	o->param_bytes = s->param_bytes;
	o->flops = s->flops;
	o->ninputs = s->ninputs;
	o->noutputs = s->noutputs;
	o->nparams = s->nparams;
	o->inputs = (const char *const *)s->inputs;
	o->outputs = (const char *const *)s->outputs;
	o->params = (const char *const *)s->params;
}

void mu_plan_free(mu_plan_t *p)
{
	if (p == NULL)
		return;
	mu__plan_free(&p->p);
	mu__free(p);
}

/* ---- the whole model in one process ---- */

int mu_model_run(mu_model_t *m, const mu_tensor_list_t *inputs, mu_tensor_list_t *out,
                 char *err, size_t el)
{
	char why[512] = "", a[128], b[128];
	int rc = 0;

	if (err == NULL)
		el = 0;
	for (int i = 0; rc == 0 && i < m->g.nparams; i++) {
		const char *p = m->g.params[i];
		mu_tensor_t *t;

		if (mu__strmap_get(&m->loaded, p, strlen(p)) != NULL)
			continue;
		rc = mu__st_load(&m->st, mu__st_find(&m->st, p), &t);
		if (rc == 0 && (rc = mu__strmap_put(&m->loaded, p, strlen(p), t, NULL)) != 0)
			mu_tensor_free(t);
		if (rc != 0)
			snprintf(err, el, "loading weight %.200s: %s", p, mu_strerror(rc));
	}
	for (int i = 0; rc == 0 && i < m->g.ninputs; i++) {
		const mu__io_t *io = &m->g.inputs[i];
		const mu_tensor_t *t = mu_tensor_list_find(inputs, io->name);

		if (t == NULL) {
			snprintf(err, el, "input %.200s is missing", io->name);
			rc = MU_EARG;
		} else if (t->rank != io->rank || memcmp(t->dims, io->dims, sizeof(uint64_t) * io->rank) != 0) {
			mu__dims_text(t->rank, t->dims, a, sizeof(a));
			mu__dims_text(io->rank, io->dims, b, sizeof(b));
			snprintf(err, el, "input %.200s has shape %s; the model takes %s", io->name, a, b);
			rc = MU_EARG;
		} else if (t->dtype != io->dtype) {
			snprintf(err, el, "input %.200s is %s; the model takes %s", io->name,
			         mu_dtype_name((int)t->dtype), mu_dtype_name((int)io->dtype));
			rc = MU_EARG;
		}
	}
	if (rc == 0) {
		mu__blas_enter(m->threads);
		rc = mu__exec_run(&m->g, 0, m->g.nnodes, &m->loaded, inputs, m->g.outputs,
		                  m->g.noutputs, out, why, sizeof(why));
		mu__blas_leave();
		if (rc != 0)
			snprintf(err, el, "%s", why);
	}
	return rc;
}

int mu_model_set_threads(mu_model_t *m, int threads)
{
	if (m == NULL || threads < 1)
		return MU_EARG;
	m->threads = threads;
	return 0;
}

/* ---- tensors in files ---- */

int mu_safetensors_read(const char *path, mu_tensor_list_t *out, char *err, size_t el)
{
	mu__st_file_t f;
	char why[512] = "";
	int rc;

	if (err == NULL)
		el = 0;
	rc = mu__st_open(path, &f, why, sizeof(why));
	if (rc != 0) {
		snprintf(err, el, "%.300s: %s", path, why);
		return rc;
	}
	for (size_t i = 0; rc == 0 && i < f.n; i++) {
		mu_tensor_t *t = NULL, *c = NULL;

		rc = mu__st_load_exact(&f, &f.e[i], &t);
		if (rc == 0 && t->mem == NULL) { /* a view of the map: copy it out */
			rc = mu_tensor_new_typed(t->name, t->dtype, t->rank, t->dims, &c);
			if (rc == 0 && t->numel > 0)
				memcpy(c->raw, t->raw, mu_tensor_nbytes(t));
			mu_tensor_free(t);
			t = c;
		}
		if (rc == 0 && (rc = mu_tensor_list_push(out, t)) != 0)
			mu_tensor_free(t);
		if (rc != 0)
			snprintf(err, el, "%.300s: tensor %.200s: %s", path, f.e[i].name,
			         rc == MU_EPROTO ? "F8 tensors and BOOL bytes other than 0 and 1 are not read"
			                         : mu_strerror(rc));
	}
	mu__st_close(&f);
	return rc;
}

int mu_safetensors_write(const char *path, const mu_tensor_list_t *l)
{
	return mu__st_write(path, l);
}
