/*
 * test_duration.c - the one duration parser: Go's syntax, and bare
 * seconds only where a command's flag always took them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

#include "base/duration.h"

static long ms_of(const char *s)
{
	long ms = -42;

	return duration_parse_ms(s, &ms) < 0 ? -1 : ms;
}

static void go_forms(void **state)
{
	(void)state;
	assert_int_equal(ms_of("90s"), 90000);
	assert_int_equal(ms_of("1h30m"), 5400000);
	assert_int_equal(ms_of("500ms"), 500);
	assert_int_equal(ms_of("2.5m"), 150000);
	assert_int_equal(ms_of("1500us"), 1);
	assert_int_equal(ms_of("1500\xc2\xb5s"), 1);
	assert_int_equal(ms_of("0"), 0);
	assert_int_equal(ms_of(".5s"), 500);
}

static void refused_forms(void **state)
{
	(void)state;
	assert_int_equal(ms_of(""), -1);
	assert_int_equal(ms_of("10"), -1);        /* Go wants a unit */
	assert_int_equal(ms_of("-5s"), -1);
	assert_int_equal(ms_of("5 s"), -1);
	assert_int_equal(ms_of("5d"), -1);
	assert_int_equal(ms_of("1e3s"), -1);
	assert_int_equal(ms_of("0x10s"), -1);
	assert_int_equal(ms_of("1..5s"), -1);
	assert_int_equal(ms_of("9999999h"), -1);  /* more than a year */
	assert_int_equal(ms_of(NULL), -1);
}

static void bare_seconds_where_allowed(void **state)
{
	long ms = 0;
	(void)state;

	assert_int_equal(duration_parse_ms_or_seconds("300", &ms), 0);
	assert_int_equal(ms, 300000);
	assert_int_equal(duration_parse_ms_or_seconds("0.5", &ms), 0);
	assert_int_equal(ms, 500);
	assert_int_equal(duration_parse_ms_or_seconds("2m", &ms), 0);
	assert_int_equal(ms, 120000);
	assert_int_equal(duration_parse_ms_or_seconds("3x", &ms), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(go_forms),
		cmocka_unit_test(refused_forms),
		cmocka_unit_test(bare_seconds_where_allowed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
