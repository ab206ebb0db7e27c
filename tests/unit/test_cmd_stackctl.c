/*
 * test_cmd_stackctl.c - how the operator's commands print and read: the AGE
 * durations, the table layout, `get`'s row from Stacks well formed and
 * hostile, the resource-change summary, Stack names on the command line,
 * and the -o json / -o yaml documents (yaml checked to read back as the
 * same types).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cli/stackctl.h"

/* 2026-12-01T12:00:00Z */
#define NOW 1796126400LL

static const char *dur(long long s)
{
	static char buf[32];

	return stackctl_human_duration(s, buf, sizeof(buf));
}

static void human_durations_follow_kubectl(void **state)
{
	(void)state;
	assert_string_equal(dur(-5), "<invalid>");
	assert_string_equal(dur(-1), "0s");         /* a clock one second ahead */
	assert_string_equal(dur(0), "0s");
	assert_string_equal(dur(42), "42s");
	assert_string_equal(dur(119), "119s");
	assert_string_equal(dur(120), "2m");
	assert_string_equal(dur(192), "3m12s");
	assert_string_equal(dur(599), "9m59s");
	assert_string_equal(dur(600), "10m");
	assert_string_equal(dur(45 * 60 + 30), "45m");
	assert_string_equal(dur(179 * 60 + 59), "179m");
	assert_string_equal(dur(3 * 3600), "3h");
	assert_string_equal(dur(5 * 3600 + 3 * 60), "5h3m");
	assert_string_equal(dur(8 * 3600 + 59 * 60), "8h");
	assert_string_equal(dur(47 * 3600), "47h");
	assert_string_equal(dur(48 * 3600), "2d");
	assert_string_equal(dur(3 * 86400 + 4 * 3600), "3d4h");
	assert_string_equal(dur(8 * 86400 + 5 * 3600), "8d");
	assert_string_equal(dur(729LL * 86400), "729d");
	assert_string_equal(dur(730LL * 86400), "2y");
	assert_string_equal(dur(760LL * 86400), "2y30d");
	assert_string_equal(dur(9LL * 365 * 86400 + 40 * 86400), "9y");
}

static void ages_of_timestamps(void **state)
{
	char buf[32];

	(void)state;
	assert_string_equal(stackctl_age("2026-12-01T11:55:00Z", NOW, buf, sizeof(buf)), "5m");
	assert_string_equal(stackctl_age("2026-12-01T11:59:59.5+00:00", NOW, buf, sizeof(buf)), "1s");
	assert_string_equal(stackctl_age("2026-11-28T08:00:00Z", NOW, buf, sizeof(buf)), "3d4h");
	assert_string_equal(stackctl_age("2026-12-01T12:10:00Z", NOW, buf, sizeof(buf)), "<invalid>");
	assert_string_equal(stackctl_age(NULL, NOW, buf, sizeof(buf)), "-");
	assert_string_equal(stackctl_age("yesterday", NOW, buf, sizeof(buf)), "-");
	assert_string_equal(stackctl_age("2026-13-45T99:00:00Z", NOW, buf, sizeof(buf)), "-");
}

/* What a table prints, as one string (caller frees). */
static char *render(struct stackctl_table *t)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	stackctl_table_print(t, f);
	fclose(f);
	stackctl_table_free(t);
	return text;
}

static void table_pads_to_the_widest_cell(void **state)
{
	static const char *const h[] = { "NAME", "READY", "MESSAGE" };
	const char *r1[] = { "a", "True", "fine" };
	const char *r2[] = { "longer-name", NULL, "" };
	struct stackctl_table t;
	char *out;

	(void)state;
	stackctl_table_init(&t, h, 3);
	stackctl_table_add(&t, r1);
	stackctl_table_add(&t, r2);
	out = render(&t);
	assert_string_equal(out,
	    "NAME          READY   MESSAGE\n"
	    "a             True    fine\n"
	    "longer-name   -       -\n");
	free(out);
}

static void table_escapes_control_characters_and_counts_utf8(void **state)
{
	static const char *const h[] = { "A", "B" };
	const char *r1[] = { "line\nbreak\x1b[31m", "x" };
	const char *r2[] = { "\xc3\xa9t\xc3\xa9", "y" };   /* "été": 3 characters, 5 bytes */
	struct stackctl_table t;
	char *out;

	(void)state;
	stackctl_table_init(&t, h, 2);
	stackctl_table_add(&t, r1);
	stackctl_table_add(&t, r2);
	out = render(&t);
	assert_string_equal(out,
	    "A                     B\n"
	    "line\\nbreak\\x1b[31m   x\n"
	    "\xc3\xa9t\xc3\xa9                   y\n");
	assert_null(strchr(out, '\x1b'));
	free(out);
	assert_int_equal(stackctl_text_width("\xc3\xa9t\xc3\xa9"), 3);
}

static void changes_are_sorted_and_typed(void **state)
{
	cJSON *c = cJSON_Parse("{\"same\": 2, \"create\": 1, \"bogus\": \"x\", \"delete\": 1e300}");
	char buf[128];

	(void)state;
	stackctl_changes(c, buf, sizeof(buf));
	/* a non-number is skipped; an absurd number does not overflow */
	assert_string_equal(buf, "create:1 delete:0 same:2");
	stackctl_changes(NULL, buf, sizeof(buf));
	assert_string_equal(buf, "-");
	cJSON_Delete(c);
	c = cJSON_Parse("[1, 2]");
	stackctl_changes(c, buf, sizeof(buf));
	assert_string_equal(buf, "-");
	cJSON_Delete(c);
}

static const char *const *row_of(const char *json, int with_ns, struct stackctl_row_buf *b)
{
	static const char *cells[STACKCTL_GET_COLS + 1];
	cJSON *st = cJSON_Parse(json);

	assert_non_null(st);
	stackctl_get_row(st, NOW, with_ns, b, cells);
	/* the cells point into st: copy the strings the test looks at */
	static char name[64];
	snprintf(name, sizeof(name), "%s", cells[with_ns] ? cells[with_ns] : "(null)");
	cells[with_ns] = name;
	if (with_ns) {
		static char ns[64];
		snprintf(ns, sizeof(ns), "%s", cells[0] ? cells[0] : "(null)");
		cells[0] = ns;
	}
	cJSON_Delete(st);
	return cells;
}

static void get_row_of_a_ready_stack(void **state)
{
	struct stackctl_row_buf b;
	const char *const *c = row_of(
	    "{\"metadata\": {\"name\": \"infra\", \"namespace\": \"apps\", \"generation\": 2,"
	    "  \"creationTimestamp\": \"2026-11-29T12:00:00Z\"},"
	    " \"spec\": {\"suspend\": true},"
	    " \"status\": {\"observedGeneration\": 2, \"lastAppliedRevision\": \"main@sha1:3f2a\","
	    "  \"conditions\": [{\"type\": \"Reconciling\", \"status\": \"True\"},"
	    "                  {\"type\": \"Ready\", \"status\": \"True\", \"message\": \"applied\"}],"
	    "  \"lastUpdate\": {\"type\": \"up\", \"state\": \"succeeded\", \"endTime\": \"2026-12-01T11:57:00Z\"}}}",
	    1, &b);

	(void)state;
	assert_string_equal(c[0], "apps");
	assert_string_equal(c[1], "infra");
	assert_string_equal(c[2], "True");
	assert_string_equal(c[3], "main@sha1:3f2a");
	assert_string_equal(c[4], "True");
	assert_string_equal(c[5], "up succeeded 3m ago");
	assert_string_equal(c[6], "2d");
	assert_string_equal(c[7], "applied");
}

static void get_row_of_a_running_and_an_unobserved_stack(void **state)
{
	struct stackctl_row_buf b;
	const char *const *c = row_of(
	    "{\"metadata\": {\"name\": \"x\", \"generation\": 5},"
	    " \"status\": {\"observedGeneration\": 4, \"currentUpdate\": {\"startTime\": \"2026-12-01T11:59:48Z\"},"
	    "  \"conditions\": [{\"type\": \"Ready\", \"status\": \"True\", \"message\": \"old\"}]}}",
	    0, &b);

	(void)state;
	assert_string_equal(c[1], "Unknown");     /* the condition is of generation 4 */
	assert_string_equal(c[4], "running for 12s");
	assert_string_equal(c[6], "generation 5 not reconciled yet (status is of 4)");
}

static void get_row_of_hostile_stacks_reads_absent(void **state)
{
	static const char *const hostile[] = {
		"{}",
		"{\"metadata\": 7, \"spec\": [], \"status\": \"broken\"}",
		("{\"metadata\": {\"name\": 5, \"generation\": \"2\", \"creationTimestamp\": 12},"
		" \"spec\": {\"suspend\": \"true\"},"
		" \"status\": {\"conditions\": {\"type\": \"Ready\"}, \"lastUpdate\": [], \"currentUpdate\": 3,"
		"  \"lastAppliedRevision\": {\"x\": 1}, \"observedGeneration\": 1e308}}"),
		("{\"status\": {\"conditions\": [null, 3, {\"type\": 1}, {\"type\": \"Ready\", \"status\": 1,"
		"  \"message\": [\"x\"]}], \"lastUpdate\": {\"type\": 3, \"state\": null, \"endTime\": \"nope\"}}}"),
	};
	struct stackctl_row_buf b;

	(void)state;
	for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
		const char *const *c = row_of(hostile[i], 0, &b);
		assert_string_equal(c[0], "(null)");      /* no name: the table prints "-" */
		assert_string_equal(c[1], "Unknown");
		assert_string_equal(c[3], "False");       /* the string "true" is not true */
		assert_string_equal(c[5], "-");
	}
}

static void stack_names_on_the_command_line(void **state)
{
	struct stackctl_ref r;
	struct err e;

	(void)state;
	assert_int_equal(stackctl_parse_ref("apps/infra-dev", NULL, &r, &e), 0);
	assert_string_equal(r.ns, "apps");
	assert_string_equal(r.name, "infra-dev");
	assert_int_equal(stackctl_parse_ref("infra.v2", "apps", &r, &e), 0);
	assert_string_equal(r.ns, "apps");
	assert_int_equal(stackctl_parse_ref("infra", NULL, &r, &e), 0);
	assert_string_equal(r.ns, "");                /* the context's, once connected */
	assert_int_equal(stackctl_parse_ref("apps/infra", "apps", &r, &e), 0);

	assert_int_equal(stackctl_parse_ref("apps/infra", "other", &r, &e), -1);
	assert_non_null(strstr(e.msg, "--namespace says other"));
	assert_int_equal(stackctl_parse_ref("a/b/c", NULL, &r, &e), -1);
	assert_int_equal(stackctl_parse_ref("/x", NULL, &r, &e), -1);
	assert_int_equal(stackctl_parse_ref("x/", NULL, &r, &e), -1);
	assert_int_equal(stackctl_parse_ref("Infra", NULL, &r, &e), -1);
	assert_int_equal(stackctl_parse_ref("a.b/x", NULL, &r, &e), -1);   /* a namespace has no dots */
	assert_int_equal(stackctl_parse_ref("x?watch=1", NULL, &r, &e), -1);
	assert_int_equal(stackctl_parse_ref("..", NULL, &r, &e), -1);
	assert_int_equal(stackctl_parse_ref("", NULL, &r, &e), -1);
	{
		char longname[300];
		memset(longname, 'a', 254);
		longname[254] = '\0';
		assert_int_equal(stackctl_parse_ref(longname, NULL, &r, &e), -1);
		longname[253] = '\0';
		assert_int_equal(stackctl_parse_ref(longname, NULL, &r, &e), 0);
	}
}

static char *doc_of(const char *json, enum stackctl_output fmt)
{
	cJSON *obj = cJSON_Parse(json);
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	struct err e;

	assert_non_null(obj);
	assert_int_equal(stackctl_print_doc(obj, fmt, f, &e), 0);
	fclose(f);
	cJSON_Delete(obj);
	return text;
}

static void json_in_kubectls_layout(void **state)
{
	char *out = doc_of("{\"a\": {\"b\": [1, \"x\\n\", {}], \"c\": []}, \"d\": true}", STACKCTL_OUT_JSON);

	(void)state;
	assert_string_equal(out,
	    "{\n"
	    "    \"a\": {\n"
	    "        \"b\": [\n"
	    "            1,\n"
	    "            \"x\\n\",\n"
	    "            {}\n"
	    "        ],\n"
	    "        \"c\": []\n"
	    "    },\n"
	    "    \"d\": true\n"
	    "}\n");
	free(out);
}

static void yaml_quotes_what_would_change_type(void **state)
{
	char *out = doc_of(
	    "{\"plain\": \"hello\", \"t\": \"true\", \"Yes\": \"Yes\", \"n\": \"null\", \"num\": \"42\","
	    " \"neg\": \"-1.5\", \"time\": \"2026-12-01T10:00:00Z\", \"empty\": \"\", \"real\": 42,"
	    " \"frac\": 0.5, \"huge\": 1e300, \"bool\": false, \"nil\": null, \"multi\": \"a\\nb\", \"list\": [\"x\", 1],"
	    " \"none\": {}, \"colon\": \"a: b\", \"dash\": \"- x\"}", STACKCTL_OUT_YAML);

	(void)state;
	assert_string_equal(out,
	    "plain: hello\n"
	    "t: 'true'\n"
	    "'Yes': 'Yes'\n"
	    "'n': 'null'\n"          /* YAML 1.1 reads a plain n as false */
	    "num: '42'\n"
	    "neg: '-1.5'\n"
	    "time: '2026-12-01T10:00:00Z'\n"
	    "empty: ''\n"
	    "real: 42\n"
	    "frac: 0.5\n"
	    "huge: 1.0e+300\n"       /* 1e+300 would read back as a string */
	    "bool: false\n"
	    "nil: null\n"
	    "multi: \"a\\nb\"\n"
	    "list:\n"
	    "- x\n"
	    "- 1\n"
	    "none: {}\n"
	    "colon: 'a: b'\n"
	    "dash: '- x'\n");
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(human_durations_follow_kubectl),
		cmocka_unit_test(ages_of_timestamps),
		cmocka_unit_test(table_pads_to_the_widest_cell),
		cmocka_unit_test(table_escapes_control_characters_and_counts_utf8),
		cmocka_unit_test(changes_are_sorted_and_typed),
		cmocka_unit_test(get_row_of_a_ready_stack),
		cmocka_unit_test(get_row_of_a_running_and_an_unobserved_stack),
		cmocka_unit_test(get_row_of_hostile_stacks_reads_absent),
		cmocka_unit_test(stack_names_on_the_command_line),
		cmocka_unit_test(json_in_kubectls_layout),
		cmocka_unit_test(yaml_quotes_what_would_change_type),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
