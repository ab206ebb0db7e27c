/*
 * test_stack_job_plan.c - approval: Manual in job mode, the pod's side
 * (src/stack/stack_job_plan.c, docs/job-runner.md "Approval"):
 *   - PULUMI_CONTROLLER_UPDATE's planSecret and planId are checked before
 *     anything runs (a plan Job writes only <name>-plan; an id is 32 hex);
 *   - before `up`, the pod refuses a plan whose id is not the approved one
 *     (plan-violation, nothing applied) and applies the one that is.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/fs.h"
#include "stack/stack_machine.h"
#include "stack/stack_pod.h"

#define DIGEST "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define SRC "\"source\": {\"kind\": \"artifact\", \"url\": \"http://sc/a.tar.gz\", \"digest\": \"" DIGEST \
	"\", \"revision\": \"main@sha1:abc\"}"
#define HEAD "{\"v\": 1, \"namespace\": \"apps\", \"name\": \"web\", \"stack\": \"dev\", " SRC ", "

#define PLAN_A "{\"resourcePlans\": {\"urn:a\": {\"goal\": {\"type\": \"t\"}, \"steps\": [\"create\"]}}}"
#define PLAN_B "{\"resourcePlans\": {\"urn:b\": {\"goal\": {\"type\": \"t\"}, \"steps\": [\"create\"]}}}"

static char *refusal(const char *json)
{
	static char msg[512];
	struct err e = { 0 };
	struct stack_run_input *in = stack_run_input_parse(json, &e);

	if (in) {
		stack_run_input_free(in);
		return NULL;
	}
	snprintf(msg, sizeof(msg), "%s", e.msg);
	return msg;
}

static void test_plan_fields_are_checked(void **state)
{
	struct err e = { 0 };
	struct stack_run_input *in;

	(void)state;
	in = stack_run_input_parse(HEAD "\"operation\": \"plan\", \"planSecret\": \"web-plan-result\"}", &e);
	assert_non_null(in);
	assert_string_equal(in->plan_secret, "web-plan-result");
	stack_run_input_free(in);
	in = stack_run_input_parse(HEAD "\"operation\": \"up\", \"planId\": \"0123456789abcdef0123456789abcdef\"}", &e);
	assert_non_null(in);
	assert_string_equal(in->plan_id, "0123456789abcdef0123456789abcdef");
	stack_run_input_free(in);
	/* A plan Job writes the Stack's own plan Secret and no other. */
	assert_non_null(strstr(refusal(HEAD "\"operation\": \"plan\", \"planSecret\": \"db-credentials\"}"),
	    "planSecret must be \"web-plan-result\""));
	assert_non_null(strstr(refusal(HEAD "\"operation\": \"plan\"}"), "planSecret"));
	assert_non_null(strstr(refusal(HEAD "\"operation\": \"up\", \"planId\": \"../x\"}"), "planId must be 32 hex"));
	assert_non_null(strstr(refusal(HEAD "\"operation\": \"apply\"}"), "or plan"));
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_the_pod_applies_only_the_approved_plan(void **state)
{
	char dir[] = "/tmp/test-job-plan-XXXXXX", path[600], id_a[65];
	struct stack_run_opts o = { 0 };
	struct stack_run_input in = { 0 };
	struct stack_pass *p = calloc(1, sizeof(*p));
	int changes = 0;
	char pinned[600], *got = NULL;
	size_t got_len = 0;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/plan.json", dir);
	struct err e;
	assert_int_equal(stack_plan_id(PLAN_A, strlen(PLAN_A), NULL, id_a, &changes, &e), 0);
	in.name = "web";
	in.namespace = "apps";
	in.plan_id = id_a;

	/* No --plan-dir: nothing to apply. */
	assert_int_equal(stack_run_plan_load(p, &in, &o), -1);
	assert_int_equal(p->out.status, PL_INTERNAL);
	o.plan_dir = dir;
	o.work_dir = dir;
	/* Another plan in the Secret: refused as a plan violation. */
	write_file(path, PLAN_B);
	memset(&p->out, 0, sizeof(p->out));
	assert_int_equal(stack_run_plan_load(p, &in, &o), -1);
	assert_false(p->out.ok);
	assert_int_equal(p->out.status, PL_PLAN_VIOLATION);
	assert_non_null(strstr(p->out.message, "not the approved plan"));
	assert_non_null(strstr(p->out.message, id_a));
	assert_string_equal(p->safety.plan_file, "");
	/* Not a plan at all: refused too. */
	write_file(path, "{}");
	assert_int_equal(stack_run_plan_load(p, &in, &o), -1);
	assert_int_equal(p->out.status, PL_PLAN_VIOLATION);
	/* The approved one: up --plan runs on it. */
	write_file(path, PLAN_A);
	memset(&p->out, 0, sizeof(p->out));
	assert_int_equal(stack_run_plan_load(p, &in, &o), 0);
	/* The CLI gets a copy of the bytes checked, not the (swappable) volume. */
	snprintf(pinned, sizeof(pinned), "%s/plan-approved.json", dir);
	assert_string_equal(p->safety.plan_file, pinned);
	write_file(path, PLAN_B);
	assert_int_equal(fs_read_file(pinned, 4096, &got, &got_len, &e), 0);
	assert_string_equal(got, PLAN_A);
	free(got);
	/* Two spellings of resourcePlans: refused, whatever its id. */
	write_file(path, "{\"resourcePlans\": {}, \"ResourcePlans\": {\"urn:a\": {\"goal\": {\"type\": \"t\"}, "
	    "\"steps\": [\"create\"]}}}");
	memset(&p->out, 0, sizeof(p->out));
	assert_int_equal(stack_run_plan_load(p, &in, &o), -1);
	assert_int_equal(p->out.status, PL_PLAN_VIOLATION);
	unlink(pinned);
	unlink(path);
	rmdir(dir);
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plan_fields_are_checked),
		cmocka_unit_test(test_the_pod_applies_only_the_approved_plan),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
