/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for src/tracker/client.c against a scripted fake tracker that
 * misbehaves: the client must turn each case into an error code, never a
 * crash, a hang or an allocation the peer chose.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mu_test.h"

#include "muster/tracker.h"
#include "core/endian_int.h"

#define T 1500

typedef struct {
	int lfd, port;
	const char *script; /* sent after the 4 magic bytes arrive */
	size_t len;
	int hangup; /* close right after the script instead of waiting */
	pthread_t th;
} fake_t;

static void *fake_main(void *arg)
{
	fake_t *f = arg;
	char buf[256];
	int fd = accept(f->lfd, NULL, NULL);

	if (fd < 0)
		return NULL;
	if (recv(fd, buf, 4, MSG_WAITALL) == 4 && f->len > 0)
		(void)!write(fd, f->script, f->len);
	while (!f->hangup && read(fd, buf, sizeof(buf)) > 0)
		; /* until the client gives up */
	close(fd);
	return NULL;
}

static void fake_start(fake_t *f, const char *script, size_t len, int hangup)
{
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	f->lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(f->lfd, 4), 0);
	getsockname(f->lfd, (struct sockaddr *)&sa, &sl);
	f->port = ntohs(sa.sin_port);
	f->script = script;
	f->len = len;
	f->hangup = hangup;
	pthread_create(&f->th, NULL, fake_main, f);
}

static void fake_stop(fake_t *f)
{
	pthread_join(f->th, NULL);
	close(f->lfd);
}

#define MAGIC "\x71\xf2\x02\x00"

/* Connect to a fake whose script follows the echoed magic, then ping. */
static int ping_with_script(const char *script, size_t len, int hangup)
{
	mu_tracker_client_t *c;
	fake_t f;
	int rc;

	fake_start(&f, script, len, hangup);
	rc = mu_tracker_client_connect("127.0.0.1", f.port, T, &c);
	if (rc == 0) {
		rc = mu_tracker_client_ping(c, T);
		mu_tracker_client_close(c);
	}
	fake_stop(&f);
	return rc;
}

static void test_wrong_magic(void **state)
{
	mu_tracker_client_t *c;
	fake_t f;

	(void)state;
	fake_start(&f, "\x71\xf2\x0f\x00", 4, 0); /* an RPC server, not a tracker */
	assert_int_equal(mu_tracker_client_connect("127.0.0.1", f.port, T, &c), MU_EBADMAGIC);
	assert_null(c);
	fake_stop(&f);
}

static void test_bad_replies(void **state)
{
	(void)state;
	assert_int_equal(ping_with_script(MAGIC "\x01\x00\x00\x00" "0", 9, 0), 0);
	assert_int_equal(ping_with_script(MAGIC "\x02\x00\x00\x00" "-1", 10, 0), MU_EFAIL);
	/* a length of 2^31-1: refused before any allocation */
	assert_int_equal(ping_with_script(MAGIC "\xff\xff\xff\x7f", 8, 0), MU_ETOOBIG);
	assert_int_equal(ping_with_script(MAGIC "\x00\x00\x00\x80", 8, 0), MU_EPROTO);
	assert_int_equal(ping_with_script(MAGIC "\x03\x00\x00\x00" "[1,", 11, 0), MU_EJSON);
	assert_int_equal(ping_with_script(MAGIC "\x03\x00\x00\x00" "\"x\"", 11, 0), MU_EPROTO);
	/* the tracker stops mid-frame */
	assert_int_equal(ping_with_script(MAGIC "\x09\x00\x00\x00" "[0,", 11, 1), MU_EEOF);
	/* the tracker never answers: the deadline holds */
	assert_int_equal(ping_with_script(MAGIC, 4, 0), -ETIMEDOUT);
}

static void test_bad_grant(void **state)
{
	static const char script[] = MAGIC "\x0b\x00\x00\x00" "[0, [1, 2]]";
	mu_tracker_client_t *c;
	mu_tracker_grant_t g;
	fake_t f;

	(void)state;
	fake_start(&f, script, sizeof(script) - 1, 0);
	assert_int_equal(mu_tracker_client_connect("127.0.0.1", f.port, T, &c), 0);
	assert_int_equal(mu_tracker_client_request(c, "k", 1, T, &g), MU_EPROTO);
	assert_int_equal(mu_tracker_client_ping(c, T), -ENOTCONN);
	mu_tracker_client_close(c);
	fake_stop(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wrong_magic),
		cmocka_unit_test(test_bad_replies),
		cmocka_unit_test(test_bad_grant),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
