/*
 * stack_approval.c - plan-bound approval (spec.approval: Manual).
 *
 * A change is previewed with `pulumi preview --save-plan`; the plan is kept
 * in the workspace's scratch directory under its plan id and described in
 * status.preview.  The update runs with `pulumi up --plan` only when
 * spec.approvedPlan (or the plan recorded when spec.continue turned true)
 * names that id, so what is applied is exactly what was reviewed.
 *
 * The plan id is a digest of the plan's steps and goals per URN, not of the
 * revision: a new commit that changes nothing the plan does keeps its
 * approval, and an approval can never apply a plan with other steps.  The
 * plan is bound to the inputs it was made from (status.preview.inputsDigest:
 * revision, spec without the approval fields, referenced objects); any other
 * input makes a fresh preview.  docs/approvals.md is the user's view.
 *
 * Three calls from the step table (stack_reconcile.c): the gate before
 * decide (a plan for these inputs awaits approval: nothing runs), the plan
 * step after the workspace (preview, then approve or wait), and the
 * after-update hook (an applied plan is cleared; one that no longer applies
 * is replaced by a fresh preview at once).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/fs.h"
#include "base/json_strict.h"
#include "base/log.h"
#include "base/str.h"
#include "stack/stack_gates.h"

#define PREVIEW_STEPS_MAX 50


/* ------------------------------------------------------------ approval */

static int manual(const struct stack_pass *p)
{
	return p->spec_ok && p->spec.approval_manual && !p->spec.preview && !p->deleting;
}

/* The plan id spec.continue approved: recorded the first time the
 * controller sees continue true, as the plan then in status.  Records
 * what it saw in p->safety.approval. */
static const char *continued_plan(struct stack_pass *p)
{
	const char *seen_plan = stack_status_str(p, "approval.continuedPlan");
	const cJSON *obs = cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(p->status, "approval"), "continueObserved");
	int observed = cJSON_IsTrue(obs);

	if (p->safety.approval) {   /* decided earlier in this pass */
		const char *v = kube_obj_str(p->safety.approval, "continuedPlan");
		return v && v[0] ? v : NULL;
	}
	if (p->spec.continue_approval == observed)
		return seen_plan && seen_plan[0] ? seen_plan : NULL;
	p->safety.approval = p->status && cJSON_GetObjectItemCaseSensitive(p->status, "approval") ?
	    cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(p->status, "approval"), 1) : cJSON_CreateObject();
	cJSON_DeleteItemFromObjectCaseSensitive(p->safety.approval, "continueObserved");
	cJSON_AddBoolToObject(p->safety.approval, "continueObserved", p->spec.continue_approval);
	if (p->spec.continue_approval) {
		const char *now = stack_status_str(p, "preview.planId");
		cJSON_DeleteItemFromObjectCaseSensitive(p->safety.approval, "continuedPlan");
		cJSON_AddStringToObject(p->safety.approval, "continuedPlan", now ? now : "");
		return now;
	}
	return seen_plan && seen_plan[0] ? seen_plan : NULL;
}

/* The plan in status is id, changes nothing and was let through as such
 * (a Job runs it: passes see it in status until its result is in). */
static int no_changes_in_status(const struct stack_pass *p, const char *id)
{
	const cJSON *pv = cJSON_GetObjectItemCaseSensitive(p->status, "preview");
	const cJSON *steps = cJSON_GetObjectItemCaseSensitive(pv, "steps");

	return str_eq(kube_obj_str(pv, "planId"), id) && str_eq(kube_obj_str(pv, "approvedBy"), "noChanges") &&
	    cJSON_IsArray(steps) && cJSON_GetArraySize(steps) == 0 &&
	    stack_status_int(p, "preview.omittedSteps", 1) == 0;
}

/* How id is approved ("approvedPlan", "continue", "noChanges"), or NULL. */
static const char *approved_by(struct stack_pass *p, const char *id)
{
	const char *cont = continued_plan(p);

	if (str_eq(p->spec.approved_plan, id))
		return "approvedPlan";
	if (str_eq(cont, id))
		return "continue";
	if (no_changes_in_status(p, id))
		return "noChanges";
	return NULL;
}

/* Ready=False, Reconciling=True, AwaitingApproval=True with the commands
 * that approve the plan. */
static void await(struct stack_pass *p, const char *reason, const char *id, const char *why)
{
	const cJSON *pv = p->safety.preview ? p->safety.preview :
	    cJSON_GetObjectItemCaseSensitive(p->status, "preview");
	char sum[200];

	/* Watches say when the spec or a source changes; an ociSource tag is
	 * only polled, so a new tag must still be looked for while waiting. */
	long poll = p->spec.source == STACK_SRC_OCI && p->spec.oci_digest == NULL ? p->spec.oci_interval_ms : 0;

	stack_plan_summary_text(cJSON_GetObjectItemCaseSensitive(pv, "changeSummary"), sum, sizeof(sum));
	stack_verdict(p, STACK_WAITING, reason, poll, "%splan %s (%s) at revision %s awaits approval: run "
	    "`pulumi-controller approve %s/%s --plan %s`, or `kubectl -n %s patch stack %s --type merge "
	    "-p '{\"spec\":{\"approvedPlan\":\"%s\"}}'`", why ? why : "", id, sum,
	    kube_obj_str(pv, "revision") ? kube_obj_str(pv, "revision") : "?", p->ns, p->name, id,
	    p->ns, p->name, id);
	p->safety.awaiting.set = 1;
	p->safety.awaiting.reason = reason;
	snprintf(p->safety.awaiting.message, sizeof(p->safety.awaiting.message), "%s", p->v.message);
}

static int make_plan(struct stack_pass *p, char id[65], int *changes);

/* status.approval as this pass leaves it (p->safety.approval, a copy). */
static cJSON *approval_record(struct stack_pass *p)
{
	if (!p->safety.approval)
		p->safety.approval = p->status && cJSON_GetObjectItemCaseSensitive(p->status, "approval") ?
		    cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(p->status, "approval"), 1) : cJSON_CreateObject();
	return p->safety.approval;
}

/* The opening of the message of a fresh plan that replaces the approved
 * old_id, which no longer applied (detail: why, or NULL). */
static void no_longer_applies(char *buf, size_t n, const char *old_id, const char *detail)
{
	snprintf(buf, n, "the approved plan %s no longer applies (the stack or the cloud changed since it was "
	    "previewed%s%s); a fresh ", old_id, detail && detail[0] ? ": " : "", detail && detail[0] ? detail : "");
}

/* id (NULL: none) as the approved plan that no longer applies. */
static void set_failed_plan(struct stack_pass *p, const char *id)
{
	cJSON *a = approval_record(p);

	cJSON_DeleteItemFromObjectCaseSensitive(a, "failedPlan");
	if (id)
		cJSON_AddStringToObject(a, "failedPlan", id);
}

/* Job mode: the plan in status is the approved one that no longer applied,
 * and the fresh preview that replaces it has not been read yet (it runs in
 * a Job, which locally is done in the failing pass itself). */
static int plan_void_in_job(const struct stack_pass *p, const char *id)
{
	return p->exec->async && str_eq(stack_status_str(p, "approval.failedPlan"), id) &&
	    str_eq(stack_status_str(p, "lastUpdate.state"), "failed");
}

/* The fresh preview's Job was created or runs: say why it runs. */
static void replan_verdict(struct stack_pass *p, const char *old_id, const char *why)
{
	if (p->retry || p->v.state != STACK_WAITING || !str_eq(p->v.reason, "JobRunning"))
		return;   /* a slot, an earlier Job, an API error: that verdict says more */
	stack_verdict(p, STACK_WAITING, "PlanNoLongerApplies", p->v.requeue_ms, "the approved plan %s no longer "
	    "applies (the stack or the cloud changed since it was previewed%s%s); a fresh preview runs in a Job",
	    old_id, why && why[0] ? ": " : "", why ? why : "");
}

/* Job mode, plan_void_in_job: reads the fresh preview (or waits for its
 * Job) as the failing pass does locally.  1 decided. */
static int replan_in_job(struct stack_pass *p, const char *old_id)
{
	char fresh[65], why[700];
	int changes = 0, rc;

	stack_fingerprint(p, p->fingerprint);
	rc = make_plan(p, fresh, &changes);
	if (rc > 0) {
		replan_verdict(p, old_id, NULL);
		return 1;
	}
	if (rc < 0 || str_eq(fresh, old_id) || !changes) {
		/* The preview failed, gave the same plan again, or nothing to do:
		 * the update is retried with backoff as a failure (the decide
		 * step), as locally. */
		cJSON_Delete(p->out.changes);
		memset(&p->out, 0, sizeof(p->out));
		set_failed_plan(p, NULL);
		return 0;
	}
	if (approved_by(p, fresh))
		return 0;
	no_longer_applies(why, sizeof(why), old_id, stack_status_str(p, "lastUpdate.message"));
	await(p, "PlanNoLongerApplies", fresh, why);
	p->v.event = 1;
	p->v.event_reason = "AwaitingApproval";
	return 1;
}

int stack_approval_gate(struct stack_pass *p)
{
	char digest[65];
	const char *id = stack_status_str(p, "preview.planId");

	if (!manual(p))
		return 0;
	/* A continue: true is tied to the plan in status when it is first seen,
	 * whatever this pass goes on to do. */
	(void)continued_plan(p);
	if (id == NULL)
		return 0;
	stack_plan_inputs_digest(p, digest);
	if (!str_eq(digest, stack_status_str(p, "preview.inputsDigest")) || stack_pass_requested(p)) {
		stack_fingerprint(p, p->fingerprint);
		if (str_eq(stack_status_str(p, "fingerprint"), p->fingerprint) &&
		    str_eq(stack_status_str(p, "lastUpdate.state"), "succeeded")) {
			/* Back to what was applied (a reverted revision): nothing is
			 * pending, the old plan is void. */
			p->safety.clear_preview = 1;
			p->safety.awaiting.set = -1;
			p->safety.awaiting.reason = "NoChangePending";
			snprintf(p->safety.awaiting.message, sizeof(p->safety.awaiting.message), "the inputs are "
			    "those of the last update again; plan %s is void", id);
		}
		return 0;   /* else the plan step makes a fresh one */
	}
	if (plan_void_in_job(p, id))
		return replan_in_job(p, id);
	if (approved_by(p, id))
		return 0;
	if (stack_status_str(p, "approval.failedPlan") && str_eq(stack_status_str(p, "lastUpdate.state"), "failed")) {
		/* Every pass says why, not only the one that made the fresh plan. */
		char why[700];
		no_longer_applies(why, sizeof(why), stack_status_str(p, "approval.failedPlan"),
		    stack_status_str(p, "lastUpdate.message"));
		await(p, "PlanNoLongerApplies", id, why);
		return 1;
	}
	await(p, "AwaitingApproval", id, NULL);
	return 1;
}

/* The plan's failure: p->out says what (where) refused and why. */
static int plan_refused(struct stack_pass *p, const char *where, const struct err *e)
{
	char why[ERR_MSG_MAX];

	p->out.ok = 0;
	p->out.ran = 1;
	p->out.status = PL_INTERNAL;
	/* The key named comes from the program: kept on one line. */
	snprintf(p->out.message, sizeof(p->out.message), "the plan %s is refused, nothing was applied: %s", where,
	    log_printable(e->msg, why, sizeof(why)));
	return -1;
}

/* Runs the preview for a plan (p->exec: locally or in a plan Job), reads
 * the plan it made, judges it and has it kept under its id for the update
 * that applies it; *text is the plan (caller frees).  0, -1 (p->out holds
 * the failure), or 1: the preview runs (the pass is decided). */
static int fetch_plan(struct stack_pass *p, char id[65], int *changes, char **text)
{
	char where[400];
	size_t len = 0;
	struct err e;
	int rc;

	*text = NULL;
	if (p->exec->run(p, STACK_OP_PLAN) != STACK_EXEC_DONE)
		return 1;
	if (!p->out.ok)
		return -1;
	if ((*text = p->exec->plan_read(p, &len, where, sizeof(where))) == NULL)
		return -1;
	if (stack_plan_id(*text, len, stack_approval_applied(p), id, changes, &e) < 0) {
		free(*text);
		*text = NULL;
		return plan_refused(p, where, &e);
	}
	if ((rc = p->exec->plan_keep(p, id, *text, len)) != 0) {
		free(*text);
		*text = NULL;
	}
	return rc;
}

/* Makes a plan and describes it in p->safety.preview; 0, -1 (p->out holds
 * the failure), or 1: its preview runs (the pass is decided). */
static int make_plan(struct stack_pass *p, char id[65], int *changes)
{
	char now[32], digest[65];
	char *text = NULL;
	int omitted = 0, rc;
	cJSON *pv;
	time_t t = time(NULL);

	rc = fetch_plan(p, id, changes, &text);
	if (rc != 0)
		return rc;
	clock_format_rfc3339(now, sizeof(now), t);
	stack_plan_inputs_digest(p, digest);
	pv = cJSON_CreateObject();
	cJSON_AddStringToObject(pv, "planId", id);
	cJSON_AddStringToObject(pv, "revision", p->art.revision ? p->art.revision : "");
	cJSON_AddStringToObject(pv, "inputsDigest", digest);
	cJSON_AddItemToObject(pv, "changeSummary", p->out.changes ? cJSON_Duplicate(p->out.changes, 1) :
	    cJSON_CreateObject());
	cJSON_AddItemToObject(pv, "steps", stack_plan_steps(text, PREVIEW_STEPS_MAX, &omitted));
	cJSON_AddNumberToObject(pv, "omittedSteps", omitted);
	cJSON_AddStringToObject(pv, "generatedAt", now);
	/* Which plan Job this is: a lost "recorded" mark must not let a later
	 * pass take the same Job's plan for a fresh one (stack_job.c). */
	if (p->exec->async && p->job_recorded_uid[0])
		cJSON_AddStringToObject(pv, "jobUid", p->job_recorded_uid);
	free(text);
	cJSON_Delete(p->safety.preview);
	p->safety.preview = pv;
	/* The preview is not an update: status.lastUpdate stays as it was. */
	cJSON_Delete(p->out.changes);
	memset(&p->out, 0, sizeof(p->out));
	log_info("plan previewed", "namespace", p->ns, "name", p->name, "planId", id, "reconcileID", p->id, NULL);
	return 0;
}

/* Sets the update to apply the plan id, approved by how. */
static void apply_plan(struct stack_pass *p, const char *id, const char *how)
{
	p->exec->plan_use(p, id);
	snprintf(p->safety.plan_id, sizeof(p->safety.plan_id), "%s", id);
	if (p->safety.preview && how) {
		cJSON_DeleteItemFromObjectCaseSensitive(p->safety.preview, "approvedBy");
		cJSON_AddStringToObject(p->safety.preview, "approvedBy", how);
	}
}

/* The plan is new: say so once (an Event), and why an approval on record
 * does not apply to it. */
static void announce(struct stack_pass *p, const char *id)
{
	const char *prev = stack_status_str(p, "preview.planId");
	char why[300] = "";

	if (p->spec.approved_plan && p->spec.approved_plan[0])
		snprintf(why, sizeof(why), "spec.approvedPlan %s names another plan (an approval never "
		    "applies to a plan with other steps); ", p->spec.approved_plan);
	await(p, "AwaitingApproval", id, why);
	if (!str_eq(prev, id))
		stack_event(p, "Normal", "AwaitingApproval", "%s", p->v.message);
}

int stack_approval_plan(struct stack_pass *p)
{
	const char *id = stack_status_str(p, "preview.planId"), *how;
	char digest[65], fresh[65];
	int changes = 0, rc;

	if (!manual(p))
		return 0;
	stack_plan_inputs_digest(p, digest);
	if (id && str_eq(digest, stack_status_str(p, "preview.inputsDigest")) && !stack_pass_requested(p) &&
	    !plan_void_in_job(p, id)) {
		if ((how = approved_by(p, id)) && p->exec->plan_kept(p, id)) {
			p->safety.preview = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(p->status, "preview"), 1);
			apply_plan(p, id, how);
			return 0;
		}
	}
	/* No plan for these inputs (or its file is gone: a new volume): make one.
	 * An unchanged plan gets the same id, so an approval on record holds. */
	if ((rc = make_plan(p, fresh, &changes)) != 0)
		return rc;
	if (!changes) {
		/* Nothing in the cloud changes: nothing to review. */
		apply_plan(p, fresh, "noChanges");
		return 0;
	}
	if ((how = approved_by(p, fresh))) {
		apply_plan(p, fresh, how);
		return 0;
	}
	announce(p, fresh);
	return 1;
}

void stack_approval_after_update(struct stack_pass *p)
{
	struct stack_outcome failed;
	char old_id[65], fresh[65], why[700];
	int changes = 0;

	int rc;

	if (!p->safety.plan_id[0] || !p->out.ran)
		return;
	if (p->out.ok) {
		cJSON *a = approval_record(p);
		if (p->safety.plan_file[0])
			unlink(p->safety.plan_file);
		/* The approval is used up: the same steps again are a new plan
		 * (another id) that needs its own. */
		cJSON_DeleteItemFromObjectCaseSensitive(a, "appliedPlan");
		cJSON_AddStringToObject(a, "appliedPlan", p->safety.plan_id);
		p->safety.clear_preview = 1;
		p->safety.awaiting.set = -1;
		p->safety.awaiting.reason = "PlanApplied";
		snprintf(p->safety.awaiting.message, sizeof(p->safety.awaiting.message), "plan %s was applied",
		    p->safety.plan_id);
		return;
	}
	if (p->out.status != PL_PLAN_VIOLATION)
		return;
	/* The stack or the cloud moved since the preview: the approved plan
	 * cannot be applied as reviewed.  Preview again now, so the reviewer
	 * sees what would happen instead. */
	snprintf(old_id, sizeof(old_id), "%s", p->safety.plan_id);
	if (p->safety.plan_file[0])
		unlink(p->safety.plan_file);
	p->safety.plan_file[0] = '\0';
	set_failed_plan(p, old_id);
	stack_event(p, "Warning", "PlanNoLongerApplies", "the approved plan %s no longer applies: %s", old_id,
	    p->out.message);
	failed = p->out;
	memset(&p->out, 0, sizeof(p->out));
	if ((rc = make_plan(p, fresh, &changes)) != 0) {
		if (rc > 0)
			replan_verdict(p, old_id, failed.message);
		if (rc < 0)
			cJSON_Delete(p->out.changes);
		p->out = failed;
		return;   /* the update's failure verdict stands */
	}
	p->out = failed;
	if (str_eq(fresh, old_id) || !changes)
		return;   /* the same plan again, or nothing to do: retried with backoff as a failure */
	no_longer_applies(why, sizeof(why), old_id, failed.message);
	await(p, "PlanNoLongerApplies", fresh, why);
	p->v.event = 1;
	p->v.event_reason = "AwaitingApproval";
}

/* ------------------------------------------------------------ status */
