/*
 * test_oci_semver.c - versions (Flux's tag forms, precedence) and ranges
 * (comparators, ~, ^, x-ranges, hyphen ranges, ||, pre-release rules), and
 * choosing the highest matching tag, as Flux's OCIRepository does.  The
 * exhaustive comparison with Flux's own libraries is the real tier's
 * tests/e2e/test_semver_oracle.py; these are the cases that once differed.
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
	assert_int_equal(v.npre, 4);
	assert_memory_equal(v.pre, "rc.1", 4);
	assert_int_equal(oci_semver_parse("1.2.3", &v), 0);
	assert_int_equal(v.npre, 0);
	const char *bad[] = { "", "v", "latest", "1.2.3.4", "1..2", "1.2.", "1.2.3-", "1.2.3+", "-1.2",
		"1.2.3-a..b", "1.2.x", "99999999999999999999.0.0", "1.2.3 ", "main", "V1.2.3" };
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
	assert_int_equal(cmp("v1.2.0", "1.2.0"), 0);
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

/* fluxcd/pkg/version: three dot-separated parts, so moving tags like "1.26"
 * are not versions (they used to win over "1.26.0", listed after them). */
static void tags_need_three_parts(void **state)
{
	const char *not_versions[] = { "1", "v2", "1.26", "v2.1", "1.2-rc", "1-rc.1" };
	char *tags[] = { "1.26", "1.26.0", "v1.26.1-rc.1" };
	struct oci_semver v;
	struct err e;
	struct oci_semver_range *r;

	(void)state;
	for (size_t i = 0; i < sizeof(not_versions) / sizeof(not_versions[0]); i++)
		if (oci_semver_parse(not_versions[i], &v) == 0)
			fail_msg("\"%s\" parsed as a version", not_versions[i]);
	/* two dots anywhere will do: "1.2-rc.1" is 1.2.0-rc.1 */
	assert_int_equal(oci_semver_parse("1.2-rc.1", &v), 0);
	assert_true(v.major == 1 && v.minor == 2 && v.patch == 0 && v.npre == 4);
	assert_int_equal(cmp("1.2-rc.1", "1.2.0-rc.1"), 0);
	r = oci_semver_range_parse("~1.26", &e);
	assert_non_null(r);
	assert_string_equal(oci_semver_select(r, tags, 3), "1.26.0");
	oci_semver_range_free(r);
}

/* No fixed buffers: numbers up to 2^64-1, pre-releases up to the 256-byte
 * version limit, and a numeric identifier too large for 64 bits compares as
 * text (as Masterminds/semver does). */
static void long_numbers_and_prereleases(void **state)
{
	char long_a[200], long_b[200], long_range[220];
	struct oci_semver v;

	(void)state;
	assert_int_equal(oci_semver_parse("18446744073709551615.0.0", &v), 0);
	assert_true(v.major == UINT64_MAX);
	assert_int_equal(oci_semver_parse("1.0.0000000000000000000000000018446744073709551615", &v), 0);
	assert_true(v.patch == UINT64_MAX);
	assert_int_not_equal(oci_semver_parse("18446744073709551616.0.0", &v), 0);
	snprintf(long_a, sizeof(long_a), "1.2.3-%0150d1", 0);
	snprintf(long_b, sizeof(long_b), "1.2.3-%0150d2", 0);
	memset(long_a + 6, 'a', 150);
	memset(long_b + 6, 'a', 150);
	assert_true(cmp(long_a, long_b) < 0);
	snprintf(long_range, sizeof(long_range), ">=%s", long_a);
	YES(long_range, long_b);
	NO(long_range, "1.2.3-a");
	assert_true(cmp("1.2.3-18446744073709551616", "1.2.3-0abc") > 0);
	assert_true(cmp("1.2.3-18446744073709551615", "1.2.3-0abc") < 0);
	/* numeric pre-release identifiers have no leading zero */
	assert_int_not_equal(oci_semver_parse("1.2.3-rc.01", &v), 0);
}

/* "*-0", ">=1-0", "~1.1-alpha": the usual way to let pre-releases in. */
static void prereleases_on_partial_versions(void **state)
{
	(void)state;
	YES("*-0", "1.0.0-alpha"); YES("*-0", "3.1.4");
	YES(">=1-0", "1.0.0-rc.1"); NO(">=1-0", "0.9.0");
	YES("~1.1-alpha", "1.1.1-beta"); NO("~1.1-alpha", "1.2.0-beta");
	YES("^1.2.x-alpha", "1.2.5-beta"); NO("^1.2.x-alpha", "1.1.1-beta1");
	YES("1.x-0", "1.5.0-rc.2");
}

/* A hyphen range is one comparator pair among others in its alternative. */
static void hyphen_range_with_comparators(void **state)
{
	(void)state;
	YES("1.0.0 - 2.0.0 <=2.0.0", "1.5.0"); YES("1.0.0 - 2.0.0, <=2.0.0", "1.5.0");
	NO("1.2 - 1.4 !=1.3.0", "1.3.0"); YES("1.2 - 1.4 !=1.3.0", "1.4.2");
	YES(">=1.0, 1.2 - 1.4", "1.3.5"); YES("1.1 - 2", "2.9.0");
}

/* "^1.2.3-alpha" stays in major 1 and "~1.2.3-alpha" in 1.2, pre-releases too. */
static void caret_tilde_prerelease_stay_in_range(void **state)
{
	char *tags[] = { "1.10.0", "2.0.0-rc.1", "1.2.3-beta" };
	struct err e;
	struct oci_semver_range *r;

	(void)state;
	NO("^1.2.3-alpha", "2.0.0-rc.1"); YES("^1.2.3-alpha", "1.2.3-beta");
	NO("~1.2.3-alpha", "1.3.0-rc.1"); YES("~1.2.3-alpha", "1.2.9");
	r = oci_semver_range_parse("^1.2.3-alpha", &e);
	assert_non_null(r);
	assert_string_equal(oci_semver_select(r, tags, 3), "1.10.0");
	oci_semver_range_free(r);
}

/* "!=" with a partial version excludes all it covers. */
static void not_equal_partial(void **state)
{
	(void)state;
	NO("!=4.1", "4.1.0"); NO("!=4.1", "4.1.3"); YES("!=4.1", "4.2.0"); YES("!=4.1", "5.1.0");
	NO("!=4.x", "4.9.0"); YES("!=4.x", "5.1.0");
	NO("!=4.1-alpha", "4.1.1-alpha"); YES("!=4.1-alpha", "4.1.0");
}

/* Masterminds' own rules where they differ from npm's, which Flux users get. */
static void flux_quirks(void **state)
{
	(void)state;
	YES("~0.0.0", "1.2.3");           /* written out in full: anything */
	YES("^*", "0.0.0"); NO("^*", "1.2.3");  /* a "^" of 0.0.0 */
	YES("x.1.2", "5.0.0");            /* numbers after a wildcard are ignored */
	YES("<=1.4", "1.4.9"); NO("<=1.4", "1.5.0");
	YES(">1.1", "1.2.0"); NO(">1.1", "1.1.9");
	/* the rewrite of "A - B" takes the space before A with it, so after
	 * another comparator a hyphen range needs a comma */
	struct err e;
	assert_null(oci_semver_range_parse(">=1.0 1.2 - 1.4", &e));
}

static void refuses_over_the_limits(void **state)
{
	char text[600];
	struct err e;
	struct oci_semver_range *r;

	(void)state;
	memset(text, ' ', sizeof(text));
	memcpy(text, ">=1.0.0", 7);
	text[512] = '\0';
	r = oci_semver_range_parse(text, &e);
	assert_non_null(r);
	oci_semver_range_free(r);
	text[512] = ' ';
	text[513] = '\0';
	assert_null(oci_semver_range_parse(text, &e));
	assert_non_null(strstr(e.msg, "512"));
	/* a message naming a range with a newline stays on one line */
	assert_null(oci_semver_range_parse(">=1.0.0\n<", &e));
	assert_null(strchr(e.msg, '\n'));
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
		cmocka_unit_test(tags_need_three_parts),
		cmocka_unit_test(long_numbers_and_prereleases),
		cmocka_unit_test(prereleases_on_partial_versions),
		cmocka_unit_test(hyphen_range_with_comparators),
		cmocka_unit_test(caret_tilde_prerelease_stay_in_range),
		cmocka_unit_test(not_equal_partial),
		cmocka_unit_test(flux_quirks),
		cmocka_unit_test(refuses_over_the_limits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
