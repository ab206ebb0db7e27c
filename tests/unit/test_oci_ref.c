/*
 * test_oci_ref.c - OCI reference parsing: hosts, ports, nested paths, tags,
 * digests, Docker Hub normalisation and the malformed cases.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "oci/oci.h"

#define HEX64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void expect_ref(const char *text, const char *registry, const char *repo, const char *tag,
    const char *digest)
{
	struct oci_ref r;
	struct err e;

	if (oci_ref_parse(text, &r, &e) < 0)
		fail_msg("\"%s\" did not parse: %s", text, e.msg);
	assert_string_equal(r.registry, registry);
	assert_string_equal(r.repository, repo);
	if (tag == NULL)
		assert_null(r.tag);
	else
		assert_string_equal(r.tag, tag);
	if (digest == NULL)
		assert_null(r.digest);
	else
		assert_string_equal(r.digest, digest);
	oci_ref_free(&r);
}

static void expect_bad(const char *text, const char *why)
{
	struct oci_ref r;
	struct err e;

	if (oci_ref_parse(text, &r, &e) == 0) {
		oci_ref_free(&r);
		fail_msg("\"%s\" parsed but should not", text);
	}
	assert_int_equal(e.code, ERR_INVALID);
	if (strstr(e.msg, why) == NULL)
		fail_msg("error for \"%s\" is \"%s\", expected it to mention \"%s\"", text, e.msg, why);
	/* the reference itself is quoted in the message */
	if (text[0] != '\0' && strstr(e.msg, text) == NULL)
		fail_msg("error \"%s\" does not quote the reference", e.msg);
}

static void parses_hosts_paths_tags_digests(void **state)
{
	(void)state;
	expect_ref("oci://ghcr.io/org/team/app:v1.2.3", "ghcr.io", "org/team/app", "v1.2.3", NULL);
	expect_ref("oci://127.0.0.1:5000/a/b", "127.0.0.1:5000", "a/b", NULL, NULL);
	expect_ref("oci://localhost:5000/app:latest", "localhost:5000", "app", "latest", NULL);
	expect_ref("localhost/app", "localhost", "app", NULL, NULL);
	expect_ref("oci://r.example.com/a/b@sha256:" HEX64, "r.example.com", "a/b", NULL, "sha256:" HEX64);
	expect_ref("oci://r.example.com/a/b:v1@sha256:" HEX64, "r.example.com", "a/b", "v1", "sha256:" HEX64);
	expect_ref("oci://r.example.com:443/a.b_c__d-e--f/g:T_a.g-1", "r.example.com:443",
	    "a.b_c__d-e--f/g", "T_a.g-1", NULL);
	/* upper-case hex in a digest is normalised */
	expect_ref("oci://r.io/a@sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
	    "r.io", "a", NULL, "sha256:" HEX64);
}

static void normalises_docker_hub(void **state)
{
	(void)state;
	expect_ref("oci://docker.io/nginx:1.25", "registry-1.docker.io", "library/nginx", "1.25", NULL);
	expect_ref("oci://index.docker.io/bitnami/redis", "registry-1.docker.io", "bitnami/redis", NULL, NULL);
	expect_ref("nginx", "registry-1.docker.io", "library/nginx", NULL, NULL);
	expect_ref("nginx:1.0", "registry-1.docker.io", "library/nginx", "1.0", NULL);
	expect_ref("team/app:v2", "registry-1.docker.io", "team/app", "v2", NULL);
}

static void refuses_malformed(void **state)
{
	char long_tag[200];

	(void)state;
	expect_bad("", "empty");
	expect_bad("https://r.io/a:v1", "only the oci:// scheme");
	expect_bad("oci://r.io", "missing repository");
	expect_bad("oci://r.io:5000", "missing repository");
	expect_bad("oci://r.io/", "missing repository");
	expect_bad("oci://r.io/A/b", "bad repository name");
	expect_bad("oci://r.io/a//b", "bad repository name");
	expect_bad("oci://r.io/a/b/", "bad repository name");
	expect_bad("oci://r.io/-a", "bad repository name");
	expect_bad("oci://r.io/a___b", "bad repository name");
	expect_bad("oci://r.io/a:", "bad tag");
	expect_bad("oci://r.io/a:.x", "bad tag");
	expect_bad("oci://r.io/a:x/y", "bad repository name");
	expect_bad("oci://r.io/a@sha256:abc", "sha256");
	expect_bad("oci://r.io/a@" HEX64, "digest must be");
	expect_bad("oci://r.io/a@md5:" HEX64, "md5");
	expect_bad("oci://r.io:0/a", "bad registry host");
	expect_bad("oci://r.io:65536/a", "bad registry host");
	expect_bad("oci://-r.io/a", "bad registry host");
	expect_bad("oci://r.io/a b", "whitespace");
	expect_bad("oci://r.io/a\xc3\xa9", "non-ASCII");
	memset(long_tag, 'a', sizeof(long_tag));
	memcpy(long_tag, "oci://r.io/a:", 13);
	long_tag[13 + 129] = '\0';
	expect_bad(long_tag, "bad tag");
}

static void formats_back(void **state)
{
	struct oci_ref r;
	struct err e;
	char *s;

	(void)state;
	assert_int_equal(oci_ref_parse("oci://r.io:5000/a/b:v1@sha256:" HEX64, &r, &e), 0);
	s = oci_ref_string(&r);
	assert_string_equal(s, "r.io:5000/a/b:v1@sha256:" HEX64);
	free(s);
	oci_ref_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parses_hosts_paths_tags_digests),
		cmocka_unit_test(normalises_docker_hub),
		cmocka_unit_test(refuses_malformed),
		cmocka_unit_test(formats_back),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
