/*
 * stack_exec_job.c - the Job executor: the seam's operations (stack_model.h,
 * "the execution seam") run in a batch/v1 Job's pod (docs/job-runner.md).
 *
 * An operation outlives the pass that starts it: the first pass creates the
 * Job and ends Reconciling (JobRunning, WaitingForJobSlot), the Job's watch
 * queues the Stack when it changes, and the pass that finds it finished
 * collects its outcome into p->out, the same outcome the local executor
 * fills (stack_job.c).  A plan travels through Secrets: the plan Job's pod
 * hands it back in <name>-plan-result, the controller keeps the bytes it
 * judged in <name>-plan, and the up Job mounts that (stack_job_plan.c).
 */
#include <stdio.h>
#include <string.h>

#include "stack/stack_exec.h"

static int run(struct stack_pass *p, enum stack_op op)
{
	switch (op) {
	case STACK_OP_UPDATE:
		return stack_job_step(p, p->spec.preview ? "preview" : "up") ? STACK_EXEC_PENDING : STACK_EXEC_DONE;
	case STACK_OP_DESTROY:
		/* The Job's name carries the inputs it destroys with. */
		stack_fingerprint(p, p->fingerprint);
		return stack_job_step(p, "destroy") ? STACK_EXEC_PENDING : STACK_EXEC_DONE;
	case STACK_OP_PLAN:
		if (stack_job_step(p, STACK_JOB_OP_PLAN))
			return STACK_EXEC_PENDING;
		/* The plan's preview is reported as the local one is. */
		p->out.type = "preview";
		return STACK_EXEC_DONE;
	case STACK_OP_CHECK:
		return stack_job_step(p, "refresh") ? STACK_EXEC_PENDING : STACK_EXEC_DONE;
	}
	return STACK_EXEC_BLOCKED;
}

static char *plan_read(struct stack_pass *p, size_t *len, char *where, size_t n)
{
	char name[300];
	char *text;
	struct err e;

	snprintf(where, n, "the Job handed back in the Secret %s/%s-plan-result", p->ns, p->name);
	if ((text = stack_job_plan_read(p, len, &e)) != NULL)
		return text;
	stack_job_plan_result_name(p->name, name, sizeof(name));
	p->out.ok = 0;
	p->out.status = PL_INTERNAL;
	snprintf(p->out.message, sizeof(p->out.message), "the plan Job succeeded, but no plan can be read "
	    "from the Secret %s/%s: %s", p->ns, name, e.msg);
	return NULL;
}

/* Into <name>-plan, which only the controller writes. */
static int plan_keep(struct stack_pass *p, const char *id, const char *text, size_t len)
{
	struct err e;

	if (stack_job_plan_store(p, text, len, &e) == 0)
		return 0;
	p->err = e;
	p->retry = 1;
	return 1;
}

/* The up Job's pod checks the id of the plan it mounts. */
static int plan_kept(const struct stack_pass *p, const char *id)
{
	return 1;
}

/* The up Job mounts <name>-plan and gets only the id (stack_job_build.c). */
static void plan_use(struct stack_pass *p, const char *id)
{
}

static int running(struct stack_pass *p, char *out, size_t n)
{
	char job[600];

	if (!stack_job_unfinished(p, job, sizeof(job)))
		return 0;
	snprintf(out, n, "the Job %s", job);
	return 1;
}

static int destroyed(struct stack_pass *p, struct err *e)
{
	return stack_job_destroy_succeeded(p, e);
}

static void recorded(struct stack_pass *p)
{
	stack_job_after_status(p);
}

const struct stack_exec stack_exec_job = {
	.name = "job",
	.async = 1,
	.fetches = 0,
	.writes_outputs = 0,
	.run = run,
	.plan_read = plan_read,
	.plan_keep = plan_keep,
	.plan_kept = plan_kept,
	.plan_use = plan_use,
	.running = running,
	.destroyed = destroyed,
	.recorded = recorded,
};
