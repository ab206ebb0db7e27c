/*
 * test_stack_approval.c - the plan id and status.preview's steps
 * (stack_approval.c).  The id must be bound to what a plan will change: the
 * same steps and goals give the same id whatever the revision, the random
 * per-preview seeds, the secret ciphertexts (new on every preview) or the
 * key order; another step or another input gives another id.  Hostile plan
 * files (not JSON, no resourcePlans, wrong types, deep nesting) are refused
 * or bounded, never crash.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "stack/stack_internal.h"

/* A plan with one File resource (single quotes become double). */
static char *plan(const char *op, const char *content, const char *seed, const char *extra)
{
	char *t = malloc(4096);

	assert_non_null(t);
	snprintf(t, 4096, "{'manifest': {'time': '%s'}, 'config': {'p:greeting': '%s'}, 'resourcePlans': {"
	    "'urn:pulumi:dev::p::pulumi:pulumi:Stack::p-dev': {'goal': {'type': 'pulumi:pulumi:Stack', "
	    "'name': 'p-dev', 'inputDiff': {}}, 'steps': ['same'], 'seed': '%s'},"
	    "'urn:pulumi:dev::p::standin:index:File::note': {'goal': {'type': 'standin:index:File', "
	    "'name': 'note', 'inputDiff': {'updates': {'content': '%s'}}%s}, 'steps': ['%s'], "
	    "'state': {'size': 3}, 'seed': '%s'}}}",
	    seed, content, seed, content, extra ? extra : "", op, seed);
	for (char *c = t; *c; c++)
		if (*c == '\'')
			*c = '"';
	return t;
}

static void id_of(char *text, char out[65], int *changes)
{
	assert_int_equal(stack_plan_id(text, out, changes), 0);
	assert_int_equal(strlen(out), 32);
	free(text);
}

static void same_plan_same_id_whatever_the_seed_and_time(void **state)
{
	char a[65], b[65];
	int ca, cb;

	(void)state;
	id_of(plan("update", "bye", "seed-one", NULL), a, &ca);
	id_of(plan("update", "bye", "seed-two", NULL), b, &cb);
	assert_string_equal(a, b);
	assert_true(ca && cb);
}

static void another_step_or_input_another_id(void **state)
{
	char a[65], b[65], c[65];
	int ch;

	(void)state;
	id_of(plan("update", "bye", "s", NULL), a, &ch);
	id_of(plan("replace", "bye", "s", NULL), b, &ch);
	id_of(plan("update", "hello", "s", NULL), c, &ch);
	assert_string_not_equal(a, b);
	assert_string_not_equal(a, c);
	assert_string_not_equal(b, c);
}

static void secret_ciphertexts_and_key_order_do_not_count(void **state)
{
	char a[65], b[65], c[65];
	int ch;

	(void)state;
	id_of(plan("update", "x", "s", ", 'inputs': {'pw': {'4dabf18193072939515e22adb298388d': "
	    "'1b47061264138c4ac30d75fd1eb44270', 'ciphertext': 'v1:AAA'}, 'a': 1, 'b': 2}"), a, &ch);
	id_of(plan("update", "x", "s", ", 'inputs': {'b': 2, 'a': 1, 'pw': {'ciphertext': 'v1:BBB', "
	    "'4dabf18193072939515e22adb298388d': '1b47061264138c4ac30d75fd1eb44270'}}"), b, &ch);
	id_of(plan("update", "x", "s", ", 'inputs': {'b': 3, 'a': 1, 'pw': {'ciphertext': 'v1:BBB', "
	    "'4dabf18193072939515e22adb298388d': '1b47061264138c4ac30d75fd1eb44270'}}"), c, &ch);
	assert_string_equal(a, b);
	assert_string_not_equal(a, c);
}

static void all_same_is_no_change(void **state)
{
	char a[65];
	int ch = 1;

	(void)state;
	id_of(plan("same", "x", "s", NULL), a, &ch);
	assert_false(ch);
}

static void not_a_plan_is_refused(void **state)
{
	static const char *const bad[] = {
		"", "not json", "[]", "{}", "{\"resourcePlans\": []}", "{\"resourcePlans\": \"x\"}",
		"{\"resourcePlans\": {\"u\": 7}}",
	};
	char out[65];
	int ch;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(stack_plan_id(bad[i], out, &ch), -1);
		assert_string_equal(out, "");
	}
	assert_int_equal(stack_plan_id(NULL, out, &ch), -1);
}

static void deep_nesting_is_bounded(void **state)
{
	size_t depth = 5000, n = 0;
	char *t = malloc(depth * 8 + 200), out[65];
	int ch;

	(void)state;
	assert_non_null(t);
	n += (size_t)sprintf(t, "{\"resourcePlans\": {\"u\": {\"steps\": [\"create\"], \"goal\": ");
	for (size_t i = 0; i < depth; i++)
		n += (size_t)sprintf(t + n, "{\"a\":");
	n += (size_t)sprintf(t + n, "1");
	for (size_t i = 0; i < depth; i++)
		t[n++] = '}';
	strcpy(t + n, "}}}");
	/* cJSON refuses nesting beyond its limit; either way no crash. */
	(void)stack_plan_id(t, out, &ch);
	free(t);
}

static void steps_are_bounded_with_a_count_of_the_rest(void **state)
{
	char *t = malloc(200000), *c;
	size_t n = 0;
	int omitted = -1;
	cJSON *steps, *first;

	(void)state;
	assert_non_null(t);
	n += (size_t)sprintf(t, "{\"resourcePlans\": {");
	for (int i = 0; i < 80; i++)
		n += (size_t)sprintf(t + n, "%s\"urn:r%d\": {\"steps\": [\"%s\"], \"goal\": {\"inputDiff\": "
		    "{\"adds\": {\"k%d\": 1}, \"deletes\": [\"old\"]}}}", i ? "," : "", i, i % 2 ? "same" : "create", i);
	strcpy(t + n, "}}");
	steps = stack_plan_steps(t, 30, &omitted);
	assert_int_equal(cJSON_GetArraySize(steps), 30);
	assert_int_equal(omitted, 10);   /* 40 changes, 30 kept */
	first = cJSON_GetArrayItem(steps, 0);
	assert_string_equal(kube_obj_str(first, "op"), "create");
	assert_string_equal(kube_obj_str(first, "urn"), "urn:r0");
	c = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(first, "properties"));
	assert_string_equal(c, "[\"k0\",\"old\"]");
	free(c);
	cJSON_Delete(steps);
	steps = stack_plan_steps("garbage", 30, &omitted);
	assert_int_equal(cJSON_GetArraySize(steps), 0);
	cJSON_Delete(steps);
	free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(same_plan_same_id_whatever_the_seed_and_time),
		cmocka_unit_test(another_step_or_input_another_id),
		cmocka_unit_test(secret_ciphertexts_and_key_order_do_not_count),
		cmocka_unit_test(all_same_is_no_change),
		cmocka_unit_test(not_a_plan_is_refused),
		cmocka_unit_test(deep_nesting_is_bounded),
		cmocka_unit_test(steps_are_bounded_with_a_count_of_the_rest),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
