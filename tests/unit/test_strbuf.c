/*
 * test_strbuf.c - the generic helpers in src/base/ that the kube runtime
 * builds on: strbuf (appending, printf, query encoding, take) and strmap
 * (put, replace, get, delete, growth, iteration, free with values).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/strbuf.h"
#include "base/strmap.h"
#include "base/xalloc.h"

static void strbuf_builds_a_string(void **state)
{
	struct strbuf s;
	char *out;
	(void)state;

	strbuf_init(&s);
	strbuf_add(&s, "/api/");
	strbuf_addn(&s, "v1xyz", 2);
	for (int i = 0; i < 100; i++)   /* past the first growth steps */
		strbuf_printf(&s, "/%d", i);
	assert_int_equal(s.len, strlen(s.buf));
	out = strbuf_take(&s);
	assert_non_null(strstr(out, "/api/v1/0/1/2/"));
	assert_non_null(strstr(out, "/98/99"));
	assert_null(s.buf);
	free(out);
}

static void strbuf_take_of_nothing_is_empty(void **state)
{
	struct strbuf s;
	char *out;
	(void)state;

	strbuf_init(&s);
	out = strbuf_take(&s);
	assert_string_equal(out, "");
	free(out);
	strbuf_free(&s);
}

/* The query encoder keeps exactly RFC 3986's unreserved characters, as the
 * hand-written one it replaced did: selectors and continue tokens arrive
 * at the server byte for byte. */
static void strbuf_query_value_is_percent_encoded(void **state)
{
	struct strbuf s;
	(void)state;

	strbuf_init(&s);
	strbuf_add_query_value(&s, "app in (a,b)&x=1/2+3~_.-\xc3\xa9%");
	assert_string_equal(s.buf, "app%20in%20%28a%2Cb%29%26x%3D1%2F2%2B3~_.-%C3%A9%25");
	strbuf_free(&s);
}

static void count_entry(void *ud, const char *key, void *value)
{
	(void)key;
	(void)value;
	(*(int *)ud)++;
}

static void strmap_puts_gets_and_deletes(void **state)
{
	struct strmap m;
	char key[32];
	int seen = 0;
	(void)state;

	strmap_init(&m);
	assert_null(strmap_get(&m, "absent"));
	for (long i = 0; i < 1000; i++) {   /* through several rehashes */
		snprintf(key, sizeof(key), "ns/obj-%ld", i);
		assert_null(strmap_put(&m, key, xstrdup(key)));
	}
	assert_int_equal(m.count, 1000);
	assert_string_equal(strmap_get(&m, "ns/obj-737"), "ns/obj-737");
	free(strmap_put(&m, "ns/obj-737", xstrdup("replaced")));
	assert_string_equal(strmap_get(&m, "ns/obj-737"), "replaced");
	free(strmap_del(&m, "ns/obj-1"));
	assert_null(strmap_get(&m, "ns/obj-1"));
	assert_null(strmap_del(&m, "ns/obj-1"));
	strmap_each(&m, count_entry, &seen);
	assert_int_equal(seen, 999);
	strmap_free(&m, free);   /* ASan reports any value not freed */
	assert_int_equal(m.count, 0);
	assert_null(strmap_get(&m, "ns/obj-2"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(strbuf_builds_a_string),
		cmocka_unit_test(strbuf_take_of_nothing_is_empty),
		cmocka_unit_test(strbuf_query_value_is_percent_encoded),
		cmocka_unit_test(strmap_puts_gets_and_deletes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
