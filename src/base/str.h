/*
 * str.h - string comparisons every module makes, once.
 *
 * Header only: each is one expression, inlined where it is used.
 */
#ifndef PC_STR_H
#define PC_STR_H

#include <string.h>

/* 1 when a and b are both set and equal; a NULL never equals anything, so
 * a field that is absent from an object never matches an expected value. */
static inline int str_eq(const char *a, const char *b)
{
	return a && b && strcmp(a, b) == 0;
}

/* 1 when s is set and begins with prefix. */
static inline int str_has_prefix(const char *s, const char *prefix)
{
	return s && strncmp(s, prefix, strlen(prefix)) == 0;
}

#endif
