/* SPDX-License-Identifier: MIT */
/*
 * Standard base64 (RFC 4648 alphabet "+/", padded), as etcd's JSON gateway
 * carries every key and value.
 */
#ifndef MU_CORE_BASE64_INT_H
#define MU_CORE_BASE64_INT_H

#include <stddef.h>

#include "core/buf_int.h"

/* Append the encoding of n bytes. 0, MU_ETOOBIG or MU_ENOMEM. */
int mu__base64_encode(mu__buf_t *out, const void *p, size_t n);

/*
 * Append the decoding of the n characters at s. Padding is optional;
 * anything outside the alphabet (or a misplaced '=') is MU_EPROTO.
 */
int mu__base64_decode(mu__buf_t *out, const char *s, size_t n);

#endif
