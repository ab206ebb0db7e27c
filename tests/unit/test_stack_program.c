/*
 * test_stack_program.c - stack_program_render: a Program's Pulumi.yaml is
 * its name, runtime yaml and its sections in a fixed order, the same bytes
 * for the same object (its digest is the revision), and a malformed
 * Program is refused naming the Program and the field.  Then the fetch: the
 * rendering as a store entry holding Pulumi.yaml alone, under its digest,
 * written once; and a controller whose server serves no Program kind says
 * so rather than waiting.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/digest.h"
#include "base/fs.h"
#include "stack/stack_sources.h"

static char *render(const char *json, struct err *e)
{
	cJSON *obj = cJSON_Parse(json);
	char *out;

	assert_non_null(obj);
	out = stack_program_render(obj, e);
	cJSON_Delete(obj);
	return out;
}

static void test_sections_in_fixed_order(void **state)
{
	struct err e = { 0 };
	/* outputs before resources, and a field the project file has no use for */
	char *out = render("{\"metadata\":{\"name\":\"web\",\"generation\":3},\"program\":{"
	    "\"outputs\":{\"greeting\":\"${msg}\"},\"packages\":{\"random\":\"4.16.0\"},"
	    "\"variables\":{\"msg\":\"yes\"},\"resources\":{\"pet\":{\"type\":\"random:RandomPet\"}},"
	    "\"configuration\":{\"n\":{\"type\":\"Number\",\"default\":1}}}}", &e);

	(void)state;
	assert_non_null(out);
	assert_string_equal(out, "{\"name\":\"web\",\"runtime\":\"yaml\","
	    "\"configuration\":{\"n\":{\"type\":\"Number\",\"default\":1}},"
	    "\"resources\":{\"pet\":{\"type\":\"random:RandomPet\"}},"
	    "\"variables\":{\"msg\":\"yes\"},\"outputs\":{\"greeting\":\"${msg}\"},"
	    "\"packages\":{\"random\":\"4.16.0\"}}");
	free(out);
}

static void test_same_object_same_bytes(void **state)
{
	const char *p = "{\"metadata\":{\"name\":\"a\"},\"program\":{\"outputs\":{\"x\":1,\"y\":[true,null]}}}";
	struct err e = { 0 };
	char *one = render(p, &e), *two = render(p, &e);

	(void)state;
	assert_non_null(one);
	assert_non_null(two);
	assert_string_equal(one, two);
	assert_string_equal(one, "{\"name\":\"a\",\"runtime\":\"yaml\",\"outputs\":{\"x\":1,\"y\":[true,null]}}");
	free(one);
	free(two);
}

static void test_refused(void **state)
{
	static const struct { const char *json, *msg; } cases[] = {
		{ "{\"program\":{}}", "Program: metadata.name is missing" },
		{ "{\"metadata\":{\"name\":\"\"},\"program\":{}}", "Program: metadata.name is missing" },
		{ "{\"metadata\":{\"name\":\"p\"}}", "Program p: program: must be an object" },
		{ "{\"metadata\":{\"name\":\"p\"},\"program\":[]}", "Program p: program: must be an object" },
		{ "{\"metadata\":{\"name\":\"p\"},\"program\":{\"resources\":\"x\"}}",
		  "Program p: program.resources: must be an object" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct err e = { 0 };

		assert_null(render(cases[i].json, &e));
		assert_int_equal(e.code, ERR_INVALID);
		assert_string_equal(e.msg, cases[i].msg);
	}
}

static void test_fetch_writes_one_entry_named_by_the_digest(void **state)
{
	const char *text = "{\"name\":\"web\",\"runtime\":\"yaml\"}";
	char root[] = "/tmp/test_stack_program.XXXXXX", dig[DIGEST_STR_MAX], hex[DIGEST_MAX_RAW * 2 + 1];
	char want[4096], file[4200], *got = NULL;
	struct stack_ctl sc;
	struct stack_pass p;
	struct digest d;
	struct err e;
	size_t len = 0;

	(void)state;
	assert_non_null(mkdtemp(root));
	memset(&sc, 0, sizeof(sc));
	memset(&p, 0, sizeof(p));
	sc.o.storage_path = root;
	p.sc = &sc;
	snprintf(p.ns, sizeof(p.ns), "apps");
	p.spec.src_name = "web";
	digest_bytes(DIGEST_SHA256, text, strlen(text), &d);
	digest_format(&d, dig, sizeof(dig));
	digest_hex(&d, hex, sizeof(hex));
	p.art.digest = dig;
	p.art.content = (char *)text;
	snprintf(want, sizeof(want), "%s/artifacts/sha256/%s", root, hex);
	for (int round = 0; round < 2; round++) {   /* the second finds it there */
		assert_int_equal(stack_program_fetch(&p), 0);
		assert_string_equal(p.tree, want);
		snprintf(file, sizeof(file), "%s/Pulumi.yaml", want);
		assert_int_equal(fs_read_file(file, 4096, &got, &len, &e), 0);
		assert_string_equal(got, text);
		free(got);
	}
	/* Nothing was rendered in this pass: no entry is made up. */
	p.art.content = NULL;
	assert_int_equal(stack_program_fetch(&p), 1);
	assert_string_equal(p.v.reason, "ArtifactFailed");
	assert_int_equal(fs_rm_rf(root, &e), 0);
}

static void test_kind_not_served_is_said(void **state)
{
	struct stack_ctl sc;
	struct stack_pass p;

	(void)state;
	memset(&sc, 0, sizeof(sc));
	memset(&p, 0, sizeof(p));
	p.sc = &sc;
	p.spec.src_name = "web";
	assert_int_equal(stack_program_resolve(&p), 1);
	assert_int_equal(p.v.state, STACK_STALLED);
	assert_string_equal(p.v.reason, "SourceKindNotServed");
	assert_non_null(strstr(p.v.message, "deploy/crds/pulumi.com_programs.yaml"));
	assert_null(p.art.revision);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sections_in_fixed_order),
		cmocka_unit_test(test_same_object_same_bytes),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_fetch_writes_one_entry_named_by_the_digest),
		cmocka_unit_test(test_kind_not_served_is_said),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
