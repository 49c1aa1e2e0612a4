/* SPDX-License-Identifier: MIT */
/*
 * Wire integers. Every integer that crosses a socket goes through these, byte
 * by byte, so the code is right on any host byte order and never reads an
 * unaligned or host-order int from a peer's bytes.
 */
#ifndef MU_CORE_ENDIAN_INT_H
#define MU_CORE_ENDIAN_INT_H

#include <stdint.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define MU_BIG_ENDIAN_HOST 1
#else
#define MU_BIG_ENDIAN_HOST 0
#endif

static inline uint16_t mu_le16_get(const void *p)
{
	const uint8_t *b = p;

	return (uint16_t)(b[0] | b[1] << 8);
}

static inline void mu_le16_put(void *p, uint16_t v)
{
	uint8_t *b = p;

	b[0] = (uint8_t)v;
	b[1] = (uint8_t)(v >> 8);
}

static inline uint32_t mu_le32_get(const void *p)
{
	const uint8_t *b = p;

	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
	       (uint32_t)b[3] << 24;
}

static inline void mu_le32_put(void *p, uint32_t v)
{
	uint8_t *b = p;

	b[0] = (uint8_t)v;
	b[1] = (uint8_t)(v >> 8);
	b[2] = (uint8_t)(v >> 16);
	b[3] = (uint8_t)(v >> 24);
}

/* Signed LE int32 (TVM's "<i"), without implementation-defined casts. */
static inline int32_t mu_le32_get_signed(const void *p)
{
	uint32_t u = mu_le32_get(p);

	return u <= INT32_MAX ? (int32_t)u : -(int32_t)(UINT32_MAX - u) - 1;
}

static inline uint64_t mu_le64_get(const void *p)
{
	const uint8_t *b = p;

	return (uint64_t)mu_le32_get(b) | (uint64_t)mu_le32_get(b + 4) << 32;
}

static inline void mu_le64_put(void *p, uint64_t v)
{
	uint8_t *b = p;

	mu_le32_put(b, (uint32_t)v);
	mu_le32_put(b + 4, (uint32_t)(v >> 32));
}

static inline uint32_t mu_be32_get(const void *p)
{
	const uint8_t *b = p;

	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 |
	       (uint32_t)b[3];
}

static inline void mu_be32_put(void *p, uint32_t v)
{
	uint8_t *b = p;

	b[0] = (uint8_t)(v >> 24);
	b[1] = (uint8_t)(v >> 16);
	b[2] = (uint8_t)(v >> 8);
	b[3] = (uint8_t)v;
}

static inline uint64_t mu_be64_get(const void *p)
{
	const uint8_t *b = p;

	return (uint64_t)mu_be32_get(b) << 32 | (uint64_t)mu_be32_get(b + 4);
}

static inline void mu_be64_put(void *p, uint64_t v)
{
	uint8_t *b = p;

	mu_be32_put(b, (uint32_t)(v >> 32));
	mu_be32_put(b + 4, (uint32_t)v);
}

#endif
