/*
 * stack_exec_local.c - the local executor: the seam's operations
 * (stack_model.h, "the execution seam") run by the pulumi CLI in this
 * process, through stack_update.c.  Every operation ends within the pass
 * that starts it, so nothing is ever running between passes here.
 *
 * A plan for approval is kept in the Stack's scratch directory under its
 * id (plan-<id>.json): the bytes the approval gate read and judged, not
 * the file the CLI wrote, which the program could still change.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/log.h"
#include "base/str.h"
#include "stack/stack_exec.h"

static void plan_path(const struct stack_pass *p, const char *id, char *out, size_t n)
{
	snprintf(out, n, "%s/plan-%s.json", p->scratch, id);
}

static void new_plan_path(const struct stack_pass *p, char *out, size_t n)
{
	snprintf(out, n, "%s/plan-new.json", p->scratch);
}

/* An update or destroy starts: status says so first (currentUpdate), so a
 * controller killed while the CLI runs finds it interrupted.  0, or -1
 * with the pass left undecided (p->retry). */
static int write_running(struct stack_pass *p)
{
	struct err e;

	if (stack_status_write_running(p, &e) == 0)
		return 0;
	p->retry = 1;
	p->err = e;
	return -1;
}

static int run(struct stack_pass *p, enum stack_op op)
{
	char path[PATH_MAX];

	switch (op) {
	case STACK_OP_UPDATE:
		if (write_running(p) < 0)
			return STACK_EXEC_BLOCKED;
		log_info("update started", "namespace", p->ns, "name", p->name, "revision", p->art.revision,
		    "reconcileID", p->id, "reason", p->why, NULL);
		stack_event(p, "Normal", "UpdateStarted", "%s at revision %s: %s", p->spec.preview ? "preview" :
		    "update", p->art.revision, p->why);
		stack_update_run(p);
		return STACK_EXEC_DONE;
	case STACK_OP_DESTROY:
		if (write_running(p) < 0)
			return STACK_EXEC_BLOCKED;
		stack_event(p, "Normal", "DestroyStarted", "destroying stack %s", p->spec.stack);
		stack_update_destroy(p);
		return STACK_EXEC_DONE;
	case STACK_OP_PLAN:
		stack_update_plan_into(p, p->scratch, path, sizeof(path));
		return STACK_EXEC_DONE;
	case STACK_OP_CHECK:
		/* The program of the last update, as the update would build it. */
		if (stack_source_fetch(p) || stack_workspace_prepare(p))
			return STACK_EXEC_BLOCKED;
		stack_update_drift_check(p);
		return STACK_EXEC_DONE;
	}
	return STACK_EXEC_BLOCKED;
}

static char *plan_read(struct stack_pass *p, size_t *len, char *where, size_t n)
{
	char path[PATH_MAX], why[ERR_MSG_MAX];
	char *text = NULL;
	struct err e;

	snprintf(where, n, "preview --save-plan wrote");
	new_plan_path(p, path, sizeof(path));
	if (fs_read_file(path, STACK_PLAN_MAX_BYTES, &text, len, &e) == 0)
		return text;
	p->out.ok = 0;
	p->out.ran = 1;
	p->out.status = PL_INTERNAL;
	snprintf(p->out.message, sizeof(p->out.message), "the plan %s is refused, nothing was applied: %s", where,
	    log_printable(e.msg, why, sizeof(why)));
	return NULL;
}

static int plan_keep(struct stack_pass *p, const char *id, const char *text, size_t len)
{
	const char *prev = stack_status_str(p, "preview.planId");
	char tmp[PATH_MAX], final[PATH_MAX], old[PATH_MAX];
	struct err e;

	plan_path(p, id, final, sizeof(final));
	/* The plan this one replaces can never be applied any more. */
	if (prev && strcmp(prev, id) != 0 && strspn(prev, "0123456789abcdef") == strlen(prev)) {
		plan_path(p, prev, old, sizeof(old));
		unlink(old);
	}
	if (fs_write_file(final, text, len, 0600, &e) < 0) {
		p->out.ok = 0;
		p->out.status = PL_INTERNAL;
		snprintf(p->out.message, sizeof(p->out.message), "cannot keep the plan as %s: %s", final, e.msg);
		return -1;
	}
	new_plan_path(p, tmp, sizeof(tmp));
	unlink(tmp);
	return 0;
}

/* The kept file still holds the plan id (a new volume has none: the plan
 * is made again). */
static int plan_kept(const struct stack_pass *p, const char *id)
{
	char file[PATH_MAX], *text = NULL, have[65] = "";
	size_t len = 0;
	int changes = 0;
	struct err e;

	plan_path(p, id, file, sizeof(file));
	if (fs_read_file(file, STACK_PLAN_MAX_BYTES, &text, &len, &e) == 0 &&
	    stack_plan_id(text, len, stack_approval_applied(p), have, &changes, &e) < 0)
		have[0] = '\0';
	free(text);
	return str_eq(have, id);
}

static void plan_use(struct stack_pass *p, const char *id)
{
	plan_path(p, id, p->safety.plan_file, sizeof(p->safety.plan_file));
}

static int running(struct stack_pass *p, char *out, size_t n)
{
	return 0;
}

static int destroyed(struct stack_pass *p, struct err *e)
{
	err_clear(e);
	return 0;
}

static void recorded(struct stack_pass *p)
{
}

const struct stack_exec stack_exec_local = {
	.name = "local",
	.async = 0,
	.fetches = 1,
	.writes_outputs = 1,
	.run = run,
	.plan_read = plan_read,
	.plan_keep = plan_keep,
	.plan_kept = plan_kept,
	.plan_use = plan_use,
	.running = running,
	.destroyed = destroyed,
	.recorded = recorded,
};
