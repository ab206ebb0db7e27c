/*
 * stack_reconcile.c - the state machine: one pass over one Stack.
 *
 * A pass runs the steps of the table below in order.  Each step either
 * lets the pass go on (returns 0) or decides how it ends (returns 1, with
 * the verdict set, or with nothing to write when the Stack is suspended,
 * gone or finalized).  The verdict becomes the status at the end, in one
 * place (finish).  Nothing is remembered between passes but what status
 * says, so a pass after a restart decides exactly what the pass before it
 * would have: level-triggered and idempotent.
 *
 * First the pass names the Stack's phase, once, from the object as it
 * found it (enum stack_phase in stack_model.h: Finalizing, Suspended,
 * Updating, AwaitingApproval, Drifted, BackingOff, Idle), and each step
 * runs only in the phases its row of steps[] names: suspend when Suspended,
 * finalize when Finalizing, spec then too, and every other step in the
 * live phases.  Operations run through the pass's executor (p->exec, the
 * execution seam), local or a Job, which no step names.
 *
 *   step        decides when                              verdict
 *   suspend     spec.suspend (and not deleting)           none: status stays as it was
 *   spec        the spec cannot be acted on               Stalled SpecInvalid
 *   finalize    the Stack is being deleted                destroy, then release the finalizer
 *               (job mode: the destroy is a Job;          Reconciling JobRunning, WaitingForJobSlot)
 *               suspended: released without destroy      (Warning DestroySkipped)
 *               the spec does not parse but asks for      Stalled SpecInvalid (the finalizer stays)
 *               destroyOnFinalize
 *               a destroy succeeded already (status       released, whatever the source (the
 *               lastUpdate destroy/succeeded, or a        succeeded destroy is recorded in
 *               finished destroy Job of the Stack)        status before the release)
 *               no program (source gone and job mode      Stalled DestroyFailed (no timer: the
 *               or no workspace), something deployed      source's watch wakes it); else
 *                                                         Reconciling DestroyFailed
 *               ... but a Job of the Stack still runs     Reconciling JobRunning (its outcome
 *                                                         decides, the Job's watch wakes it)
 *               the destroy failed                        Reconciling DestroyFailed (backoff)
 *   finalizer   -                                         (adds/removes the finalizer)
 *   prereqs     a prerequisite is not Ready (recently)    Reconciling PrerequisiteNotReady;
 *               or the prerequisites form a cycle         Stalled PrerequisiteCycle
 *   source      no source object / no artifact / kind     Reconciling SourceNotFound, ArtifactNotReady;
 *               not served                                Stalled SourceKindNotServed
 *               programRef.name: no Program / it cannot   Reconciling ProgramMissing; Stalled
 *               be rendered or is too large               ProgramInvalid (stack_program.c)
 *               (verify) the revision's signature does    Reconciling SignatureNotFound,
 *               not verify, or a Flux OCIRepository has   VerificationUnavailable, ReferenceNotFound,
 *               not verified it (stack_verify.c; also     VerificationError (Flux, not yet verified);
 *               SourceVerified; nothing is fetched)       Stalled VerificationError, PublicKeysInvalid
 *   inputs      a referenced ConfigMap/Secret/key missing Reconciling ReferenceNotFound
 *   awaiting    approval Manual: the plan in status for   Reconciling AwaitingApproval,
 *               these inputs is not approved              PlanNoLongerApplies (no CLI runs)
 *   drift       driftDetection: the check is due (runs    Stalled Drifted (remediate false);
 *               refresh --preview-only); drift found      with remediate the update is forced
 *   decide      nothing new since the last update         Ready Succeeded (requeue for resync,
 *                                                         drift check)
 *               the same inputs failed max times          Stalled UpdateFailed, PolicyViolation
 *               backoff after a failure not over          Reconciling RetryingAfterFailure
 *   fresh       the cache was behind the server          (the pass runs again on the server's object)
 *   artifact    download failed / archive refused         Reconciling ArtifactFailed; Stalled ArtifactRefused
 *   workspace   dir or Pulumi.yaml missing                Stalled ProgramNotFound
 *   approval    approval Manual: preview --save-plan;     Reconciling AwaitingApproval (the update
 *               the plan is not approved                  runs with --plan once it is)
 *   update      always (runs the CLI)                     Ready Succeeded; Reconciling UpdateConflict,
 *                                                         RetryingAfterFailure, PlanNoLongerApplies
 *                                                         (a fresh preview); Stalled UpdateFailed,
 *                                                         PulumiUnavailable, PolicyViolation
 *    (job mode) the Job for these inputs was just created,  Reconciling JobRunning (the Job informer
 *               is running, or another Job of the Stack   queues the Stack when the Job changes);
 *               runs; all --max-concurrent-jobs slots     Reconciling WaitingForJobSlot;
 *               are taken; no --job-image                 Stalled SpecInvalid;
 *               the Job finished, or its pod did not      the verdicts of the local update, from
 *               start within --job-start-timeout          the termination message (stack_job.c)
 *   outputs     the update succeeded                      (writes <name>-outputs; in job mode the
 *                                                         pod wrote it)
 *
 * In job mode the artifact and workspace steps do nothing: the Job's pod
 * fetches, verifies and unpacks the artifact itself.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/fs.h"
#include "base/log.h"
#include "base/url.h"
#include "base/str.h"
#include "stack/stack_machine.h"

#define BACKOFF_FIRST_MS 10000L

/* ------------------------------------------------------------ helpers */

static int spec_bool(const cJSON *obj, const char *key)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(obj, "spec"), key));
}

/* Backoff after n consecutive failures: 10 s x 3^(n-1), capped. */
static long failure_backoff_ms(int n, long cap_ms)
{
	long ms = BACKOFF_FIRST_MS;

	for (int i = 1; i < n && ms < cap_ms; i++)
		ms = ms > cap_ms / 3 ? cap_ms : ms * 3;
	return ms < cap_ms ? ms : cap_ms;
}

/* Up to 5% more, as Flux spreads intervals, so Stacks created together do
 * not resync in the same second. */
static long jittered(long ms)
{
	return ms + (long)((double)ms * 0.05 * ((double)rand() / RAND_MAX));
}

static const char *str_or(const char *s, const char *dflt)
{
	return s ? s : dflt;
}

/* The pass cannot be decided now (an API write conflicted...): the worker
 * retries it with backoff and nothing more is written. */
static int retry_later(struct stack_pass *p, const struct err *e)
{
	p->retry = 1;
	p->err = *e;
	return 1;
}

/* ------------------------------------------------------------ steps */

static int step_suspend(struct stack_pass *p)
{
	log_debug("stack suspended; nothing to do", "namespace", p->ns, "name", p->name, NULL);
	p->suspended = 1;
	return 1;
}

static int ready_message_has(const struct stack_pass *p, const char *text)
{
	const char *m = kube_obj_str(kube_condition(p->obj, "Ready"), "message");

	return m && strstr(m, text) != NULL;
}

static int step_spec(struct stack_pass *p)
{
	char safe[URL_LOG_MAX];
	struct err e;

	if (stack_spec_parse(p->obj, &p->sc->o, &p->spec, &e) < 0) {
		stack_verdict(p, STACK_STALLED, "SpecInvalid", 0, "%s", e.msg);
		p->v.event = 1;
		if (!p->deleting)
			return 1;
		/* A Stack whose spec cannot be read can still be deleted. */
		p->spec_ok = 0;
		return 0;
	}
	p->spec_ok = 1;
	p->exec = stack_exec_for(&p->spec);
	/* The note reaches the Ready message, an Event and notifications: the
	 * URL without its userinfo and query (credentials), url_for_log. */
	if (p->spec.cloud_shadowed)
		snprintf(p->note, sizeof(p->note), "spec.cloud \"%s\" was ignored: spec.backend is set too",
		    url_for_log(p->spec.cloud_shadowed, safe, sizeof(safe)));
	else if (p->spec.cloud_ignored)
		snprintf(p->note, sizeof(p->note), "spec.cloud \"%s\" is not a backend URL and was ignored; "
		    "set spec.backend (and spec.secretsProvider for a secrets manager)",
		    url_for_log(p->spec.cloud_ignored, safe, sizeof(safe)));
	/* Once: until the note is in the Ready message that status carries. */
	if (p->note[0] && !ready_message_has(p, p->note))
		stack_event(p, "Warning", "BackendIgnored", "%s", p->note);
	return 0;
}

/* The workspace left by the last update, when the source is gone. */
static int last_workspace(struct stack_pass *p)
{
	char root[PATH_MAX];

	stack_workspace_paths(p->sc, p->ns, p->name, root, sizeof(root));
	snprintf(p->scratch, sizeof(p->scratch), "%s/scratch", root);
	snprintf(p->workdir, sizeof(p->workdir), "%s/tree%s%s", root, p->spec.dir ? "/" : "",
	    p->spec.dir ? p->spec.dir : "");
	return fs_is_dir(p->workdir);
}

/* Deleting while an operation of the Stack runs (a Job): released once it
 * has ended, as deleting now would kill its update.  1 decided. */
static int hold_while_running(struct stack_pass *p)
{
	char what[640];

	if (!stack_exec_running(p, what, sizeof(what)))
		return 0;
	stack_verdict(p, STACK_WAITING, "JobRunning", p->sc->o.requeue_dependency_ms, "the Stack is being "
	    "deleted: it is released once %s has finished (deleting it now would kill its update)", what);
	return 1;
}

static int release(struct stack_pass *p)
{
	struct err e;

	if (stack_finalizer_set(p, 0, &e) < 0 && e.code != ERR_NOTFOUND)
		return retry_later(p, &e);
	stack_workspace_remove(p->sc, p->ns, p->name);
	p->gone = 1;
	return 1;
}

/* The last operation was a destroy that succeeded: nothing is deployed.
 * Only a deletion runs destroy, and no update runs after it. */
static int destroyed(const struct stack_pass *p)
{
	return str_eq(stack_status_str(p, "lastUpdate.type"), "destroy") &&
	    str_eq(stack_status_str(p, "lastUpdate.state"), "succeeded");
}

/* Did an `up` (or a destroy that failed) ever run, so resources may exist?
 * Not only a success: a first update that failed half-way created some. */
static int ever_deployed(const struct stack_pass *p)
{
	const char *type = stack_status_str(p, "lastUpdate.type");
	const cJSON *h;

	if (destroyed(p))
		return 0;
	if (stack_status_str(p, "lastAppliedRevision") || str_eq(type, "up") || str_eq(type, "destroy"))
		return 1;
	cJSON_ArrayForEach(h, cJSON_GetObjectItemCaseSensitive(p->status, "history"))
		if (str_eq(kube_obj_str(h, "type"), "up"))
			return 1;
	return 0;
}

/* Deleting a suspended Stack: nothing runs, as Flux skips the garbage
 * collection of a suspended object; its resources stay where they are. */
static int release_suspended(struct stack_pass *p)
{
	log_info("the Stack is suspended: released without destroy; its resources stay", "namespace", p->ns,
	    "name", p->name, NULL);
	stack_event(p, "Warning", "DestroySkipped", "the Stack was deleted while suspended: pulumi destroy did "
	    "not run (destroyOnFinalize) and the resources of stack %s were left in place",
	    p->spec_ok ? p->spec.stack : str_or(kube_obj_str(p->obj, "spec.stack"), "?"));
	return release(p);
}

/* The spec no longer parses, so what destroy would need (backend,
 * credentials, the program) cannot be trusted; but the spec as written still
 * asks for destroyOnFinalize: the finalizer stays, and status says the ways
 * out.  step_spec set the SpecInvalid verdict (and its event). */
static int hold_unparsable(struct stack_pass *p)
{
	char why[sizeof(p->v.message)];

	snprintf(why, sizeof(why), "%s", p->v.message);
	stack_verdict(p, STACK_STALLED, "SpecInvalid", 0, "cannot destroy while the spec is invalid: %s; fix "
	    "the spec to let destroyOnFinalize run, or remove the finalizer " STACK_FINALIZER " by hand to let "
	    "the Stack go and leave its resources in place", why);
	p->v.event = 1;
	return 1;
}

/* The destroy succeeded (p->out): recorded in status first, so a pass
 * after a controller killed before the release below finds it (destroyed)
 * and lets the Stack go without the program, which may be gone by then. */
static int release_destroyed(struct stack_pass *p)
{
	struct err e;

	stack_event(p, "Normal", "DestroySucceeded", "destroyed stack %s", p->spec.stack);
	stack_verdict(p, STACK_WAITING, "Progressing", 0, "destroyed stack %s; the finalizer is being "
	    "released", p->spec.stack);
	if (stack_status_write(p, &e) < 0)   /* released all the same: the record is a backstop */
		log_warn("cannot record the destroy in status", "namespace", p->ns, "name", p->name, "error",
		    e.msg, NULL);
	return release(p);
}

/* A destroy that succeeded is looked for before the source is: a source
 * pruned with the Stack, or gone while the destroy ran (its Job fetched it
 * already), must not hold a Stack whose resources are destroyed. */
static int destroy_done(struct stack_pass *p)
{
	struct err e;
	int rc;

	if (destroyed(p))
		return release(p);
	if ((rc = stack_exec_destroyed(p, &e)) < 0)
		return retry_later(p, &e);
	return rc ? release_destroyed(p) : 0;
}

static int step_finalize(struct stack_pass *p)
{
	int have_program, source_gone;
	char gone[sizeof(p->v.message)], job[640];

	if (!stack_has_finalizer(p->obj)) {
		p->gone = 1;
		return 1;
	}
	if (spec_bool(p->obj, "suspend"))
		return hold_while_running(p) || release_suspended(p);
	if (!p->spec_ok && (spec_bool(p->obj, "destroyOnFinalize") || spec_bool(p->obj, "destroyOnDelete")) &&
	    !spec_bool(p->obj, "preview"))
		return hold_unparsable(p);
	if (!p->spec_ok || !p->spec.destroy_on_finalize || p->spec.preview)
		return hold_while_running(p) || release(p);
	if (destroy_done(p))
		return 1;
	/* Destroy runs from the current artifact if it can be had, else from
	 * what the last update left in the workspace. */
	memset(&p->v, 0, sizeof(p->v));
	if (!p->exec->fetches)   /* the Job's pod fetches it */
		have_program = stack_source_resolve(p) == 0;
	else
		have_program = stack_source_resolve(p) == 0 && stack_source_fetch(p) == 0 &&
		    stack_workspace_prepare(p) == 0;
	source_gone = !have_program && (str_eq(p->v.reason, "SourceNotFound") || str_eq(p->v.reason, "ProgramMissing"));
	snprintf(gone, sizeof(gone), "%s", p->v.message);
	memset(&p->v, 0, sizeof(p->v));
	if (!have_program && (!p->exec->fetches || !last_workspace(p))) {
		if (!ever_deployed(p))
			return release(p);   /* nothing was ever deployed */
		if (source_gone && stack_exec_running(p, job, sizeof(job))) {
			/* its pod fetched the program already; the Job watch wakes the Stack */
			stack_verdict(p, STACK_WAITING, "JobRunning", p->sc->o.requeue_dependency_ms, "the Stack "
			    "is being deleted and its source is gone (%s); %s still runs and its outcome "
			    "decides", gone, job);
			return 1;
		}
		if (source_gone) {   /* no timer: the source's watch wakes it when it is back */
			stack_verdict(p, STACK_STALLED, "DestroyFailed", 0, "cannot destroy: %s, and no copy of "
			    "the program is left to destroy from; the finalizer stays. Restore the source (the "
			    "destroy runs when it is back), or remove destroyOnFinalize to let the Stack go and "
			    "keep its resources", gone);
			p->v.event = 1;
			return 1;
		}
		stack_verdict(p, STACK_WAITING, "DestroyFailed", p->sc->o.requeue_dependency_ms,
		    "cannot destroy: the program is not available (source and workspace are gone)");
		p->v.event = 1;
		return 1;
	}
	stack_inputs_resolve_lenient(p);
	p->why = "the Stack is being deleted";
	if (p->exec->run(p, STACK_OP_DESTROY) != STACK_EXEC_DONE)   /* it runs, waits for a slot, or cannot start */
		return 1;
	if (p->out.ok)
		return release_destroyed(p);
	p->failures = (int)stack_status_int(p, "lastUpdate.failures", 0) + 1;
	stack_verdict(p, STACK_WAITING, "DestroyFailed", failure_backoff_ms(p->failures, p->spec.retry_max_ms),
	    "destroy failed (%d time%s), retrying; the finalizer stays until it succeeds: %s",
	    p->failures, p->failures == 1 ? "" : "s", p->out.message);
	p->v.event = 1;
	return 1;
}

static int step_finalizer(struct stack_pass *p)
{
	int want = p->spec.destroy_on_finalize && !p->spec.preview, have = stack_has_finalizer(p->obj);
	struct err e;

	if (want == have)
		return 0;
	if (stack_finalizer_set(p, want, &e) < 0)
		return retry_later(p, &e);
	return 0;
}

static int step_prereqs(struct stack_pass *p)
{
	return stack_prereq_gate(p);
}

static int step_source(struct stack_pass *p)
{
	int rc = stack_source_resolve(p);

	if (rc == 0)   /* from here on, every line of the pass names the revision */
		log_context_set("revision", p->art.revision);
	return rc;
}

static int step_inputs(struct stack_pass *p)
{
	return stack_inputs_resolve(p);
}

static long earliest(long a, long b)
{
	return a > 0 && (b <= 0 || a < b) ? a : b;
}

/* When a Ready Stack needs a look without being told: its resync, the tag
 * poll of an ociSource that does not pin a digest, the drift check.  0:
 * never. */
static long next_look_ms(const struct stack_pass *p, int64_t due_us, int64_t now_us)
{
	long resync = p->spec.continue_resync ? (long)((due_us - now_us) / 1000) + 1 : 0;
	long poll = p->spec.source == STACK_SRC_OCI && p->spec.oci_digest == NULL ? p->spec.oci_interval_ms : 0;
	long drift = stack_drift_next_ms(p, now_us);
	long next = earliest(resync, poll);

	/* Drift checks are not jittered up: the interval is a promise. */
	if (drift > 0 && (next <= 0 || drift <= next))
		return drift;
	return next > 0 ? jittered(next) : 0;
}

/* Is an update due?  Sets p->why when it is. */
static int step_decide(struct stack_pass *p)
{
	const char *applied = stack_status_str(p, "fingerprint");
	const char *attempted = stack_status_str(p, "lastAttemptedFingerprint");
	const char *state = stack_status_str(p, "lastUpdate.state");
	const char *type = stack_status_str(p, "lastUpdate.type");
	int failures = (int)stack_status_int(p, "lastUpdate.failures", 0);
	int requested = stack_pass_requested(p);
	/* A policy violation is not retried: the same inputs violate again. */
	const char *failed_reason = stack_status_str(p, "policyViolation") ? "PolicyViolation" : "UpdateFailed";
	int64_t last_us = stack_parse_time_us(stack_status_str(p, "lastUpdate.endTime"));
	int64_t now_us = kube_now_us();

	stack_fingerprint(p, p->fingerprint);
	if (requested) {
		p->why = "a reconcile was requested";
		return 0;
	}
	if (str_eq(applied, p->fingerprint) && str_eq(state, "succeeded") && !str_eq(type, "destroy")) {
		int64_t due_us = last_us + (int64_t)p->spec.resync_ms * 1000;
		if (p->spec.continue_resync && now_us >= due_us) {
			p->why = "the resync interval elapsed";
			return 0;
		}
		if (p->safety.remediate) {
			p->why = "the drift check found drift (remediate: true)";
			return 0;
		}
		stack_verdict(p, STACK_READY, "Succeeded", next_look_ms(p, due_us, now_us), "%s revision %s",
		    p->spec.preview ? "previewed" : "applied", p->art.revision);
		atomic_fetch_add(&p->sc->no_change, 1);
		return 1;
	}
	if (str_eq(attempted, p->fingerprint) && str_eq(state, "failed") && failures > 0) {
		long wait = failure_backoff_ms(failures, p->spec.retry_max_ms);
		int64_t left_ms = (last_us + (int64_t)wait * 1000 - now_us) / 1000;
		const char *msg = str_or(stack_status_str(p, "lastUpdate.message"), "");
		if (failures >= p->spec.max_failures) {
			stack_verdict(p, STACK_STALLED, failed_reason, 0, "the update failed %d time%s at revision "
			    "%s; not retrying until the spec, the source, a referenced object or a reconcile "
			    "request changes: %s", failures, failures == 1 ? "" : "s", p->art.revision, msg);
			return 1;
		}
		if (left_ms > 0) {
			stack_verdict(p, STACK_WAITING, "RetryingAfterFailure", (long)left_ms + 1,
			    "%d update failure%s; retrying in %llds: %s", failures, failures == 1 ? "" : "s",
			    (long long)(left_ms + 999) / 1000, msg);
			p->v.ready_reason = "UpdateFailed";
			return 1;
		}
		p->why = "retrying after a failure";
		p->failures = failures;
		return 0;
	}
	p->why = applied == NULL ? "the first update" : "the revision, the spec or a referenced object changed";
	return 0;
}

/* An update is due: make sure it is decided on the server's latest object,
 * not on a cache that has not seen this controller's last write yet. */
static int step_fresh(struct stack_pass *p)
{
	return stack_ctl_refresh(p);
}

static int step_artifact(struct stack_pass *p)
{
	return p->exec->fetches ? stack_source_fetch(p) : 0;
}

static int step_workspace(struct stack_pass *p)
{
	return p->exec->fetches ? stack_workspace_prepare(p) : 0;
}

static int step_awaiting(struct stack_pass *p)
{
	return stack_approval_gate(p);
}

static int step_drift(struct stack_pass *p)
{
	return stack_drift_gate(p);
}

/* The verdict after an update or preview ran. */
static void judge_update(struct stack_pass *p)
{
	const struct stack_outcome *o = &p->out;
	const char *attempted = stack_status_str(p, "lastAttemptedFingerprint");
	int before = str_eq(attempted, p->fingerprint) ? (int)stack_status_int(p, "lastUpdate.failures", 0) : 0;

	if (o->ok) {
		int64_t now_us = kube_now_us();
		p->failures = 0;
		stack_verdict(p, STACK_READY, "Succeeded", next_look_ms(p, now_us + (int64_t)p->spec.resync_ms * 1000,
		    now_us), "%s revision %s", p->spec.preview ? "previewed" : "applied", p->art.revision);
		atomic_fetch_add(&p->sc->updates_ok, 1);
		return;
	}
	atomic_fetch_add(&p->sc->updates_failed, 1);
	p->failures = before;
	switch (o->status) {
	case PL_CONFLICT:
		if (o->lock.present)
			stack_verdict(p, STACK_WAITING, "UpdateConflict", p->sc->o.requeue_dependency_ms,
			    "the stack is locked by %s (pid %ld) since %s; retrying (a lock is cancelled only when its "
			    "holder is this controller's earlier run or pod; otherwise, if its holder is gone, run "
			    "`pulumi cancel`)", o->lock.owner, o->lock.pid, o->lock.created);
		else
			stack_verdict(p, STACK_WAITING, "UpdateConflict", p->sc->o.requeue_dependency_ms,
			    "another update is in progress; retrying: %s", o->message);
		p->v.event = 1;
		return;
	case PL_CANCELED:
		stack_verdict(p, STACK_WAITING, "Progressing", 1000, "the update was interrupted (the controller "
		    "is stopping or lost its lease); it runs again");
		return;
	case PL_CLI_MISSING:
	case PL_CLI_TOO_OLD:
		stack_verdict(p, STACK_STALLED, "PulumiUnavailable", 0, "%s", o->message);
		p->v.event = 1;
		return;
	case PL_POLICY_VIOLATION:
		/* The same inputs violate again: not retried until they change.
		 * The CLI stops before any resource is touched. */
		p->failures = p->spec.max_failures > before + 1 ? p->spec.max_failures : before + 1;
		stack_verdict(p, STACK_STALLED, "PolicyViolation", 0, "a mandatory policy refused the %s at "
		    "revision %s; nothing was changed: %s", o->type, p->art.revision, o->message);
		p->v.event = 1;
		return;
	default:
		break;
	}
	p->failures = before + 1;
	if (p->failures >= p->spec.max_failures) {
		stack_verdict(p, STACK_STALLED, "UpdateFailed", 0, "the update failed %d times at revision %s; "
		    "not retrying until the spec, the source, a referenced object or a reconcile request "
		    "changes: %s", p->failures, p->art.revision, o->message);
		stack_event(p, "Warning", "UpdateFailed", "%s", o->message);
		p->v.event = 1;
		p->v.event_reason = "Stalled";
		return;
	} else {
		long wait = failure_backoff_ms(p->failures, p->spec.retry_max_ms);
		stack_verdict(p, STACK_WAITING, "RetryingAfterFailure", wait, "%d update failure%s; retrying in "
		    "%lds: %s", p->failures, p->failures == 1 ? "" : "s", wait / 1000, o->message);
		p->v.ready_reason = "UpdateFailed";
	}
	p->v.event = 1;
	p->v.event_reason = "UpdateFailed";
}


/* A preview that failed is judged as an update that failed. */
static int step_approval(struct stack_pass *p)
{
	int rc = stack_approval_plan(p);

	if (rc < 0) {
		judge_update(p);
		return 1;
	}
	return rc;
}

static int step_update(struct stack_pass *p)
{
	/* Decided unless the outcome is in p->out now (a Job runs on after the pass). */
	if (p->exec->run(p, STACK_OP_UPDATE) != STACK_EXEC_DONE)
		return 1;
	judge_update(p);
	stack_approval_after_update(p);
	stack_drift_after_update(p);
	log_info(p->out.ok ? "update succeeded" : "update failed", "namespace", p->ns, "name", p->name,
	    "revision", p->art.revision, "reconcileID", p->id, "result", pl_status_name(p->out.status),
	    "message", p->out.message, NULL);
	if (p->out.ok)
		stack_event(p, "Normal", "UpdateSucceeded", "%s revision %s", p->spec.preview ? "previewed" :
		    "applied", p->art.revision);
	return p->out.ok ? 0 : 1;
}

static int step_outputs(struct stack_pass *p)
{
	struct err e;

	if (p->spec.preview || p->out.outputs == NULL || !p->exec->writes_outputs)
		return 1;
	if (stack_outputs_write(p, &e) < 0) {
		log_warn("cannot write the outputs Secret", "namespace", p->ns, "name", p->name, "error", e.msg,
		    NULL);
		stack_event(p, "Warning", "OutputsFailed", "cannot write the outputs Secret: %s", e.msg);
		snprintf(p->note + strlen(p->note), sizeof(p->note) - strlen(p->note),
		    "%sthe outputs Secret was not written: %s", p->note[0] ? "; " : "", e.msg);
	}
	return 1;
}

typedef int (*stack_step_fn)(struct stack_pass *p);

/* Which phases a step runs in (stack_model.h, enum stack_phase). */
#define IN(ph) STACK_PHASE_BIT(STACK_PHASE_##ph)
#define LIVE (IN(UPDATING) | IN(AWAITING) | IN(DRIFTED) | IN(BACKING_OFF) | IN(IDLE))
/* A row: step_<name>, logged as "<name>" (the name a log line gives is
 * the function's, so the two cannot drift apart). */
#define STEP(name, in) { #name, step_##name, in }

static const struct {
	const char *name;
	stack_step_fn fn;
	unsigned phases;
} steps[] = {
	STEP(suspend, IN(SUSPENDED)),
	STEP(spec, IN(FINALIZING) | LIVE),
	STEP(finalize, IN(FINALIZING)),
	STEP(finalizer, LIVE),
	STEP(prereqs, LIVE),
	STEP(source, LIVE),
	STEP(inputs, LIVE),
	STEP(awaiting, LIVE),
	STEP(drift, LIVE),
	STEP(decide, LIVE),
	STEP(fresh, LIVE),
	STEP(artifact, LIVE),
	STEP(workspace, LIVE),
	STEP(approval, LIVE),
	STEP(update, LIVE),
	STEP(outputs, LIVE),
};

/* ------------------------------------------------------------ the end */

static int is_warning(const char *reason)
{
	return strcmp(reason, "Succeeded") != 0 && strcmp(reason, "Progressing") != 0;
}

/* Writes the verdict as status (unless nothing changed), emits its Event
 * when the verdict is new, and returns the requeue delay. */
static int finish(struct stack_pass *p, long *requeue_ms, struct err *e)
{
	const char *old_reason = NULL;
	const cJSON *c;

	*requeue_ms = 0;
	if (p->retry) {
		*e = p->err;
		return -1;
	}
	if (p->suspended || p->gone || p->stale)
		return 0;
	if (!p->v.set) {
		err_set(e, ERR_INVALID, "internal: the pass ended without a verdict");
		return -1;
	}
	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(p->status, "conditions"))
		if (str_eq(kube_obj_str(c, "type"), "Ready"))
			old_reason = kube_obj_str(c, "reason");
	if (p->v.event && (p->out.ran || !str_eq(old_reason, p->v.reason)))
		stack_event(p, is_warning(p->v.reason) ? "Warning" : "Normal",
		    p->v.event_reason ? p->v.event_reason : p->v.reason, "%s", p->v.message);
	if (stack_status_write(p, e) < 0)
		return -1;
	stack_exec_recorded(p);
	*requeue_ms = p->v.requeue_ms;
	return 0;
}

int stack_reconcile_pass(struct stack_pass *p, struct err *e)
{
	long requeue_ms = 0;
	size_t i;

	/* Once, from the Stack as found: no write of this pass has happened. */
	p->phase = stack_phase_of(p->obj);
	p->exec = &stack_exec_local;   /* until the spec step reads the spec's */
	for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
		if ((steps[i].phases & STACK_PHASE_BIT(p->phase)) && steps[i].fn(p))
			break;
	log_debug("reconcile pass ended", "namespace", p->ns, "name", p->name, "reconcileID", p->id,
	    "phase", stack_phase_name(p->phase),
	    "step", i < sizeof(steps) / sizeof(steps[0]) ? steps[i].name : "end",
	    "reason", p->v.set ? p->v.reason : "", NULL);
	if (finish(p, &requeue_ms, e) < 0) {
		stack_safety_free(&p->safety);
		return -1;
	}
	stack_safety_free(&p->safety);
	return (int)(requeue_ms > 0x7fffffff ? 0x7fffffff : requeue_ms);
}
