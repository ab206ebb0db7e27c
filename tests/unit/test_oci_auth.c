/*
 * test_oci_auth.c - WWW-Authenticate parsing (Bearer and Basic, quoting,
 * several challenges, junk) and docker config.json lookups (auth,
 * username/password, identitytoken, registrytoken, URL-form keys, Docker
 * Hub keys, credHelpers and credsStore), including that errors carry no
 * secret.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "oci/oci.h"

static void expect_challenge(const char *hdr, const char *scheme, const char *realm, const char *service,
    const char *scope)
{
	struct oci_challenge c;
	struct err e;

	if (oci_challenge_parse(hdr, &c, &e) < 0)
		fail_msg("\"%s\" did not parse: %s", hdr, e.msg);
	assert_string_equal(c.scheme, scheme);
#define CHECK(field, want) do { \
		if ((want) == NULL) assert_null(c.field); else assert_string_equal(c.field, (want)); \
	} while (0)
	CHECK(realm, realm);
	CHECK(service, service);
	CHECK(scope, scope);
#undef CHECK
	oci_challenge_free(&c);
}

static void parses_challenges(void **state)
{
	(void)state;
	expect_challenge("Bearer realm=\"https://auth.docker.io/token\",service=\"registry.docker.io\","
	    "scope=\"repository:samalba/my-app:pull,push\"", "Bearer", "https://auth.docker.io/token",
	    "registry.docker.io", "repository:samalba/my-app:pull,push");
	expect_challenge("Basic realm=\"Registry Realm\"", "Basic", "Registry Realm", NULL, NULL);
	/* unquoted values, spaces around '=', odd case */
	expect_challenge("bearer  Realm = https://r/t , service=svc", "bearer", "https://r/t", "svc", NULL);
	/* escapes inside quotes */
	expect_challenge("Bearer realm=\"a\\\"b\",service=\"s\"", "Bearer", "a\"b", "s", NULL);
	/* several challenges: Bearer preferred over an earlier Basic */
	expect_challenge("Basic realm=\"x\", Bearer realm=\"https://t\",service=\"s\"", "Bearer", "https://t",
	    "s", NULL);
	/* token68 form then another challenge */
	expect_challenge("Negotiate abc==, Basic realm=\"r\"", "Negotiate", NULL, NULL, NULL);
	/* error param and unknown params are tolerated */
	expect_challenge("Bearer realm=\"https://t\",error=\"invalid_token\",foo=bar", "Bearer", "https://t",
	    NULL, NULL);
	/* a duplicate keeps the first value */
	expect_challenge("Bearer realm=\"https://one\",realm=\"https://two\"", "Bearer", "https://one", NULL, NULL);
}

static void refuses_bad_challenges(void **state)
{
	const char *bad[] = { "", "   ", "\"quoted\"", "Bearer realm=\"unterminated", "=x", ",,," };
	struct oci_challenge c;
	struct err e;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (oci_challenge_parse(bad[i], &c, &e) == 0) {
			oci_challenge_free(&c);
			fail_msg("\"%s\" parsed", bad[i]);
		}
		assert_int_equal(e.code, ERR_INVALID);
	}
	assert_int_equal(oci_challenge_parse(NULL, &c, &e), -1);
}

static int lookup(const char *json, const char *registry, struct oci_creds *out, char **helper)
{
	struct err e;
	int rc = oci_docker_config_parse(json, strlen(json), registry, out, helper, &e);

	if (rc < 0)
		print_message("(error: %s)\n", e.msg);
	return rc;
}

static void finds_auths(void **state)
{
	struct oci_creds c;
	char *helper;

	(void)state;
	/* "dXNlcjpwYTpzcw==" is base64("user:pa:ss"): the password keeps its colon. */
	assert_int_equal(lookup("{\"auths\":{\"r.io:5000\":{\"auth\":\"dXNlcjpwYTpzcw==\"}}}", "r.io:5000",
	    &c, &helper), 0);
	assert_null(helper);
	assert_string_equal(c.username, "user");
	assert_string_equal(c.password, "pa:ss");
	oci_creds_free(&c);

	assert_int_equal(lookup("{\"auths\":{\"https://r.io/v2/\":{\"username\":\"u\",\"password\":\"p\"}}}",
	    "r.io", &c, &helper), 0);
	assert_string_equal(c.username, "u");
	assert_string_equal(c.password, "p");
	oci_creds_free(&c);

	assert_int_equal(lookup("{\"auths\":{\"r.io\":{\"identitytoken\":\"it\",\"registrytoken\":\"rt\"}}}",
	    "r.io", &c, &helper), 0);
	assert_null(c.username);
	assert_string_equal(c.identity_token, "it");
	assert_string_equal(c.registry_token, "rt");
	oci_creds_free(&c);

	/* Docker Hub credentials live under the v1 index URL. */
	assert_int_equal(lookup("{\"auths\":{\"https://index.docker.io/v1/\":{\"auth\":\"dTpw\"}}}",
	    "registry-1.docker.io", &c, &helper), 0);
	assert_string_equal(c.username, "u");
	oci_creds_free(&c);

	/* other hosts and ports do not match */
	assert_int_equal(lookup("{\"auths\":{\"r.io:5001\":{\"auth\":\"dTpw\"},\"x.r.io\":{\"auth\":\"dTpw\"}}}",
	    "r.io:5000", &c, &helper), 0);
	assert_true(oci_creds_empty(&c));
	assert_null(helper);

	/* an exact key wins over a URL-form key for the same host */
	assert_int_equal(lookup("{\"auths\":{\"https://r.io\":{\"username\":\"url\",\"password\":\"p\"},"
	    "\"r.io\":{\"username\":\"exact\",\"password\":\"p\"}}}", "r.io", &c, &helper), 0);
	assert_string_equal(c.username, "exact");
	oci_creds_free(&c);
}

static void finds_helpers(void **state)
{
	struct oci_creds c;
	char *helper;

	(void)state;
	assert_int_equal(lookup("{\"credHelpers\":{\"r.io\":\"ecr-login\"},\"credsStore\":\"desktop\","
	    "\"auths\":{\"r.io\":{\"auth\":\"dTpw\"}}}", "r.io", &c, &helper), 0);
	assert_string_equal(helper, "ecr-login");
	assert_true(oci_creds_empty(&c));
	free(helper);

	/* credsStore is the fallback when auths has no usable entry */
	assert_int_equal(lookup("{\"credsStore\":\"desktop\",\"auths\":{\"r.io\":{}}}", "r.io", &c, &helper), 0);
	assert_string_equal(helper, "desktop");
	free(helper);

	/* inline credentials beat credsStore */
	assert_int_equal(lookup("{\"credsStore\":\"desktop\",\"auths\":{\"r.io\":{\"auth\":\"dTpw\"}}}", "r.io",
	    &c, &helper), 0);
	assert_null(helper);
	assert_string_equal(c.username, "u");
	oci_creds_free(&c);
}

static void refuses_bad_configs(void **state)
{
	const char *bad[] = {
		"not json", "[]", "{\"auths\":[]}",
		"{\"auths\":{\"r.io\":{\"auth\":\"%%%%\"}}}",
		"{\"auths\":{\"r.io\":{\"auth\":\"bm9jb2xvbg==\"}}}",     /* "nocolon" */
		"{\"credHelpers\":{\"r.io\":\"../../bin/sh\"}}",
		"{\"auths\":{\"r.io\":\"string\"}}",
	};
	struct oci_creds c;
	char *helper;
	struct err e;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (oci_docker_config_parse(bad[i], strlen(bad[i]), "r.io", &c, &helper, &e) == 0) {
			oci_creds_free(&c);
			free(helper);
			fail_msg("config %zu accepted", i);
		}
		assert_int_equal(e.code, ERR_INVALID);
		/* never the encoded secret in the message */
		assert_null(strstr(e.msg, "bm9jb2xvbg"));
	}
}

static void missing_helper_is_an_error(void **state)
{
	struct oci_creds c;
	struct err e;

	(void)state;
	assert_int_equal(oci_cred_helper_get("pc-no-such-helper-xyz", "r.io", &c, &e), -1);
	assert_non_null(strstr(e.msg, "docker-credential-pc-no-such-helper-xyz"));
	assert_int_equal(oci_cred_helper_get("bad/name", "r.io", &c, &e), -1);
	assert_int_equal(e.code, ERR_INVALID);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parses_challenges),
		cmocka_unit_test(refuses_bad_challenges),
		cmocka_unit_test(finds_auths),
		cmocka_unit_test(finds_helpers),
		cmocka_unit_test(refuses_bad_configs),
		cmocka_unit_test(missing_helper_is_an_error),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
