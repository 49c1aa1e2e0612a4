/* SPDX-License-Identifier: MIT */
/*
 * The human-readable tracker summary, byte for byte what TVM's
 * TrackerSession.text_summary() returns (spec §11), so scripts that scrape
 * `query_rpc_tracker` output keep working with `muster query`.
 *
 * The address column follows TVM since v0.24.0 (f"{addr:21s}", left-aligned);
 * v0.9.0 to v0.23.0 wrote "%21s" % addr, which right-aligns.
 *
 * Widths are counted in characters (code points), as Python does, not
 * bytes. Where TVM's code would raise (an info key without ':'), we print an
 * empty key field instead.
 */
#include <stdlib.h>
#include <string.h>

#include "muster/tracker.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/json_int.h"

#define DASHES30 "------------------------------"

typedef struct {
	const char *key;
	const cJSON *item;
	int index; /* original position, so equal keys keep their order */
} row_t;

static size_t utf8_chars(const char *s)
{
	size_t n = 0;

	for (; *s != '\0'; s++)
		n += ((unsigned char)*s & 0xC0) != 0x80;
	return n;
}

static int pad_right(mu__buf_t *b, const char *s, size_t width)
{
	size_t n = utf8_chars(s);
	int rc = mu__buf_appends(b, s);

	while (rc == 0 && n++ < width)
		rc = mu__buf_appendc(b, ' ');
	return rc;
}

static int cmp_rows(const void *a, const void *b)
{
	const row_t *x = a, *y = b;
	int c = strcmp(x->key, y->key);

	return c != 0 ? c : (x->index > y->index) - (x->index < y->index);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Python's str() of a JSON value inside the addr list. */
static int py_str(mu__buf_t *b, const cJSON *v)
{
	if (cJSON_IsString(v))
		return mu__buf_appends(b, v->valuestring);
	if (cJSON_IsNull(v))
		return mu__buf_appends(b, "None");
	if (cJSON_IsBool(v))
		return mu__buf_appends(b, cJSON_IsTrue(v) ? "True" : "False");
	return mu__json_dump(b, v);
}

static const char *key_of(const cJSON *info)
{
	const cJSON *k = cJSON_GetObjectItemCaseSensitive(info, "key");

	return cJSON_IsString(k) ? k->valuestring : "";
}

/* Field 1 of "server:KEY[:...]" split on ':' equals qkey? */
static int counts_for(const char *info_key, const char *qkey)
{
	const char *f1 = strchr(info_key, ':'), *end;

	if (f1 == NULL)
		return 0;
	f1++;
	end = strchr(f1, ':');
	if (end == NULL)
		end = f1 + strlen(f1);
	return strlen(qkey) == (size_t)(end - f1) &&
	       memcmp(f1, qkey, (size_t)(end - f1)) == 0;
}

static int server_list(mu__buf_t *b, row_t *rows, int n)
{
	mu__buf_t addr;
	int i, rc;

	rc = mu__buf_appends(b, "Server List\n" DASHES30 "\n"
	                        "server-address           key\n" DASHES30 "\n");
	mu__buf_init(&addr, b->max);
	for (i = 0; rc == 0 && i < n; i++) {
		const cJSON *a = cJSON_GetObjectItemCaseSensitive(rows[i].item, "addr"), *e;

		mu__buf_reset(&addr);
		cJSON_ArrayForEach(e, a) {
			if (rc == 0 && e != a->child)
				rc = mu__buf_appendc(&addr, ':');
			if (rc == 0)
				rc = py_str(&addr, e);
		}
		/* TVM writes f"{addr:21s}": a str is left-aligned in its 21
		 * columns, and a longer one is not cut */
		if (rc == 0)
			rc = pad_right(b, addr.data != NULL ? addr.data : "", 21);
		if (rc == 0)
			rc = mu__buf_printf(b, "    %s\n", rows[i].key);
	}
	mu__buf_free(&addr);
	return rc != 0 ? rc : mu__buf_appends(b, DASHES30 "\n\n");
}

static int dash_line(mu__buf_t *b, size_t n)
{
	int rc = 0;

	while (rc == 0 && n-- > 0)
		rc = mu__buf_appendc(b, '-');
	return rc != 0 ? rc : mu__buf_appendc(b, '\n');
}

static int queue_status(mu__buf_t *b, const cJSON *qi, row_t *rows, int nrows)
{
	int nk = cJSON_GetArraySize(qi), i, j, rc;
	const char **keys = mu__calloc((size_t)nk + 1, sizeof(*keys));
	size_t maxlen = 0, dashes;
	const cJSON *q;

	if (keys == NULL)
		return MU_ENOMEM;
	i = 0;
	cJSON_ArrayForEach(q, qi) {
		keys[i++] = q->string;
		if (utf8_chars(q->string) > maxlen)
			maxlen = utf8_chars(q->string);
	}
	qsort(keys, (size_t)nk, sizeof(*keys), cmp_str);
	/* The dash line is as long as the title line, its newline included. */
	dashes = (maxlen > 3 ? maxlen : 3) + 3 + strlen("total  free  pending") + 1;
	rc = mu__buf_appends(b, "Queue Status\n");
	if (rc == 0)
		rc = dash_line(b, dashes);
	if (rc == 0)
		rc = pad_right(b, "key", maxlen);
	if (rc == 0)
		rc = mu__buf_appends(b, "   total  free  pending\n");
	if (rc == 0)
		rc = dash_line(b, dashes);
	for (i = 0; rc == 0 && i < nk; i++) {
		const cJSON *e = cJSON_GetObjectItemCaseSensitive(qi, keys[i]);
		const cJSON *fr = cJSON_GetObjectItemCaseSensitive(e, "free");
		const cJSON *pe = cJSON_GetObjectItemCaseSensitive(e, "pending");
		int64_t nfree, npend;
		long total = 0;

		if (mu__json_int64(fr, -MU_JSON_INT_MAX, MU_JSON_INT_MAX, &nfree) != 0 ||
		    mu__json_int64(pe, -MU_JSON_INT_MAX, MU_JSON_INT_MAX, &npend) != 0) {
			rc = MU_EPROTO;
			break;
		}
		for (j = 0; j < nrows; j++)
			total += counts_for(rows[j].key, keys[i]);
		if (total == 0 && npend == 0)
			continue;
		rc = pad_right(b, keys[i], maxlen);
		if (rc == 0)
			rc = mu__buf_printf(b, "   %-5ld  %-4lld  %-7lld\n", total,
			                    (long long)nfree, (long long)npend);
	}
	if (rc == 0)
		rc = dash_line(b, dashes);
	mu__free(keys);
	return rc;
}

int mu_tracker_summary_text(const char *summary_json, char **text)
{
	cJSON *root = NULL;
	const cJSON *si, *qi, *it;
	row_t *rows = NULL;
	mu__buf_t b;
	int n, i = 0, rc;

	*text = NULL;
	rc = mu__json_parse(summary_json, strlen(summary_json), &root);
	if (rc != 0)
		return rc;
	si = cJSON_GetObjectItemCaseSensitive(root, "server_info");
	qi = cJSON_GetObjectItemCaseSensitive(root, "queue_info");
	if (!cJSON_IsArray(si) || !cJSON_IsObject(qi)) {
		cJSON_Delete(root);
		return MU_EPROTO;
	}
	n = cJSON_GetArraySize(si);
	rows = mu__calloc((size_t)n + 1, sizeof(*rows));
	if (rows == NULL) {
		cJSON_Delete(root);
		return MU_ENOMEM;
	}
	cJSON_ArrayForEach(it, si) {
		rows[i].key = key_of(it);
		rows[i].item = it;
		rows[i].index = i;
		i++;
	}
	qsort(rows, (size_t)n, sizeof(*rows), cmp_rows);
	mu__buf_init(&b, 256u << 20);
	rc = server_list(&b, rows, n);
	if (rc == 0)
		rc = queue_status(&b, qi, rows, n);
	if (rc == 0)
		*text = mu__buf_take(&b, NULL);
	mu__buf_free(&b);
	mu__free(rows);
	cJSON_Delete(root);
	return rc;
}
