/* SPDX-License-Identifier: MIT */
/*
 * Pre-tokenizers: a normalized section of text cut into the words BPE runs
 * on, as HF's pre-tokenizers cut it (Split and its five behaviours, the
 * prefix space of ByteLevel, Metaspace). Words are spans of one buffer of
 * the encode call (w->c); steps that change text append the new bytes to
 * it. What the steps are comes from tok/hf_pipe.c or tok/vocab.c.
 */
#include <string.h>

#include "core/buf_int.h"
#include "muster/common.h"
#include "tok/impl_int.h"

/* Cut s[0..len) by re into w->cut: gaps and matches in order, flipped
 * when invert. */
static int cut(mu__tok_work_t *w, const mu__tok_pre_t *op, const char *s, size_t len)
{
	size_t pos = 0, ms, me;
	int rc = 0;

	w->ncut = 0;
	while (rc == 0 && pos < len && mu__tok_find(op->re, w->md, s, len, pos, 0, &ms, &me)) {
		if (ms > pos)
			rc = mu__tok_push3(&w->cut, &w->ncut, &w->capcut, pos, ms, 0);
		if (rc == 0)
			rc = mu__tok_push3(&w->cut, &w->ncut, &w->capcut, ms, me, 1);
		pos = me;
	}
	if (rc == 0 && pos < len)
		rc = mu__tok_push3(&w->cut, &w->ncut, &w->capcut, pos, len, 0);
	for (size_t i = 0; op->invert && i < w->ncut; i++)
		w->cut[i][2] = !w->cut[i][2];
	return rc;
}

/* MergedWithNext: each match joins the piece after it, walking backwards
 * as HF does. The pieces are folded in place to the end of w->cut (never
 * ahead of the one being read); returns where they start, *n their count. */
static size_t fold_next(mu__tok_work_t *w, size_t *n)
{
	size_t total = w->ncut, k = 0, prev = 0;

	for (size_t i = total; i-- > 0;) {
		size_t a = w->cut[i][0], b = w->cut[i][1], m = w->cut[i][2];

		if (m && !prev && k > 0) {
			w->cut[total - k][0] = a;
		} else {
			k++;
			w->cut[total - k][0] = a;
			w->cut[total - k][1] = b;
		}
		prev = m;
	}
	*n = k;
	return total - k;
}

/* The other behaviours, folded in place from the start of w->cut. */
static size_t fold(mu__tok_work_t *w, mu__tok_behavior_t b)
{
	size_t k = 0, prev = 0;

	for (size_t i = 0; i < w->ncut; i++) {
		size_t m = w->cut[i][2];
		int merge = (b == MU__TOK_B_PREVIOUS && m && !prev && k > 0) ||
		            (b == MU__TOK_B_CONTIGUOUS && m == prev && k > 0);

		prev = m;
		if (b == MU__TOK_B_REMOVED && m)
			continue;
		if (merge) {
			w->cut[k - 1][1] = w->cut[i][1];
			continue;
		}
		w->cut[k][0] = w->cut[i][0];
		w->cut[k][1] = w->cut[i][1];
		k++;
	}
	return k;
}

/* Split span [off, off+len) of w->c by op->re, keeping the pieces as HF's
 * SplitDelimiterBehavior says; the pieces go to w->sp2. */
static int split(mu__tok_work_t *w, const mu__tok_pre_t *op, size_t off, size_t len,
                 size_t origin)
{
	size_t first = 0, n;
	int rc = cut(w, op, w->c.data + off, len);

	if (rc != 0)
		return rc;
	if (op->behavior == MU__TOK_B_NEXT)
		first = fold_next(w, &n);
	else
		n = fold(w, op->behavior);
	for (size_t k = first; rc == 0 && k < first + n; k++)
		if (w->cut[k][1] > w->cut[k][0])
			rc = mu__tok_push3(&w->sp2, &w->nsp2, &w->capsp2, off + w->cut[k][0],
			                   w->cut[k][1] - w->cut[k][0], origin && w->cut[k][0] == 0);
	return rc;
}

/* Metaspace: spaces become the replacement, which is prepended when the
 * scheme says; the new bytes go to the end of w->c. */
static int metaspace(mu__tok_work_t *w, const mu__tok_pre_t *op, size_t off, size_t len,
                     size_t origin, size_t *noff, size_t *nlen)
{
	size_t start = w->c.len;
	int rc = 0, pre;

	pre = op->prepend == MU__TOK_PREPEND_ALWAYS ||
	      (op->prepend == MU__TOK_PREPEND_FIRST && origin);
	if (pre && len > 0 && w->c.data[off] == ' ')
		pre = 0; /* it starts with the replacement once replaced */
	if (pre && len >= op->replen && memcmp(w->c.data + off, op->rep, op->replen) == 0)
		pre = 0;
	if (pre)
		rc = mu__buf_append(&w->c, op->rep, op->replen);
	for (size_t i = 0; rc == 0 && i < len; i++) {
		char c = w->c.data[off + i];

		rc = c == ' ' ? mu__buf_append(&w->c, op->rep, op->replen) : mu__buf_appendc(&w->c, c);
	}
	*noff = start;
	*nlen = w->c.len - start;
	return rc;
}

static int pre_one(mu__tok_work_t *w, const mu__tok_pre_t *op)
{
	int rc = 0;

	w->nsp2 = 0;
	for (size_t i = 0; rc == 0 && i < w->nsp; i++) {
		size_t off = w->sp[i][0], len = w->sp[i][1], origin = w->sp[i][2];

		switch (op->kind) {
		case MU__TOK_P_SPLIT:
			rc = split(w, op, off, len, origin);
			break;
		case MU__TOK_P_PREFIX:
			if (len == 0 || w->c.data[off] != ' ') {
				size_t start = w->c.len;

				/* reserve first: the source is in the same buffer */
				rc = mu__buf_reserve(&w->c, len + 1);
				if (rc == 0)
					rc = mu__buf_appendc(&w->c, ' ');
				if (rc == 0)
					rc = mu__buf_append(&w->c, w->c.data + off, len);
				off = start;
				len++;
			}
			if (rc == 0)
				rc = mu__tok_push3(&w->sp2, &w->nsp2, &w->capsp2, off, len, origin);
			break;
		case MU__TOK_P_METASPACE:
			rc = metaspace(w, op, off, len, origin, &off, &len);
			if (rc == 0 && op->split)
				rc = split(w, op, off, len, origin);
			else if (rc == 0)
				rc = mu__tok_push3(&w->sp2, &w->nsp2, &w->capsp2, off, len, origin);
			break;
		}
	}
	if (rc == 0) { /* swap the lists */
		size_t (*v)[3] = w->sp, n = w->capsp;

		w->sp = w->sp2;
		w->capsp = w->capsp2;
		w->nsp = w->nsp2;
		w->sp2 = v;
		w->capsp2 = n;
	}
	return rc;
}

int mu__tok_pretokenize(const mu__tok_t *t, mu__tok_work_t *w, const char *p, size_t len,
                        int origin)
{
	int rc;

	mu__buf_reset(&w->c);
	w->nsp = 0;
	rc = mu__buf_append(&w->c, p, len);
	if (rc == 0)
		rc = mu__tok_push3(&w->sp, &w->nsp, &w->capsp, 0, len, (size_t)(origin != 0));
	for (size_t i = 0; rc == 0 && i < t->npre; i++)
		rc = pre_one(w, &t->pre[i]);
	return rc;
}
