/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/core/progress.c: the events a step reports to the
 * program's sink (BEGIN, BYTES, STATE, END with the step's id, what,
 * counts, state and clock), nothing at all with no sink, and a step's
 * choice made when it begins. Drawing them is the command's
 * (tests/unit/cli/test_progress.c).
 */
#include <string.h>
#include <unistd.h>

#include "mu_test.h"

#include "muster/common.h"
#include "core/progress_int.h"

#define MIB (1024u * 1024u)

typedef struct {
	mu_progress_event_t ev;
	char what[160], state[400];
} seen_t;

static seen_t seen[16];
static int nseen;

static void record(const mu_progress_event_t *ev, void *ud)
{
	seen_t *s;

	assert_ptr_equal(ud, &nseen);
	if (nseen == 16)
		fail_msg("more events than the test sent");
	s = &seen[nseen++];
	s->ev = *ev;
	snprintf(s->what, sizeof(s->what), "%s", ev->what != NULL ? ev->what : "(null)");
	snprintf(s->state, sizeof(s->state), "%s", ev->state != NULL ? ev->state : "(null)");
}

static int reset(void **state)
{
	(void)state;
	mu_progress_set_sink(NULL, NULL);
	memset(seen, 0, sizeof(seen));
	nseen = 0;
	return 0;
}

static void test_nothing_without_a_sink(void **state)
{
	mu__progress_t p;

	(void)state;
	mu__progress_start(&p, 10 * MIB, "weights");
	mu__progress_bytes(&p, 10 * MIB);
	mu__progress_text(&p, 1, "waiting");
	mu__progress_end(&p);
	assert_int_equal(nseen, 0);
	/* a step that began without a sink stays silent when one comes */
	mu__progress_start(&p, 10 * MIB, "weights");
	mu_progress_set_sink(record, &nseen);
	mu__progress_bytes(&p, 5 * MIB);
	mu__progress_end(&p);
	assert_int_equal(nseen, 0);
}

static void test_bytes_events(void **state)
{
	mu__progress_t p;

	(void)state;
	mu_progress_set_sink(record, &nseen);
	mu__progress_start(&p, 10 * MIB, "weights -> %s", "10.0.0.7:9000");
	usleep(20000);
	mu__progress_bytes(&p, 5 * MIB);
	mu__progress_bytes(&p, 10 * MIB);
	mu__progress_end(&p);
	mu__progress_bytes(&p, 10 * MIB); /* over: nothing more */
	assert_int_equal(nseen, 4);
	assert_int_equal(seen[0].ev.kind, MU_PROGRESS_BEGIN);
	assert_int_equal(seen[1].ev.kind, MU_PROGRESS_BYTES);
	assert_int_equal(seen[2].ev.kind, MU_PROGRESS_BYTES);
	assert_int_equal(seen[3].ev.kind, MU_PROGRESS_END);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(seen[i].ev.struct_size, sizeof(mu_progress_event_t));
		assert_true(seen[i].ev.id != 0 && seen[i].ev.id == seen[0].ev.id);
		assert_string_equal(seen[i].what, "weights -> 10.0.0.7:9000");
		assert_int_equal(seen[i].ev.total, 10 * MIB);
		assert_string_equal(seen[i].state, "(null)");
		assert_true(seen[i].ev.elapsed_ms >= (i == 0 ? 0 : 20));
	}
	assert_int_equal(seen[0].ev.done, 0);
	assert_int_equal(seen[1].ev.done, 5 * MIB);
	assert_int_equal(seen[2].ev.done, 10 * MIB);
	assert_true(seen[3].ev.elapsed_ms >= seen[1].ev.elapsed_ms);
}

static void test_state_events(void **state)
{
	mu__progress_t a, b;

	(void)state;
	mu_progress_set_sink(record, &nseen);
	mu__progress_start(&a, 0, "devices");
	mu__progress_start(&b, 0, "other");
	mu__progress_text(&a, 1, "%d of %d devices; waiting for key %s, %d s", 1, 3, "demo", 14);
	mu__progress_text(&a, 0, "still");
	mu__progress_text(&a, 7, "changed");
	mu__progress_end(&b);
	mu__progress_end(&a);
	assert_int_equal(nseen, 7);
	assert_true(seen[0].ev.id != seen[1].ev.id); /* two steps, two ids */
	assert_int_equal(seen[0].ev.total, 0);
	assert_int_equal(seen[2].ev.kind, MU_PROGRESS_STATE);
	assert_string_equal(seen[2].state, "1 of 3 devices; waiting for key demo, 14 s");
	assert_int_equal(seen[2].ev.changed, 1);
	assert_int_equal(seen[2].ev.id, seen[0].ev.id);
	assert_string_equal(seen[3].state, "still");
	assert_int_equal(seen[3].ev.changed, 0);
	assert_int_equal(seen[4].ev.changed, 1);
	assert_int_equal(seen[5].ev.kind, MU_PROGRESS_END);
	assert_int_equal(seen[5].ev.id, seen[1].ev.id);
	assert_int_equal(seen[6].ev.kind, MU_PROGRESS_END);
	assert_string_equal(seen[6].what, "devices");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_nothing_without_a_sink, reset, reset),
		cmocka_unit_test_setup_teardown(test_bytes_events, reset, reset),
		cmocka_unit_test_setup_teardown(test_state_events, reset, reset),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
