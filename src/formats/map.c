/* SPDX-License-Identifier: MIT */
/*
 * Files mapped read-only, see map_int.h. The formats that read them
 * (safetensors.c here, the decoder's loaders in llm/) parse the bytes;
 * this file only opens, checks the kind and size, maps and unmaps.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "muster/common.h"
#include "core/error_int.h"
#include "formats/map_int.h"

int mu__map_open(const char *path, size_t min_len, const char *what_short,
                 mu__map_advice_t advice, mu__map_t *m, char *why, size_t wl)
{
	struct stat st;
	void *p;
	int fd;

	memset(m, 0, sizeof(*m));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return mu__why(why, wl, -errno, "cannot open %.300s: %s", path, strerror(errno));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0 ||
	    (uint64_t)st.st_size < min_len) {
		int reg = S_ISREG(st.st_mode) && st.st_size > 0;

		close(fd);
		if (reg && what_short != NULL)
			return mu__why(why, wl, MU_EPROTO, "%.300s: %s", path, what_short);
		return mu__why(why, wl, MU_EPROTO, "%.300s is not a non-empty regular file", path);
	}
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return mu__why(why, wl, -errno, "cannot map %.300s: %s", path, strerror(errno));
	/* A stage reads its own layers' weights in order, once per token;
	 * readahead would pull in other stages' layers as well. */
	if (advice == MU__MAP_RANDOM)
		madvise(p, (size_t)st.st_size, MADV_RANDOM);
	m->p = p;
	m->len = (size_t)st.st_size;
	m->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	return 0;
}

void mu__map_close(mu__map_t *m)
{
	if (m->p != NULL)
		munmap(m->p, m->len);
	memset(m, 0, sizeof(*m));
}
