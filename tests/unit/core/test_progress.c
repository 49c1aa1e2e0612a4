/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/core/progress.c: the status line appears only when the
 * program enabled it and stderr is a terminal (a pseudo-terminal here),
 * with its text, its throttling, the final update and the erasing.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mu_test.h"

#include "core/progress_int.h"

#define MIB (1024u * 1024u)

static int master = -1, saved = -1;

/* stderr becomes a pseudo-terminal's slave end, or a pipe's write end. */
static void redirect(int tty)
{
	int fd, p[2];

	saved = dup(STDERR_FILENO);
	assert_true(saved >= 0);
	if (tty) {
		master = posix_openpt(O_RDWR | O_NOCTTY);
		assert_true(master >= 0);
		assert_int_equal(grantpt(master), 0);
		assert_int_equal(unlockpt(master), 0);
		fd = open(ptsname(master), O_RDWR | O_NOCTTY);
	} else {
		assert_int_equal(pipe(p), 0);
		master = p[0];
		fd = p[1];
	}
	assert_true(fd >= 0);
	assert_true(dup2(fd, STDERR_FILENO) >= 0);
	close(fd);
	assert_int_equal(fcntl(master, F_SETFL, O_NONBLOCK), 0);
}

static int restore(void **state)
{
	(void)state;
	mu__progress_enable(0);
	if (saved >= 0) {
		dup2(saved, STDERR_FILENO);
		close(saved);
		saved = -1;
	}
	if (master >= 0)
		close(master);
	master = -1;
	return 0;
}

/* What was written since the last call ("" when nothing). */
static const char *drain(void)
{
	static char buf[4096];
	size_t n = 0;
	ssize_t r;

	while (n < sizeof(buf) - 1 && (r = read(master, buf + n, sizeof(buf) - 1 - n)) > 0)
		n += (size_t)r;
	buf[n] = '\0';
	return buf;
}

/* After an update right after a draw at `drawn`: nothing was written, or
 * (this machine stalled us past the interval) it was drawn again because
 * the interval had passed. */
static void assert_throttled(const mu__progress_t *p, int64_t drawn)
{
	const char *out = drain();

	if (p->last_ms == drawn)
		assert_string_equal(out, "");
	else
		assert_true(p->last_ms - drawn >= MU__PROGRESS_MS);
}

static void test_silent_unless_enabled(void **state)
{
	mu__progress_t p;

	(void)state;
	redirect(1);
	mu__progress_enable(0);
	mu__progress_start(&p, 10 * MIB, "weights");
	mu__progress_bytes(&p, 10 * MIB);
	mu__progress_text(&p, 1, "waiting");
	mu__progress_end(&p);
	mu__progress_clear();
	assert_string_equal(drain(), "");
}

static void test_silent_when_not_a_terminal(void **state)
{
	mu__progress_t p;

	(void)state;
	redirect(0);
	mu__progress_enable(1);
	mu__progress_start(&p, 10 * MIB, "weights");
	mu__progress_bytes(&p, 5 * MIB);
	mu__progress_bytes(&p, 10 * MIB);
	mu__progress_text(&p, 1, "waiting");
	mu__progress_end(&p);
	mu__progress_clear();
	assert_string_equal(drain(), "");
}

static void test_bytes_on_a_terminal(void **state)
{
	mu__progress_t p;
	const char *out;
	int64_t drawn;

	(void)state;
	redirect(1);
	mu__progress_enable(1);
	mu__progress_start(&p, 10 * MIB, "weights -> %s", "10.0.0.7:9000");
	mu__progress_bytes(&p, 5 * MIB); /* the first update always draws */
	out = drain();
	assert_true(strncmp(out, "\r\033[Kweights -> 10.0.0.7:9000: 5.0 MiB of 10.0 MiB (50%)",
	                    strlen("\r\033[Kweights -> 10.0.0.7:9000: 5.0 MiB of 10.0 MiB (50%)")) == 0);
	drawn = p.last_ms;
	mu__progress_bytes(&p, 6 * MIB); /* within 100 ms of it: not drawn */
	assert_throttled(&p, drawn);
	mu__progress_bytes(&p, 10 * MIB); /* the last always draws */
	out = drain();
	assert_non_null(strstr(out, "10.0 MiB of 10.0 MiB (100%)"));
	mu__progress_end(&p); /* erases the line */
	assert_string_equal(drain(), "\r\033[K");
	mu__progress_clear(); /* nothing on show any more */
	assert_string_equal(drain(), "");
}

static void test_text_and_clear(void **state)
{
	mu__progress_t p;
	int64_t drawn;

	(void)state;
	redirect(1);
	mu__progress_enable(1);
	mu__progress_start(&p, 0, "devices");
	mu__progress_text(&p, 0, "%d of %d devices; waiting for key %s, %d s", 1, 3, "demo", 14);
	assert_string_equal(drain(), "\r\033[Kdevices: 1 of 3 devices; waiting for key demo, 14 s");
	drawn = p.last_ms;
	mu__progress_text(&p, 0, "throttled");
	assert_throttled(&p, drawn);
	mu__progress_text(&p, 1, "forced");
	assert_string_equal(drain(), "\r\033[Kdevices: forced");
	mu__progress_clear(); /* before a log line */
	assert_string_equal(drain(), "\r\033[K");
	mu__progress_end(&p);
	assert_string_equal(drain(), "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_silent_unless_enabled, restore),
		cmocka_unit_test_teardown(test_silent_when_not_a_terminal, restore),
		cmocka_unit_test_teardown(test_bytes_on_a_terminal, restore),
		cmocka_unit_test_teardown(test_text_and_clear, restore),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
