/* SPDX-License-Identifier: MIT */
/*
 * SHA-256 over OpenSSL's EVP interface; see sha256_int.h.
 */
#include <errno.h>
#include <stdio.h>

#include <openssl/evp.h>

#include "muster/common.h"
#include "core/sha256_int.h"

struct mu__sha256_s {
	EVP_MD_CTX *ctx;
};

int mu__sha256_new(mu__sha256_t **out)
{
	mu__sha256_t *h = OPENSSL_malloc(sizeof(*h));

	*out = NULL;
	if (h == NULL)
		return MU_ENOMEM;
	h->ctx = EVP_MD_CTX_new();
	if (h->ctx == NULL || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(h->ctx);
		OPENSSL_free(h);
		return MU_ENOMEM;
	}
	*out = h;
	return 0;
}

int mu__sha256_update(mu__sha256_t *h, const void *p, size_t n)
{
	return n == 0 || EVP_DigestUpdate(h->ctx, p, n) == 1 ? 0 : MU_EFAIL;
}

void mu__sha256_free(mu__sha256_t *h)
{
	if (h == NULL)
		return;
	EVP_MD_CTX_free(h->ctx);
	OPENSSL_free(h);
}

int mu__sha256_final(mu__sha256_t *h, char *hex)
{
	unsigned char md[32];
	unsigned int n = 0;
	int rc = EVP_DigestFinal_ex(h->ctx, md, &n) == 1 && n == 32 ? 0 : MU_EFAIL;

	for (unsigned i = 0; rc == 0 && i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	mu__sha256_free(h);
	return rc;
}

int mu__sha256_hex(const void *p, size_t n, char *hex)
{
	mu__sha256_t *h;
	int rc = mu__sha256_new(&h);

	if (rc == 0 && (rc = mu__sha256_update(h, p, n)) != 0)
		mu__sha256_free(h);
	return rc == 0 ? mu__sha256_final(h, hex) : rc;
}

int mu__sha256_file(const char *path, char *hex, uint64_t *size)
{
	static const size_t chunk = (size_t)1 << 20;
	unsigned char *buf = OPENSSL_malloc(chunk);
	mu__sha256_t *h = NULL;
	FILE *f = fopen(path, "rb");
	size_t n;
	int rc = f == NULL ? -errno : buf == NULL ? MU_ENOMEM : mu__sha256_new(&h);

	*size = 0;
	while (rc == 0 && (n = fread(buf, 1, chunk, f)) > 0) {
		rc = mu__sha256_update(h, buf, n);
		*size += n;
	}
	if (rc == 0 && ferror(f))
		rc = -EIO;
	if (f != NULL)
		fclose(f);
	OPENSSL_free(buf);
	if (rc != 0) {
		mu__sha256_free(h);
		return rc;
	}
	return mu__sha256_final(h, hex);
}
