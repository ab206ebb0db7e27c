/*
 * test_stack_oci_cache.c - the shared OCI resolutions (stack_source.c):
 * one entry per poll key, replaced by a new resolution, and bounded as
 * Stacks (and so poll keys) come and go.  Without a Stack informer the
 * bound is the slack alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "oci/oci.h"
#include "stack/stack_machine.h"

static struct stack_ctl sc;

static int setup(void **state)
{
	(void)state;
	memset(&sc, 0, sizeof(sc));
	pthread_mutex_init(&sc.oci_lock, NULL);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	stack_source_cleanup(&sc);
	pthread_mutex_destroy(&sc.oci_lock);
	return 0;
}

static void store(const char *key, const char *digest)
{
	struct oci_pull_result r;

	memset(&r, 0, sizeof(r));
	r.revision = (char *)"latest@sha256:aa";
	r.manifest_digest = (char *)digest;
	r.layer_digest = (char *)"sha256:bb";
	stack_oci_cache_store(&sc, key, 60000, &r);
}

/* 1 when key is cached, with that manifest digest. */
static int cached(const char *key, const char *digest)
{
	struct oci_pull_result r;
	int found;

	memset(&r, 0, sizeof(r));
	found = stack_oci_cache_lookup(&sc, key, 60000, &r) && strcmp(r.manifest_digest, digest) == 0;
	oci_pull_result_free(&r);
	return found;
}

static void test_a_new_resolution_replaces_the_old(void **state)
{
	(void)state;
	store("apps|oci://r/app|v1", "sha256:01");
	store("apps|oci://r/app|v1", "sha256:02");
	assert_int_equal((int)stack_oci_cache_count(&sc), 1);
	assert_true(cached("apps|oci://r/app|v1", "sha256:02"));
	assert_false(cached("apps|oci://r/other|v1", "sha256:02"));
}

static void test_the_cache_stays_bounded_as_stacks_come_and_go(void **state)
{
	char key[64];

	(void)state;
	/* A Stack that stays looks for its resolution every pass. */
	store("apps|oci://r/kept|v1", "sha256:0k");
	for (int i = 0; i < 2000; i++) {
		snprintf(key, sizeof(key), "ns%d|oci://r/app|v1", i);
		store(key, "sha256:01");
		assert_true(stack_oci_cache_count(&sc) <= 64 + 1);
		/* The resolution just stored is there for the fetch that follows. */
		assert_true(cached(key, "sha256:01"));
		if (i % 8 == 0)
			assert_true(cached("apps|oci://r/kept|v1", "sha256:0k"));
	}
	assert_true(cached("apps|oci://r/kept|v1", "sha256:0k"));
	assert_false(cached("ns0|oci://r/app|v1", "sha256:01"));
}

/* Issue 21 review: the key left out the credentials, CA and transport, so a
 * Stack without a registry's credentials reused another's lookup, and one
 * asking for TLS one made over plain HTTP. */
static void key_of(struct stack_spec *spec, char out[65])
{
	stack_oci_poll_key(spec, "apps", out, 65);
}

static void test_only_the_same_lookup_shares_a_key(void **state)
{
	struct stack_spec a, b;
	char ka[65], kb[65];

	(void)state;
	memset(&a, 0, sizeof(a));
	a.oci_url = "oci://registry.example/app";
	a.oci_tag = "stable";
	b = a;
	key_of(&a, ka);
	key_of(&b, kb);
	assert_string_equal(ka, kb);
	assert_int_equal(strlen(ka), 64);

	b.oci_secret = "regcred";
	key_of(&b, kb);
	assert_string_not_equal(ka, kb);
	b = a;
	b.oci_cert_secret = "ca";
	key_of(&b, kb);
	assert_string_not_equal(ka, kb);
	b = a;
	b.oci_insecure = 1;
	key_of(&b, kb);
	assert_string_not_equal(ka, kb);
	/* No field's text can stand for two: a tag holding what a separator
	 * and a secret name would look like is another key. */
	b = a;
	b.oci_tag = "stable|||||regcred";
	a.oci_secret = "regcred";
	key_of(&a, ka);
	key_of(&b, kb);
	assert_string_not_equal(ka, kb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_a_new_resolution_replaces_the_old, setup, teardown),
		cmocka_unit_test(test_only_the_same_lookup_shares_a_key),
		cmocka_unit_test_setup_teardown(test_the_cache_stays_bounded_as_stacks_come_and_go, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
