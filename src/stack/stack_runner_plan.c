/*
 * stack_runner_plan.c - spec.approval: Manual inside a Job's pod
 * (`run-update`, docs/job-runner.md "Approval"): a plan Job's pod makes
 * the plan and hands it back in <name>-plan-result; an up Job's pod reads
 * the approved plan from the mounted <name>-plan, checks that its id is
 * the approved one, and hands the CLI the very bytes it checked.
 *
 * The controller's side of the same way is stack_job_plan.c.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"
#include "base/log.h"
#include "stack/stack_pod.h"

/* A Secret holds at most 1 MiB; the plan goes in base64. */
#define PLAN_SECRET_MAX_BYTES (700L * 1024)

static void run_fail(struct stack_pass *p, enum pl_status st, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void run_fail(struct stack_pass *p, enum pl_status st, const char *type, const char *fmt, ...)
{
	va_list ap;

	p->out.ran = 1;
	p->out.ok = 0;
	p->out.status = st;
	p->out.type = type;
	va_start(ap, fmt);
	vsnprintf(p->out.message, sizeof(p->out.message), fmt, ap);
	va_end(ap);
}

/* The plan into in->plan_secret with the pod's own token. */
static int write_plan_secret(const struct stack_run_input *in, const struct stack_run_opts *o, const char *text,
    size_t len, struct err *e)
{
	struct kube_client *c;
	int rc;

	if ((c = stack_run_client(o, e)) == NULL)
		return -1;
	rc = stack_job_plan_put(c, in->namespace, in->plan_secret, text, len, e);
	kube_client_free(c);
	return rc;
}

void stack_run_plan(struct stack_pass *p, const struct stack_run_input *in, const struct stack_run_opts *o)
{
	char path[PATH_MAX];
	char *text = NULL;
	size_t len = 0;
	struct err e;

	if (stack_update_plan_into(p, o->work_dir, path, sizeof(path)) < 0)
		return;
	if (fs_read_file(path, PLAN_SECRET_MAX_BYTES, &text, &len, &e) < 0) {
		run_fail(p, PL_INTERNAL, "preview", "preview --save-plan wrote no plan the Secret %s can hold: %s",
		    in->plan_secret, e.msg);
		return;
	}
	if (write_plan_secret(in, o, text, len, &e) < 0) {
		log_warn("cannot write the plan Secret", "error", e.msg, NULL);
		run_fail(p, PL_INTERNAL, "preview", "the plan was made but not written: %s", e.msg);
	}
	free(text);
}

int stack_run_plan_load(struct stack_pass *p, const struct stack_run_input *in, const struct stack_run_opts *o)
{
	char path[PATH_MAX], pinned[PATH_MAX], id[65] = "";
	char *text = NULL;
	size_t len = 0;
	int changes = 0;
	struct err e;

	if (o->plan_dir == NULL) {
		run_fail(p, PL_INTERNAL, "up", "the update applies plan %s, but run-update has no --plan-dir",
		    in->plan_id);
		return -1;
	}
	snprintf(path, sizeof(path), "%s/%s", o->plan_dir, STACK_JOB_PLAN_KEY);
	if (fs_read_file(path, PLAN_SECRET_MAX_BYTES, &text, &len, &e) < 0) {
		run_fail(p, PL_INTERNAL, "up", "the approved plan %s cannot be read: %s", in->plan_id, e.msg);
		return -1;
	}
	if (stack_plan_id(text, len, in->plan_after, id, &changes, &e) < 0 || strcmp(id, in->plan_id) != 0) {
		/* The Secret was changed after the approval (or by a newer
		 * preview): this is not what was reviewed. */
		run_fail(p, PL_PLAN_VIOLATION, "up", "the plan given to this Job is %s, not the approved plan %s; "
		    "nothing was applied", id[0] ? id : "refused", in->plan_id);
		if (!id[0])
			log_warn("the mounted plan is refused", "error", e.msg, NULL);
		free(text);
		return -1;
	}
	/* The CLI reads the bytes just checked, not the volume (which the
	 * kubelet may swap at any time). */
	snprintf(pinned, sizeof(pinned), "%s/plan-approved.json", o->work_dir);
	if (fs_write_file(pinned, text, len, 0600, &e) < 0) {
		run_fail(p, PL_INTERNAL, "up", "the approved plan %s cannot be kept: %s", in->plan_id, e.msg);
		free(text);
		return -1;
	}
	free(text);
	log_info("applying the approved plan", "planId", id, NULL);
	snprintf(p->safety.plan_file, sizeof(p->safety.plan_file), "%s", pinned);
	return 0;
}
