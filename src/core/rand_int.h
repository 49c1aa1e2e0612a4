/* SPDX-License-Identifier: MIT */
/*
 * Unpredictable randomness for keys a peer must not guess (the tracker's stop
 * key, matchkeys), from the kernel.
 */
#ifndef MU_CORE_RAND_INT_H
#define MU_CORE_RAND_INT_H

#include <stddef.h>

/* Fill buf with n random bytes. 0 or -errno. */
int mu__random_bytes(void *buf, size_t n);

/*
 * Write "PREFIX:0.DDDDDDDDDDDDDDDD" (16 random decimal digits, the shape of
 * TVM's `prefix:` + str(random.random())) into out. 0, MU_ETOOBIG when out is
 * too small, or -errno.
 */
int mu__random_key(const char *prefix, char *out, size_t outlen);

#endif
