/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/cli/progress.c, the command's status line: drawn
 * from progress events only when progress is on and stderr is a terminal
 * (a pseudo-terminal here) when the step begins; its text, its throttling
 * on the step's clock, the final update, the erasing at the end and
 * before a log line; and the library's own steps reaching it once it is
 * installed.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mu_test.h"

#include "cli/progress_int.h"
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
	cli_progress_enable(0);
	mu_progress_set_sink(NULL, NULL);
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

/* One event of step id, as the library would send it. */
static void send(mu_progress_kind_t kind, uint64_t id, const char *what, uint64_t done,
                 uint64_t total, const char *st, int changed, int64_t ms)
{
	mu_progress_event_t ev = {sizeof(ev), kind, id, what, done, total, st, changed, ms};

	cli_progress_sink(&ev, NULL);
}

static void test_silent_unless_enabled(void **state)
{
	(void)state;
	redirect(1);
	cli_progress_enable(0);
	send(MU_PROGRESS_BEGIN, 1, "weights", 0, 10 * MIB, NULL, 0, 0);
	send(MU_PROGRESS_BYTES, 1, "weights", 10 * MIB, 10 * MIB, NULL, 0, 0);
	send(MU_PROGRESS_STATE, 1, "weights", 0, 10 * MIB, "waiting", 1, 0);
	send(MU_PROGRESS_END, 1, "weights", 0, 10 * MIB, NULL, 0, 0);
	cli_progress_clear();
	assert_string_equal(drain(), "");
}

static void test_silent_when_not_a_terminal(void **state)
{
	(void)state;
	redirect(0);
	cli_progress_enable(1);
	send(MU_PROGRESS_BEGIN, 2, "weights", 0, 10 * MIB, NULL, 0, 0);
	send(MU_PROGRESS_BYTES, 2, "weights", 5 * MIB, 10 * MIB, NULL, 0, 0);
	send(MU_PROGRESS_BYTES, 2, "weights", 10 * MIB, 10 * MIB, NULL, 0, 500);
	send(MU_PROGRESS_STATE, 2, "weights", 0, 10 * MIB, "waiting", 1, 600);
	send(MU_PROGRESS_END, 2, "weights", 0, 10 * MIB, NULL, 0, 600);
	cli_progress_clear();
	assert_string_equal(drain(), "");
}

static void test_bytes_on_a_terminal(void **state)
{
	const char *w = "weights -> 10.0.0.7:9000";

	(void)state;
	redirect(1);
	cli_progress_enable(1);
	send(MU_PROGRESS_BEGIN, 3, w, 0, 10 * MIB, NULL, 0, 0);
	assert_string_equal(drain(), ""); /* nothing until an update */
	send(MU_PROGRESS_BYTES, 3, w, 5 * MIB, 10 * MIB, NULL, 0, 0); /* the first always draws */
	assert_string_equal(drain(), "\r\033[Kweights -> 10.0.0.7:9000: 5.0 MiB of 10.0 MiB (50%)");
	send(MU_PROGRESS_BYTES, 3, w, 6 * MIB, 10 * MIB, NULL, 0, 99); /* within 100 ms of it */
	assert_string_equal(drain(), "");
	send(MU_PROGRESS_BYTES, 3, w, 8 * MIB, 10 * MIB, NULL, 0, 1000); /* past it */
	assert_string_equal(drain(), "\r\033[Kweights -> 10.0.0.7:9000: 8.0 MiB of 10.0 MiB (80%), "
	                             "8.0 MiB/s, ETA 0 s");
	send(MU_PROGRESS_BYTES, 3, w, 10 * MIB, 10 * MIB, NULL, 0, 1010); /* the last always draws */
	assert_string_equal(drain(), "\r\033[Kweights -> 10.0.0.7:9000: 10.0 MiB of 10.0 MiB (100%), "
	                             "9.9 MiB/s, ETA 0 s");
	send(MU_PROGRESS_END, 3, w, 0, 10 * MIB, NULL, 0, 1010); /* erases the line */
	assert_string_equal(drain(), "\r\033[K");
	cli_progress_clear(); /* nothing on show any more */
	assert_string_equal(drain(), "");
	/* a total unknown, and gibibytes */
	send(MU_PROGRESS_BEGIN, 4, "hashing x", 0, 0, NULL, 0, 0);
	send(MU_PROGRESS_BYTES, 4, "hashing x", 3 * MIB, 0, NULL, 0, 2000);
	assert_string_equal(drain(), "\r\033[Khashing x: 3.0 MiB, 1.5 MiB/s");
	send(MU_PROGRESS_BYTES, 4, "hashing x", 3072ull * MIB, 0, NULL, 0, 4000);
	assert_string_equal(drain(), "\r\033[Khashing x: 3.00 GiB, 768.0 MiB/s");
	send(MU_PROGRESS_END, 4, "hashing x", 0, 0, NULL, 0, 4000);
	assert_string_equal(drain(), "\r\033[K");
}

static void test_text_and_clear(void **state)
{
	(void)state;
	redirect(1);
	cli_progress_enable(1);
	send(MU_PROGRESS_BEGIN, 5, "devices", 0, 0, NULL, 0, 0);
	send(MU_PROGRESS_STATE, 5, "devices", 0, 0, "1 of 3 devices; waiting for key demo, 14 s", 1,
	     14000);
	assert_string_equal(drain(), "\r\033[Kdevices: 1 of 3 devices; waiting for key demo, 14 s");
	send(MU_PROGRESS_STATE, 5, "devices", 0, 0, "throttled", 0, 14050);
	assert_string_equal(drain(), "");
	send(MU_PROGRESS_STATE, 5, "devices", 0, 0, "forced", 1, 14060);
	assert_string_equal(drain(), "\r\033[Kdevices: forced");
	cli_progress_clear(); /* before a log line */
	assert_string_equal(drain(), "\r\033[K");
	send(MU_PROGRESS_END, 5, "devices", 0, 0, NULL, 0, 14100);
	assert_string_equal(drain(), "");
	/* the command's log sink erases a line on show before its own */
	send(MU_PROGRESS_BEGIN, 6, "devices", 0, 0, NULL, 0, 0);
	send(MU_PROGRESS_STATE, 6, "devices", 0, 0, "waiting", 1, 0);
	assert_string_equal(drain(), "\r\033[Kdevices: waiting");
	cli_log_stderr_sink(MU_LOG_WARN, "test", "a peer refused", NULL);
	{
		const char *out = drain();

		assert_true(strncmp(out, "\r\033[K", 4) == 0);
		/* the terminal turns "\n" into "\r\n" */
		assert_non_null(strstr(out + 4, "a peer refused\r\n"));
		assert_null(strstr(out + 4, "\033"));
	}
	send(MU_PROGRESS_END, 6, "devices", 0, 0, NULL, 0, 10);
	assert_string_equal(drain(), "");
	/* a step that began while off stays undrawn when progress comes on */
	cli_progress_enable(0);
	send(MU_PROGRESS_BEGIN, 7, "devices", 0, 0, NULL, 0, 0);
	cli_progress_enable(1);
	send(MU_PROGRESS_STATE, 7, "devices", 0, 0, "waiting", 1, 0);
	send(MU_PROGRESS_END, 7, "devices", 0, 0, NULL, 0, 0);
	assert_string_equal(drain(), "");
}

/* Installed, it draws the library's own steps. */
static void test_library_steps(void **state)
{
	mu__progress_t p;

	(void)state;
	redirect(1);
	cli_progress_install();
	mu__progress_start(&p, 2 * MIB, "weights -> %s", "127.0.0.1:9");
	mu__progress_bytes(&p, 1 * MIB);
	assert_true(strncmp(drain(), "\r\033[Kweights -> 127.0.0.1:9: 1.0 MiB of 2.0 MiB (50%)",
	                    strlen("\r\033[Kweights -> 127.0.0.1:9: 1.0 MiB of 2.0 MiB (50%)")) == 0);
	mu__progress_bytes(&p, 2 * MIB);
	assert_non_null(strstr(drain(), "2.0 MiB of 2.0 MiB (100%)"));
	mu__progress_end(&p);
	assert_string_equal(drain(), "\r\033[K");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_silent_unless_enabled, restore),
		cmocka_unit_test_teardown(test_silent_when_not_a_terminal, restore),
		cmocka_unit_test_teardown(test_bytes_on_a_terminal, restore),
		cmocka_unit_test_teardown(test_text_and_clear, restore),
		cmocka_unit_test_teardown(test_library_steps, restore),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
