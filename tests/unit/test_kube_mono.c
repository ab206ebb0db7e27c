/*
 * test_kube_mono.c - the runtime's timed waits follow the monotonic clock
 * (base/clock.c's condition variables, kube_mono.c's sleeps): the condition variables time out on CLOCK_MONOTONIC, a wait
 * to a clock_mono_ms() deadline sleeps (it does not spin, which is what a
 * realtime condition variable given a monotonic deadline does: the deadline
 * lies decades in its past) and deadlines saturate instead of wrapping.
 */
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <cmocka.h>

#include "kube/kube_priv.h"

static void condattr_clock_is_monotonic(void **state)
{
	(void)state;
	pthread_condattr_t attr;
	clockid_t clock = CLOCK_REALTIME;

	assert_int_equal(clock_mono_condattr_init(&attr), 0);
	assert_int_equal(pthread_condattr_getclock(&attr, &clock), 0);
	assert_int_equal(clock, CLOCK_MONOTONIC);
	pthread_condattr_destroy(&attr);
}

static void a_wait_sleeps_until_the_monotonic_deadline(void **state)
{
	(void)state;
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t cond;
	int64_t deadline;
	int waits = 0;

	clock_mono_cond_init(&cond);
	deadline = kube_mono_deadline(100);
	pthread_mutex_lock(&lock);
	while (clock_mono_cond_wait(&cond, &lock, deadline) == 0)
		waits++;
	pthread_mutex_unlock(&lock);
	assert_true(clock_mono_ms() >= deadline);
	/* Nobody signals: one timed wait, maybe a spurious wake-up or two, not
	 * the thousands of a wait that times out at once. */
	assert_true(waits >= 1 && waits <= 10);
	pthread_cond_destroy(&cond);
}

static void sleep_unless_stopped_wakes_on_stop(void **state)
{
	(void)state;
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t cond;
	atomic_int stop = 1;

	clock_mono_cond_init(&cond);
	assert_int_equal(kube_mono_sleep_unless(&lock, &cond, &stop, 3600 * 1000L), 1);
	atomic_store(&stop, 0);
	assert_int_equal(kube_mono_sleep_unless(&lock, &cond, &stop, 1), 0);
	pthread_cond_destroy(&cond);
}

static void deadlines_saturate(void **state)
{
	(void)state;
	int64_t now = clock_mono_ms();

	assert_true(kube_mono_deadline(LONG_MAX) > now);
	assert_true(kube_mono_deadline(LONG_MAX) <= INT64_MAX / 2);
	assert_true(kube_mono_deadline(-5) >= now && kube_mono_deadline(-5) <= clock_mono_ms());
	assert_true(kube_mono_deadline(1000) >= now + 1000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(condattr_clock_is_monotonic),
		cmocka_unit_test(a_wait_sleeps_until_the_monotonic_deadline),
		cmocka_unit_test(sleep_unless_stopped_wakes_on_stop),
		cmocka_unit_test(deadlines_saturate),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
