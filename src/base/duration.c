/*
 * duration.c - Go-style durations (see duration.h).
 */
#include "base/duration.h"

#include <stdlib.h>
#include <string.h>

#define DURATION_MAX_MS (366.0 * 86400.0 * 1000.0)

/* A decimal number ("12", "1.5", ".5") at *p, advancing past it: -1 when
 * there is none.  Not strtod alone, which would take "0x1p3" and "1e9". */
static double number_at(const char **p)
{
	char buf[64];
	size_t n = strspn(*p, "0123456789.");

	if (n == 0 || n >= sizeof(buf) || (n == 1 && **p == '.'))
		return -1;
	memcpy(buf, *p, n);
	buf[n] = '\0';
	if (strchr(buf, '.') != strrchr(buf, '.'))
		return -1;
	*p += n;
	return strtod(buf, NULL);
}

/* The unit at *p, advancing past it: milliseconds per unit, or 0. */
static double unit_ms(const char **p)
{
	static const struct { const char *name; double ms; } units[] = {
		{ "ns", 1e-6 }, { "us", 1e-3 }, { "\xc2\xb5s", 1e-3 }, { "ms", 1 },
		{ "s", 1000 }, { "m", 60000 }, { "h", 3600000 },
	};

	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		size_t n = strlen(units[i].name);
		/* "m" must not take the "m" of "ms": longer names come first. */
		if (strncmp(*p, units[i].name, n) == 0) {
			*p += n;
			return units[i].ms;
		}
	}
	return 0;
}

int duration_parse_ms(const char *s, long *ms)
{
	double total = 0;
	const char *p = s;

	if (s == NULL || *s == '\0')
		return -1;
	if (strcmp(s, "0") == 0) {
		*ms = 0;
		return 0;
	}
	while (*p != '\0') {
		double v = number_at(&p), unit;

		if (v < 0)
			return -1;
		unit = unit_ms(&p);
		if (unit == 0)
			return -1;
		total += v * unit;
		if (total > DURATION_MAX_MS)
			return -1;
	}
	*ms = (long)total;
	return 0;
}

int duration_parse_ms_or_seconds(const char *s, long *ms)
{
	const char *p = s;
	double v = s != NULL ? number_at(&p) : -1;

	if (v >= 0 && *p == '\0') {
		if (v * 1000.0 > DURATION_MAX_MS)
			return -1;
		*ms = (long)(v * 1000.0);
		return 0;
	}
	return duration_parse_ms(s, ms);
}
