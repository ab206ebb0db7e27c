/*
 * test_log.c - every log record is one line: text-format values with
 * newlines, quotes or backslashes are escaped (server messages go there);
 * a thread's context fields (a reconcile's namespace, name, id) are on
 * every record of that thread, once, and never on another thread's.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/log.h"

/* Renders one info record in `format` and returns it (static buffer). */
static const char *record(enum log_format format, const char *msg, const char *value)
{
	static char out[4096];
	FILE *f = fmemopen(out, sizeof(out), "w");

	assert_non_null(f);
	log_setup(LOG_INFO, format, f);
	log_info(msg, "error", value, NULL);
	fclose(f);
	log_setup(LOG_INFO, LOG_JSON, stderr);
	return out;
}

static size_t lines(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

static void text_values_stay_on_one_line(void **state)
{
	const char *r = record(LOG_TEXT, "sync failed", "line one\nfake=\"record\"\r\\end");
	(void)state;

	assert_int_equal(lines(r), 1);
	assert_non_null(strstr(r, "error=\"line one\\nfake=\\\"record\\\"\\r\\\\end\""));
}

static void text_messages_are_escaped_too(void **state)
{
	const char *r = record(LOG_TEXT, "from the server:\nlevel=error", "x");
	(void)state;

	assert_int_equal(lines(r), 1);
	assert_non_null(strstr(r, "from the server:\\nlevel=error"));
}

static void plain_values_stay_unquoted(void **state)
{
	const char *r = record(LOG_TEXT, "ok", "sha256:abc");
	(void)state;

	assert_non_null(strstr(r, " error=sha256:abc\n"));
}

static void json_records_are_one_line(void **state)
{
	const char *r = record(LOG_JSON, "m", "a\nb\"c");
	(void)state;

	assert_int_equal(lines(r), 1);
	assert_non_null(strstr(r, "\"error\":\"a\\nb\\\"c\""));
}

static void *other_thread(void *arg)
{
	log_info("from another thread", NULL);
	(void)arg;
	return NULL;
}

static void context_fields_go_on_every_record_of_the_thread(void **state)
{
	static char out[4096];
	FILE *f = fmemopen(out, sizeof(out), "w");
	pthread_t t;
	(void)state;

	assert_non_null(f);
	log_setup(LOG_INFO, LOG_JSON, f);
	log_context_set("namespace", "ns");
	log_context_set("reconcileID", "id-1");
	log_context_set("reconcileID", "id-2");          /* replaced, not repeated */
	log_info("one", "revision", "main@sha1:ab", NULL);
	log_info("two", "namespace", "explicit", NULL);  /* the record's own value wins */
	pthread_create(&t, NULL, other_thread, NULL);
	pthread_join(t, NULL);
	log_context_clear();
	log_info("three", NULL);
	fclose(f);
	log_setup(LOG_INFO, LOG_JSON, stderr);
	assert_non_null(strstr(out, "\"msg\":\"one\",\"namespace\":\"ns\",\"reconcileID\":\"id-2\","
	    "\"revision\":\"main@sha1:ab\"}\n"));
	assert_non_null(strstr(out, "\"msg\":\"two\",\"reconcileID\":\"id-2\",\"namespace\":\"explicit\"}\n"));
	assert_non_null(strstr(out, "\"msg\":\"from another thread\"}\n"));
	assert_non_null(strstr(out, "\"msg\":\"three\"}\n"));
	assert_null(strstr(out, "id-1"));
	/* --log-format text: the same fields, key=value */
	f = fmemopen(out, sizeof(out), "w");
	assert_non_null(f);
	log_setup(LOG_INFO, LOG_TEXT, f);
	log_context_set("name", "web app");
	log_info("four", "revision", "v1", NULL);
	log_context_clear();
	fclose(f);
	log_setup(LOG_INFO, LOG_JSON, stderr);
	assert_non_null(strstr(out, "info  four name=\"web app\" revision=v1\n"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(text_values_stay_on_one_line),
		cmocka_unit_test(context_fields_go_on_every_record_of_the_thread),
		cmocka_unit_test(text_messages_are_escaped_too),
		cmocka_unit_test(plain_values_stay_unquoted),
		cmocka_unit_test(json_records_are_one_line),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
