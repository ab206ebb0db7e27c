/*
 * test_oci_manifest.c - manifest/index parsing and validation, layer and
 * platform selection, the manifest push builds, and --ignore-paths
 * pattern matching.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "oci/oci.h"

#define D1 "sha256:1111111111111111111111111111111111111111111111111111111111111111"
#define D2 "sha256:2222222222222222222222222222222222222222222222222222222222222222"
#define D3 "sha256:3333333333333333333333333333333333333333333333333333333333333333"

#define DESC(mt, d, size) "{\"mediaType\":\"" mt "\",\"digest\":\"" d "\",\"size\":" #size "}"

static const char *flux_manifest =
	"{\"schemaVersion\":2,\"mediaType\":\"" OCI_MT_MANIFEST "\","
	"\"config\":" DESC(OCI_MT_FLUX_CONFIG, D1, 233) ","
	"\"layers\":[" DESC(OCI_MT_LAYER_TAR, D2, 10) "," DESC(OCI_MT_FLUX_CONTENT, D3, 19081) "],"
	"\"annotations\":{\"org.opencontainers.image.revision\":\"main@sha1:abc\"}}";

static int parse(const char *json, const char *ctype, struct oci_manifest *m, struct err *e)
{
	return oci_manifest_parse(json, strlen(json), ctype, m, e);
}

static void parses_flux_manifest(void **state)
{
	struct oci_manifest m;
	struct err e;
	const struct oci_descriptor *d;

	(void)state;
	assert_int_equal(parse(flux_manifest, OCI_MT_MANIFEST "; charset=utf-8", &m, &e), 0);
	assert_int_equal(m.kind, OCI_KIND_MANIFEST);
	assert_string_equal(m.config.media_type, OCI_MT_FLUX_CONFIG);
	assert_int_equal(m.config.size, 233);
	assert_int_equal(m.nlayers, 2);
	assert_int_equal(m.nannotations, 1);
	assert_string_equal(m.annotations[0].value, "main@sha1:abc");
	/* Flux content wins over an earlier plain tar layer */
	d = oci_select_layer(&m, NULL, &e);
	assert_non_null(d);
	assert_string_equal(d->digest, D3);
	d = oci_select_layer(&m, OCI_MT_LAYER_TAR, &e);
	assert_string_equal(d->digest, D2);
	assert_null(oci_select_layer(&m, "application/x-none", &e));
	assert_int_equal(e.code, ERR_NOTFOUND);
	assert_non_null(strstr(e.msg, "application/x-none"));
	assert_non_null(strstr(e.msg, OCI_MT_FLUX_CONTENT));
	oci_manifest_free(&m);
}

static void parses_docker_and_index(void **state)
{
	struct oci_manifest m;
	struct err e;
	const struct oci_descriptor *d;
	const char *docker = "{\"schemaVersion\":2,\"mediaType\":\"" OCI_MT_DOCKER_MANIFEST "\","
		"\"config\":" DESC("application/vnd.docker.container.image.v1+json", D1, 5) ","
		"\"layers\":[" DESC(OCI_MT_DOCKER_LAYER, D2, 7) "]}";
	const char *index = "{\"schemaVersion\":2,\"mediaType\":\"" OCI_MT_INDEX "\",\"manifests\":["
		"{\"mediaType\":\"" OCI_MT_MANIFEST "\",\"digest\":\"" D1 "\",\"size\":1,"
		"\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\",\"variant\":\"v8\"}},"
		"{\"mediaType\":\"" OCI_MT_MANIFEST "\",\"digest\":\"" D2 "\",\"size\":2,"
		"\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}}]}";
	const char *index_no_amd = "{\"schemaVersion\":2,\"manifests\":["
		"{\"mediaType\":\"" OCI_MT_INDEX "\",\"digest\":\"" D1 "\",\"size\":1},"
		"{\"mediaType\":\"" OCI_MT_MANIFEST "\",\"digest\":\"" D3 "\",\"size\":2,"
		"\"platform\":{\"os\":\"windows\",\"architecture\":\"amd64\"}}]}";
	const char *index_unusable = "{\"schemaVersion\":2,\"mediaType\":\"" OCI_MT_INDEX "\",\"manifests\":["
		"{\"mediaType\":\"application/vnd.in-toto+json\",\"digest\":\"" D1 "\",\"size\":1}]}";

	(void)state;
	assert_int_equal(parse(docker, OCI_MT_DOCKER_MANIFEST, &m, &e), 0);
	d = oci_select_layer(&m, NULL, &e);
	assert_string_equal(d->digest, D2);
	oci_manifest_free(&m);

	assert_int_equal(parse(index, NULL, &m, &e), 0);
	assert_int_equal(m.kind, OCI_KIND_INDEX);
	d = oci_select_platform(&m, &e);
	assert_string_equal(d->digest, D2);
	oci_manifest_free(&m);

	/* no mediaType field and no Content-Type: "manifests" means index */
	assert_int_equal(parse(index_no_amd, "application/json", &m, &e), 0);
	assert_int_equal(m.kind, OCI_KIND_INDEX);
	d = oci_select_platform(&m, &e);
	assert_string_equal(d->digest, D3);   /* the first manifest entry */
	oci_manifest_free(&m);

	assert_int_equal(parse(index_unusable, NULL, &m, &e), 0);
	assert_null(oci_select_platform(&m, &e));
	assert_non_null(strstr(e.msg, "no usable manifest"));
	oci_manifest_free(&m);
}

static void refuses_bad_manifests(void **state)
{
	const char *bad[] = {
		"", "null", "[]", "{}", "{\"schemaVersion\":1}",
		"{\"schemaVersion\":2,\"mediaType\":\"application/vnd.example\"}",
		"{\"schemaVersion\":2,\"config\":" DESC("a", D1, 1) "}",
		"{\"schemaVersion\":2,\"config\":" DESC("a", D1, 1) ",\"layers\":{}}",
		"{\"schemaVersion\":2,\"config\":" DESC("a", "sha256:12", 1) ",\"layers\":[]}",
		"{\"schemaVersion\":2,\"config\":" DESC("a", D1, -1) ",\"layers\":[]}",
		"{\"schemaVersion\":2,\"config\":" DESC("a", D1, 1.5) ",\"layers\":[]}",
		"{\"schemaVersion\":2,\"config\":" DESC("", D1, 1) ",\"layers\":[]}",
		"{\"schemaVersion\":2,\"config\":" DESC("a", D1, 1) ",\"layers\":[" DESC("b", "md5:00", 1) "]}",
		"{\"schemaVersion\":2,\"config\":" DESC("a", D1, 1) ",\"layers\":[],\"annotations\":{\"k\":1}}",
		"{\"schemaVersion\":2,\"manifests\":[7]}",
	};
	struct oci_manifest m;
	struct err e;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (parse(bad[i], NULL, &m, &e) == 0) {
			oci_manifest_free(&m);
			fail_msg("manifest %zu accepted: %s", i, bad[i]);
		}
	/* body and Content-Type disagree */
	assert_int_equal(parse(flux_manifest, OCI_MT_INDEX, &m, &e), -1);
	assert_non_null(strstr(e.msg, "Content-Type"));
}

static void builds_flux_manifest(void **state)
{
	struct oci_annotation a1[] = { { "org.opencontainers.image.source", "https://s" },
		{ "org.opencontainers.image.created", "1970-01-01T00:00:00Z" }, { "b", "2" } };
	struct oci_annotation a2[] = { { "b", "2" }, { "org.opencontainers.image.created", "1970-01-01T00:00:00Z" },
		{ "org.opencontainers.image.source", "https://s" } };
	char *j1 = oci_flux_manifest_json(D1, 113, D2, 4096, a1, 3);
	char *j2 = oci_flux_manifest_json(D1, 113, D2, 4096, a2, 3);
	struct oci_manifest m;
	struct err e;

	(void)state;
	/* the bytes (so the digest) do not depend on annotation order */
	assert_string_equal(j1, j2);
	assert_int_equal(parse(j1, OCI_MT_MANIFEST, &m, &e), 0);
	assert_string_equal(m.config.media_type, OCI_MT_FLUX_CONFIG);
	assert_int_equal(m.nlayers, 1);
	assert_string_equal(m.layers[0].media_type, OCI_MT_FLUX_CONTENT);
	assert_int_equal(m.layers[0].size, 4096);
	assert_string_equal(m.annotations[0].key, "b");
	oci_manifest_free(&m);
	free(j1);
	free(j2);
}

static void ignore_patterns(void **state)
{
	struct err e;
	struct oci_ignore *ig = oci_ignore_parse(OCI_DEFAULT_IGNORE, &e);

	(void)state;
	assert_non_null(ig);
	assert_true(oci_ignore_match(ig, ".git", 1));
	assert_false(oci_ignore_match(ig, ".git", 0));          /* ".git/" is for directories */
	assert_true(oci_ignore_match(ig, "sub/.gitignore", 0));
	assert_true(oci_ignore_match(ig, "a/b/bundle.tar.gz", 0));
	assert_true(oci_ignore_match(ig, "img.png", 0));
	assert_false(oci_ignore_match(ig, "Pulumi.yaml", 0));
	assert_false(oci_ignore_match(ig, "index.ts", 0));
	oci_ignore_free(ig);

	ig = oci_ignore_parse(" /build , docs/*.md, **/tmp/, *.log, !keep.log, # comment", &e);
	assert_non_null(ig);
	assert_true(oci_ignore_match(ig, "build", 1));
	assert_false(oci_ignore_match(ig, "src/build", 1));      /* anchored */
	assert_true(oci_ignore_match(ig, "docs/a.md", 0));
	assert_false(oci_ignore_match(ig, "docs/sub/a.md", 0));  /* '*' does not cross '/' */
	assert_true(oci_ignore_match(ig, "x/y/tmp", 1));
	assert_true(oci_ignore_match(ig, "tmp", 1));
	assert_true(oci_ignore_match(ig, "a/b.log", 0));
	assert_false(oci_ignore_match(ig, "keep.log", 0));       /* re-included */
	oci_ignore_free(ig);

	assert_null(oci_ignore_parse("/", &e));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parses_flux_manifest),
		cmocka_unit_test(parses_docker_and_index),
		cmocka_unit_test(refuses_bad_manifests),
		cmocka_unit_test(builds_flux_manifest),
		cmocka_unit_test(ignore_patterns),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
