/*
 * clock.h - the monotonic clock and sleeping, for timeouts, deadlines and
 * backoff.  Waits are measured on CLOCK_MONOTONIC so a wall-clock step
 * (NTP, a VM resumed) neither shortens nor lengthens them.
 *
 * The one copy of these helpers in the program: http, the artifact store,
 * the OCI client, proc, the kube client and the pulumi driver use them.
 */
#ifndef PC_CLOCK_H
#define PC_CLOCK_H

#include <stdint.h>

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

#endif
