/*
 * test_url.c - url_for_log: no userinfo, query or fragment ever printed,
 * whatever shape the URL has, and log_printable keeping text on one line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/log.h"
#include "base/url.h"

static const char *safe(const char *url)
{
	static char buf[URL_LOG_MAX];

	return url_for_log(url, buf, sizeof(buf));
}

static void userinfo_is_dropped(void **state)
{
	(void)state;
	assert_string_equal(safe("http://user:pw@host:8080/a/b.tar.gz"), "http://host:8080/a/b.tar.gz");
	assert_string_equal(safe("https://user@host/x"), "https://host/x");
	assert_string_equal(safe("https://:secret@host/x"), "https://host/x");
}

static void query_and_fragment_are_dropped(void **state)
{
	(void)state;
	assert_string_equal(safe("https://bucket.s3.amazonaws.com/blob?X-Amz-Signature=abc&X-Amz-Credential=k"),
	    "https://bucket.s3.amazonaws.com/blob");
	assert_string_equal(safe("http://host/a#token=xyz"), "http://host/a");
	assert_string_equal(safe("http://u:p@host/a?token=1#f"), "http://host/a");
}

static void plain_urls_are_kept(void **state)
{
	(void)state;
	assert_string_equal(safe("http://127.0.0.1:9000/artifacts/x.tar.gz"), "http://127.0.0.1:9000/artifacts/x.tar.gz");
	assert_string_equal(safe("https://[::1]:5000/v2/repo/blobs/sha256:ab"), "https://[::1]:5000/v2/repo/blobs/sha256:ab");
}

/* Text libcurl refuses still loses everything that could be a secret. */
static void malformed_urls_are_cut_conservatively(void **state)
{
	const char *out;
	(void)state;

	out = safe("http://user:p?ss#w/rd@host/x?token=t");
	assert_null(strstr(out, "p?ss"));
	assert_null(strstr(out, "user"));
	assert_null(strstr(out, "token"));
	out = safe("user:hunter2@host/path");
	assert_null(strstr(out, "hunter2"));
	out = safe("http://host:notaport/x?sig=s3cr3t");
	assert_null(strstr(out, "s3cr3t"));
	assert_string_equal(safe(NULL), "(none)");
	/* Found by fuzz_url: a "scheme" holding '#' kept the fragment mark. */
	out = safe("x\377\377#p://thu:t:///u:pp?w\234@hKe");
	assert_null(strpbrk(out, "?#"));
}

static void control_characters_are_escaped(void **state)
{
	const char *out;
	(void)state;

	out = safe("http://host/a\nINJECTED: yes");
	assert_null(strchr(out, '\n'));
	assert_non_null(strstr(out, "\\n"));
}

static void long_urls_are_cut_with_a_mark(void **state)
{
	char url[2000], out[64];
	(void)state;

	strcpy(url, "http://host/");
	memset(url + 12, 'a', sizeof(url) - 13);
	url[sizeof(url) - 1] = '\0';
	url_for_log(url, out, sizeof(out));
	assert_int_equal(strlen(out), sizeof(out) - 1);
	assert_string_equal(out + strlen(out) - 3, "...");
}

static void dup_variant_matches(void **state)
{
	char *d = url_for_log_dup("https://a:b@h/p?q");
	(void)state;

	assert_non_null(d);
	assert_string_equal(d, "https://h/p");
	free(d);
}

static void printable_escapes_controls_only(void **state)
{
	char out[64];
	(void)state;

	assert_string_equal(log_printable("a\nb\rc\td\x01" "e\x7f", out, sizeof(out)), "a\\nb\\rc\\td\\x01e\\x7f");
	assert_string_equal(log_printable("caf\xc3\xa9 \"q\" \\", out, sizeof(out)), "caf\xc3\xa9 \"q\" \\");
	assert_string_equal(log_printable("abcdefghij", out, 8), "abcd...");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(userinfo_is_dropped),
		cmocka_unit_test(query_and_fragment_are_dropped),
		cmocka_unit_test(plain_urls_are_kept),
		cmocka_unit_test(malformed_urls_are_cut_conservatively),
		cmocka_unit_test(control_characters_are_escaped),
		cmocka_unit_test(long_urls_are_cut_with_a_mark),
		cmocka_unit_test(dup_variant_matches),
		cmocka_unit_test(printable_escapes_controls_only),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
