/*
 * test_stack_program.c - stack_program_render: a Program's Pulumi.yaml is
 * its name, runtime yaml and its sections in a fixed order, the same bytes
 * for the same object (its digest is the revision), and a malformed
 * Program is refused naming the Program and the field.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sections_in_fixed_order),
		cmocka_unit_test(test_same_object_same_bytes),
		cmocka_unit_test(test_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
