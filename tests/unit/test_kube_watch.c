/*
 * test_kube_watch.c - the watch stream: lines split correctly however the
 * bytes are cut into callbacks (every split point of a multi-event body),
 * CRLF and blank lines, the line-length limit, event decoding (types,
 * bookmarks, ERROR Status events, malformed events) and object stripping.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kube/kube.h"

struct collected {
	char lines[16][256];
	int n;
	int fail_at;               /* return -1 on this line (1-based), 0 = never */
};

static int collect(void *ud, char *line, size_t len, struct err *e)
{
	struct collected *c = ud;

	assert_int_equal(strlen(line), len);
	if (c->n < 16)
		snprintf(c->lines[c->n], sizeof(c->lines[0]), "%s", line);
	c->n++;
	if (c->fail_at == c->n)
		return err_set(e, ERR_INVALID, "stop");
	return 0;
}

static const char body[] =
    "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"1\"}}}\n"
    "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"2\"}}}\n"
    "\n"
    "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"7\"}}}\r\n";

static void splits_at_every_point(void **state)
{
	(void)state;
	size_t n = strlen(body);

	for (size_t a = 0; a <= n; a++) {
		for (size_t b = a; b <= n; b += 7) {
			struct kube_lines l;
			struct collected c = { .n = 0 };
			struct err e;
			kube_lines_init(&l, 4096);
			assert_int_equal(kube_lines_feed(&l, body, a, collect, &c, &e), 0);
			assert_int_equal(kube_lines_feed(&l, body + a, b - a, collect, &c, &e), 0);
			assert_int_equal(kube_lines_feed(&l, body + b, n - b, collect, &c, &e), 0);
			assert_int_equal(c.n, 3);
			assert_non_null(strstr(c.lines[0], "\"ADDED\""));
			assert_non_null(strstr(c.lines[1], "\"MODIFIED\""));
			assert_true(c.lines[2][strlen(c.lines[2]) - 1] == '}');   /* \r dropped */
			assert_int_equal(l.len, 0);
			kube_lines_free(&l);
		}
	}
}

static void byte_at_a_time_and_partial_tail(void **state)
{
	(void)state;
	struct kube_lines l;
	struct collected c = { .n = 0 };
	struct err e;
	const char *s = "one\ntwo\nthr";

	kube_lines_init(&l, 64);
	for (size_t i = 0; i < strlen(s); i++)
		assert_int_equal(kube_lines_feed(&l, s + i, 1, collect, &c, &e), 0);
	assert_int_equal(c.n, 2);
	assert_string_equal(c.lines[1], "two");
	assert_int_equal(l.len, 3);   /* "thr" waits for its newline */
	assert_int_equal(kube_lines_feed(&l, "ee\n", 3, collect, &c, &e), 0);
	assert_string_equal(c.lines[2], "three");
	kube_lines_free(&l);
}

static void long_lines_are_refused(void **state)
{
	(void)state;
	struct kube_lines l;
	struct collected c = { .n = 0 };
	struct err e;
	char big[100];

	memset(big, 'x', sizeof(big));
	kube_lines_init(&l, 50);
	/* spread over callbacks, with no newline */
	assert_int_equal(kube_lines_feed(&l, big, 40, collect, &c, &e), 0);
	assert_int_equal(kube_lines_feed(&l, big, 40, collect, &c, &e), -1);
	assert_int_equal(e.code, ERR_LIMIT);
	kube_lines_free(&l);
	/* in one callback, with a newline */
	kube_lines_init(&l, 50);
	big[99] = '\n';
	assert_int_equal(kube_lines_feed(&l, big, 100, collect, &c, &e), -1);
	assert_int_equal(c.n, 0);
	kube_lines_free(&l);
}

static void callback_failure_stops(void **state)
{
	(void)state;
	struct kube_lines l;
	struct collected c = { .n = 0, .fail_at = 1 };
	struct err e;

	kube_lines_init(&l, 64);
	assert_int_equal(kube_lines_feed(&l, "a\nb\n", 4, collect, &c, &e), -1);
	assert_int_equal(c.n, 1);
	assert_string_equal(e.msg, "stop");
	kube_lines_free(&l);
}

static void parse(const char *line, struct kube_watch_event *ev)
{
	struct err e;
	if (kube_watch_event_parse(line, strlen(line), ev, &e) < 0)
		fail_msg("%s: %s", line, e.msg);
}

static void parse_fails(const char *line, const char *why)
{
	struct kube_watch_event ev;
	struct err e;

	assert_int_equal(kube_watch_event_parse(line, strlen(line), &ev, &e), -1);
	assert_null(ev.object);
	if (strstr(e.msg, why) == NULL)
		fail_msg("\"%s\" lacks \"%s\"", e.msg, why);
}

static void decodes_events(void **state)
{
	(void)state;
	struct kube_watch_event ev;

	parse("{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"Stack\",\"metadata\":{\"name\":\"s\",\"namespace\":\"n\",\"resourceVersion\":\"42\"}}}", &ev);
	assert_int_equal(ev.type, KUBE_MODIFIED);
	assert_string_equal(ev.resource_version, "42");
	assert_string_equal(kube_obj_str(ev.object, "metadata.namespace"), "n");
	kube_watch_event_clear(&ev);

	parse("{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Stack\",\"apiVersion\":\"pulumi.com/v1\",\"metadata\":{\"resourceVersion\":\"12746\"}}}", &ev);
	assert_int_equal(ev.type, KUBE_BOOKMARK);
	assert_string_equal(ev.resource_version, "12746");
	kube_watch_event_clear(&ev);

	parse("{\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":\"s\",\"resourceVersion\":\"50\"}}}", &ev);
	assert_int_equal(ev.type, KUBE_DELETED);
	kube_watch_event_clear(&ev);

	parse("{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},"
	    "\"status\":\"Failure\",\"message\":\"too old resource version: 123 (456)\",\"reason\":\"Expired\",\"code\":410}}", &ev);
	assert_int_equal(ev.type, KUBE_ERROR);
	assert_int_equal(ev.status.code, 410);
	assert_string_equal(ev.status.reason, "Expired");
	assert_string_equal(ev.status.message, "too old resource version: 123 (456)");
	kube_watch_event_clear(&ev);

	parse_fails("not json", "not a JSON object");
	parse_fails("[1,2]", "not a JSON object");
	parse_fails("{\"type\":\"SURPRISE\",\"object\":{}}", "no known type");
	parse_fails("{\"object\":{}}", "no known type");
	parse_fails("{\"type\":\"ADDED\",\"object\":\"x\"}", "has no object");
	parse_fails("{\"type\":\"ADDED\"}", "has no object");
	parse_fails("{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\"}}}", "resourceVersion");
	parse_fails("{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"resourceVersion\":\"1\"}}}", "metadata.name");
}

static void strips_what_a_controller_never_reads(void **state)
{
	(void)state;
	cJSON *o = cJSON_Parse("{\"metadata\":{\"name\":\"a\",\"managedFields\":[{\"manager\":\"kubectl\"}],"
	    "\"annotations\":{\"kubectl.kubernetes.io/last-applied-configuration\":\"{...}\",\"keep\":\"me\"}},"
	    "\"spec\":{\"managedFields\":1}}");
	char *s;

	kube_strip_object(o);
	s = cJSON_PrintUnformatted(o);
	assert_string_equal(s, "{\"metadata\":{\"name\":\"a\",\"annotations\":{\"keep\":\"me\"}},\"spec\":{\"managedFields\":1}}");
	free(s);
	cJSON_Delete(o);

	o = cJSON_Parse("{\"metadata\":{\"name\":\"a\",\"annotations\":{\"kubectl.kubernetes.io/last-applied-configuration\":\"x\"}}}");
	kube_strip_object(o);
	s = cJSON_PrintUnformatted(o);
	assert_string_equal(s, "{\"metadata\":{\"name\":\"a\"}}");
	free(s);
	cJSON_Delete(o);
}

static void object_keys(void **state)
{
	(void)state;
	cJSON *o = cJSON_Parse("{\"metadata\":{\"name\":\"a\",\"namespace\":\"ns\"}}");
	cJSON *c = cJSON_Parse("{\"metadata\":{\"name\":\"cluster-wide\"}}");
	char *k;

	k = kube_object_key(o);
	assert_string_equal(k, "ns/a");
	free(k);
	k = kube_object_key(c);
	assert_string_equal(k, "cluster-wide");
	free(k);
	assert_null(kube_obj_str(o, "metadata.uid"));
	assert_null(kube_obj_str(o, "metadata.name.deeper"));
	cJSON_Delete(o);
	cJSON_Delete(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(splits_at_every_point),
		cmocka_unit_test(byte_at_a_time_and_partial_tail),
		cmocka_unit_test(long_lines_are_refused),
		cmocka_unit_test(callback_failure_stops),
		cmocka_unit_test(decodes_events),
		cmocka_unit_test(strips_what_a_controller_never_reads),
		cmocka_unit_test(object_keys),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
