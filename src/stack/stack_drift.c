/*
 * stack_drift.c - drift detection and remediation (spec.driftDetection).
 *
 * On the interval, a Stack whose last update at its current inputs
 * succeeded gets a drift check: `pulumi refresh --preview-only
 * --expect-no-changes`, which changes nothing and fails (exit 7) exactly
 * when the cloud no longer matches the stack's state.  The check runs inside
 * a reconcile pass, and one Stack is never in two passes at once, so it
 * never overlaps an update of the same Stack.
 *
 * Drift is recorded in status.drift and the Drifted condition, with a
 * Warning event when it is first seen.  With remediate: true the pass goes
 * on to an update with --refresh (through approval when spec.approval is
 * Manual); without it the Stack is Ready=False, Stalled=True reason Drifted,
 * until a check finds the cloud matching again.  docs/drift.md.
 *
 * In job mode the check is a Job (stack_job_step, op "refresh"; the pod
 * runs the same stack_update_drift_check) and its drifted resources come
 * back in the termination message's "drift" (stack_drift_from_result);
 * the repair is the up Job with refresh.  docs/job-runner.md.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/str.h"
#include "stack/stack_gates.h"

static int enabled(const struct stack_pass *p)
{
	return p->spec_ok && !p->deleting && !p->spec.preview && p->spec.drift_interval_ms > 0;
}

/* The last update at these inputs succeeded: the state says what the
 * cloud should be. */
static int applied_now(struct stack_pass *p)
{
	stack_fingerprint(p, p->fingerprint);
	return str_eq(stack_status_str(p, "fingerprint"), p->fingerprint) &&
	    str_eq(stack_status_str(p, "lastUpdate.state"), "succeeded") &&
	    str_eq(stack_status_str(p, "lastUpdate.type"), "up");
}

static int64_t last_check_us(const struct stack_pass *p)
{
	/* This pass's check, when it made one, is not in p->status yet. */
	const char *checked = p->safety.drift ? kube_obj_str(p->safety.drift, "checkedAt") :
	    stack_status_str(p, "drift.checkedAt");
	int64_t t = stack_parse_time_us(checked);
	int64_t u = stack_parse_time_us(stack_status_str(p, "lastUpdate.endTime"));

	return t > u ? t : u;
}

long stack_drift_next_ms(const struct stack_pass *p, int64_t now_us)
{
	int64_t due_us;

	if (!enabled(p))
		return 0;
	due_us = last_check_us(p) + (int64_t)p->spec.drift_interval_ms * 1000;
	return due_us <= now_us ? 1 : (long)((due_us - now_us) / 1000) + 1;
}

static void set_drifted(struct stack_pass *p, int drifted, const char *reason, const char *msg)
{
	p->safety.drifted.set = drifted ? 1 : -1;
	p->safety.drifted.reason = reason;
	snprintf(p->safety.drifted.message, sizeof(p->safety.drifted.message), "%s", msg);
}

/* The new status.drift after a check with outcome o. */
static void record(struct stack_pass *p, int drifted, const char *message)
{
	const cJSON *old = cJSON_GetObjectItemCaseSensitive(p->status, "drift");
	const char *since = kube_obj_str(old, "detectedAt");
	int was = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(old, "drifted"));
	cJSON *d = cJSON_CreateObject();
	char now[32];

	clock_format_rfc3339(now, sizeof(now), time(NULL));
	cJSON_AddStringToObject(d, "checkedAt", now);
	cJSON_AddBoolToObject(d, "drifted", drifted);
	if (drifted)
		cJSON_AddStringToObject(d, "detectedAt", was && since ? since : now);
	cJSON_AddItemToObject(d, "changeSummary", p->out.changes ? cJSON_Duplicate(p->out.changes, 1) :
	    cJSON_CreateObject());
	cJSON_AddItemToObject(d, "resources", drifted && p->safety.drift_steps ?
	    cJSON_Duplicate(p->safety.drift_steps, 1) : cJSON_CreateArray());
	cJSON_AddNumberToObject(d, "omittedResources", drifted ? p->safety.drift_omitted : 0);
	cJSON_AddStringToObject(d, "message", message);
	cJSON_Delete(p->safety.drift);
	p->safety.drift = d;
}

static int resource_count(const struct stack_pass *p)
{
	return cJSON_GetArraySize(p->safety.drift_steps) + p->safety.drift_omitted;
}

/* A check that failed concludes nothing, but it was made: checkedAt moves
 * (the rest of status.drift stays as it was) so that the next check waits
 * for the interval instead of following at once (a Job each time, in job
 * mode). */
static void record_failed(struct stack_pass *p, const char *message)
{
	const cJSON *old = cJSON_GetObjectItemCaseSensitive(p->status, "drift");
	cJSON *d = cJSON_IsObject(old) ? cJSON_Duplicate(old, 1) : cJSON_CreateObject();
	char now[32];

	clock_format_rfc3339(now, sizeof(now), time(NULL));
	cJSON_DeleteItemFromObjectCaseSensitive(d, "checkedAt");
	cJSON_AddStringToObject(d, "checkedAt", now);
	if (cJSON_GetObjectItemCaseSensitive(d, "drifted") == NULL)
		cJSON_AddBoolToObject(d, "drifted", 0);
	cJSON_DeleteItemFromObjectCaseSensitive(d, "message");
	cJSON_AddStringToObject(d, "message", message);
	cJSON_Delete(p->safety.drift);
	p->safety.drift = d;
}

/* The check's outcome in p->out (from the local CLI or the Job): 1
 * drifted, 0 not, -1 the check failed (nothing known).  Clears p->out. */
static int judge_check(struct stack_pass *p)
{
	char msg[700];
	int was = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(p->status, "drift"), "drifted"));
	int drifted;

	if (p->out.status != PL_OK && p->out.status != PL_CHANGES_NOT_EXPECTED) {
		snprintf(msg, sizeof(msg), "the drift check failed: %s", p->out.message);
		log_warn("drift check failed", "namespace", p->ns, "name", p->name, "error", p->out.message, NULL);
		stack_event(p, "Warning", "DriftCheckFailed", "%s", msg);
		record_failed(p, msg);
		cJSON_Delete(p->out.changes);
		memset(&p->out, 0, sizeof(p->out));
		return -1;
	}
	drifted = p->out.status == PL_CHANGES_NOT_EXPECTED;
	if (drifted)
		snprintf(msg, sizeof(msg), "%d resource%s differ%s from the stack's state (pulumi refresh "
		    "--preview-only found changes)", resource_count(p), resource_count(p) == 1 ? "" : "s",
		    resource_count(p) == 1 ? "s" : "");
	else
		snprintf(msg, sizeof(msg), "the cloud matches the stack's state");
	record(p, drifted, msg);
	set_drifted(p, drifted, drifted ? "DriftDetected" : "NoDrift", msg);
	log_info(drifted ? "drift detected" : "no drift", "namespace", p->ns, "name", p->name,
	    "reconcileID", p->id, NULL);
	if (drifted && !was)
		stack_event(p, "Warning", "DriftDetected", "%s", msg);
	if (!drifted && was)
		stack_event(p, "Normal", "DriftResolved", "%s", msg);
	/* A check is not an update: status.lastUpdate stays as it was. */
	cJSON_Delete(p->out.changes);
	memset(&p->out, 0, sizeof(p->out));
	return drifted;
}

/* Drift found and left unrepaired: Ready=False until a check finds the
 * cloud matching again. */
static void unrepaired(struct stack_pass *p)
{
	const char *m = kube_obj_str(cJSON_GetObjectItemCaseSensitive(p->status, "drift"), "message");

	stack_verdict(p, STACK_STALLED, "Drifted", p->spec.drift_interval_ms, "the cloud differs from the "
	    "stack's state (status.drift) and spec.driftDetection.remediate is false: repair it with "
	    "remediate: true, a reconcile request with spec.refresh, or by hand; checked again every %lds",
	    p->spec.drift_interval_ms / 1000);
	if (!p->safety.drifted.set)
		set_drifted(p, 1, "DriftDetected", m ? m : "drift detected");
}

/* While the check's Job runs the Stack stays as the last check left it:
 * Ready (the cloud matched) or Stalled Drifted, never Reconciling for a
 * look that changes nothing (docs/job-runner.md). */
static void while_check_runs(struct stack_pass *p, int drifted)
{
	char job[sizeof(p->v.message)];
	long requeue_ms = p->v.requeue_ms;

	snprintf(job, sizeof(job), "%s", p->v.message);
	if (drifted) {
		unrepaired(p);
		return;
	}
	stack_verdict(p, STACK_READY, "Succeeded", requeue_ms, "applied revision %s; drift check: %s",
	    p->art.revision, job);
}

/* The check (p->exec: locally, or in a Job of op "refresh"): 1 decided
 * (it runs or waits, p->v set; or it cannot run now), else 0 with *rc the
 * check's result. */
static int run_check(struct stack_pass *p, int drifted, int *rc)
{
	p->why = "the drift check is due";
	switch (p->exec->run(p, STACK_OP_CHECK)) {
	case STACK_EXEC_DONE:
		*rc = judge_check(p);
		return 0;
	case STACK_EXEC_PENDING:
		if (!p->retry && p->v.state == STACK_WAITING)
			while_check_runs(p, drifted);
		return 1;
	default:
		return 1;
	}
}

int stack_drift_gate(struct stack_pass *p)
{
	int64_t now_us = kube_now_us();
	int drifted;

	if (!enabled(p))
		return 0;
	drifted = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(p->status, "drift"), "drifted"));
	if (!applied_now(p) || stack_pass_requested(p) || (drifted && p->spec.drift_remediate)) {
		/* An update is due anyway (decide), or the repair of known drift
		 * is (its Job may still run: no check before it is recorded). */
		p->safety.remediate = drifted && p->spec.drift_remediate;
		return 0;
	}
	if (stack_drift_next_ms(p, now_us) <= 1) {
		int rc;
		if (run_check(p, drifted, &rc))
			return 1;
		if (rc >= 0)
			drifted = rc;
	}
	if (!drifted)
		return 0;
	if (p->spec.drift_remediate) {
		p->safety.remediate = 1;
		return 0;
	}
	unrepaired(p);
	return 1;
}

/* status.drift after an update with --refresh: what its refresh found
 * (resources) was put back by the update. */
static void record_repaired(struct stack_pass *p, const char *msg)
{
	char now[32];
	int found = p->safety.drift_steps != NULL;

	clock_format_rfc3339(now, sizeof(now), time(NULL));
	cJSON_Delete(p->safety.drift);
	p->safety.drift = cJSON_CreateObject();
	cJSON_AddStringToObject(p->safety.drift, "checkedAt", now);
	cJSON_AddBoolToObject(p->safety.drift, "drifted", 0);
	if (found)
		cJSON_AddStringToObject(p->safety.drift, "detectedAt", now);
	cJSON_AddItemToObject(p->safety.drift, "changeSummary", cJSON_CreateObject());
	cJSON_AddItemToObject(p->safety.drift, "resources", found ? cJSON_Duplicate(p->safety.drift_steps, 1) :
	    cJSON_CreateArray());
	cJSON_AddNumberToObject(p->safety.drift, "omittedResources", p->safety.drift_omitted);
	cJSON_AddStringToObject(p->safety.drift, "message", msg);
	set_drifted(p, 0, "Remediated", msg);
}

void stack_drift_after_update(struct stack_pass *p)
{
	int was = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(p->status, "drift"), "drifted"));
	int refreshed = p->safety.remediate || p->spec.refresh;
	char msg[300];

	if (!p->spec_ok || !p->out.ran || !p->out.ok || strcmp(p->out.type, "up") != 0)
		return;
	if (!refreshed) {
		/* An update without refresh does not look at the cloud: drift
		 * seen before is still there. */
		if (was && enabled(p) && !p->spec.drift_remediate)
			unrepaired(p);
		return;
	}
	if (p->safety.drift_steps) {
		/* The update's refresh found drift (also without driftDetection):
		 * reported as a check would, and repaired by this update. */
		int n = resource_count(p);
		snprintf(msg, sizeof(msg), "the update's refresh found %d resource%s changed outside Pulumi and "
		    "put %s back", n, n == 1 ? "" : "s", n == 1 ? "it" : "them");
		if (!p->safety.remediate)   /* else the check said so already */
			stack_event(p, "Warning", "DriftDetected", "%s", msg);
	} else if (was || p->safety.remediate) {
		snprintf(msg, sizeof(msg), "%s", p->safety.remediate ? "the drift was repaired by an update" :
		    "an update with refresh brought the cloud back to the program");
	} else {
		return;
	}
	record_repaired(p, msg);
	stack_event(p, "Normal", "DriftRemediated", "%s", msg);
}

void stack_drift_add(struct stack_pass *p, const char *op, const char *urn)
{
	cJSON *e;

	if (p->safety.drift_steps == NULL)
		p->safety.drift_steps = cJSON_CreateArray();
	if (cJSON_GetArraySize(p->safety.drift_steps) >= STACK_DRIFT_STEPS_MAX) {
		p->safety.drift_omitted++;
		return;
	}
	e = cJSON_CreateObject();
	cJSON_AddStringToObject(e, "op", op);
	cJSON_AddStringToObject(e, "urn", urn);
	cJSON_AddItemToArray(p->safety.drift_steps, e);
}

/* Bounded as a local refresh is (stack_drift_add): the pod's message is
 * not trusted further than its shape. */
void stack_drift_from_result(struct stack_pass *p, const cJSON *res)
{
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(res, "drift"), *it;
	const cJSON *omitted = cJSON_GetObjectItemCaseSensitive(d, "omitted");

	cJSON_Delete(p->safety.drift_steps);
	p->safety.drift_steps = NULL;
	p->safety.drift_omitted = 0;
	if (!cJSON_IsObject(d))
		return;
	/* As locally, the list exists only when the refresh found something. */
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(d, "resources")) {
		const char *op = kube_obj_str(it, "op"), *urn = kube_obj_str(it, "urn");
		if (op != NULL && urn != NULL)
			stack_drift_add(p, op, urn);
	}
	if (cJSON_IsNumber(omitted) && omitted->valuedouble > 0 && omitted->valuedouble < 1e6) {
		p->safety.drift_omitted += (int)omitted->valuedouble;
		if (p->safety.drift_steps == NULL)
			p->safety.drift_steps = cJSON_CreateArray();
	}
}
