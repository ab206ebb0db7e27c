/*
 * test_stack_approval.c - the plan id and status.preview's steps
 * (stack_approval.c).  The id must be bound to what a plan will change: the
 * same steps and goals give the same id whatever the revision, the random
 * per-preview seeds, the secret ciphertexts (new on every preview) or the
 * key order; another step or another input gives another id.  Hostile plan
 * files (not JSON, no resourcePlans, wrong types, deep nesting) are refused
 * or bounded, never crash.  A plan the pulumi CLI (Go's encoding/json: names
 * of struct fields matched case-insensitively, a later duplicate winning)
 * would read otherwise than cJSON is refused, naming the key: duplicates at
 * any level, two spellings where Go decodes a struct, non-ASCII struct
 * keys, invalid UTF-8, trailing bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "stack/stack_machine.h"

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

/* stack_plan_id of a NUL-terminated text, after no earlier plan. */
static int plan_id(const char *text, char out[65], int *changes)
{
	struct err e;

	return stack_plan_id(text, text ? strlen(text) : 0, NULL, out, changes, &e);
}

static void id_of(char *text, char out[65], int *changes)
{
	assert_int_equal(plan_id(text, out, changes), 0);
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
		assert_int_equal(plan_id(bad[i], out, &ch), -1);
		assert_string_equal(out, "");
	}
	assert_int_equal(plan_id(NULL, out, &ch), -1);
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
	/* Refused (cJSON's limit, or ours: deeper than the id reads). */
	assert_int_equal(plan_id(t, out, &ch), -1);
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

/* The refusal of text as a plan (its message), or NULL when accepted. */
static const char *refusal(const char *text, size_t len)
{
	static struct err e;
	char out[65];
	int ch;

	memset(&e, 0, sizeof(e));
	if (stack_plan_id(text, len, NULL, out, &ch, &e) == 0)
		return NULL;
	assert_int_equal(e.code, ERR_REFUSED);
	assert_string_equal(out, "");
	return e.msg;
}

#define REFUSED_NAMING(text, what) do { \
		const char *m_ = refusal(text, strlen(text)); \
		assert_non_null(m_); \
		if (strstr(m_, what) == NULL) \
			fail_msg("refusal \"%s\" does not name %s", m_, what); \
	} while (0)

#define RP(body) "{\"resourcePlans\": {" body "}}"
#define R1 "\"urn:a\": {\"goal\": {\"type\": \"t\", \"inputDiff\": {\"adds\": {\"k\": 1}}}, \"steps\": [\"create\"]}"

static void a_plan_go_reads_otherwise_is_refused(void **state)
{
	(void)state;
	assert_null(refusal(RP(R1), strlen(RP(R1))));
	/* The bypass: cJSON reads the first, empty resourcePlans, Go the last. */
	REFUSED_NAMING("{\"resourcePlans\": {}, \"ResourcePlans\": {" R1 "}}", "esourcePlans\" more than once");
	REFUSED_NAMING("{\"resourcePlans\": {}, \"resourcePlans\": {" R1 "}}", "\"resourcePlans\" more than once");
	/* Nested: a resource's struct, its goal, the goal's inputDiff. */
	REFUSED_NAMING(RP("\"urn:a\": {\"steps\": [\"same\"], \"Steps\": [\"delete\"]}"), "teps\" more than once");
	REFUSED_NAMING(RP("\"urn:a\": {\"goal\": {\"type\": \"t\", \"TYPE\": \"u\"}, \"steps\": [\"create\"]}"),
	    "the goal of urn:a");
	REFUSED_NAMING(RP("\"urn:a\": {\"goal\": {\"inputDiff\": {\"adds\": {}, \"Adds\": {\"x\": 1}}}, "
	    "\"steps\": [\"update\"]}"), "inputDiff of urn:a");
	/* Duplicates anywhere: a URN twice, a property twice deep inside. */
	REFUSED_NAMING(RP(R1 ", " R1), "\"urn:a\" more than once");
	REFUSED_NAMING(RP("\"urn:a\": {\"goal\": {\"properties\": {\"m\": {\"x\": 1, \"x\": 2}}}, "
	    "\"steps\": [\"create\"]}"), "\"x\" more than once");
	/* Kelvin sign: Go folds it onto k. */
	REFUSED_NAMING("{\"resourcePlans\": {" R1 "}, \"\xe2\x84\xaa" "ey\": 1}", "outside ASCII");
	REFUSED_NAMING("{\"resourcePlans\": {" R1 "}, \"x\": \"\xff\"}", "not valid UTF-8");
	REFUSED_NAMING(RP(R1) " {}", "more after");
	assert_non_null(strstr(refusal(RP(R1) "\0{}", strlen(RP(R1)) + 3), "byte"));
}

static void one_wrong_spelling_of_a_field_is_refused(void **state)
{
	/* A case-sensitive read misses these (no changes: applied unreviewed);
	 * Go decodes each into its field, so the delete would run. */
	(void)state;
	REFUSED_NAMING(RP("\"urn:a\": {\"Steps\": [\"delete\"], \"goal\": {\"type\": \"t\"}}"),
	    "the plan's resource urn:a has \"Steps\", which Go reads as its field \"steps\"");
	REFUSED_NAMING(RP("\"urn:a\": {\"STEPS\": [\"delete\"]}"), "urn:a has \"STEPS\"");
	REFUSED_NAMING(RP("\"urn:a\": {\"steps\": [\"update\"], \"Goal\": {\"type\": \"t\"}}"),
	    "urn:a has \"Goal\", which Go reads as its field \"goal\"");
	REFUSED_NAMING("{\"ResourcePlans\": {" R1 "}}", "the plan has \"ResourcePlans\"");
	REFUSED_NAMING(RP("\"urn:a\": {\"steps\": [\"update\"], \"goal\": {\"InputDiff\": {}}}"),
	    "the goal of urn:a has \"InputDiff\"");
	REFUSED_NAMING(RP("\"urn:a\": {\"steps\": [\"update\"], \"goal\": {\"inputDiff\": {\"Updates\": "
	    "{\"k\": 1}}}}"), "the goal's inputDiff of urn:a has \"Updates\"");
	REFUSED_NAMING(RP("\"urn:a\": {\"steps\": [\"update\"], \"goal\": {\"customTimeouts\": "
	    "{\"Delete\": 1}}}"), "the goal's customTimeouts of urn:a has \"Delete\"");
	/* A key that is no field stays allowed, in any case. */
	assert_null(refusal(RP("\"urn:a\": {\"steps\": [\"same\"], \"Extra\": 1}"),
	    strlen(RP("\"urn:a\": {\"steps\": [\"same\"], \"Extra\": 1}"))));
}

static void maps_keep_keys_that_differ_in_case(void **state)
{
	/* Map keys (URNs, property names) are matched exactly by Go too. */
	static const char t[] = RP("\"urn:a\": {\"goal\": {\"properties\": {\"Name\": 1, \"name\": 2}}, "
	    "\"steps\": [\"create\"]}, \"urn:A\": {\"steps\": [\"same\"]}");

	(void)state;
	assert_null(refusal(t, strlen(t)));
}

static void an_applied_plan_makes_the_same_steps_another_plan(void **state)
{
	char a[65], b[65], c[65];
	int ch;
	struct err e;
	char *t = plan("update", "x", "s", NULL);

	(void)state;
	assert_int_equal(stack_plan_id(t, strlen(t), NULL, a, &ch, &e), 0);
	assert_int_equal(stack_plan_id(t, strlen(t), "", b, &ch, &e), 0);
	assert_string_equal(a, b);   /* nothing applied yet: the ids of before */
	assert_int_equal(stack_plan_id(t, strlen(t), a, c, &ch, &e), 0);
	assert_string_not_equal(a, c);
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
		cmocka_unit_test(a_plan_go_reads_otherwise_is_refused),
		cmocka_unit_test(one_wrong_spelling_of_a_field_is_refused),
		cmocka_unit_test(maps_keep_keys_that_differ_in_case),
		cmocka_unit_test(an_applied_plan_makes_the_same_steps_another_plan),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
