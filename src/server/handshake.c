/* SPDX-License-Identifier: MIT */
/*
 * TVM RPC session handshake codec; see handshake_int.h. No sockets.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "muster/common.h"
#include "core/endian_int.h"
#include "server/handshake_int.h"
#include "tracker/proto_int.h"

int mu__rpc_hello_peek(const void *data, size_t len, size_t max,
                       const char **key, size_t *keylen)
{
	const unsigned char *p = data;
	int32_t n;

	if (len >= 4 && mu_le32_get_signed(p) != MU_RPC_MAGIC)
		return MU_EBADMAGIC;
	if (len < 8)
		return 0;
	n = mu_le32_get_signed(p + 4);
	if (n <= 0)
		return MU_EPROTO;
	if ((uint32_t)n > max)
		return MU_ETOOBIG;
	if (len - 8 < (size_t)n)
		return 0;
	*key = (const char *)p + 8;
	*keylen = (size_t)n;
	return 1;
}

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int parse_timeout(const char *v, size_t n, double *timeout)
{
	char tmp[64], *end;
	double d;

	if (n == 0 || n >= sizeof(tmp))
		return MU_EPROTO;
	memcpy(tmp, v, n);
	tmp[n] = '\0';
	d = strtod(tmp, &end);
	if (*end != '\0' || !isfinite(d) || d < 0)
		return MU_EPROTO;
	*timeout = d;
	return 0;
}

int mu__rpc_parse_client_key(const char *s, size_t n, const char **mk,
                             size_t *mklen, double *timeout)
{
	static const char prefix[] = "client:";
	size_t i = 0, start;

	*timeout = 0;
	while (i < n && !is_space(s[i]))
		i++;
	if (i < sizeof(prefix) - 1 || memcmp(s, prefix, sizeof(prefix) - 1) != 0)
		return MU_EPROTO;
	*mk = s + sizeof(prefix) - 1;
	*mklen = i - (sizeof(prefix) - 1);
	/* options; unknown ones are ignored, as TVM's servers do */
	while (i < n) {
		while (i < n && is_space(s[i]))
			i++;
		start = i;
		while (i < n && !is_space(s[i]))
			i++;
		if (i - start > 9 && memcmp(s + start, "-timeout=", 9) == 0 &&
		    parse_timeout(s + start + 9, i - start - 9, timeout) != 0)
			return MU_EPROTO;
	}
	return 0;
}

static int append_le32(mu__buf_t *out, int32_t v)
{
	unsigned char b[4];

	mu_le32_put(b, (uint32_t)v);
	return mu__buf_append(out, b, 4);
}

int mu__rpc_hello_encode(mu__buf_t *out, const char *matchkey, double timeout)
{
	mu__buf_t key;
	int rc;

	mu__buf_init(&key, MU_RPC_MAX_KEY);
	rc = mu__buf_printf(&key, "client:%s", matchkey);
	/* "%g" gives "10" for 10 and "2.5" for 2.5: what a Python client sends
	 * for an int, and a float either kind of TVM server accepts */
	if (rc == 0 && timeout > 0)
		rc = mu__buf_printf(&key, " -timeout=%g", timeout);
	if (rc == 0)
		rc = append_le32(out, MU_RPC_MAGIC);
	if (rc == 0)
		rc = append_le32(out, (int32_t)key.len);
	if (rc == 0)
		rc = mu__buf_append(out, key.data, key.len);
	mu__buf_free(&key);
	return rc;
}

int mu__rpc_reply_encode(mu__buf_t *out, int success, const char *key)
{
	size_t n = strlen("server:") + strlen(key);
	int rc;

	if (!success)
		return append_le32(out, MU_RPC_CODE_MISMATCH);
	if (n > MU_RPC_MAX_KEY)
		return MU_ETOOBIG;
	rc = append_le32(out, MU_RPC_CODE_SUCCESS);
	if (rc == 0)
		rc = append_le32(out, (int32_t)n);
	if (rc == 0)
		rc = mu__buf_printf(out, "server:%s", key);
	return rc;
}

int mu__rpc_busy_encode(mu__buf_t *out, const char *why)
{
	size_t n = strlen(why);
	int rc = append_le32(out, MU_RPC_CODE_MISMATCH);

	if (rc == 0)
		rc = append_le32(out, (int32_t)n);
	if (rc == 0)
		rc = mu__buf_append(out, why, n);
	return rc;
}

int mu__rpc_reply_peek(const void *data, size_t len, int *success,
                       size_t *consumed)
{
	const unsigned char *p = data;
	int32_t code, n;

	if (len < 4)
		return 0;
	code = mu_le32_get_signed(p);
	if (code == MU_RPC_CODE_MISMATCH || code == MU_RPC_CODE_DUPLICATE) {
		*success = 0;
		*consumed = 4;
		return 1;
	}
	if (code != MU_RPC_CODE_SUCCESS)
		return MU_EPROTO;
	if (len < 8)
		return 0;
	n = mu_le32_get_signed(p + 4);
	if (n < 0)
		return MU_EPROTO;
	if (n > MU_RPC_MAX_KEY)
		return MU_ETOOBIG;
	if (len - 8 < (size_t)n)
		return 0;
	*success = 1;
	*consumed = 8 + (size_t)n;
	return 1;
}
