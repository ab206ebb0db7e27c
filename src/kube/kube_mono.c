/*
 * kube_mono.c - sleeps and deadlines on the monotonic clock for the
 * runtime's threads (queue, informer, leader; kube_priv.h), on the
 * condition variables of base/clock.h (clock_mono_cond_init): every
 * deadline is a clock_mono_ms() time.  Also the token bucket that
 * rate-limits a repeating log line.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "kube/kube_priv.h"

int kube_mono_sleep_unless(pthread_mutex_t *lock, pthread_cond_t *cond, atomic_int *stop, long ms)
{
	int64_t deadline = kube_mono_deadline(ms);

	pthread_mutex_lock(lock);
	while (!atomic_load(stop) && clock_mono_cond_wait(cond, lock, deadline) == 0)
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
