/* SPDX-License-Identifier: MIT */
/*
 * Options structs that grow (the rule is in include/muster/common.h):
 * every public mu_*_opts_t starts with `size_t struct_size`, the size of
 * the struct in the headers its caller was compiled with. These two calls
 * are the whole mechanism; each module's init and start calls use them.
 */
#ifndef MU_CORE_OPTS_INT_H
#define MU_CORE_OPTS_INT_H

#include <stddef.h>

/*
 * An init call's body: copy the library's defaults d (dsize bytes, a full
 * struct of this build) into the caller's o, which is size bytes long,
 * and set o's struct_size to size. Bytes the library does not know (size
 * > dsize) are zeroed. size too small to hold struct_size leaves o alone.
 */
void mu__opts_fill(void *o, size_t size, const void *d, size_t dsize);

/*
 * A start call's first step: overlay the caller's options src on dst
 * (dsize bytes, holding the defaults of this build), reading only the
 * src->struct_size bytes the caller's struct has. A field the caller's
 * headers do not have keeps its default. 0, or MU_EARG when src is NULL,
 * was not filled by its init call (struct_size too small to be one, or
 * more than MU__OPTS_GROWTH_MAX past this build's), or
 * is larger than this build's struct and sets a field past it (a field
 * this library does not have: it cannot honour it, so it refuses, as
 * Linux's openat2 does with E2BIG). dst's struct_size is left at dsize.
 */
int mu__opts_read(void *dst, size_t dsize, const void *src);

/* How much larger than this build's struct a caller's may claim to be. */
#define MU__OPTS_GROWTH_MAX 4096

#endif
