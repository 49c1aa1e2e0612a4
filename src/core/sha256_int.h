/* SPDX-License-Identifier: MIT */
/*
 * SHA-256, from OpenSSL's libcrypto (the one place the code reaches it):
 * what streamed weights are checked with, end to end, and named by in a
 * device's cache.
 */
#ifndef MU_CORE_SHA256_INT_H
#define MU_CORE_SHA256_INT_H

#include <stddef.h>
#include <stdint.h>

#define MU_SHA256_HEX 65 /* 64 hex digits and a NUL */

typedef struct mu__sha256_s mu__sha256_t;

/* Incremental: new, update any number of times, final (which frees). */
int mu__sha256_new(mu__sha256_t **out);
int mu__sha256_update(mu__sha256_t *h, const void *p, size_t n);
/* The digest as lowercase hex into hex[MU_SHA256_HEX]; frees h. */
int mu__sha256_final(mu__sha256_t *h, char *hex);
void mu__sha256_free(mu__sha256_t *h); /* without a digest; NULL is fine */

/* One buffer at once. */
int mu__sha256_hex(const void *p, size_t n, char *hex);
/* A whole file, read (not mapped) in pieces. -errno when it cannot be
 * read. */
int mu__sha256_file(const char *path, char *hex, uint64_t *size);

#endif
