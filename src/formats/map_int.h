/* SPDX-License-Identifier: MIT */
/*
 * A file mapped read-only (formats/map.c): the one place checkpoints are
 * opened and mmapped, for safetensors files and for the decoder's
 * checkpoints (GGUF, llama2.c, HF shards). The map is private and
 * read-only; what the file's pages cost is the page cache's, and only the
 * pages something reads become resident.
 */
#ifndef MU_FORMATS_MAP_INT_H
#define MU_FORMATS_MAP_INT_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
	void *p;           /* the file's bytes, len of them; NULL when closed */
	size_t len;
	int64_t mtime_ns;  /* its modification time when it was mapped */
} mu__map_t;

typedef enum {
	MU__MAP_NORMAL = 0, /* the kernel's default readahead */
	MU__MAP_RANDOM = 1  /* no readahead: a stage reads only its layers */
} mu__map_advice_t;

/*
 * Map path, a regular file of at least min_len bytes (and at least 1).
 * 0, or with why: -errno when it cannot be opened or mapped ("cannot open
 * PATH: ..."), MU_EPROTO when it is not a regular file or is shorter
 * ("PATH is not a non-empty regular file", or what_short when given and
 * the file is short: "PATH: " followed by it). On failure *m is zeroed.
 */
int mu__map_open(const char *path, size_t min_len, const char *what_short,
                 mu__map_advice_t advice, mu__map_t *m, char *why, size_t wl);
/* Unmap; a zeroed or closed map is fine. */
void mu__map_close(mu__map_t *m);

#endif
