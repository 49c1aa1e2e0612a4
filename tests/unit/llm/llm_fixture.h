/* SPDX-License-Identifier: MIT */
/*
 * Small llama2.c checkpoints for the decoder's unit tests: the legacy
 * layout (seven int32, then the F32 arrays; a negative vocab size for a
 * classifier of its own) with seeded random weights and norms of 1,
 * written to a fresh file under /tmp that the test unlinks.
 */
#ifndef MU_TEST_LLM_FIXTURE_H
#define MU_TEST_LLM_FIXTURE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct {
	int32_t dim, hidden, layers, heads, kv_heads, vocab, seq;
} llm_fixture_shape_t;

static float llm_fixture_rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return ((float)(*s >> 40) / 16777216.0f - 0.5f) * 0.4f;
}

/* Writes the checkpoint of shape s to a new file named from tmpl (its
 * XXXXXX replaced; where holds size bytes): 0, or -1 if the file could
 * not be made. */
static int llm_fixture_write(char *where, size_t size, const char *tmpl,
			     const llm_fixture_shape_t *s, uint64_t seed)
{
	int32_t hdr[7] = {s->dim, s->hidden, s->layers, s->heads, s->kv_heads, -s->vocab, s->seq};
	size_t d = (size_t)s->dim, h = (size_t)s->hidden, l = (size_t)s->layers,
	       v = (size_t)s->vocab, kvd = (size_t)(s->kv_heads * (s->dim / s->heads));
	size_t counts[] = {v * d, l * d, l * d * d, l * kvd * d, l * kvd * d, l * d * d, l * d,
			   l * h * d, l * d * h, l * h * d, d, (size_t)s->seq * (d / (size_t)s->heads),
			   v * d};
	int ones[] = {0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0};
	FILE *f;
	int fd;

	snprintf(where, size, "%s", tmpl);
	fd = mkstemp(where);
	if (fd < 0)
		return -1;
	f = fdopen(fd, "wb");
	if (f == NULL) {
		close(fd);
		return -1;
	}
	fwrite(hdr, sizeof(hdr), 1, f);
	for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
		for (size_t i = 0; i < counts[k]; i++) {
			float x = ones[k] ? 1.0f : llm_fixture_rnd(&seed);

			fwrite(&x, 4, 1, f);
		}
	return fclose(f) == 0 ? 0 : -1;
}

#endif
