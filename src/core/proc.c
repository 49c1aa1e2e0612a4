/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/proc_int.h"

long mu__proc_status_kib(int pid, const char *field)
{
	char path[64], line[256];
	size_t n = strlen(field);
	long kib = -1;
	FILE *f;

	if (pid < 0)
		return -1;
	if (pid == 0)
		snprintf(path, sizeof(path), "/proc/self/status");
	else
		snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "r");
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, field, n) == 0 && line[n] == ':' &&
		    sscanf(line + n + 1, "%ld", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

void mu__pages_release(const void *p, uint64_t n)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t b = ((uintptr_t)p + page - 1) & ~(page - 1);
	uintptr_t e = ((uintptr_t)p + (uintptr_t)n) & ~(page - 1);

	if (e > b)
		madvise((void *)b, e - b, MADV_DONTNEED);
}

void mu__pages_touch(const void *p, uint64_t n)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	volatile const unsigned char *b = p;
	unsigned char sink = 0;

	for (uint64_t i = 0; i < n; i += page)
		sink ^= b[i];
	if (n > 0)
		sink ^= b[n - 1];
	(void)sink;
}

uint64_t mu__self_rss(void)
{
	long kib = mu__proc_status_kib(0, "VmRSS");

	return kib > 0 ? (uint64_t)kib * 1024 : 0;
}

uint64_t mu__self_peak_rss(void)
{
	long kib = mu__proc_status_kib(0, "VmHWM");

	return kib > 0 ? (uint64_t)kib * 1024 : 0;
}
