/*
 * clock.c - monotonic time, sleeps and timed waits, and RFC 3339 wall-clock
 * timestamps (see clock.h).
 */
#include "base/clock.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#define CANCEL_SLICE_MS 50

int64_t clock_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double clock_mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void clock_sleep_ms(long ms)
{
	struct timespec ts;

	if (ms <= 0)
		return;
	ts.tv_sec = ms / 1000;
	ts.tv_nsec = (ms % 1000) * 1000000L;
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

int clock_sleep_cancelable_ms(long ms, const volatile int *cancel)
{
	while (ms > 0) {
		long slice = ms < CANCEL_SLICE_MS ? ms : CANCEL_SLICE_MS;
		if (cancel != NULL && *cancel != 0)
			return -1;
		clock_sleep_ms(slice);
		ms -= slice;
	}
	return cancel != NULL && *cancel != 0 ? -1 : 0;
}

int clock_mono_condattr_init(pthread_condattr_t *attr)
{
	if (pthread_condattr_init(attr) != 0)
		return -1;
	if (pthread_condattr_setclock(attr, CLOCK_MONOTONIC) != 0) {
		pthread_condattr_destroy(attr);
		return -1;
	}
	return 0;
}

void clock_mono_cond_init(pthread_cond_t *cond)
{
	pthread_condattr_t attr;

	/* Linux supports it everywhere; without it nothing here can work. */
	if (clock_mono_condattr_init(&attr) != 0)
		abort();
	pthread_cond_init(cond, &attr);
	pthread_condattr_destroy(&attr);
}

int clock_mono_cond_wait(pthread_cond_t *cond, pthread_mutex_t *lock, int64_t deadline_ms)
{
	struct timespec ts;

	if (deadline_ms - clock_mono_ms() <= 0)
		return -1;
	ts.tv_sec = (time_t)(deadline_ms / 1000);
	ts.tv_nsec = (long)(deadline_ms % 1000) * 1000000L;
	pthread_cond_timedwait(cond, lock, &ts);
	return 0;
}

void clock_format_rfc3339(char *buf, size_t n, time_t t)
{
	struct tm tm;

	gmtime_r(&t, &tm);
	if (strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0 && n > 0)
		buf[0] = '\0';
}
