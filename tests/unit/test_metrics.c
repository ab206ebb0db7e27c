/*
 * test_metrics.c - the metrics module (base/metrics.h): histogram
 * bucketing (bounds inclusive, +Inf, sum and count), counters that only
 * grow, label escaping and value formatting as Prometheus's text format
 * wants them, series deletion by label, the cardinality bound, and
 * concurrent updates while another thread writes the exposition (run under
 * ASan/UBSan; the totals must come out exact).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/metrics.h"

/* The exposition of r, malloc'd. */
static char *render(struct metrics_registry *r)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	metrics_write(r, f);
	fclose(f);
	return buf;
}

static const double BOUNDS[] = { 0.5, 1, 2.5 };

static void histogram_buckets_are_cumulative_and_inclusive(void **state)
{
	(void)state;
	struct metrics_registry *r = metrics_registry_new();
	struct metric_desc d = { "t_seconds", "A histogram.", METRIC_HISTOGRAM, { "op" }, BOUNDS, 3, 0, NULL };
	struct metric *m = metrics_family(r, &d);
	const char *up[] = { "up" };
	char *text;

	metric_observe(m, up, 0.1);
	metric_observe(m, up, 0.5);     /* le is inclusive */
	metric_observe(m, up, 0.75);
	metric_observe(m, up, 3);       /* only +Inf */
	text = render(r);
	assert_non_null(strstr(text, "# HELP t_seconds A histogram.\n# TYPE t_seconds histogram\n"));
	assert_non_null(strstr(text, "t_seconds_bucket{op=\"up\",le=\"0.5\"} 2\n"));
	assert_non_null(strstr(text, "t_seconds_bucket{op=\"up\",le=\"1\"} 3\n"));
	assert_non_null(strstr(text, "t_seconds_bucket{op=\"up\",le=\"2.5\"} 3\n"));
	assert_non_null(strstr(text, "t_seconds_bucket{op=\"up\",le=\"+Inf\"} 4\n"));
	assert_non_null(strstr(text, "t_seconds_sum{op=\"up\"} 4.35\n"));
	assert_non_null(strstr(text, "t_seconds_count{op=\"up\"} 4\n"));
	assert_int_equal((int)metric_value(m, up), 4);
	free(text);
	metrics_registry_free(r);
}

static void counters_only_grow_and_gauges_set(void **state)
{
	(void)state;
	struct metrics_registry *r = metrics_registry_new();
	struct metric_desc c = { "c_total", "Counter.", METRIC_COUNTER, { NULL }, NULL, 0, 0, NULL };
	struct metric_desc g = { "g", "Gauge.", METRIC_GAUGE, { "k" }, NULL, 0, 0, NULL };
	struct metric *mc = metrics_family(r, &c), *mg = metrics_family(r, &g);
	const char *a[] = { "a" };
	char *text;

	text = render(r);
	assert_non_null(strstr(text, "c_total 0\n"));   /* no labels: there from the start */
	assert_null(strstr(text, "g{"));                 /* labelled: only once used */
	free(text);
	metric_add(mc, NULL, 2);
	metric_add(mc, NULL, -5);                        /* ignored */
	metric_set(mg, a, 7);
	metric_add(mg, a, -2);
	metric_observe(mc, NULL, 1);                     /* wrong type: ignored */
	assert_true(metric_value(mc, NULL) == 2);
	assert_true(metric_value(mg, a) == 5);
	assert_true(metric_value(mg, (const char *[]){ "missing" }) == -1);
	/* The same name again is the same family. */
	assert_ptr_equal(metrics_family(r, &c), mc);
	metrics_registry_free(r);
}

static void labels_are_escaped_and_values_formatted(void **state)
{
	(void)state;
	struct metrics_registry *r = metrics_registry_new();
	struct metric_desc d = { "e", "Back\\slash\nnewline.", METRIC_GAUGE, { "v" }, NULL, 0, 0, NULL };
	struct metric *m = metrics_family(r, &d);
	char buf[64], *text;

	metric_set(m, (const char *[]){ "a\"b\\c\nd" }, 1e6);
	text = render(r);
	assert_non_null(strstr(text, "# HELP e Back\\\\slash\\nnewline.\n"));
	assert_non_null(strstr(text, "e{v=\"a\\\"b\\\\c\\nd\"} 1e+06\n"));
	free(text);
	assert_string_equal(metrics_format_value(0.1, buf, sizeof(buf)), "0.1");
	assert_string_equal(metrics_format_value(1, buf, sizeof(buf)), "1");
	assert_string_equal(metrics_format_value(9.999999999999999e-06, buf, sizeof(buf)), "9.999999999999999e-06");
	assert_string_equal(metrics_format_value(1799.9999999999986, buf, sizeof(buf)), "1799.9999999999986");
	assert_string_equal(metrics_format_value(1.0 / 0.0, buf, sizeof(buf)), "+Inf");
	/* Go's choices between the plain and the exponent form */
	assert_string_equal(metrics_format_value(14410284, buf, sizeof(buf)), "1.4410284e+07");
	assert_string_equal(metrics_format_value(123456, buf, sizeof(buf)), "123456");
	assert_string_equal(metrics_format_value(0.0001, buf, sizeof(buf)), "0.0001");
	assert_string_equal(metrics_format_value(2.5e-5, buf, sizeof(buf)), "2.5e-05");
	assert_string_equal(metrics_format_value(1e-08, buf, sizeof(buf)), "1e-08");
	assert_string_equal(metrics_format_value(4.35, buf, sizeof(buf)), "4.35");
	assert_string_equal(metrics_format_value(-1234567.5, buf, sizeof(buf)), "-1.2345675e+06");
	assert_string_equal(metrics_format_value(0, buf, sizeof(buf)), "0");
	/* Cut, never inside an escape. */
	assert_string_equal(metrics_escape_label("ab\"", buf, 4), "ab");
	metrics_registry_free(r);
}

static void delete_removes_matching_series_only(void **state)
{
	(void)state;
	struct metrics_registry *r = metrics_registry_new();
	struct metric_desc d = { "d_seconds", "D.", METRIC_HISTOGRAM, { "kind", "name", "namespace" }, BOUNDS, 3, 0,
		NULL };
	struct metric *m = metrics_family(r, &d);
	const char *web[] = { "Stack", "web", "ns" }, *web2[] = { "Stack", "web", "other" },
	    *db[] = { "Stack", "db", "ns" };
	char *text;

	metric_observe(m, web, 1);
	metric_observe(m, web2, 1);
	metric_observe(m, db, 1);
	assert_int_equal(metric_delete(m, 2, "namespace", "ns", "name", "web"), 1);
	assert_true(metric_value(m, web) == -1);
	assert_true(metric_value(m, web2) == 1);
	text = render(r);
	assert_null(strstr(text, "name=\"web\",namespace=\"ns\""));
	assert_non_null(strstr(text, "name=\"db\",namespace=\"ns\""));
	free(text);
	assert_int_equal(metric_delete(m, 1, "namespace", "ns"), 1);
	assert_int_equal(metric_delete(m, 1, "nolabel", "x"), 0);
	metrics_registry_free(r);
}

static void series_are_bounded(void **state)
{
	(void)state;
	struct metrics_registry *r = metrics_registry_new();
	struct metric_desc d = { "b_total", "B.", METRIC_COUNTER, { "k" }, NULL, 0, 2, NULL };
	struct metric *m = metrics_family(r, &d);
	char *text;

	metric_add(m, (const char *[]){ "1" }, 1);
	metric_add(m, (const char *[]){ "2" }, 1);
	metric_add(m, (const char *[]){ "3" }, 1);    /* dropped */
	metric_add(m, (const char *[]){ "1" }, 1);    /* existing: fine */
	assert_true(metric_value(m, (const char *[]){ "3" }) == -1);
	assert_true(metric_value(m, (const char *[]){ "1" }) == 2);
	text = render(r);
	assert_non_null(strstr(text, "pulumi_controller_metric_series_dropped_total{metric=\"b_total\"} 1\n"));
	free(text);
	/* A deleted series makes room. */
	metric_delete(m, 1, "k", "2");
	metric_add(m, (const char *[]){ "3" }, 1);
	assert_true(metric_value(m, (const char *[]){ "3" }) == 1);
	metrics_registry_free(r);
}

/* ------------------------------------------------------------ concurrency */

#define THREADS 4
#define ROUNDS 20000

struct stress {
	struct metric *c, *h;
	int id;
};

static void *updater(void *arg)
{
	struct stress *s = arg;
	char name[16];

	snprintf(name, sizeof(name), "s%d", s->id % 2);
	for (int i = 0; i < ROUNDS; i++) {
		const char *v[] = { name };
		metric_add(s->c, v, 1);
		metric_observe(s->h, v, (double)(i % 4));
		if (i % 1000 == 0)
			metric_delete(s->h, 1, "op", "gone");   /* deletion under load */
	}
	return NULL;
}

static void *scraper(void *arg)
{
	struct metrics_registry *r = arg;

	for (int i = 0; i < 200; i++)
		free(render(r));
	return NULL;
}

static void concurrent_updates_and_scrapes_add_up(void **state)
{
	(void)state;
	struct metrics_registry *r = metrics_registry_new();
	struct metric_desc c = { "s_total", "S.", METRIC_COUNTER, { "op" }, NULL, 0, 0, NULL };
	struct metric_desc h = { "s_seconds", "S.", METRIC_HISTOGRAM, { "op" }, BOUNDS, 3, 0, NULL };
	struct stress s[THREADS];
	pthread_t t[THREADS], scr;

	pthread_create(&scr, NULL, scraper, r);
	for (int i = 0; i < THREADS; i++) {
		s[i] = (struct stress){ metrics_family(r, &c), metrics_family(r, &h), i };
		pthread_create(&t[i], NULL, updater, &s[i]);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	pthread_join(scr, NULL);
	assert_true(metric_value(s[0].c, (const char *[]){ "s0" }) == 2.0 * ROUNDS);
	assert_true(metric_value(s[0].h, (const char *[]){ "s1" }) == 2.0 * ROUNDS);
	{
		char *text = render(r);
		char want[128];
		/* two threads x ROUNDS values 0..3 in turn: half are <= 1 */
		snprintf(want, sizeof(want), "s_seconds_bucket{op=\"s0\",le=\"1\"} %d\n", ROUNDS);
		assert_non_null(strstr(text, want));
		free(text);
	}
	metrics_registry_free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(histogram_buckets_are_cumulative_and_inclusive),
		cmocka_unit_test(counters_only_grow_and_gauges_set),
		cmocka_unit_test(labels_are_escaped_and_values_formatted),
		cmocka_unit_test(delete_removes_matching_series_only),
		cmocka_unit_test(series_are_bounded),
		cmocka_unit_test(concurrent_updates_and_scrapes_add_up),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
