/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/formats/safetensors.c: files written by mu__st_write and
 * by hand, every validation rule of the header, F16/BF16 conversion for
 * every one of the 65536 values, and F32 used in place when aligned.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <unistd.h>

#define MU_TEST_TMPDIR_TAG "st"
#include "mu_test.h"

#include "muster/tensor.h"
#include "core/endian_int.h"
#include "formats/safetensors_int.h"

/* A file: u64 hlen (as given), the header text, then data. */
static const char *write_raw(const char *name, uint64_t hlen, const char *hdr,
                             const void *data, size_t n)
{
	const char *p = mu_test_path(name);
	unsigned char len[8];
	FILE *f = fopen(p, "wb");

	assert_non_null(f);
	mu_le64_put(len, hlen);
	assert_int_equal(fwrite(len, 1, 8, f), 8);
	if (hdr[0] != '\0')
		assert_int_equal(fwrite(hdr, 1, strlen(hdr), f), strlen(hdr));
	if (n > 0)
		assert_int_equal(fwrite(data, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
	return p;
}

static const char *write_st(const char *name, const char *hdr, const void *data, size_t n)
{
	return write_raw(name, strlen(hdr), hdr, data, n);
}

/* ---- the writer, read back ---- */

static void test_write_and_read_back(void **state)
{
	static const uint64_t d23[] = {2, 3}, d0[] = {0}, d4[] = {4};
	mu_tensor_list_t l;
	mu__st_file_t f;
	mu_tensor_t *t;
	const mu__st_entry_t *e;
	char why[256] = "";
	uint64_t hlen;

	(void)state;
	mu_tensor_list_init(&l);
	assert_int_equal(mu_tensor_new("a.weight", 2, d23, &t), 0);
	for (int i = 0; i < 6; i++)
		t->data[i] = (float)i / 3.0f;
	assert_int_equal(mu_tensor_list_push(&l, t), 0);
	assert_int_equal(mu_tensor_new("scalar", 0, NULL, &t), 0);
	t->data[0] = -0.0f;
	assert_int_equal(mu_tensor_list_push(&l, t), 0);
	assert_int_equal(mu_tensor_new("empty", 1, d0, &t), 0);
	assert_int_equal(mu_tensor_list_push(&l, t), 0);
	assert_int_equal(mu_tensor_new("quote\"and\\é", 1, d4, &t), 0);
	t->data[3] = INFINITY;
	assert_int_equal(mu_tensor_list_push(&l, t), 0);
	assert_int_equal(mu__st_write(mu_test_path("w.safetensors"), &l), 0);

	assert_int_equal(mu__st_open(mu_test_path("w.safetensors"), &f, why, sizeof(why)), 0);
	assert_int_equal(f.n, 4);
	hlen = mu_le64_get(f.map);
	assert_int_equal(hlen % 8, 0); /* the data area starts 8-aligned */
	assert_int_equal(f.data_len, 4 * (6 + 1 + 0 + 4));
	assert_int_equal(f.map_len, 8 + hlen + f.data_len);
	for (size_t i = 0; i < l.n; i++) {
		mu_tensor_t *back;

		e = mu__st_find(&f, l.t[i]->name);
		assert_non_null(e);
		assert_int_equal(e->dtype, MU_DT_F32);
		assert_int_equal(e->rank, l.t[i]->rank);
		assert_int_equal(e->numel, l.t[i]->numel);
		assert_int_equal(e->end - e->begin, 4 * e->numel);
		assert_int_equal(mu__st_load(&f, e, &back), 0);
		assert_null(back->mem); /* aligned F32: borrowed from the map */
		assert_string_equal(back->name, l.t[i]->name);
		assert_int_equal(back->numel, l.t[i]->numel);
		if (back->numel > 0)
			assert_memory_equal(back->data, l.t[i]->data, 4 * back->numel);
		mu_tensor_free(back);
	}
	assert_null(mu__st_find(&f, "nope"));
	mu__st_close(&f);
	mu__st_close(&f); /* twice is harmless */
	mu_tensor_list_free(&l);

	/* an empty list is a valid file too */
	assert_int_equal(mu__st_write(mu_test_path("none.safetensors"), &l), 0);
	assert_int_equal(mu__st_open(mu_test_path("none.safetensors"), &f, why, sizeof(why)), 0);
	assert_int_equal(f.n, 0);
	mu__st_close(&f);
	assert_true(mu__st_write("/nonexistent-dir/x.safetensors", &l) < 0);
}

/* ---- the header rules ---- */

static void expect_parse(const char *hdr, uint64_t data_len, int want, const char *in_why)
{
	mu__st_file_t f;
	char why[256] = "";
	int rc = mu__st_parse(hdr, strlen(hdr), data_len, &f, why, sizeof(why));

	if (rc != want)
		fail_msg("%s: got %d, want %d (%s)", hdr, rc, want, why);
	if (in_why != NULL && strstr(why, in_why) == NULL)
		fail_msg("%s: why is \"%s\", not about \"%s\"", hdr, why, in_why);
	if (rc == 0)
		mu__st_close(&f);
	else
		assert_null(f.e);
}

#define T(name, dt, shape, b, e) \
	"\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static void test_parse_rules(void **state)
{
	(void)state;
	expect_parse("{" T("x", "F32", "[2]", 0, 8) "}", 8, 0, NULL);
	expect_parse("{}", 0, 0, NULL);
	/* not JSON, or not an object */
	expect_parse("{", 0, MU_EJSON, "not a JSON object");
	expect_parse("[]", 0, MU_EJSON, "not a JSON object");
	expect_parse("", 0, MU_EJSON, NULL);
	expect_parse("{} x", 0, MU_EJSON, NULL);
	/* dtype */
	expect_parse("{" T("x", "F33", "[2]", 0, 8) "}", 8, MU_EPROTO, "tensor x: unknown dtype");
	expect_parse("{" T("x", "f32", "[2]", 0, 8) "}", 8, MU_EPROTO, "tensor x: unknown dtype");
	expect_parse("{\"x\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, MU_EPROTO, "tensor x: no dtype");
	expect_parse("{\"x\":[1]}", 8, MU_EPROTO, "tensor x: no dtype");
	/* shape */
	expect_parse("{" T("x", "F32", "2", 0, 8) "}", 8, MU_EPROTO, "tensor x: shape");
	expect_parse("{" T("x", "F32", "[1,1,1,1,1,1,1,1,1]", 0, 4) "}", 8, MU_EPROTO, "tensor x: shape");
	expect_parse("{" T("x", "F32", "[1,1,1,1,1,1,1,1]", 0, 4) "}", 8, 0, NULL);
	expect_parse("{" T("x", "F32", "[-2]", 0, 8) "}", 8, MU_EPROTO, "tensor x: a dim");
	expect_parse("{" T("x", "F32", "[2.5]", 0, 8) "}", 8, MU_EPROTO, "tensor x: a dim");
	expect_parse("{" T("x", "F32", "[\"2\"]", 0, 8) "}", 8, MU_EPROTO, "tensor x: a dim");
	expect_parse("{" T("x", "F32", "[4294967296,4294967296]", 0, 8) "}", 8, MU_ETOOBIG,
	             "tensor x: too many elements");
	/* offsets */
	expect_parse("{" T("x", "F32", "[2]", 0, 8) "}", 7, MU_EPROTO, "tensor x: offsets outside");
	expect_parse("{" T("x", "F32", "[0]", 9, 9) "}", 8, MU_EPROTO, "tensor x: offsets outside");
	expect_parse("{" T("x", "F32", "[0]", 8, 8) "}", 8, 0, NULL);
	expect_parse("{" T("x", "F32", "[2]", 8, 0) "}", 8, MU_EPROTO, "tensor x: offsets outside");
	expect_parse("{" T("x", "F32", "[2]", -8, 0) "}", 8, MU_EPROTO, "tensor x: data_offsets");
	expect_parse("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, MU_EPROTO,
	             "tensor x: data_offsets");
	expect_parse("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8, MU_EPROTO,
	             "tensor x: data_offsets");
	expect_parse("{\"x\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, MU_EPROTO, "tensor x: data_offsets");
	/* byte counts */
	expect_parse("{" T("x", "F32", "[2]", 0, 4) "}", 8, MU_EPROTO, "tensor x: byte count");
	expect_parse("{" T("x", "F16", "[2]", 0, 8) "}", 8, MU_EPROTO, "tensor x: byte count");
	expect_parse("{" T("x", "F16", "[2]", 0, 4) "}", 8, 0, NULL);
	expect_parse("{" T("x", "F32", "[]", 0, 4) "}", 8, 0, NULL);
	expect_parse("{" T("x", "F32", "[]", 0, 0) "}", 8, MU_EPROTO, "tensor x: byte count");
	expect_parse("{" T("x", "I8", "[3]", 0, 3) "," T("y", "F64", "[1]", 3, 11) "}", 11, 0, NULL);
}

static void test_parse_overlaps(void **state)
{
	(void)state;
	expect_parse("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 4, 12) "}", 16,
	             MU_EPROTO, "overlaps");
	expect_parse("{" T("a", "F32", "[2]", 8, 16) "," T("b", "F32", "[4]", 0, 16) "}", 16,
	             MU_EPROTO, "overlaps");
	expect_parse("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 0, 8) "}", 16,
	             MU_EPROTO, "overlaps");
	/* an empty tensor between two that overlap hides nothing */
	expect_parse("{" T("a", "F32", "[4]", 0, 16) "," T("e", "F32", "[0]", 4, 4) ","
	             T("b", "F32", "[2]", 8, 16) "}", 16, MU_EPROTO, "overlaps");
	expect_parse("{" T("a", "F32", "[4]", 0, 16) "," T("e", "F32", "[0]", 4, 4) ","
	             T("b", "F32", "[2]", 4, 12) "}", 16, MU_EPROTO, "overlaps");
	/* empty tensors share offsets with anything */
	expect_parse("{" T("a", "F32", "[2]", 0, 8) "," T("e", "F32", "[0]", 4, 4) ","
	             T("f", "F32", "[0]", 4, 4) "," T("b", "F32", "[2]", 8, 16) "}", 16, 0, NULL);
	/* touching is not overlapping; gaps and unused bytes are accepted */
	expect_parse("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 8, 16) "}", 16, 0, NULL);
	expect_parse("{" T("a", "F32", "[1]", 0, 4) "," T("b", "F32", "[1]", 12, 16) "}", 32, 0, NULL);
}

static void test_parse_metadata(void **state)
{
	(void)state;
	expect_parse("{\"__metadata__\":{\"format\":\"pt\",\"k\":\"v\"}," T("x", "F32", "[1]", 0, 4) "}",
	             4, 0, NULL);
	expect_parse("{\"__metadata__\":{}}", 0, 0, NULL);
	expect_parse("{\"__metadata__\":{\"k\":1}}", 0, MU_EPROTO, "__metadata__");
	expect_parse("{\"__metadata__\":[\"k\"]}", 0, MU_EPROTO, "__metadata__");
	expect_parse("{\"__metadata__\":\"k\"}", 0, MU_EPROTO, "__metadata__");
	{
		mu__st_file_t f;
		const char *h = "{" T("x", "F32", "[1]", 0, 4) ",\"__metadata__\":{\"a\":\"b\"}}";

		assert_int_equal(mu__st_parse(h, strlen(h), 4, &f, NULL, 0), 0);
		assert_int_equal(f.n, 1); /* metadata is not a tensor */
		assert_null(mu__st_find(&f, "__metadata__"));
		mu__st_close(&f);
	}
}

static void test_parse_header_cap(void **state)
{
	mu__st_file_t f;
	char why[256] = "";

	(void)state;
	/* refused on its length alone: the text is never read */
	assert_int_equal(mu__st_parse("{}", MU_ST_MAX_HEADER + 1, 0, &f, why, sizeof(why)), MU_ETOOBIG);
	assert_non_null(strstr(why, "100 MiB"));
}

static void test_open_rules(void **state)
{
	mu__st_file_t f;
	char why[256] = "";
	const char *p;

	(void)state;
	assert_int_equal(mu__st_open(mu_test_path("missing"), &f, why, sizeof(why)), -ENOENT);
	p = write_raw("short", 0, "", NULL, 0);
	assert_int_equal(truncate(p, 7), 0);
	assert_int_equal(mu__st_open(p, &f, why, sizeof(why)), MU_EPROTO);
	/* header length past the end of the file */
	p = write_raw("past", 100, "{}", NULL, 0);
	assert_int_equal(mu__st_open(p, &f, why, sizeof(why)), MU_EPROTO);
	assert_non_null(strstr(why, "past the end"));
	p = write_raw("past2", UINT64_MAX, "{}", NULL, 0);
	assert_int_equal(mu__st_open(p, &f, why, sizeof(why)), MU_ETOOBIG);
	/* over the 100 MiB cap, whatever the file's size */
	p = write_raw("cap", MU_ST_MAX_HEADER + 1, "{}", NULL, 0);
	assert_int_equal(mu__st_open(p, &f, why, sizeof(why)), MU_ETOOBIG);
	/* a header that is exactly the rest of the file: no data */
	p = write_st("nodata", "{}", NULL, 0);
	assert_int_equal(mu__st_open(p, &f, why, sizeof(why)), 0);
	assert_int_equal(f.data_len, 0);
	mu__st_close(&f);
	/* the data area is what follows the header: offsets are checked on it */
	{
		float d[2] = {1, 2};

		p = write_st("oob", "{" T("x", "F32", "[3]", 0, 12) "}", d, 8);
		assert_int_equal(mu__st_open(p, &f, why, sizeof(why)), MU_EPROTO);
		assert_non_null(strstr(why, "tensor x"));
		assert_null(f.map);
	}
}

/* ---- conversions ---- */

/* IEEE half to double, straight from the definition. */
static double half_ref(uint16_t h)
{
	int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
	double v;

	if (e == 0)
		v = ldexp(m, -24);
	else if (e == 31)
		v = m ? NAN : INFINITY;
	else
		v = ldexp(1024 + m, e - 25);
	return s ? -v : v;
}

static void test_f16_every_value(void **state)
{
	static uint16_t h[65536];
	mu__st_file_t f;
	mu_tensor_t *t;
	char why[256];
	const char *p;

	(void)state;
	for (uint32_t i = 0; i < 65536; i++)
		h[i] = (uint16_t)i;
	p = write_st("f16", "{" T("h", "F16", "[256,256]", 0, 131072) "}      ", h, sizeof(h));
	assert_int_equal(mu__st_open(p, &f, why, sizeof(why)), 0);
	assert_int_equal(mu__st_load(&f, &f.e[0], &t), 0);
	assert_non_null(t->mem); /* converted into its own storage */
	assert_int_equal(t->numel, 65536);
	assert_int_equal((uintptr_t)t->data % 64, 0);
	for (uint32_t i = 0; i < 65536; i++) {
		double want = half_ref((uint16_t)i);
		float got = t->data[i];
		uint32_t bits;

		memcpy(&bits, &got, 4);
		if (isnan(want)) {
			/* NaN keeps its sign and payload (quiet bit included) */
			assert_int_equal(bits, (i & 0x8000) << 16 | 0x7f800000u | (i & 0x3ff) << 13);
			continue;
		}
		if ((double)got != want)
			fail_msg("f16 0x%04x: got %a, want %a", i, (double)got, want);
		assert_int_equal(!!signbit(got), !!(i & 0x8000)); /* -0 stays -0 */
	}
	/* spot checks that do not depend on half_ref */
	assert_true(t->data[0x3c00] == 1.0f);
	assert_true(t->data[0xc000] == -2.0f);
	assert_true(t->data[0x7bff] == 65504.0f);
	assert_true(t->data[0x0001] == 0x1p-24f);
	assert_true(t->data[0x03ff] == 0x1.ff8p-15f);
	assert_true(t->data[0x0400] == 0x1p-14f);
	assert_true(isinf(t->data[0x7c00]) && t->data[0x7c00] > 0);
	assert_true(isinf(t->data[0xfc00]) && t->data[0xfc00] < 0);
	assert_true(isnan(t->data[0x7e00]));
	assert_true(t->data[0x8000] == 0 && signbit(t->data[0x8000]));
	mu_tensor_free(t);
	mu__st_close(&f);
}

static void test_bf16_every_value(void **state)
{
	static uint16_t h[65536];
	mu__st_file_t f;
	mu_tensor_t *t;
	char why[256];
	const char *p;

	(void)state;
	for (uint32_t i = 0; i < 65536; i++)
		h[i] = (uint16_t)i;
	p = write_st("bf16", "{" T("h", "BF16", "[65536]", 0, 131072) "}", h, sizeof(h));
	assert_int_equal(mu__st_open(p, &f, why, sizeof(why)), 0);
	assert_int_equal(mu__st_load(&f, &f.e[0], &t), 0);
	assert_non_null(t->mem);
	for (uint32_t i = 0; i < 65536; i++) {
		uint32_t bits;

		memcpy(&bits, &t->data[i], 4);
		assert_int_equal(bits, i << 16); /* bf16 is the top half of f32 */
	}
	assert_true(t->data[0x3f80] == 1.0f);
	assert_true(t->data[0xc040] == -3.0f);
	assert_true(t->data[0x0001] == 0x1p-133f); /* the smallest subnormal */
	assert_true(isinf(t->data[0x7f80]));
	assert_true(isnan(t->data[0x7fc0]));
	assert_true(t->data[0x8000] == 0 && signbit(t->data[0x8000]));
	mu_tensor_free(t);
	mu__st_close(&f);
}

/* A header padded with spaces so that data_start % 4 == rem. */
static size_t padded(char *hdr, size_t cap, const char *text, unsigned rem)
{
	size_t n = (size_t)snprintf(hdr, cap, "%s", text);

	while ((8 + n) % 4 != rem)
		hdr[n++] = ' ';
	hdr[n] = '\0';
	return n;
}

static void test_f32_aligned_and_misaligned(void **state)
{
	float v[5] = {1.5f, -2.25f, 3e-40f /* subnormal */, -0.0f, 1e30f};
	unsigned char data[32] = {0};
	mu__st_file_t f;
	mu_tensor_t *t;
	char why[256], hdr[256];
	const char *p;

	(void)state;
	/* the data area starts 1 past a multiple of 4 (the map is page
	 * aligned): F32 at offset 0 is misaligned and copied */
	padded(hdr, sizeof(hdr), "{" T("x", "F32", "[4]", 0, 16) "," T("y", "F32", "[1]", 16, 20) "}", 1);
	memcpy(data, v, 20);
	p = write_st("odd", hdr, data, 20);
	assert_int_equal(mu__st_open(p, &f, why, sizeof(why)), 0);
	assert_int_equal((uintptr_t)f.data % 4, 1);
	assert_int_equal(mu__st_load(&f, mu__st_find(&f, "x"), &t), 0);
	assert_non_null(t->mem); /* copied */
	assert_int_equal((uintptr_t)t->data % 64, 0);
	assert_memory_equal(t->data, v, 16);
	assert_true(signbit(t->data[3]));
	mu_tensor_free(t);
	assert_int_equal(mu__st_load(&f, mu__st_find(&f, "y"), &t), 0);
	assert_non_null(t->mem);
	assert_true(t->data[0] == 1e30f);
	mu_tensor_free(t);
	mu__st_close(&f);

	/* same start, the tensors at offset 3: aligned, used in place */
	padded(hdr, sizeof(hdr), "{" T("x", "F32", "[4]", 3, 19) "," T("y", "F32", "[1]", 19, 23) "}", 1);
	memset(data, 0, sizeof(data));
	memcpy(data + 3, v, 20);
	p = write_st("pad", hdr, data, 23);
	assert_int_equal(mu__st_open(p, &f, why, sizeof(why)), 0);
	assert_int_equal((uintptr_t)(f.data + 3) % 4, 0);
	assert_int_equal(mu__st_load(&f, mu__st_find(&f, "x"), &t), 0);
	assert_null(t->mem); /* borrowed */
	assert_ptr_equal(t->data, (const void *)(f.data + 3));
	assert_memory_equal(t->data, v, 16);
	mu_tensor_free(t);
	mu__st_close(&f);
}

/* Integer, BOOL and F64 tensors load as themselves (in place when
 * aligned, copied when not); the F8 kinds and a BOOL byte that is not 0
 * or 1 are refused. */
static void test_load_other_dtypes(void **state)
{
	unsigned char data[40] = {0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 7, 0, 0, 0, 0, 0, 0, 0,
	                          1, 0, 1, 2, 0x81, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xF0, 0x3F};
	mu__st_file_t f;
	mu_tensor_t *t = (mu_tensor_t *)&t;
	char why[256], hdr[1024];
	const char *p;

	(void)state;
	snprintf(hdr, sizeof(hdr), "%s", "{" T("x", "I64", "[2]", 0, 16) "," T("b", "BOOL", "[3]", 16, 19) ","
	         T("bad", "BOOL", "[1]", 19, 20) "," T("u", "U8", "[1]", 20, 21) ","
	         T("d", "F64", "[1]", 24, 32) "," T("f8", "F8_E4M3", "[1]", 32, 33) ","
	         T("odd", "I16", "[1]", 21, 23) "}");
	for (size_t k = strlen(hdr); k % 8 != 0; k++) /* the data area 8-aligned in the map */
		memcpy(hdr + k, " ", 2);
	p = write_st("typed", hdr, data, 40);
	assert_int_equal(mu__st_open(p, &f, why, sizeof(why)), 0);
	assert_int_equal(f.e[0].dtype, MU_DT_I64);
	assert_int_equal(mu__st_load(&f, mu__st_find(&f, "x"), &t), 0);
	assert_int_equal(t->dtype, MU_DTYPE_I64);
	assert_ptr_equal(t->raw, f.data); /* aligned: in place */
	assert_true(((int64_t *)t->raw)[0] == -2 && ((int64_t *)t->raw)[1] == 7);
	mu_tensor_free(t);
	assert_int_equal(mu__st_load(&f, mu__st_find(&f, "b"), &t), 0);
	assert_int_equal(t->dtype, MU_DTYPE_BOOL);
	assert_memory_equal(t->raw, "\1\0\1", 3);
	mu_tensor_free(t);
	assert_int_equal(mu__st_load(&f, mu__st_find(&f, "u"), &t), 0);
	assert_int_equal(((uint8_t *)t->raw)[0], 0x81);
	mu_tensor_free(t);
	assert_int_equal(mu__st_load(&f, mu__st_find(&f, "odd"), &t), 0); /* misaligned: a copy */
	assert_non_null(t->mem);
	assert_int_equal(((int16_t *)t->raw)[0], 0);
	mu_tensor_free(t);
	assert_int_equal(mu__st_load(&f, mu__st_find(&f, "d"), &t), 0);
	assert_true(((double *)t->raw)[0] == 1.0);
	assert_int_equal(mu__st_loaded_bytes(mu__st_find(&f, "d")), 8);
	mu_tensor_free(t);
	t = (mu_tensor_t *)&t;
	assert_int_equal(mu__st_load(&f, mu__st_find(&f, "bad"), &t), MU_EPROTO);
	assert_null(t);
	t = (mu_tensor_t *)&t;
	assert_int_equal(mu__st_load(&f, mu__st_find(&f, "f8"), &t), MU_EPROTO);
	assert_null(t);
	assert_int_equal(mu__st_loaded_dtype(mu__st_find(&f, "f8")), -1);
	mu__st_close(&f);
}

static void test_parse_out_of_memory(void **state)
{
	const char *h = "{\"__metadata__\":{\"a\":\"b\"}," T("x", "F32", "[2]", 0, 8) ","
	                T("y", "BF16", "[2,2]", 8, 16) "}";
	mu__st_file_t f;
	long n;
	int rc;

	(void)state;
	for (n = 0; n < 200; n++) {
		mu_test_fail_after(n);
		rc = mu__st_parse(h, strlen(h), 16, &f, NULL, 0);
		mu_test_alloc_reset();
		if (rc == 0)
			break;
		/* cJSON reports its allocation failures as a parse failure */
		assert_true(rc == MU_ENOMEM || rc == MU_EJSON);
		assert_null(f.e);
	}
	assert_true(n < 200);
	assert_int_equal(f.n, 2);
	mu__st_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_write_and_read_back),
		cmocka_unit_test(test_parse_rules),
		cmocka_unit_test(test_parse_overlaps),
		cmocka_unit_test(test_parse_metadata),
		cmocka_unit_test(test_parse_header_cap),
		cmocka_unit_test(test_open_rules),
		cmocka_unit_test(test_f16_every_value),
		cmocka_unit_test(test_bf16_every_value),
		cmocka_unit_test(test_f32_aligned_and_misaligned),
		cmocka_unit_test(test_load_other_dtypes),
		cmocka_unit_test(test_parse_out_of_memory),
	};
	return cmocka_run_group_tests(tests, mu_test_tmpdir_setup, mu_test_tmpdir_teardown);
}
