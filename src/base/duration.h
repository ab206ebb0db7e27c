/*
 * duration.h - durations as Go's time.ParseDuration writes them ("90s",
 * "1h30m", "500ms", "2.5m"), the syntax of every duration in a Stack spec
 * and of the controller's flags.  The one parser in the program: the
 * commands' flags, run's flags and the Stack spec all use it.
 *
 * Accepted: one or more <number><unit> terms, the number decimal with an
 * optional fraction, the unit one of ns, us, µs, ms, s, m, h; "0" alone.
 * Refused: a sign, a term without unit, anything else, a total above one
 * year.  Results are in milliseconds, rounded down (so "1500us" is 1).
 */
#ifndef PC_DURATION_H
#define PC_DURATION_H

/* 0 with *ms set, or -1 when s is not a duration. */
int duration_parse_ms(const char *s, long *ms);

/*
 * The same, except that a bare number is also accepted and means seconds
 * ("300", "0.5"), as the one-shot commands' --timeout flags always took.
 */
int duration_parse_ms_or_seconds(const char *s, long *ms);

#endif
