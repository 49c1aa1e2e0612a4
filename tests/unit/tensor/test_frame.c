/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/tensor/frame.c: rlx tensor frames against bytes
 * written by hand from spec/rlx-pipeline.md §4, every limit of the
 * decoder, any split of the input, the zero-copy path, and send/recv over
 * a socketpair (a large tensor, a peer that goes away, deadlines).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mu_test.h"

#include "muster/tensor.h"
#include "core/endian_int.h"
#include "core/stream_int.h"
#include "core/time_int.h"
#include "tensor/frame_int.h"

/* ---- building frames by hand ---- */

typedef struct {
	unsigned char b[8192];
	size_t n;
} bytes_t;

static void put32(bytes_t *w, uint32_t v)
{
	mu_le32_put(w->b + w->n, v);
	w->n += 4;
}

static void put64(bytes_t *w, uint64_t v)
{
	mu_le64_put(w->b + w->n, v);
	w->n += 8;
}

static void putf(bytes_t *w, float f)
{
	uint32_t v;

	memcpy(&v, &f, 4);
	put32(w, v);
}

static void putname(bytes_t *w, const char *s)
{
	put32(w, (uint32_t)strlen(s));
	memcpy(w->b + w->n, s, strlen(s));
	w->n += strlen(s);
}

/* A tensor header (name .. numel) as the spec lays it out. */
static void puthdr(bytes_t *w, const char *name, uint32_t rank, const uint64_t *dims,
                   uint64_t numel)
{
	putname(w, name);
	put32(w, rank);
	for (uint32_t i = 0; i < rank; i++)
		put64(w, dims[i]);
	put64(w, numel);
}

/* The same with a dtype code in the rankword's second byte (and, for
 * the limit tests, whatever bits above it). */
static void puthdr_typed(bytes_t *w, const char *name, uint32_t rank, uint32_t high,
                         const uint64_t *dims, uint64_t numel)
{
	putname(w, name);
	put32(w, rank | high << 8);
	for (uint32_t i = 0; i < rank; i++)
		put64(w, dims[i]);
	put64(w, numel);
}

/* The reference frame: a scalar "s" = 1.5 and a 2x3 "w" = 0..5. */
static void two_tensors(bytes_t *w)
{
	static const uint64_t d23[] = {2, 3};

	w->n = 0;
	put32(w, 2);
	puthdr(w, "s", 0, NULL, 1);
	putf(w, 1.5f);
	puthdr(w, "w", 2, d23, 6);
	for (int i = 0; i < 6; i++)
		putf(w, (float)i);
}

static void check_two(const mu_tensor_list_t *l, size_t at)
{
	const mu_tensor_t *s, *w;

	assert_true(l->n >= at + 2);
	s = l->t[at];
	w = l->t[at + 1];
	assert_string_equal(s->name, "s");
	assert_int_equal(s->rank, 0);
	assert_int_equal(s->numel, 1);
	assert_true(s->data[0] == 1.5f);
	assert_string_equal(w->name, "w");
	assert_int_equal(w->rank, 2);
	assert_int_equal(w->dims[0], 2);
	assert_int_equal(w->dims[1], 3);
	assert_int_equal(w->numel, 6);
	for (int i = 0; i < 6; i++)
		assert_true(w->data[i] == (float)i);
	assert_int_equal((uintptr_t)w->data % 64, 0);
}

static mu_tensor_t *mk(const char *name, uint32_t rank, const uint64_t *dims)
{
	mu_tensor_t *t;

	assert_int_equal(mu_tensor_new(name, rank, dims, &t), 0);
	for (uint64_t i = 0; i < t->numel; i++)
		t->data[i] = (float)i * 0.25f - 3.0f;
	return t;
}

/* ---- encode / decode against the spec's bytes ---- */

static void test_encode_decode_hand_bytes(void **state)
{
	static const uint64_t d23[] = {2, 3};
	/* count=1, name_len=1 "s", rank=0, numel=1, 1.5f: 0x3fc00000 */
	static const unsigned char scalar[] = {
		1, 0, 0, 0, 1, 0, 0, 0, 's', 0, 0, 0, 0,
		1, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x00, 0xc0, 0x3f};
	mu_tensor_list_t l, back;
	mu_tensor_t *t;
	bytes_t w;
	void *buf;
	size_t len;

	(void)state;
	mu_tensor_list_init(&l);
	assert_int_equal(mu_tensor_new("s", 0, NULL, &t), 0);
	t->data[0] = 1.5f;
	assert_int_equal(mu_tensor_list_push(&l, t), 0);
	assert_int_equal(mu_frame_size(&l), sizeof(scalar));
	assert_int_equal(mu_frame_encode(&l, &buf, &len), 0);
	assert_int_equal(len, sizeof(scalar));
	assert_memory_equal(buf, scalar, sizeof(scalar));
	mu_free(buf);

	/* add the 2x3 tensor: the whole frame matches two_tensors() */
	t = mk("w", 2, d23);
	for (int i = 0; i < 6; i++)
		t->data[i] = (float)i;
	assert_int_equal(mu_tensor_list_push(&l, t), 0);
	two_tensors(&w);
	assert_int_equal(mu_frame_size(&l), w.n);
	assert_int_equal(mu_frame_encode(&l, &buf, &len), 0);
	assert_int_equal(len, w.n);
	assert_memory_equal(buf, w.b, w.n);
	mu_free(buf);

	mu_tensor_list_init(&back);
	assert_int_equal(mu_frame_decode(w.b, w.n, NULL, &back), 0);
	assert_int_equal(back.n, 2);
	check_two(&back, 0);
	/* decode appends after what the list holds */
	assert_int_equal(mu_frame_decode(w.b, w.n, NULL, &back), 0);
	assert_int_equal(back.n, 4);
	check_two(&back, 2);
	mu_tensor_list_free(&back);
	mu_tensor_list_free(&l);
}

static void test_empty_frame_and_numel_zero(void **state)
{
	static const unsigned char empty[] = {0, 0, 0, 0};
	static const uint64_t d05[] = {0, 5};
	mu_tensor_list_t l;
	mu_tensor_t *t;
	bytes_t w = {.n = 0};
	void *buf;
	size_t len;

	(void)state;
	mu_tensor_list_init(&l);
	assert_int_equal(mu_frame_encode(&l, &buf, &len), 0);
	assert_int_equal(len, 4);
	assert_memory_equal(buf, empty, 4);
	mu_free(buf);
	assert_int_equal(mu_frame_decode(empty, 4, NULL, &l), 0);
	assert_int_equal(l.n, 0);

	/* a [0, 5] tensor: header, no data */
	put32(&w, 1);
	puthdr(&w, "e", 2, d05, 0);
	assert_int_equal(mu_frame_decode(w.b, w.n, NULL, &l), 0);
	assert_int_equal(l.n, 1);
	assert_int_equal(l.t[0]->numel, 0);
	assert_int_equal(l.t[0]->dims[1], 5);
	assert_int_equal(mu_frame_encode(&l, &buf, &len), 0);
	assert_int_equal(len, w.n);
	assert_memory_equal(buf, w.b, w.n);
	mu_free(buf);
	mu_tensor_list_free(&l);

	/* a borrowed empty tensor with no storage at all encodes too */
	assert_int_equal(mu_tensor_wrap("e", 2, d05, NULL, &t), 0);
	assert_int_equal(mu_tensor_list_push(&l, t), 0);
	assert_int_equal(mu_frame_encode(&l, &buf, &len), 0);
	assert_memory_equal(buf, w.b, w.n);
	mu_free(buf);
	mu_tensor_list_free(&l);
}

static void test_utf8_and_empty_names(void **state)
{
	/* "héllo→" in UTF-8, and the empty name */
	static const char name[] = "h\xc3\xa9llo\xe2\x86\x92";
	mu_tensor_list_t l;
	bytes_t w = {.n = 0};
	void *buf;
	size_t len;

	(void)state;
	put32(&w, 2);
	puthdr(&w, name, 0, NULL, 1);
	putf(&w, -2.0f);
	puthdr(&w, "", 0, NULL, 1);
	putf(&w, 7.0f);
	assert_int_equal(w.b[4], 9); /* name_len counts bytes, not characters */
	mu_tensor_list_init(&l);
	assert_int_equal(mu_frame_decode(w.b, w.n, NULL, &l), 0);
	assert_int_equal(l.n, 2);
	assert_string_equal(l.t[0]->name, name);
	assert_string_equal(l.t[1]->name, "");
	assert_non_null(mu_tensor_list_find(&l, name));
	assert_int_equal(mu_frame_encode(&l, &buf, &len), 0);
	assert_int_equal(len, w.n);
	assert_memory_equal(buf, w.b, w.n);
	mu_free(buf);
	mu_tensor_list_free(&l);
}

/* ---- every limit, checked as soon as the field is in ---- */

/* Feed a prefix through a fresh reader; expect rc having used all of it. */
static void expect_feed(const bytes_t *w, const mu_frame_limits_t *lim, int want)
{
	mu__frame_reader_t r;
	size_t used = 0;

	mu__frame_reader_init(&r, lim);
	assert_int_equal(mu__frame_reader_feed(&r, w->b, w->n, &used), want);
	if (want < 0)
		assert_int_equal(used, w->n); /* the error came at the last byte */
	mu__frame_reader_free(&r);
}

/* And mu_frame_decode of the same bytes leaves the list as it was. */
static void expect_decode(const bytes_t *w, const mu_frame_limits_t *lim, int want)
{
	mu_tensor_list_t l;
	mu_tensor_t *keep;

	mu_tensor_list_init(&l);
	keep = mk("keep", 0, NULL);
	assert_int_equal(mu_tensor_list_push(&l, keep), 0);
	assert_int_equal(mu_frame_decode(w->b, w->n, lim, &l), want);
	assert_int_equal(l.n, 1);
	assert_ptr_equal(l.t[0], keep);
	mu_tensor_list_free(&l);
}

static void test_limit_name(void **state)
{
	mu_frame_limits_t lim;
	bytes_t w = {.n = 0};

	(void)state;
	mu_frame_limits_init(&lim);
	assert_int_equal(lim.max_name, 4096);
	assert_int_equal(lim.max_count, 65536);
	assert_true(lim.max_bytes == (uint64_t)1 << 30);
	lim.max_name = 3;
	put32(&w, 1);
	put32(&w, 4); /* refused before any name byte arrives */
	expect_feed(&w, &lim, MU_ETOOBIG);
	w.n = 0;
	put32(&w, 1);
	put32(&w, UINT32_MAX);
	expect_feed(&w, NULL, MU_ETOOBIG);
	expect_decode(&w, NULL, MU_ETOOBIG);
	/* exactly max_name is fine */
	w.n = 0;
	put32(&w, 1);
	puthdr(&w, "abc", 0, NULL, 1);
	putf(&w, 1);
	expect_feed(&w, &lim, 1);
}

static void test_limit_rank(void **state)
{
	static const uint64_t ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
	bytes_t w = {.n = 0};

	(void)state;
	put32(&w, 1);
	putname(&w, "r");
	put32(&w, 9);
	expect_feed(&w, NULL, MU_ETOOBIG);
	expect_decode(&w, NULL, MU_ETOOBIG);
	w.n = 0;
	put32(&w, 1);
	putname(&w, "r");
	put32(&w, UINT32_MAX);
	expect_feed(&w, NULL, MU_ETOOBIG);
	/* rank 8 is the most there is */
	w.n = 0;
	put32(&w, 1);
	puthdr(&w, "r", 8, ones, 1);
	putf(&w, 4);
	expect_feed(&w, NULL, 1);
}

static void test_limit_count(void **state)
{
	mu_frame_limits_t lim;
	bytes_t w = {.n = 0};

	(void)state;
	mu_frame_limits_init(&lim);
	lim.max_count = 2;
	put32(&w, 3);
	expect_feed(&w, &lim, MU_ETOOBIG);
	expect_decode(&w, &lim, MU_ETOOBIG);
	w.n = 0;
	put32(&w, 65537);
	expect_feed(&w, NULL, MU_ETOOBIG);
	two_tensors(&w); /* count 2 = max_count */
	expect_feed(&w, &lim, 1);
}

static void test_limit_dims_and_numel(void **state)
{
	static const uint64_t d23[] = {2, 3};
	static const uint64_t big[] = {(uint64_t)1 << 32, (uint64_t)1 << 32};
	static const uint64_t big0[] = {(uint64_t)1 << 40, 0};
	bytes_t w = {.n = 0};

	(void)state;
	/* numel is not the product of the dims */
	put32(&w, 1);
	puthdr(&w, "w", 2, d23, 5);
	expect_feed(&w, NULL, MU_EPROTO);
	expect_decode(&w, NULL, MU_EPROTO);
	w.n = 0;
	put32(&w, 1);
	puthdr(&w, "w", 2, d23, 7);
	expect_feed(&w, NULL, MU_EPROTO);
	w.n = 0;
	put32(&w, 1);
	puthdr(&w, "s", 0, NULL, 0); /* a scalar has one element */
	expect_feed(&w, NULL, MU_EPROTO);
	/* 2^32 * 2^32 wraps to 0 in u64: refused, not taken as numel 0 */
	w.n = 0;
	put32(&w, 1);
	puthdr(&w, "o", 2, big, 0);
	expect_feed(&w, NULL, MU_ETOOBIG);
	expect_decode(&w, NULL, MU_ETOOBIG);
	/* a zero dim makes any other dim harmless */
	w.n = 0;
	put32(&w, 1);
	puthdr(&w, "z", 2, big0, 0);
	expect_feed(&w, NULL, 1);
}

static void test_limit_bytes(void **state)
{
	static const uint64_t d23[] = {2, 3};
	static const uint64_t d4[] = {4};
	static const uint64_t huge[] = {(uint64_t)1 << 62};
	mu_frame_limits_t lim;
	bytes_t w = {.n = 0};

	(void)state;
	mu_frame_limits_init(&lim);
	put32(&w, 1);
	puthdr(&w, "w", 2, d23, 6);
	lim.max_bytes = 23;
	expect_feed(&w, &lim, MU_ETOOBIG); /* refused before any data */
	expect_decode(&w, &lim, MU_ETOOBIG);
	lim.max_bytes = 24;
	for (int i = 0; i < 6; i++)
		putf(&w, 0);
	expect_feed(&w, &lim, 1);

	/* the budget is for the whole frame: 16 + 16 bytes against 31 */
	w.n = 0;
	put32(&w, 2);
	puthdr(&w, "a", 1, d4, 4);
	for (int i = 0; i < 4; i++)
		putf(&w, 1);
	puthdr(&w, "b", 1, d4, 4);
	lim.max_bytes = 31;
	expect_feed(&w, &lim, MU_ETOOBIG);
	lim.max_bytes = 32;
	expect_feed(&w, &lim, 0);

	/* numel = 2^62: its byte count does not fit in u64; never allocated */
	w.n = 0;
	put32(&w, 1);
	puthdr(&w, "h", 1, huge, huge[0]);
	expect_feed(&w, NULL, MU_ETOOBIG);
	lim.max_bytes = UINT64_MAX;
	expect_feed(&w, &lim, MU_ETOOBIG);
	expect_decode(&w, &lim, MU_ETOOBIG);
}

static int admit_calls;
static uint64_t admit_last;

/* The owner's budget: refuses more than 1 MiB declared. */
static int admit_1mib(void *ud, uint64_t declared)
{
	(void)ud;
	admit_calls++;
	admit_last = declared;
	return declared > ((uint64_t)1 << 20) ? MU_ETOOBIG : 0;
}

/* What a header declares is asked of the owner before it is allocated,
 * and a tensor's storage grows with what came, not what was declared. */
static void test_reader_admit_and_growth(void **state)
{
	static const uint64_t big[] = {(uint64_t)75 << 20}; /* 300 MiB of f32 */
	static const uint64_t small[] = {(uint64_t)1 << 18}; /* 1 MiB */
	mu__frame_reader_t r;
	bytes_t w = {.n = 0};
	size_t used, room;
	unsigned char zeros[4096] = {0};
	int rc = 0;

	(void)state;
	put32(&w, 1);
	puthdr(&w, "x", 1, big, big[0]);
	mu__frame_reader_init(&r, NULL);
	r.admit = admit_1mib;
	admit_calls = 0;
	assert_int_equal(mu__frame_reader_feed(&r, w.b, w.n, &used), MU_ETOOBIG);
	assert_int_equal(admit_calls, 1);
	assert_true(admit_last == (uint64_t)300 << 20);
	assert_null(r.cur); /* nothing was allocated */
	mu__frame_reader_free(&r);

	w.n = 0;
	put32(&w, 1);
	puthdr(&w, "y", 1, small, small[0]);
	mu__frame_reader_init(&r, NULL);
	r.admit = admit_1mib;
	assert_int_equal(mu__frame_reader_feed(&r, w.b, w.n, &used), 0);
	assert_true(r.cap == (uint64_t)64 << 10); /* 64 KiB, of the 1 MiB declared */
	for (uint64_t sent = 0; rc == 0 && sent < ((uint64_t)1 << 20); sent += used) {
		assert_non_null(mu__frame_reader_space(&r, &room));
		rc = mu__frame_reader_feed(&r, zeros, sizeof(zeros), &used);
	}
	assert_int_equal(rc, 1);
	assert_int_equal(r.got.n, 1);
	assert_int_equal(r.got.t[0]->numel, small[0]);
	mu__frame_reader_free(&r);
}

static void test_bad_names(void **state)
{
	static const char *const bad[] = {
		"\xff", "a\xc3", "\xc0\xaf", "\xed\xa0\x80" /* surrogate */,
		"\xf4\x90\x80\x80" /* > U+10FFFF */,
	};
	bytes_t w;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		w.n = 0;
		put32(&w, 1);
		putname(&w, bad[i]);
		expect_feed(&w, NULL, MU_EPROTO);
		expect_decode(&w, NULL, MU_EPROTO);
	}
	/* a NUL inside the name: names are C strings */
	w.n = 0;
	put32(&w, 1);
	put32(&w, 3);
	memcpy(w.b + w.n, "a\0b", 3);
	w.n += 3;
	expect_feed(&w, NULL, MU_EPROTO);
}

/* ---- typed tensors: the rankword's dtype byte (include/muster/tensor.h) ---- */

/* An I64 "ids" [2] = {-1, 5}, a BOOL "m" [3] = {1, 0, 1} and an F32 "x"
 * [1] = 2.0, by hand: the F32 one as rlx writes it, rankword = rank. */
static void typed_frame(bytes_t *w)
{
	static const uint64_t d2[] = {2}, d3[] = {3}, d1[] = {1};

	w->n = 0;
	put32(w, 3);
	puthdr_typed(w, "ids", 1, MU_DTYPE_I64, d2, 2);
	put64(w, (uint64_t)-1);
	put64(w, 5);
	puthdr_typed(w, "m", 1, MU_DTYPE_BOOL, d3, 3);
	memcpy(w->b + w->n, "\1\0\1", 3);
	w->n += 3;
	puthdr(w, "x", 1, d1, 1);
	putf(w, 2.0f);
}

static void test_typed_hand_bytes(void **state)
{
	static const uint64_t d2[] = {2}, d3[] = {3}, d1[] = {1};
	mu_tensor_list_t l, back;
	mu_tensor_t *t;
	bytes_t w;
	void *buf;
	size_t len;

	(void)state;
	mu_tensor_list_init(&l);
	assert_int_equal(mu_tensor_new_typed("ids", MU_DTYPE_I64, 1, d2, &t), 0);
	((int64_t *)t->raw)[0] = -1;
	((int64_t *)t->raw)[1] = 5;
	assert_int_equal(mu_tensor_nbytes(t), 16);
	assert_int_equal(mu_tensor_list_push(&l, t), 0);
	assert_int_equal(mu_tensor_new_typed("m", MU_DTYPE_BOOL, 1, d3, &t), 0);
	memcpy(t->raw, "\1\0\1", 3);
	assert_int_equal(mu_tensor_list_push(&l, t), 0);
	assert_int_equal(mu_tensor_new("x", 1, d1, &t), 0);
	t->data[0] = 2.0f;
	assert_int_equal(mu_tensor_list_push(&l, t), 0);
	assert_true(mu__frame_typed(&l));
	typed_frame(&w);
	assert_int_equal(mu_frame_size(&l), w.n);
	assert_int_equal(mu_frame_encode(&l, &buf, &len), 0);
	assert_int_equal(len, w.n);
	assert_memory_equal(buf, w.b, w.n);
	mu_free(buf);
	mu_tensor_list_free(&l);

	mu_tensor_list_init(&back);
	assert_int_equal(mu_frame_decode(w.b, w.n, NULL, &back), 0);
	assert_int_equal(back.n, 3);
	assert_int_equal(back.t[0]->dtype, MU_DTYPE_I64);
	assert_true(((int64_t *)back.t[0]->raw)[0] == -1 && ((int64_t *)back.t[0]->raw)[1] == 5);
	assert_int_equal(back.t[1]->dtype, MU_DTYPE_BOOL);
	assert_memory_equal(back.t[1]->raw, "\1\0\1", 3);
	assert_int_equal(back.t[2]->dtype, MU_DTYPE_F32);
	assert_true(back.t[2]->data[0] == 2.0f);
	assert_false(mu__frame_typed(&(mu_tensor_list_t){back.t + 2, 1, 1}));
	mu_tensor_list_free(&back);
}

static void test_typed_limits(void **state)
{
	static const uint64_t d3[] = {3};
	mu_frame_limits_t lim;
	bytes_t w;

	(void)state;
	/* a dtype past the table: refused as soon as the rankword is in */
	w.n = 0;
	put32(&w, 1);
	putname(&w, "t");
	put32(&w, 1 | MU_DTYPE_COUNT << 8);
	expect_feed(&w, NULL, MU_EPROTO);
	w.n -= 4;
	put32(&w, 1 | 0xFF << 8);
	expect_feed(&w, NULL, MU_EPROTO);
	/* bits above the dtype byte: a rank rlx would call huge */
	w.n -= 4;
	put32(&w, 1 | 1 << 16);
	expect_feed(&w, NULL, MU_ETOOBIG);
	/* a rank over 8 with a dtype */
	w.n -= 4;
	put32(&w, 9 | MU_DTYPE_I8 << 8);
	expect_feed(&w, NULL, MU_ETOOBIG);
	/* the budget counts the dtype's bytes: 3 x I64 = 24 */
	mu_frame_limits_init(&lim);
	w.n = 0;
	put32(&w, 1);
	puthdr_typed(&w, "t", 1, MU_DTYPE_I64, d3, 3);
	lim.max_bytes = 23;
	expect_feed(&w, &lim, MU_ETOOBIG);
	lim.max_bytes = 24;
	for (int i = 0; i < 3; i++)
		put64(&w, (uint64_t)i);
	expect_feed(&w, &lim, 1);
}

static void test_truncated_and_trailing(void **state)
{
	mu_tensor_list_t l;
	bytes_t w;

	(void)state;
	two_tensors(&w);
	mu_tensor_list_init(&l);
	for (size_t cut = 0; cut < w.n; cut++) {
		assert_int_equal(mu_frame_decode(w.b, cut, NULL, &l), MU_EEOF);
		assert_int_equal(l.n, 0);
	}
	w.b[w.n] = 0;
	assert_int_equal(mu_frame_decode(w.b, w.n + 1, NULL, &l), MU_EPROTO);
	assert_int_equal(l.n, 0);
	/* two frames back to back: the second is trailing bytes */
	memcpy(w.b + w.n, w.b, w.n);
	assert_int_equal(mu_frame_decode(w.b, 2 * w.n, NULL, &l), MU_EPROTO);
	assert_int_equal(l.n, 0);
	assert_int_equal(mu_frame_decode(w.b, w.n, NULL, &l), 0);
	assert_int_equal(l.n, 2);
	mu_tensor_list_free(&l);
}

/* ---- the incremental reader ---- */

static void test_reader_any_split(void **state)
{
	mu__frame_reader_t r;
	mu_tensor_list_t l;
	size_t used;
	bytes_t w;

	(void)state;
	two_tensors(&w);
	mu_tensor_list_init(&l);
	for (size_t s = 0; s <= w.n; s++) {
		mu__frame_reader_init(&r, NULL);
		assert_int_equal(mu__frame_reader_feed(&r, w.b, s, &used), s == w.n);
		assert_int_equal(used, s);
		assert_int_equal(mu__frame_reader_feed(&r, w.b + s, w.n - s, &used), 1);
		assert_int_equal(used, w.n - s);
		mu__frame_reader_take(&r, &l);
		mu__frame_reader_free(&r);
		check_two(&l, 0);
		mu_tensor_list_free(&l);
	}
	/* byte by byte */
	mu__frame_reader_init(&r, NULL);
	for (size_t i = 0; i < w.n; i++) {
		assert_int_equal(mu__frame_reader_feed(&r, w.b + i, 1, &used), i + 1 == w.n);
		assert_int_equal(used, 1);
	}
	/* complete: nothing more is taken */
	assert_int_equal(mu__frame_reader_feed(&r, w.b, 4, &used), 1);
	assert_int_equal(used, 0);
	mu__frame_reader_take(&r, &l);
	mu__frame_reader_free(&r);
	check_two(&l, 0);
	mu_tensor_list_free(&l);
}

static void test_reader_stops_at_frame_end(void **state)
{
	mu__frame_reader_t r;
	mu_tensor_list_t l;
	unsigned char two[2 * sizeof(((bytes_t *)0)->b)];
	size_t used;
	bytes_t w;

	(void)state;
	two_tensors(&w);
	memcpy(two, w.b, w.n);
	memcpy(two + w.n, w.b, w.n);
	mu_tensor_list_init(&l);
	mu__frame_reader_init(&r, NULL);
	assert_int_equal(mu__frame_reader_feed(&r, two, 2 * w.n, &used), 1);
	assert_int_equal(used, w.n);
	mu__frame_reader_take(&r, &l);
	mu__frame_reader_free(&r);
	assert_int_equal(l.n, 2);
	mu_tensor_list_free(&l);
	/* a reader freed mid-tensor (name, data) leaks nothing */
	for (size_t s = 1; s < w.n; s += 3) {
		mu__frame_reader_init(&r, NULL);
		assert_int_equal(mu__frame_reader_feed(&r, w.b, s, &used), 0);
		mu__frame_reader_free(&r);
	}
}

static void test_reader_zero_copy(void **state)
{
	static const uint64_t d23[] = {2, 3};
	mu__frame_reader_t r;
	mu_tensor_list_t l;
	size_t used, room, hdr;
	bytes_t w;
	void *dst;

	(void)state;
	two_tensors(&w);
	mu__frame_reader_init(&r, NULL);
	/* no data is due yet */
	assert_null(mu__frame_reader_space(&r, &room));
	assert_int_equal(room, 0);
	/* the scalar's header: count + name_len + "s" + rank + numel */
	hdr = 4 + 4 + 1 + 4 + 8;
	assert_int_equal(mu__frame_reader_feed(&r, w.b, hdr, &used), 0);
	dst = mu__frame_reader_space(&r, &room);
	assert_non_null(dst);
	assert_int_equal(room, 4);
	memcpy(dst, w.b + hdr, 4);
	assert_int_equal(mu__frame_reader_wrote(&r, 4), 0);
	assert_null(mu__frame_reader_space(&r, &room));
	/* the 2x3 tensor's header, then its data in 5 + 19 bytes */
	hdr += 4;
	assert_int_equal(mu__frame_reader_feed(&r, w.b + hdr, 4 + 1 + 4 + 16 + 8, &used), 0);
	hdr += 4 + 1 + 4 + 16 + 8;
	dst = mu__frame_reader_space(&r, &room);
	assert_int_equal(room, 24);
	memcpy(dst, w.b + hdr, 5);
	assert_int_equal(mu__frame_reader_wrote(&r, 5), 0);
	dst = mu__frame_reader_space(&r, &room);
	assert_int_equal(room, 19);
	memcpy(dst, w.b + hdr + 5, 19);
	assert_int_equal(mu__frame_reader_wrote(&r, 19), 1);
	assert_int_equal(hdr + 24, w.n);
	mu_tensor_list_init(&l);
	mu__frame_reader_take(&r, &l);
	mu__frame_reader_free(&r);
	check_two(&l, 0);
	assert_int_equal(mu__frame_header_size(l.t[1]), 4 + 1 + 4 + 16 + 8);
	{
		unsigned char h[64];
		bytes_t e = {.n = 0};

		mu__frame_header(l.t[1], h);
		puthdr(&e, "w", 2, d23, 6);
		assert_memory_equal(h, e.b, e.n);
	}
	mu_tensor_list_free(&l);
}

/* ---- allocation failures: an error and nothing leaked, or the frame ---- */

static void test_decode_out_of_memory(void **state)
{
	mu_tensor_list_t l;
	bytes_t w;
	long n;
	int rc;

	(void)state;
	two_tensors(&w);
	for (n = 0; n < 100; n++) {
		mu_tensor_list_init(&l);
		mu_test_fail_after(n);
		rc = mu_frame_decode(w.b, w.n, NULL, &l);
		mu_test_alloc_reset();
		if (rc == 0) {
			/* success means the whole frame, never a part of it */
			check_two(&l, 0);
			mu_tensor_list_free(&l);
			break;
		}
		assert_int_equal(rc, MU_ENOMEM);
		assert_int_equal(l.n, 0);
		mu_tensor_list_free(&l);
	}
	assert_true(n < 100);
}

static void test_encode_out_of_memory(void **state)
{
	mu_tensor_list_t l;
	void *buf = &l;
	size_t len = 1;

	(void)state;
	mu_tensor_list_init(&l);
	assert_int_equal(mu_tensor_list_push(&l, mk("a", 0, NULL)), 0);
	mu_test_fail_after(0);
	assert_int_equal(mu_frame_encode(&l, &buf, &len), MU_ENOMEM);
	mu_test_alloc_reset();
	assert_null(buf);
	assert_int_equal(len, 0);
	mu_tensor_list_free(&l);
}

/* ---- sockets ---- */

/*
 * Frames go over streams: S(fd) is a stream over one end of the pair that
 * does not own it (the tests close the descriptors themselves); they are
 * let go when the next test makes its pair.
 */
static mu_stream_t *wrapped[32];
static int nwrapped;

static void unwrap_all(void)
{
	while (nwrapped > 0) {
		mu_stream_t *s = wrapped[--nwrapped];

		s->fd = -1; /* not ours to close */
		mu__stream_close(s);
	}
}

static mu_stream_t *S(int fd)
{
	mu_stream_t *s;

	assert_true(nwrapped < 32);
	assert_int_equal(mu__stream_tcp_new(fd, &s), 0);
	wrapped[nwrapped++] = s;
	return s;
}

static void pair(int sv[2])
{
	unwrap_all();
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

static void test_send_recv_small(void **state)
{
	mu_tensor_list_t l, back;
	bytes_t w;
	int sv[2];

	(void)state;
	two_tensors(&w);
	mu_tensor_list_init(&l);
	mu_tensor_list_init(&back);
	assert_int_equal(mu_frame_decode(w.b, w.n, NULL, &l), 0);
	pair(sv);
	assert_int_equal(mu_frame_send(S(sv[0]), &l, 2000), 0);
	/* the bytes on the wire are the spec's */
	{
		unsigned char got[sizeof(w.b)];

		assert_int_equal(recv(sv[1], got, sizeof(got), MSG_DONTWAIT), (ssize_t)w.n);
		assert_memory_equal(got, w.b, w.n);
	}
	assert_int_equal(mu_frame_send(S(sv[0]), &l, 2000), 0);
	assert_int_equal(mu_frame_recv(S(sv[1]), NULL, &back, 2000), 0);
	check_two(&back, 0);
	/* an empty frame too */
	mu_tensor_list_free(&l);
	assert_int_equal(mu_frame_send(S(sv[0]), &l, 2000), 0);
	assert_int_equal(mu_frame_recv(S(sv[1]), NULL, &back, 2000), 0);
	assert_int_equal(back.n, 2);
	mu_tensor_list_free(&back);
	close(sv[0]);
	close(sv[1]);
}

typedef struct {
	mu_stream_t *fd;
	int rc, close_after;
	mu_frame_limits_t lim;
	mu_tensor_list_t got;
} reader_t;

static void *reader_main(void *arg)
{
	reader_t *r = arg;

	r->rc = mu_frame_recv(r->fd, &r->lim, &r->got, 10000);
	if (r->close_after)
		close(mu__stream_fd(r->fd));
	return NULL;
}

static void test_send_recv_16mib(void **state)
{
	uint64_t dims[] = {4096, 1024}; /* 16 MiB of f32 */
	mu_tensor_list_t l;
	reader_t rd;
	pthread_t th;
	mu_tensor_t *t;
	int sv[2];

	(void)state;
	pair(sv);
	mu_tensor_list_init(&l);
	assert_int_equal(mu_tensor_list_push(&l, mk("small", 0, NULL)), 0);
	assert_int_equal(mu_tensor_new("big", 2, dims, &t), 0);
	for (uint64_t i = 0; i < t->numel; i++)
		t->data[i] = (float)(i % 100003) - 5.5f;
	assert_int_equal(mu_tensor_list_push(&l, t), 0);
	assert_int_equal(mu_tensor_list_push(&l, mk("after", 1, dims)), 0);
	memset(&rd, 0, sizeof(rd));
	rd.fd = S(sv[1]);
	mu_frame_limits_init(&rd.lim);
	mu_tensor_list_init(&rd.got);
	assert_int_equal(pthread_create(&th, NULL, reader_main, &rd), 0);
	assert_int_equal(mu_frame_send(S(sv[0]), &l, 10000), 0);
	pthread_join(th, NULL);
	assert_int_equal(rd.rc, 0);
	assert_int_equal(rd.got.n, 3);
	for (size_t i = 0; i < 3; i++) {
		assert_string_equal(rd.got.t[i]->name, l.t[i]->name);
		assert_int_equal(rd.got.t[i]->numel, l.t[i]->numel);
		assert_memory_equal(rd.got.t[i]->data, l.t[i]->data, l.t[i]->numel * 4);
	}
	mu_tensor_list_free(&rd.got);

	/* the same 16 MiB over a budget of 16 MiB - 1: refused at the
	 * header; the reader closes and the sender sees the peer gone */
	memset(&rd, 0, sizeof(rd));
	rd.fd = S(sv[1]);
	rd.close_after = 1;
	mu_frame_limits_init(&rd.lim);
	rd.lim.max_bytes = ((uint64_t)16 << 20) - 1;
	mu_tensor_list_init(&rd.got);
	assert_int_equal(pthread_create(&th, NULL, reader_main, &rd), 0);
	{
		int rc = mu_frame_send(S(sv[0]), &l, 10000);

		assert_true(rc == MU_EEOF || rc == -EPIPE || rc == -ECONNRESET);
	}
	pthread_join(th, NULL);
	assert_int_equal(rd.rc, MU_ETOOBIG);
	assert_int_equal(rd.got.n, 0);
	close(sv[0]);
	mu_tensor_list_free(&l);
}

static void test_recv_long_name(void **state)
{
	/* a name longer than recv's scratch buffer, under a raised limit */
	static char name[10000];
	mu_tensor_list_t l, back;
	reader_t rd;
	pthread_t th;
	int sv[2];

	(void)state;
	memset(name, 'n', sizeof(name) - 1);
	mu_tensor_list_init(&l);
	assert_int_equal(mu_tensor_list_push(&l, mk(name, 0, NULL)), 0);
	pair(sv);
	memset(&rd, 0, sizeof(rd));
	rd.fd = S(sv[1]);
	mu_frame_limits_init(&rd.lim);
	rd.lim.max_name = 1 << 20;
	mu_tensor_list_init(&rd.got);
	assert_int_equal(pthread_create(&th, NULL, reader_main, &rd), 0);
	assert_int_equal(mu_frame_send(S(sv[0]), &l, 5000), 0);
	pthread_join(th, NULL);
	assert_int_equal(rd.rc, 0);
	assert_int_equal(rd.got.n, 1);
	assert_string_equal(rd.got.t[0]->name, name);
	mu_tensor_list_free(&rd.got);
	/* and under the default limit, refused */
	mu_tensor_list_init(&back);
	assert_int_equal(mu_frame_send(S(sv[0]), &l, 5000), 0);
	assert_int_equal(mu_frame_recv(S(sv[1]), NULL, &back, 5000), MU_ETOOBIG);
	assert_int_equal(back.n, 0);
	mu_tensor_list_free(&l);
	close(sv[0]);
	close(sv[1]);
}

static void test_recv_peer_closes_mid_frame(void **state)
{
	mu_tensor_list_t l;
	bytes_t w;
	int sv[2];

	(void)state;
	two_tensors(&w);
	mu_tensor_list_init(&l);
	/* at every cut: the header, the name, the dims, the data */
	for (size_t cut = 0; cut < w.n; cut++) {
		pair(sv);
		assert_int_equal(write(sv[0], w.b, cut), (ssize_t)cut);
		close(sv[0]);
		assert_int_equal(mu_frame_recv(S(sv[1]), NULL, &l, 2000), MU_EEOF);
		assert_int_equal(l.n, 0);
		close(sv[1]);
	}
	/* a limit broken on the wire is that limit's error */
	pair(sv);
	w.n = 0;
	put32(&w, 1);
	putname(&w, "x");
	put32(&w, 9);
	assert_int_equal(write(sv[0], w.b, w.n), (ssize_t)w.n);
	assert_int_equal(mu_frame_recv(S(sv[1]), NULL, &l, 2000), MU_ETOOBIG);
	close(sv[0]);
	close(sv[1]);
}

static void test_recv_timeout(void **state)
{
	mu_tensor_list_t l;
	int64_t t0;
	bytes_t w;
	int sv[2];

	(void)state;
	mu_tensor_list_init(&l);
	pair(sv);
	t0 = mu__now_ms();
	assert_int_equal(mu_frame_recv(S(sv[1]), NULL, &l, 150), -ETIMEDOUT);
	assert_true(mu__now_ms() - t0 >= 140);
	assert_true(mu__now_ms() - t0 < 2000);
	/* a peer that stalls mid-frame: the deadline covers the whole frame */
	two_tensors(&w);
	assert_int_equal(write(sv[0], w.b, w.n - 3), (ssize_t)(w.n - 3));
	t0 = mu__now_ms();
	assert_int_equal(mu_frame_recv(S(sv[1]), NULL, &l, 150), -ETIMEDOUT);
	assert_true(mu__now_ms() - t0 >= 140);
	assert_int_equal(l.n, 0);
	close(sv[0]);
	close(sv[1]);
}

static void test_send_to_closed_peer(void **state)
{
	mu_tensor_list_t l;
	int sv[2], rc;

	(void)state;
	mu_tensor_list_init(&l);
	assert_int_equal(mu_tensor_list_push(&l, mk("a", 0, NULL)), 0);
	pair(sv);
	close(sv[1]);
	/* an error, not SIGPIPE */
	rc = mu_frame_send(S(sv[0]), &l, 2000);
	assert_true(rc == MU_EEOF || rc == -EPIPE || rc == -ECONNRESET);
	close(sv[0]);
	mu_tensor_list_free(&l);
}

static void test_send_timeout(void **state)
{
	uint64_t dims[] = {4 << 20}; /* 16 MiB: more than a socket buffers */
	mu_tensor_list_t l;
	mu_tensor_t *t;
	int64_t t0;
	int sv[2];

	(void)state;
	mu_tensor_list_init(&l);
	assert_int_equal(mu_tensor_new("big", 1, dims, &t), 0);
	assert_int_equal(mu_tensor_list_push(&l, t), 0);
	pair(sv);
	/* non-blocking: mu__sock_sendv waits in poll() only when sendmsg says
	 * EAGAIN, so on a blocking fd it would block past the deadline */
	assert_int_equal(fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK), 0);
	t0 = mu__now_ms();
	assert_int_equal(mu_frame_send(S(sv[0]), &l, 150), -ETIMEDOUT);
	assert_true(mu__now_ms() - t0 >= 140);
	assert_true(mu__now_ms() - t0 < 5000);
	close(sv[0]);
	close(sv[1]);
	mu_tensor_list_free(&l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_encode_decode_hand_bytes),
		cmocka_unit_test(test_reader_admit_and_growth),
		cmocka_unit_test(test_typed_hand_bytes),
		cmocka_unit_test(test_typed_limits),
		cmocka_unit_test(test_empty_frame_and_numel_zero),
		cmocka_unit_test(test_utf8_and_empty_names),
		cmocka_unit_test(test_limit_name),
		cmocka_unit_test(test_limit_rank),
		cmocka_unit_test(test_limit_count),
		cmocka_unit_test(test_limit_dims_and_numel),
		cmocka_unit_test(test_limit_bytes),
		cmocka_unit_test(test_bad_names),
		cmocka_unit_test(test_truncated_and_trailing),
		cmocka_unit_test(test_reader_any_split),
		cmocka_unit_test(test_reader_stops_at_frame_end),
		cmocka_unit_test(test_reader_zero_copy),
		cmocka_unit_test(test_decode_out_of_memory),
		cmocka_unit_test(test_encode_out_of_memory),
		cmocka_unit_test(test_send_recv_small),
		cmocka_unit_test(test_send_recv_16mib),
		cmocka_unit_test(test_recv_long_name),
		cmocka_unit_test(test_recv_peer_closes_mid_frame),
		cmocka_unit_test(test_recv_timeout),
		cmocka_unit_test(test_send_to_closed_peer),
		cmocka_unit_test(test_send_timeout),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);

	unwrap_all();
	return rc;
}
