/*
 * clock.h - the monotonic clock and sleeping, for timeouts, deadlines and
 * backoff.  Waits are measured on CLOCK_MONOTONIC so a wall-clock step
 * (NTP, a VM resumed) neither shortens nor lengthens them.
 *
 * The one copy of these helpers in the program: http, the artifact store,
 * the OCI client, proc, the kube client and the pulumi driver use them.
 * Wall-clock timestamps (what status fields, Events and manifests carry)
 * are formatted here too, once: clock_format_rfc3339.  So are the timed
 * waits on a condition variable that the threads of the kube runtime and
 * of the notification sender make (clock_mono_cond_*).
 */
#ifndef PC_CLOCK_H
#define PC_CLOCK_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Milliseconds on CLOCK_MONOTONIC (an arbitrary origin; only differences
 * mean anything). */
int64_t clock_mono_ms(void);
/* The same in seconds with nanosecond resolution, for durations that
 * metrics report. */
double clock_mono_s(void);

/* Sleeps ms milliseconds (<= 0 returns at once), resuming after signals. */
void clock_sleep_ms(long ms);

/*
 * Sleeps up to ms milliseconds in slices of at most 50 ms, returning early
 * with -1 as soon as *cancel (may be NULL) is non-zero; 0 after the full
 * sleep.  For waits another thread or a signal handler must be able to cut.
 */
int clock_sleep_cancelable_ms(long ms, const volatile int *cancel);

/*
 * Condition variables whose timed waits count on CLOCK_MONOTONIC.  One
 * times out on CLOCK_REALTIME unless told otherwise, so a clock step would
 * lengthen or cut short renew sleeps, backoffs, requeue delays and drains.
 * clock_mono_condattr_init sets up such attributes (0, or -1 with nothing
 * to destroy); clock_mono_cond_init makes such a condition variable
 * (aborting if it cannot: without it no timed wait is right), and one made
 * so must only be waited on with clock_mono_cond_wait (or untimed), which
 * waits until a clock_mono_ms() deadline: 0 after waiting, woken or not;
 * -1 without waiting once the deadline has passed.  Called with lock held.
 */
int clock_mono_condattr_init(pthread_condattr_t *attr);
void clock_mono_cond_init(pthread_cond_t *cond);
int clock_mono_cond_wait(pthread_cond_t *cond, pthread_mutex_t *lock, int64_t deadline_ms);

/* Formats the wall-clock time t (seconds since the epoch) in UTC as RFC 3339
 * with whole seconds, "2026-11-30T10:00:00Z", into buf; n of at least
 * CLOCK_RFC3339_LEN holds it.  What metav1.Time and OCI annotations carry. */
#define CLOCK_RFC3339_LEN 21
void clock_format_rfc3339(char *buf, size_t n, time_t t);

#endif
