/*
 * test_oci_semver.c - versions (lenient tag forms, precedence) and ranges
 * (comparators, ~, ^, x-ranges, hyphen ranges, ||, pre-release rules), and
 * choosing the highest matching tag.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "oci/oci.h"

static void parses_versions(void **state)
{
	struct oci_semver v;

	(void)state;
	assert_int_equal(oci_semver_parse("v1.2.3-rc.1+build.5", &v), 0);
	assert_true(v.major == 1 && v.minor == 2 && v.patch == 3);
	assert_string_equal(v.pre, "rc.1");
	assert_int_equal(oci_semver_parse("1.2", &v), 0);
	assert_true(v.major == 1 && v.minor == 2 && v.patch == 0);
	assert_int_equal(oci_semver_parse("7", &v), 0);
	const char *bad[] = { "", "v", "latest", "1.2.3.4", "1..2", "1.2.", "1.2.3-", "1.2.3+", "-1.2",
		"1.2.3-a..b", "1.2.x", "99999999999999999999.0.0", "1.2.3 ", "main" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (oci_semver_parse(bad[i], &v) == 0)
			fail_msg("\"%s\" parsed as a version", bad[i]);
}

static int cmp(const char *a, const char *b)
{
	struct oci_semver va, vb;

	assert_int_equal(oci_semver_parse(a, &va), 0);
	assert_int_equal(oci_semver_parse(b, &vb), 0);
	return oci_semver_cmp(&va, &vb);
}

static void orders_by_precedence(void **state)
{
	/* semver.org §11 example chain, ascending */
	const char *chain[] = { "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta",
		"1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.0.1", "1.1.0", "2.0.0", "10.0.0" };

	(void)state;
	for (size_t i = 0; i + 1 < sizeof(chain) / sizeof(chain[0]); i++) {
		if (cmp(chain[i], chain[i + 1]) >= 0)
			fail_msg("%s should sort before %s", chain[i], chain[i + 1]);
		assert_true(cmp(chain[i + 1], chain[i]) > 0);
	}
	assert_int_equal(cmp("v1.2.0", "1.2"), 0);
	assert_int_equal(cmp("1.0.0+a", "1.0.0+b"), 0);
}

static int matches(const char *range, const char *version)
{
	struct err e;
	struct oci_semver v;
	struct oci_semver_range *r = oci_semver_range_parse(range, &e);
	int m;

	if (r == NULL)
		fail_msg("range \"%s\" did not parse: %s", range, e.msg);
	assert_int_equal(oci_semver_parse(version, &v), 0);
	m = oci_semver_range_match(r, &v);
	oci_semver_range_free(r);
	return m;
}

#define YES(r, v) do { if (!matches(r, v)) fail_msg("\"%s\" should match %s", r, v); } while (0)
#define NO(r, v) do { if (matches(r, v)) fail_msg("\"%s\" should not match %s", r, v); } while (0)

static void matches_ranges(void **state)
{
	(void)state;
	YES(">=1.2.0 <2.0.0", "1.2.0"); YES(">=1.2.0 <2.0.0", "1.9.9"); NO(">=1.2.0 <2.0.0", "2.0.0");
	NO(">=1.2.0 <2.0.0", "1.1.9");
	YES(">=1.2.0, <2.0.0", "1.5.0"); YES(">= 1.2.0", "1.2.0"); YES("=>1.2", "1.3.0");
	YES("~1.2", "1.2.9"); NO("~1.2", "1.3.0"); YES("~1.2.3", "1.2.4"); NO("~1.2.3", "1.2.2");
	YES("~1", "1.9.0"); NO("~1", "2.0.0"); YES("~>1.2", "1.2.5");
	YES("^1", "1.9.9"); NO("^1", "2.0.0"); YES("^1.2.3", "1.9.0"); NO("^1.2.3", "1.2.2");
	YES("^0.2.3", "0.2.9"); NO("^0.2.3", "0.3.0"); YES("^0.0.3", "0.0.3"); NO("^0.0.3", "0.0.4");
	YES("^0", "0.9.0"); NO("^0", "1.0.0");
	YES("1.x", "1.0.0"); YES("1.x", "1.99.1"); NO("1.x", "2.0.0"); YES("1.2.*", "1.2.7");
	NO("1.2.*", "1.3.0"); YES("*", "0.0.1"); YES("x", "5.0.0");
	YES("1.2.3", "1.2.3"); NO("1.2.3", "1.2.4"); YES("=1.2.3", "1.2.3"); YES("1.2", "1.2.8");
	YES("!=1.2.3", "1.2.4"); NO("!=1.2.3", "1.2.3");
	YES(">1.2", "1.3.0"); NO(">1.2", "1.2.9"); YES("<=1.2", "1.2.9"); NO("<=1.2", "1.3.0");
	YES("1.2 - 1.4", "1.4.9"); NO("1.2 - 1.4", "1.5.0"); YES("1.2.0 - 1.4.5", "1.4.5");
	NO("1.2.0 - 1.4.5", "1.4.6");
	YES("<1.0.0 || >=3.0.0", "0.5.0"); YES("<1.0.0 || >=3.0.0", "3.1.0"); NO("<1.0.0 || >=3.0.0", "2.0.0");
}

static void prereleases_only_when_named(void **state)
{
	(void)state;
	NO("^1", "1.3.0-rc.1");
	NO(">=1.0.0", "1.3.0-rc.1");
	NO("*", "1.0.0-alpha");
	YES(">=1.3.0-0 <2.0.0", "1.3.0-rc.1");
	YES(">=1.3.0-rc.1", "1.3.0-rc.2");
	NO(">=1.3.0-rc.1", "1.3.0-rc.0");
	YES("~1.2.3-beta", "1.2.3-beta.2");
	/* only the alternative that names a pre-release admits them */
	NO("^2 || >=1.0.0-0 <1.1.0", "2.1.0-rc.1");
	YES("^2 || >=1.0.0-0 <1.1.0", "1.0.5-rc.1");
}

static void refuses_bad_ranges(void **state)
{
	const char *bad[] = { "", "   ", ">=", "latest", "1.2.3.4", ">=1 <", "1 - ", "~v", "^1.2.3-",
		">>1", "1.2.3 || ", "|| 1.0" };
	struct err e;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct oci_semver_range *r = oci_semver_range_parse(bad[i], &e);
		if (r != NULL) {
			oci_semver_range_free(r);
			fail_msg("range \"%s\" parsed", bad[i]);
		}
		assert_int_equal(e.code, ERR_INVALID);
		assert_non_null(strstr(e.msg, "semver range"));
	}
}

static void selects_highest_tag(void **state)
{
	char *tags[] = { "latest", "1.0.0", "v1.4.0", "1.10.0", "1.3.0-rc.1", "2.0.0", "main", "1.9.9",
		"sha-abc123" };
	size_t n = sizeof(tags) / sizeof(tags[0]);
	struct err e;
	struct oci_semver_range *r;

	(void)state;
	r = oci_semver_range_parse("^1", &e);
	assert_string_equal(oci_semver_select(r, tags, n), "1.10.0");
	oci_semver_range_free(r);
	r = oci_semver_range_parse("~1.4", &e);
	assert_string_equal(oci_semver_select(r, tags, n), "v1.4.0");
	oci_semver_range_free(r);
	r = oci_semver_range_parse(">=3", &e);
	assert_null(oci_semver_select(r, tags, n));
	oci_semver_range_free(r);
	r = oci_semver_range_parse(">=1.3.0-0 <1.4.0", &e);
	assert_string_equal(oci_semver_select(r, tags, n), "1.3.0-rc.1");
	oci_semver_range_free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parses_versions),
		cmocka_unit_test(orders_by_precedence),
		cmocka_unit_test(matches_ranges),
		cmocka_unit_test(prereleases_only_when_named),
		cmocka_unit_test(refuses_bad_ranges),
		cmocka_unit_test(selects_highest_tag),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
