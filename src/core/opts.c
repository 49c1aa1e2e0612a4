/* SPDX-License-Identifier: MIT */
/*
 * Sized options: the copy-in and copy-out that let an options struct gain
 * fields without breaking programs built against older or newer headers
 * (see core/opts_int.h, and include/muster/common.h for the rule).
 */
#include <stdint.h>
#include <string.h>

#include "muster/common.h"
#include "core/opts_int.h"

void mu__opts_fill(void *o, size_t size, const void *d, size_t dsize)
{
	if (o == NULL || size < sizeof(size_t))
		return;
	if (size > dsize) {
		memcpy(o, d, dsize);
		memset((unsigned char *)o + dsize, 0, size - dsize);
	} else {
		memcpy(o, d, size);
	}
	memcpy(o, &size, sizeof(size)); /* struct_size, the first field */
}

int mu__opts_read(void *dst, size_t dsize, const void *src)
{
	const unsigned char *s = src;
	size_t size;

	if (src == NULL)
		return MU_EARG;
	memcpy(&size, src, sizeof(size));
	/* 0 (a struct zeroed by hand) or less than the struct_size field:
	 * its other fields were never given their defaults */
	if (size <= sizeof(size_t))
		return MU_EARG;
	/* garbage from a struct never initialised: refuse it before reading
	 * that far (no version adds anything near this much) */
	if (size > dsize + MU__OPTS_GROWTH_MAX)
		return MU_EARG;
	for (size_t i = dsize; i < size; i++)
		if (s[i] != 0)
			return MU_EARG;
	memcpy((unsigned char *)dst + sizeof(size_t), s + sizeof(size_t),
	       (size < dsize ? size : dsize) - sizeof(size_t));
	return 0;
}
