/* SPDX-License-Identifier: MIT */
/*
 * Base64 codec; see base64_int.h.
 */
#include "muster/common.h"
#include "core/base64_int.h"

static const char enc[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int mu__base64_encode(mu__buf_t *out, const void *p, size_t n)
{
	const unsigned char *s = p;
	char q[4];
	size_t i;
	int rc = mu__buf_reserve(out, (n + 2) / 3 * 4);

	for (i = 0; rc == 0 && i + 3 <= n; i += 3) {
		q[0] = enc[s[i] >> 2];
		q[1] = enc[(s[i] & 3) << 4 | s[i + 1] >> 4];
		q[2] = enc[(s[i + 1] & 15) << 2 | s[i + 2] >> 6];
		q[3] = enc[s[i + 2] & 63];
		rc = mu__buf_append(out, q, 4);
	}
	if (rc == 0 && n - i == 1) {
		q[0] = enc[s[i] >> 2];
		q[1] = enc[(s[i] & 3) << 4];
		q[2] = q[3] = '=';
		rc = mu__buf_append(out, q, 4);
	} else if (rc == 0 && n - i == 2) {
		q[0] = enc[s[i] >> 2];
		q[1] = enc[(s[i] & 3) << 4 | s[i + 1] >> 4];
		q[2] = enc[(s[i + 1] & 15) << 2];
		q[3] = '=';
		rc = mu__buf_append(out, q, 4);
	}
	return rc;
}

static int val(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

int mu__base64_decode(mu__buf_t *out, const char *s, size_t n)
{
	unsigned acc = 0;
	int bits = 0, rc = 0;
	size_t i, pad = 0;

	while (pad < 2 && n > 0 && s[n - 1] == '=') {
		n--;
		pad++;
	}
	if ((n + pad) % 4 == 1 || (pad > 0 && (n + pad) % 4 != 0))
		return MU_EPROTO;
	for (i = 0; i < n && rc == 0; i++) {
		int v = val(s[i]);

		if (v < 0)
			return MU_EPROTO;
		acc = (acc << 6 | (unsigned)v) & 0xFFFFFF;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			rc = mu__buf_appendc(out, (char)(acc >> bits & 0xFF));
		}
	}
	return rc;
}
