/*
 * test_stack_metrics.c - the Stack controller's metrics (stack_metrics.c):
 * refusals are counted by the rule the extractor's own message names (real
 * messages from untar and the limits, so a reworded message that no longer
 * matches fails here, not silently as "other"); a reconcile is counted by
 * result and reason and records the Stack's gotk_reconcile_duration_seconds
 * series, which a deleted Stack loses.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/metrics.h"
#include "base/untar.h"
#include "stack/stack_machine.h"

static const char *rule_of_name(const char *name)
{
	struct err e;

	assert_int_equal(untar_check_name(name, &e), -1);
	return stack_refusal_rule(&e);
}

static const char *rule_of(int code, const char *msg)
{
	struct err e;

	err_set(&e, code, "%s", msg);
	return stack_refusal_rule(&e);
}

static void refusals_are_counted_by_rule(void **state)
{
	(void)state;
	assert_string_equal(rule_of_name("a/../b"), "path");
	assert_string_equal(rule_of_name("/etc/passwd"), "path");
	assert_string_equal(rule_of_name(""), "path");
	/* the texts docs/unpack.md lists, after `archive entry "<name>": ` */
	assert_string_equal(rule_of(ERR_REFUSED, "archive entry \"up\": refused: symlink target \"../outside\" "
	    "resolves outside the root"), "symlink");
	assert_string_equal(rule_of(ERR_REFUSED, "archive entry \"l\": refused: absolute symlink target \"/etc\""),
	    "symlink");
	assert_string_equal(rule_of(ERR_REFUSED, "archive entry \"a/b\": refused: writing through a symlink "
	    "(\"a\" is a symlink)"), "symlink");
	assert_string_equal(rule_of(ERR_REFUSED, "archive entry \"h\": refused: hardlink target \"x\" is not an "
	    "earlier regular file"), "hardlink");
	assert_string_equal(rule_of(ERR_REFUSED, "archive entry \"d\": refused: device node"), "entry_type");
	assert_string_equal(rule_of(ERR_REFUSED, "archive entry \"f\": refused: FIFO"), "entry_type");
	assert_string_equal(rule_of(ERR_REFUSED, "archive entry \"x\": refused: replaces a regular file with a "
	    "symlink"), "replace");
	assert_string_equal(rule_of(ERR_REFUSED, "archive entry \"f/x\": refused: parent \"f\" is a regular file, "
	    "not a directory"), "replace");
	assert_string_equal(rule_of(ERR_LIMIT, "archive entry \"big\": exceeds the limit of 100 bytes in total"),
	    "size_limit");
	assert_string_equal(rule_of(ERR_LIMIT, "archive entry \"n\": exceeds the limit of 10 entries"),
	    "entries_limit");
	assert_string_equal(rule_of(ERR_LIMIT, "GET http://h/a.tar.gz: response body larger than the limit of "
	    "5 bytes"), "download_size");
	assert_string_equal(rule_of(ERR_LIMIT, "layer sha256:ab: 9 bytes, over the download limit of 5"),
	    "download_size");
	assert_string_equal(rule_of(ERR_LIMIT, "more than 1048576 bytes after the end of the archive"),
	    "trailing_data");
	assert_string_equal(rule_of(ERR_UNSUPPORTED, "refused: archive format ZIP 2.0 is not accepted"), "format");
	assert_string_equal(rule_of(ERR_UNSUPPORTED, "refused: nested compression is not accepted"), "format");
	assert_string_equal(rule_of(ERR_REFUSED, "something new"), "other");
}

/* The value of a default-registry series of the family called name. */
static double value_of(const char *name, enum metric_type type, const char *const *values)
{
	struct metric_desc d = { name, "", type, { NULL }, NULL, 0, 0, NULL };

	return metric_value(metrics_family(metrics_default(), &d), values);
}

static void reconciles_are_counted_and_deleted_stacks_forgotten(void **state)
{
	(void)state;
	struct stack_pass p;
	const char *web[] = { "Stack", "web", "apps" };

	stack_metrics_init();
	memset(&p, 0, sizeof(p));
	snprintf(p.ns, sizeof(p.ns), "apps");
	snprintf(p.name, sizeof(p.name), "web");
	p.v.set = 1;
	p.v.state = STACK_STALLED;
	p.v.reason = "ArtifactRefused";
	stack_metrics_reconciled(&p, 0, 0.2);
	p.v.state = STACK_READY;
	p.v.reason = "Succeeded";
	stack_metrics_reconciled(&p, 0, 0.3);
	stack_metrics_reconciled(&p, -1, 0.01);   /* undecided: an error, no reason */
	assert_true(value_of("pulumi_controller_reconcile_total", METRIC_COUNTER,
	    (const char *[]){ "stalled", "ArtifactRefused" }) == 1);
	assert_true(value_of("pulumi_controller_reconcile_total", METRIC_COUNTER,
	    (const char *[]){ "ready", "Succeeded" }) == 1);
	assert_true(value_of("pulumi_controller_reconcile_total", METRIC_COUNTER,
	    (const char *[]){ "error", "" }) == 1);
	assert_true(value_of("gotk_reconcile_duration_seconds", METRIC_HISTOGRAM, web) == 3);
	/* The finalizer released: the pass ends gone, the series goes. */
	p.gone = 1;
	stack_metrics_reconciled(&p, 0, 0.1);
	assert_true(value_of("gotk_reconcile_duration_seconds", METRIC_HISTOGRAM, web) == -1);
	assert_true(value_of("pulumi_controller_reconcile_total", METRIC_COUNTER,
	    (const char *[]){ "deleted", "" }) == 1);
	/* Operations in flight go up and down; their durations land by result. */
	stack_metrics_operation_start("up");
	assert_true(value_of("pulumi_controller_pulumi_operations_in_flight", METRIC_GAUGE,
	    (const char *[]){ "up" }) == 1);
	stack_metrics_operation_end("up", PL_CONFLICT, 2);
	assert_true(value_of("pulumi_controller_pulumi_operations_in_flight", METRIC_GAUGE,
	    (const char *[]){ "up" }) == 0);
	assert_true(value_of("pulumi_controller_pulumi_operation_duration_seconds", METRIC_HISTOGRAM,
	    (const char *[]){ "up", "conflict" }) == 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(refusals_are_counted_by_rule),
		cmocka_unit_test(reconciles_are_counted_and_deleted_stacks_forgotten),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
