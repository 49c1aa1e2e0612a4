/* SPDX-License-Identifier: MIT */
/*
 * Metadata blobs: NIXL's nixlSerDes framing, as far as muster needs it.
 * A blob starts with "nixlSerDes|" and a record "Agent" <u64 LE length>
 * <name> "|"; that tells a receiver whose metadata it is. muster's own
 * blobs carry the caller's payload in one more record, "MusterData". NIXL
 * blobs go on with NIXL's records, which muster treats as opaque.
 */
#include <string.h>

#include "muster/md.h"
#include "core/alloc_int.h"
#include "core/buf_int.h"
#include "core/endian_int.h"
#include "md/md_int.h"

#define MAGIC "nixlSerDes|"
#define MAGIC_LEN 11

static int put_record(mu__buf_t *b, const char *tag, const void *v, size_t n)
{
	unsigned char len[8];
	int rc = mu__buf_appends(b, tag);

	mu_le64_put(len, n);
	if (rc == 0)
		rc = mu__buf_append(b, len, 8);
	if (rc == 0)
		rc = mu__buf_append(b, v, n);
	return rc != 0 ? rc : mu__buf_appendc(b, '|');
}

/*
 * Read the record `tag` at *off: 0 with *v and *n set and *off moved past it,
 * or MU_EPROTO (another tag, truncated, no closing '|').
 */
static int get_record(const unsigned char *p, size_t len, size_t *off,
                      const char *tag, const void **v, size_t *n)
{
	size_t t = strlen(tag), o = *off;
	uint64_t vl;

	if (len - o < t + 8 || memcmp(p + o, tag, t) != 0)
		return MU_EPROTO;
	vl = mu_le64_get(p + o + t);
	o += t + 8;
	if (vl > len - o || len - o - vl < 1 || p[o + vl] != '|')
		return MU_EPROTO;
	*v = p + o;
	*n = (size_t)vl;
	*off = o + (size_t)vl + 1;
	return 0;
}

int mu__md_blob_make(const char *name, const char *label, const void *payload,
                     size_t n, void **blob, size_t *len)
{
	mu__buf_t b;
	int rc;

	*blob = NULL;
	*len = 0;
	if (name == NULL || name[0] == '\0')
		return MU_EARG;
	mu__buf_init(&b, (size_t)-1);
	rc = mu__buf_appends(&b, MAGIC);
	if (rc == 0)
		rc = put_record(&b, "Agent", name, strlen(name));
	if (rc == 0)
		rc = put_record(&b, "MusterData", payload, n);
	/* a partial blob says which label it is, so a P2P receiver (whose
	 * frames carry no label) files it right */
	if (rc == 0 && label != NULL)
		rc = put_record(&b, "MusterLabel", label, strlen(label));
	if (rc != 0) {
		mu__buf_free(&b);
		return rc;
	}
	*blob = mu__buf_take(&b, len);
	return 0;
}

int mu_md_blob_make(const char *name, const void *payload, size_t n, void **blob,
                    size_t *len)
{
	return mu__md_blob_make(name, NULL, payload, n, blob, len);
}

int mu__md_blob_label(const void *blob, size_t len, char *label, size_t label_len)
{
	const void *v;
	size_t vn, off = MAGIC_LEN;

	if (len < MAGIC_LEN || memcmp(blob, MAGIC, MAGIC_LEN) != 0 ||
	    get_record(blob, len, &off, "Agent", &v, &vn) != 0 ||
	    get_record(blob, len, &off, "MusterData", &v, &vn) != 0 ||
	    get_record(blob, len, &off, "MusterLabel", &v, &vn) != 0 ||
	    vn == 0 || vn >= label_len || memchr(v, '\0', vn) != NULL)
		return MU_EPROTO;
	memcpy(label, v, vn);
	label[vn] = '\0';
	return 0;
}

int mu_md_blob_name(const void *blob, size_t len, char *name, size_t name_len)
{
	const void *v;
	size_t n, off = MAGIC_LEN;

	if (len < MAGIC_LEN || memcmp(blob, MAGIC, MAGIC_LEN) != 0 ||
	    get_record(blob, len, &off, "Agent", &v, &n) != 0 || n == 0 ||
	    memchr(v, '\0', n) != NULL)
		return MU_EPROTO;
	if (n >= name_len)
		return MU_ETOOBIG;
	memcpy(name, v, n);
	name[n] = '\0';
	return 0;
}

int mu_md_blob_payload(const void *blob, size_t len, const void **payload,
                       size_t *n)
{
	const void *v;
	size_t vn, off = MAGIC_LEN;

	if (len < MAGIC_LEN || memcmp(blob, MAGIC, MAGIC_LEN) != 0 ||
	    get_record(blob, len, &off, "Agent", &v, &vn) != 0 ||
	    get_record(blob, len, &off, "MusterData", payload, n) != 0)
		return MU_EPROTO;
	return 0;
}
