/*
 * test_base64.c - the one base64 decoder's rules (base64.h): standard
 * alphabet, whitespace ignored, padding optional but only at the end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/base64.h"

static int decodes_to(const char *in, const char *want)
{
	unsigned char *out = NULL;
	size_t n = 0;
	struct err e;
	int ok;

	if (base64_decode(in, strlen(in), &out, &n, &e) < 0)
		return 0;
	ok = n == strlen(want) && memcmp(out, want, n) == 0 && out[n] == '\0';
	free(out);
	return ok;
}

static int refused(const char *in)
{
	unsigned char *out = NULL;
	size_t n;
	struct err e = { 0 };
	int r = base64_decode(in, strlen(in), &out, &n, &e) < 0 && e.code == ERR_INVALID && out == NULL;

	free(out);
	return r;
}

static void standard_forms(void **state)
{
	(void)state;
	assert_true(decodes_to("dXNlcjpwYXNz", "user:pass"));
	assert_true(decodes_to("YQ==", "a"));
	assert_true(decodes_to("YWI=", "ab"));
	assert_true(decodes_to("", ""));
}

static void padding_optional_and_whitespace_ignored(void **state)
{
	(void)state;
	assert_true(decodes_to("YQ", "a"));
	assert_true(decodes_to("YWI", "ab"));
	assert_true(decodes_to("dXNl\ncjpw\r\nYXNz\n", "user:pass"));
	assert_true(decodes_to(" YQ== ", "a"));
}

static void malformed_is_refused(void **state)
{
	(void)state;
	assert_true(refused("Y"));            /* one character left over */
	assert_true(refused("YQ===="));       /* too much padding */
	assert_true(refused("Y=Q="));         /* data after padding */
	assert_true(refused("dXNl*cjpw"));    /* outside the alphabet */
	assert_true(refused("dXNl_-pw"));     /* the URL-safe alphabet is not this one */
}

static void encode_round_trips(void **state)
{
	char *s = base64_encode("user:pass", 9);
	(void)state;

	assert_string_equal(s, "dXNlcjpwYXNz");
	free(s);
	s = base64_encode("a", 1);
	assert_string_equal(s, "YQ==");
	free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(standard_forms),
		cmocka_unit_test(padding_optional_and_whitespace_ignored),
		cmocka_unit_test(malformed_is_refused),
		cmocka_unit_test(encode_round_trips),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
