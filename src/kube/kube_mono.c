/*
 * kube_mono.c - timed waits on the monotonic clock for the runtime's
 * threads (queue, informer, leader; kube_priv.h).  A condition variable
 * times out on CLOCK_REALTIME unless told otherwise, so a clock step (NTP,
 * a VM resumed) would lengthen or cut short renew sleeps, backoffs and
 * requeue delays; these condition variables are made with CLOCK_MONOTONIC
 * and every deadline is a clock_mono_ms() time.  A condition variable made
 * by kube_mono_cond_init must only be waited on with these functions (or
 * untimed).  Also the token bucket that rate-limits a repeating log line.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "kube/kube_priv.h"

int kube_mono_condattr_init(pthread_condattr_t *attr)
{
	if (pthread_condattr_init(attr) != 0)
		return -1;
	if (pthread_condattr_setclock(attr, CLOCK_MONOTONIC) != 0) {
		pthread_condattr_destroy(attr);
		return -1;
	}
	return 0;
}

void kube_mono_cond_init(pthread_cond_t *cond)
{
	pthread_condattr_t attr;

	/* Linux supports it everywhere; without it nothing here can work. */
	if (kube_mono_condattr_init(&attr) != 0)
		abort();
	pthread_cond_init(cond, &attr);
	pthread_condattr_destroy(&attr);
}

int kube_mono_cond_wait(pthread_cond_t *cond, pthread_mutex_t *lock, int64_t deadline_ms)
{
	struct timespec ts;

	if (deadline_ms - clock_mono_ms() <= 0)
		return -1;
	ts.tv_sec = (time_t)(deadline_ms / 1000);
	ts.tv_nsec = (long)(deadline_ms % 1000) * 1000000L;
	pthread_cond_timedwait(cond, lock, &ts);
	return 0;
}

int kube_mono_sleep_unless(pthread_mutex_t *lock, pthread_cond_t *cond, atomic_int *stop, long ms)
{
	int64_t deadline = kube_mono_deadline(ms);

	pthread_mutex_lock(lock);
	while (!atomic_load(stop) && kube_mono_cond_wait(cond, lock, deadline) == 0)
		;
	pthread_mutex_unlock(lock);
	return atomic_load(stop);
}

int64_t kube_mono_deadline(long delay_ms)
{
	int64_t now = clock_mono_ms();

	/* Saturate: a delay from a server or a caller must not wrap around. */
	if (delay_ms <= 0)
		return now;
	if ((int64_t)delay_ms > INT64_MAX / 2 - now)
		return INT64_MAX / 2;
	return now + delay_ms;
}

int kube_rate_gate_pass(struct kube_rate_gate *g, int burst, long interval_ms, unsigned long *held)
{
	int64_t now = clock_mono_ms();

	if (!g->started) {
		g->started = 1;
		g->tokens = burst;
	} else {
		g->tokens += (double)(now - g->at_ms) / (double)interval_ms;
		if (g->tokens > burst)
			g->tokens = burst;
	}
	g->at_ms = now;
	if (g->tokens < 1) {
		g->held++;
		return 0;
	}
	g->tokens -= 1;
	*held = g->held;
	g->held = 0;
	return 1;
}
