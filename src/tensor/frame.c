/* SPDX-License-Identifier: MIT */
/*
 * rlx tensor frames: the incremental reader (frame_int.h), whole-buffer
 * encode/decode, and blocking socket I/O that moves tensor data without
 * touching it element by element (on little-endian hosts the wire and
 * memory layouts are the same; big-endian hosts swap in place).
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "muster/tensor.h"
#include "core/alloc_int.h"
#include "core/endian_int.h"
#include "core/json_int.h"
#include "core/sock_int.h"
#include "core/time_int.h"
#include "tensor/frame_int.h"


/* Wire order <-> host order for a tensor's elements (a no-op on
 * little-endian hosts). */
static void swap_elems(mu_tensor_t *t)
{
#if MU_BIG_ENDIAN_HOST
	size_t w = mu_dtype_size((int)t->dtype);
	unsigned char *b = t->raw;

	for (uint64_t i = 0; w > 1 && i < t->numel; i++, b += w)
		for (size_t k = 0; k < w / 2; k++) {
			unsigned char c = b[k];

			b[k] = b[w - 1 - k];
			b[w - 1 - k] = c;
		}
#else
	(void)t;
#endif
}

void mu_frame_limits_init(mu_frame_limits_t *l)
{
	l->max_name = 4096;
	l->max_count = 65536;
	l->max_bytes = (uint64_t)1 << 30;
}

/* ---- the reader ---- */

void mu__frame_reader_init(mu__frame_reader_t *r, const mu_frame_limits_t *lim)
{
	memset(r, 0, sizeof(*r));
	if (lim != NULL)
		r->lim = *lim;
	else
		mu_frame_limits_init(&r->lim);
	r->state = FR_COUNT;
	r->need = 4;
	mu_tensor_list_init(&r->got);
}

void mu__frame_reader_free(mu__frame_reader_t *r)
{
	mu__free(r->name);
	r->name = NULL;
	mu_tensor_free(r->cur);
	r->cur = NULL;
	mu_tensor_list_free(&r->got);
}

static void expect(mu__frame_reader_t *r, mu__fr_state_t s, size_t need)
{
	r->state = s;
	r->have = 0;
	r->need = need;
}

/* The next tensor's header, or the end of the frame. */
static void next_tensor(mu__frame_reader_t *r)
{
	if (r->idx == r->count)
		expect(r, FR_DONE, 0);
	else
		expect(r, FR_NAME_LEN, 4);
}

/* Storage grows from this many bytes, doubling as the data arrives. */
#define GROW_FIRST ((uint64_t)64 << 10)

/* Room for more of cur's data: its storage, doubled (up to its declared
 * size), with what came so far copied over. 64-byte aligned, as
 * mu_tensor_new's. */
static int grow(mu__frame_reader_t *r)
{
	mu_tensor_t *t = r->cur;
	uint64_t want = mu_tensor_nbytes(t), cap = r->cap == 0 ? GROW_FIRST : 2 * r->cap;
	void *mem;
	char *raw;

	if (cap > want)
		cap = want;
	mem = mu__malloc((size_t)cap + 64);
	if (mem == NULL)
		return MU_ENOMEM;
	raw = (char *)(((uintptr_t)mem + 63) & ~(uintptr_t)63);
	if (r->data_have > 0)
		memcpy(raw, t->raw, (size_t)r->data_have);
	mu__free(t->mem);
	t->mem = mem;
	t->raw = raw;
	r->cap = cap;
	return 0;
}

/* numel == product of dims, and its bytes fit the limit and the owner's
 * budget: then make the tensor (its storage comes as its data does). */
static int start_data(mu__frame_reader_t *r, uint64_t numel)
{
	uint64_t prod = 1;
	size_t w = mu_dtype_size((int)r->dtype);
	uint32_t i;
	int rc;

	for (i = 0; i < r->rank; i++) {
		if (r->dims[i] != 0 && prod > UINT64_MAX / r->dims[i])
			return MU_ETOOBIG;
		prod *= r->dims[i];
	}
	if (prod != numel)
		return MU_EPROTO;
	if (numel > (r->lim.max_bytes - r->bytes) / w || numel * w > SIZE_MAX - 64)
		return MU_ETOOBIG;
	if (r->admit != NULL && (rc = r->admit(r->admit_ud, r->bytes + numel * w)) != 0)
		return rc;
	r->bytes += numel * w;
	if (numel == 0)
		rc = mu_tensor_new_typed(r->name, r->dtype, r->rank, r->dims, &r->cur);
	else
		rc = mu_tensor_wrap_typed(r->name, r->dtype, r->rank, r->dims, NULL, &r->cur);
	mu__free(r->name);
	r->name = NULL;
	if (rc != 0)
		return rc;
	r->data_have = 0;
	r->cap = 0;
	r->idx++;
	if (numel == 0) {
		rc = mu_tensor_list_push(&r->got, r->cur);
		r->cur = NULL;
		if (rc != 0)
			return rc;
		next_tensor(r);
		return 0;
	}
	expect(r, FR_DATA, 0);
	return grow(r);
}

/* A field just completed: check it and move on. */
static int field_done(mu__frame_reader_t *r)
{
	switch (r->state) {
	case FR_COUNT:
		r->count = mu_le32_get(r->field);
		if (r->count > r->lim.max_count)
			return MU_ETOOBIG;
		next_tensor(r);
		return 0;
	case FR_NAME_LEN:
		r->name_len = mu_le32_get(r->field);
		if (r->name_len > r->lim.max_name)
			return MU_ETOOBIG;
		r->name = mu__malloc((size_t)r->name_len + 1);
		if (r->name == NULL)
			return MU_ENOMEM;
		expect(r, FR_NAME, r->name_len);
		if (r->name_len == 0)
			return field_done(r);
		return 0;
	case FR_NAME:
		r->name[r->name_len] = '\0';
		/* rlx requires UTF-8; we also refuse NULs (names are C strings) */
		if (memchr(r->name, '\0', r->name_len) != NULL ||
		    !mu__utf8_valid(r->name, r->name_len))
			return MU_EPROTO;
		expect(r, FR_RANK, 4);
		return 0;
	case FR_RANK: {
		uint32_t word = mu_le32_get(r->field);

		/* rank in the low byte, a dtype other than F32 in the next
		 * (rlx's frames are all F32: their rankword is the rank) */
		r->rank = word & 0xFF;
		r->dtype = (mu_dtype_t)(word >> 8 & 0xFF);
		if ((word >> 16) != 0 || r->rank > MU_TENSOR_MAX_RANK)
			return MU_ETOOBIG;
		if (r->dtype >= MU_DTYPE_COUNT)
			return MU_EPROTO;
		expect(r, r->rank ? FR_DIMS : FR_NUMEL, r->rank ? 8u * r->rank : 8);
		return 0;
	}
	case FR_DIMS:
		for (uint32_t i = 0; i < r->rank; i++)
			r->dims[i] = mu_le64_get(r->field + 8 * i);
		expect(r, FR_NUMEL, 8);
		return 0;
	case FR_NUMEL:
		return start_data(r, mu_le64_get(r->field));
	default:
		return MU_EPROTO;
	}
}

void *mu__frame_reader_space(mu__frame_reader_t *r, size_t *n)
{
	uint64_t left;

	*n = 0;
	if (r->state != FR_DATA)
		return NULL;
	if (r->data_have == r->cap && grow(r) != 0)
		return NULL;
	left = r->cap - r->data_have;
	*n = left > SIZE_MAX ? SIZE_MAX : (size_t)left;
	return (char *)r->cur->raw + r->data_have;
}

int mu__frame_reader_wrote(mu__frame_reader_t *r, size_t n)
{
	int rc;

	r->data_have += n;
	if (r->data_have < mu_tensor_nbytes(r->cur))
		return 0;
	swap_elems(r->cur);
	rc = mu_tensor_list_push(&r->got, r->cur);
	if (rc != 0)
		return rc;
	r->cur = NULL;
	next_tensor(r);
	return r->state == FR_DONE;
}

int mu__frame_reader_feed(mu__frame_reader_t *r, const void *p, size_t n,
                          size_t *used)
{
	const unsigned char *b = p;
	size_t off = 0, k;
	int rc;

	while (r->state != FR_DONE && off < n) {
		if (r->state == FR_DATA) {
			void *dst = mu__frame_reader_space(r, &k);

			if (dst == NULL) {
				*used = off;
				return MU_ENOMEM;
			}
			k = k < n - off ? k : n - off;
			memcpy(dst, b + off, k); /* one copy of the run, not per element */
			off += k;
			rc = mu__frame_reader_wrote(r, k);
			if (rc < 0) {
				*used = off;
				return rc;
			}
			continue;
		}
		k = r->need - r->have < n - off ? r->need - r->have : n - off;
		memcpy(r->state == FR_NAME ? (unsigned char *)r->name + r->have
		                           : r->field + r->have, b + off, k);
		r->have += k;
		off += k;
		if (r->have == r->need && (rc = field_done(r)) != 0) {
			*used = off;
			return rc;
		}
	}
	*used = off;
	return r->state == FR_DONE;
}

/*
 * Move a complete frame's tensors to the end of out, all or none: on
 * MU_ENOMEM out is as it was and the tensors are still the reader's.
 */
static int move_all(mu__frame_reader_t *r, mu_tensor_list_t *out)
{
	size_t n0 = out->n, i;

	for (i = 0; i < r->got.n; i++)
		if (mu_tensor_list_push(out, r->got.t[i]) != 0) {
			out->n = n0;
			return MU_ENOMEM;
		}
	r->got.n = 0;
	return 0;
}

int mu__frame_reader_take(mu__frame_reader_t *r, mu_tensor_list_t *out)
{
	return move_all(r, out);
}

/* ---- encoding ---- */

size_t mu__frame_header_size(const mu_tensor_t *t)
{
	return 4 + strlen(t->name) + 4 + 8 * (size_t)t->rank + 8;
}

void mu__frame_header(const mu_tensor_t *t, unsigned char *h)
{
	size_t n = strlen(t->name), off = 0;
	uint32_t i;

	mu_le32_put(h, (uint32_t)n);
	memcpy(h + 4, t->name, n);
	off = 4 + n;
	mu_le32_put(h + off, mu__frame_rankword(t));
	off += 4;
	for (i = 0; i < t->rank; i++, off += 8)
		mu_le64_put(h + off, t->dims[i]);
	mu_le64_put(h + off, t->numel);
}

int mu__frame_typed(const mu_tensor_list_t *l)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->t[i]->dtype != MU_DTYPE_F32)
			return 1;
	return 0;
}

uint32_t mu__frame_rankword(const mu_tensor_t *t)
{
	return t->rank | (uint32_t)t->dtype << 8; /* F32: the rank alone, as rlx */
}

uint64_t mu_frame_size(const mu_tensor_list_t *l)
{
	uint64_t n = 4;
	size_t i;

	for (i = 0; i < l->n; i++)
		n += mu__frame_header_size(l->t[i]) + mu_tensor_nbytes(l->t[i]);
	return n;
}

int mu_frame_encode(const mu_tensor_list_t *l, void **buf, size_t *len)
{
	uint64_t size = mu_frame_size(l);
	unsigned char *p;
	size_t off = 4, i;

	*buf = NULL;
	*len = 0;
	if (size > SIZE_MAX || l->n > UINT32_MAX)
		return MU_ETOOBIG;
	p = mu__malloc((size_t)size);
	if (p == NULL)
		return MU_ENOMEM;
	mu_le32_put(p, (uint32_t)l->n);
	for (i = 0; i < l->n; i++) {
		const mu_tensor_t *t = l->t[i];

		mu_tensor_t wire = *t;

		mu__frame_header(t, p + off);
		off += mu__frame_header_size(t);
		if (t->numel > 0) /* an empty borrowed tensor may have no data */
			memcpy(p + off, t->raw, mu_tensor_nbytes(t));
		wire.raw = p + off;
		swap_elems(&wire);
		off += mu_tensor_nbytes(t);
	}
	*buf = p;
	*len = (size_t)size;
	return 0;
}

int mu_frame_decode(const void *buf, size_t len, const mu_frame_limits_t *lim,
                    mu_tensor_list_t *out)
{
	mu__frame_reader_t r;
	size_t used = 0;
	int rc;

	mu__frame_reader_init(&r, lim);
	rc = mu__frame_reader_feed(&r, buf, len, &used);
	if (rc == 0)
		rc = MU_EEOF;
	else if (rc == 1 && used != len)
		rc = MU_EPROTO;
	else if (rc == 1)
		rc = 0;
	if (rc == 0)
		rc = move_all(&r, out);
	mu__frame_reader_free(&r);
	return rc;
}

/* ---- sockets ---- */

int mu__frame_sendv(mu_stream_t *fd, const void *head, size_t head_len,
                    const mu_tensor_list_t *l, int64_t deadline, int idle_ms)
{
	unsigned char *hdrs, count[4];
	struct iovec *iov;
	size_t i, total = 0, off = 0;
	int rc, n = 0;

#if MU_BIG_ENDIAN_HOST
	void *buf;
	size_t len;
	struct iovec two[2];

	rc = mu_frame_encode(l, &buf, &len);
	if (rc != 0)
		return rc;
	two[0].iov_base = (void *)head;
	two[0].iov_len = head_len;
	two[1].iov_base = buf;
	two[1].iov_len = len;
	rc = mu__sock_sendv(fd, two, 2, deadline, idle_ms);
	mu__free(buf);
	return rc;
#endif
	for (i = 0; i < l->n; i++)
		total += mu__frame_header_size(l->t[i]);
	hdrs = mu__malloc(total + 1);
	iov = mu__calloc(2 * l->n + 2, sizeof(*iov));
	if (hdrs == NULL || iov == NULL) {
		mu__free(hdrs);
		mu__free(iov);
		return MU_ENOMEM;
	}
	if (head_len > 0) {
		iov[n].iov_base = (void *)head;
		iov[n++].iov_len = head_len;
	}
	mu_le32_put(count, (uint32_t)l->n);
	iov[n].iov_base = count;
	iov[n++].iov_len = 4;
	for (i = 0; i < l->n; i++) {
		const mu_tensor_t *t = l->t[i];
		size_t h = mu__frame_header_size(t);

		mu__frame_header(t, hdrs + off);
		iov[n].iov_base = hdrs + off;
		iov[n++].iov_len = h;
		off += h;
		if (t->numel > 0) { /* straight from the tensor's memory */
			iov[n].iov_base = t->raw;
			iov[n++].iov_len = mu_tensor_nbytes(t);
		}
	}
	rc = mu__sock_sendv(fd, iov, n, deadline, idle_ms);
	mu__free(hdrs);
	mu__free(iov);
	return rc;
}

int mu_frame_send(mu_stream_t *fd, const mu_tensor_list_t *l, int timeout_ms)
{
	return mu__frame_sendv(fd, NULL, 0, l, mu__deadline(timeout_ms), -1);
}

int mu_frame_recv(mu_stream_t *fd, const mu_frame_limits_t *lim, mu_tensor_list_t *out,
                  int timeout_ms)
{
	int64_t deadline = mu__deadline(timeout_ms);
	mu__frame_reader_t r;
	unsigned char small[4096];
	int rc = 0;

	mu__frame_reader_init(&r, lim);
	while (rc == 0) {
		size_t room, used;
		void *dst = mu__frame_reader_space(&r, &room);
		size_t got;

		/* headers: small reads into a scratch buffer, parsed in place;
		 * data: straight into the tensor */
		if (dst == NULL) { /* never past the field, nor past small */
			dst = small;
			room = r.need - r.have < sizeof(small) ? r.need - r.have : sizeof(small);
		}
		rc = mu__sock_recv_some(fd, dst, room, &got, deadline);
		if (rc != 0)
			break;
		if (dst != small)
			rc = mu__frame_reader_wrote(&r, got);
		else
			rc = mu__frame_reader_feed(&r, small, got, &used);
	}
	if (rc == 1)
		rc = move_all(&r, out);
	mu__frame_reader_free(&r);
	return rc;
}
