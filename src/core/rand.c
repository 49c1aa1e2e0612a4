/* SPDX-License-Identifier: MIT */
/*
 * Kernel randomness (getrandom) for keys.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "muster/common.h"
#include "core/rand_int.h"

int mu__random_bytes(void *buf, size_t n)
{
	unsigned char *p = buf;

	while (n > 0) {
		ssize_t got = getrandom(p, n, 0);

		if (got < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += got;
		n -= (size_t)got;
	}
	return 0;
}

int mu__random_key(const char *prefix, char *out, size_t outlen)
{
	uint64_t r;
	int rc, n;

	rc = mu__random_bytes(&r, sizeof(r));
	if (rc != 0)
		return rc;
	/* 16 digits: about 53 bits, as many as a double's mantissa holds. */
	n = snprintf(out, outlen, "%s:0.%016llu", prefix,
	             (unsigned long long)(r % 10000000000000000ULL));
	if (n < 0 || (size_t)n >= outlen)
		return MU_ETOOBIG;
	return 0;
}
